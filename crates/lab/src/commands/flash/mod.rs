//! `onesync-lab flash ...`: the X-FTL paper's experiments on the simulated SSD
//! (`onesync-flash`), with real SQLite running on the simulated drive's filesystem.
//!
//! Modes: `rbj` (SQLite's rollback journal, DELETE, on the ordered-journaling filesystem),
//! `wal` (WAL, synchronous=FULL, same filesystem) and `xftl` (journal in memory, the
//! filesystem mounted X-FTL: each database sync is one drive transaction). Time is the
//! host's simulated clock (`--clock whole`, the default): host software (system calls, the
//! filesystem, the block layer per command), link transfers, and waits for the drive, whose
//! DRAM write cache programs NAND in the background and drains at every flush and commit;
//! `--clock nand` is the older drive-only clock (NAND operations and transfers, write-through).
//! SQLite's own CPU is not counted.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context, Result};
use onesync_flash::hostfs::{FlashFs, FsConfig, HostCosts, Journaling};
use onesync_flash::{Counters, Geometry, Ssd, SsdConfig, Timing};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rusqlite::Connection;
use serde::Serialize;

use crate::output::{self, Human};
use crate::progress::phase_bar;
use crate::schemes::flash::{self as flash_schemes, FlashScheme};
use crate::schemes::Scheme;
use crate::sim::flash_files::{flash_files, FlashFiles};
use crate::sqlite::in_transaction;
use crate::workloads::bank;
use crate::workloads::partsupp::Partsupp;
use crate::workloads::Transactions;
/// Where the database lives inside the simulated filesystem.
const DB_NAME: &str = "/flash/test.db";

#[derive(clap::Args, Debug)]
pub struct FlashArgs {
    #[command(subcommand)]
    pub experiment: Experiment,
}

#[derive(clap::Subcommand, Debug)]
pub enum Experiment {
    /// TPC-H partsupp (60,000 rows of 220 bytes), random updates of 1..20 pages per
    /// transaction: simulated time, host writes, NAND programs and erases per mode
    Partsupp(PartsuppArgs),
    /// partsupp at 5 pages per transaction on an aged drive whose garbage collector finds
    /// victims about 30/50/70% valid: NAND writes and GC counts per mode
    Gc(GcArgs),
    /// FIO-like random 8 KiB overwrites of a file with an fsync every 1..20 pages: X-FTL
    /// against ext4-like ordered and data journaling (simulated IOPS)
    Fio(FioArgs),
    /// Restart time after a sudden power-off in the middle of a transaction: drive recovery,
    /// filesystem mount (journal replay) and SQLite's own recovery, per mode
    Restart(RestartArgs),
    /// Bank transfers (TPC-B-like) under power cuts at random NAND operations; checks
    /// integrity, conservation of money and every acknowledged transfer after each restart
    Torture(FlashTortureArgs),
}

/// A scheme of `schemes::flash` (the command-line value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SqlMode {
    Rbj,
    Wal,
    Xftl,
}

impl SqlMode {
    const ALL: [SqlMode; 3] = [SqlMode::Rbj, SqlMode::Wal, SqlMode::Xftl];

    fn scheme(self) -> &'static FlashScheme {
        match self {
            SqlMode::Rbj => &flash_schemes::RBJ,
            SqlMode::Wal => &flash_schemes::WAL,
            SqlMode::Xftl => &flash_schemes::XFTL,
        }
    }

    fn name(self) -> &'static str {
        self.scheme().name
    }
}

impl clap::ValueEnum for SqlMode {
    fn value_variants<'a>() -> &'a [Self] {
        &SqlMode::ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        let scheme = self.scheme();
        Some(clap::builder::PossibleValue::new(scheme.name).help(scheme.description))
    }
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FioMode {
    /// Every fsync is a drive transaction (data and metadata)
    Xftl,
    /// ext4 data=ordered: metadata journaled
    Ordered,
    /// ext4 data=journal: data and metadata journaled
    Data,
}

impl FioMode {
    fn name(self) -> &'static str {
        match self {
            FioMode::Xftl => "xftl",
            FioMode::Ordered => "ordered",
            FioMode::Data => "data",
        }
    }

