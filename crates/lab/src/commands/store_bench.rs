//! `onesync-lab store-bench`: what one durable commit of the store costs, next to the floor
//! (one pwrite + fdatasync), and how long recovery takes after a long log.

use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use indicatif::ProgressBar;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::loopfs::{FsKind, LoopFs};
use crate::meters::{per, Measurement, Meter};
use crate::output::{self, Human};
use crate::progress::{phase_bar, phase_spinner};
use onesync_store::{FileId, Options, Store};

const MIB: u64 = 1024 * 1024;
const KIB: f64 = 1024.0;
const PAGE_SIZE: u32 = 4096;
/// Pages the commit phases choose among: small enough to stay cached, large enough that
/// consecutive commits rarely hit the same page.
const WORKING_SET_PAGES: u64 = 1024;
const THREADS: u64 = 4;
/// Size of the raw-baseline file, written in full first so the timed loop only overwrites
/// allocated blocks (no allocation or size change for fdatasync to persist).
const RAW_FILE_BYTES: u64 = 64 * MIB;
/// Pages per transaction when filling a store before a phase: large transactions keep
/// setup fast without asking the store for one enormous commit.
const SETUP_PAGES_PER_TXN: u64 = 1024;
/// Log room reserved per single-page commit in the recovery phase: the store counts each
/// record as the slot it occupies (one page), doubled for the jump records between
/// windows, because a full log would force a checkpoint and leave recovery less to replay
/// than asked.
const RECOVERY_LOG_BYTES_PER_RECORD: u64 = 2 * PAGE_SIZE as u64;
const FILE_NAME: &str = "main";

#[derive(clap::Args, Debug)]
#[command(after_long_help = JSON_HELP)]
pub struct StoreBenchArgs {
    /// Run in a fresh subdirectory of PATH (removed afterwards) [default: a fresh temporary
    /// directory under $TMPDIR or /tmp]
    #[arg(long, value_name = "PATH", conflicts_with = "fs")]
    pub dir: Option<PathBuf>,

    /// Run on a fresh filesystem of this kind on a loop device of its own (needs root, the
    /// image goes under $TMPDIR or /tmp) and also report device requests, KiB and flushes
    /// per commit
    #[arg(long, value_enum, value_name = "FS")]
    pub fs: Option<FsKind>,

    /// Size of the sparse loop image for --fs, in MiB
    #[arg(long, value_name = "MIB", default_value_t = 4096, requires = "fs")]
    pub fs_size_mib: u64,

    #[command(flatten)]
    pub emulate: crate::loopfs::EmulateArgs,

    /// Commits in each of the single-thread and 4-thread phases, and pwrite+fdatasync
    /// iterations in the raw baseline
    #[arg(long, value_name = "N", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub commits: u64,

    /// Pages in the store whose recovery is timed (written in large transactions, then
    /// checkpointed)
    #[arg(long, value_name = "N", default_value_t = 65_536,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub recovery_pages: u64,

    /// Single-page commits left in the log after the checkpoint, for recovery to replay
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub recovery_records: u64,

    /// Write the results as one JSON object to FILE, or to stdout with "-" (then nothing
    /// else goes to stdout); see the key list below
    #[arg(long, value_name = "FILE|-")]
    pub json: Option<PathBuf>,

    /// Seed of the page choices, so two runs touch the same pages in the same order
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
}

