//! `onesync-lab mvbt ...`: the LS-MVBT paper's experiments, LS-MVBT (the `mvbt` virtual table
//! of the onesync extension, over `onesync-mvbt`) against stock SQLite WAL and TRUNCATE
//! (synchronous=FULL) on the same filesystem, plus its crash torture.
//!
//! The insert workload follows the paper's Figure 6: a table of 2,000 records (128-byte
//! values), then 1,000 transactions of one write each, alternately inserting a random absent
//! key and deleting a random present one, so the table stays at 2,000 records. (Read as
//! "each inserting and deleting a random key" in one transaction, every transaction would
//! dirty two random leaves in every scheme, and the paper's ~1 dirty node per transaction
//! could not happen.)

mod torture;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use onesync_mvbt::{Config, Tree};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rusqlite::{params, Connection};
use serde::Serialize;

use crate::loopfs::{FsKind, LoopFs};
use crate::meters::per;
use crate::output::{self, Human};
use crate::progress::phase_bar;
use crate::schemes::mvbt::{self as mvbt_schemes, MvbtTable};
use crate::schemes::{stock, wal, Scheme};
use crate::workloads::kv::{self, load, value, KeySet, Query, KEY_SPACE_FACTOR, VALUE_BYTES};
pub use torture::{run_child, MvbtChildArgs};
use torture::{MAIN_DB, TREE_FILE};

/// SQLite's page size, for turning stock modes' bytes written into pages.
const SQLITE_PAGE_BYTES: f64 = 4096.0;
const STOCK_DB: &str = "stock.db";

#[derive(clap::Args, Debug)]
pub struct MvbtArgs {
    #[command(subcommand)]
    pub experiment: Experiment,
}

#[derive(clap::Subcommand, Debug)]
pub enum Experiment {
    /// 2,000 records, 1,000 one-write transactions (insert a random key / delete a random
    /// key, alternately): time and dirty pages per transaction; WAL at several checkpoint
    /// intervals
    Insert(InsertArgs),
    /// 1,000 records; transactions are point searches or writes at search ratios 0..100 %
    Mixed(MixedArgs),
    /// Recovery time after a crash that leaves an aborted transaction of N inserts on disk
    Recovery(RecoveryArgs),
    /// 1,000 one-insert transactions into an empty tree at node sizes 512 B..8 KiB, with and
    /// without sibling redistribution (the engine alone)
    NodeSize(NodeSizeArgs),
    /// The optimisations one by one (MVBT, +metadata embedding, +lazy split, LS-MVBT) against
    /// TRUNCATE and WAL, for insert, update and delete transactions
    Ablation(AblationArgs),
    /// Bank transfers (TPC-B-like) on an mvbt table under simulated power cuts and real
    /// kills: money conserved, every acknowledged transfer present
    Torture(torture::MvbtTortureArgs),
}

/// Where a run happens and where its results go (shared by the experiments).
#[derive(clap::Args, Debug, Clone)]
pub struct Place {
    /// Run in a fresh subdirectory of D [default: the system's temporary directory]
    #[arg(long, value_name = "D", conflicts_with = "fs")]
    pub dir: Option<PathBuf>,

    /// Run each mode on a freshly made filesystem of this kind on a loop device (needs root)
    #[arg(long, value_enum, value_name = "FS")]
    pub fs: Option<FsKind>,

    /// Size of each loop image for --fs, in MiB
    #[arg(long, value_name = "MIB", default_value_t = 256, requires = "fs")]
    pub fs_size_mib: u64,

    #[command(flatten)]
    pub emulate: crate::loopfs::EmulateArgs,

    /// Seed of the keys and values
    #[arg(long, value_name = "S", default_value_t = 1)]
    pub seed: u64,

    /// Write {"results":[...]} to FILE, or to stdout with "-" (then nothing else goes there)
    #[arg(long, value_name = "FILE|-")]
    pub json: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct InsertArgs {
    #[command(flatten)]
    pub place: Place,
    /// Records in the table before the measured transactions
    #[arg(long, value_name = "N", default_value_t = 2000)]
    pub records: u64,
    /// Measured transactions per mode
    #[arg(long, value_name = "N", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub txns: u64,
    /// WAL checkpoint intervals (pages) to run
    #[arg(
        long,
        value_name = "PAGES",
        value_delimiter = ',',
        default_value = "63,125,250,500,1000"
    )]
    pub checkpoint_intervals: Vec<u32>,
}