    fn journaling(self) -> Journaling {
        match self {
            FioMode::Xftl => Journaling::XFtl,
            FioMode::Ordered => Journaling::Ordered,
            FioMode::Data => Journaling::Data,
        }
    }
}

/// Which clock the simulated times are on.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ClockModel {
    /// Host software, link transfers, the drive's write cache and flush waits
    #[default]
    Whole,
    /// NAND operations and link transfers only, every write waiting for its program
    Nand,
}

/// The simulated platform's options, shared by the timed experiments.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct DriveArgs {
    /// Clock model of the reported times
    #[arg(long, value_enum, default_value = "whole")]
    pub clock: ClockModel,
    /// FLUSH CACHE writes the drive's whole mapping (a checkpoint) instead of a log record
    /// of the changes, as the OpenSSD Jasmine Greedy FTL does (what-if: the paper's platform)
    #[arg(long)]
    pub flush_checkpoints: bool,
}

#[derive(clap::Args, Debug, Clone)]
pub struct PartsuppArgs {
    /// Modes, comma-separated
    #[arg(long, value_enum, value_delimiter = ',', default_value = "rbj,wal,xftl")]
    pub mode: Vec<SqlMode>,
    /// Pages updated per transaction, comma-separated
    #[arg(long, value_delimiter = ',', default_value = "1,5,10,15,20")]
    pub pages: Vec<u64>,
    /// Transactions per mode and page count
    #[arg(long, default_value_t = 1000)]
    pub txns: u64,
    /// Physical capacity of the simulated drive, MiB
    #[arg(long, default_value_t = 128)]
    pub capacity_mib: u64,
    #[command(flatten)]
    pub drive: DriveArgs,
    /// Write the results as JSON to FILE, or to stdout with "-"
    #[arg(long, value_name = "FILE|-")]
    pub json: Option<PathBuf>,
}

#[derive(clap::Args, Debug, Clone)]
pub struct GcArgs {
    #[arg(long, value_enum, value_delimiter = ',', default_value = "rbj,wal,xftl")]
    pub mode: Vec<SqlMode>,
    /// Target valid-page ratios of GC victims, percent, comma-separated
    #[arg(long, value_delimiter = ',', default_value = "30,50,70")]
    pub ratios: Vec<u32>,
    /// Pages updated per transaction
    #[arg(long, default_value_t = 5)]
    pub pages: u64,
    /// Measured transactions per point (after the drive reaches steady state)
    #[arg(long, default_value_t = 2000)]
    pub txns: u64,
    /// Physical capacity of the simulated drive, MiB
    #[arg(long, default_value_t = 64)]
    pub capacity_mib: u64,
    #[command(flatten)]
    pub drive: DriveArgs,
    #[arg(long, value_name = "FILE|-")]
    pub json: Option<PathBuf>,
}

#[derive(clap::Args, Debug, Clone)]
pub struct FioArgs {
    #[arg(long, value_enum, value_delimiter = ',', default_value = "xftl,ordered,data")]
    pub mode: Vec<FioMode>,
    /// Pages written between fsyncs, comma-separated
    #[arg(long, value_delimiter = ',', default_value = "1,5,10,15,20")]
    pub pages_per_fsync: Vec<u64>,
    /// Random page writes per point
    #[arg(long, default_value_t = 4000)]
    pub writes: u64,
    /// Size of the file written, MiB
    #[arg(long, default_value_t = 32)]
    pub file_mib: u64,
    #[arg(long, default_value_t = 128)]
    pub capacity_mib: u64,
    #[command(flatten)]
    pub drive: DriveArgs,
    #[arg(long, value_name = "FILE|-")]
    pub json: Option<PathBuf>,
}

