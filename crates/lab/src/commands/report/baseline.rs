//! `onesync-lab report --baseline FILE`: regressions seen before they land. Runs issue 41's
//! headline figures in alternating rounds (every round runs every mode once, each round
//! starting one mode later, so a round's ratio cancels what the machine's drift did to
//! both sides), and prints each figure's median and 95% interval beside a checked-in
//! baseline's median and the issue's target, with a verdict per line. `--write-baseline`
//! records a run as such a baseline (stamped like the results files).
//!
//! A figure is `worse` only when its whole interval lies on the bad side of the baseline's
//! median by more than 5 %, `better` likewise on the good side, else `same`: one noisy round
//! does not flag a regression, a consistent shift does. The exit status is 0 unless
//! `--fail-on-worse` is given and some figure is worse (then 1): a check for a person by
//! default, a gate for CI when asked.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::results::stamp_lines;
use super::stamp::Stamp;
use crate::commands::bench::headline::median;
use crate::commands::bench::{self, BenchArgs, ModeResult, Place};
use crate::commands::store_bench;
use crate::meters::per;
use crate::meters::spread::{ratio_interval, RatioInterval};
use crate::schemes::Mode;
use crate::workloads::Workload;

/// Which way a figure improves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Better {
    Higher,
    Lower,
}

/// One figure the check runs: its key in the baseline file, what it is, and issue 41's target.
struct Figure {
    key: &'static str,
    name: &'static str,
    better: Better,
    target: f64,
}

/// Issue 41's targets, in the order printed.
const FIGURES: [Figure; 6] = [
    Figure {
        key: "insert_full",
        name: "insert FULL onesync/wal",
        better: Better::Higher,
        target: 1.1,
    },
    Figure {
        key: "insert_normal",
        name: "insert NORMAL onesync-normal/wal-normal",
        better: Better::Higher,
        target: 1.2,
    },
    Figure {
        key: "p999_normal",
        name: "p99.9 latency NORMAL onesync-normal/wal-normal",
        better: Better::Lower,
        target: 0.5,
    },
    Figure {
        key: "dbbench_normal",
        name: "dbbench 4 threads NORMAL onesync-normal/wal-normal",
        better: Better::Higher,
        target: 1.2,
    },
    Figure {
        key: "store_single_vs_raw",
        name: "store-bench single/raw fdatasync",
        better: Better::Higher,
        target: 1.0,
    },
    Figure {
        key: "store_recovery_ms",
        name: "store-bench recovery ms",
        better: Better::Lower,
        target: 100.0,
    },
];

/// Settings of one check.
pub struct CheckArgs<'a> {
    pub baseline: Option<&'a Path>,
    pub write_baseline: Option<&'a Path>,
    pub results: Option<&'a Path>,
    pub rounds: u64,
    pub txns: u64,
    pub recovery_pages: u64,
    pub recovery_records: u64,
    pub fail_on_worse: bool,
}

/// One figure over the rounds.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Measured {
    pub key: String,
    pub name: String,
    pub better: Better,
    /// The median of the rounds' figures.
    pub median: f64,
    /// The 95% interval (Student's t on the logarithms of the rounds' figures), with two
    /// rounds or more.
    pub interval: Option<RatioInterval>,
    pub rounds: Vec<f64>,
}

/// A baseline file: a run's figures, stamped.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct Baseline {
    pub stamp: Stamp,
    pub rounds: u64,
    pub txns: u64,
    pub recovery_pages: u64,
    pub recovery_records: u64,
    pub figures: Vec<Measured>,
}

/// What a figure did against the baseline's median.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Better,
    Same,
    Worse,
}

impl Verdict {
    fn text(self) -> &'static str {
        match self {
            Verdict::Better => "better",
            Verdict::Same => "same",
            Verdict::Worse => "worse",
        }
    }
}

/// Within this factor of the baseline's median a figure is `same` whatever its interval: ten
/// rounds narrow an interval to a few percent, and a quiet machine drifts about that much
/// from one run to the next of the same code (run `report --baseline` twice and compare).
const TOLERANCE: f64 = 1.05;

/// `worse` when the interval lies wholly on the bad side of `baseline_median` (beyond
/// [`TOLERANCE`]), `better` when wholly on the good side, else (or without an interval)
/// `same`.
pub fn verdict(better: Better, interval: Option<RatioInterval>, baseline_median: f64) -> Verdict {
    let Some(i) = interval else {
        return Verdict::Same;
    };
    let (above, below) = (
        i.low > baseline_median * TOLERANCE,
        i.high < baseline_median / TOLERANCE,
    );
    match (better, above, below) {
        (Better::Higher, true, _) | (Better::Lower, _, true) => Verdict::Better,
        (Better::Higher, _, true) | (Better::Lower, true, _) => Verdict::Worse,
        _ => Verdict::Same,
    }
}

