//! `onesync bench WORKLOAD --mode M1,M2,...`: one workload run on every commit scheme in the
//! same run, each on a fresh database (and with `--fs`, a fresh filesystem), with the same
//! meters: transactions per second, commit latency percentiles, and per transaction the
//! write calls, bytes written and fsync-family calls, plus with `--fs` the block device's
//! write requests, KiB and flushes.
//!
//! Stock modes run through a counting shim: a VFS of the onesync crate registered with
//! pass-through files only (journals, WAL and shared memory included), so SQLite behaves as
//! over its default VFS while every `xWrite` and `xSync` is counted. The `onesync` mode
//! reads the store's own counters (it does its I/O itself; the few bytes per transaction it
//! writes to its side file for other processes are not included).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rusqlite::{params, Connection, OpenFlags};
use serde::Serialize;

use crate::loopfs::{DevCounters, FsKind, LoopFs};
use crate::output::{self, Human};
use crate::progress::{phase_bar, phase_spinner};
use crate::sqlite::{check_integrity, in_transaction, open_onesync, BUSY_TIMEOUT};

/// The counting shim's VFS name.
const COUNTING_VFS: &str = "onesync-counting";
/// The counting shim that lets the bundled SQLite use batch atomic writes (mode batch-atomic).
const COUNTING_BATCH_VFS: &str = "onesync-counting-batch";
/// `SQLITE_IOCAP_BATCH_ATOMIC`: what the unix VFS of a SQLite built with batch atomic writes
/// reports for a file on F2FS.
const SQLITE_IOCAP_BATCH_ATOMIC: i32 = 0x4000;
/// MobiBench's record: a 100-byte string.
const PAYLOAD_BYTES: usize = 100;
/// `tpcb` scale: accounts, tellers and branches (pgbench's scale 1 has 100,000 accounts;
/// a tenth keeps setup short while transfers still spread over many pages).
const TPCB_ACCOUNTS: i64 = 10_000;
const TPCB_TELLERS: i64 = 10;
const TPCB_BRANCHES: i64 = 1;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// One INSERT of a 100-byte string (autoincrement key) per transaction (MobiBench)
    Insert,
    /// One UPDATE of a random row's 100-byte string per transaction (MobiBench)
    Update,
    /// One DELETE of a row per transaction, in key order (MobiBench)
    Delete,
    /// TPC-B-like transfers: account, teller and branch balances and a history row per
    /// transaction; money must be conserved
    Tpcb,
    /// TPC-H partsupp: 60,000 rows of about 220 bytes; each transaction updates --pages rows
    /// chosen at random (so about that many pages)
    Partsupp,
    /// 1,000 records; each transaction is a point search or an update of one record,
    /// --searches-per-write searches for each update
    Mixed,
    /// Several threads (--threads), one connection each, each on its own table (or with
    /// --shared-table all on one): per transaction an insert (60 %), an update of a random
    /// row (20 %), a delete (10 %) or an index search (10 %)
    Dbbench,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Rollback journal, deleted at commit (synchronous=FULL)
    Delete,
    /// Rollback journal, truncated at commit (synchronous=FULL)
    Truncate,
    /// Rollback journal, header zeroed at commit (synchronous=FULL)
    Persist,
    /// Write-ahead log, synchronous=FULL
    Wal,
    /// Write-ahead log, synchronous=NORMAL (commits are not durable until a checkpoint)
    WalNormal,
    /// Write-ahead log, synchronous=FULL, checkpoints only when the log reaches 64 MiB
    WalDelayed,
    /// Journal in memory: not crash-safe (a negative control)
    Memory,
    /// No journal: not crash-safe (a negative control)
    Off,
    /// The onesync VFS over a onesync store (synchronous=FULL)
    Onesync,
    /// The onesync-f2fs VFS: a plain SQLite file on F2FS, each transaction one kernel atomic
    /// write, journal in memory (synchronous=FULL; needs F2FS, e.g. `onesync vm`)
    Maw,
    /// The bundled SQLite's own batch atomic writes (SQLITE_ENABLE_BATCH_ATOMIC_WRITE) on its
    /// default VFS, journal_mode=PERSIST, synchronous=FULL (atomic only on F2FS)
    BatchAtomic,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Delete => "delete",
            Mode::Truncate => "truncate",
            Mode::Persist => "persist",
            Mode::Wal => "wal",
            Mode::WalNormal => "wal-normal",
            Mode::WalDelayed => "wal-delayed",
            Mode::Memory => "memory",
            Mode::Off => "off",
            Mode::Onesync => "onesync",
            Mode::Maw => "maw",
            Mode::BatchAtomic => "batch-atomic",
        }
    }

    /// [`Mode::pragmas`], one statement each.
    pub fn pragma_list(self) -> impl Iterator<Item = &'static str> {
        self.pragmas().split(';').map(str::trim).filter(|p| !p.is_empty())
    }

    /// The pragmas that make a stock connection this mode (none for onesync beyond
    /// synchronous).
    fn pragmas(self) -> &'static str {
        match self {
            Mode::Delete => "PRAGMA journal_mode=DELETE; PRAGMA synchronous=FULL;",
            Mode::Truncate => "PRAGMA journal_mode=TRUNCATE; PRAGMA synchronous=FULL;",
            Mode::Persist => "PRAGMA journal_mode=PERSIST; PRAGMA synchronous=FULL;",
            Mode::Wal => "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;",
            Mode::WalNormal => "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            // 16384 pages of 4 KiB: the log grows to 64 MiB before a checkpoint.
            Mode::WalDelayed => {
                "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA wal_autocheckpoint=16384;"
            }
            Mode::Memory => "PRAGMA journal_mode=MEMORY; PRAGMA synchronous=FULL;",
            Mode::Off => "PRAGMA journal_mode=OFF; PRAGMA synchronous=FULL;",
            Mode::Onesync | Mode::Maw => "PRAGMA synchronous=FULL;",
            Mode::BatchAtomic => "PRAGMA journal_mode=PERSIST; PRAGMA synchronous=FULL;",
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// What each transaction does
    #[arg(value_enum)]
    pub workload: Workload,

    /// Modes to run, in order (the first is the baseline of the ratios)
    #[arg(long, value_enum, value_delimiter = ',', default_value = "delete,wal,onesync")]
    pub mode: Vec<Mode>,

    /// Measured transactions per mode
    #[arg(long, value_name = "N", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub txns: u64,

    /// Run in a fresh subdirectory of D per mode [default: the system's temporary directory]
    #[arg(long, value_name = "D", conflicts_with = "fs")]
    pub dir: Option<PathBuf>,

    /// Run each mode on a freshly made filesystem of this kind on a loop device, and read
    /// the device's counters (needs root)
    #[arg(long, value_enum, value_name = "FS")]
    pub fs: Option<FsKind>,

    /// Read this block device's counters (/sys/block/NAME/stat) around each mode's run,
    /// syncing --dir's filesystem first: for a filesystem the lab did not make (in the VM,
    /// `--dir /mnt --device vda`)
    #[arg(long, value_name = "NAME", requires = "dir", conflicts_with = "fs")]
    pub device: Option<String>,

    /// Size of each loop image for --fs, in MiB
    #[arg(long, value_name = "MIB", default_value_t = 1024, requires = "fs")]
    pub fs_size_mib: u64,

    /// Seed of the rows and accounts chosen
    #[arg(long, value_name = "S", default_value_t = 1)]
    pub seed: u64,

    /// Threads for dbbench (one connection each; the transactions are split among them)
    #[arg(long, value_name = "T", default_value_t = 4,
          value_parser = clap::value_parser!(u64).range(1..=64))]
    pub threads: u64,

    /// dbbench: every thread on one shared table (overlapping) instead of its own
    #[arg(long)]
    pub shared_table: bool,

    /// partsupp: rows (pages) each transaction updates
    #[arg(long, value_name = "K", default_value_t = 5,
          value_parser = clap::value_parser!(u64).range(1..=20))]
    pub pages: u64,

    /// mixed: point searches per update (0: updates only)
    #[arg(long, value_name = "R", default_value_t = 1.0)]
    pub searches_per_write: f64,

    /// Write {"results":[...]} (one object per mode) to FILE, or to stdout with "-" (then
    /// nothing else goes to stdout)
    #[arg(long, value_name = "FILE|-")]
    pub json: Option<PathBuf>,
}