#[derive(clap::Args, Debug, Clone)]
pub struct RestartArgs {
    #[arg(long, value_enum, value_delimiter = ',', default_value = "rbj,wal,xftl")]
    pub mode: Vec<SqlMode>,
    /// partsupp transactions (5 pages each) committed before the cut (WAL keeps them in its
    /// log until a checkpoint, every 1,000 pages)
    #[arg(long, default_value_t = 150)]
    pub txns: u64,
    #[arg(long, default_value_t = 128)]
    pub capacity_mib: u64,
    #[command(flatten)]
    pub drive: DriveArgs,
    #[arg(long, value_name = "FILE|-")]
    pub json: Option<PathBuf>,
}

#[derive(clap::Args, Debug, Clone)]
pub struct FlashTortureArgs {
    #[arg(long, value_enum, default_value = "xftl")]
    pub mode: SqlMode,
    /// Simulated power cuts
    #[arg(long, default_value_t = 1000)]
    pub power_cuts: u64,
    /// Seed [default: random, printed]
    #[arg(long)]
    pub seed: Option<u64>,
    /// Run on a drive whose garbage collector may erase the old copy of a page an active
    /// transaction wrote. A negative-control attempt that has not yet failed at this level
    /// (GC rarely hits that window here); the drive's own tests catch the sabotage
    #[arg(long)]
    pub sabotage: bool,
    #[arg(long, value_name = "FILE|-")]
    pub json: Option<PathBuf>,
}

/// One measured point.
#[derive(Serialize, Debug, Clone, Default)]
pub struct FlashResult {
    pub mode: String,
    pub experiment: String,
    pub param: f64,
    /// Simulated host time of the measured phase (on the `clock` model).
    pub sim_ms: f64,
    /// Clock model: "whole" or "nand".
    pub clock: String,
    /// Where `sim_ms` went: host software (system calls, filesystem, block layer), ms.
    pub host_cpu_ms: f64,
    /// Pages crossing the host link, ms.
    pub link_ms: f64,
    /// Waiting in flushes and commits for the write cache to drain, ms.
    pub flush_wait_ms: f64,
    /// Waiting for the drive otherwise (reads, a full cache, write-through writes), ms.
    pub io_wait_ms: f64,
    /// NAND array busy (overlapped with the host or not), ms.
    pub nand_busy_ms: f64,
    pub host_writes: u64,
    pub nand_programs: u64,
    pub nand_erases: u64,
    pub gc_runs: u64,
    pub waf: f64,
    /// Transactions (or, for fio, fsyncs) in the measured phase.
    pub ops: u64,
    /// Operations per simulated second (fio: page writes per second).
    pub per_sec: f64,
    /// Mean valid-page ratio of GC victims in the measured phase.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gc_valid_ratio: Option<f64>,
    /// Restart: drive recovery, filesystem mount and SQLite recovery, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restart: Option<RestartParts>,
}

#[derive(Serialize, Debug, Clone, Copy, Default)]
pub struct RestartParts {
    pub drive_ms: f64,
    pub mount_ms: f64,
    pub sqlite_ms: f64,
}

#[derive(Serialize)]
struct Results<'a> {
    results: &'a [FlashResult],
}

pub fn run(args: &FlashArgs) -> Result<ExitCode> {
    let json = match &args.experiment {
        Experiment::Partsupp(a) => &a.json,
        Experiment::Gc(a) => &a.json,
        Experiment::Fio(a) => &a.json,
        Experiment::Restart(a) => &a.json,
        Experiment::Torture(a) => return torture(a),
    };
    output::check_json_path(json.as_deref())?;
    let results = match &args.experiment {
        Experiment::Partsupp(a) => partsupp(a)?,
        Experiment::Gc(a) => gc(a)?,
        Experiment::Fio(a) => fio(a)?,
        Experiment::Restart(a) => restart(a)?,
        Experiment::Torture(_) => unreachable!("returned above"),
    };
    output::emit(
        json.as_deref(),
        &Results { results: &results },
        &table(&results),
        Human::Stdout,
    )?;
    Ok(ExitCode::SUCCESS)
}

