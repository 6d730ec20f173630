//! `onesync-lab bench writers --workload own-rows|shared-pages|hot-rows --threads N [--processes
//! P] --mode M1,M2,...`: concurrent writers on one database, every mode in the same run on a
//! fresh database (and with `--fs`, a fresh filesystem), each for the same number of
//! committed transactions (`--txns`, split among the writers).
//!
//! A writer is one connection. With `--threads T` alone the writers are T threads of this
//! process; with `--processes P` they are P child processes (the hidden
//! `__bench-writers-child`) of `--threads` threads each (default 1), P × T writers in all, and
//! each child reports on stdout as one JSON line, added up here. What a writer does on
//! SQLITE_BUSY is in `writer_group`; what its transactions do, and the oracle that checks
//! the database against the commits afterwards, in `workloads/writers.rs`.
//!
//! Per mode: transactions per second (from the start signal to the last commit), retries per
//! 100 transactions, commit latency percentiles (from the BEGIN of a transaction's first try
//! to its successful COMMIT), the ratio of txn/s to the first mode, the scheme's syncs per
//! transaction, with `--fs` the block device's writes, KiB and flushes, and the oracle's
//! verdict. A failed oracle fails the command (after the table).
//!
//! With `--rounds N` every mode runs N times, the modes taking turns within each round and
//! each round starting one mode later (so that the machine's drift over a session, and
//! running first or after another mode, fall on all of them alike): each mode's row is
//! its median round by txn/s, its ratio the median of its per-round ratios to the first
//! mode of the same round, and every round's figures are listed under the table, with the
//! geometric mean of each mode's round ratios and its 95% confidence interval
//! (`meters::spread`): a level comparison (one writer, serial against concurrent) moves by
//! ±10% from round to round, so a median of a few rounds cannot tell 0.97 from 1.00.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use serde::Serialize;

use super::writer_group::{self, open_writer, unix_ns, Group, GroupReport, GO_LINE, READY_LINE};
use super::PerTxn;
use crate::loopfs::LoopFs;
use crate::meters::io::{DeviceProbe, IoCounters, StoreActivity};
use crate::meters::latency::{percentiles, Latency};
use crate::meters::per;
use crate::meters::spread::{ratio_interval, RatioInterval};
use crate::output::{self, Human};
use crate::progress::{phase_bar, phase_spinner};
use crate::schemes::Mode;
use crate::sqlite::{check_integrity, in_transaction};
use crate::workloads::writers::Writers;

#[derive(clap::Args, Debug)]
pub struct WritersArgs {
    /// What each writer's transactions do
    #[arg(long, value_enum)]
    pub workload: Writers,

    /// Writer threads (one connection each) [default: 4, or 1 per process with --processes]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=64))]
    pub threads: Option<u64>,

    /// Run the writers in N child processes of --threads writers each (N × threads writers)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=64))]
    pub processes: Option<u64>,

    /// Modes to run, in order (the first is the baseline of the ratios)
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "wal,wal-normal,onesync,onesync-concurrent"
    )]
    pub mode: Vec<Mode>,

    /// Committed transactions per mode, split among the writers
    #[arg(long, value_name = "N", default_value_t = 2000,
          value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub txns: u64,

    #[command(flatten)]
    pub place: super::Place,

    /// Every connection's busy_timeout, in ms (what applications set; 0: a lock held by
    /// another writer fails the statement at once, and the writer retries)
    #[arg(long, value_name = "MS", default_value_t = writer_group::BUSY_TIMEOUT_MS)]
    pub busy_timeout_ms: u64,

    /// Seed of the writers' rows and choices
    #[arg(long, value_name = "S", default_value_t = 1)]
    pub seed: u64,

    /// Run every mode this many times, the modes taking turns in each round; report each
    /// mode's median round and the median of its ratios (a fresh database each time)
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u64).range(1..=50))]
    pub rounds: u64,

    /// Write {"results":[...]} (one object per mode) to FILE, or to stdout with "-" (then
    /// nothing else goes to stdout)
    #[arg(long, value_name = "FILE|-")]
    pub json: Option<PathBuf>,

    /// Negative control: after the run, commit one more transaction that no writer counted,
    /// so the oracle must fail
    #[arg(long, hide = true)]
    pub sabotage_oracle: bool,
}