#[derive(clap::Args, Debug)]
pub struct MixedArgs {
    #[command(flatten)]
    pub place: Place,
    /// Transactions per point
    #[arg(long, value_name = "N", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub txns: u64,
    /// Search percentages to run
    #[arg(
        long,
        value_name = "PCT",
        value_delimiter = ',',
        default_value = "0,10,20,30,40,50,60,70,80,90,93,100"
    )]
    pub search_percent: Vec<u32>,
}

#[derive(clap::Args, Debug)]
pub struct RecoveryArgs {
    #[command(flatten)]
    pub place: Place,
    /// Sizes (inserts) of the aborted transaction
    #[arg(
        long,
        value_name = "N",
        value_delimiter = ',',
        default_value = "10,40,160,640,2560"
    )]
    pub aborted_inserts: Vec<u64>,
    /// Drop the kernel's page cache before each timed recovery, as a real power cut would
    /// (needs root)
    #[arg(long)]
    pub cold: bool,
    /// Timed recoveries per point (the median is reported)
    #[arg(long, value_name = "N", default_value_t = 5,
          value_parser = clap::value_parser!(u64).range(1..=100))]
    pub repeats: u64,
}

#[derive(clap::Args, Debug)]
pub struct NodeSizeArgs {
    #[command(flatten)]
    pub place: Place,
    /// Node sizes in bytes
    #[arg(
        long,
        value_name = "BYTES",
        value_delimiter = ',',
        default_value = "512,1024,2048,4096,8192"
    )]
    pub node_sizes: Vec<usize>,
    /// One-insert transactions per point
    #[arg(long, value_name = "N", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub inserts: u64,
}

#[derive(clap::Args, Debug)]
pub struct AblationArgs {
    #[command(flatten)]
    pub place: Place,
    /// Records in the table before the measured transactions
    #[arg(long, value_name = "N", default_value_t = 2000)]
    pub records: u64,
    /// Measured transactions per mode and query type
    #[arg(long, value_name = "N", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub txns: u64,
}

/// One row of any experiment's results. The insertion experiment's documented fields come
/// first; the others are filled where they apply.
#[derive(Serialize, Debug, Clone, Default)]
pub struct MvbtResult {
    pub mode: String,
    pub checkpoint_interval: Option<u32>,
    pub tps: f64,
    pub us_per_txn: f64,
    pub dirty_pages_per_txn: f64,
    pub fsyncs_per_txn: f64,
    pub experiment: &'static str,
    pub fs: Option<&'static str>,
    /// Mixed: search percentage; recovery: aborted inserts; node size: bytes.
    pub param: Option<f64>,
    /// Ablation: insert, update or delete.
    pub query: Option<&'static str>,
    /// Node size: whether sibling redistribution was on.
    pub redistribution: Option<bool>,
    pub recovery_ms: Option<f64>,
    /// Recovery: the first write transaction after it (LS-MVBT writes its revert there).
    pub first_write_ms: Option<f64>,
    /// Recovery, LS-MVBT: the engine's own open (its scan and Algorithm 2), part of
    /// `recovery_ms`; the rest is SQLite's open, the schema and the first read.
    pub engine_ms: Option<f64>,
    /// Recovery: the crash image's files (tree or database, and journal or WAL), in KiB.
    pub image_kib: Option<f64>,
    pub splits_per_txn: Option<f64>,
    pub dev_kb_per_txn: Option<f64>,
    pub dev_flushes_per_txn: Option<f64>,
}

#[derive(Serialize)]
struct Results<'a> {
    results: &'a [MvbtResult],
}

pub fn run(args: &MvbtArgs) -> Result<ExitCode> {
    let (place, results, title) = match &args.experiment {
        Experiment::Insert(a) => (&a.place, insert(a)?, "insert"),
        Experiment::Mixed(a) => (&a.place, mixed(a)?, "mixed"),
        Experiment::Recovery(a) => (&a.place, recovery(a)?, "recovery"),
        Experiment::NodeSize(a) => (&a.place, node_size(a)?, "node size"),
        Experiment::Ablation(a) => (&a.place, ablation(a)?, "ablation"),
        Experiment::Torture(a) => return torture::run(a),
    };
    output::emit(
        place.json.as_deref(),
        &Results { results: &results },
        &table(title, &results),
        Human::Stdout,
    )?;
    Ok(ExitCode::SUCCESS)
}