#[derive(Serialize, Debug, Clone)]
pub struct ModeResult {
    pub mode: &'static str,
    pub workload: Workload,
    pub fs: Option<&'static str>,
    pub txns: u64,
    pub tps: f64,
    pub latency_us: Latency,
    pub per_txn: PerTxn,
    /// Sorted commit latencies in microseconds, thinned to at most 500 points (for a CDF).
    #[serde(skip)]
    pub latency_sample_us: Vec<f64>,
}

#[derive(Serialize, Debug, Clone, Copy)]
pub struct Latency {
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

#[derive(Serialize, Debug, Clone, Copy)]
pub struct PerTxn {
    pub write_calls: f64,
    pub bytes_written: f64,
    pub fsyncs: f64,
    pub dev_writes: Option<f64>,
    pub dev_kb: Option<f64>,
    pub dev_flushes: Option<f64>,
}

#[derive(Serialize)]
struct Results<'a> {
    results: &'a [ModeResult],
}

/// Runs the workload on every mode of `args`, in order.
pub fn measure(args: &BenchArgs) -> Result<Vec<ModeResult>> {
    if args.mode.is_empty() {
        bail!("--mode lists no modes");
    }
    if !(args.searches_per_write >= 0.0 && args.searches_per_write.is_finite()) {
        bail!(
            "--searches-per-write must be a number of at least 0, not {}",
            args.searches_per_write
        );
    }
    args.mode
        .iter()
        .map(|&mode| run_mode(args, mode).with_context(|| format!("mode {}", mode.name())))
        .collect()
}

