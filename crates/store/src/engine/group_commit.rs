//! Group commit: which commits are written, which are durable, and the flush one committer
//! runs for every commit written so far.

use super::shared::{bump, lock, Kept, Meta, Shared};
use crate::error::{CommitError, Error, Result};
use crate::format::Op;
use crate::options::Sabotage;
use crate::state::State;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A commit that is sequenced and written but perhaps not yet durable.
#[must_use = "a commit is durable only once `wait` returns"]
pub struct PendingCommit {
    shared: Arc<Shared>,
    seq: u64,
    /// False for a transaction that changed nothing (it waits for its base state).
    sequenced: bool,
}

impl PendingCommit {
    pub(super) fn sequenced(shared: Arc<Shared>, seq: u64) -> PendingCommit {
        PendingCommit {
            shared,
            seq,
            sequenced: true,
        }
    }

    pub(super) fn unchanged(shared: Arc<Shared>, seq: u64) -> PendingCommit {
        PendingCommit {
            shared,
            seq,
            sequenced: false,
        }
    }

    /// The commit's sequence number (for a transaction that changed nothing, that of the
    /// state it began on).
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Show the commit to new snapshots now, durable or not, with every commit before it.
    /// It becomes durable at the next flush of any kind, at
    /// [`Store::flush`](crate::Store::flush), and with `background_flush` (SQLite's
    /// `synchronous=NORMAL`; `OFF` passes false) within `Options::deferred_flush_interval`.
    /// Returns once a new snapshot shows it.
    pub fn show(&self, background_flush: bool) -> Result<(), CommitError> {
        if !self.sequenced {
            return Ok(());
        }
        self.shared
            .show_written(self.seq, background_flush)
            .map_err(|error| CommitError {
                seq: Some(self.seq),
                error,
            })
    }

    /// Return once the commit is durable.
    pub fn wait(self) -> Result<u64, CommitError> {
        let seq = self.sequenced.then_some(self.seq);
        self.shared
            .wait_durable(self.seq)
            .map_err(|error| CommitError { seq, error })?;
        Ok(self.seq)
    }
}

/// Who made a group commit's commits durable.
enum Flushed {
    /// This process's flush.
    Here,
    /// Another process's flush, which began after they were written.
    ByAnother,
}

/// How long a flush leader waits at most for commits on their way: half as long as the last
/// flush took (waiting is worth it in proportion to what a flush costs), within these bounds.
const GATHER_WAIT_MIN: Duration = Duration::from_micros(40);
const GATHER_WAIT_MAX: Duration = Duration::from_micros(500);

/// When the last flush covered several commits, the next leader waits at least this long
/// for the others to come round again (they are typically a few microseconds away).
const MIN_GATHER: Duration = Duration::from_micros(40);

impl Shared {
    /// A transaction began holding changes (`true`) or stopped (`false`: written, aborted or
    /// failed).
    pub(crate) fn note_active_writer(&self, began: bool) {
        let mut f = lock(&self.flush);
        if began {
            f.active_writers += 1;
        } else {
            f.active_writers = f.active_writers.saturating_sub(1);
            self.written_changed.notify_all();
        }
    }

    /// Note that commit `seq` is written: flushes may now cover it, and once every earlier
    /// commit is written too, new snapshots see it.
    pub(super) fn mark_written(&self, seq: u64) {
        let written_upto = {
            let mut f = lock(&self.flush);
            if seq == f.written_upto + 1 {
                f.written_upto = seq;
                while let Some(next) = f
                    .written_ahead
                    .first()
                    .copied()
                    .filter(|n| *n == f.written_upto + 1)
                {
                    f.written_ahead.remove(&next);
                    f.written_upto = next;
                }
                self.written_changed.notify_all();
            } else if seq > f.written_upto {
                f.written_ahead.insert(seq);
            }
            Self::debug_assert_flush_invariants(&f);
            f.written_upto
        };
        if let Some(s) = &self.sharing {
            // Other processes' flushes may now cover these commits (a failure to say so
            // only costs this process a flush of its own).
            let _ = s.publish_written(written_upto);
        }
        let mut meta = self.meta();
        self.publish_written(&mut meta, written_upto);
    }

