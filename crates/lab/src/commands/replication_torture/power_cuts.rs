//! `replication-torture --power-cuts N`: the writers' store loses power while the replica
//! (a directory of the work directory, or the S3 server's, both off the store's device: the
//! remote side keeps everything) does not.
//!
//! On the kernel path the store lives on a real filesystem on an emulated device with a
//! volatile write cache (`LoopFs`, as `torture --fs --emulate`: `kernel_torture.rs`); with
//! `--simulated` in a plain directory, every write of the store logged (`ONESYNC_IO_LOG`,
//! the explorer's `iolog.rs`). Each round:
//! 1. `--writers` writers (their kinds in turn) start on the store;
//! 2. after a random `--min-delay-ms`..`--max-delay-ms` (every other cut: then as soon as
//!    the replica's newest TXID grows, when it is most ahead) the power is cut: the device's (its
//!    cached writes lost, kept or torn, every request failing from then on), or simulated:
//!    every writer SIGKILLed at once (one process group) and the store file rebuilt from its
//!    state at the round's start and the log, each write not yet flushed lost, kept or torn;
//!    the position file, saved without a flush, kept, put back as it was, removed or empty;
//! 3. every writer is killed and its last lines collected; the filesystem is unmounted with
//!    the power off, the power comes back, a mount replays its log, its checker runs
//!    read-only and it is mounted again (`LoopFs::recover_after_cut`);
//! 4. the checks: the recovered store passes `integrity_check` and is consistent; it holds
//!    every commit whose COMMIT returned durable (FULL, concurrent, sync — acknowledged or
//!    past its timeout, which the contract keeps here) and no COMMIT refused before the cut;
//!    the replica has no gap and no duplicate TXID, its restore succeeds, is consistent,
//!    holds every commit reported at or below a `shipped_seq` and every one a sync writer
//!    acknowledged, and is a prefix of the recovered store's log (the shipper ships only
//!    durable commits: the replica never runs ahead of what survived). The NORMAL writers'
//!    commits the cut took back leave the ledger.
//!
//! After the last cut a round of writers runs to a clean close, and the end is the kill
//! mode's (`harness::finish`): the last restore equals the store, no gap.

use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use onesync_device::DeviceModel;
use onesync_ltx::client::ReplicaClient;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::harness::{finish, CutSummary, Replica, ReplicationTortureArgs, Summary};
use super::ledger::{Ledger, Run, RunningWriter};
use super::replica_check::{check_consistent, check_is_prefix, read_tables, ReplicaChecker};
use super::writer::SCHEMA;
use crate::commands::explore::iolog::{Fate, Log};
use crate::commands::explore::remove_side_files;
use crate::loopfs::{self, CutDamage, Emulation, LoopFs};

/// The filesystem's size: room for a small store and its growth.
const FS_SIZE: u64 = 512 << 20;
/// How often the parent reads the writers' lines while it waits for the cut.
const POLL: Duration = Duration::from_millis(2);
/// How long a cut meant to come right after an upload waits for one.
const UPLOAD_WAIT: Duration = Duration::from_secs(2);

/// Where the store lives and how its power is cut.
enum Medium {
    Kernel {
        loop_fs: Box<LoopFs>,
        model: DeviceModel,
    },
    WriteLog(WriteLog),
}

/// The simulated cut's material: the log, the store file and the position file as they
/// were at the round's start.
struct WriteLog {
    log: PathBuf,
    image: Vec<u8>,
    position: Option<Vec<u8>>,
}

struct Cuts<'a> {
    args: &'a ReplicationTortureArgs,
    medium: Medium,
    run: Run,
    replica: &'a Replica,
    scratch: PathBuf,
    rng: SmallRng,
    ledger: Ledger,
    checker: ReplicaChecker,
    next_writer: u64,
    cuts: CutSummary,
}