pub fn run(args: &BenchArgs) -> Result<ExitCode> {
    let results = measure(args)?;
    output::emit(
        args.json.as_deref(),
        &Results { results: &results },
        &table(args, &results),
        Human::Stdout,
    )?;
    Ok(ExitCode::SUCCESS)
}

fn run_mode(args: &BenchArgs, mode: Mode) -> Result<ModeResult> {
    // Declared first so it is unmounted after the work directory is gone.
    let loop_fs = output::loop_fs(args.fs, args.fs_size_mib)?;
    let work = output::work_dir("onesync-bench-", loop_fs.as_ref(), args.dir.as_deref())?;
    let conn = open_mode(mode, work.path())?;
    let spinner = phase_spinner("setup", mode.name());
    set_up(&conn, args.workload, args.txns)?;
    spinner.finish_and_clear();

    let mut rng = SmallRng::seed_from_u64(args.seed);
    let mut latencies = Vec::with_capacity(args.txns as usize);
    let io_before = io_counters(&conn, mode)?;
    let probe = match (&loop_fs, &args.device) {
        (Some(l), _) => Some(DeviceProbe::Loop(l)),
        (None, Some(device)) => Some(DeviceProbe::Named {
            device,
            dir: work.path(),
        }),
        (None, None) => None,
    };
    let dev_before = probe.as_ref().map(DeviceProbe::counters).transpose()?;
    let bar = phase_bar(mode.name(), args.txns);
    let started;
    if args.workload == Workload::Dbbench {
        let db = db_path(mode, work.path());
        let start = std::sync::Barrier::new(args.threads as usize + 1);
        let (began, per_thread) = std::thread::scope(|scope| -> Result<_> {
            let workers: Vec<_> = (0..args.threads)
                .map(|t| {
                    let share = args.txns / args.threads + u64::from(t < args.txns % args.threads);
                    let (start, bar, db) = (&start, &bar, &db);
                    let table = dbbench_table(if args.shared_table { 0 } else { t % DBBENCH_TABLES });
                    let seed = args.seed ^ (t + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                    scope.spawn(move || -> Result<Vec<Duration>> {
                        let opened = reopen_mode(mode, db);
                        start.wait();
                        let conn = opened?;
                        let mut rng = SmallRng::seed_from_u64(seed);
                        let mut times = Vec::with_capacity(share as usize);
                        for _ in 0..share {
                            let t = Instant::now();
                            dbbench_transaction(&conn, &table, &mut rng)?;
                            times.push(t.elapsed());
                            bar.inc(1);
                        }
                        Ok(times)
                    })
                })
                .collect();
            start.wait();
            let began = Instant::now();
            let mut all = Vec::new();
            for w in workers {
                all.push(w.join().map_err(|_| anyhow!("a dbbench thread panicked"))??);
            }
            Ok((began, all))
        })?;
        started = began;
        latencies = per_thread.into_iter().flatten().collect();
    } else {
        started = Instant::now();
        for n in 0..args.txns {
            let t = Instant::now();
            one_transaction(args, &conn, n, &mut rng)
                .with_context(|| format!("transaction {n} of {}", args.txns))?;
            latencies.push(t.elapsed());
            bar.inc(1);
        }
    }
    let elapsed = started.elapsed();
    bar.finish_and_clear();
    let dev = match (&probe, dev_before) {
        (Some(p), Some(before)) => Some(p.counters()?.delta(&before)),
        _ => None,
    };
    let io = io_counters(&conn, mode)?.minus(io_before);
    check(&conn, args.workload)?;
    drop(conn);
    let txns = args.txns as f64;
    let per = |v: u64| v as f64 / txns;
    Ok(ModeResult {
        mode: mode.name(),
        workload: args.workload,
        // The filesystem whose device was measured (none measured: none named).
        fs: match (&loop_fs, &args.device) {
            (Some(l), _) => Some(l.kind().name()),
            (None, Some(_)) => crate::loopfs::fs_name_of(work.path()),
            (None, None) => None,
        },
        txns: args.txns,
        tps: txns / elapsed.as_secs_f64(),
        latency_us: percentiles(&mut latencies),
        latency_sample_us: thinned(&latencies),
        per_txn: PerTxn {
            write_calls: per(io.write_calls),
            bytes_written: per(io.bytes_written),
            fsyncs: per(io.syncs),
            dev_writes: dev.map(|d: DevCounters| per(d.write_ios)),
            dev_kb: dev.map(|d| d.bytes_written() as f64 / 1024.0 / txns),
            dev_flushes: dev.map(|d| per(d.flushes)),
        },
    })
}

/// Where a mode's block-device counters come from.
enum DeviceProbe<'a> {
    /// The loop device the lab made for the run.
    Loop(&'a LoopFs),
    /// A device named with --device, holding the filesystem of `dir`.
    Named { device: &'a str, dir: &'a Path },
}

impl DeviceProbe<'_> {
    fn counters(&self) -> Result<DevCounters> {
        match self {
            DeviceProbe::Loop(l) => l.counters(),
            DeviceProbe::Named { device, dir } => crate::loopfs::synced_counters(device, dir),
        }
    }
}