fn target_met(better: Better, median: f64, target: f64) -> bool {
    match better {
        Better::Higher => median >= target,
        Better::Lower => median <= target,
    }
}

/// `bench`'s settings for one workload and mode of one round, in a fresh temporary directory.
fn bench_args(workload: Workload, mode: Mode, txns: u64, threads: u64) -> BenchArgs {
    BenchArgs {
        workload,
        mode: vec![mode],
        txns,
        place: Place {
            dir: None,
            fs: None,
            fs_size_mib: 1024,
            emulate: Default::default(),
        },
        device: None,
        seed: 1,
        threads,
        shared_table: false,
        pages: 5,
        searches_per_write: 1.0,
        json: None,
    }
}

/// The steps of one round: the SQLite runs (workload, mode, threads) and store-bench.
#[derive(Clone, Copy)]
enum Step {
    Sqlite(Workload, Mode, u64),
    Store,
}

const STEPS: [Step; 7] = [
    Step::Sqlite(Workload::Insert, Mode::Wal, 1),
    Step::Sqlite(Workload::Insert, Mode::Onesync, 1),
    Step::Sqlite(Workload::Insert, Mode::WalNormal, 1),
    Step::Sqlite(Workload::Insert, Mode::OnesyncNormal, 1),
    Step::Sqlite(Workload::Dbbench, Mode::WalNormal, 4),
    Step::Sqlite(Workload::Dbbench, Mode::OnesyncNormal, 4),
    Step::Store,
];

/// Runs `rounds` rounds and returns the figures in [`FIGURES`] order.
pub fn measure(args: &CheckArgs<'_>) -> Result<Vec<Measured>> {
    let mut per_round: Vec<Vec<f64>> = FIGURES.iter().map(|_| Vec::new()).collect();
    for round in 1..=args.rounds {
        let mut sqlite: Vec<Option<ModeResult>> = STEPS.iter().map(|_| None).collect();
        let mut store = None;
        // Each round starts one step later, so no step always runs first or last.
        for k in 0..STEPS.len() {
            let i = (k + round as usize - 1) % STEPS.len();
            match STEPS[i] {
                Step::Sqlite(workload, mode, threads) => {
                    eprintln!(
                        "report --baseline: round {round} of {}: {} on {}",
                        args.rounds,
                        workload.name(),
                        mode.name()
                    );
                    let result = bench::measure(&bench_args(workload, mode, args.txns, threads))
                        .with_context(|| format!("round {round}: {} on {}", workload.name(), mode.name()))?
                        .pop()
                        .ok_or_else(|| anyhow!("{} gave no result", mode.name()))?;
                    sqlite[i] = Some(result);
                }
                Step::Store => {
                    eprintln!("report --baseline: round {round} of {}: store-bench", args.rounds);
                    store = Some(
                        store_bench::measure_round(args.txns, args.recovery_pages, args.recovery_records, 1)
                            .with_context(|| format!("round {round}: store-bench"))?,
                    );
                }
            }
        }
        let got = |i: usize| sqlite[i].as_ref().ok_or_else(|| anyhow!("step {i} did not run"));
        let (wal, onesync, wal_normal, onesync_normal) = (got(0)?, got(1)?, got(2)?, got(3)?);
        let (db_wal_normal, db_onesync_normal) = (got(4)?, got(5)?);
        let store = store.ok_or_else(|| anyhow!("store-bench did not run"))?;
        let figures = [
            per(onesync.tps, wal.tps),
            per(onesync_normal.tps, wal_normal.tps),
            per(onesync_normal.latency_us.p999, wal_normal.latency_us.p999),
            per(db_onesync_normal.tps, db_wal_normal.tps),
            per(store.single_per_sec, store.raw_per_sec),
            store.recovery_ms,
        ];
        for (column, figure) in per_round.iter_mut().zip(figures) {
            column.push(figure);
        }
    }
    Ok(FIGURES
        .iter()
        .zip(per_round)
        .map(|(f, rounds)| Measured {
            key: f.key.to_owned(),
            name: f.name.to_owned(),
            better: f.better,
            median: median(&rounds),
            interval: ratio_interval(&rounds),
            rounds,
        })
        .collect())
}

/// The figure of `key` in a baseline.
fn baseline_figure<'b>(baseline: Option<&'b Baseline>, key: &str) -> Option<&'b Measured> {
    baseline?.figures.iter().find(|m| m.key == key)
}