/// The power cuts, the checks after each, then the end.
pub fn torture(
    args: &ReplicationTortureArgs,
    run: Run,
    work: &Path,
    replica: &Replica,
    go_bin: &Path,
    summary: &mut Summary,
) -> Result<()> {
    let requested = args.power_cuts.unwrap_or(0);
    let mut run = run;
    let (medium, medium_name) = if args.simulated {
        crate::hooks::needs_test_hooks("replication-torture --simulated")?;
        run.db = work.join("app.onesync");
        let log = work.join("io.log");
        // Only with the test hooks (refused above without them).
        #[cfg(feature = "test-hooks")]
        run.env
            .push((onesync_store::io::IO_LOG_ENV, log.display().to_string()));
        let medium = Medium::WriteLog(WriteLog {
            log,
            image: Vec::new(),
            position: None,
        });
        (medium, "the store's write log (simulated cuts)".to_owned())
    } else {
        if let Some(reason) = onesync_device::unavailable_reason() {
            bail!("--power-cuts: {reason}");
        }
        loopfs::check_prerequisites(args.fs)?;
        loopfs::require_program(args.fs.checker().0, args.fs.package())?;
        loopfs::require_program("blockdev", "util-linux")?;
        let emulation = Emulation::preset(args.emulate);
        let loop_fs = LoopFs::create_seeded(args.fs, FS_SIZE, Some(&emulation), run.seed)?;
        let dir = loop_fs.mount_point().join("replication");
        fs::create_dir(&dir).with_context(|| format!("making {}", dir.display()))?;
        run.db = dir.join("app.onesync");
        let name = loop_fs.describe();
        (
            Medium::Kernel {
                loop_fs: Box::new(loop_fs),
                model: emulation.model,
            },
            name,
        )
    };
    {
        let conn = crate::sqlite::open_onesync(&run.db, true)?;
        conn.execute_batch(SCHEMA)?;
    }
    if let Medium::Kernel { loop_fs, .. } = &medium {
        // syncfs: the new store is on the media before the first cut.
        loop_fs.counters()?;
    }
    let mut cuts = Cuts {
        args,
        medium,
        scratch: work.join("restored.db"),
        rng: SmallRng::seed_from_u64(run.seed ^ 0xC07),
        run,
        replica,
        ledger: Ledger::default(),
        checker: ReplicaChecker::default(),
        next_writer: 0,
        cuts: CutSummary {
            via: if args.simulated { "write-log" } else { "kernel" },
            medium: medium_name,
            power_cuts_requested: requested,
            ..CutSummary::default()
        },
    };
    let outcome = cuts.all(requested, go_bin, summary);
    summary.power_cuts = Some(std::mem::take(&mut cuts.cuts));
    if outcome.is_err() {
        cuts.keep_store(work);
    }
    outcome
}

