//! A group of `bench writers` writers in one process, one thread and one connection each:
//! the whole run with `--threads`, or one child process's share with `--processes` (the
//! hidden `__bench-writers-child`, which reports on stdout as one JSON line).
//!
//! A writer's transaction is `BEGIN` … `COMMIT`. When any statement of it, COMMIT included,
//! fails with SQLITE_BUSY or SQLITE_LOCKED in any extended form (SQLITE_BUSY_SNAPSHOT, 517,
//! among them), the writer rolls back if a transaction is still open, counts one retry and
//! runs the whole transaction again; its latency runs from the BEGIN of its first try to the
//! COMMIT that succeeded. Every connection waits up to its busy timeout ([`BUSY_TIMEOUT_MS`]
//! unless told otherwise) in SQLite's busy handler first, as applications set it.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};
use indicatif::ProgressBar;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use rusqlite::Connection;
use serde::{Deserialize, Serialize};

use crate::meters::io::{IoCounters, StoreActivity};
use crate::schemes::{Mode, Scheme};
use crate::sqlite::{extended_code, is_busy};
use crate::workloads::writers::{Plan, Tally, Writers, HOT_ROWS};

/// Every writer's `busy_timeout` unless `--busy-timeout-ms` says otherwise: what
/// applications set.
pub const BUSY_TIMEOUT_MS: u64 = 5000;

/// A transaction still not committed after retrying this long fails the run (a livelock).
const GIVE_UP_AFTER: Duration = Duration::from_secs(120);

/// The child's line once its connections are open; it then waits for [`GO_LINE`] on stdin.
pub const READY_LINE: &str = "ready";
pub const GO_LINE: &str = "go";

/// Which writers a group runs, and on what.
pub struct Group<'a> {
    pub mode: Mode,
    pub workload: Writers,
    pub db: &'a Path,
    /// The group's first writer's number (writers are numbered across processes).
    pub first_writer: u64,
    /// Transactions each of the group's writers commits, in writer order.
    pub shares: &'a [u64],
    pub seed: u64,
    /// Every connection's `busy_timeout`.
    pub busy_timeout: Duration,
}

/// What a group did.
#[derive(Serialize, Deserialize, Debug, Default)]
pub struct GroupReport {
    /// Commits per writer (numbered across all processes) and per hot row.
    pub tally: Tally,
    pub retries: u64,
    /// Retries by SQLite's extended result code (5 SQLITE_BUSY, 517 SQLITE_BUSY_SNAPSHOT,
    /// 6 SQLITE_LOCKED, ...).
    pub retry_codes: BTreeMap<i32, u64>,
    /// Every commit's latency, ns.
    pub latencies_ns: Vec<u64>,
    /// Write calls, bytes and syncs of this process over the run (its scheme's counters).
    pub write_calls: u64,
    pub bytes_written: u64,
    pub syncs: u64,
    /// The store's counters over the run (onesync modes), added up over the processes.
    pub store: Option<StoreActivity>,
    /// When the group's last commit returned, ns since the Unix epoch (to time a run of
    /// several processes from the parent's start signal).
    pub finished_unix_ns: u128,
    /// Seconds from the group's start to its last commit.
    pub seconds: f64,
}

impl GroupReport {
    /// Adds another group's counts and latencies (another process's).
    pub fn merge(&mut self, other: GroupReport) {
        self.tally.add(&other.tally);
        self.retries += other.retries;
        for (code, n) in other.retry_codes {
            *self.retry_codes.entry(code).or_default() += n;
        }
        self.latencies_ns.extend(other.latencies_ns);
        self.write_calls += other.write_calls;
        self.bytes_written += other.bytes_written;
        self.syncs += other.syncs;
        self.store = match (self.store, other.store) {
            (Some(mine), Some(theirs)) => Some(mine.combine(theirs, u64::saturating_add)),
            (mine, theirs) => mine.or(theirs),
        };
        self.finished_unix_ns = self.finished_unix_ns.max(other.finished_unix_ns);
        self.seconds = self.seconds.max(other.seconds);
    }
}