/// Registers the counting shims (idempotent): pass-through files for everything, counted.
/// The lab's bundled SQLite is built with batch atomic writes; the plain shim hides the
/// capability so the stock modes behave as stock builds (which lack it) do on F2FS, and the
/// batch shim passes it through.
fn register_counting_vfs() -> Result<()> {
    for (name, hidden_caps) in [(COUNTING_VFS, SQLITE_IOCAP_BATCH_ATOMIC), (COUNTING_BATCH_VFS, 0)] {
        onesync::register_with(
            &onesync::api_table_from_sys!(rusqlite::ffi),
            onesync::RegisterOptions {
                name: name.to_owned(),
                make_default: false,
                main_db: Box::new(onesync::MaskedPassThroughFactory { hidden_caps }),
                memory_journals: false,
                files: None,
            },
        )
        .map_err(|e| anyhow!("registering the counting VFS {name}: {e}"))?;
    }
    Ok(())
}

fn db_path(mode: Mode, dir: &Path) -> PathBuf {
    dir.join(if mode == Mode::Onesync {
        "bench.onesync"
    } else {
        "bench.db"
    })
}

fn open_mode(mode: Mode, dir: &Path) -> Result<Connection> {
    reopen_mode(mode, &db_path(mode, dir))
}

/// Opens (creating if need be) a stock mode's database at `path` through the counting shim,
/// with the mode's pragmas.
pub fn open_stock(mode: Mode, path: &Path) -> Result<Connection> {
    reopen_mode(mode, path)
}