impl Cuts<'_> {
    fn all(&mut self, requested: u64, go_bin: &Path, summary: &mut Summary) -> Result<()> {
        let bar = crate::progress::phase_bar("power cuts", requested);
        let started = Instant::now();
        for cut in 1..=requested {
            // Every other cut comes right after an upload: the replica has just taken a
            // batch, the most it can ever be ahead of the store.
            let round = self.round(summary, cut % 2 == 0);
            self.count(summary);
            round.with_context(|| format!("cut {cut}"))?;
            self.cuts.power_cuts = cut;
            self.cuts.seconds_per_cut = started.elapsed().as_secs_f64() / cut as f64;
            bar.inc(1);
        }
        bar.finish_and_clear();
        // Shipping resumes on the survivor; writers that close cleanly leave it current.
        let mut writers = self.start_writers(summary, None)?;
        let delay = self.delay();
        let began = Instant::now();
        while began.elapsed() < delay {
            self.drain_before_cut(&mut writers)?;
            thread::sleep(POLL);
        }
        for w in writers {
            w.close(&mut self.ledger)?;
        }
        if let Medium::Kernel { loop_fs, .. } = &self.medium {
            if let Some(device) = loop_fs.device() {
                device.set_model(DeviceModel::FREE);
            }
        }
        self.count(summary);
        finish(
            &self.run.db,
            &self.scratch,
            self.replica,
            &self.ledger,
            &mut self.checker,
            go_bin,
            summary,
        )
    }

    fn count(&self, summary: &mut Summary) {
        summary.commits = self.ledger.commits.len() as u64;
        summary.count_sync(&self.ledger);
        summary.restores_checked = self.checker.restores;
        summary.checks_retried = self.checker.retried;
        summary.newest_txid = self.checker.newest_txid;
        summary.max_lag_commits = self.ledger.max_lag;
    }

    fn delay(&mut self) -> Duration {
        let (min, max) = self.args.delays().unwrap_or((0, 0));
        Duration::from_millis(self.rng.random_range(min..=max))
    }

    /// `--writers` writers, their kinds in turn; with `group`, all in one new process group.
    fn start_writers(&mut self, summary: &mut Summary, group: Option<()>) -> Result<Vec<RunningWriter>> {
        let mut writers: Vec<RunningWriter> = Vec::new();
        for i in 0..self.args.writers {
            self.next_writer += 1;
            summary.writers_started += 1;
            let pgid = group.map(|()| writers.first().map_or(0, |w| w.pid() as i32));
            match RunningWriter::start(&self.run, self.next_writer, self.run.kind_of(i), pgid) {
                Ok(w) => writers.push(w),
                Err(e) => {
                    for w in writers {
                        let _ = w.stop_after_cut(&mut self.ledger);
                    }
                    return Err(e);
                }
            }
        }
        Ok(writers)
    }

    /// Reads the writers' lines; a writer that ended while the power was on failed.
    fn drain_before_cut(&mut self, writers: &mut Vec<RunningWriter>) -> Result<()> {
        for w in writers.iter_mut() {
            w.drain(&mut self.ledger)?;
        }
        if let Some(i) = (0..writers.len()).find(|&i| writers[i].has_ended().unwrap_or(false)) {
            let ended = writers.swap_remove(i);
            let why = ended.ending(&mut self.ledger);
            for w in writers.drain(..) {
                let _ = w.stop_after_cut(&mut self.ledger);
            }
            bail!("before the cut, {why}");
        }
        Ok(())
    }

    /// Waits a random delay, then with `after_upload` until the replica's newest TXID
    /// grows (for [`UPLOAD_WAIT`] at most), reading the writers' lines.
    fn wait_for_cut(&mut self, writers: &mut Vec<RunningWriter>, after_upload: bool) -> Result<()> {
        let delay = self.delay();
        let began = Instant::now();
        while began.elapsed() < delay {
            self.drain_before_cut(writers)?;
            thread::sleep(POLL);
        }
        if !after_upload {
            return Ok(());
        }
        let newest = |client: &dyn ReplicaClient| {
            client
                .list(0)
                .ok()
                .and_then(|files| files.last().map(|f| f.max_txid))
                .unwrap_or(0)
        };
        let before = newest(self.replica.client.as_ref());
        let began = Instant::now();
        while newest(self.replica.client.as_ref()) <= before {
            if began.elapsed() > UPLOAD_WAIT {
                self.cuts.upload_waits_timed_out += 1;
                return Ok(());
            }
            self.drain_before_cut(writers)?;
        }
        self.cuts.cuts_after_upload += 1;
        Ok(())
    }

    /// One round: writers, the cut, the recovery, the checks.
    fn round(&mut self, summary: &mut Summary, after_upload: bool) -> Result<()> {
        let simulated = match &mut self.medium {
            Medium::Kernel { loop_fs, model } => {
                loop_fs
                    .device()
                    .ok_or_else(|| anyhow!("no emulated device"))?
                    .set_model(*model);
                false
            }
            Medium::WriteLog(w) => {
                fs::write(&w.log, b"").with_context(|| format!("emptying {}", w.log.display()))?;
                w.image = fs::read(&self.run.db)?;
                w.position = fs::read(position_path(&self.run.db)).ok();
                true
            }
        };
        let mut writers = self.start_writers(summary, simulated.then_some(()))?;
        if let Err(e) = self.wait_for_cut(&mut writers, after_upload) {
            if let Medium::Kernel { loop_fs, .. } = &self.medium {
                // The power must not stay on with nothing to cut it later.
                let _ = loop_fs.device().map(|d| d.power_cut());
            }
            return Err(e);
        }
        // The cut.
        match &self.medium {
            Medium::Kernel { loop_fs, .. } => {
                let outcome = loop_fs
                    .device()
                    .ok_or_else(|| anyhow!("no emulated device"))?
                    .power_cut()?;
                self.cuts.cached_writes.add(outcome);
            }
            Medium::WriteLog(_) => {
                let leader = writers.first().map_or(0, |w| w.pid() as i32);
                nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(leader),
                    nix::sys::signal::Signal::SIGKILL,
                )
                .context("SIGKILL of the writers' process group")?;
            }
        }
        self.ledger.cut = true;
        let mut ended = 0;
        for w in writers {
            ended += u64::from(w.stop_after_cut(&mut self.ledger)?);
        }
        self.ledger.cut = false;
        match &mut self.medium {
            Medium::Kernel { loop_fs, .. } => {
                self.cuts.writers_ended_by_io_error += ended;
                self.cuts.lazy_unmounts += u64::from(loop_fs.power_back_after_cut()?);
                if let Err(damage) = loop_fs.recover_after_cut()? {
                    self.cuts.fsck_complaints += u64::from(matches!(damage, CutDamage::CheckerComplained(_)));
                    bail!("{damage}");
                }
            }
            Medium::WriteLog(w) => {
                let seed = self.rng.random();
                let fate = self.rng.random_range(0..4usize);
                rebuild(w, &self.run.db, seed, fate, &mut self.cuts)?;
            }
        }
        self.check_after_cut()
    }

    /// The checks of the store and the replica after a cut (the module's step 4).
    fn check_after_cut(&mut self) -> Result<()> {
        let (t, log) = {
            let conn = crate::sqlite::open_onesync(&self.run.db, false)?;
            read_tables(&conn).context("the recovered store")?
        };
        check_consistent(&t, &log).context("the recovered store")?;
        self.ledger.check_refusal_codes()?;
        let have: HashSet<(u64, u64)> = log.iter().map(|&(_, w, n)| (w, n)).collect();
        let durable: Vec<_> = self
            .ledger
            .commits
            .iter()
            .filter(|c| c.kind.durable_at_return())
            .collect();
        if let Some(c) = durable.iter().find(|c| !have.contains(&(c.w, c.n))) {
            bail!(
                "commit {}.{} (seq {}) of a {} writer{} returned durable but the recovered store \
                 lacks it",
                c.w,
                c.n,
                c.seq,
                c.kind.name(),
                if c.acked {
                    ", acknowledged by the replica,"
                } else {
                    ""
                }
            );
        }
        self.cuts.durable_commits_checked = durable.len() as u64;
        let expect = self.ledger.expect_now();
        if let Some((w, n)) = expect.refused_in(&have) {
            bail!(
                "a sync writer's COMMIT of {w}.{n} was refused before the cut (nothing written) \
                 but the recovered store holds it"
            );
        }
        let client = self.replica.client.as_ref();
        self.checker.check_files(client).context("the replica")?;
        let restored = self
            .checker
            .check_restore(client, &self.scratch, &expect)
            .context("the replica's restore")?;
        check_is_prefix(&restored.log, restored.txid, &log)?;
        self.cuts.shipped_commits_checked = expect.shipped.len() as u64;
        self.cuts.sync_acks_checked = expect.acked.len() as u64;
        self.cuts.max_replica_behind_rows = self
            .cuts
            .max_replica_behind_rows
            .max((log.len() - restored.log.len()) as u64);
        self.cuts.normal_commits_lost += self.ledger.forget_lost(|w, n| have.contains(&(w, n)));
        Ok(())
    }

    /// After a failure: a copy of the store's directory in the work directory, which the
    /// run keeps (on the kernel path the store's filesystem goes with the run).
    fn keep_store(&self, work: &Path) {
        let Medium::Kernel { loop_fs, .. } = &self.medium else {
            return;
        };
        let kept = work.join("store-at-failure");
        let Some(dir) = self.run.db.parent() else { return };
        if fs::create_dir_all(&kept).is_err() || !loop_fs.mount_point().exists() {
            return;
        }
        for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
            let _ = fs::copy(entry.path(), kept.join(entry.file_name()));
        }
    }
}