const JSON_HELP: &str = "\
JSON keys (rates per second of wall time; per-commit values are deltas over the timed loop
divided by the commits made in it):
  page_size                          bytes per page (4096)
  single.commits_per_sec             one thread, one random page of 1024 per commit
  single.flushes_per_commit          from the store's own counters
  single.bytes_per_commit            bytes the store wrote, from its own counters
  threads4.commits_per_sec           4 threads, one store, each on its own 256 pages
  threads4.flushes_per_commit        from the store's own counters
  raw_fdatasync_per_sec              pwrite 4 KiB + fdatasync in a 64 MiB file: the floor
  recovery_ms                        Store::open after the recovery records
  recovery_records_replayed          records that open replayed (the store's own count)
  device (only with --fs), from /sys/block/loopN/stat over the single-thread loop,
  everything the filesystem sent down (journal included):
    fs                               ext4, xfs or btrfs
    write_requests_per_commit        write requests
    kb_per_commit                    KiB (1024 bytes) written
    flushes_per_commit               flush requests
    raw_baseline.*_per_fdatasync     the same three over the raw baseline loop
  ratios.single_vs_raw_fdatasync     single.commits_per_sec / raw_fdatasync_per_sec
  ratios.threads4_vs_single          threads4.commits_per_sec / single.commits_per_sec";

#[derive(Serialize, Debug)]
struct Report {
    page_size: u32,
    single: SingleReport,
    threads4: ThreadsReport,
    raw_fdatasync_per_sec: f64,
    recovery_ms: f64,
    recovery_records_replayed: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    device: Option<DeviceReport>,
    ratios: Ratios,
}

#[derive(Serialize, Debug)]
struct SingleReport {
    commits_per_sec: f64,
    flushes_per_commit: f64,
    bytes_per_commit: f64,
}

#[derive(Serialize, Debug)]
struct ThreadsReport {
    commits_per_sec: f64,
    flushes_per_commit: f64,
}

#[derive(Serialize, Debug)]
struct DeviceReport {
    fs: &'static str,
    write_requests_per_commit: f64,
    kb_per_commit: f64,
    flushes_per_commit: f64,
    raw_baseline: RawDeviceReport,
}

#[derive(Serialize, Debug)]
struct RawDeviceReport {
    write_requests_per_fdatasync: f64,
    kb_per_fdatasync: f64,
    flushes_per_fdatasync: f64,
}

#[derive(Serialize, Debug)]
struct Ratios {
    single_vs_raw_fdatasync: f64,
    threads4_vs_single: f64,
}

pub fn run(args: &StoreBenchArgs) -> Result<()> {
    // Fail before a long run, not after it, when the JSON could not be written anyway.
    output::check_json_path(args.json.as_deref())?;
    // Declared before the work directory so it is dropped (unmounted) after it.
    let loop_fs = output::loop_fs(args.fs, args.fs_size_mib, args.emulate.emulation().as_ref())?;
    let work_dir = output::work_dir("onesync-store-bench-", loop_fs.as_ref(), args.dir.as_deref())?;
    let parent = work_dir.path().parent().map(Path::to_owned).unwrap_or_default();

    let report = measure(args, work_dir.path(), loop_fs.as_ref())?;
    work_dir
        .close()
        .context("removing the benchmark's work directory")?;

    let place = match &loop_fs {
        Some(loop_fs) => loop_fs.describe(),
        None => parent.display().to_string(),
    };
    output::emit(
        args.json.as_deref(),
        &report,
        &render_table(&report, args, &place),
        Human::Stdout,
    )?;
    Ok(())
}

fn measure(args: &StoreBenchArgs, dir: &Path, loop_fs: Option<&LoopFs>) -> Result<Report> {
    let single = bench_single(dir, args.commits, args.seed, loop_fs).context("single-thread phase")?;
    let threads = bench_threads(dir, args.commits, args.seed).context("4-thread phase")?;
    let raw = bench_raw_fdatasync(dir, args.commits, args.seed, loop_fs).context("raw fdatasync baseline")?;
    let recovery = bench_recovery(dir, args.recovery_pages, args.recovery_records, args.seed)
        .context("recovery phase")?;

    let commits = args.commits as f64;
    let single_store = single.store.unwrap_or_default();
    let threads_store = threads.store.unwrap_or_default();
    let single_rate = single.rate(args.commits);
    let threads_rate = threads.rate(args.commits);
    let raw_rate = raw.rate(args.commits);
    let device = match (loop_fs, single.device, raw.device) {
        (Some(loop_fs), Some(single_device), Some(raw_device)) => Some(DeviceReport {
            fs: loop_fs.kind().name(),
            write_requests_per_commit: per(single_device.write_ios as f64, commits),
            kb_per_commit: per(single_device.bytes_written() as f64 / KIB, commits),
            flushes_per_commit: per(single_device.flushes as f64, commits),
            raw_baseline: RawDeviceReport {
                write_requests_per_fdatasync: per(raw_device.write_ios as f64, commits),
                kb_per_fdatasync: per(raw_device.bytes_written() as f64 / KIB, commits),
                flushes_per_fdatasync: per(raw_device.flushes as f64, commits),
            },
        }),
        _ => None,
    };
    Ok(Report {
        page_size: PAGE_SIZE,
        single: SingleReport {
            commits_per_sec: single_rate,
            flushes_per_commit: per(single_store.flushes as f64, commits),
            bytes_per_commit: per(single_store.bytes_written as f64, commits),
        },
        threads4: ThreadsReport {
            commits_per_sec: threads_rate,
            flushes_per_commit: per(threads_store.flushes as f64, commits),
        },
        raw_fdatasync_per_sec: raw_rate,
        recovery_ms: recovery.open_ms,
        recovery_records_replayed: recovery.records_replayed,
        device,
        ratios: Ratios {
            single_vs_raw_fdatasync: per(single_rate, raw_rate),
            threads4_vs_single: per(threads_rate, single_rate),
        },
    })
}

/// One round of what `report --baseline` takes from store-bench, in a fresh temporary
/// directory: the single-thread commit rate, the raw pwrite+fdatasync floor beside it, and
/// the time to recover a log of `recovery_records` records over `recovery_pages` pages.
pub struct StoreRound {
    pub single_per_sec: f64,
    pub raw_per_sec: f64,
    pub recovery_ms: f64,
}

pub fn measure_round(
    commits: u64,
    recovery_pages: u64,
    recovery_records: u64,
    seed: u64,
) -> Result<StoreRound> {
    let work_dir = output::work_dir("onesync-store-bench-", None, None)?;
    let dir = work_dir.path();
    let single = bench_single(dir, commits, seed, None).context("single-thread phase")?;
    let raw = bench_raw_fdatasync(dir, commits, seed, None).context("raw fdatasync baseline")?;
    let recovery = bench_recovery(dir, recovery_pages, recovery_records, seed).context("recovery phase")?;
    work_dir
        .close()
        .context("removing the benchmark's work directory")?;
    Ok(StoreRound {
        single_per_sec: single.rate(commits),
        raw_per_sec: raw.rate(commits),
        recovery_ms: recovery.open_ms,
    })
}

fn bench_options() -> Options {
    Options {
        page_size: PAGE_SIZE,
        ..Options::default()
    }
}

/// (a) One thread, `commits` single-page commits on random pages of the working set.
fn bench_single(dir: &Path, commits: u64, seed: u64, loop_fs: Option<&LoopFs>) -> Result<Measurement> {
    let path = dir.join("single.store");
    let (store, file) = create_filled_store(&path, &bench_options(), WORKING_SET_PAGES)?;
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut page = page_buffer();
    let bar = phase_bar("single", commits);
    let meter = Meter::start(Some(&store), loop_fs)?;
    for commit in 0..commits {
        fill_page(&mut page, commit);
        let mut txn = store.begin();
        txn.write_page(file, rng.random_range(0..WORKING_SET_PAGES), &page)?;
        txn.commit().with_context(|| format!("commit {commit}"))?;
        bar.inc(1);
    }
    let measurement = meter.stop()?;
    bar.finish();
    drop(store);
    remove_store(&path)?;
    Ok(measurement)
}

/// (b) `THREADS` threads sharing one store, each committing single-page transactions on a
/// page range of its own, `commits` in total.
fn bench_threads(dir: &Path, commits: u64, seed: u64) -> Result<Measurement> {
    let path = dir.join("threads.store");
    let (store, file) = create_filled_store(&path, &bench_options(), WORKING_SET_PAGES)?;
    let bar = phase_bar("threads4", commits);
    let meter = Meter::start(Some(&store), None)?;
    thread::scope(|scope| -> Result<()> {
        let workers: Vec<_> = (0..THREADS)
            .map(|thread_index| {
                // Spread the remainder so the shares add up to exactly `commits`.
                let share = commits / THREADS + u64::from(thread_index < commits % THREADS);
                let (store, bar) = (&store, &bar);
                scope.spawn(move || commit_own_pages(store, file, thread_index, share, seed, bar))
            })
            .collect();
        for worker in workers {
            worker.join().map_err(|_| anyhow!("a commit thread panicked"))??;
        }
        Ok(())
    })?;
    let measurement = meter.stop()?;
    bar.finish();
    drop(store);
    remove_store(&path)?;
    Ok(measurement)
}

fn commit_own_pages(
    store: &Store,
    file: FileId,
    thread_index: u64,
    commits: u64,
    seed: u64,
    bar: &ProgressBar,
) -> Result<()> {
    let pages_per_thread = WORKING_SET_PAGES / THREADS;
    let first_page = thread_index * pages_per_thread;
    let mut rng = SmallRng::seed_from_u64(seed.wrapping_add(thread_index));
    let mut page = page_buffer();
    for commit in 0..commits {
        fill_page(&mut page, commit);
        let mut txn = store.begin();
        txn.write_page(file, first_page + rng.random_range(0..pages_per_thread), &page)?;
        txn.commit()
            .with_context(|| format!("thread {thread_index}, commit {commit}"))?;
        bar.inc(1);
    }
    Ok(())
}

/// (c) The floor: one 4 KiB pwrite and one fdatasync per iteration, on blocks written
/// (so allocated) beforehand.
fn bench_raw_fdatasync(
    dir: &Path,
    iterations: u64,
    seed: u64,
    loop_fs: Option<&LoopFs>,
) -> Result<Measurement> {
    let path = dir.join("raw-fdatasync.dat");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .with_context(|| format!("creating {}", path.display()))?;
    let spinner = phase_spinner("raw", "writing the file once");
    let zeros = vec![0u8; MIB as usize];
    for offset in (0..RAW_FILE_BYTES).step_by(zeros.len()) {
        file.write_all_at(&zeros, offset)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    file.sync_data()
        .with_context(|| format!("fdatasync {}", path.display()))?;
    spinner.finish_and_clear();

    let blocks = RAW_FILE_BYTES / u64::from(PAGE_SIZE);
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut block = page_buffer();
    let bar = phase_bar("raw", iterations);
    let meter = Meter::start(None, loop_fs)?;
    for iteration in 0..iterations {
        fill_page(&mut block, iteration);
        let offset = rng.random_range(0..blocks) * u64::from(PAGE_SIZE);
        file.write_all_at(&block, offset)
            .with_context(|| format!("pwrite {}", path.display()))?;
        file.sync_data()
            .with_context(|| format!("fdatasync {}", path.display()))?;
        bar.inc(1);
    }
    let measurement = meter.stop()?;
    bar.finish();
    drop(file);
    fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
    Ok(measurement)
}

struct Recovery {
    open_ms: f64,
    records_replayed: u64,
}

/// (d) Time `Store::open` on a store whose log holds `records` single-page commits past
/// its last checkpoint.
fn bench_recovery(dir: &Path, pages: u64, records: u64, seed: u64) -> Result<Recovery> {
    let defaults = Options::default();
    let log_for_records = records.saturating_mul(RECOVERY_LOG_BYTES_PER_RECORD);
    let opts = Options {
        page_size: PAGE_SIZE,
        // 0: no checkpoint by count, so every record is still in the log at open.
        checkpoint_interval: 0,
        log_capacity: defaults.log_capacity.max(log_for_records),
        // Room for the pages, so that setup does not grow the file step by step (the
        // setup's checkpoint gives the free end back, so this is no room for the records).
        initial_capacity: (pages + 1024) * PAGE_SIZE as u64,
        // A store of `max_growth_step` or more checkpoints to reuse superseded slots
        // before it grows (a space bound the store keeps on purpose), and every record
        // here supersedes a page: with the default, the default store (256 MiB)
        // checkpointed among the records. No bound: they grow the file and stay in the log.
        max_growth_step: u64::MAX,
        ..defaults
    };
    let path = dir.join("recovery.store");
    let (store, file) = create_filled_store(&path, &opts, pages)?;

    let mut rng = SmallRng::seed_from_u64(seed);
    let mut page = page_buffer();
    let bar = phase_bar("records", records);
    let checkpoints_before = store.stats().checkpoints;
    for commit in 0..records {
        fill_page(&mut page, commit);
        let mut txn = store.begin();
        txn.write_page(file, rng.random_range(0..pages), &page)?;
        txn.commit().with_context(|| format!("record {commit}"))?;
        bar.inc(1);
    }
    bar.finish();
    let unasked_checkpoints = store.stats().checkpoints.saturating_sub(checkpoints_before);
    if unasked_checkpoints > 0 {
        eprintln!(
            "onesync-lab: warning: the store checkpointed {unasked_checkpoints} time(s) while the \
             recovery records were written, so recovery_ms covers fewer than {records} records"
        );
    }
    // Dropping without a checkpoint leaves the records for recovery, as a crash would.
    drop(store);

    let spinner = phase_spinner("recovery", "Store::open");
    let started = Instant::now();
    let reopened = Store::open(&path, &opts).context("reopening the store")?;
    let elapsed = started.elapsed();
    spinner.finish_and_clear();
    if reopened.snapshot().file(FILE_NAME).is_none() {
        bail!("the reopened store has lost file {FILE_NAME:?}");
    }
    let records_replayed = reopened.stats().records_replayed;
    if records_replayed != records {
        eprintln!(
            "onesync-lab: warning: recovery replayed {records_replayed} records, not the {records} \
             written after the checkpoint"
        );
    }
    drop(reopened);
    remove_store(&path)?;
    Ok(Recovery {
        open_ms: elapsed.as_secs_f64() * 1000.0,
        records_replayed,
    })
}

/// Creates a store holding one file of `pages` pages, written in large transactions and
/// checkpointed, so the phase that follows starts from a clean log.
fn create_filled_store(path: &Path, opts: &Options, pages: u64) -> Result<(Store, FileId)> {
    let store = Store::create(path, opts).with_context(|| format!("creating store {}", path.display()))?;
    let page = page_buffer();
    let bar = phase_bar("setup", pages);
    let mut txn = store.begin();
    let file = txn.create_file(FILE_NAME)?;
    let mut next_page = 0;
    loop {
        let end = pages.min(next_page + SETUP_PAGES_PER_TXN);
        for page_no in next_page..end {
            txn.write_page(file, page_no, &page)?;
        }
        txn.commit()
            .with_context(|| format!("committing setup pages {next_page}..{end}"))?;
        bar.inc(end - next_page);
        next_page = end;
        if next_page >= pages {
            break;
        }
        txn = store.begin();
    }
    store.checkpoint().context("checkpointing after setup")?;
    bar.finish_and_clear();
    Ok((store, file))
}

fn page_buffer() -> Vec<u8> {
    vec![0x5A; PAGE_SIZE as usize]
}

/// Rewrites every word of the page from `counter`, so each write dirties the whole page:
/// the store carries small changes inside the commit record instead (`embed_limit`), and
/// this benchmark is about whole-page commits.
fn fill_page(page: &mut [u8], counter: u64) {
    for (index, word) in page.chunks_exact_mut(8).enumerate() {
        let value = counter.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ index as u64;
        word.copy_from_slice(&value.to_le_bytes());
    }
}

/// The store may be a file or a directory; it is ours either way.
fn remove_store(path: &Path) -> Result<()> {
    let removed = if path.is_dir() {
        fs::remove_dir_all(path)
    } else {
        fs::remove_file(path)
    };
    removed.with_context(|| format!("removing {}", path.display()))
}

fn render_table(report: &Report, args: &StoreBenchArgs, place: &str) -> String {
    let mut rows: Vec<(&str, String, String)> = vec![
        (
            "single",
            "commits/s".into(),
            format!("{:.0}", report.single.commits_per_sec),
        ),
        (
            "",
            "store flushes/commit".into(),
            format!("{:.3}", report.single.flushes_per_commit),
        ),
        (
            "",
            "store bytes/commit".into(),
            format!("{:.0}", report.single.bytes_per_commit),
        ),
        (
            "threads4",
            "commits/s".into(),
            format!("{:.0}", report.threads4.commits_per_sec),
        ),
        (
            "",
            "store flushes/commit".into(),
            format!("{:.3}", report.threads4.flushes_per_commit),
        ),
        (
            "raw",
            "pwrite+fdatasync/s".into(),
            format!("{:.0}", report.raw_fdatasync_per_sec),
        ),
        (
            "recovery",
            format!("open, {} records replayed, ms", report.recovery_records_replayed),
            format!("{:.1}", report.recovery_ms),
        ),
    ];
    if let Some(device) = &report.device {
        let raw = &device.raw_baseline;
        rows.extend([
            (
                "device",
                "write requests/commit".into(),
                format!("{:.2}", device.write_requests_per_commit),
            ),
            (
                "",
                "KiB written/commit".into(),
                format!("{:.2}", device.kb_per_commit),
            ),
            (
                "",
                "flushes/commit".into(),
                format!("{:.3}", device.flushes_per_commit),
            ),
            (
                "",
                "raw: write requests/fdatasync".into(),
                format!("{:.2}", raw.write_requests_per_fdatasync),
            ),
            (
                "",
                "raw: KiB written/fdatasync".into(),
                format!("{:.2}", raw.kb_per_fdatasync),
            ),
            (
                "",
                "raw: flushes/fdatasync".into(),
                format!("{:.3}", raw.flushes_per_fdatasync),
            ),
        ]);
    }
    rows.extend([
        (
            "ratios",
            "single / raw".into(),
            format!("{:.3}", report.ratios.single_vs_raw_fdatasync),
        ),
        (
            "",
            "threads4 / single".into(),
            format!("{:.3}", report.ratios.threads4_vs_single),
        ),
    ]);

    let label_width = rows.iter().map(|(_, label, _)| label.len()).max().unwrap_or(0);
    let value_width = rows.iter().map(|(_, _, value)| value.len()).max().unwrap_or(0);
    let mut table = format!(
        "store-bench: {} commits of one {}-byte page, in {place}\n",
        args.commits, report.page_size
    );
    for (phase, label, value) in rows {
        table.push_str(&format!(
            "{phase:<10}{label:<label_width$}  {value:>value_width$}\n"
        ));
    }
    table
}