/// Opens (creating if need be) the mode's database at `path`, with the mode's pragmas.
fn reopen_mode(mode: Mode, path: &Path) -> Result<Connection> {
    let conn = if mode == Mode::Onesync {
        open_onesync(path, true)?
    } else if mode == Mode::Maw {
        crate::sqlite::open_f2fs(path)?
    } else {
        register_counting_vfs()?;
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let vfs = if mode == Mode::BatchAtomic {
            COUNTING_BATCH_VFS
        } else {
            COUNTING_VFS
        };
        let conn = Connection::open_with_flags_and_vfs(path, flags, vfs)
            .with_context(|| format!("opening {} through the counting VFS", path.display()))?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        conn
    };
    // journal_mode answers with a row; the others with nothing.
    for pragma in mode.pragma_list() {
        let mut stmt = conn.prepare(pragma)?;
        let mut rows = stmt.query([])?;
        while rows.next()?.is_some() {}
    }
    Ok(conn)
}

#[derive(Clone, Copy, Default)]
struct IoCounters {
    write_calls: u64,
    bytes_written: u64,
    syncs: u64,
}

impl IoCounters {
    fn minus(self, before: IoCounters) -> IoCounters {
        IoCounters {
            write_calls: self.write_calls.saturating_sub(before.write_calls),
            bytes_written: self.bytes_written.saturating_sub(before.bytes_written),
            syncs: self.syncs.saturating_sub(before.syncs),
        }
    }
}

fn io_counters(conn: &Connection, mode: Mode) -> Result<IoCounters> {
    if mode == Mode::Onesync {
        #[derive(serde::Deserialize)]
        struct Store {
            write_calls: u64,
            bytes_written: u64,
            flushes: u64,
        }
        let json: String = conn.query_row("PRAGMA onesync_stats", [], |r| r.get(0))?;
        let s: Store = serde_json::from_str(&json).context("parsing PRAGMA onesync_stats")?;
        return Ok(IoCounters {
            write_calls: s.write_calls,
            bytes_written: s.bytes_written,
            syncs: s.flushes,
        });
    }
    let io = onesync::passthrough_io();
    Ok(IoCounters {
        write_calls: io.write_calls,
        bytes_written: io.bytes_written,
        syncs: io.syncs,
    })
}

fn payload(rng: &mut SmallRng) -> String {
    (0..PAYLOAD_BYTES)
        .map(|_| char::from(b'a' + rng.random_range(0..26u8)))
        .collect()
}

/// Tables, and the rows the measured transactions update or delete (one transaction).
fn set_up(conn: &Connection, workload: Workload, txns: u64) -> Result<()> {
    let mut rng = SmallRng::seed_from_u64(0);
    in_transaction(conn, || -> Result<()> {
        match workload {
            Workload::Insert | Workload::Update | Workload::Delete => {
                conn.execute_batch(
                    "CREATE TABLE item(id INTEGER PRIMARY KEY AUTOINCREMENT, v TEXT NOT NULL)",
                )?;
                if workload != Workload::Insert {
                    let mut insert = conn.prepare("INSERT INTO item(v) VALUES (?1)")?;
                    for _ in 0..txns {
                        insert.execute([payload(&mut rng)])?;
                    }
                }
            }
            Workload::Partsupp => partsupp_set_up(conn, &mut rng)?,
            Workload::Mixed => {
                conn.execute_batch("CREATE TABLE record(id INTEGER PRIMARY KEY, v TEXT NOT NULL)")?;
                let mut insert = conn.prepare("INSERT INTO record(id, v) VALUES (?1, ?2)")?;
                for id in 0..MIXED_RECORDS {
                    insert.execute(params![id, payload(&mut rng)])?;
                }
            }
            Workload::Dbbench => {
                // Rows to update, delete and search from the start: a tenth of the run per table.
                let per_table = (txns / 10).max(10);
                for table in 0..DBBENCH_TABLES {
                    conn.execute_batch(&format!(
                        "CREATE TABLE {t}(id INTEGER PRIMARY KEY, k INTEGER NOT NULL, v TEXT NOT NULL);
                     CREATE INDEX {t}_k ON {t}(k);",
                        t = dbbench_table(table)
                    ))?;
                    let mut insert = conn.prepare(&format!(
                        "INSERT INTO {}(k, v) VALUES (?1, ?2)",
                        dbbench_table(table)
                    ))?;
                    for _ in 0..per_table {
                        insert.execute(params![rng.random_range(0..1_000_000i64), payload(&mut rng)])?;
                    }
                }
            }
            Workload::Tpcb => tpcb_set_up(conn, TPCB_ACCOUNTS)?,
        }
        Ok(())
    })
}