/// A contender measured through SQL: an mvbt table variant, or a stock scheme.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Contender {
    /// The `mvbt` virtual table with one of the engine's variants.
    Tree(&'static MvbtTable),
    /// Stock WAL, synchronous=FULL, checkpointing every `n` pages.
    Wal(u32),
    /// Stock TRUNCATE rollback journal, synchronous=FULL.
    Truncate,
}

/// SQLite's default checkpoint interval (pages).
const DEFAULT_CHECKPOINT: u32 = 1000;

impl Contender {
    fn scheme(self) -> &'static dyn Scheme {
        match self {
            Contender::Tree(table) => table,
            Contender::Wal(_) => &wal::WAL,
            Contender::Truncate => &stock::TRUNCATE,
        }
    }

    fn name(self) -> String {
        self.scheme().name().to_owned()
    }

    fn checkpoint_interval(self) -> Option<u32> {
        match self {
            Contender::Wal(n) => Some(n),
            _ => None,
        }
    }
}

/// A scheme's open database in a run directory, with the table `kv(key, value)`.
pub struct Subject {
    scheme: Contender,
    conn: Connection,
    tree_path: PathBuf,
}

impl Subject {
    /// Creates the table in a fresh `dir`.
    fn create(scheme: Contender, dir: &Path) -> Result<Subject> {
        let subject = Subject::open(scheme, dir)?;
        match scheme {
            // Named relative to the database's directory, so that a copy of the directory
            // (the recovery experiment's crash image) opens its own tree, not this one.
            Contender::Tree(table) => table.create_table(&subject.conn, Path::new(TREE_FILE))?,
            _ => subject
                .conn
                .execute_batch("CREATE TABLE kv(key INTEGER PRIMARY KEY, value BLOB NOT NULL)")?,
        }
        Ok(subject)
    }

    /// Opens the scheme's database in `dir` (which may hold it already).
    fn open(scheme: Contender, dir: &Path) -> Result<Subject> {
        let tree_path = dir.join(TREE_FILE);
        let db = match scheme {
            Contender::Tree(_) => MAIN_DB,
            Contender::Wal(_) | Contender::Truncate => STOCK_DB,
        };
        let conn = scheme.scheme().open(&dir.join(db))?;
        if let Contender::Wal(interval) = scheme {
            conn.execute_batch(&format!("PRAGMA wal_autocheckpoint={interval}"))?;
        }
        Ok(Subject {
            scheme,
            conn,
            tree_path,
        })
    }

    /// Cumulative (pages or node images written, flushes, splits) of this subject.
    fn io(&self) -> Result<(f64, u64, u64)> {
        match self.scheme {
            Contender::Tree(_) => {
                let c = onesync_mvbt_vtab::mvbt_counters(&self.tree_path)
                    .ok_or_else(|| anyhow!("the mvbt table {} is not open", self.tree_path.display()))?;
                Ok((c.nodes_written as f64, c.fsyncs, c.splits))
            }
            _ => {
                let io = onesync_vfs::passthrough_io();
                Ok((io.bytes_written as f64 / SQLITE_PAGE_BYTES, io.syncs, 0))
            }
        }
    }
}

/// A fresh loop filesystem (with --fs) and a fresh directory for one run.
fn fresh_place(place: &Place, prefix: &str) -> Result<(Option<LoopFs>, tempfile::TempDir)> {
    let loop_fs = output::loop_fs(place.fs, place.fs_size_mib, place.emulate.emulation().as_ref())?;
    let dir = output::work_dir(prefix, loop_fs.as_ref(), place.dir.as_deref())?;
    Ok((loop_fs, dir))
}