/// Now, ns since the Unix epoch.
pub fn unix_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// Opens a writer's connection: the scheme's, with its pragmas, waiting up to `busy_timeout`
/// for locks.
pub fn open_writer(scheme: &'static dyn Scheme, db: &Path, busy_timeout: Duration) -> Result<Connection> {
    let conn = scheme.open(db)?;
    conn.busy_timeout(busy_timeout)?;
    Ok(conn)
}

/// What one writer did.
struct WriterRun {
    conn: Connection,
    commits: u64,
    per_hot_row: [u64; HOT_ROWS],
    retries: u64,
    retry_codes: BTreeMap<i32, u64>,
    latencies_ns: Vec<u64>,
    finished: Instant,
}

/// Runs the group: opens every writer's connection, calls `ready` (which returns when the
/// run is to start), then runs the writers, one thread each, from one moment on.
pub fn run(
    group: &Group,
    bar: Option<&ProgressBar>,
    ready: impl FnOnce() -> Result<()>,
) -> Result<GroupReport> {
    let scheme = group.mode.scheme();
    let conns = group
        .shares
        .iter()
        .map(|_| open_writer(scheme, group.db, group.busy_timeout))
        .collect::<Result<Vec<_>>>()?;
    let io_before = match conns.first() {
        Some(conn) => IoCounters::sample(conn, scheme)?,
        None => IoCounters::default(),
    };
    let store_before = match conns.first() {
        Some(conn) => StoreActivity::sample(conn, scheme)?,
        None => None,
    };
    ready()?;
    let start = Barrier::new(conns.len() + 1);
    let (began, runs) = std::thread::scope(|scope| -> Result<_> {
        let threads: Vec<_> = conns
            .into_iter()
            .zip(group.shares)
            .enumerate()
            .map(|(i, (conn, &share))| {
                let writer = group.first_writer + i as u64;
                let start = &start;
                scope.spawn(move || {
                    start.wait();
                    run_writer(group, writer, conn, share, bar).with_context(|| format!("writer {writer}"))
                })
            })
            .collect();
        start.wait();
        let began = Instant::now();
        let runs = threads
            .into_iter()
            .map(|t| t.join().map_err(|_| anyhow!("a writer thread panicked"))?)
            .collect::<Result<Vec<_>>>()?;
        Ok((began, runs))
    })?;
    let finished = runs.iter().map(|r| r.finished).max().unwrap_or(began);
    let finished_unix_ns = unix_ns().saturating_sub(finished.elapsed().as_nanos());
    let io = match runs.first() {
        Some(r) => IoCounters::sample(&r.conn, scheme)?.minus(io_before),
        None => IoCounters::default(),
    };
    let store = match (runs.first(), store_before) {
        (Some(r), Some(before)) => {
            StoreActivity::sample(&r.conn, scheme)?.map(|after| after.combine(before, u64::saturating_sub))
        }
        _ => None,
    };
    let mut report = GroupReport {
        tally: Tally {
            per_writer: vec![0; group.first_writer as usize],
            per_hot_row: [0; HOT_ROWS],
        },
        write_calls: io.write_calls,
        bytes_written: io.bytes_written,
        syncs: io.syncs,
        store,
        finished_unix_ns,
        seconds: finished.duration_since(began).as_secs_f64(),
        ..GroupReport::default()
    };
    for r in runs {
        report.tally.per_writer.push(r.commits);
        for (total, n) in report.tally.per_hot_row.iter_mut().zip(r.per_hot_row) {
            *total += n;
        }
        report.retries += r.retries;
        for (code, n) in r.retry_codes {
            *report.retry_codes.entry(code).or_default() += n;
        }
        report.latencies_ns.extend(r.latencies_ns);
    }
    Ok(report)
}

