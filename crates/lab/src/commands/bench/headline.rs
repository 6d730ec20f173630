//! `onesync-lab bench` with no workload: the headline comparison a newcomer runs first.
//! One-row INSERT transactions through the real SQLite on stock SQLite's journal modes and
//! on onesync, each mode on a fresh database in a fresh temporary directory, in alternating
//! rounds (every round runs every mode once, each round starting one mode later): per mode
//! the median txn/s, its ratio to the stock mode with the same promise (FULL modes against
//! wal, NORMAL modes against wal-normal), bytes written and flushes per commit and the p99.9
//! commit latency. `report --results` runs the same measurement and stamps it.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use serde::{Deserialize, Serialize};

use super::writers::round_order;
use super::{BenchArgs, ModeResult, Place};
use crate::meters::spread::{ratio_interval, RatioInterval};
use crate::schemes::{Durability, Mode};
use crate::workloads::Workload;

/// The modes compared, grouped by what a returned COMMIT promises: durable (FULL), then
/// atomic and durable shortly after (NORMAL). Each group opens with its baseline's peers.
pub const MODES: [Mode; 5] = [
    Mode::Delete,
    Mode::Wal,
    Mode::Onesync,
    Mode::WalNormal,
    Mode::OnesyncNormal,
];

/// Rounds by default: five give a median and a usable interval, and the run stays about a
/// minute where a flush costs a millisecond (delete's three flushes a commit dominate).
pub const DEFAULT_ROUNDS: u64 = 5;
/// Transactions per mode per round by default.
pub const DEFAULT_TXNS: u64 = 2000;

/// What a headline run measured: every mode's summary over the rounds.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct Headline {
    /// What each transaction does.
    pub workload: String,
    /// Transactions per mode in each round.
    pub txns: u64,
    pub rounds: u64,
    /// The directory the fresh per-mode directories were made in.
    pub dir: PathBuf,
    /// One summary per mode, in [`MODES`] order.
    pub results: Vec<ModeSummary>,
}

/// One mode over the rounds: each figure the median of the rounds' figures.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct ModeSummary {
    pub mode: String,
    /// The mode its ratio is taken against (the stock mode with the same promise).
    pub baseline: String,
    /// Median txn/s, and with two rounds or more the 95% interval around the rounds'
    /// geometric mean (Student's t on their logarithms).
    pub tps: f64,
    pub tps_interval: Option<RatioInterval>,
    /// The median of the rounds' paired ratios (txn/s over the baseline's in the same round),
    /// and their 95% interval.
    pub ratio: f64,
    pub ratio_interval: Option<RatioInterval>,
    pub bytes_per_commit: f64,
    pub flushes_per_commit: f64,
    pub p999_us: f64,
    /// Every round's txn/s and ratio, in round order.
    pub rounds_tps: Vec<f64>,
    pub rounds_ratio: Vec<f64>,
}

/// The stock mode `mode` is compared with: wal-normal for the NORMAL class, else wal.
pub fn baseline(mode: Mode) -> Mode {
    mode.scheme().durability().reference().unwrap_or(Mode::Wal)
}

/// `bench`'s settings for one mode of one round.
fn bench_args(mode: Mode, txns: u64, dir: Option<&Path>) -> BenchArgs {
    BenchArgs {
        workload: Workload::Insert,
        mode: vec![mode],
        txns,
        place: Place {
            dir: dir.map(Path::to_owned),
            fs: None,
            fs_size_mib: 1024,
            emulate: Default::default(),
        },
        device: None,
        seed: 1,
        threads: 1,
        shared_table: false,
        pages: 5,
        searches_per_write: 1.0,
        json: None,
    }
}

/// Runs `rounds` rounds of `txns` transactions per mode in fresh directories under `dir`
/// (default: the system's temporary directory).
pub fn measure(rounds: u64, txns: u64, dir: Option<&Path>) -> Result<Headline> {
    let mut runs: Vec<Vec<ModeResult>> = MODES.iter().map(|_| Vec::new()).collect();
    for round in 1..=rounds {
        for i in round_order(MODES.len(), round) {
            let result = super::measure(&bench_args(MODES[i], txns, dir))
                .with_context(|| format!("round {round} of {rounds}"))?
                .pop()
                .ok_or_else(|| anyhow!("mode {} gave no result", MODES[i].name()))?;
            runs[i].push(result);
        }
    }
    let tps_of = |mode: Mode| -> Vec<f64> {
        let i = MODES.iter().position(|&m| m == mode).unwrap_or(0);
        runs[i].iter().map(|r| r.tps).collect()
    };
    let results = MODES
        .iter()
        .zip(&runs)
        .map(|(&mode, runs)| {
            let base = baseline(mode);
            let rounds_tps: Vec<f64> = runs.iter().map(|r| r.tps).collect();
            let rounds_ratio: Vec<f64> = rounds_tps
                .iter()
                .zip(tps_of(base))
                .map(|(tps, base_tps)| crate::meters::per(*tps, base_tps))
                .collect();
            ModeSummary {
                mode: mode.name().to_owned(),
                baseline: base.name().to_owned(),
                tps: median(&rounds_tps),
                tps_interval: ratio_interval(&rounds_tps),
                ratio: median(&rounds_ratio),
                ratio_interval: ratio_interval(&rounds_ratio),
                bytes_per_commit: median(&runs.iter().map(|r| r.per_txn.bytes_written).collect::<Vec<_>>()),
                flushes_per_commit: median(&runs.iter().map(|r| r.per_txn.fsyncs).collect::<Vec<_>>()),
                p999_us: median(&runs.iter().map(|r| r.latency_us.p999).collect::<Vec<_>>()),
                rounds_tps,
                rounds_ratio,
            }
        })
        .collect();
    Ok(Headline {
        workload: "insert: one 100-byte row per transaction".to_owned(),
        txns,
        rounds,
        dir: dir.map_or_else(std::env::temp_dir, Path::to_owned),
        results,
    })
}