impl WritersArgs {
    fn busy_timeout(&self) -> Duration {
        Duration::from_millis(self.busy_timeout_ms)
    }

    fn threads(&self) -> u64 {
        self.threads
            .unwrap_or(if self.processes.is_some() { 1 } else { 4 })
    }

    fn writers(&self) -> u64 {
        self.processes.unwrap_or(1) * self.threads()
    }

    /// Transactions of each writer: `--txns` split as evenly as can be.
    fn shares(&self) -> Vec<u64> {
        let w = self.writers();
        (0..w)
            .map(|i| self.txns / w + u64::from(i < self.txns % w))
            .collect()
    }

    fn how(&self) -> String {
        let threads = self.threads();
        match self.processes {
            Some(p) => format!("{} writers: {p} processes of {threads} thread(s)", self.writers()),
            None => format!("{threads} writers: {threads} threads"),
        }
    }
}

#[derive(Serialize, Debug, Clone)]
pub struct WritersResult {
    pub mode: &'static str,
    pub workload: Writers,
    pub writers: u64,
    pub threads: u64,
    pub processes: Option<u64>,
    pub fs: Option<&'static str>,
    /// The emulated device under the filesystem (preset name), if any.
    pub device: Option<String>,
    pub txns: u64,
    pub seconds: f64,
    pub tps: f64,
    /// txn/s over the first mode's (with `--rounds`, the median of the rounds' ratios).
    pub ratio: f64,
    /// txn/s and ratio of every round, in order (one of each without `--rounds`).
    pub rounds_tps: Vec<f64>,
    pub rounds_ratio: Vec<f64>,
    /// With two rounds or more: the geometric mean of the rounds' ratios and its 95%
    /// confidence interval.
    pub ratio_interval: Option<RatioInterval>,
    pub retries: u64,
    pub retries_per_100: f64,
    /// Retries by SQLite's extended result code.
    pub retry_codes: std::collections::BTreeMap<i32, u64>,
    pub latency_us: Latency,
    pub per_txn: PerTxn,
    /// onesync modes: the store's counters over the run, added up over the processes.
    pub store: Option<StoreActivity>,
    /// "ok", or what the oracle found wrong.
    pub oracle: String,
}

#[derive(Serialize)]
struct Results<'a> {
    results: &'a [WritersResult],
}