/// The partsupp table (60,000 rows of about 220 bytes), filled; inside the caller's
/// transaction.
pub fn partsupp_set_up(conn: &Connection, rng: &mut SmallRng) -> Result<()> {
    conn.execute_batch(
        "CREATE TABLE partsupp(ps_partkey INTEGER NOT NULL, ps_suppkey INTEGER NOT NULL,
        ps_availqty INTEGER NOT NULL, ps_supplycost REAL NOT NULL, ps_comment TEXT NOT NULL,
        PRIMARY KEY (ps_partkey, ps_suppkey)) WITHOUT ROWID",
    )?;
    let mut insert = conn.prepare("INSERT INTO partsupp VALUES (?1, ?2, ?3, ?4, ?5)")?;
    // 15,000 parts with 4 suppliers each; the comment brings a row to about 220 bytes.
    for part in 0..PARTSUPP_ROWS / 4 {
        for supp in 0..4 {
            insert.execute(params![
                part,
                supp,
                rng.random_range(1..10_000i64),
                rng.random_range(1.0..1000.0f64),
                payload(rng) + &payload(rng)[..95],
            ])?;
        }
    }
    Ok(())
}

/// One partsupp transaction: `pages` random rows updated (each on its own page, almost
/// always: 60,000 rows span about 1,700 to 3,400 pages).
pub fn partsupp_transaction(conn: &Connection, pages: u64, rng: &mut SmallRng) -> Result<()> {
    in_transaction(conn, || -> Result<()> {
        let mut update = conn.prepare_cached(
            "UPDATE partsupp SET ps_availqty = ?1, ps_supplycost = ?2 \
             WHERE ps_partkey = ?3 AND ps_suppkey = ?4",
        )?;
        for _ in 0..pages {
            let row = rng.random_range(0..PARTSUPP_ROWS);
            update.execute(params![
                rng.random_range(1..10_000i64),
                rng.random_range(1.0..1000.0f64),
                row / 4,
                row % 4
            ])?;
        }
        Ok(())
    })
}

/// partsupp rows (TPC-H scale factor 0.075: 60,000 rows).
const PARTSUPP_ROWS: i64 = 60_000;
/// mixed: records.
const MIXED_RECORDS: i64 = 1_000;

/// Tables dbbench creates (threads beyond this share them round-robin).
const DBBENCH_TABLES: u64 = 64;

fn dbbench_table(n: u64) -> String {
    format!("bench_{n}")
}

/// One dbbench transaction on `table`.
fn dbbench_transaction(conn: &Connection, table: &str, rng: &mut SmallRng) -> Result<()> {
    let roll = rng.random_range(0..100u32);
    let key = rng.random_range(0..1_000_000i64);
    if roll < 60 {
        conn.prepare_cached(&format!("INSERT INTO {table}(k, v) VALUES (?1, ?2)"))?
            .execute(params![key, payload(rng)])?;
    } else if roll < 80 {
        conn.prepare_cached(&format!(
            "UPDATE {table} SET v = ?1 WHERE id = (SELECT id FROM {table} WHERE k >= ?2 ORDER BY k LIMIT 1)"
        ))?
        .execute(params![payload(rng), key])?;
    } else if roll < 90 {
        conn.prepare_cached(&format!(
            "DELETE FROM {table} WHERE id = (SELECT id FROM {table} WHERE k >= ?1 ORDER BY k LIMIT 1)"
        ))?
        .execute([key])?;
    } else {
        let mut search = conn.prepare_cached(&format!(
            "SELECT id, v FROM {table} WHERE k >= ?1 ORDER BY k LIMIT 10"
        ))?;
        let mut rows = search.query([key])?;
        while rows.next()?.is_some() {}
    }
    Ok(())
}