    /// Show every state up to the written prefix `written_upto` to new transactions (another
    /// committer, or a waiter for a settled snapshot, may already have).
    pub(super) fn publish_written(&self, meta: &mut Meta, written_upto: u64) {
        while let Some(entry) = meta.unpublished.first_entry() {
            if *entry.key() > written_upto {
                break;
            }
            let (seq, state) = entry.remove_entry();
            meta.visible = state.clone();
            meta.not_durable.insert(seq, Kept::State(state));
        }
        // A flush may have covered it already (a leader flushes what is written).
        let durable = lock(&self.flush).durable;
        self.promote_readable(meta, durable);
    }

    /// Show readers every written state up to `durable`, and up to the last commit shown
    /// before it was durable (deferred durability: everything before it is shown with it).
    /// A state kept as operations is built here, from the state kept just before it, once
    /// for the whole run of them that ends at the one shown (invariant 3).
    pub(super) fn promote_readable(&self, meta: &mut Meta, durable: u64) {
        let upto = durable.max(meta.shown_written_upto);
        let mut base: Option<Arc<State>> = None;
        let mut ops: Vec<(u64, Arc<[Op]>)> = Vec::new();
        for (&seq, kept) in meta.not_durable.range(..=upto) {
            match kept {
                Kept::State(state) => {
                    base = Some(state.clone());
                    ops.clear();
                }
                Kept::Ops(o) => ops.push((seq, o.clone())),
            }
        }
        if self.opts.sabotaged(Sabotage::KeptOperationsUnapplied) {
            ops.clear();
        }
        let readable = if ops.is_empty() {
            match base {
                Some(state) => state,
                None => return,
            }
        } else {
            let mut state = (*base.unwrap_or_else(|| meta.readable.clone())).clone();
            let mut superseded_elsewhere = Vec::new();
            for (seq, o) in &ops {
                if super::invariants::CHECKED {
                    assert_eq!(
                        state.seq + 1,
                        *seq,
                        "invariant 3: operations kept right after their base"
                    );
                }
                if let Err(e) = state.apply(o, *seq, self.page_size, &mut superseded_elsewhere) {
                    // They applied once already, to this very state (`follow_chain`).
                    debug_assert!(
                        false,
                        "kept operations of commit {seq} failed to apply again: {e}"
                    );
                    return;
                }
                superseded_elsewhere.clear();
            }
            Arc::new(state)
        };
        meta.not_durable.retain(|&seq, _| seq > upto);
        meta.readable = readable;
    }

    /// After a flush of this process covered commits up to `seq`: mark them durable, show
    /// them to readers, tell other processes, wake waiters. Holding the meta lock (taken
    /// before the flush lock, as everywhere).
    pub(super) fn note_durable(&self, meta: &mut Meta, seq: u64) {
        let mut f = lock(&self.flush);
        f.durable = f.durable.max(seq);
        Self::debug_assert_flush_invariants(&f);
        let durable = f.durable;
        self.promote_readable(meta, durable);
        if let Some(s) = &self.sharing {
            // Readers of other processes show what this says is durable; if it cannot be
            // said, they show less.
            let _ = s.publish_durable(durable);
        }
        self.durable_changed.notify_all();
    }