/// The median (the mean of the middle two for an even count); 0 for none.
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// "1.23-1.45", or "–" without an interval (a single round).
pub fn interval_text(interval: Option<RatioInterval>, digits: usize) -> String {
    interval.map_or("–".to_owned(), |i| {
        format!("{:.digits$}-{:.digits$}", i.low, i.high)
    })
}

/// A mode's ratio cell: "1.23", or "1 (base)" for a baseline.
pub fn ratio_text(r: &ModeSummary) -> String {
    if r.mode == r.baseline {
        "1 (base)".to_owned()
    } else {
        format!("{:.2}", r.ratio)
    }
}

/// The class title of the mode called `name`.
pub fn class_title(name: &str) -> &'static str {
    match Mode::by_name(name).map(|m| m.scheme().durability()) {
        Some(Durability::AfterCheckpoint) => "synchronous=NORMAL: atomic, durable shortly after COMMIT",
        _ => "synchronous=FULL: durable when COMMIT returns",
    }
}

/// "FULL" or "NORMAL": the `synchronous` level of the mode called `name`.
pub fn level(name: &str) -> &'static str {
    match Mode::by_name(name).map(|m| m.scheme().durability()) {
        Some(Durability::AfterCheckpoint) => "NORMAL",
        _ => "FULL",
    }
}

/// The lines under every headline table: what the columns and the ratios mean.
pub fn notes(headline: &Headline) -> String {
    let rounds = if headline.rounds > 1 {
        format!(
            "each figure is the median of {} rounds (the modes take turns in each round); \
             95% interval: Student's t on the logarithms of the rounds' figures",
            headline.rounds
        )
    } else {
        "one round: no interval (--rounds 2 or more gives one)".to_owned()
    };
    format!(
        "(ratio: txn/s against wal for the FULL modes, against wal-normal (the same promise) \
         for the NORMAL modes, paired within each round)\n\
         (KiB written and flushes (fsync-family calls) per commit, as the mode's own counters \
         see them; p99.9 commit latency in microseconds)\n({rounds})\n"
    )
}

/// The terminal table of a headline run.
pub fn table(headline: &Headline) -> String {
    let mut out = format!(
        "bench: the headline ({}; {} transactions per mode in each of {} round{}; a fresh \
         directory per mode in {}):\n",
        headline.workload,
        headline.txns,
        headline.rounds,
        if headline.rounds == 1 { "" } else { "s" },
        headline.dir.display()
    );
    let width = Mode::name_width();
    out.push_str(&format!(
        "{:<width$} {:>8} {:>13} {:>8} {:>11} {:>10} {:>14} {:>9}\n",
        "mode", "txn/s", "95% interval", "ratio", "95% inter.", "KiB/commit", "flushes/commit", "p99.9 us"
    ));
    let mut class = "";
    for r in &headline.results {
        let title = class_title(&r.mode);
        if title != class {
            out.push_str(&format!("-- {title}\n"));
            class = title;
        }
        out.push_str(&format!(
            "{:<width$} {:>8.0} {:>13} {:>8} {:>11} {:>10.2} {:>14.3} {:>9.0}\n",
            r.mode,
            r.tps,
            interval_text(r.tps_interval, 0),
            ratio_text(r),
            if r.mode == r.baseline {
                String::new()
            } else {
                interval_text(r.ratio_interval, 2)
            },
            r.bytes_per_commit / 1024.0,
            r.flushes_per_commit,
            r.p999_us
        ));
    }
    out.push_str(&notes(headline));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[5.0, 1.0, 3.0]), 3.0);
        assert_eq!(median(&[]), 0.0);
    }

    #[test]
    fn full_modes_are_compared_with_wal_and_normal_modes_with_wal_normal() {
        assert_eq!(baseline(Mode::Delete), Mode::Wal);
        assert_eq!(baseline(Mode::Onesync), Mode::Wal);
        assert_eq!(baseline(Mode::OnesyncNormal), Mode::WalNormal);
        assert_eq!(baseline(Mode::WalNormal), Mode::WalNormal);
    }
}