fn one_transaction(args: &BenchArgs, conn: &Connection, n: u64, rng: &mut SmallRng) -> Result<()> {
    match args.workload {
        Workload::Partsupp => partsupp_transaction(conn, args.pages, rng)?,
        Workload::Mixed => {
            let id = rng.random_range(0..MIXED_RECORDS);
            let ratio = args.searches_per_write.max(0.0);
            if rng.random_bool(ratio / (ratio + 1.0)) {
                conn.prepare_cached("SELECT v FROM record WHERE id = ?1")?
                    .query_row([id], |r| r.get::<_, String>(0))?;
            } else {
                conn.prepare_cached("UPDATE record SET v = ?1 WHERE id = ?2")?
                    .execute(params![payload(rng), id])?;
            }
        }
        Workload::Dbbench => dbbench_transaction(conn, &dbbench_table(0), rng)?,
        // Autocommit statements: one transaction each, as MobiBench runs them.
        Workload::Insert => {
            conn.prepare_cached("INSERT INTO item(v) VALUES (?1)")?
                .execute([payload(rng)])?;
        }
        Workload::Update => {
            let rows = conn.query_row("SELECT max(id) FROM item", [], |r| r.get::<_, i64>(0))?;
            let id = rng.random_range(1..=rows.max(1));
            conn.prepare_cached("UPDATE item SET v = ?1 WHERE id = ?2")?
                .execute(params![payload(rng), id])?;
        }
        Workload::Delete => {
            conn.prepare_cached("DELETE FROM item WHERE id = ?1")?
                .execute([n as i64 + 1])?;
        }
        Workload::Tpcb => tpcb_transaction(conn, TPCB_ACCOUNTS, n as i64, rng)?,
    }
    Ok(())
}

/// After the run: integrity, and the workload's own invariant.
fn check(conn: &Connection, workload: Workload) -> Result<()> {
    check_integrity(conn)?;
    if workload == Workload::Tpcb {
        tpcb_money_conserved(conn)?;
    }
    Ok(())
}

/// The TPC-B tables with `accounts` accounts (and TPCB_TELLERS tellers, TPCB_BRANCHES
/// branches), every balance 0; inside the caller's transaction.
pub fn tpcb_set_up(conn: &Connection, accounts: i64) -> Result<()> {
    conn.execute_batch(
        "CREATE TABLE branches(bid INTEGER PRIMARY KEY, bbalance INTEGER NOT NULL, filler TEXT);
         CREATE TABLE tellers(tid INTEGER PRIMARY KEY, bid INTEGER, tbalance INTEGER NOT NULL, filler TEXT);
         CREATE TABLE accounts(aid INTEGER PRIMARY KEY, bid INTEGER, abalance INTEGER NOT NULL, filler TEXT);
         CREATE TABLE history(tid INTEGER, bid INTEGER, aid INTEGER, delta INTEGER NOT NULL, mtime INTEGER, filler TEXT);",
    )?;
    let filler = "x".repeat(84);
    for bid in 1..=TPCB_BRANCHES {
        conn.execute("INSERT INTO branches VALUES (?1, 0, ?2)", params![bid, filler])?;
    }
    for tid in 1..=TPCB_TELLERS {
        conn.execute("INSERT INTO tellers VALUES (?1, 1, 0, ?2)", params![tid, filler])?;
    }
    let mut insert = conn.prepare("INSERT INTO accounts VALUES (?1, 1, 0, ?2)")?;
    for aid in 1..=accounts {
        insert.execute(params![aid, filler])?;
    }
    Ok(())
}

/// One TPC-B transaction (one of `accounts` accounts, a teller and a branch move by the same
/// delta, and a history row records it with `mtime = seq`), committed on return.
pub fn tpcb_transaction(conn: &Connection, accounts: i64, seq: i64, rng: &mut SmallRng) -> Result<()> {
    let aid = rng.random_range(1..=accounts);
    let tid = rng.random_range(1..=TPCB_TELLERS);
    let bid = rng.random_range(1..=TPCB_BRANCHES);
    let delta = rng.random_range(-5000..=5000i64);
    in_transaction(conn, || -> Result<()> {
        conn.prepare_cached("UPDATE accounts SET abalance = abalance + ?1 WHERE aid = ?2")?
            .execute(params![delta, aid])?;
        conn.prepare_cached("SELECT abalance FROM accounts WHERE aid = ?1")?
            .query_row([aid], |r| r.get::<_, i64>(0))?;
        conn.prepare_cached("UPDATE tellers SET tbalance = tbalance + ?1 WHERE tid = ?2")?
            .execute(params![delta, tid])?;
        conn.prepare_cached("UPDATE branches SET bbalance = bbalance + ?1 WHERE bid = ?2")?
            .execute(params![delta, bid])?;
        conn.prepare_cached(
            "INSERT INTO history(tid, bid, aid, delta, mtime, filler) VALUES (?1, ?2, ?3, ?4, ?5, 'tpcb')",
        )?
        .execute(params![tid, bid, aid, delta, seq])?;
        Ok(())
    })
}