/// The replication position's file of the store's main database, `<store>-replica-main`
/// (onesync-replica's `position::path_for`; the lab does not depend on that crate).
fn position_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push("-replica-main");
    PathBuf::from(name)
}

/// The simulated cut: the store file rebuilt from the round's start and its write log (the
/// writes not yet flushed lost, kept or torn, drawn from `seed`), the side files gone (the
/// memory of the machine with them), the position file as `fate` says.
fn rebuild(w: &WriteLog, db: &Path, seed: u64, fate: usize, cuts: &mut CutSummary) -> Result<()> {
    let log = Log::parse(fs::read(&w.log).with_context(|| format!("reading {}", w.log.display()))?)?;
    let meta = fs::metadata(db)?;
    let file = (meta.dev(), meta.ino());
    cuts.cached_writes.cached += log.unflushed(file, u64::MAX) as u64;
    fs::write(db, log.rebuild(&w.image, file, u64::MAX, Fate::Random(seed)))
        .with_context(|| format!("writing {}", db.display()))?;
    if let Some(dir) = db.parent() {
        remove_side_files(dir);
    }
    let position = position_path(db);
    match fate {
        0 => {}
        1 => match &w.position {
            Some(bytes) => fs::write(&position, bytes)?,
            None => {
                let _ = fs::remove_file(&position);
            }
        },
        2 => {
            let _ = fs::remove_file(&position);
        }
        _ => {
            if position.exists() {
                fs::write(&position, b"")?;
            }
        }
    }
    cuts.position_fates[fate.min(3)] += 1;
    Ok(())
}