pub fn run(args: &WritersArgs) -> Result<ExitCode> {
    output::check_json_path(args.json.as_deref())?;
    let results = measure(args)?;
    output::emit(
        args.json.as_deref(),
        &Results { results: &results },
        &table(args, &results),
        Human::Stdout,
    )?;
    let failed: Vec<&WritersResult> = results.iter().filter(|r| r.oracle != "ok").collect();
    for r in &failed {
        eprintln!(
            "onesync-lab: bench writers: {}: the oracle failed: {}",
            r.mode, r.oracle
        );
    }
    Ok(if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Runs every mode of `args` in its rounds; each mode's median round, in the order listed
/// (the oracle's verdict is in each result: the caller decides what a failure means).
pub fn measure(args: &WritersArgs) -> Result<Vec<WritersResult>> {
    if args.mode.is_empty() {
        bail!("--mode lists no modes");
    }
    let mut rounds = Vec::new();
    for round in 1..=args.rounds {
        let mut ran = Vec::with_capacity(args.mode.len());
        for i in round_order(args.mode.len(), round) {
            let mode = args.mode[i];
            let result =
                run_mode(args, mode).with_context(|| format!("mode {} (round {round})", mode.name()))?;
            ran.push((i, result));
        }
        // Back in the order listed: the first is the ratios' base.
        ran.sort_by_key(|(i, _)| *i);
        let mut results: Vec<WritersResult> = ran.into_iter().map(|(_, r)| r).collect();
        let first_tps = results.first().map_or(0.0, |r| r.tps);
        for r in &mut results {
            r.ratio = per(r.tps, first_tps);
        }
        rounds.push(results);
    }
    Ok(median_rounds(rounds))
}

/// The order the modes run in round `round` (from 1): as listed in the first, then each
/// round starting one mode later, so that running first (or after a given mode) falls on
/// every mode alike: where a mode runs in a round moves its rate (see it with `--mode
/// onesync,onesync-concurrent --rounds 11`), and a fixed order put that on one mode.
pub(crate) fn round_order(modes: usize, round: u64) -> Vec<usize> {
    let start = ((round.max(1) - 1) % modes.max(1) as u64) as usize;
    (0..modes).map(|i| (start + i) % modes).collect()
}

/// Each mode's median round (by txn/s, the lower of the middle two), with the median of its
/// ratios and every round's figures; an oracle failure of any round is the row's.
fn median_rounds(rounds: Vec<Vec<WritersResult>>) -> Vec<WritersResult> {
    let modes = rounds.first().map_or(0, Vec::len);
    let mut by_mode: Vec<Vec<WritersResult>> = (0..modes).map(|_| Vec::new()).collect();
    for round in rounds {
        for (mode, result) in round.into_iter().enumerate() {
            by_mode[mode].push(result);
        }
    }
    by_mode
        .into_iter()
        .map(|mut runs| {
            let rounds_tps: Vec<f64> = runs.iter().map(|r| r.tps).collect();
            let rounds_ratio: Vec<f64> = runs.iter().map(|r| r.ratio).collect();
            let failed = runs.iter().find(|r| r.oracle != "ok").map(|r| r.oracle.clone());
            // `--rounds` is at least 1: every mode has a run.
            let middle = (runs.len() - 1) / 2;
            runs.sort_by(|a, b| a.tps.total_cmp(&b.tps));
            let mut median = runs.swap_remove(middle);
            let mut ratios = rounds_ratio.clone();
            ratios.sort_by(f64::total_cmp);
            median.ratio = ratios[middle];
            median.ratio_interval = ratio_interval(&rounds_ratio);
            median.rounds_tps = rounds_tps;
            median.rounds_ratio = rounds_ratio;
            if let Some(failed) = failed {
                median.oracle = failed;
            }
            median
        })
        .collect()
}

fn run_mode(args: &WritersArgs, mode: Mode) -> Result<WritersResult> {
    let scheme = mode.scheme();
    // Declared first so it is unmounted after the work directory is gone.
    let loop_fs = args.place.loop_fs()?;
    let work = args.place.work_dir("onesync-writers-", loop_fs.as_ref())?;
    let db = work.path().join(scheme.database_file("writers"));
    let spinner = phase_spinner("setup", mode.name());
    {
        let conn = open_writer(scheme, &db, args.busy_timeout())?;
        in_transaction(&conn, || args.workload.set_up(&conn, args.writers()))?;
    }
    spinner.finish_and_clear();
    // What the setup and the modes before left dirty in the page cache (the host's too,
    // under a loop device) is written back now, not during the measured transactions.
    nix::unistd::sync();

    let probe = loop_fs.as_ref().map(DeviceProbe::Loop);
    let dev_before = probe.as_ref().map(DeviceProbe::counters).transpose()?;
    let emulated_before = loop_fs.as_ref().and_then(LoopFs::device_counters);
    let shares = args.shares();
    let report = match args.processes {
        None => {
            let bar = phase_bar(mode.name(), args.txns);
            let group = Group {
                mode,
                workload: args.workload,
                db: &db,
                first_writer: 0,
                shares: &shares,
                seed: args.seed,
                busy_timeout: args.busy_timeout(),
            };
            let report = writer_group::run(&group, Some(&bar), || Ok(()))?;
            bar.finish_and_clear();
            report
        }
        Some(processes) => {
            let spinner = phase_spinner(mode.name(), "writer processes running");
            let report = run_processes(args, mode, &db, processes, &shares)?;
            spinner.finish_and_clear();
            report
        }
    };
    let dev = match (&probe, dev_before) {
        (Some(p), Some(before)) => Some(p.counters()?.delta(&before)),
        _ => None,
    };
    let emulated = match (&loop_fs, emulated_before) {
        (Some(l), Some(before)) => l.device_counters().map(|after| after.delta(&before)),
        _ => None,
    };

    let conn = open_writer(scheme, &db, args.busy_timeout())?;
    if args.sabotage_oracle {
        let mut rng = SmallRng::seed_from_u64(0);
        args.workload
            .apply(&conn, 0, &args.workload.plan(&mut rng))
            .context("the sabotage's uncounted transaction")?;
    }
    check_integrity(&conn)?;
    let oracle = match args.workload.check(&conn, &report.tally) {
        Ok(()) => "ok".to_owned(),
        Err(e) => format!("{e:#}"),
    };
    drop(conn);

    let committed = report.tally.committed();
    if committed != args.txns {
        bail!(
            "the writers committed {committed} transactions, not {}",
            args.txns
        );
    }
    let txns = committed as f64;
    let mut latencies: Vec<Duration> = report
        .latencies_ns
        .iter()
        .map(|&ns| Duration::from_nanos(ns))
        .collect();
    Ok(WritersResult {
        mode: mode.name(),
        workload: args.workload,
        writers: args.writers(),
        threads: args.threads(),
        processes: args.processes,
        fs: loop_fs.as_ref().map(|l| l.kind().name()),
        device: loop_fs
            .as_ref()
            .and_then(|l| l.emulation())
            .map(|e| e.name.clone()),
        txns: committed,
        seconds: report.seconds,
        tps: per(txns, report.seconds),
        ratio: 1.0,
        rounds_tps: Vec::new(),
        rounds_ratio: Vec::new(),
        ratio_interval: None,
        retries: report.retries,
        retries_per_100: per(100.0 * report.retries as f64, txns),
        retry_codes: report.retry_codes,
        latency_us: percentiles(&mut latencies),
        per_txn: PerTxn::new(
            committed,
            IoCounters {
                write_calls: report.write_calls,
                bytes_written: report.bytes_written,
                syncs: report.syncs,
                growth_zeros: report.store.map(|s| s.bytes_preallocated),
            },
            dev,
            emulated,
        ),
        store: report.store,
        oracle,
    })
}

/// A `__bench-writers-child` process.
struct WriterProcess {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl WriterProcess {
    fn spawn(args: &WritersArgs, mode: Mode, db: &Path, first_writer: u64, shares: &[u64]) -> Result<Self> {
        let exe = std::env::current_exe().context("finding the onesync binary to run as the child")?;
        let shares: Vec<String> = shares.iter().map(u64::to_string).collect();
        let mut child = Command::new(exe)
            .arg("__bench-writers-child")
            .arg(db)
            .args(["--mode", mode.name(), "--workload", args.workload.name()])
            .args(["--first-writer", &first_writer.to_string()])
            .args(["--shares", &shares.join(",")])
            .args(["--seed", &args.seed.to_string()])
            .args(["--busy-timeout-ms", &args.busy_timeout_ms.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting a writer process")?;
        let stdin = child.stdin.take().ok_or_else(|| anyhow!("child has no stdin"))?;
        let stdout = BufReader::new(
            child
                .stdout
                .take()
                .ok_or_else(|| anyhow!("child has no stdout"))?,
        );
        Ok(WriterProcess { child, stdin, stdout })
    }

    /// Its next line on stdout; an error naming how it ended if it ended instead.
    fn line(&mut self, waiting_for: &str) -> Result<String> {
        let mut line = String::new();
        if self.stdout.read_line(&mut line)? == 0 || !line.ends_with('\n') {
            let status = self.child.wait()?;
            bail!("a writer process ended ({status}) before its {waiting_for}");
        }
        Ok(line.trim_end().to_owned())
    }
}

impl Drop for WriterProcess {
    /// A child left running (the run failed elsewhere) is killed: it is ours, by its handle.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs the writers in `processes` children of `threads` writers each; returns their reports
/// added up, timed from the start signal to the last commit in any of them.
fn run_processes(
    args: &WritersArgs,
    mode: Mode,
    db: &Path,
    processes: u64,
    shares: &[u64],
) -> Result<GroupReport> {
    let per_process = args.threads() as usize;
    let mut children = shares
        .chunks(per_process)
        .enumerate()
        .map(|(p, chunk)| WriterProcess::spawn(args, mode, db, (p * per_process) as u64, chunk))
        .collect::<Result<Vec<_>>>()?;
    debug_assert_eq!(children.len() as u64, processes);
    for child in &mut children {
        let line = child.line("ready line")?;
        if line != READY_LINE {
            bail!("a writer process said {line:?}, not {READY_LINE:?}");
        }
    }
    let started_unix_ns = unix_ns();
    let started = Instant::now();
    for child in &mut children {
        writeln!(child.stdin, "{GO_LINE}")?;
        child.stdin.flush()?;
    }
    let mut all = GroupReport::default();
    for child in &mut children {
        let line = child.line("report")?;
        let report: GroupReport =
            serde_json::from_str(&line).with_context(|| format!("a writer process's report: {line}"))?;
        all.merge(report);
    }
    for child in &mut children {
        let status = child.child.wait()?;
        if !status.success() {
            bail!("a writer process failed ({status})");
        }
    }
    // From the start signal to the last commit, by the wall clock the processes share (the
    // parent's monotonic time as a bound: a clock step cannot make it longer).
    let seconds = all.finished_unix_ns.saturating_sub(started_unix_ns) as f64 / 1e9;
    all.seconds = if seconds > 0.0 {
        seconds.min(started.elapsed().as_secs_f64())
    } else {
        started.elapsed().as_secs_f64()
    };
    Ok(all)
}

pub fn table(args: &WritersArgs, results: &[WritersResult]) -> String {
    let rounds = if args.rounds > 1 {
        format!(", the median of {} rounds", args.rounds)
    } else {
        String::new()
    };
    let mut out = format!(
        "bench writers {} ({}; {} transactions per mode{rounds}, {}):\n",
        args.workload.name(),
        args.how(),
        args.txns,
        args.place
            .describe()
            .unwrap_or_else(|| "a fresh directory per mode".to_owned())
    );
    let width = Mode::name_width();
    out.push_str(&format!(
        "{:<width$} {:>8} {:>6} {:>11} {:>8} {:>8} {:>9} {:>9} {:>7}",
        "mode", "txn/s", "ratio", "retries/100", "p50 us", "p99 us", "p99.9 us", "max us", "fsyncs"
    ));
    if args.place.fs.is_some() {
        out.push_str(&format!(" {:>8} {:>8} {:>9}", "dev wr", "dev KiB", "dev flush"));
    }
    out.push_str("  oracle\n");
    for r in results {
        out.push_str(&format!(
            "{:<width$} {:>8.0} {:>6.2} {:>11.2} {:>8.0} {:>8.0} {:>9.0} {:>9.0} {:>7.3}",
            r.mode,
            r.tps,
            r.ratio,
            r.retries_per_100,
            r.latency_us.p50,
            r.latency_us.p99,
            r.latency_us.p999,
            r.latency_us.max,
            r.per_txn.fsyncs,
        ));
        if let (Some(w), Some(k), Some(f)) = (r.per_txn.dev_writes, r.per_txn.dev_kb, r.per_txn.dev_flushes) {
            out.push_str(&format!(" {w:>8.2} {k:>8.2} {f:>9.3}"));
        }
        out.push_str(&format!("  {}\n", if r.oracle == "ok" { "ok" } else { "FAILED" }));
    }
    if let Some(first) = results.first() {
        out.push_str(&format!(
            "(ratio: txn/s against {}; latency from the BEGIN of a transaction's first try to its \
             COMMIT, retries included; fsyncs: the scheme's syncs per transaction; busy_timeout {} ms)\n",
            first.mode, args.busy_timeout_ms
        ));
    }
    // One line per mode: what is listed, and the items.
    let mut list = |mode: &str, what: &str, items: Vec<String>| {
        out.push_str(&format!("{mode}: {what}: {}\n", items.join(", ")));
    };
    if args.rounds > 1 {
        for r in results {
            let rounds = r.rounds_tps.iter().zip(&r.rounds_ratio);
            let rounds = rounds
                .map(|(tps, ratio)| format!("{tps:.0} ({ratio:.2})"))
                .collect();
            list(r.mode, "txn/s (ratio) by round", rounds);
        }
        for r in results.iter().skip(1) {
            let Some(i) = r.ratio_interval else { continue };
            let base = results[0].mode;
            list(
                r.mode,
                &format!("ratio to {base} over the {} rounds", args.rounds),
                vec![
                    format!("geometric mean {:.3}", i.geomean),
                    format!(
                        "95% confidence interval {:.3}-{:.3} (Student's t on the logarithms of the rounds' ratios)",
                        i.low, i.high
                    ),
                ],
            );
        }
    }
    for r in results {
        let Some(s) = r.store else { continue };
        let per_commit = |n: u64| format!("{:.2}", per(n as f64, s.commit_records as f64));
        let items = [
            ("catch-ups", s.catch_ups),
            ("records followed", s.records_followed),
            ("refused at commit", s.conflicts),
            ("of them before queueing for the write lock", s.early_conflicts),
            ("shared waits for an announced flush", s.announced_flush_waits),
            ("flushes by another process", s.flushes_by_others),
            ("concurrent commits rebased onto later ones", s.concurrent_rebased),
            ("of them with their new pages moved", s.concurrent_relocated),
        ];
        let items = items
            .iter()
            .map(|(what, n)| format!("{what} {}", per_commit(*n)))
            .collect();
        list(r.mode, "per commit, all processes together", items);
        let group = s.group_commit_flushes as f64;
        let other_flushes = s.flushes.saturating_sub(s.group_commit_flushes) as f64;
        let commits = s.commit_records as f64;
        list(
            r.mode,
            "group-commit flushes",
            vec![
                format!("{:.0} us each", per(s.flush_micros as f64, group)),
                format!("{:.1} commits each", per(commits, group)),
            ],
        );
        // One process holds the lock at a time: its share of the run says how near the
        // commits come to taking turns on it.
        list(
            r.mode,
            "cross-process write lock",
            vec![
                format!(
                    "held {:.0} us per commit ({:.0}% of the run)",
                    per(s.write_lock_held_micros as f64, commits),
                    per(100.0 * s.write_lock_held_micros as f64, r.seconds * 1e6)
                ),
                format!(
                    "waited for {:.0} us per commit",
                    per(s.write_lock_waited_micros as f64, commits)
                ),
            ],
        );
        list(
            r.mode,
            "growth",
            vec![
                format!(
                    "{:.1} KiB of zeros written ahead per commit",
                    per(s.bytes_preallocated as f64 / 1024.0, commits)
                ),
                format!(
                    "{:.1} other flushes (growth, checkpoints, a follower's) per 1000 commits",
                    per(other_flushes * 1000.0, commits)
                ),
                format!(
                    "{:.1} growth steps ({:.1} inside a commit's locks) and {:.1} checkpoints per 1000 commits",
                    per(s.growths as f64 * 1000.0, commits),
                    per(s.growths_holding_locks as f64 * 1000.0, commits),
                    per(s.checkpoints as f64 * 1000.0, commits)
                ),
            ],
        );
    }
    for r in results.iter().filter(|r| r.retries > 0) {
        let codes = r
            .retry_codes
            .iter()
            .map(|(code, n)| format!("{n} x {code}"))
            .collect();
        list(r.mode, "retries by SQLite result code", codes);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mode_runs_first_in_turn() {
        assert_eq!(round_order(3, 1), vec![0, 1, 2]);
        assert_eq!(round_order(3, 2), vec![1, 2, 0]);
        assert_eq!(round_order(3, 3), vec![2, 0, 1]);
        assert_eq!(round_order(3, 4), vec![0, 1, 2]);
        assert_eq!(round_order(1, 5), vec![0]);
    }
}
