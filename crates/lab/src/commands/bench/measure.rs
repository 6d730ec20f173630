//! What `bench WORKLOAD` measures: each mode on a fresh database (or filesystem), its
//! transactions per second, latency and I/O per transaction, and the table. Below the
//! command (`bench.rs`), the headline comparison (`headline.rs`) and the concurrent writers
//! (`writers.rs`), which all run or print these.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use serde::Serialize;

use crate::loopfs::{DevCounters, FsKind, LoopFs};
use crate::meters::io::{DeviceProbe, IoCounters};
use crate::meters::latency::{percentiles, thinned, Latency};
use crate::output::{self, Human};
use crate::progress::{phase_bar, phase_spinner};
use crate::schemes::Mode;
use crate::sqlite::{check_integrity, in_transaction};
use crate::workloads::{dbbench, Params, Workload};

/// Where `bench` and `bench writers` run each mode: a fresh directory, or a fresh
/// filesystem on a loop device (perhaps on an emulated device).
#[derive(clap::Args, Debug, Clone)]
pub struct Place {
    /// Run in a fresh subdirectory of D per mode [default: the system's temporary directory]
    #[arg(long, value_name = "D", conflicts_with = "fs")]
    pub dir: Option<PathBuf>,

    /// Run each mode on a freshly made filesystem of this kind on a loop device, and read
    /// the device's counters (needs root)
    #[arg(long, value_enum, value_name = "FS")]
    pub fs: Option<FsKind>,

    /// Size of each loop image for --fs, in MiB
    #[arg(long, value_name = "MIB", default_value_t = 1024, requires = "fs")]
    pub fs_size_mib: u64,

    #[command(flatten)]
    pub emulate: crate::loopfs::EmulateArgs,
}

impl Place {
    /// One mode's filesystem, if `--fs` asks for one (keep it alive longer than the work
    /// directory made in it: declare it first).
    pub fn loop_fs(&self) -> Result<Option<LoopFs>> {
        output::loop_fs(self.fs, self.fs_size_mib, self.emulate.emulation().as_ref())
    }

    /// One mode's work directory, in `loop_fs` if there is one.
    pub fn work_dir(&self, prefix: &str, loop_fs: Option<&LoopFs>) -> Result<tempfile::TempDir> {
        output::work_dir(prefix, loop_fs, self.dir.as_deref())
    }

    /// "a fresh ext4 on a loop device [on EMULATION] per mode", or `None` without `--fs`.
    pub fn describe(&self) -> Option<String> {
        output::fresh_loop_fs_per_mode(self.fs, self.emulate.emulation())
    }
}

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// What each transaction does; without one, `bench` runs the headline: one-row inserts
    /// on delete, wal, onesync, wal-normal and onesync-normal in a fresh temporary directory
    /// each, 5 rounds of 2000 transactions per mode (seconds where a flush costs 0.1 ms,
    /// about a minute where it costs 1 ms), one table of txn/s,
    /// ratio, bytes and flushes per commit and p99.9 latency
    #[arg(value_enum)]
    pub workload: Workload,

    /// Modes to run, in order (the first is the baseline of the ratios, except that
    /// synchronous=NORMAL and OFF modes are compared with wal-normal when it runs)
    #[arg(long, value_enum, value_delimiter = ',', default_value = "delete,wal,onesync")]
    pub mode: Vec<Mode>,

    /// Measured transactions per mode [default: 10000; the headline: 1000 per mode per round]
    #[arg(long, value_name = "N", default_value_t = 10_000, hide_default_value = true,
          value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub txns: u64,

    #[command(flatten)]
    pub place: Place,

    /// Read this block device's counters (/sys/block/NAME/stat) around each mode's run,
    /// syncing --dir's filesystem first: for a filesystem the lab did not make (in the VM,
    /// `--dir /mnt --device vda`)
    #[arg(long, value_name = "NAME", requires = "dir", conflicts_with = "fs")]
    pub device: Option<String>,

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
    /// The emulated device under the filesystem (preset name), if any.
    pub device: Option<String>,
    pub txns: u64,
    pub tps: f64,
    pub latency_us: Latency,
    pub per_txn: PerTxn,
    /// Sorted commit latencies in microseconds, thinned to at most 500 points (for a CDF).
    #[serde(skip)]
    pub latency_sample_us: Vec<f64>,
}

#[derive(Serialize, Debug, Clone, Copy)]
pub struct PerTxn {
    pub write_calls: f64,
    pub bytes_written: f64,
    pub fsyncs: f64,
    /// KiB of zeros a store's growth steps wrote ahead of the commits that fill them (not
    /// in `bytes_written`); `None` for a plain file.
    pub growth_zeros_kb: Option<f64>,
    pub dev_writes: Option<f64>,
    pub dev_kb: Option<f64>,
    pub dev_flushes: Option<f64>,
    /// The same two as the emulated device counted them (to check against /sys/block).
    pub emulated_kb: Option<f64>,
    pub emulated_flushes: Option<f64>,
}