/// The results as a terminal table.
pub fn table(results: &[FlashResult]) -> String {
    let mut out = format!(
        "{:<10} {:<9} {:>6} {:>11} {:>9} {:>10} {:>10} {:>10} {:>9} {:>10} {:>8} {:>7} {:>6} {:>6}\n",
        "experiment",
        "mode",
        "param",
        "sim ms",
        "cpu ms",
        "flush wt",
        "nand ms",
        "per sec",
        "host wr",
        "nand prog",
        "erases",
        "GCs",
        "WAF",
        "GC val"
    );
    for r in results {
        out += &format!(
            "{:<10} {:<9} {:>6} {:>11.1} {:>9.1} {:>10.1} {:>10.1} {:>10.1} {:>9} {:>10} {:>8} {:>7} {:>6.2} {:>6}\n",
            r.experiment,
            r.mode,
            r.param,
            r.sim_ms,
            r.host_cpu_ms,
            r.flush_wait_ms,
            r.nand_busy_ms,
            r.per_sec,
            r.host_writes,
            r.nand_programs,
            r.nand_erases,
            r.gc_runs,
            r.waf,
            r.gc_valid_ratio
                .map(|v| format!("{:.0}%", v * 100.0))
                .unwrap_or_default(),
        );
        if let Some(p) = r.restart {
            out += &format!(
                "{:<10} {:<9} restart: drive {:.1} ms + mount {:.1} ms + SQLite {:.1} ms\n",
                "", r.mode, p.drive_ms, p.mount_ms, p.sqlite_ms
            );
        }
    }
    out
}

impl DriveArgs {
    /// A fresh drive of `capacity_mib` MiB with the paper's geometry and timing on this
    /// clock model.
    fn fresh_drive(&self, capacity_mib: u64) -> Result<Ssd> {
        let mut cfg = SsdConfig::with_capacity_mib(capacity_mib);
        if self.clock == ClockModel::Nand {
            cfg.timing = Timing::nand_only();
        }
        cfg.flush_checkpoints = self.flush_checkpoints;
        Ssd::new(cfg).map_err(|e| anyhow!("making the simulated drive: {e}"))
    }

    fn fs_config(&self, journaling: Journaling) -> FsConfig {
        let mut cfg = FsConfig::with_journaling(journaling);
        if self.clock == ClockModel::Nand {
            cfg.host = HostCosts::none();
        }
        cfg
    }

    fn fresh_fs(&self, capacity_mib: u64, journaling: Journaling) -> Result<FlashFs> {
        FlashFs::format(self.fresh_drive(capacity_mib)?, self.fs_config(journaling))
            .map_err(|e| anyhow!("formatting: {e}"))
    }

    fn clock_name(&self) -> &'static str {
        match self.clock {
            ClockModel::Whole => "whole",
            ClockModel::Nand => "nand",
        }
    }
}

/// Opens the database on the installed filesystem in `mode`.
fn open_db(mode: SqlMode) -> Result<Connection> {
    mode.scheme().connect(Path::new(DB_NAME))
}

/// Counters and clock of the installed drive.
fn drive_now(files: &FlashFiles) -> Result<(Counters, f64)> {
    files.with(|fs| (fs.ssd().counters(), fs.ssd().now_us()))
}

fn point(
    drive: &DriveArgs,
    (mode, experiment, param, ops): (&str, &str, f64, u64),
    before: (Counters, f64),
    after: (Counters, f64),
) -> FlashResult {
    let c = after.0.since(&before.0);
    let sim_ms = (after.1 - before.1) / 1000.0;
    FlashResult {
        mode: mode.to_owned(),
        experiment: experiment.to_owned(),
        param,
        sim_ms,
        clock: drive.clock_name().to_owned(),
        host_cpu_ms: c.host_cpu_us / 1000.0,
        link_ms: c.link_us / 1000.0,
        flush_wait_ms: c.flush_wait_us / 1000.0,
        io_wait_ms: c.io_wait_us / 1000.0,
        nand_busy_ms: c.nand_busy_us / 1000.0,
        host_writes: c.host_writes,
        nand_programs: c.nand_programs,
        nand_erases: c.nand_erases,
        gc_runs: c.gc_runs,
        waf: c.waf(),
        ops,
        per_sec: if sim_ms > 0.0 {
            ops as f64 / (sim_ms / 1000.0)
        } else {
            0.0
        },
        gc_valid_ratio: (c.gc_runs > 0).then(|| c.gc_valid_ratio_sum / c.gc_runs as f64),
        restart: None,
    }
}

