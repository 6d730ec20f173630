//! `onesync-lab vfs-concurrency`: one-row insert transactions (`synchronous=FULL`) through the
//! onesync VFS from 1 thread, then from N threads (one connection each) on the same database,
//! in one run; transactions per second of each and the store's flushes per transaction.
//!
//! Durable on return, checked for every transaction: right after COMMIT returns, the thread
//! asks `PRAGMA onesync_commit` for the store sequence number the VFS gave this connection's
//! commit and for `durable_seq`, the sequence up to which every commit has been flushed, and
//! requires `durable_seq >= seq`. A VFS that returned from COMMIT before the flush would fail
//! this whenever the flush had not yet happened (with one thread, every time). At the end every row id a thread recorded is
//! looked up, and `PRAGMA integrity_check` must be ok. (The kill torture with `--threads`
//! checks the same promise from outside the process.)

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;

use crate::loopfs::FsKind;
use crate::meters::io::StoreActivity;
use crate::output::{self, Human};
use crate::progress::phase_spinner;
use crate::sqlite::{check_integrity, in_transaction, open_onesync, retry_while_busy};

const PAYLOAD_BYTES: i64 = 100;

#[derive(clap::Args, Debug)]
pub struct ConcurrencyArgs {
    /// Threads (one connection each) in the concurrent phase
    #[arg(long, value_name = "N", default_value_t = 4,
          value_parser = clap::value_parser!(u64).range(2..=256))]
    pub threads: u64,

    /// Transactions in each phase (split evenly among the threads)
    #[arg(long, value_name = "N", default_value_t = 2_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub txns: u64,

    /// Work in a fresh subdirectory of D (removed afterwards) [default: a fresh temporary
    /// directory]
    #[arg(long, value_name = "D", conflicts_with = "fs")]
    pub dir: Option<PathBuf>,

    /// Run on a freshly made filesystem of this kind on a loop device (needs root)
    #[arg(long, value_enum, value_name = "FS")]
    pub fs: Option<FsKind>,

    /// Size of the sparse loop image for --fs, in MiB
    #[arg(long, value_name = "MIB", default_value_t = 1024, requires = "fs")]
    pub fs_size_mib: u64,

    #[command(flatten)]
    pub emulate: crate::loopfs::EmulateArgs,

    /// Wait for the write lock with SQLite's busy handler (busy_timeout: sleeps of 1, 2, 5,
    /// 10... ms) instead of retrying after --retry-pause-us
    #[arg(long)]
    pub sqlite_busy_handler: bool,

    /// Pause before trying a transaction again after SQLITE_BUSY (without
    /// --sqlite-busy-handler). The VFS already waits for a writer of this process to let
    /// go of the write lock before it answers SQLITE_BUSY, so no pause is needed
    #[arg(long, value_name = "US", default_value_t = 0)]
    pub retry_pause_us: u64,

    /// Exit non-zero if threadsN_tps / threads1_tps is below this
    #[arg(long, value_name = "R")]
    pub min_ratio: Option<f64>,

    /// Write the results as one JSON object to FILE, or to stdout with "-" (then nothing
    /// else goes to stdout): {"threads1_tps","threads4_tps","ratio","flushes_per_txn1",
    /// "flushes_per_txn4","flush_us1","flush_us4","threads","txns"} (threads4_* is the N-thread
    /// phase whatever N is; flush_us*: mean microseconds per group-commit flush)
    #[arg(long, value_name = "FILE|-")]
    pub json: Option<PathBuf>,
}

#[derive(Serialize, Debug)]
struct Report {
    threads: u64,
    txns: u64,
    threads1_tps: f64,
    threads4_tps: f64,
    ratio: f64,
    flushes_per_txn1: f64,
    flushes_per_txn4: f64,
    flush_us1: f64,
    flush_us4: f64,
}

struct Phase {
    tps: f64,
    flushes_per_txn: f64,
    flush_us: f64,
}

