//! `onesync-lab torture --fs ext4|xfs|btrfs --emulate PRESET --mode M --power-cuts N`: power cuts
//! through the real kernel. A real filesystem lives on an emulated device with a volatile
//! write cache (`onesync-device`, a FUSE file under a loop device); transfer processes (the
//! `vfs-kill-torture` child, which prints a line after every COMMIT that returned) run bank
//! transfers on a database in it, and the device's power is cut, either at a random moment or
//! as the n-th flush of the round arrives. Each cached write is then lost, kept or torn, and
//! every request fails with EIO until the power comes back.
//!
//! After each cut: the children are killed (they are failing on EIO anyway) and what they
//! acknowledged is collected; the dead filesystem is unmounted with the power still off (so
//! that nothing the kernel still holds of it can reach the image the cut left); the power
//! comes back; a mount replays the filesystem's log and an unmount leaves it clean; the
//! filesystem's checker runs read-only (any complaint is a failure); the filesystem is
//! mounted again and the database is checked: `integrity_check` ok, money conserved, every
//! balance agreeing with the ledger, and every transfer acknowledged on this database present.
//! The survivor is the next round's starting point.
//!
//! onesync at `synchronous=NORMAL` and `OFF` promises less (`torture/deferred.rs`): its
//! children print each transfer's store seq and the store's `durable_seq` with it, and what
//! survives of a round's acknowledged transfers must be a prefix of them in seq order holding
//! every one at or below a `durable_seq` reported before the cut; the survivors then bind as
//! above. Its loss window (from the line of the oldest transfer taken back to the cut, as the
//! parent saw both) is reported, not held to a bound: here a flush takes the device's time.
//!
//! Why an acknowledgement binds: after the cut the device fails every request, so a COMMIT
//! whose flush came after the cut cannot return success. A transfer acknowledged at all had
//! its flush completed before the cut, unless its scheme does not flush what it must (which
//! is what the negative controls `off` and `memory` show: they have to fail).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use onesync_device::{CutOutcome, DeviceModel, EmulatedDevice};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::commands::torture::args::TortureArgs;
use crate::commands::torture::deferred::{self, Ack, LossWindowSummary, LossWindows};
use crate::commands::vfs_kill_torture::{ChildKind, RunningChild};
use crate::loopfs::{self, free_bytes, CutDamage, Emulation, FsKind, LoopFs};
use crate::output::{self, Human};
use crate::progress::phase_bar;
use crate::schemes::Mode;
use crate::workloads::bank;

const MIB: u64 = 1 << 20;
/// How long a flush-boundary round waits for its n-th flush before cutting anyway (the
/// children may have flushed less than in the round that counted them).
const FLUSH_WAIT: Duration = Duration::from_secs(3);
/// How often the parent looks at the children and the power while it waits for the cut.
const POLL: Duration = Duration::from_millis(2);
/// The database's directory in the filesystem.
const WORK_DIR: &str = "torture";

/// The image each filesystem gets unless `--fs-size-mib` says otherwise: small, so that the
/// checker and the log replay after each cut are quick, but with room for a onesync store,
/// which writes 64 MiB of page slots when it is created and grows 64 MiB at a time (and by a
/// step each time two processes open it together: crates/lab/README.md, "A onesync round
/// spends most of its time growing the store").
const DEFAULT_SIZE_MIB: u64 = 512;
/// A fresh database is made when the filesystem has less free than this: room for two
/// growth steps of a onesync store in one round, and some.
const FRESH_DATABASE_BELOW_FREE: u64 = 160 * MIB;

