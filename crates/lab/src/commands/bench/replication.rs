//! `onesync-lab bench replication [--rounds N] [--seconds S] [--s3] [--dir D | --fs FS
//! [--emulate PRESET]] [--json FILE|-] [--results DIR]`: what replicating every commit costs
//! (issue 43). One-row INSERT transactions from one connection on onesync at FULL, alone
//! and replicating (`onesync_replicate`) asynchronously and synchronously
//! (`onesync_replicate_sync=1`: COMMIT returns once the replica holds it) to a directory
//! and (with `--s3`) to a local S3 server, beside stock SQLite's WAL at FULL, alone and with
//! a stock Litestream process replicating it (`sync-interval` 1 s and its minimum;
//! directory, and S3 with `--s3`). The modes take turns in each round (`replication_run`
//! runs one). Per mode: txn/s and its ratio to the baseline (onesync's or WAL's) paired
//! within each round, commit latency and its p50 over the baseline's in the same round, the
//! replication lag, and bytes uploaded per transaction.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::Serialize;

use super::headline::{interval_text, median};
use super::litestream::{go_bin_dir, litestream, s3_server};
use super::replication_run::{self, Acked, ReplMode, RunOutcome, RunSetup, Target, POLL, SAMPLE_EVERY};
use super::writers::round_order;
use super::Place;
use crate::commands::report::results::{stamp_lines, write_files};
use crate::commands::report::stamp::Stamp;
use crate::meters::latency::percentiles;
use crate::meters::per;
use crate::meters::spread::{ratio_interval, RatioInterval};
use crate::output::{self, Human};
use crate::progress::phase_spinner;

#[derive(clap::Args, Debug)]
pub struct ReplicationArgs {
    /// Rounds; every round runs every mode once, the modes taking turns (each round starts
    /// one mode later)
    #[arg(long, value_name = "N", default_value_t = 3,
          value_parser = clap::value_parser!(u64).range(1..=100))]
    pub rounds: u64,

    /// Seconds of inserts per mode per round
    #[arg(long, value_name = "S", default_value_t = 10.0)]
    pub seconds: f64,

    /// onesync's `onesync_replicate_interval_ms`: how long a commit waits at most before its
    /// batch ships
    #[arg(long, value_name = "MS", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(10..=3_600_000))]
    pub interval_ms: u64,

    /// Also the S3 modes, against a local S3 server (Versity's gateway, built with Go into
    /// --go-bin if not there; skipped, saying so, without Go)
    #[arg(long)]
    pub s3: bool,

    /// Only these modes (and the baseline each is measured against), e.g.
    /// `--modes onesync+s3`: more rounds of one comparison in the same time
    #[arg(long, value_delimiter = ',', value_name = "MODE,...")]
    pub modes: Vec<String>,

    /// Where stock Litestream (and the S3 server) are built and kept [default: go-bin beside
    /// this binary's target directory, as the replication tests keep them]
    #[arg(long, value_name = "DIR")]
    pub go_bin: Option<PathBuf>,

    #[command(flatten)]
    pub place: Place,

    /// Write {"results":[...],"skipped":[...]} to FILE, or to stdout with "-" (then nothing
    /// else goes to stdout)
    #[arg(long, value_name = "FILE|-")]
    pub json: Option<PathBuf>,

    /// Also write the table and the JSON, stamped with the command, commit, date and
    /// machine, to DIR/replication-DATE.md and .json (e.g. docs/results)
    #[arg(long, value_name = "DIR")]
    pub results: Option<PathBuf>,
}

/// Percentiles of a pooled sample, milliseconds or microseconds as named.
#[derive(Serialize, Debug, Clone, Copy)]
pub struct Spread {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
    /// How many values (sampled commits for a lag, commits for a latency).
    pub n: u64,
}