/// TPC-B's invariant: the accounts, the tellers and the branches each hold in total what the
/// history says moved.
pub fn tpcb_money_conserved(conn: &Connection) -> Result<()> {
    let sums: (i64, i64, i64, i64) = conn.query_row(
        "SELECT (SELECT total(abalance) FROM accounts), (SELECT total(tbalance) FROM tellers),
                (SELECT total(bbalance) FROM branches), (SELECT total(delta) FROM history)",
        [],
        |r| {
            Ok((
                r.get::<_, f64>(0)? as i64,
                r.get::<_, f64>(1)? as i64,
                r.get::<_, f64>(2)? as i64,
                r.get::<_, f64>(3)? as i64,
            ))
        },
    )?;
    if !(sums.0 == sums.3 && sums.1 == sums.3 && sums.2 == sums.3) {
        bail!(
            "tpcb: money not conserved: accounts {}, tellers {}, branches {}, history {}",
            sums.0,
            sums.1,
            sums.2,
            sums.3
        );
    }
    Ok(())
}

fn percentiles(latencies: &mut [Duration]) -> Latency {
    latencies.sort_unstable();
    let at = |q: f64| -> f64 {
        if latencies.is_empty() {
            return 0.0;
        }
        let i = ((latencies.len() as f64 * q).ceil() as usize).clamp(1, latencies.len()) - 1;
        latencies[i].as_secs_f64() * 1e6
    };
    Latency {
        p50: at(0.50),
        p99: at(0.99),
        p999: at(0.999),
        max: at(1.0),
    }
}

/// Sorted latencies thinned to at most 500 evenly spaced ranks (the last one kept).
fn thinned(sorted: &[Duration]) -> Vec<f64> {
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

pub fn table(args: &BenchArgs, results: &[ModeResult]) -> String {
    let mut out = format!(
        "bench {} ({} transactions per mode, {}):\n",
        serde_json::to_value(args.workload)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
        args.txns,
        match (args.fs, &args.device) {
            (Some(kind), _) => format!("a fresh {} on a loop device per mode", kind.name()),
            (None, Some(device)) => format!("a fresh directory per mode, device {device}"),
            (None, None) => "a fresh directory per mode".to_owned(),
        }
    );
    out.push_str(&format!(
        "{:<12} {:>9} {:>6} {:>8} {:>8} {:>9} {:>9} {:>7} {:>8} {:>7}",
        "mode", "txn/s", "vs 1st", "p50 us", "p99 us", "p99.9 us", "writes", "KiB", "fsyncs", ""
    ));
    if args.fs.is_some() || args.device.is_some() {
        out.push_str(&format!("{:>9} {:>8} {:>9}", "dev wr", "dev KiB", "dev flush"));
    }
    out.push('\n');
    let base = results.first().map(|r| r.tps).unwrap_or(1.0);
    for r in results {
        out.push_str(&format!(
            "{:<12} {:>9.0} {:>6.2} {:>8.0} {:>8.0} {:>9.0} {:>9.2} {:>7.2} {:>8.3} {:>7}",
            r.mode,
            r.tps,
            r.tps / base,
            r.latency_us.p50,
            r.latency_us.p99,
            r.latency_us.p999,
            r.per_txn.write_calls,
            r.per_txn.bytes_written / 1024.0,
            r.per_txn.fsyncs,
            ""
        ));
        if let (Some(w), Some(k), Some(f)) = (r.per_txn.dev_writes, r.per_txn.dev_kb, r.per_txn.dev_flushes) {
            out.push_str(&format!("{w:>9.2} {k:>8.2} {f:>9.3}"));
        }
        out.push('\n');
    }
    out.push_str("(writes, KiB and fsyncs per transaction; dev: the block device's write requests, KiB and flushes per transaction)\n");
    out
}