fn run_writer(
    group: &Group,
    writer: u64,
    conn: Connection,
    share: u64,
    bar: Option<&ProgressBar>,
) -> Result<WriterRun> {
    let mut rng = SmallRng::seed_from_u64(group.seed ^ (writer + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut run = WriterRun {
        conn,
        commits: 0,
        per_hot_row: [0; HOT_ROWS],
        retries: 0,
        retry_codes: BTreeMap::new(),
        latencies_ns: Vec::with_capacity(share as usize),
        finished: Instant::now(),
    };
    for n in 0..share {
        let plan = group.workload.plan(&mut rng);
        let first_try = Instant::now();
        loop {
            match transaction(&run.conn, group.workload, writer, &plan) {
                Ok(()) => break,
                Err(e) if is_busy(&e) => {
                    if !run.conn.is_autocommit() {
                        run.conn
                            .execute_batch("ROLLBACK")
                            .context("ROLLBACK after SQLITE_BUSY")?;
                    }
                    run.retries += 1;
                    *run.retry_codes
                        .entry(extended_code(&e).unwrap_or(-1))
                        .or_default() += 1;
                    if first_try.elapsed() > GIVE_UP_AFTER {
                        bail!(
                            "transaction {n} still refused after {:?} of retries: {e}",
                            GIVE_UP_AFTER
                        );
                    }
                }
                Err(e) => {
                    if !run.conn.is_autocommit() {
                        let _ = run.conn.execute_batch("ROLLBACK");
                    }
                    return Err(e).with_context(|| format!("transaction {n}"));
                }
            }
        }
        run.latencies_ns.push(first_try.elapsed().as_nanos() as u64);
        run.commits += 1;
        if let Some(row) = plan.hot_row() {
            run.per_hot_row[row] += 1;
        }
        if let Some(bar) = bar {
            bar.inc(1);
        }
    }
    run.finished = Instant::now();
    Ok(run)
}

/// One try of `plan`: BEGIN, its statements, COMMIT.
fn transaction(conn: &Connection, workload: Writers, writer: u64, plan: &Plan) -> rusqlite::Result<()> {
    conn.prepare_cached("BEGIN")?.execute([])?;
    workload.apply(conn, writer, plan)?;
    conn.prepare_cached("COMMIT")?.execute([])?;
    Ok(())
}

/// `onesync-lab __bench-writers-child`: one process's writers of `bench writers --processes`.
#[derive(clap::Args, Debug)]
pub struct WritersChildArgs {
    /// The database (made and set up by the parent)
    pub db: PathBuf,
    #[arg(long, value_enum)]
    pub mode: Mode,
    #[arg(long, value_enum)]
    pub workload: Writers,
    /// The number of this process's first writer
    #[arg(long)]
    pub first_writer: u64,
    /// Transactions of each of its writers (one thread each)
    #[arg(long, value_delimiter = ',', required = true)]
    pub shares: Vec<u64>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[arg(long, default_value_t = BUSY_TIMEOUT_MS)]
    pub busy_timeout_ms: u64,
}

/// Opens the writers' connections, prints [`READY_LINE`], waits for [`GO_LINE`] on stdin,
/// runs them, and prints its [`GroupReport`] as one JSON line.
pub fn run_child(args: &WritersChildArgs) -> Result<()> {
    let group = Group {
        mode: args.mode,
        workload: args.workload,
        db: &args.db,
        first_writer: args.first_writer,
        shares: &args.shares,
        seed: args.seed,
        busy_timeout: Duration::from_millis(args.busy_timeout_ms),
    };
    let report = run(&group, None, || {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{READY_LINE}")?;
        out.flush()?;
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line)?;
        if line.trim() != GO_LINE {
            bail!("expected {GO_LINE:?} on stdin, got {line:?}");
        }
        Ok(())
    })?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", serde_json::to_string(&report)?)?;
    out.flush()?;
    Ok(())
}
