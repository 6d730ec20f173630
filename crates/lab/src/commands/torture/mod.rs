//! `onesync-lab torture --mode M --power-cuts N [--kills N]`: bank transfers (TPC-B-like, money
//! conserved) under simulated power cuts, and real SIGKILLs.
//!
//! A power cut stops the disk after a random number of I/O calls; every write since the
//! last flush is then lost, kept, or torn at 512-byte sector boundaries, each independently
//! and in a random order (`onesync_store::sim::SimDisk`'s model, one function for both:
//! `sim::apply_unflushed_write`). The database is reopened from what survived
//! and checked: `integrity_check` ok, money conserved, every balance agreeing with the
//! ledger, and every transfer whose COMMIT returned present.
//!
//! * Schemes on a plain SQLite file run over [`SimFs`] (`sim/power_cut_files.rs`), a
//!   simulated disk of files served through this project's VFS, with
//!   `locking_mode=EXCLUSIVE` (one connection; WAL then keeps its index in memory). File
//!   creation and deletion are durable at once: the simulation is about data blocks, as
//!   SQLite's own assumptions are (with `synchronous=FULL` it does not sync the directory
//!   after deleting a journal).
//! * A scheme on a onesync store runs the onesync VFS over a store on a `SimDisk`.
//! * Kills are `vfs-kill-torture` with the mode's child.
//!
//! The FULL modes promise every acknowledged transfer. onesync at `synchronous=NORMAL` and
//! `OFF` promises less at a power cut (`deferred.rs`): a prefix of the acknowledged
//! transfers, holding every one the store reported durable; their runs last a random time,
//! so that cuts fall anywhere against the background flush (`timed_cut.rs`), and the loss
//! window (how old the oldest transfer a cut took back was) is measured and, at NORMAL, held
//! to the flush interval plus a slack. A kill still loses nothing. (Their seed fixes the
//! transfers and each cut's plan, not how the flusher thread's calls interleave with them, so
//! such a run does not replay exactly.)
//!
//! With `--fs` and `--emulate` the cuts are real instead (`kernel_torture.rs`): transfer
//! processes on a real filesystem on an emulated device whose power is cut.

pub mod args;
pub mod deferred;
mod timed_cut;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use onesync_store::sim::SimDisk;
use onesync_store::{Options, Sabotage, Store};
use rand::rngs::SmallRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use rusqlite::{Connection, OpenFlags};
use serde::Serialize;

use crate::commands::kernel_torture;
use crate::commands::vfs_kill_torture::{self, ChildKind, KillTortureArgs, OFF_FLUSH_ONE_IN};
use crate::output::{self, Human};
use crate::progress::{log_every, phase_bar};
use crate::schemes::{apply_pragmas, DeferredFlush, Scheme, Storage};
use crate::sim::power_cut_files::SimFs;
use crate::workloads::bank;
pub use args::{NegativeControl, TortureArgs};
use deferred::{Ack, LossWindowSummary, LossWindows};
use timed_cut::CutClock;

/// VFS names of the two simulations.
const SIM_FILES_VFS: &str = "onesync-sim-files";
const SIM_STORE_VFS: &str = "onesync-sim-store";
/// Largest number of I/O calls a run gets before its cut (about a few dozen transfers).
const MAX_CALLS_BEFORE_CUT: u64 = 400;
/// Cuts on one database before starting over on a fresh one (every cut copies the medium's
/// image, so a database that grew over thousands of cuts would make each cut slower).
const CUTS_PER_DATABASE: u64 = 250;
/// Longest run of the deferred modes before its cut: a few flush intervals, so that cuts
/// fall before, during and after the background flushes.
const MAX_DEFERRED_RUN: Duration = Duration::from_millis(80);
/// Longest pause between two transfers of a deferred run, one picked per run: from
/// back-to-back commits (many per flush) to a few per flush interval.
const DEFERRED_PAUSES_MICROS: [u64; 4] = [0, 200, 2_000, 8_000];

#[derive(Serialize, Default, Debug)]
struct Summary {
    mode: String,
    seed: u64,
    power_cuts: u64,
    transfers_acknowledged: u64,
    power_cut_failures: u64,
    first_power_cut_failure: Option<String>,
    kills: u64,
    kill_failures: u64,
    /// onesync at NORMAL and OFF: what a cut may take back (absent for the FULL modes).
    #[serde(skip_serializing_if = "Option::is_none")]
    loss_window: Option<LossWindowSummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    negative_control: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    seconds: Option<f64>,
}