/// Installs a fresh filesystem for `mode`, loads partsupp and then (aging the drive) fills
/// `cold_fill` of the space left, less room for the journal or log, with a cold file;
/// returns the connection, ready to measure.
fn partsupp_ready(mode: SqlMode, drive: &DriveArgs, capacity_mib: u64, cold_fill: f64) -> Result<Connection> {
    let files = flash_files()?;
    files.install(drive.fresh_fs(capacity_mib, mode.scheme().journaling)?);
    let conn = open_db(mode)?;
    let mut rng = SmallRng::seed_from_u64(1);
    in_transaction(&conn, || Partsupp { pages: 0 }.set_up(&conn, 0, &mut rng))?;
    if mode.scheme().has_log {
        // Start measuring from a checkpointed log, as a long-running WAL database would be.
        conn.query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(()))?;
    }
    if cold_fill > 0.0 {
        // Room for the mode's own files: a full WAL (1,000 frames), a rollback journal, or
        // nothing beyond the database; and some slack.
        let hot_room = mode.scheme().hot_room_blocks;
        files.with(|fs| {
            let blocks = (fs.free_blocks().saturating_sub(hot_room) as f64 * cold_fill) as u64;
            fill_cold(fs, blocks)
        })??;
    }
    Ok(conn)
}

/// Writes a cold file of `blocks` blocks (aging the drive: it holds valid data GC must keep).
fn fill_cold(fs: &mut FlashFs, blocks: u64) -> Result<()> {
    let id = fs.open("cold.fill", true)?;
    let block = vec![0x5au8; fs.block_size()];
    for b in 0..blocks {
        fs.write(id, b * fs.block_size() as u64, &block)?;
    }
    fs.fsync(id)?;
    Ok(())
}

pub fn partsupp(args: &PartsuppArgs) -> Result<Vec<FlashResult>> {
    let mut results = Vec::new();
    let bar = phase_bar(
        "partsupp",
        (args.mode.len() * args.pages.len()) as u64 * args.txns,
    );
    for &pages in &args.pages {
        for &mode in &args.mode {
            let conn = partsupp_ready(mode, &args.drive, args.capacity_mib, 0.0)?;
            let files = flash_files()?;
            let mut rng = SmallRng::seed_from_u64(pages);
            let before = drive_now(&files)?;
            for _ in 0..args.txns {
                Partsupp { pages }.run(&conn, 0, &mut rng)?;
                bar.inc(1);
            }
            let after = drive_now(&files)?;
            drop(conn);
            results.push(point(
                &args.drive,
                (mode.name(), "partsupp", pages as f64, args.txns),
                before,
                after,
            ));
        }
    }
    bar.finish_and_clear();
    Ok(results)
}

/// Cold-fill fractions of the drive's free logical space, for the GC experiment's search.
fn gc_point(mode: SqlMode, args: &GcArgs, fill: f64, txns: u64) -> Result<FlashResult> {
    let files = flash_files()?;
    let conn = partsupp_ready(mode, &args.drive, args.capacity_mib, fill)?;
    let mut rng = SmallRng::seed_from_u64(7);
    // Warm up until the drive collects garbage steadily.
    let start = drive_now(&files)?;
    let mut warm = 0;
    while drive_now(&files)?.0.since(&start.0).gc_runs < 20 && warm < 20_000 {
        Partsupp { pages: args.pages }.run(&conn, 0, &mut rng)?;
        warm += 1;
    }
    let before = drive_now(&files)?;
    for _ in 0..txns {
        Partsupp { pages: args.pages }.run(&conn, 0, &mut rng)?;
    }
    let after = drive_now(&files)?;
    Ok(point(&args.drive, (mode.name(), "gc", 0.0, txns), before, after))
}

