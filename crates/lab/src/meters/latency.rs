//! Commit latencies: percentiles, and a thinned sorted sample for a CDF chart.

use std::time::Duration;

use serde::Serialize;

/// Commit latency percentiles and mean, microseconds.
#[derive(Serialize, Debug, Clone, Copy)]
pub struct Latency {
    pub mean: f64,
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

/// Sorts `latencies` and reads its percentiles.
pub fn percentiles(latencies: &mut [Duration]) -> Latency {
    latencies.sort_unstable();
    let at = |q: f64| -> f64 {
        if latencies.is_empty() {
            return 0.0;
        }
        let i = ((latencies.len() as f64 * q).ceil() as usize).clamp(1, latencies.len()) - 1;
        latencies[i].as_secs_f64() * 1e6
    };
    let mean = if latencies.is_empty() {
        0.0
    } else {
        latencies.iter().map(Duration::as_secs_f64).sum::<f64>() * 1e6 / latencies.len() as f64
    };
    Latency {
        mean,
        p50: at(0.50),
        p99: at(0.99),
        p999: at(0.999),
        max: at(1.0),
    }
}

/// Sorted latencies thinned to at most 500 evenly spaced ranks (the last one kept).
pub fn thinned(sorted: &[Duration]) -> Vec<f64> {
    let step = sorted.len().div_ceil(500).max(1);
    let mut points: Vec<f64> = sorted
        .iter()
        .step_by(step)
        .map(|d| d.as_secs_f64() * 1e6)
        .collect();
    if let Some(last) = sorted.last() {
        points.push(last.as_secs_f64() * 1e6);
    }
    points
}