/// Loads `records`, then times `txns` transactions of `query` (searching with probability
/// `search_share` instead) on `scheme`.
fn measure_sql(
    place: &Place,
    scheme: Contender,
    records: u64,
    txns: u64,
    query: Query,
    search_share: f64,
    label: &'static str,
) -> Result<MvbtResult> {
    let (loop_fs, dir) = fresh_place(place, "onesync-mvbt-")?;
    let subject = Subject::create(scheme, dir.path())?;
    let mut rng = SmallRng::seed_from_u64(place.seed);
    let mut keys = load(&subject.conn, records, &mut rng)?;
    // The load's checkpoint and dirty blocks are not the measured transactions' cost.
    if matches!(scheme, Contender::Wal(_)) {
        subject.conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")?;
    }
    nix::unistd::sync();
    let (pages_before, syncs_before, splits_before) = subject.io()?;
    let device_before = loop_fs.as_ref().map(|l| l.counters()).transpose()?;
    let bar = phase_bar(label, txns);
    let started = Instant::now();
    let mut writes = 0u64;
    for n in 0..txns {
        if search_share > 0.0 && rng.random_bool(search_share.min(1.0)) {
            kv::transaction(&subject.conn, Query::Search, n, &mut keys, &mut rng)?;
        } else {
            kv::transaction(&subject.conn, query, writes, &mut keys, &mut rng)?;
            writes += 1;
        }
        bar.inc(1);
    }
    let elapsed = started.elapsed();
    bar.finish_and_clear();
    let (pages_after, syncs_after, splits_after) = subject.io()?;
    let device = match (&loop_fs, device_before) {
        (Some(l), Some(before)) => Some(l.counters()?.delta(&before)),
        _ => None,
    };
    let t = txns as f64;
    Ok(MvbtResult {
        mode: scheme.name(),
        checkpoint_interval: scheme.checkpoint_interval(),
        tps: per(t, elapsed.as_secs_f64()),
        us_per_txn: per(elapsed.as_secs_f64() * 1e6, t),
        dirty_pages_per_txn: per(pages_after - pages_before, t),
        fsyncs_per_txn: per((syncs_after - syncs_before) as f64, t),
        fs: place.fs.map(FsKind::name),
        splits_per_txn: matches!(scheme, Contender::Tree(_))
            .then(|| per((splits_after - splits_before) as f64, t)),
        dev_kb_per_txn: device.map(|d| per(d.bytes_written() as f64 / 1024.0, t)),
        dev_flushes_per_txn: device.map(|d| per(d.flushes as f64, t)),
        ..MvbtResult::default()
    })
}

pub fn insert(args: &InsertArgs) -> Result<Vec<MvbtResult>> {
    output::check_json_path(args.place.json.as_deref())?;
    let mut schemes = vec![Contender::Tree(&mvbt_schemes::LS_MVBT)];
    schemes.extend(args.checkpoint_intervals.iter().map(|&n| Contender::Wal(n)));
    schemes.push(Contender::Truncate);
    schemes
        .into_iter()
        .map(|scheme| {
            let mut r = measure_sql(
                &args.place,
                scheme,
                args.records,
                args.txns,
                Query::Alternate,
                0.0,
                "insert",
            )
            .with_context(|| format!("mode {}", scheme.name()))?;
            r.experiment = "insert";
            Ok(r)
        })
        .collect()
}

pub fn mixed(args: &MixedArgs) -> Result<Vec<MvbtResult>> {
    output::check_json_path(args.place.json.as_deref())?;
    if let Some(bad) = args.search_percent.iter().find(|&&p| p > 100) {
        bail!("--search-percent {bad} is more than 100");
    }
    let mut results = Vec::new();
    for scheme in [
        Contender::Tree(&mvbt_schemes::LS_MVBT),
        Contender::Wal(DEFAULT_CHECKPOINT),
        Contender::Truncate,
    ] {
        for &percent in &args.search_percent {
            let mut r = measure_sql(
                &args.place,
                scheme,
                1000,
                args.txns,
                Query::Alternate,
                f64::from(percent) / 100.0,
                "mixed",
            )
            .with_context(|| format!("mode {} at {percent}% searches", scheme.name()))?;
            r.experiment = "mixed";
            r.param = Some(f64::from(percent));
            results.push(r);
        }
    }
    Ok(results)
}