pub fn run(args: &ConcurrencyArgs) -> Result<ExitCode> {
    // Declared before the work directory so it is unmounted after the directory goes.
    let loop_fs = output::loop_fs(args.fs, args.fs_size_mib, args.emulate.emulation().as_ref())?;
    let work = output::work_dir("onesync-concurrency-", loop_fs.as_ref(), args.dir.as_deref())?;
    let db = work.path().join("concurrency.onesync");
    // This connection stays open for the whole run: it keeps the store open between phases
    // and reads the flush counter.
    let monitor = open_onesync(&db, true)?;
    monitor.execute_batch(
        "CREATE TABLE item(id INTEGER PRIMARY KEY, thread INTEGER NOT NULL, payload BLOB NOT NULL)",
    )?;

    let spinner = phase_spinner("1 thread", "inserting");
    let single = run_phase(&monitor, &db, 1, args)?;
    spinner.finish_and_clear();
    let spinner = phase_spinner("threads", "inserting");
    let many = run_phase(&monitor, &db, args.threads, args)?;
    spinner.finish_and_clear();
    check_integrity(&monitor)?;
    drop(monitor);

    let report = Report {
        threads: args.threads,
        txns: args.txns,
        threads1_tps: single.tps,
        threads4_tps: many.tps,
        ratio: many.tps / single.tps,
        flushes_per_txn1: single.flushes_per_txn,
        flushes_per_txn4: many.flushes_per_txn,
        flush_us1: single.flush_us,
        flush_us4: many.flush_us,
    };
    let table = format!(
        "vfs-concurrency ({} transactions per phase, one 100-byte insert each, synchronous=FULL, \
         {}{}):\n  \
         1 thread:   {:>9.0} txn/s  {:.3} flushes/txn  {:.0} us/flush\n  \
         {} threads: {:>9.0} txn/s  {:.3} flushes/txn  {:.0} us/flush\n  \
         ratio {:.2}; every COMMIT was durable on return (durable_seq checked after each)",
        args.txns,
        if args.sqlite_busy_handler {
            "SQLite's busy handler".to_owned()
        } else {
            format!("retry {} us after SQLITE_BUSY", args.retry_pause_us)
        },
        match &loop_fs {
            Some(l) => format!(", {} on {}", l.kind(), l.device_name()),
            None => String::new(),
        },
        report.threads1_tps,
        report.flushes_per_txn1,
        report.flush_us1,
        args.threads,
        report.threads4_tps,
        report.flushes_per_txn4,
        report.flush_us4,
        report.ratio
    );
    output::emit(args.json.as_deref(), &report, &table, Human::Stdout)?;
    if let Some(min) = args.min_ratio {
        if report.ratio < min {
            eprintln!(
                "vfs-concurrency: ratio {:.2} is below --min-ratio {min}",
                report.ratio
            );
            return Ok(ExitCode::FAILURE);
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn run_phase(monitor: &Connection, db: &Path, threads: u64, args: &ConcurrencyArgs) -> Result<Phase> {
    let txns = args.txns;
    let sqlite_busy_handler = args.sqlite_busy_handler;
    let pause = Duration::from_micros(args.retry_pause_us);
    let before = StoreActivity::read(monitor)?;
    // Connections are opened before the clock starts; the barrier releases them together.
    let start = Barrier::new(threads as usize + 1);
    let (elapsed, ids) = thread::scope(|scope| -> Result<_> {
        let workers: Vec<_> = (0..threads)
            .map(|thread_no| {
                let share = txns / threads + u64::from(thread_no < txns % threads);
                let start = &start;
                scope.spawn(move || -> Result<Vec<i64>> {
                    let opened = open_onesync(db, false).and_then(|conn| {
                        conn.execute_batch("PRAGMA synchronous = FULL")?;
                        if !sqlite_busy_handler {
                            conn.busy_timeout(Duration::ZERO)?;
                        }
                        Ok(conn)
                    });
                    start.wait();
                    let conn = opened?;
                    (0..share)
                        .map(|_| insert_durably(&conn, thread_no as i64, pause))
                        .collect()
                })
            })
            .collect();
        start.wait();
        let started = Instant::now();
        let mut ids = Vec::new();
        for worker in workers {
            ids.extend(
                worker
                    .join()
                    .map_err(|_| anyhow!("an insert thread panicked"))??,
            );
        }
        Ok((started.elapsed(), ids))
    })?;
    let after = StoreActivity::read(monitor)?;
    let mut lookup = monitor.prepare("SELECT 1 FROM item WHERE id = ?1")?;
    for id in &ids {
        if lookup
            .query_row([id], |r| r.get::<_, i64>(0))
            .optional()?
            .is_none()
        {
            bail!("row {id} was committed but is not in the table");
        }
    }
    let flushes = after.flushes - before.flushes;
    Ok(Phase {
        tps: txns as f64 / elapsed.as_secs_f64(),
        flushes_per_txn: flushes as f64 / txns as f64,
        flush_us: (after.flush_micros - before.flush_micros) as f64
            / (after.group_commit_flushes - before.group_commit_flushes).max(1) as f64,
    })
}

/// One transaction inserting one row; returns its row id once COMMIT has returned and the
/// store confirms the commit durable.
fn insert_durably(conn: &Connection, thread_no: i64, pause: Duration) -> Result<i64> {
    let id = retry_while_busy(pause, || {
        in_transaction(conn, || {
            conn.execute(
                "INSERT INTO item(thread, payload) VALUES (?1, randomblob(?2))",
                params![thread_no, PAYLOAD_BYTES],
            )?;
            Ok(conn.last_insert_rowid())
        })
    })?;
    let commit = crate::sqlite::commit_point(conn)?;
    let Some(seq) = commit.seq else {
        bail!("COMMIT of row {id} returned but the store has no commit of this connection");
    };
    if commit.durable_seq < seq {
        bail!(
            "COMMIT of row {id} returned before it was durable: its commit is sequence {seq}, \
             the store's durable_seq is {}",
            commit.durable_seq
        );
    }
    Ok(id)
}