/// One mode over the rounds.
#[derive(Serialize, Debug, Clone)]
pub struct ModeSummary {
    pub mode: String,
    /// The mode its ratio is against (onesync's modes: onesync; Litestream's: wal).
    pub baseline: String,
    /// "directory" or "s3"; none for a baseline.
    pub replica: Option<&'static str>,
    /// Litestream's `sync-interval`.
    pub sync_interval: Option<&'static str>,
    /// onesync's `onesync_replicate_interval_ms`.
    pub interval_ms: Option<u64>,
    /// `onesync_replicate_sync=1`: COMMIT returns once the replica holds the commit.
    pub replicate_sync: bool,
    /// Median txn/s, its 95% interval, and the median of the rounds' paired ratios to the
    /// baseline with theirs.
    pub tps: f64,
    pub tps_interval: Option<RatioInterval>,
    pub ratio: f64,
    pub ratio_interval: Option<RatioInterval>,
    /// Commit latency over every commit of every round, microseconds.
    pub latency_us: Spread,
    /// The p50 commit latency over the baseline's in the same round: the median of the
    /// rounds, and its 95% interval.
    pub p50_ratio: f64,
    pub p50_ratio_interval: Option<RatioInterval>,
    /// The lag of the sampled commits of every round, milliseconds (`lag_method`).
    pub lag_ms: Option<Spread>,
    pub lag_method: Option<&'static str>,
    /// onesync: the lag by the replica's files, the Litestream modes' method (a check).
    pub lag_by_files_ms: Option<Spread>,
    /// Sampled commits not in the replica within the wait after the run.
    pub unshipped: u64,
    /// onesync: the sampled commits the replica held when COMMIT returned (all of them in
    /// the synchronous modes), every round.
    pub acked_at_return: Option<Acked>,
    /// Bytes and files of every LTX file that appeared in the replica, every level, per
    /// transaction (the median of the rounds).
    pub bytes_per_txn: Option<f64>,
    pub files_per_1000_txns: Option<f64>,
    /// onesync: `PRAGMA onesync_replicate`'s bytes (uploads without compactions) per
    /// transaction.
    pub pragma_bytes_per_txn: Option<f64>,
    /// onesync: its files uploaded during the timed run (one per upload) per commit, the
    /// median of the rounds: below one where commits share an upload.
    pub uploads_per_commit: Option<f64>,
    /// The writing connections (several, `concurrent=1`, in the `-sync-4t` modes).
    pub threads: usize,
    /// The shipper's last error, if a round ended with one.
    pub last_error: Option<String>,
    pub fs: Option<&'static str>,
    pub rounds: Vec<RoundFigures>,
}

/// One round of one mode.
#[derive(Serialize, Debug, Clone)]
pub struct RoundFigures {
    pub commits: u64,
    pub seconds: f64,
    pub tps: f64,
    pub ratio: f64,
    /// The p50 commit latency, microseconds, and over the baseline's.
    pub p50_us: f64,
    pub p50_ratio: f64,
    pub bytes: Option<u64>,
    pub files: Option<u64>,
    /// (level, files, bytes) in the replica.
    pub by_level: Option<Vec<(u32, u64, u64)>>,
}

/// A mode not run, and why.
#[derive(Serialize, Debug, Clone)]
pub struct Skipped {
    pub mode: String,
    pub reason: String,
}

#[derive(Serialize)]
struct Results<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    stamp: Option<&'a Stamp>,
    workload: &'static str,
    seconds: f64,
    rounds: u64,
    interval_ms: u64,
    litestream_min_sync_interval: &'static str,
    poll_ms: f64,
    sample_every: u64,
    place: String,
    results: &'a [ModeSummary],
    skipped: &'a [Skipped],
}

/// The modes `--s3` and `--modes` choose, each chosen one's baseline with it, in the
/// standard order.
fn chosen_modes(args: &ReplicationArgs) -> Result<Vec<ReplMode>> {
    let all = ReplMode::all(args.s3);
    if args.modes.is_empty() {
        return Ok(all);
    }
    for name in &args.modes {
        if !all.iter().any(|m| m.name() == *name) {
            let names: Vec<String> = all.iter().map(|m| m.name()).collect();
            bail!(
                "--modes: no mode {name:?}{} (modes: {})",
                if args.s3 { "" } else { " without --s3" },
                names.join(", ")
            );
        }
    }
    let chosen = |m: &ReplMode| args.modes.contains(&m.name());
    Ok(all
        .iter()
        .copied()
        .filter(|m| chosen(m) || all.iter().any(|c| chosen(c) && c.baseline() == *m))
        .collect())
}

const WORKLOAD: &str = "one-row inserts (a 100-byte string), each its own transaction, from one connection";