pub fn run(args: &TortureArgs) -> Result<ExitCode> {
    let scheme = args.mode.scheme();
    let sabotage = args.negative_control.map(NegativeControl::sabotage);
    if sabotage.is_some() && scheme.storage() != Storage::Store {
        bail!("--negative-control sabotages the onesync store: use a onesync mode");
    }
    if sabotage.is_some() {
        crate::hooks::needs_test_hooks("torture --negative-control")?;
    }
    if args.fs.is_some() {
        return kernel_torture::run(args);
    }
    let seed = args.seed.unwrap_or_else(rand::random);
    let deferred = scheme.deferred_flush();
    let interval = Options::default().deferred_flush_interval;
    let mut losses = LossWindows::new(
        (deferred == Some(DeferredFlush::Background))
            .then(|| interval + Duration::from_millis(args.loss_window_slack_ms)),
    );
    let mut summary = Summary {
        // The mode's Debug name lowercased (`walnormal`, not `wal-normal`), as the JSON has
        // always said.
        mode: format!("{:?}", args.mode).to_lowercase(),
        seed,
        negative_control: args.negative_control.map(NegativeControl::name),
        ..Summary::default()
    };
    let started = Instant::now();
    let mut rng = SmallRng::seed_from_u64(seed);
    let sim = Sim::new(scheme, sabotage)?;
    let bar = phase_bar("power cuts", args.power_cuts);
    let log_every = log_every(args.power_cuts);
    for cut in 1..=args.power_cuts {
        if cut % CUTS_PER_DATABASE == 0 {
            sim.start_over();
        }
        let outcome = match deferred {
            Some(flush) => sim.one_deferred_cut(cut, flush, &mut rng, &mut losses),
            None => sim.one_cut(cut, &mut rng),
        };
        match outcome {
            Ok(acked) => summary.transfers_acknowledged += acked,
            Err(e) => {
                summary.power_cut_failures += 1;
                summary.first_power_cut_failure = Some(format!("power cut {cut}: {e:#}"));
                break;
            }
        }
        summary.power_cuts = cut;
        bar.inc(1);
        if log_every.is_some_and(|every| cut % every == 0) {
            let window = match deferred {
                Some(_) => format!(", loss window max {:.2} ms", losses.max_ms()),
                None => String::new(),
            };
            eprintln!(
                "torture {}: {cut} of {} power cuts, {} transfers acknowledged{window}, {:.0} s",
                args.mode.name(),
                args.power_cuts,
                summary.transfers_acknowledged,
                started.elapsed().as_secs_f64()
            );
        }
    }
    bar.finish_and_clear();
    if deferred.is_some() {
        let window = losses.summary(interval);
        if window.cuts_over_bound > 0 && summary.power_cut_failures == 0 {
            summary.power_cut_failures = 1;
            summary.first_power_cut_failure = Some(format!(
                "{} cut(s) took back a transfer acknowledged more than {:.1} ms before (the \
                 flush interval plus the slack); the largest loss window was {:.2} ms",
                window.cuts_over_bound,
                window.bound_ms.unwrap_or_default(),
                window.max_ms
            ));
        }
        summary.loss_window = Some(window);
    }
    if args.kills > 0 {
        let kill_args = KillTortureArgs {
            kills: args.kills,
            seed: Some(seed),
            dir: None,
            child: ChildKind::for_mode(args.mode),
            threads: 1,
            processes: 1,
            concurrent: false,
            min_delay_ms: 1,
            max_delay_ms: 80,
            json: None,
            report_to_stderr: true,
        };
        summary.kills = args.kills;
        if !vfs_kill_torture::passes(&kill_args)? {
            summary.kill_failures = 1;
        }
    }
    if deferred.is_some() || sabotage.is_some() {
        summary.seconds = Some(started.elapsed().as_secs_f64());
    }
    let failed = summary.power_cut_failures + summary.kill_failures > 0;
    let line = format!(
        "torture {}{} (seed {seed}): {} power cuts, {} transfers acknowledged before them, {} \
         failure(s){}{}; {} kills, {} failure(s){}",
        summary.mode,
        summary
            .negative_control
            .map(|control| format!(" with the negative control {control}"))
            .unwrap_or_default(),
        summary.power_cuts,
        summary.transfers_acknowledged,
        summary.power_cut_failures,
        summary
            .first_power_cut_failure
            .as_deref()
            .map(|f| format!(" (first: {f})"))
            .unwrap_or_default(),
        summary
            .loss_window
            .as_ref()
            .map(|window| format!("; {}", window.text("no flush timer at synchronous=OFF")))
            .unwrap_or_default(),
        summary.kills,
        summary.kill_failures,
        summary
            .seconds
            .map(|seconds| format!("; {seconds:.1} s"))
            .unwrap_or_default(),
    );
    output::emit(args.json.as_deref(), &summary, &line, Human::Stdout)?;
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// One torture run: a scheme on its simulated medium.
struct Sim {
    scheme: &'static dyn Scheme,
    medium: Medium,
    /// A store's cuts at a moment, and when they came.
    clock: Arc<CutClock>,
}

/// The simulated medium of a scheme: files for a plain SQLite file, a disk for a store.
enum Medium {
    Files(Arc<SimFs>),
    Store { disk: Arc<Mutex<SimDisk>>, vfs: String },
}

impl Sim {
    fn new(scheme: &'static dyn Scheme, sabotage: Option<Sabotage>) -> Result<Sim> {
        #[cfg(not(feature = "test-hooks"))]
        let _ = sabotage; // always None: `run` refuses a negative control without the hooks
        let api = onesync_vfs::api_table_from_sys!(rusqlite::ffi);
        let clock = Arc::new(CutClock::default());
        if scheme.storage() == Storage::Store {
            let disk = Arc::new(Mutex::new(SimDisk::new()));
            let medium = disk.clone();
            let stores_clock = clock.clone();
            let opener: onesync_vfs::StoreOpener =
                Arc::new(move |_path: &Path, opts: &Options, create: bool| {
                    // A small medium: every power cut copies its image.
                    let opts = &Options {
                        initial_capacity: 1 << 20,
                        growth_step: 1 << 20,
                        #[cfg(feature = "test-hooks")]
                        sabotage: sabotage.or(opts.sabotage),
                        ..opts.clone()
                    };
                    let disk = lock(&medium);
                    let io = stores_clock.io(disk.clone());
                    if disk.image().is_empty() && create {
                        Store::create_with_io(io, opts)
                    } else {
                        Store::open_with_io(io, opts)
                    }
                });
            // A VFS per simulated disk (a VFS lives for the rest of the process).
            let vfs = format!("{SIM_STORE_VFS}-{}", Arc::as_ptr(&disk) as usize);
            onesync_vfs::register_with(
                &api,
                onesync_vfs::RegisterOptions {
                    name: vfs.clone(),
                    make_default: false,
                    main_db: Box::new(onesync_vfs::StoreFactory::with_opener(api, opener)),
                    memory_journals: true,
                    files: None,
                },
            )
            .map_err(|e| anyhow!("registering the simulated-store VFS: {e}"))?;
            return Ok(Sim {
                scheme,
                medium: Medium::Store { disk, vfs },
                clock,
            });
        }
        let fs = Arc::new(SimFs::default());
        onesync_vfs::register_with(
            &api,
            onesync_vfs::RegisterOptions {
                name: format!("{SIM_FILES_VFS}-{}", fs_id(&fs)),
                make_default: false,
                main_db: Box::new(onesync_vfs::PassThroughFactory),
                memory_journals: false,
                files: Some(fs.clone()),
            },
        )
        .map_err(|e| anyhow!("registering the simulated-files VFS: {e}"))?;
        Ok(Sim {
            scheme,
            medium: Medium::Files(fs),
            clock,
        })
    }

    /// The path the database is known by inside the simulation (never touched on disk).
    fn path(&self) -> PathBuf {
        std::env::temp_dir()
            .join("onesync-sim")
            .join(self.scheme.database_file("bank"))
    }

    fn open(&self) -> Result<Connection> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = match &self.medium {
            Medium::Files(fs) => {
                let vfs = format!("{SIM_FILES_VFS}-{}", fs_id(fs));
                let conn = Connection::open_with_flags_and_vfs(self.path(), flags, vfs.as_str())?;
                conn.execute_batch("PRAGMA locking_mode=EXCLUSIVE")?;
                conn
            }
            Medium::Store { vfs, .. } => {
                Connection::open_with_flags_and_vfs(self.path(), flags, vfs.as_str())?
            }
        };
        apply_pragmas(&conn, self.scheme.pragmas())?;
        Ok(conn)
    }

    /// An empty medium (the next open creates the database again).
    fn start_over(&self) {
        match &self.medium {
            Medium::Files(fs) => fs.clear(),
            Medium::Store { disk, .. } => *lock(disk) = SimDisk::new(),
        }
    }

    fn arm(&self, calls: u64) {
        match &self.medium {
            Medium::Files(fs) => fs.cut_after(calls),
            Medium::Store { disk, .. } => lock(disk).cut_after(calls),
        }
    }

    fn cut(&self, rng: &mut SmallRng) {
        match &self.medium {
            Medium::Files(fs) => fs.power_cut(rng),
            Medium::Store { disk, .. } => {
                let mut disk = lock(disk);
                let survived = disk.power_cut(rng);
                *disk = survived;
            }
        }
    }

    /// One run: transfers until the power goes, then reopen and check. Returns the number
    /// of transfers acknowledged in the run.
    fn one_cut(&self, cut: u64, rng: &mut SmallRng) -> Result<u64> {
        let mut acked = Vec::new();
        let calls = rng.random_range(1..=MAX_CALLS_BEFORE_CUT);
        {
            let conn = self.open().context("opening before the cut")?;
            bank::set_up(&conn).context("setting up the bank")?;
            self.arm(calls);
            for n in 0.. {
                let (from, to, amount) = bank::random_transfer(rng);
                let id = format!("{cut}.{n}");
                match bank::transfer_atomically(&conn, &id, from, to, amount) {
                    Ok(()) => acked.push(id),
                    Err(_) => break,
                }
            }
        }
        self.cut(rng);
        let conn = self.open().context("reopening after the cut")?;
        bank::audit(&conn, true, &acked)?;
        // Earlier runs' transfers are checked by conservation and the ledger; this run's
        // acknowledged ones by name.
        Ok(acked.len() as u64)
    }

    /// One run of a deferred mode (onesync at NORMAL or OFF): transfers, each followed by
    /// `PRAGMA onesync_commit` (its seq, and how far the store is durable), until the power
    /// goes after a random number of calls or a random time; then reopen and check the
    /// deferred contract. Returns the number of transfers acknowledged in the run.
    fn one_deferred_cut(
        &self,
        cut: u64,
        flush: DeferredFlush,
        rng: &mut SmallRng,
        losses: &mut LossWindows,
    ) -> Result<u64> {
        let calls = rng.random_range(1..=MAX_CALLS_BEFORE_CUT);
        let run_for = Duration::from_micros(rng.random_range(0..=MAX_DEFERRED_RUN.as_micros() as u64));
        let max_pause = DEFERRED_PAUSES_MICROS.choose(rng).copied().unwrap_or(0);
        let mut acks = Vec::new();
        let mut in_flight = None;
        let mut durable_seen = 0;
        self.clock.restart();
        {
            let conn = self.open().context("opening before the cut")?;
            bank::set_up(&conn).context("setting up the bank")?;
            // The setup and what earlier runs left are durable before the power can go: the
            // contract is about this run's transfers.
            crate::sqlite::onesync_flush(&conn).context("making the setup durable")?;
            self.arm(calls);
            self.clock.arm(Instant::now() + run_for);
            for n in 0.. {
                let (from, to, amount) = bank::random_transfer(rng);
                let id = format!("{cut}.{n}");
                if bank::transfer_atomically(&conn, &id, from, to, amount).is_err() {
                    in_flight = Some(id);
                    break;
                }
                let at = Instant::now();
                let point = crate::sqlite::commit_point(&conn);
                let seq = point.as_ref().ok().and_then(|p| p.seq);
                acks.push(Ack { id, seq, at });
                let Ok(point) = point else { break };
                durable_seen = durable_seen.max(point.durable_seq);
                if flush == DeferredFlush::OnDemand && rng.random_ratio(1, OFF_FLUSH_ONE_IN) {
                    match crate::sqlite::onesync_flush(&conn) {
                        Ok(durable) => durable_seen = durable_seen.max(durable),
                        Err(_) => break,
                    }
                }
                if max_pause > 0 {
                    std::thread::sleep(Duration::from_micros(rng.random_range(0..=max_pause)));
                }
            }
        }
        self.clock.disarm();
        // A run that stopped on something else than the power closed its store, which made
        // everything durable: then nothing may be missing, whatever moment is taken.
        let cut_at = self.clock.cut_at().unwrap_or_else(Instant::now);
        self.cut(rng);
        let conn = self.open().context("reopening after the cut")?;
        bank::audit(&conn, true, &[])
            .context("the setup was reported durable (PRAGMA onesync_flush) before the cut")?;
        let loss = deferred::check(&conn, &acks, in_flight.as_deref(), durable_seen, cut_at)?;
        losses.add(&loss);
        Ok(acks.len() as u64)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn fs_id(fs: &Arc<SimFs>) -> usize {
    Arc::as_ptr(fs) as usize
}