#[derive(Serialize, Debug, Default)]
struct Summary {
    mode: String,
    fs: String,
    /// The emulated device's preset (or "custom").
    device: String,
    /// The PRAGMA synchronous the mode ran with, if not its own.
    synchronous: Option<String>,
    /// btrfs only: the database's files were NOCOW (overwritten in place).
    nodatacow: bool,
    seed: u64,
    processes: u64,
    max_delay_ms: u64,
    power_cuts_requested: u64,
    power_cuts: u64,
    /// Cut at a random moment, 0 to `max_delay_ms` after the children started.
    random_cuts: u64,
    /// Cut as the n-th flush of the round arrived, n = 1, 2, ... `flushes_per_round`.
    flush_boundary_cuts: u64,
    /// Flush-boundary rounds whose n-th flush never came: cut at the wait's end instead
    /// (counted among the random cuts).
    flush_waits_timed_out: u64,
    /// Flushes the device received in the first round (a random cut at `max_delay_ms`):
    /// the range the flush-boundary cuts sweep.
    flushes_per_round: u64,
    /// The largest n a flush-boundary cut was armed at.
    max_flush_boundary: u64,
    transfers_acknowledged: u64,
    /// Databases used (a fresh one every `cuts_per_database` cuts, or when the filesystem
    /// runs low on space).
    databases: u64,
    /// Of those, made because the filesystem ran low on space.
    fresh_databases_for_space: u64,
    ledger_rows_at_last_check: u64,
    failures: u64,
    first_failure: Option<String>,
    fsck_complaints: u64,
    /// Children that ended on their own after the cut (on an I/O error), not by the kill.
    children_ended_by_io_error: u64,
    lazy_unmounts: u64,
    cached_writes: CutTotals,
    seconds: f64,
    /// Of the cuts whose checks passed (a failing round stops early).
    seconds_per_cut: f64,
    max_seconds_per_cut: f64,
    /// From starting the children to the cut.
    workload_seconds_per_cut: f64,
    /// From the cut to the end of the database's check (unmount, log replay, checker, mount,
    /// audit).
    recovery_seconds_per_cut: f64,
    /// Where the failed database or image was saved.
    kept: Option<String>,
    /// onesync at NORMAL and OFF: what a cut may take back (absent for the FULL modes).
    #[serde(skip_serializing_if = "Option::is_none")]
    loss_window: Option<LossWindowSummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    negative_control: Option<&'static str>,
    /// The children's connections were opened with concurrent=1.
    concurrent: bool,
}

impl Summary {
    /// Counts cut number `cut`, made by `plan` (`timed_out`: its flush never came, so it was
    /// made at the wait's end and counts as a random one).
    fn count_cut(&mut self, cut: u64, plan: CutPlan, timed_out: bool) {
        self.power_cuts = cut;
        match plan {
            CutPlan::AtFlush(n) if !timed_out => {
                self.flush_boundary_cuts += 1;
                self.max_flush_boundary = self.max_flush_boundary.max(n);
            }
            CutPlan::AtFlush(_) => {
                self.flush_waits_timed_out += 1;
                self.random_cuts += 1;
            }
            CutPlan::After(_) => self.random_cuts += 1,
        }
    }
}

/// What the cuts did to the device's cached writes, summed.
#[derive(Serialize, Debug, Default, Clone, Copy)]
pub struct CutTotals {
    pub cached: u64,
    pub lost: u64,
    pub kept: u64,
    pub torn: u64,
}

impl CutTotals {
    pub fn add(&mut self, cut: CutOutcome) {
        self.cached += cut.cached;
        self.lost += cut.lost;
        self.kept += cut.kept;
        self.torn += cut.torn;
    }
}

/// When a round's power cut comes.
#[derive(Clone, Copy, Debug)]
enum CutPlan {
    /// This long after the children start.
    After(Duration),
    /// As the n-th flush from the children's start arrives.
    AtFlush(u64),
}

/// A broken promise: the run stops at the first. (Anything else that goes wrong, such as a
/// mount that will not go away, is an error of the harness and ends the run as an error.)
struct Failure {
    what: String,
    /// The filesystem is mounted and holds the database as the check found it.
    mounted: bool,
}

fn broken(mounted: bool, what: impl Into<String>) -> Failure {
    Failure {
        what: what.into(),
        mounted,
    }
}

/// One round's figures.
struct Round {
    acknowledged: u64,
    ended_by_io_error: u64,
    workload: Duration,
    lazy_unmount: bool,
    flushes_before_cut: u64,
    cut: CutOutcome,
    /// The flush wait ran out and the cut was made at its end.
    timed_out: bool,
}