pub fn run(args: &ReplicationArgs) -> Result<ExitCode> {
    output::check_json_path(args.json.as_deref())?;
    if !(args.seconds > 0.0 && args.seconds.is_finite()) {
        bail!("--seconds must be a positive number, not {}", args.seconds);
    }
    if args.s3 {
        // Our S3 client takes its credentials from the environment only; set here, before
        // this process starts any thread, to the local server's (the same ones
        // `onesync_ltx::testing::S3Server` accepts).
        for (key, value) in [
            ("AWS_ACCESS_KEY_ID", onesync_ltx::testing::ACCESS_KEY_ID),
            ("AWS_SECRET_ACCESS_KEY", onesync_ltx::testing::SECRET_ACCESS_KEY),
            ("AWS_REGION", onesync_ltx::testing::REGION),
        ] {
            std::env::set_var(key, value);
        }
    }
    let go_bin = go_bin_dir(args.go_bin.as_deref())?;
    let stamp = Stamp::now(&args.place.dir.clone().unwrap_or_else(std::env::temp_dir));
    let mut skipped = Vec::new();
    let spinner = phase_spinner("go", "stock Litestream (built with Go on first use)");
    let litestream_bin = litestream(&go_bin);
    let server = if args.s3 {
        spinner.set_message("the local S3 server (built with Go on first use)");
        Some(s3_server(&go_bin))
    } else {
        None
    };
    spinner.finish_and_clear();
    let mut modes = Vec::new();
    for mode in chosen_modes(args)? {
        let missing = match (mode, &litestream_bin, &server) {
            (ReplMode::WalLitestream(..), Err(why), _) => Some(format!("no stock Litestream: {why}")),
            (_, _, Some(Err(why))) if mode.target() == Some(Target::S3) => {
                Some(format!("no local S3 server: {why}"))
            }
            _ => None,
        };
        match missing {
            Some(reason) => {
                eprintln!("bench replication: skipping {}: {reason}", mode.name());
                skipped.push(Skipped {
                    mode: mode.name(),
                    reason,
                });
            }
            None => modes.push(mode),
        }
    }
    let s3 = server.as_ref().and_then(|s| s.as_ref().ok());
    let litestream_path = litestream_bin.as_ref().ok().map(PathBuf::as_path);
    let mut runs: Vec<Vec<RunOutcome>> = modes.iter().map(|_| Vec::new()).collect();
    let spinner = phase_spinner("replicate", "");
    for round in 1..=args.rounds {
        for i in round_order(modes.len(), round) {
            let mode = modes[i];
            let setup = RunSetup {
                seconds: args.seconds,
                interval_ms: args.interval_ms,
                place: &args.place,
                litestream: litestream_path,
                s3,
                label: format!("r{round}-{}", mode.name().replace('+', "-")),
            };
            let say = |what: String| spinner.set_message(format!("round {round}/{}: {what}", args.rounds));
            let outcome = replication_run::run(mode, &setup, &say)
                .with_context(|| format!("mode {} (round {round})", mode.name()))?;
            spinner.suspend(|| {
                eprintln!(
                    "bench replication: round {round}/{}: {}: {:.0} txn/s",
                    args.rounds,
                    mode.name(),
                    per(outcome.commits as f64, outcome.seconds)
                )
            });
            runs[i].push(outcome);
        }
    }
    spinner.finish_and_clear();
    let results = summarize(args, &modes, &runs);
    let place = args.place.describe().unwrap_or_else(|| {
        format!(
            "a fresh directory per mode in {}",
            args.place
                .dir
                .clone()
                .unwrap_or_else(std::env::temp_dir)
                .display()
        )
    });
    let table = table(args, &place, &results, &skipped);
    let document = |stamp| Results {
        stamp,
        workload: WORKLOAD,
        seconds: args.seconds,
        rounds: args.rounds,
        interval_ms: args.interval_ms,
        litestream_min_sync_interval: replication_run::LITESTREAM_MIN_SYNC_INTERVAL,
        poll_ms: POLL.as_secs_f64() * 1e3,
        sample_every: SAMPLE_EVERY,
        place: place.clone(),
        results: &results,
        skipped: &skipped,
    };
    output::emit(args.json.as_deref(), &document(None), &table, Human::Stdout)?;
    if let Some(dir) = &args.results {
        for path in write_results(dir, &document(Some(&stamp)), &stamp, &table, &args.modes)? {
            eprintln!("bench replication: wrote {}", path.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `replication-DATE.md` (the stamp and the table) and `.json` in `dir`; with `--modes`,
/// `replication-DATE-MODES.md`, so that a focused run leaves the full one in place.
fn write_results(
    dir: &Path,
    results: &Results,
    stamp: &Stamp,
    table: &str,
    modes: &[String],
) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("making {}", dir.display()))?;
    let mut stem = format!("replication-{}", stamp.date());
    for mode in modes {
        stem.push('-');
        stem.push_str(&mode.replace('+', "-"));
    }
    let md = format!(
        "# Replication: what shipping every commit costs, onesync against WAL + Litestream\n\n\
         Generated by `onesync-lab bench replication --results`; do not edit (rerun it).\n\n{}\n\
         ```text\n{}```\n",
        stamp_lines(stamp),
        table
    );
    write_files(
        dir,
        [
            (format!("{stem}.md"), md),
            (
                format!("{stem}.json"),
                serde_json::to_string_pretty(results)? + "\n",
            ),
        ],
    )
}

fn spread_of(values: &mut [Duration], scale: f64) -> Spread {
    let l = percentiles(values);
    Spread {
        p50: l.p50 * scale,
        p99: l.p99 * scale,
        max: l.max * scale,
        n: values.len() as u64,
    }
}

/// Each mode's figures over the rounds; ratios paired with the baseline's run of the same
/// round.
fn summarize(args: &ReplicationArgs, modes: &[ReplMode], all: &[Vec<RunOutcome>]) -> Vec<ModeSummary> {
    let tps = |r: &RunOutcome| per(r.commits as f64, r.seconds);
    let p50_us = |r: &RunOutcome| percentiles(&mut r.latencies.clone()).p50;
    modes
        .iter()
        .zip(all)
        .map(|(&mode, runs)| {
            let base = modes.iter().position(|&m| m == mode.baseline()).map(|b| &all[b]);
            let rounds_ratio: Vec<f64> = match base {
                Some(base) => runs.iter().zip(base).map(|(r, b)| per(tps(r), tps(b))).collect(),
                None => Vec::new(),
            };
            let rounds_p50_ratio: Vec<f64> = match base {
                Some(base) => runs
                    .iter()
                    .zip(base)
                    .map(|(r, b)| per(p50_us(r), p50_us(b)))
                    .collect(),
                None => Vec::new(),
            };
            let rounds_tps: Vec<f64> = runs.iter().map(tps).collect();
            let mut latencies: Vec<Duration> =
                runs.iter().flat_map(|r| r.latencies.iter().copied()).collect();
            let pooled = |lags: &dyn Fn(&RunOutcome) -> Option<&replication_run::Lags>| {
                let mut all: Vec<Duration> = Vec::new();
                let mut any = false;
                for lag in runs.iter().filter_map(lags) {
                    any = true;
                    all.extend(&lag.lags);
                }
                any.then(|| spread_of(&mut all, 1e-3))
            };
            let uploaded: Vec<_> = runs
                .iter()
                .filter_map(|r| r.uploaded.as_ref().map(|u| (r, u)))
                .collect();
            let per_txn = |f: &dyn Fn(&replication_run::Uploaded) -> Option<u64>, scale: f64| {
                let values: Vec<f64> = uploaded
                    .iter()
                    .filter_map(|(r, u)| f(u).map(|v| per(v as f64 * scale, r.commits as f64)))
                    .collect();
                (!values.is_empty()).then(|| median(&values))
            };
            ModeSummary {
                mode: mode.name(),
                baseline: mode.baseline().name(),
                replica: mode.target().map(|t| match t {
                    Target::Dir => "directory",
                    Target::S3 => "s3",
                }),
                sync_interval: match mode {
                    ReplMode::WalLitestream(pace, _) => Some(pace.sync_interval()),
                    _ => None,
                },
                interval_ms: matches!(mode, ReplMode::OnesyncReplicated(..)).then_some(args.interval_ms),
                replicate_sync: mode.is_sync(),
                tps: median(&rounds_tps),
                tps_interval: ratio_interval(&rounds_tps),
                ratio: median(&rounds_ratio),
                ratio_interval: ratio_interval(&rounds_ratio),
                latency_us: spread_of(&mut latencies, 1.0),
                p50_ratio: median(&rounds_p50_ratio),
                p50_ratio_interval: ratio_interval(&rounds_p50_ratio),
                lag_ms: pooled(&|r| r.lags.as_ref()),
                lag_method: mode.target().map(|_| match mode {
                    ReplMode::OnesyncReplicated(..) => "shipped_seq",
                    _ => "replica files",
                }),
                lag_by_files_ms: pooled(&|r| r.file_lags.as_ref()),
                unshipped: runs
                    .iter()
                    .filter_map(|r| r.lags.as_ref())
                    .map(|l| l.unshipped)
                    .sum(),
                acked_at_return: runs.iter().filter_map(|r| r.acked).reduce(|a, b| Acked {
                    sampled: a.sampled + b.sampled,
                    acked: a.acked + b.acked,
                }),
                bytes_per_txn: per_txn(&|u| Some(u.bytes), 1.0),
                files_per_1000_txns: per_txn(&|u| Some(u.files), 1000.0),
                pragma_bytes_per_txn: per_txn(&|u| u.pragma_bytes, 1.0),
                uploads_per_commit: per_txn(&|u| u.pragma_files, 1.0),
                threads: mode.threads(),
                last_error: uploaded.iter().find_map(|(_, u)| u.last_error.clone()),
                fs: runs.first().and_then(|r| r.fs),
                rounds: runs
                    .iter()
                    .zip(rounds_ratio.iter().copied().chain(std::iter::repeat(f64::NAN)))
                    .zip(
                        rounds_p50_ratio
                            .iter()
                            .copied()
                            .chain(std::iter::repeat(f64::NAN)),
                    )
                    .map(|((r, ratio), p50_ratio)| RoundFigures {
                        commits: r.commits,
                        seconds: r.seconds,
                        tps: tps(r),
                        ratio,
                        p50_us: p50_us(r),
                        p50_ratio,
                        bytes: r.uploaded.as_ref().map(|u| u.bytes),
                        files: r.uploaded.as_ref().map(|u| u.files),
                        by_level: r.uploaded.as_ref().map(|u| u.by_level.clone()),
                    })
                    .collect(),
            }
        })
        .collect()
}

/// "-" for a missing figure.
fn or_dash(value: Option<f64>, digits: usize) -> String {
    value.map_or("-".to_owned(), |v| format!("{v:.digits$}"))
}

pub fn table(args: &ReplicationArgs, place: &str, results: &[ModeSummary], skipped: &[Skipped]) -> String {
    let mut out = format!(
        "bench replication ({WORKLOAD}; {} s per mode in each of {} round{}, the modes taking \
         turns; {place}; replicas in {}):\n",
        args.seconds,
        args.rounds,
        if args.rounds == 1 { "" } else { "s" },
        std::env::temp_dir().display()
    );
    let width = results.iter().map(|r| r.mode.len()).max().unwrap_or(4).max(4);
    out.push_str(&format!(
        "{:<width$} {:>8} {:>13} {:>8} {:>11} {:>8} {:>8} {:>6} {:>8} {:>8} {:>9} {:>9}\n",
        "mode",
        "txn/s",
        "95% interval",
        "ratio",
        "95% inter.",
        "p50 us",
        "p99 us",
        "p50 x",
        "lag p50",
        "lag p99",
        "up B/txn",
        "files/1k"
    ));
    let mut group = String::new();
    for r in results {
        if r.baseline != group {
            out.push_str(&format!(
                "-- {} at synchronous=FULL, alone and replicating (ratio against {})\n",
                if r.baseline == "wal" {
                    "stock SQLite's WAL"
                } else {
                    "onesync"
                },
                r.baseline
            ));
            group = r.baseline.clone();
        }
        let base = r.mode == r.baseline;
        // Zero by construction in the synchronous modes (footnoted below).
        let lag = if r.replicate_sync { None } else { r.lag_ms };
        out.push_str(&format!(
            "{:<width$} {:>8.0} {:>13} {:>8} {:>11} {:>8.0} {:>8.0} {:>6} {:>8} {:>8} {:>9} {:>9}\n",
            r.mode,
            r.tps,
            interval_text(r.tps_interval, 0),
            if base {
                "1 (base)".to_owned()
            } else {
                format!("{:.3}", r.ratio)
            },
            if base {
                String::new()
            } else {
                interval_text(r.ratio_interval, 3)
            },
            r.latency_us.p50,
            r.latency_us.p99,
            if base {
                "1".to_owned()
            } else {
                format!("{:.2}", r.p50_ratio)
            },
            or_dash(lag.map(|l| l.p50), 0),
            or_dash(lag.map(|l| l.p99), 0),
            or_dash(r.bytes_per_txn, 0),
            or_dash(r.files_per_1000_txns, 1),
        ));
    }
    out.push_str(&format!(
        "(ratio: txn/s over the baseline's in the same round, the median of the rounds, 95% \
         interval by Student's t on the logarithms; p50/p99 us: commit latency over every commit; \
         p50 x: the p50 commit latency over the baseline's in the same round, the median of the \
         rounds: the onesync modes' against local onesync at FULL)\n\
         (lag p50/p99 in ms, over one commit in {SAMPLE_EVERY} of every round, from its COMMIT \
         returning until it is in the replica, read every {} ms: onesync by PRAGMA \
         onesync_replicate's shipped_seq reaching the commit's seq (PRAGMA onesync_commit), \
         Litestream by a level-0 LTX file holding the commit's row appearing in the replica)\n\
         (up B/txn, files/1k: bytes and files of every LTX file that appeared in the replica, \
         every level (transactions, snapshots, compactions), over the run's commits, the \
         median of the rounds)\n\
         (onesync replicates every {} ms; its -sync modes (onesync_replicate_sync=1) ship at \
         each COMMIT, which returns once the replica holds it, the commits waiting together \
         sharing an upload; Litestream's sync-interval 1s, and min = {}, the \
         smallest its configuration accepts (above zero); Litestream reads the WAL every \
         monitor-interval, left at its default of 1 s)\n",
        POLL.as_millis(),
        args.interval_ms,
        replication_run::LITESTREAM_MIN_SYNC_INTERVAL
    ));
    for r in results.iter().filter(|r| r.threads > 1) {
        out.push_str(&format!(
            "{}: {} connections (concurrent=1), one thread each, each inserting into its own \
             table; its ratios against onesync's one connection\n",
            r.mode, r.threads
        ));
    }
    for r in results {
        if let (true, Some(acked), Some(lag)) = (r.replicate_sync, r.acked_at_return, r.lag_ms) {
            out.push_str(&format!(
                "{}: lag - above: 0 by construction (COMMIT returns once the replica holds the \
                 commit); {} of {} sampled commits were in the replica at COMMIT's return \
                 (PRAGMA onesync_commit's replicated_seq at or past their seq); the lag method \
                 reads p50 {:.0} ms, p99 {:.0} ms: its {} ms poll's delay\n",
                r.mode,
                acked.acked,
                acked.sampled,
                lag.p50,
                lag.p99,
                POLL.as_millis()
            ));
        }
        if let (Some(pragma), Some(uploads)) = (r.pragma_bytes_per_txn, r.uploads_per_commit) {
            let by_files = r.lag_by_files_ms.map_or(String::new(), |files| {
                format!(
                    "lag by the replica's files (Litestream's method) p50 {:.0} ms, p99 {:.0} ms; ",
                    files.p50, files.p99
                )
            });
            out.push_str(&format!(
                "{}: {by_files}PRAGMA onesync_replicate's bytes (without compactions) {pragma:.0} \
                 B/txn, its uploads per commit {uploads:.3}\n",
                r.mode
            ));
        }
        if r.unshipped > 0 {
            out.push_str(&format!(
                "{}: {} sampled commits were not in the replica within the wait after the run \
                 (not in its lag figures)\n",
                r.mode, r.unshipped
            ));
        }
        if let Some(error) = &r.last_error {
            out.push_str(&format!("{}: the shipper's last error: {error}\n", r.mode));
        }
    }
    for r in results.iter().filter(|r| r.rounds.len() > 1) {
        let rounds: Vec<String> = r
            .rounds
            .iter()
            .map(|x| format!("{:.0} ({:.3})", x.tps, x.ratio))
            .collect();
        out.push_str(&format!(
            "{}: txn/s (ratio) by round: {}\n",
            r.mode,
            rounds.join(", ")
        ));
    }
    for s in skipped {
        out.push_str(&format!("skipped {}: {}\n", s.mode, s.reason));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::replication_run::Pace;

    #[test]
    fn the_minimum_sync_interval_is_litestreams_smallest_positive_duration() {
        assert_eq!(Pace::Minimum.sync_interval(), "1ns");
        assert_eq!(Pace::OneSecond.sync_interval(), "1s");
    }
}