    /// Group commit: return once a flush covers `seq`. One waiter at a time flushes for
    /// every commit written so far.
    pub(super) fn wait_durable(&self, seq: u64) -> Result<()> {
        let mut f = lock(&self.flush);
        loop {
            if f.durable >= seq {
                return Ok(());
            }
            if let Some(why) = &f.poisoned {
                return Err(Error::Poisoned(why.clone()));
            }
            if !f.leader_active && f.written_upto >= seq {
                f.leader_active = true;
                // Let commits that are on their way (sequenced, or transactions holding
                // changes) land so this flush covers them too; bounded, and a lone committer
                // never waits (PostgreSQL's commit_delay with commit_siblings, adaptively).
                let started = Instant::now();
                let deadline = started + (f.last_flush / 2).clamp(GATHER_WAIT_MIN, GATHER_WAIT_MAX);
                let floor = if f.last_batch > 1 {
                    started + MIN_GATHER
                } else {
                    started
                };
                loop {
                    let now = Instant::now();
                    let on_their_way = f.written_upto < f.sequenced || f.active_writers > 0 || now < floor;
                    if !on_their_way || now >= deadline || f.poisoned.is_some() {
                        break;
                    }
                    let until = if now < floor { floor } else { deadline };
                    f = self
                        .written_changed
                        .wait_timeout(f, until - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
                let target = f.written_upto;
                drop(f);
                let flush_started = Instant::now();
                self.deferred
                    .flush_starting(self.counters.bytes_written.load(Ordering::Relaxed));
                let result = self.flush_upto(target);
                let flush_took = flush_started.elapsed();
                if matches!(result, Ok(Flushed::Here)) {
                    bump(&self.counters.flush_micros, flush_took.as_micros() as u64);
                    bump(&self.counters.group_commit_flushes, 1);
                }
                // Meta before flush, the order everywhere: readers are shown the commits
                // before their committers are told they are durable.
                let mut meta = self.meta();
                f = lock(&self.flush);
                f.leader_active = false;
                match result {
                    Ok(flushed) => {
                        match flushed {
                            Flushed::Here => bump(&self.counters.flushes, 1),
                            Flushed::ByAnother => bump(&self.counters.flushes_by_others, 1),
                        }
                        f.last_batch = target.saturating_sub(f.durable);
                        f.last_flush = flush_took;
                        drop(f);
                        self.note_durable(&mut meta, target);
                        drop(meta);
                        f = lock(&self.flush);
                    }
                    Err(why) => {
                        if f.poisoned.is_none() {
                            f.poisoned = Some(why);
                        }
                        drop(meta);
                    }
                }
                self.durable_changed.notify_all();
                continue;
            }
            f = self.durable_changed.wait(f).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Make every commit up to `target` (all written) durable. Alone, flush. Sharing the
    /// store, flush for every process: under `FLUSH`, unless another process's flush
    /// already covers `target`, note how far every process's commits are written, flush,
    /// and publish that as durable before letting `FLUSH` go (`sharing.rs` explains why
    /// the flush covers them). A failure is the poison message.
    fn flush_upto(&self, target: u64) -> std::result::Result<Flushed, String> {
        let sync = || -> std::result::Result<(), String> {
            if self.opts.sabotaged(Sabotage::SkippedFlush) {
                return Ok(());
            }
            self.io.sync_data().map_err(|e| format!("fdatasync failed: {e}"))
        };
        let Some(s) = self.sharing.as_ref().filter(|s| s.flushes_together()) else {
            sync()?;
            return Ok(Flushed::Here);
        };
        // An unreadable side file only costs this process a flush it might have shared.
        let covered = || matches!(s.others_durable(), Ok(Some(durable)) if durable >= target);
        if covered() {
            return Ok(Flushed::ByAnother);
        }
        // A flush under way covers these commits: wait for it beside the others it covers.
        // (Once only: still not covered after it, its flusher died or failed.)
        let trusted = self.opts.sabotaged(Sabotage::AnnouncedFlushTrusted);
        if matches!(s.announced_flush_covers(target), Ok(true)) && s.wait_for_flush().is_ok() {
            bump(&self.counters.announced_flush_waits, 1);
            if trusted || covered() {
                return Ok(Flushed::ByAnother);
            }
        }
        let flushing = s.lock_flush().map_err(|e| e.to_string())?;
        if covered() {
            return Ok(Flushed::ByAnother);
        }
        // What every process had written when the flush began is what it covers.
        let mut covers = s.written().unwrap_or(0).max(target);
        // An announcement that cannot be written only costs the others a shared wait.
        let _ = s.announce_flush(covers);
        sync()?;
        if self.opts.sabotaged(Sabotage::FlushCoverageReadLate) {
            covers = s.written().unwrap_or(0).max(target);
        }
        // Told before `FLUSH` goes: the process next in line reads it first.
        let _ = s.publish_durable(covers);
        drop(flushing);
        // The processes waiting for this flush were just woken: let them have the core, as
        // after letting the write lock go, when there are more writers than cores
        // (`onesync-lab bench writers --processes 16 --mode onesync-concurrent`).
        if self.others_write() {
            std::thread::yield_now();
        }
        Ok(Flushed::Here)
    }

    pub(super) fn check_poison(&self) -> Result<()> {
        match &lock(&self.flush).poisoned {
            Some(why) => Err(Error::Poisoned(why.clone())),
            None => Ok(()),
        }
    }

    pub(super) fn poison(&self, why: String) {
        let mut f = lock(&self.flush);
        if f.poisoned.is_none() {
            f.poisoned = Some(why);
        }
        self.durable_changed.notify_all();
        self.written_changed.notify_all();
    }
}