pub fn ablation(args: &AblationArgs) -> Result<Vec<MvbtResult>> {
    output::check_json_path(args.place.json.as_deref())?;
    let schemes = [
        Contender::Tree(&mvbt_schemes::MVBT),
        Contender::Tree(&mvbt_schemes::MVBT_EMBEDDING),
        Contender::Tree(&mvbt_schemes::MVBT_LAZY_SPLIT),
        Contender::Tree(&mvbt_schemes::LS_MVBT),
        Contender::Truncate,
        Contender::Wal(DEFAULT_CHECKPOINT),
    ];
    let mut results = Vec::new();
    for (query, name) in [
        (Query::Insert, "insert"),
        (Query::Update, "update"),
        (Query::Delete, "delete"),
    ] {
        for scheme in schemes {
            let mut r = measure_sql(&args.place, scheme, args.records, args.txns, query, 0.0, name)
                .with_context(|| format!("mode {} ({name})", scheme.name()))?;
            r.experiment = "ablation";
            r.query = Some(name);
            results.push(r);
        }
    }
    Ok(results)
}

/// Copies the files of a crashed database (everything but SQLite's -shm, which a reboot
/// loses) from `from` into the fresh directory `to`.
fn copy_crash_image(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_string_lossy().ends_with("-shm") || !entry.file_type()?.is_file() {
            continue;
        }
        std::fs::copy(entry.path(), to.join(&name))
            .with_context(|| format!("copying {}", entry.path().display()))?;
    }
    Ok(())
}

/// Leaves in `image` a crashed `scheme` database of 2,000 records whose last transaction,
/// `aborted` inserts long, was on disk but never committed.
fn make_crash_image(scheme: Contender, work: &Path, image: &Path, aborted: u64, seed: u64) -> Result<()> {
    let live = work.join("live");
    std::fs::create_dir_all(&live)?;
    let mut rng = SmallRng::seed_from_u64(seed);
    let subject = Subject::create(scheme, &live)?;
    let mut keys = load(&subject.conn, 2000, &mut rng)?;
    match scheme {
        Contender::Tree(_) => {
            let tree_path = subject.tree_path.clone();
            drop(subject);
            let mut tree = Tree::open(&tree_path, Config::ls_mvbt()).context("opening the tree directly")?;
            tree.begin()?;
            for _ in 0..aborted {
                let key = keys.absent(&mut rng);
                tree.put(key, &value(&mut rng, VALUE_BYTES))?;
                keys.add(key);
            }
            // On disk as a pager spilling its cache would leave it.
            tree.spill()?;
            copy_crash_image(&live, image)?;
            tree.rollback()?;
        }
        _ => {
            // A tiny cache makes SQLite spill the open transaction's pages to disk (the
            // rollback journal and database, or uncommitted WAL frames).
            subject.conn.execute_batch("PRAGMA cache_size=8; BEGIN")?;
            let mut insert = subject
                .conn
                .prepare("INSERT INTO kv(key, value) VALUES (?1, ?2)")?;
            for _ in 0..aborted {
                let key = keys.absent(&mut rng);
                insert.execute(params![key, value(&mut rng, VALUE_BYTES)])?;
                keys.add(key);
            }
            drop(insert);
            copy_crash_image(&live, image)?;
            subject.conn.execute_batch("ROLLBACK")?;
        }
    }
    Ok(())
}

/// The crash image's files, in KiB.
fn image_kib(image: &Path) -> Result<f64> {
    let mut bytes = 0;
    for entry in std::fs::read_dir(image)? {
        bytes += entry?.metadata()?.len();
    }
    Ok(bytes as f64 / 1024.0)
}

/// One timed recovery.
struct RecoveryTiming {
    /// Open and one read: SQLite's hot-journal rollback or WAL recovery, or the tree's
    /// Algorithm 2, happen inside.
    recovery: Duration,
    /// Then one insert transaction (LS-MVBT writes its deferred revert there).
    first_write: Duration,
    /// LS-MVBT: the engine's own open, part of `recovery`.
    engine: Option<Duration>,
}

