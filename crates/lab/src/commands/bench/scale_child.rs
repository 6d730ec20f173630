//! One measurement of `bench scale` in a process of its own (the hidden `__bench-scale-child`),
//! so that its open starts cold in the process and its peak RSS is its own: the time from the
//! open to the first query's row, then one-row updates and inserts each its own transaction,
//! the store's counters around the updates, one checkpoint forced right after the updates
//! (its time and bytes), and `VmHWM`. It reports one JSON line on stdout;
//! with `--kill` it then dies by SIGKILL without closing, leaving what it committed since the
//! last checkpoint for the next open to replay.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rusqlite::Connection;
use serde::{Deserialize, Serialize};

use super::scale_data::ROW_PAYLOAD;
use crate::meters::io::{IoCounters, StoreActivity};
use crate::meters::per;
use crate::schemes::{Mode, Scheme, Storage};

/// `onesync-lab __bench-scale-child`: one measurement of `bench scale`.
#[derive(clap::Args, Debug)]
pub struct ScaleChildArgs {
    /// The working copy (the parent made it)
    pub db: PathBuf,
    #[arg(long, value_enum)]
    pub mode: Mode,
    /// Ids of table t run from 1 to this
    #[arg(long)]
    pub rows: u64,
    /// One-row updates, then as many inserts (0: the open and the first query only)
    #[arg(long, default_value_t = 0)]
    pub updates: u64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// After reporting, die by SIGKILL without closing the database
    #[arg(long)]
    pub kill: bool,
}

/// What one child measured.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, Default)]
pub struct ChildReport {
    /// From the start of the open to the first query's row, ms.
    pub open_ms: f64,
    pub updates_per_s: f64,
    pub inserts_per_s: f64,
    /// `VmHWM` at the end, KiB.
    pub peak_rss_kib: u64,
    /// Commits of the updates (a store's commit records; else the updates), and the bytes
    /// written over them, checkpoints included (the store's counters, else the counting
    /// shim's: WAL frames and checkpoints into the database file).
    pub update_commits: u64,
    pub update_bytes: u64,
    /// A store's checkpoints over the updates.
    pub update_checkpoints: Option<u64>,
    /// The checkpoint forced right after the updates ([`force_checkpoint`]): its time, ms,
    /// and the bytes it wrote.
    pub checkpoint_ms: f64,
    pub checkpoint_bytes: u64,
    /// A store's checkpoints in it: 2 when a compacting one followed to give the file's free
    /// end back (wal: 1).
    pub checkpoint_count: u64,
    /// The commits that checkpoint covers: a store's commits since its last checkpoint, when
    /// it made none of its own since the open (wal: `None`).
    pub checkpoint_commits: Option<u64>,
}

/// Runs the child's measurement and prints its report; with `--kill`, then dies.
pub fn run_child(args: &ScaleChildArgs) -> Result<()> {
    if args.rows == 0 {
        bail!("--rows must be at least 1");
    }
    let scheme = args.mode.scheme();
    let mut rng = SmallRng::seed_from_u64(args.seed);
    let started = Instant::now();
    let conn = scheme.open(&args.db)?;
    read_row(&conn, rng.random_range(1..=args.rows)).context("the first query")?;
    let open_ms = started.elapsed().as_secs_f64() * 1e3;

    let mut report = ChildReport {
        open_ms,
        ..ChildReport::default()
    };
    if args.updates > 0 {
        let io_before = IoCounters::sample(&conn, scheme)?;
        let store_before = StoreActivity::sample(&conn, scheme)?;
        let started = Instant::now();
        let mut update = conn.prepare("UPDATE t SET v = randomblob(1000) WHERE id = ?1")?;
        for n in 0..args.updates {
            let id = rng.random_range(1..=args.rows);
            let changed = update
                .execute([id as i64])
                .with_context(|| format!("update {n} (id {id})"))?;
            if changed != 1 {
                bail!("update {n} changed {changed} rows (id {id}), not 1");
            }
        }
        report.updates_per_s = per(args.updates as f64, started.elapsed().as_secs_f64());
        let io = IoCounters::sample(&conn, scheme)?.minus(io_before);
        let store = match (StoreActivity::sample(&conn, scheme)?, store_before) {
            (Some(after), Some(before)) => Some(after.combine(before, u64::saturating_sub)),
            _ => None,
        };
        report.update_bytes = io.bytes_written;
        report.update_commits = store.map_or(args.updates, |s| s.commit_records);
        report.update_checkpoints = store.map(|s| s.checkpoints);

        let forced = force_checkpoint(&conn, scheme).context("the checkpoint after the updates")?;
        report.checkpoint_ms = forced.ms;
        report.checkpoint_bytes = forced.bytes;
        report.checkpoint_count = forced.count;
        report.checkpoint_commits = forced.commits;

        let started = Instant::now();
        let mut insert = conn.prepare("INSERT INTO t(v) VALUES (randomblob(1000))")?;
        for n in 0..args.updates {
            insert.execute([]).with_context(|| format!("insert {n}"))?;
        }
        report.inserts_per_s = per(args.updates as f64, started.elapsed().as_secs_f64());
    }
    report.peak_rss_kib = peak_rss_kib()?;
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", serde_json::to_string(&report)?)?;
        out.flush()?;
    }
    if args.kill {
        // The connection is still open: nothing is closed or checkpointed.
        nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL).context("SIGKILL to itself")?;
        bail!("still alive after SIGKILL");
    }
    drop(conn);
    Ok(())
}