impl PerTxn {
    /// Over `txns` transactions: the scheme's own counters, the block device's (`--fs`,
    /// `--device`) and the emulated device's (`--emulate`).
    pub fn new(
        txns: u64,
        io: IoCounters,
        dev: Option<DevCounters>,
        emulated: Option<onesync_device::DeviceCounters>,
    ) -> PerTxn {
        let per = |amount: f64| crate::meters::per(amount, txns as f64);
        PerTxn {
            write_calls: per(io.write_calls as f64),
            bytes_written: per(io.bytes_written as f64),
            fsyncs: per(io.syncs as f64),
            growth_zeros_kb: io.growth_zeros.map(|z| per(z as f64 / 1024.0)),
            dev_writes: dev.map(|d| per(d.write_ios as f64)),
            dev_kb: dev.map(|d| per(d.bytes_written() as f64 / 1024.0)),
            dev_flushes: dev.map(|d| per(d.flushes as f64)),
            emulated_kb: emulated.map(|e| per(e.bytes_written as f64 / 1024.0)),
            emulated_flushes: emulated.map(|e| per(e.flushes as f64)),
        }
    }
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

/// The knobs of `args` the workloads take, for dbbench table `table`.
fn params(args: &BenchArgs, table: u64) -> Params {
    Params {
        pages: args.pages,
        searches_per_write: args.searches_per_write,
        table,
    }
}

fn run_mode(args: &BenchArgs, mode: Mode) -> Result<ModeResult> {
    let scheme = mode.scheme();
    // Declared first so it is unmounted after the work directory is gone.
    let loop_fs = args.place.loop_fs()?;
    let work = args.place.work_dir("onesync-bench-", loop_fs.as_ref())?;
    let db = work.path().join(scheme.database_file("bench"));
    let conn = scheme.open(&db)?;
    let workload = args.workload.transactions(params(args, 0));
    let spinner = phase_spinner("setup", mode.name());
    let mut setup_rng = SmallRng::seed_from_u64(0);
    in_transaction(&conn, || workload.set_up(&conn, args.txns, &mut setup_rng))?;
    spinner.finish_and_clear();

    let mut rng = SmallRng::seed_from_u64(args.seed);
    let mut latencies = Vec::with_capacity(args.txns as usize);
    let io_before = IoCounters::sample(&conn, scheme)?;
    let probe = match (&loop_fs, &args.device) {
        (Some(l), _) => Some(DeviceProbe::Loop(l)),
        (None, Some(device)) => Some(DeviceProbe::Named {
            device,
            dir: work.path(),
        }),
        (None, None) => None,
    };
    let dev_before = probe.as_ref().map(DeviceProbe::counters).transpose()?;
    // Right after the probe's sync, so that both count the same requests.
    let emulated_before = loop_fs.as_ref().and_then(LoopFs::device_counters);
    let bar = phase_bar(mode.name(), args.txns);
    let started;
    if args.workload == Workload::Dbbench {
        let start = std::sync::Barrier::new(args.threads as usize + 1);
        let (began, per_thread) = std::thread::scope(|scope| -> Result<_> {
            let workers: Vec<_> = (0..args.threads)
                .map(|t| {
                    let share = args.txns / args.threads + u64::from(t < args.txns % args.threads);
                    let (start, bar, db) = (&start, &bar, &db);
                    let table = if args.shared_table { 0 } else { t % dbbench::TABLES };
                    let workload = args.workload.transactions(params(args, table));
                    let seed = args.seed ^ (t + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                    scope.spawn(move || -> Result<Vec<Duration>> {
                        let opened = scheme.open(db);
                        start.wait();
                        let conn = opened?;
                        let mut rng = SmallRng::seed_from_u64(seed);
                        let mut times = Vec::with_capacity(share as usize);
                        for n in 0..share {
                            let t = Instant::now();
                            workload.run(&conn, n, &mut rng)?;
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
            workload
                .run(&conn, n, &mut rng)
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
    let emulated = match (&loop_fs, emulated_before) {
        (Some(l), Some(before)) => l.device_counters().map(|after| after.delta(&before)),
        _ => None,
    };
    let io = IoCounters::sample(&conn, scheme)?.minus(io_before);
    check_integrity(&conn)?;
    workload.check(&conn)?;
    drop(conn);
    let txns = args.txns as f64;
    Ok(ModeResult {
        mode: mode.name(),
        workload: args.workload,
        // The filesystem whose device was measured (none measured: none named).
        fs: match (&loop_fs, &args.device) {
            (Some(l), _) => Some(l.kind().name()),
            (None, Some(_)) => crate::loopfs::fs_name_of(work.path()),
            (None, None) => None,
        },
        device: loop_fs
            .as_ref()
            .and_then(|l| l.emulation())
            .map(|e| e.name.clone()),
        txns: args.txns,
        tps: txns / elapsed.as_secs_f64(),
        latency_us: percentiles(&mut latencies),
        latency_sample_us: thinned(&latencies),
        per_txn: PerTxn::new(args.txns, io, dev, emulated),
    })
}

/// `r`'s txn/s over its baseline's, and the baseline's mode. The baseline is its durability
/// class's reference mode (wal-normal for NORMAL and OFF) when that is in `results`, else the
/// run's first mode.
pub fn ratio(results: &[ModeResult], r: &ModeResult) -> Option<(f64, &'static str)> {
    Mode::by_name(r.mode)
        .and_then(|mode| mode.scheme().durability().reference())
        .and_then(|reference| results.iter().find(|b| b.mode == reference.name()))
        .or(results.first())
        .map(|b| (r.tps / b.tps, b.mode))
}

/// One line naming each ratio's baseline (which differs by durability class).
fn ratio_note(results: &[ModeResult]) -> String {
    let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
    for r in results {
        let Some((_, base)) = ratio(results, r) else {
            continue;
        };
        match groups.iter_mut().find(|g| g.0 == base) {
            Some(group) => group.1.push(r.mode),
            None => groups.push((base, vec![r.mode])),
        }
    }
    // A baseline other than the first is a class's reference (wal-normal): say why.
    let parts: Vec<String> = groups
        .iter()
        .map(|(base, modes)| {
            let first = results.first().is_some_and(|f| f.mode == *base);
            let why = if first { "" } else { " (the same promise)" };
            format!("against {base}{why} for {}", modes.join(", "))
        })
        .collect();
    format!("(ratio: txn/s {})\n", parts.join("; "))
}

/// How far `measured` is from `reference`, in percent of `reference`.
fn percent_off(measured: f64, reference: f64) -> f64 {
    if reference == 0.0 {
        if measured == 0.0 {
            0.0
        } else {
            f64::INFINITY
        }
    } else {
        (measured - reference) / reference * 100.0
    }
}

pub fn table(args: &BenchArgs, results: &[ModeResult]) -> String {
    let mut out = format!(
        "bench {} ({} transactions per mode, {}):\n",
        args.workload.name(),
        args.txns,
        match (args.place.describe(), &args.device) {
            (Some(place), _) => place,
            (None, Some(device)) => format!("a fresh directory per mode, device {device}"),
            (None, None) => "a fresh directory per mode".to_owned(),
        }
    );
    let width = Mode::name_width();
    out.push_str(&format!(
        "{:<width$} {:>9} {:>6} {:>8} {:>8} {:>9} {:>9} {:>7} {:>9} {:>8} {:>7}",
        "mode", "txn/s", "ratio", "p50 us", "p99 us", "p99.9 us", "writes", "KiB", "zeros KiB", "fsyncs", ""
    ));
    if args.place.fs.is_some() || args.device.is_some() {
        out.push_str(&format!("{:>9} {:>8} {:>9}", "dev wr", "dev KiB", "dev flush"));
    }
    out.push('\n');
    for r in results {
        out.push_str(&format!(
            "{:<width$} {:>9.0} {:>6.2} {:>8.0} {:>8.0} {:>9.0} {:>9.2} {:>7.2} {:>9} {:>8.3} {:>7}",
            r.mode,
            r.tps,
            ratio(results, r).map_or(f64::NAN, |(ratio, _)| ratio),
            r.latency_us.p50,
            r.latency_us.p99,
            r.latency_us.p999,
            r.per_txn.write_calls,
            r.per_txn.bytes_written / 1024.0,
            r.per_txn
                .growth_zeros_kb
                .map_or("-".to_owned(), |z| format!("{z:.2}")),
            r.per_txn.fsyncs,
            ""
        ));
        if let (Some(w), Some(k), Some(f)) = (r.per_txn.dev_writes, r.per_txn.dev_kb, r.per_txn.dev_flushes) {
            out.push_str(&format!("{w:>9.2} {k:>8.2} {f:>9.3}"));
        }
        out.push('\n');
    }
    out.push_str(&ratio_note(results));
    out.push_str("(writes, KiB and fsyncs per transaction; zeros KiB: what a store's growth steps wrote ahead of the commits, apart from KiB; dev: the block device's write requests, KiB and flushes per transaction)\n");
    for r in results {
        if let (Some(dev_kb), Some(dev_flushes), Some(kb), Some(flushes)) = (
            r.per_txn.dev_kb,
            r.per_txn.dev_flushes,
            r.per_txn.emulated_kb,
            r.per_txn.emulated_flushes,
        ) {
            out.push_str(&format!(
                "{}: the emulated device counted {kb:.2} KiB and {flushes:.3} flushes per transaction ({:+.2} % and {:+.2} % of /sys/block's)\n",
                r.mode,
                percent_off(kb, dev_kb),
                percent_off(flushes, dev_flushes)
            ));
        }
    }
    out
}