pub fn gc(args: &GcArgs) -> Result<Vec<FlashResult>> {
    let mut results = Vec::new();
    let bar = phase_bar("gc", (args.mode.len() * args.ratios.len()) as u64);
    for &ratio in &args.ratios {
        let target = ratio as f64 / 100.0;
        for &mode in &args.mode {
            // Find the aging (cold fill) that makes victims `target` valid, by bisection on
            // short runs; then measure.
            let (mut lo, mut hi) = (0.0f64, 0.98f64);
            let mut best: Option<(f64, f64)> = None;
            for _ in 0..7 {
                let mid = (lo + hi) / 2.0;
                let probe = gc_point(mode, args, mid, args.txns / 4)?;
                let measured = probe.gc_valid_ratio.unwrap_or(0.0);
                if best.is_none_or(|(_, m)| (m - target).abs() > (measured - target).abs()) {
                    best = Some((mid, measured));
                }
                if measured < target {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            let fill = best.map_or(0.5, |b| b.0);
            let mut r = gc_point(mode, args, fill, args.txns)?;
            r.param = ratio as f64;
            results.push(r);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    Ok(results)
}

pub fn fio(args: &FioArgs) -> Result<Vec<FlashResult>> {
    let mut results = Vec::new();
    let bar = phase_bar(
        "fio",
        (args.mode.len() * args.pages_per_fsync.len()) as u64 * args.writes,
    );
    for &per_fsync in &args.pages_per_fsync {
        for &mode in &args.mode {
            let mut fs = args.drive.fresh_fs(args.capacity_mib, mode.journaling())?;
            let bs = fs.block_size() as u64;
            let blocks = (args.file_mib << 20) / bs;
            if blocks == 0 {
                bail!("--file-mib {} is smaller than one block", args.file_mib);
            }
            let id = fs.open("fio.dat", true)?;
            let mut block = vec![0u8; bs as usize];
            for b in 0..blocks {
                fs.write(id, b * bs, &block)?;
            }
            fs.fsync(id)?;
            let mut rng = SmallRng::seed_from_u64(per_fsync);
            let before = (fs.ssd().counters(), fs.ssd().now_us());
            let mut fsyncs = 0;
            for w in 1..=args.writes {
                rng.fill(&mut block[..64]);
                fs.write(id, rng.random_range(0..blocks) * bs, &block)?;
                if w % per_fsync.max(1) == 0 {
                    fs.fsync(id)?;
                    fsyncs += 1;
                }
                bar.inc(1);
            }
            fs.fsync(id)?;
            let after = (fs.ssd().counters(), fs.ssd().now_us());
            let mut r = point(
                &args.drive,
                (mode.name(), "fio", per_fsync as f64, fsyncs),
                before,
                after,
            );
            r.per_sec = args.writes as f64 / (r.sim_ms / 1000.0);
            results.push(r);
        }
    }
    bar.finish_and_clear();
    Ok(results)
}

pub fn restart(args: &RestartArgs) -> Result<Vec<FlashResult>> {
    let mut results = Vec::new();
    let bar = phase_bar("restart", args.mode.len() as u64);
    for &mode in &args.mode {
        results.push(
            restart_one(mode, args).with_context(|| format!("restart experiment, mode {}", mode.name()))?,
        );
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(results)
}

fn restart_one(mode: SqlMode, args: &RestartArgs) -> Result<FlashResult> {
    let files = flash_files()?;
    let conn = partsupp_ready(mode, &args.drive, args.capacity_mib, 0.0)?;
    let mut rng = SmallRng::seed_from_u64(3);
    for _ in 0..args.txns {
        Partsupp { pages: 5 }.run(&conn, 0, &mut rng)?;
    }
    // Cut the power in the middle of the next commit: after about two thirds of the NAND
    // operations a commit of this mode takes.
    let before = drive_now(&files)?;
    Partsupp { pages: 5 }.run(&conn, 0, &mut rng)?;
    let after = drive_now(&files)?;
    let ops = after.0.since(&before.0);
    let per_commit = ops.nand_programs + ops.nand_reads + ops.nand_erases;
    files.with(|fs| fs.ssd_mut().schedule_power_cut((per_commit * 2 / 3).max(1), 11))?;
    // The cut strikes in this transaction or, if it needed fewer operations, the next one.
    let mut interrupted = false;
    for _ in 0..100 {
        if (Partsupp { pages: 5 }).run(&conn, 0, &mut rng).is_err() {
            interrupted = true;
            break;
        }
    }
    if !interrupted {
        bail!("the power cut did not interrupt a transaction");
    }
    drop(conn);
    let fs = files.take().ok_or_else(|| anyhow!("no filesystem installed"))?;
    let ssd = fs.into_ssd();
    let (ssd, recovery) = ssd.restart().map_err(|e| anyhow!("restarting the drive: {e}"))?;
    let t1 = ssd.now_us();
    // From power-on: on the whole clock the cut may strike in the write cache's backlog,
    // after the host's last command.
    let t0 = t1 - recovery.sim_us;
    let (fs, _mount) = FlashFs::mount(ssd, args.drive.fs_config(mode.scheme().journaling))
        .map_err(|e| anyhow!("mounting after the cut: {e}"))?;
    let t2 = fs.ssd().now_us();
    let base = (fs.ssd().counters(), t0);
    files.install(fs);
    let conn = open_db(mode)?;
    let _: i64 = conn.query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))?;
    let recovered = drive_now(&files)?;
    let t3 = recovered.1;
    crate::sqlite::check_integrity(&conn)?;
    let mut r = point(
        &args.drive,
        (mode.name(), "restart", args.txns as f64, 1),
        base,
        recovered,
    );
    r.restart = Some(RestartParts {
        drive_ms: (t1 - t0) / 1000.0,
        mount_ms: (t2 - t1) / 1000.0,
        sqlite_ms: (t3 - t2) / 1000.0,
    });
    r.per_sec = 0.0;
    Ok(r)
}

/// The torture's drive: small blocks and a cold fill so that garbage collection runs
/// during transactions all the time.
fn torture_drive(sabotage: bool) -> Result<Ssd> {
    let mut cfg = SsdConfig::with_capacity_mib(16);
    cfg.geometry = Geometry {
        pages_per_block: 16,
        blocks: 160,
        ..cfg.geometry
    };
    if sabotage {
        cfg.sabotage = Some(onesync_flash::Sabotage::GcErasesActiveOldCopies);
    }
    Ssd::new(cfg).map_err(|e| anyhow!("making the simulated drive: {e}"))
}

/// A fresh torture drive, formatted, 60% of it taken by a cold file (so GC keeps running).
fn torture_fs(sabotage: bool, config: &FsConfig) -> Result<FlashFs> {
    let mut fs =
        FlashFs::format(torture_drive(sabotage)?, config.clone()).map_err(|e| anyhow!("formatting: {e}"))?;
    let logical = fs.ssd().logical_pages();
    fill_cold(&mut fs, logical * 6 / 10)?;
    Ok(fs)
}

#[derive(Serialize, Default, Debug)]
struct TortureSummary {
    mode: String,
    seed: u64,
    sabotaged: bool,
    power_cuts: u64,
    transfers_acknowledged: u64,
    rollbacks: u64,
    failures: u64,
    first_failure: Option<String>,
}

/// Cuts on one drive before starting over.
const TORTURE_CUTS_PER_DRIVE: u64 = 200;

fn torture(args: &FlashTortureArgs) -> Result<ExitCode> {
    output::check_json_path(args.json.as_deref())?;
    let seed = args.seed.unwrap_or_else(rand::random);
    let mut rng = SmallRng::seed_from_u64(seed);
    let files = flash_files()?;
    let mut summary = TortureSummary {
        mode: args.mode.name().to_owned(),
        seed,
        sabotaged: args.sabotage,
        ..TortureSummary::default()
    };
    let fs_config = || FsConfig {
        // Small dirty limit: transactions reach the drive before their commit.
        dirty_limit_blocks: 1,
        ..FsConfig::with_journaling(args.mode.scheme().journaling)
    };
    let bar = phase_bar("power cuts", args.power_cuts);
    for cut in 1..=args.power_cuts {
        if cut % TORTURE_CUTS_PER_DRIVE == 1 {
            files.install(torture_fs(args.sabotage, &fs_config())?);
        }
        match torture_one(args.mode, &files, &fs_config(), &mut rng) {
            Ok((acked, rollbacks)) => {
                summary.transfers_acknowledged += acked;
                summary.rollbacks += rollbacks;
            }
            Err(e) => {
                summary.failures += 1;
                summary
                    .first_failure
                    .get_or_insert_with(|| format!("power cut {cut}: {e:#}"));
                // Start over on a fresh drive: a broken database would fail every later check.
                files.install(torture_fs(args.sabotage, &fs_config())?);
            }
        }
        summary.power_cuts = cut;
        bar.inc(1);
    }
    bar.finish_and_clear();
    let line = format!(
        "flash torture {}{} (seed {seed}): {} power cuts, {} transfers acknowledged, {} rolled back, {} failure(s){}",
        summary.mode,
        if args.sabotage { " on a sabotaged drive" } else { "" },
        summary.power_cuts,
        summary.transfers_acknowledged,
        summary.rollbacks,
        summary.failures,
        summary.first_failure.as_deref().map(|f| format!(" (first: {f})")).unwrap_or_default(),
    );
    output::emit(args.json.as_deref(), &summary, &line, Human::Stdout)?;
    Ok(if summary.failures > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// One run: transfers (some rolled back) until the power goes, then restart and check.
fn torture_one(
    mode: SqlMode,
    files: &FlashFiles,
    fs_config: &FsConfig,
    rng: &mut SmallRng,
) -> Result<(u64, u64)> {
    let mut acked = Vec::new();
    let mut rolled_back = Vec::new();
    {
        let conn = open_db(mode).context("opening before the cut")?;
        // A tiny page cache: transactions spill pages to the file before COMMIT or ROLLBACK,
        // so the drive sees open transactions (and aborts) while it collects garbage.
        conn.execute_batch("PRAGMA cache_size=2")?;
        bank::set_up(&conn).context("setting up the bank")?;
        let ops = rng.random_range(1..=600u64);
        let seed = rng.random();
        files.with(|fs| fs.ssd_mut().schedule_power_cut(ops, seed))?;
        for n in 0.. {
            let from = rng.random_range(1..=bank::ACCOUNTS);
            let to = (from + rng.random_range(1..bank::ACCOUNTS) - 1) % bank::ACCOUNTS + 1;
            let id = format!("{}.{n}", rng.random::<u32>());
            let amount = rng.random_range(1..=100);
            if rng.random_bool(0.15) {
                // A transfer rolled back: X-FTL aborts whatever of it reached the drive.
                match bank::transfer_rolled_back(&conn, &id, from, to, amount) {
                    Ok(()) => rolled_back.push(id),
                    Err(_) => break,
                }
                continue;
            }
            match bank::transfer_atomically(&conn, &id, from, to, amount) {
                Ok(()) => acked.push(id),
                Err(_) => break,
            }
        }
    }
    let fs = files.take().ok_or_else(|| anyhow!("no filesystem installed"))?;
    let ssd = fs.into_ssd();
    let (ssd, _) = ssd.restart().map_err(|e| anyhow!("restarting the drive: {e}"))?;
    let (fs, _) =
        FlashFs::mount(ssd, fs_config.clone()).map_err(|e| anyhow!("mounting after the cut: {e}"))?;
    files.install(fs);
    let conn = open_db(mode).context("reopening after the cut")?;
    bank::audit(&conn, false, &acked)?;
    bank::check_absent(&conn, &rolled_back)?;
    Ok((acked.len() as u64, rolled_back.len() as u64))
}
