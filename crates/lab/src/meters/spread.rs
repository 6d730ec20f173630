//! How far a ratio measured over several rounds can be trusted: the geometric mean of the
//! rounds' paired ratios (each round runs every mode once, so a round's ratio cancels what
//! that round's filesystem and the machine's drift did to both) and a 95% confidence
//! interval for it, from Student's t on the ratios' logarithms. A ratio is multiplicative
//! (1.10 and 0.91 are the same distance from 1), hence the logarithms.

/// The geometric mean of paired ratios and the 95% confidence interval around it.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RatioInterval {
    pub geomean: f64,
    pub low: f64,
    pub high: f64,
}

/// None for fewer than two ratios, or a ratio that is not positive and finite (a round
/// whose baseline committed nothing).
pub fn ratio_interval(ratios: &[f64]) -> Option<RatioInterval> {
    if ratios.len() < 2 || ratios.iter().any(|r| !(r.is_finite() && *r > 0.0)) {
        return None;
    }
    let logs: Vec<f64> = ratios.iter().map(|r| r.ln()).collect();
    let n = logs.len() as f64;
    let mean = logs.iter().sum::<f64>() / n;
    let variance = logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / (n - 1.0);
    let half_width = t_975(logs.len() - 1) * (variance / n).sqrt();
    Some(RatioInterval {
        geomean: mean.exp(),
        low: (mean - half_width).exp(),
        high: (mean + half_width).exp(),
    })
}

/// Student's t at 0.975 (two-sided 95%) for `df` degrees of freedom; between the rows of
/// the table, the row below (fewer degrees of freedom: a wider, safe interval).
fn t_975(df: usize) -> f64 {
    const UP_TO_30: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042,
    ];
    match df {
        0 => f64::INFINITY,
        1..=30 => UP_TO_30[df - 1],
        31..=39 => UP_TO_30[29],
        40..=59 => 2.021,
        60..=119 => 2.000,
        _ => 1.980,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 5e-4
    }

    #[test]
    fn identical_ratios_have_no_spread() {
        let interval = ratio_interval(&[1.25, 1.25, 1.25]).unwrap();
        assert!(close(interval.geomean, 1.25) && close(interval.low, 1.25) && close(interval.high, 1.25));
    }

    #[test]
    fn the_interval_is_students_t_on_the_logarithms() {
        // Logarithms ±0.1: mean 0, s = sqrt(4 * 0.01 / 3) = 0.11547, s/√4 = 0.057735,
        // t(3) = 3.182: exp(±0.18371).
        let up = 0.1f64.exp();
        let down = (-0.1f64).exp();
        let interval = ratio_interval(&[up, down, up, down]).unwrap();
        assert!(close(interval.geomean, 1.0), "{interval:?}");
        assert!(
            close(interval.low, 0.8322) && close(interval.high, 1.2017),
            "{interval:?}"
        );
    }

    #[test]
    fn too_few_or_unusable_ratios_give_none() {
        assert_eq!(ratio_interval(&[1.0]), None);
        assert_eq!(ratio_interval(&[1.0, 0.0]), None);
        assert_eq!(ratio_interval(&[1.0, f64::NAN]), None);
    }

    #[test]
    fn more_rounds_narrow_the_interval() {
        let few = ratio_interval(&[0.9, 1.1, 0.95, 1.05]).unwrap();
        let many = ratio_interval(&[0.9, 1.1, 0.95, 1.05].repeat(5)).unwrap();
        assert!(many.high - many.low < few.high - few.low, "{few:?} {many:?}");
    }
}