/// What one forced checkpoint cost.
struct Forced {
    ms: f64,
    bytes: u64,
    count: u64,
    commits: Option<u64>,
}

/// One checkpoint now. A store: `PRAGMA onesync_checkpoint`, its time and bytes the store's
/// own counters around it (`checkpoint_micros`, `checkpoint_bytes`: the mapping, both
/// header copies; not the pages a compacting checkpoint moves), covering the commits since
/// its last checkpoint. A plain file (in WAL mode): `PRAGMA wal_checkpoint(TRUNCATE)`, timed
/// around the pragma, and the bytes the counting shim saw written meanwhile: the pages
/// copied into the database file (truncating the log writes nothing).
fn force_checkpoint(conn: &Connection, scheme: &dyn Scheme) -> Result<Forced> {
    match scheme.storage() {
        Storage::Store => {
            let before = CheckpointStats::read(conn)?;
            let _: String = conn
                .query_row("PRAGMA onesync_checkpoint", [], |r| r.get(0))
                .context("PRAGMA onesync_checkpoint")?;
            let after = CheckpointStats::read(conn)?;
            if after.checkpoints == before.checkpoints {
                bail!("PRAGMA onesync_checkpoint returned without a checkpoint counted");
            }
            Ok(Forced {
                ms: after.checkpoint_micros.saturating_sub(before.checkpoint_micros) as f64 / 1e3,
                bytes: after.checkpoint_bytes.saturating_sub(before.checkpoint_bytes),
                count: after.checkpoints.saturating_sub(before.checkpoints),
                commits: (before.checkpoints == 0).then_some(before.commit_records + before.records_replayed),
            })
        }
        Storage::PlainFile => {
            let io_before = IoCounters::sample(conn, scheme)?;
            let started = Instant::now();
            let busy: i64 = conn
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
                .context("PRAGMA wal_checkpoint(TRUNCATE)")?;
            let ms = started.elapsed().as_secs_f64() * 1e3;
            if busy != 0 {
                bail!("PRAGMA wal_checkpoint(TRUNCATE) could not complete (busy)");
            }
            Ok(Forced {
                ms,
                bytes: IoCounters::sample(conn, scheme)?.minus(io_before).bytes_written,
                count: 1,
                commits: None,
            })
        }
    }
}

/// The store's counters a forced checkpoint is measured by (`PRAGMA onesync_stats`; all
/// since the open, but `records_replayed`, the commits the open found after the last
/// checkpoint).
#[derive(Deserialize)]
struct CheckpointStats {
    commit_records: u64,
    records_replayed: u64,
    checkpoints: u64,
    checkpoint_bytes: u64,
    checkpoint_micros: u64,
}

impl CheckpointStats {
    fn read(conn: &Connection) -> Result<CheckpointStats> {
        let json: String = conn
            .query_row("PRAGMA onesync_stats", [], |r| r.get(0))
            .context("PRAGMA onesync_stats")?;
        serde_json::from_str(&json).with_context(|| format!("parsing PRAGMA onesync_stats: {json}"))
    }
}

/// Reads row `id`'s value, checking it is a whole row.
fn read_row(conn: &Connection, id: u64) -> Result<()> {
    let value: Vec<u8> = conn
        .prepare_cached("SELECT v FROM t WHERE id = ?1")?
        .query_row([id as i64], |r| r.get(0))
        .with_context(|| format!("reading row {id}"))?;
    if value.len() as u64 != ROW_PAYLOAD {
        bail!("row {id} holds {} bytes, not {ROW_PAYLOAD}", value.len());
    }
    Ok(())
}

/// This process's peak resident set (`VmHWM` in /proc/self/status), KiB.
fn peak_rss_kib() -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|kib| kib.trim().parse().ok())
        .context("no VmHWM in /proc/self/status")
}

/// How the parent runs a child.
pub struct ChildRun<'a> {
    pub db: &'a Path,
    pub mode: Mode,
    pub rows: u64,
    pub updates: u64,
    pub seed: u64,
    pub kill: bool,
}

impl ChildRun<'_> {
    /// Runs the child (this binary as `__bench-scale-child`) to its end; its report.
    pub fn run(&self) -> Result<ChildReport> {
        let exe = std::env::current_exe().context("finding the onesync-lab binary to run as the child")?;
        let mut command = Command::new(exe);
        command
            .arg("__bench-scale-child")
            .arg(self.db)
            .args(["--mode", self.mode.name()])
            .args(["--rows", &self.rows.to_string()])
            .args(["--updates", &self.updates.to_string()])
            .args(["--seed", &self.seed.to_string()]);
        if self.kill {
            command.arg("--kill");
        }
        let output = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .output()
            .context("running a bench scale child")?;
        let killed = output.status.signal() == Some(nix::sys::signal::Signal::SIGKILL as i32);
        if !(output.status.success() || self.kill && killed) {
            bail!(
                "a bench scale child ({}) failed ({})",
                self.mode.name(),
                output.status
            );
        }
        let line = String::from_utf8_lossy(&output.stdout);
        serde_json::from_str(line.trim())
            .with_context(|| format!("a bench scale child's report: {:?}", line.trim()))
    }
}