/// The table: a line per figure with its median, interval, the baseline's median, the
/// target and the verdicts. Returns it and whether any figure is worse.
pub fn table(measured: &[Measured], baseline: Option<&Baseline>) -> (String, bool) {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<50} {:>9} {:>17} {:>9} {:>7}  verdict",
        "figure", "median", "95% interval", "baseline", "target"
    );
    let mut any_worse = false;
    for (figure, m) in FIGURES.iter().zip(measured) {
        let digits = if figure.better == Better::Lower && figure.target > 10.0 {
            1
        } else {
            3
        };
        let interval = m.interval.map_or("–".to_owned(), |i| {
            format!("{:.digits$}-{:.digits$}", i.low, i.high)
        });
        let base = baseline_figure(baseline, figure.key);
        let (base_text, against) = match base {
            Some(b) => {
                let v = verdict(figure.better, m.interval, b.median);
                any_worse |= v == Verdict::Worse;
                (format!("{:.digits$}", b.median), v.text())
            }
            None => ("–".to_owned(), "no baseline"),
        };
        let sign = if figure.better == Better::Higher {
            ">="
        } else {
            "<="
        };
        let target = if target_met(figure.better, m.median, figure.target) {
            "target met"
        } else {
            "target missed"
        };
        let _ = writeln!(
            out,
            "{:<50} {:>9.digits$} {:>17} {:>9} {:>7}  {against}, {target}",
            figure.name,
            m.median,
            interval,
            base_text,
            format!("{sign}{:.*}", usize::from(figure.target < 10.0), figure.target),
        );
    }
    (out, any_worse)
}

/// The check's notes under the table.
fn notes(args: &CheckArgs<'_>, baseline: Option<&Baseline>) -> String {
    let against = baseline.map_or("no baseline given".to_owned(), |b| {
        format!(
            "baseline of {} ({} rounds of {} transactions, commit {})",
            b.stamp.utc, b.rounds, b.txns, b.stamp.commit
        )
    });
    format!(
        "({} round{} of {} transactions per mode (store-bench: commits), recovery of {} records; \
         medians, 95% intervals by Student's t on the logarithms of the rounds' figures; \
         worse/better: the interval wholly on one side of the baseline's median, by more than 5%; {against})\n",
        args.rounds,
        if args.rounds == 1 { "" } else { "s" },
        args.txns,
        args.recovery_records,
    )
}

fn read_baseline(path: &Path) -> Result<Baseline> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let baseline: Baseline =
        serde_json::from_str(&text).with_context(|| format!("{} is no baseline file", path.display()))?;
    for figure in &FIGURES {
        if baseline_figure(Some(&baseline), figure.key).is_none() {
            bail!("{} has no figure {}", path.display(), figure.key);
        }
    }
    Ok(baseline)
}

/// Runs the check: reads the baseline (before the long run, to fail early), measures,
/// prints the table, and writes what was asked.
pub fn run(args: &CheckArgs<'_>) -> Result<ExitCode> {
    let baseline = args.baseline.map(read_baseline).transpose()?;
    let stamp = Stamp::now(&std::env::temp_dir());
    let measured = measure(args)?;
    let (table, any_worse) = table(&measured, baseline.as_ref());
    let notes = notes(args, baseline.as_ref());
    print!("{table}{notes}");
    if let Some(path) = args.write_baseline {
        let record = Baseline {
            stamp: stamp.clone(),
            rounds: args.rounds,
            txns: args.txns,
            recovery_pages: args.recovery_pages,
            recovery_records: args.recovery_records,
            figures: measured.clone(),
        };
        let text = serde_json::to_string_pretty(&record)? + "\n";
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("onesync-lab report: wrote the baseline {}", path.display());
    }
    if let Some(dir) = args.results {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let path: PathBuf = dir.join(format!("baseline-check-{}.md", stamp.date()));
        let md = format!(
            "# onesync-lab report --baseline\n\n{}\n```text\n{table}```\n\n{notes}",
            stamp_lines(&stamp)
        );
        std::fs::write(&path, md).with_context(|| format!("writing {}", path.display()))?;
        println!("onesync-lab report: wrote {}", path.display());
    }
    Ok(if any_worse && args.fail_on_worse {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn around(low: f64, high: f64) -> Option<RatioInterval> {
        Some(RatioInterval {
            geomean: (low * high).sqrt(),
            low,
            high,
        })
    }

    #[test]
    fn a_verdict_needs_the_whole_interval_on_one_side() {
        assert_eq!(verdict(Better::Higher, around(1.1, 1.3), 1.0), Verdict::Better);
        assert_eq!(verdict(Better::Higher, around(0.7, 0.9), 1.0), Verdict::Worse);
        assert_eq!(verdict(Better::Higher, around(0.9, 1.1), 1.0), Verdict::Same);
        assert_eq!(verdict(Better::Lower, around(102.0, 104.0), 100.0), Verdict::Same);
        assert_eq!(verdict(Better::Lower, around(0.7, 0.9), 1.0), Verdict::Better);
        assert_eq!(
            verdict(Better::Lower, around(110.0, 130.0), 100.0),
            Verdict::Worse
        );
        assert_eq!(verdict(Better::Lower, None, 100.0), Verdict::Same);
    }
}