/// Opens a copy of the crash image, reads one row, then inserts one row, timing both.
fn time_recovery(scheme: Contender, image: &Path, attempt: &Path, cold: bool) -> Result<RecoveryTiming> {
    copy_crash_image(image, attempt)?;
    nix::unistd::sync();
    if cold {
        std::fs::write("/proc/sys/vm/drop_caches", "3\n")
            .context("dropping the page cache for --cold (needs root)")?;
    }
    let started = Instant::now();
    let subject = Subject::open(scheme, attempt)?;
    let rows: i64 =
        subject
            .conn
            .query_row("SELECT count(*) FROM kv WHERE key >= 0 AND key < 100", [], |r| {
                r.get(0)
            })?;
    let recovery = started.elapsed();
    let engine = match scheme {
        Contender::Tree(_) => Some(Duration::from_micros(
            onesync_mvbt_vtab::mvbt_recovery(&subject.tree_path)
                .ok_or_else(|| anyhow!("the mvbt table {} is not open", subject.tree_path.display()))?
                .micros,
        )),
        _ => None,
    };
    let total: i64 = subject
        .conn
        .query_row("SELECT count(*) FROM kv", [], |r| r.get(0))?;
    if total != 2000 {
        bail!("after recovery the table holds {total} records, not 2000 (first read saw {rows})");
    }
    // The load's keys are never negative, so this key is absent.
    let started = Instant::now();
    subject.conn.execute(
        "INSERT INTO kv(key, value) VALUES (?1, ?2)",
        params![-1i64, vec![7u8; VALUE_BYTES]],
    )?;
    let first_write = started.elapsed();
    Ok(RecoveryTiming {
        recovery,
        first_write,
        engine,
    })
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

pub fn recovery(args: &RecoveryArgs) -> Result<Vec<MvbtResult>> {
    output::check_json_path(args.place.json.as_deref())?;
    let schemes = [
        Contender::Tree(&mvbt_schemes::LS_MVBT),
        Contender::Wal(DEFAULT_CHECKPOINT),
        Contender::Truncate,
    ];
    let bar = phase_bar(
        "recovery",
        (schemes.len() * args.aborted_inserts.len()) as u64 * args.repeats,
    );
    let mut results = Vec::new();
    for &aborted in &args.aborted_inserts {
        // Every scheme's crash image first, then rounds that time each scheme in turn, so
        // that a noisy stretch of the machine falls on all of them alike.
        let mut places = Vec::new();
        for scheme in schemes {
            let (loop_fs, dir) = fresh_place(&args.place, "onesync-mvbt-recovery-")?;
            let image = dir.path().join("image");
            make_crash_image(scheme, dir.path(), &image, aborted, args.place.seed)
                .with_context(|| format!("mode {}: crashing with {aborted} inserts", scheme.name()))?;
            places.push((loop_fs, dir, image, Vec::new()));
        }
        for attempt in 0..args.repeats {
            for (scheme, (_, dir, image, timings)) in schemes.iter().zip(places.iter_mut()) {
                let attempt_dir = dir.path().join(format!("attempt-{attempt}"));
                timings.push(
                    time_recovery(*scheme, image, &attempt_dir, args.cold)
                        .with_context(|| format!("mode {}: recovering {aborted} inserts", scheme.name()))?,
                );
                std::fs::remove_dir_all(&attempt_dir)?;
                bar.inc(1);
            }
        }
        for (scheme, (loop_fs, _dir, image, timings)) in schemes.iter().zip(places) {
            let image_kib = image_kib(&image)?;
            drop(loop_fs);
            let recovery = median(timings.iter().map(|t| t.recovery).collect());
            let first_write = median(timings.iter().map(|t| t.first_write).collect());
            let engine: Vec<Duration> = timings.iter().filter_map(|t| t.engine).collect();
            let engine_ms = (!engine.is_empty()).then(|| median(engine).as_secs_f64() * 1e3);
            results.push(MvbtResult {
                mode: scheme.name(),
                checkpoint_interval: scheme.checkpoint_interval(),
                experiment: "recovery",
                fs: args.place.fs.map(FsKind::name),
                param: Some(aborted as f64),
                recovery_ms: Some(recovery.as_secs_f64() * 1e3),
                first_write_ms: Some(first_write.as_secs_f64() * 1e3),
                image_kib: Some(image_kib),
                engine_ms,
                ..MvbtResult::default()
            });
        }
    }
    bar.finish_and_clear();
    Ok(results)
}

/// The engine alone: `inserts` one-insert transactions of random keys into an empty tree.
pub fn node_size(args: &NodeSizeArgs) -> Result<Vec<MvbtResult>> {
    output::check_json_path(args.place.json.as_deref())?;
    let mut results = Vec::new();
    for &node_size in &args.node_sizes {
        for redistribution in [false, true] {
            let (_loop_fs, dir) = fresh_place(&args.place, "onesync-mvbt-nodes-")?;
            let config = Config {
                node_size,
                sibling_redistribution: redistribution,
                ..Config::ls_mvbt()
            };
            let mut tree = Tree::create(&dir.path().join(TREE_FILE), config)
                .with_context(|| format!("node size {node_size}"))?;
            let mut rng = SmallRng::seed_from_u64(args.place.seed);
            // The paper's 128-byte records, or the largest value a node of this size takes.
            let value_len = VALUE_BYTES.min(tree.max_value_len());
            let mut keys = KeySet::new(args.inserts as i64 * KEY_SPACE_FACTOR);
            let before = tree.counters();
            let bar = phase_bar("node size", args.inserts);
            let started = Instant::now();
            for _ in 0..args.inserts {
                let key = keys.absent(&mut rng);
                tree.begin()?;
                tree.put(key, &value(&mut rng, value_len))?;
                tree.commit()?;
                keys.add(key);
                bar.inc(1);
            }
            let elapsed = started.elapsed();
            bar.finish_and_clear();
            let after = tree.counters();
            let t = args.inserts as f64;
            results.push(MvbtResult {
                mode: format!("ls-mvbt/{value_len}B values"),
                tps: per(t, elapsed.as_secs_f64()),
                us_per_txn: per(elapsed.as_secs_f64() * 1e6, t),
                dirty_pages_per_txn: per((after.nodes_written - before.nodes_written) as f64, t),
                fsyncs_per_txn: per((after.fsyncs - before.fsyncs) as f64, t),
                experiment: "node-size",
                fs: args.place.fs.map(FsKind::name),
                param: Some(node_size as f64),
                redistribution: Some(redistribution),
                splits_per_txn: Some(per((after.splits - before.splits) as f64, t)),
                ..MvbtResult::default()
            });
        }
    }
    Ok(results)
}

pub fn table(title: &str, results: &[MvbtResult]) -> String {
    if title == "recovery" {
        return recovery_table(results);
    }
    let mut out = format!(
        "{:<22} {:>8} {:>8} {:>10} {:>10} {:>8} {:>8} {:>10} {:>9}\n",
        format!("mvbt {title}"),
        "param",
        "ckpt",
        "tps",
        "us/txn",
        "pages",
        "fsyncs",
        "recov ms",
        "dev KiB"
    );
    for r in results {
        let param = match (r.query, r.param, r.redistribution) {
            (Some(q), _, _) => q.to_owned(),
            (_, Some(p), Some(true)) => format!("{p}+redis"),
            (_, Some(p), _) => format!("{p}"),
            _ => String::new(),
        };
        let opt = |v: Option<f64>, digits: usize| v.map(|v| format!("{v:.digits$}")).unwrap_or_default();
        let recovery = r.recovery_ms.is_some();
        out += &format!(
            "{:<22} {:>8} {:>8} {:>10} {:>10} {:>8} {:>8} {:>10} {:>9}\n",
            r.mode,
            param,
            r.checkpoint_interval.map(|c| c.to_string()).unwrap_or_default(),
            if recovery {
                String::new()
            } else {
                format!("{:.0}", r.tps)
            },
            if recovery {
                String::new()
            } else {
                format!("{:.0}", r.us_per_txn)
            },
            if recovery {
                String::new()
            } else {
                format!("{:.2}", r.dirty_pages_per_txn)
            },
            if recovery {
                String::new()
            } else {
                format!("{:.2}", r.fsyncs_per_txn)
            },
            opt(r.recovery_ms, 2),
            opt(r.dev_kb_per_txn, 1),
        );
    }
    out
}

/// The recovery experiment's table: per aborted transaction size, each scheme's recovery
/// (open + one read), its first write after, and its crash image's size.
fn recovery_table(results: &[MvbtResult]) -> String {
    let mut out = format!(
        "{:<22} {:>8} {:>10} {:>10} {:>14} {:>10}\n",
        "mvbt recovery", "aborted", "recov ms", "engine ms", "1st write ms", "image KiB"
    );
    let opt = |v: Option<f64>, digits: usize| v.map(|v| format!("{v:.digits$}")).unwrap_or_default();
    for r in results {
        out += &format!(
            "{:<22} {:>8} {:>10} {:>10} {:>14} {:>10}\n",
            r.mode,
            opt(r.param, 0),
            opt(r.recovery_ms, 2),
            opt(r.engine_ms, 2),
            opt(r.first_write_ms, 2),
            opt(r.image_kib, 0),
        );
    }
    out
}