pub fn run(args: &TortureArgs) -> Result<ExitCode> {
    let kind = args.fs.ok_or_else(|| anyhow!("the kernel torture needs --fs"))?;
    let emulation = args.emulate.emulation().ok_or_else(|| {
        anyhow!("--fs cuts the power of an emulated device: add --emulate PRESET (e.g. --emulate nvme)")
    })?;
    if args.nodatacow && kind != FsKind::Btrfs {
        bail!("--nodatacow is for --fs btrfs (ext4 and xfs overwrite in place anyway)");
    }
    if args.kills > 0 {
        bail!("--kills runs with the simulated torture only (without --fs)");
    }
    let child = child_for(args.mode)?;
    if args.concurrent {
        child.concurrent_scheme()?;
    }
    output::check_json_path(args.json.as_deref())?;
    if let Some(reason) = onesync_device::unavailable_reason() {
        bail!("{reason}");
    }
    loopfs::check_prerequisites(kind)?;
    let (checker, _) = kind.checker();
    // The checker ships in the same package as mkfs.
    loopfs::require_program(checker, kind.package())?;
    loopfs::require_program("blockdev", "util-linux")?;
    let size_mib = args.fs_size_mib.unwrap_or(DEFAULT_SIZE_MIB);
    let size = size_mib
        .checked_mul(MIB)
        .ok_or_else(|| anyhow!("--fs-size-mib {size_mib} is too large"))?;
    let seed = args.seed.unwrap_or_else(rand::random);
    let exe = std::env::current_exe().context("finding the onesync binary to run as the child")?;

    eprintln!(
        "torture: {} power cuts of {} {} process(es){} on {kind} ({size_mib} MiB) on {emulation}, seed {seed}",
        args.power_cuts,
        args.processes,
        child.arg(),
        if args.concurrent { " (concurrent=1)" } else { "" },
    );
    let loop_fs = LoopFs::create_seeded(kind, size, Some(&emulation), seed)?;
    let summary = Summary {
        mode: args.mode.name().to_owned(),
        fs: kind.name().to_owned(),
        device: emulation.name.clone(),
        seed,
        processes: args.processes,
        max_delay_ms: args.max_delay_ms,
        power_cuts_requested: args.power_cuts,
        synchronous: args.synchronous.map(|level| level.name().to_owned()),
        nodatacow: args.nodatacow,
        negative_control: args.negative_control.map(|control| control.name()),
        concurrent: args.concurrent,
        ..Summary::default()
    };
    let mut torture = Torture {
        args,
        child,
        emulation,
        exe,
        dir: loop_fs.mount_point().join(WORK_DIR),
        loop_fs,
        rng: SmallRng::seed_from_u64(seed),
        acknowledged: Vec::new(),
        deferred: child.deferred_flush(args.synchronous).is_some(),
        losses: LossWindows::new(None),
        summary,
    };
    let started = Instant::now();
    let outcome = torture.run_all();
    if torture.deferred {
        // The children's stores run with the VFS's default interval.
        let interval = onesync_store::Options::default().deferred_flush_interval;
        torture.summary.loss_window = Some(torture.losses.summary(interval));
    }
    let summary = &mut torture.summary;
    summary.seconds = started.elapsed().as_secs_f64();
    let failure = match outcome {
        Ok(()) => None,
        Err(Stop::Error(error)) => return Err(error),
        Err(Stop::Failed(failure)) => Some(failure),
    };
    if let Some(failure) = &failure {
        summary.failures = 1;
        summary.first_failure = Some(failure.what.clone());
        match keep_evidence(&torture.loop_fs, &torture.dir, failure.mounted) {
            Ok(kept) => torture.summary.kept = Some(kept.display().to_string()),
            Err(error) => eprintln!("torture: could not keep the evidence: {error:#}"),
        }
    }
    let summary = &torture.summary;
    output::emit(args.json.as_deref(), summary, &report(summary), Human::Stdout)?;
    if let Some(first) = &summary.first_failure {
        eprintln!("torture: FAILED: {first}");
        if let Some(kept) = &summary.kept {
            eprintln!("torture: kept in {kept}");
        }
    }
    Ok(if failure.is_some() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The transfer child of `mode`, if it can run on ext4, xfs or btrfs.
fn child_for(mode: Mode) -> Result<ChildKind> {
    let child = ChildKind::for_mode(mode);
    if matches!(child, ChildKind::Maw | ChildKind::BatchAtomic) {
        bail!(
            "--mode {} needs F2FS's atomic writes; --fs offers ext4, xfs and btrfs",
            mode.name()
        );
    }
    Ok(child)
}

/// Why the rounds stopped early.
enum Stop {
    Failed(Failure),
    Error(anyhow::Error),
}

impl From<anyhow::Error> for Stop {
    fn from(error: anyhow::Error) -> Stop {
        Stop::Error(error)
    }
}

struct Torture<'a> {
    args: &'a TortureArgs,
    child: ChildKind,
    emulation: Emulation,
    exe: PathBuf,
    loop_fs: LoopFs,
    /// The database's directory.
    dir: PathBuf,
    rng: SmallRng,
    /// Every transfer acknowledged on the current database (deferred modes: every one that
    /// survived its round's cut).
    acknowledged: Vec<String>,
    /// The children's commits are shown before they are durable (onesync at NORMAL or OFF).
    deferred: bool,
    losses: LossWindows,
    summary: Summary,
}

impl Torture<'_> {
    fn device(&self) -> Result<&EmulatedDevice> {
        self.loop_fs
            .device()
            .ok_or_else(|| anyhow!("the filesystem is not on an emulated device"))
    }

    /// Opens the database as the children do.
    fn open(&self) -> Result<rusqlite::Connection> {
        self.child.open_with(&self.database(), self.args.synchronous)
    }

    fn database(&self) -> PathBuf {
        self.dir.join(self.child.database_name())
    }

    fn run_all(&mut self) -> Result<(), Stop> {
        let bar = phase_bar("power cuts", self.args.power_cuts);
        let max_delay = Duration::from_millis(self.args.max_delay_ms);
        let (mut cut_seconds, mut workload_seconds) = (0.0, 0.0);
        let mut flush_rounds = 0u64;
        // Rounds that ended in a check that passed: the time figures are theirs.
        let mut completed = 0u64;
        let mut outcome = Ok(());
        for cut in 1..=self.args.power_cuts {
            let low_on_space = free_bytes(self.loop_fs.mount_point())? < FRESH_DATABASE_BELOW_FREE;
            if (cut - 1) % self.args.cuts_per_database == 0 || low_on_space {
                self.summary.fresh_databases_for_space += u64::from(low_on_space && cut > 1);
                self.fresh_database()?;
            }
            // The first round counts the flushes of a round that runs the longest a random
            // cut waits; every other round after it cuts at the next flush boundary.
            let plan = if cut == 1 {
                CutPlan::After(max_delay)
            } else if cut % 2 == 0 {
                let n = flush_rounds % self.summary.flushes_per_round.max(1) + 1;
                flush_rounds += 1;
                CutPlan::AtFlush(n)
            } else {
                CutPlan::After(Duration::from_millis(
                    self.rng.random_range(0..=self.args.max_delay_ms),
                ))
            };
            let round_started = Instant::now();
            let round = match self.round(cut, plan) {
                Ok(round) => round,
                Err(stop) => {
                    if let Stop::Failed(_) = stop {
                        // The failing cut was made: it counts (its figures are not summed).
                        self.summary.count_cut(cut, plan, false);
                    }
                    outcome = Err(stop);
                    break;
                }
            };
            completed += 1;
            let seconds = round_started.elapsed().as_secs_f64();
            let summary = &mut self.summary;
            if cut == 1 {
                summary.flushes_per_round = round.flushes_before_cut.max(1);
            }
            summary.count_cut(cut, plan, round.timed_out);
            summary.transfers_acknowledged += round.acknowledged;
            summary.children_ended_by_io_error += round.ended_by_io_error;
            summary.lazy_unmounts += u64::from(round.lazy_unmount);
            summary.cached_writes.add(round.cut);
            summary.max_seconds_per_cut = summary.max_seconds_per_cut.max(seconds);
            cut_seconds += seconds;
            workload_seconds += round.workload.as_secs_f64();
            bar.set_message(format!("{} acknowledged", summary.transfers_acknowledged));
            bar.inc(1);
        }
        bar.finish_and_clear();
        let summary = &mut self.summary;
        if completed > 0 {
            let cuts = completed as f64;
            summary.seconds_per_cut = cut_seconds / cuts;
            summary.workload_seconds_per_cut = workload_seconds / cuts;
            summary.recovery_seconds_per_cut = (cut_seconds - workload_seconds) / cuts;
        }
        outcome
    }

    /// Removes the database (and its journal or log) and makes a fresh one, funded and
    /// durable before any child starts.
    fn fresh_database(&mut self) -> Result<()> {
        if self.dir.exists() {
            fs::remove_dir_all(&self.dir).with_context(|| format!("removing {}", self.dir.display()))?;
        }
        fs::create_dir(&self.dir).with_context(|| format!("making {}", self.dir.display()))?;
        if self.args.nodatacow {
            // Files made in the directory from now on inherit the attribute.
            loopfs::run(Command::new("chattr").arg("+C").arg(&self.dir))?;
        }
        let device = self.device()?;
        device.set_model(DeviceModel::FREE);
        {
            let conn = self.open()?;
            bank::set_up(&conn).context("creating and funding the bank")?;
        }
        // syncfs: the new file, its directory entry and its contents reach the media.
        self.loop_fs.counters()?;
        self.acknowledged.clear();
        self.summary.databases += 1;
        Ok(())
    }

    /// One round: children running transfers, the cut, the recovery and the checks.
    fn round(&mut self, cut: u64, plan: CutPlan) -> Result<Round, Stop> {
        let seeds: Vec<u64> = (0..self.args.processes).map(|_| self.rng.random()).collect();
        let device = self.device()?;
        device.set_model(self.emulation.model);
        let flushes_at_start = device.counters().flushes;
        if let CutPlan::AtFlush(n) = plan {
            device.cut_at_flush(n);
        }
        let started = Instant::now();
        let mut children = Vec::new();
        for (k, seed) in (0..).zip(seeds) {
            let mut command = Command::new(&self.exe);
            command
                .arg("__transfer-child")
                .arg(self.database())
                .args(["--child", &self.child.arg(), "--threads", "1"])
                // Transfer ids carry the cut and the child's number: unique on a database.
                .args(["--run", &(cut * 64 + k).to_string()])
                .args(["--seed", &seed.to_string()]);
            if let Some(level) = self.args.synchronous {
                command.args(["--synchronous", level.name()]);
            }
            if self.args.concurrent {
                command.arg("--concurrent");
            }
            // Refused without the test hooks (`torture::run`).
            #[cfg(feature = "test-hooks")]
            if let Some(control) = self.args.negative_control {
                command.env(onesync_store::Sabotage::ENV, control.name());
            }
            match RunningChild::start(command) {
                Ok(child) => children.push(child),
                Err(error) => {
                    // The power must not stay on with children holding the filesystem.
                    let _ = device.power_cut();
                    stop_all(children);
                    return Err(Stop::Error(error));
                }
            }
        }
        let waited = wait_for_cut(device, plan, started, &mut children);
        // At a flush boundary the device cut itself up to one poll before.
        let cut_at = Instant::now();
        let workload = started.elapsed();
        let flushes_before_cut = device.counters().flushes - flushes_at_start;
        // The cut is made (or the power cut here, on an error) before anything else.
        if device.is_powered() {
            device.power_cut()?;
        }
        let cut_outcome = device.last_cut().unwrap_or_default();

        let mut acknowledged = Vec::new();
        let mut acks = Vec::new();
        let mut durable_seen = 0;
        let mut ended_by_io_error = 0;
        let mut endings = Vec::new();
        let mut first_error = None;
        for child in children {
            match child.stop_and_read() {
                Ok((lines, ended)) => {
                    acknowledged.extend(lines.committed);
                    acks.extend(lines.acks);
                    durable_seen = durable_seen.max(lines.durable_seen);
                    ended_by_io_error += u64::from(ended.is_some());
                    endings.extend(ended);
                }
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        let lazy_unmount = self.loop_fs.power_back_after_cut()?;
        let timed_out = match waited {
            Ok(timed_out) => timed_out,
            Err(mut failure) => {
                failure.what = format!(
                    "{}: {}; how the children ended: {}",
                    describe_cut(cut, plan),
                    failure.what,
                    endings.join(" / ")
                );
                return Err(Stop::Failed(failure));
            }
        };
        if let Some(error) = first_error {
            return Err(Stop::Error(
                error.context("collecting what the children acknowledged"),
            ));
        }
        let count = acknowledged.len() as u64;
        let round_acks = if self.deferred {
            if acks.len() != acknowledged.len() {
                return Err(Stop::Error(anyhow!(
                    "{} of {} transfer lines came without their seq and durable_seq",
                    acknowledged.len() - acks.len(),
                    acknowledged.len()
                )));
            }
            Some(RoundAcks {
                acks,
                durable_seen,
                cut_at,
            })
        } else {
            self.acknowledged.extend(acknowledged);
            None
        };
        self.recover_and_check(cut, plan, round_acks)?;
        Ok(Round {
            acknowledged: count,
            ended_by_io_error,
            workload,
            lazy_unmount,
            flushes_before_cut,
            cut: cut_outcome,
            timed_out,
        })
    }

    /// After the power is back: log replay, checker, mount, audit (and with `round`, the
    /// deferred contract on the round's acknowledged transfers).
    fn recover_and_check(&mut self, cut: u64, plan: CutPlan, round: Option<RoundAcks>) -> Result<(), Stop> {
        let at = describe_cut(cut, plan);
        if let Err(damage) = self.loop_fs.recover_after_cut()? {
            self.summary.fsck_complaints += u64::from(matches!(damage, CutDamage::CheckerComplained(_)));
            return Err(Stop::Failed(broken(false, format!("{at}: {damage}"))));
        }
        let audit = self.open().and_then(|conn| {
            let audit = bank::audit(&conn, true, &self.acknowledged)?;
            let loss = round
                .map(|r| deferred::check(&conn, &r.acks, None, r.durable_seen, r.cut_at))
                .transpose()?;
            Ok((audit, loss))
        });
        match audit {
            Ok((audit, loss)) => {
                self.summary.ledger_rows_at_last_check = audit.ledger_rows;
                if let Some(loss) = loss {
                    self.losses.add(&loss);
                    self.acknowledged.extend(loss.survivors);
                }
            }
            Err(error) => return Err(Stop::Failed(broken(true, format!("{at}: {error:#}")))),
        }
        // Whatever opening the database wrote (a rolled-back journal, a replayed log) is on
        // the media before the next round's clock starts.
        self.loop_fs.counters()?;
        Ok(())
    }
}

/// A deferred round's acknowledged transfers, for the check after its cut.
struct RoundAcks {
    acks: Vec<Ack>,
    /// The largest `durable_seq` the children reported.
    durable_seen: u64,
    cut_at: Instant,
}

/// "cut 12 (at flush 7)" or "cut 13 (after 120 ms)".
fn describe_cut(cut: u64, plan: CutPlan) -> String {
    match plan {
        CutPlan::After(delay) => format!("cut {cut} (after {} ms)", delay.as_millis()),
        CutPlan::AtFlush(n) => format!("cut {cut} (at flush {n})"),
    }
}

/// Waits for the round's cut: makes it after the delay, or waits for the armed flush to make
/// it (making it at the wait's end if it never comes). A child that ends while the power is
/// still on failed on a healthy device: a failure. `Ok(true)` if a flush wait timed out.
fn wait_for_cut(
    device: &EmulatedDevice,
    plan: CutPlan,
    started: Instant,
    children: &mut [RunningChild],
) -> Result<bool, Failure> {
    let deadline = started
        + match plan {
            CutPlan::After(delay) => delay,
            CutPlan::AtFlush(_) => FLUSH_WAIT,
        };
    loop {
        // Children first, then the power: a child seen ended while the power is still on
        // ended before the cut.
        let mut ended = false;
        for child in children.iter_mut() {
            ended |= child.has_exited().unwrap_or(false);
        }
        let powered = device.is_powered();
        if ended && powered {
            return Err(broken(
                false,
                format!(
                    "a transfer process ended on its own before the cut ({} ms after the start)",
                    started.elapsed().as_millis()
                ),
            ));
        }
        if !powered {
            return Ok(false);
        }
        let now = Instant::now();
        if now >= deadline {
            if let CutPlan::AtFlush(_) = plan {
                device.disarm();
                // The armed cut may have come between the last look and the disarm.
                return Ok(device.is_powered());
            }
            return Ok(false);
        }
        thread::sleep(POLL.min(deadline - now));
    }
}

/// Kills children after an error, ignoring what they said.
fn stop_all(children: Vec<RunningChild>) {
    for child in children {
        let _ = child.stop_and_read();
    }
}

/// Saves what a failure left for a human: the database's files if the filesystem is
/// mounted, else the whole device image.
fn keep_evidence(loop_fs: &LoopFs, dir: &Path, mounted: bool) -> Result<PathBuf> {
    let kept = tempfile::Builder::new()
        .prefix("onesync-kernel-torture-failed-")
        .tempdir()
        .context("making a directory to keep the failure in")?
        .keep();
    if mounted {
        for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
            let path = entry?.path();
            if let Some(name) = path.file_name() {
                fs::copy(&path, kept.join(name)).with_context(|| format!("copying {}", path.display()))?;
            }
        }
    } else if let Some(device) = loop_fs.device() {
        let image = kept.join("image.img");
        fs::copy(device.image_path(), &image)
            .with_context(|| format!("copying the device's image to {}", image.display()))?;
    }
    Ok(kept)
}

fn report(s: &Summary) -> String {
    let mut synchronous = s
        .synchronous
        .as_ref()
        .map(|level| format!(" --synchronous {level}"))
        .unwrap_or_default();
    if s.nodatacow {
        synchronous.push_str(" --nodatacow");
    }
    let mut text = format!(
        "torture --fs {} --emulate {} --mode {}{synchronous} (seed {}, {} process(es), random cuts 0-{} ms after the start)\n",
        s.fs, s.device, s.mode, s.seed, s.processes, s.max_delay_ms
    );
    let mut row = |label: &str, value: String| text.push_str(&format!("  {label:<24} {value}\n"));
    row(
        "power cuts",
        format!(
            "{} of {}: {} at a random moment, {} at a flush boundary (n = 1..{} of {} flushes per round; {} waits for the flush timed out)",
            s.power_cuts,
            s.power_cuts_requested,
            s.random_cuts,
            s.flush_boundary_cuts,
            s.max_flush_boundary,
            s.flushes_per_round,
            s.flush_waits_timed_out
        ),
    );
    row(
        "transfers acknowledged",
        format!(
            "{} on {} database(s) ({} made for want of space; {} ledger rows at the last check)",
            s.transfers_acknowledged, s.databases, s.fresh_databases_for_space, s.ledger_rows_at_last_check
        ),
    );
    row("failures", s.failures.to_string());
    if let Some(control) = s.negative_control {
        row("negative control", format!("{control} (must fail)"));
    }
    if let Some(window) = &s.loss_window {
        row(
            "taken back by the cuts",
            window.text("a flush here takes the emulated device's time"),
        );
    }
    row("fsck complaints", s.fsck_complaints.to_string());
    row(
        "seconds per cut",
        format!(
            "{:.3} (max {:.3}): {:.3} of transfers, {:.3} of unmount, log replay, check, mount and audit",
            s.seconds_per_cut, s.max_seconds_per_cut, s.workload_seconds_per_cut, s.recovery_seconds_per_cut
        ),
    );
    row(
        "cached writes at the cuts",
        format!(
            "{}: {} lost, {} kept, {} torn",
            s.cached_writes.cached, s.cached_writes.lost, s.cached_writes.kept, s.cached_writes.torn
        ),
    );
    row(
        "children ended by EIO",
        format!("{} (the rest were killed)", s.children_ended_by_io_error),
    );
    row("lazy unmounts", s.lazy_unmounts.to_string());
    row("total seconds", format!("{:.1}", s.seconds));
    if let Some(first) = &s.first_failure {
        row("first failure", first.clone());
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schemes::Storage;

    #[test]
    fn f2fs_modes_are_refused_with_the_reason() {
        let error = child_for(Mode::Maw).unwrap_err();
        assert!(error.to_string().contains("F2FS"), "{error}");
        assert!(child_for(Mode::Onesync).is_ok());
        assert_eq!(Mode::Onesync.scheme().storage(), Storage::Store);
    }
}
