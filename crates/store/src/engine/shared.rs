//! The engine's state, [`Shared`], and the types it is made of: the `meta` bookkeeping
//! ([`Meta`], taken through [`MetaGuard`]), the group-commit counters ([`FlushState`]), the
//! write lock's claims ([`WriterClaims`]), the background flusher's schedule ([`Deferred`])
//! and the recent pages' cache ([`RecentPages`]); the calls that open the engine, take
//! snapshots and read pages. The engine's invariants, lock order and state table are in
//! `engine/mod.rs`; the files beside this one add the calls that move the chain.

use crate::alloc::SlotAllocator;
use crate::error::{Error, Result};
use crate::format::Op;
use crate::format::{slot_offset, Header, NO_SLOT};
use crate::io::StorageIo;
use crate::loading::{FreeBaseline, MappingIo};
use crate::options::{Options, Stats};
use crate::recovery::Recovered;
use crate::sharing::{Sharing, NO_PIN};
use crate::state::PageEntry;
use crate::state::State;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::wakeup::Wakeup;
use std::time::{Duration, Instant};

#[derive(Default)]
pub(super) struct Counters {
    pub commit_records: AtomicU64,
    pub pages_written: AtomicU64,
    pub pages_embedded: AtomicU64,
    pub jumps: AtomicU64,
    pub bytes_written: AtomicU64,
    pub write_calls: AtomicU64,
    pub bytes_preallocated: AtomicU64,
    pub growths: AtomicU64,
    pub bytes_returned: AtomicU64,
    pub growths_holding_locks: AtomicU64,
    pub flushes: AtomicU64,
    pub flush_micros: AtomicU64,
    pub group_commit_flushes: AtomicU64,
    pub flushes_by_others: AtomicU64,
    pub announced_flush_waits: AtomicU64,
    pub write_lock_waited_micros: AtomicU64,
    pub write_lock_held_micros: AtomicU64,
    pub catch_ups: AtomicU64,
    pub records_followed: AtomicU64,
    pub checkpoints: AtomicU64,
    pub checkpoint_bytes: AtomicU64,
    pub checkpoint_micros: AtomicU64,
    pub recoveries: AtomicU64,
    pub records_replayed: AtomicU64,
    pub conflicts: AtomicU64,
    pub early_conflicts: AtomicU64,
}

pub(super) fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

/// One open store: the engine's state, shared by every clone of a `Store`, its snapshots,
/// transactions and pending commits.
pub(crate) struct Shared {
    pub(super) io: Arc<dyn StorageIo>,
    pub page_size: u64,
    /// The medium and the cache of mapping blocks this process read, bounded by
    /// `Options::mapping_cache_bytes`, that every base on runs reads through.
    pub(super) mapping: MappingIo,
    pub opts: Options,
    pub(super) meta: Mutex<Meta>,
    pub(super) flush: Mutex<FlushState>,
    /// Signalled when `durable` advances or a flush ends (waiters recheck, one may lead).
    pub(super) durable_changed: Wakeup,
    /// Signalled when commits are written or writers drop out (a gathering leader and
    /// checkpoints wait on it). Two condvars keep waiters for durability asleep while
    /// other commits are merely written.
    pub(super) written_changed: Wakeup,
    /// Signalled (with `meta`) when a step grown ahead is handed out or given up.
    pub(super) growth_landed: Wakeup,
    pub(super) counters: Counters,
    pub(super) next_file_id: AtomicU32,
    /// Other processes may have the store open (a file opened with `Store::open`).
    pub sharing: Option<Sharing>,
    /// Opened to salvage: the read error that ended the chain early.
    pub(super) stopped_by: Option<String>,
    /// This process has left the processes sharing the store (closed).
    pub(super) departed: AtomicBool,
    /// `close` holds `INIT` and found no other process: a checkpoint may shorten the file
    /// without taking `INIT` (`give_back_space`).
    pub(super) closing_alone: AtomicBool,
    pub(super) writer: Mutex<WriterClaims>,
    /// The background flush of commits shown before they were durable.
    pub(super) deferred: Arc<Deferred>,
    /// Contents of pages recently read or committed (`recent_pages.rs`).
    pub(super) recent_pages: Mutex<RecentPages>,
}

/// The cross-process write lock, held while any commit of this process is on its way.
#[derive(Default)]
pub(super) struct WriterClaims {
    pub(super) held: bool,
    /// When this process took the lock (for `Stats::write_lock_held_micros`).
    pub(super) held_since: Option<std::time::Instant>,
    /// Commits being sequenced or written, and checkpoints running.
    pub(super) claims: usize,
    /// The lock was taken and nobody has caught up with the chain since: whichever claimant
    /// of this process sequences first (not necessarily the one that took the lock) must.
    pub(super) catch_up_due: bool,
}

/// One end of a snapshot of a shared store in this many gives back slots that no process
/// reads any more (`Shared::forget_snapshot`).
const RELEASE_CHECK_EVERY: u64 = 8;

/// A written state not yet known durable, as `Meta::not_durable` keeps it.
pub(crate) enum Kept {
    /// The state itself.
    State(Arc<State>),
    /// The operations of a commit another process appended, and only them: the state is
    /// the one kept just before it (or `readable`) with these applied, built only if
    /// readers are shown exactly it (`promote_readable`). Keeping a state per followed
    /// commit copied the mapping's changed paths once per commit, most of what following
    /// cost (invariant 3).
    Ops(Arc<[Op]>),
}

/// Everything commits and checkpoints change, under one lock held only for bookkeeping
/// (page writes and flushes happen outside it).
pub(crate) struct Meta {
    /// The latest sequenced state: commits build on it and are checked against it.
    pub state: Arc<State>,
    /// The latest state whose commits (and all before them) are written: what new
    /// transactions see (a writer may build on a commit whose flush is still running: its
    /// own commit comes later in the chain and is durable only with it). Pages are written
    /// after sequencing, outside the lock.
    pub visible: Arc<State>,
    /// The latest state whose commits are all durable: what snapshots (readers) see, so a
    /// power cut never takes back something a reader was shown.
    pub readable: Arc<State>,
    /// Written states not yet known durable, by sequence number (they become `readable` as
    /// flushes, this process's or another's, cover them).
    pub not_durable: BTreeMap<u64, Kept>,
    /// Commits up to here are shown to readers once written, durable or not (committed
    /// with durability deferred: `PendingCommit::show`).
    pub shown_written_upto: u64,
    /// Sequenced states not yet visible (they become so as the written prefix grows).
    pub unpublished: BTreeMap<u64, Arc<State>>,
    pub header: Header,
    pub alloc: SlotAllocator,
    /// (superseded at seq, slot): still named by a record that recovery would replay.
    pub awaiting_checkpoint: Vec<(u64, u64)>,
    /// (superseded at seq, slot): checkpointed, but a snapshot may still read it.
    pub awaiting_readers: Vec<(u64, u64)>,
    /// (checkpoint's seq + 1, slot): slots a compacting checkpoint copied pages out of, and
    /// blocks of the mapping's runs a checkpoint replaced. The durable checkpoint no longer
    /// names them, but a snapshot of its own commit (or on the old base), taken before,
    /// may still read them.
    pub moved_awaiting_readers: Vec<(u64, u64)>,
    /// The free slots the last checkpoint's manifest persisted (`None` after a version-1
    /// checkpoint: the next checkpoint computes them from the whole mapping, once).
    pub free_baseline: Option<FreeBaseline>,
    /// Slots the commits since the last checkpoint, of every process, freed or used for
    /// their records and jumps: the next manifest calls them free unless it names them.
    /// Reset at each checkpoint, so bounded by the checkpoint interval.
    pub freed_since: Vec<u64>,
    /// Open snapshots by sequence number.
    pub snapshots: BTreeMap<u64, usize>,
    /// Snapshots ended (their last clone dropped) since the store was opened.
    pub snapshot_ends: u64,
    /// Where the next record goes, and the end of the run reserved for it.
    pub head: u64,
    pub window_end: u64,
    pub prev_crc: u32,
    pub session: u64,
    pub commits_since_checkpoint: u64,
    pub log_bytes_since_checkpoint: u64,
    /// The reader pin this process last published (shared stores).
    pub pin: u64,
    /// The (generation, sequence) this process last published as the store's progress:
    /// while the side file still says exactly that, no other process has written since
    /// (every writer publishes before it writes), and a writer need not read the chain.
    pub last_published: Option<(u64, u64)>,
    /// Every free slot of the file is this process's to allocate (it opened the store
    /// first, or alone); a process that joined others owns only what it grew.
    pub owns_all_slots: bool,
    /// Slots this process added to the file since it opened it.
    pub grown_here: u64,
    /// A growth step claimed by `grow_ahead` is being flushed (its slots are in the
    /// allocator's capacity but not free until the flush returns).
    pub growing_ahead: bool,
    /// A commit freed much of the file while snapshots still read it: the last snapshot
    /// to end gives the file's free end back (`give_back_space`).
    pub give_back_pending: bool,
    /// Slots the last commit sequenced superseded (a large delete or VACUUM: many).
    pub last_commit_superseded: u64,
}

/// Group-commit state: which records are written, which are durable, who is flushing.
#[derive(Default)]
pub(super) struct FlushState {
    /// Highest sequence number handed out: commits up to it will be written shortly.
    pub(super) sequenced: u64,
    /// Transactions holding changes that have not been written yet: likely committers.
    pub(super) active_writers: usize,
    /// Commits the last flush covered: more than one means committers run concurrently.
    pub(super) last_batch: u64,
    /// How long the last group-commit flush took.
    pub(super) last_flush: Duration,
    pub(super) written_upto: u64,
    pub(super) written_ahead: BTreeSet<u64>,
    pub(super) durable: u64,
    pub(super) leader_active: bool,
    pub(super) poisoned: Option<String>,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // No code path panics while holding these locks; if one ever did, the data is still
    // consistent at every unlock point, so recover rather than propagate the poison.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Drop for Shared {
    /// Dropped without `close` (safe: the next open recovers): still leave the processes
    /// sharing the store, so the last one removes the side file.
    fn drop(&mut self) {
        self.stop_deferred_flusher();
        if self.departed.load(Ordering::Relaxed) {
            return;
        }
        if !self.opts.read_only && self.meta().shown_written_upto > self.durable_seq() {
            // Commits shown before they were durable: the flush the flusher would have made
            // (best effort: dropping cannot report; the next open recovers a prefix anyway).
            let _ = self.flush_written();
        }
        if let Some(s) = &self.sharing {
            if let Ok(_init) = s.lock_init() {
                s.depart(s.alone());
            }
        }
    }
}

impl Shared {
    pub(super) fn write_counted(&self, data: &[u8], offset: u64, during: &'static str) -> Result<()> {
        self.io.write_at(data, offset).map_err(|e| Error::io(during, e))?;
        bump(&self.counters.bytes_written, data.len() as u64);
        bump(&self.counters.write_calls, 1);
        Ok(())
    }
}

/// The longest [`Shared::snapshot_latest_settled`] waits for commits in flight (their
/// writes take microseconds; a stalled one is planned around, and conflicts at commit).
const SETTLE_WAIT: std::time::Duration = std::time::Duration::from_millis(20);

/// Which committed state a new snapshot shows.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum View {
    /// The latest durable state: for readers, who must never be shown a commit a power cut
    /// could still take back.
    Durable,
    /// The latest written state, perhaps not durable yet: for a transaction that will
    /// commit after it (its own commit is durable only with everything before it).
    Written,
}

/// The `meta` lock; releasing it checks the invariants (debug builds, or feature `invariants`).
pub(crate) struct MetaGuard<'a> {
    shared: &'a Shared,
    meta: MutexGuard<'a, Meta>,
}

impl Deref for MetaGuard<'_> {
    type Target = Meta;
    fn deref(&self) -> &Meta {
        &self.meta
    }
}

impl DerefMut for MetaGuard<'_> {
    fn deref_mut(&mut self) -> &mut Meta {
        &mut self.meta
    }
}

impl Drop for MetaGuard<'_> {
    fn drop(&mut self) {
        self.shared.debug_assert_invariants(&self.meta);
    }
}

impl Shared {
    /// The engine over a recovered store. `joined`: other processes have it open; this one
    /// owns no free slot and repairs nothing.
    pub(crate) fn new(
        mapping: MappingIo,
        opts: &Options,
        recovered: Recovered,
        sharing: Option<Sharing>,
        joined: bool,
    ) -> Result<Shared> {
        let mut recovered = recovered;
        let stopped_by = recovered.stopped_by.take();
        if joined {
            recovered.alloc = SlotAllocator::none_free(recovered.alloc.capacity());
            recovered.awaiting_checkpoint.clear();
        }
        let page_size = recovered.header.page_size as u64;
        let counters = Counters::default();
        if recovered.records_replayed > 0 {
            bump(&counters.recoveries, 1);
            bump(&counters.records_replayed, recovered.records_replayed);
        }
        let last = recovered.state.seq;
        let next_file_id = recovered.state.next_file_id.max(1);
        let state = Arc::new(recovered.state);
        let meta = Meta {
            visible: state.clone(),
            readable: state.clone(),
            not_durable: BTreeMap::new(),
            shown_written_upto: last,
            unpublished: BTreeMap::new(),
            state,
            header: recovered.header,
            alloc: recovered.alloc,
            awaiting_checkpoint: recovered
                .awaiting_checkpoint
                .into_iter()
                .map(|s| (last, s))
                .collect(),
            awaiting_readers: Vec::new(),
            moved_awaiting_readers: Vec::new(),
            free_baseline: recovered.free_baseline,
            freed_since: recovered.freed_since,
            snapshots: BTreeMap::new(),
            snapshot_ends: 0,
            head: recovered.head,
            window_end: recovered.window_end,
            prev_crc: recovered.prev_crc,
            session: crate::nonce::random_u64(),
            commits_since_checkpoint: recovered.records_replayed,
            log_bytes_since_checkpoint: recovered.log_bytes,
            owns_all_slots: !joined,
            grown_here: 0,
            growing_ahead: false,
            give_back_pending: false,
            last_commit_superseded: 0,
            // A read-only process arrives pinning everything (see `Sharing::arrive`).
            pin: if sharing.as_ref().is_some_and(|s| s.read_only()) {
                0
            } else {
                NO_PIN
            },
            // The first process publishes where recovery left the chain (just below).
            last_published: sharing
                .as_ref()
                .filter(|_| !joined)
                .map(|_| (recovered.header.generation, last)),
        };
        if let (Some(s), false) = (&sharing, joined) {
            s.publish_progress(meta.header.generation, last)?;
        }
        let flush = FlushState {
            sequenced: last,
            written_upto: last,
            durable: last,
            ..FlushState::default()
        };
        let shared = Shared {
            io: mapping.io.clone(),
            page_size,
            mapping,
            opts: opts.clone(),
            meta: Mutex::new(meta),
            flush: Mutex::new(flush),
            durable_changed: Wakeup::new(),
            written_changed: Wakeup::new(),
            growth_landed: Wakeup::new(),
            counters,
            next_file_id: AtomicU32::new(next_file_id),
            writer: Mutex::new(WriterClaims::default()),
            sharing,
            stopped_by,
            departed: AtomicBool::new(false),
            closing_alone: AtomicBool::new(false),
            deferred: Arc::new(Deferred::new(opts)),
            recent_pages: Mutex::default(),
        };
        drop(shared.meta());
        Ok(shared)
    }

    /// Take the `meta` lock (see [`MetaGuard`]).
    pub(super) fn meta(&self) -> MetaGuard<'_> {
        MetaGuard {
            shared: self,
            meta: lock(&self.meta),
        }
    }

    /// Other processes may have the store open (it was opened by path).
    pub(crate) fn sharing(&self) -> Option<&Sharing> {
        self.sharing.as_ref()
    }

    /// Opened with `Options::salvage`: the read error that ended the chain early.
    pub(crate) fn stopped_by(&self) -> Option<&str> {
        self.stopped_by.as_deref()
    }

    /// Publish the pin this process needs now (after opening, when a reader pinned
    /// everything while it read the chain).
    pub(crate) fn refresh_pin(&self) {
        let _ = self.publish_exact_pin(&mut self.meta());
    }

    /// Sequence number of the latest commit (durable or not yet).
    pub(crate) fn last_seq(&self) -> u64 {
        self.meta().state.seq
    }

    /// Sequence number up to which every commit is durable.
    pub(crate) fn durable_seq(&self) -> u64 {
        lock(&self.flush).durable
    }

    /// A fresh id for a file a transaction creates (renumbered at commit if another process
    /// took it meanwhile).
    pub(crate) fn new_file_id(&self) -> u32 {
        self.next_file_id.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn stats(&self) -> Stats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let cache = self.mapping.cache.stats();
        let (last_seq, slots_total, slots_free) = {
            let meta = self.meta();
            (meta.state.seq, meta.alloc.capacity(), meta.alloc.free_count())
        };
        Stats {
            page_size: self.page_size,
            commit_records: get(&c.commit_records),
            pages_written: get(&c.pages_written),
            pages_embedded: get(&c.pages_embedded),
            jumps: get(&c.jumps),
            bytes_written: get(&c.bytes_written),
            write_calls: get(&c.write_calls),
            bytes_preallocated: get(&c.bytes_preallocated),
            growths: get(&c.growths),
            bytes_returned: get(&c.bytes_returned),
            growths_holding_locks: get(&c.growths_holding_locks),
            flushes: get(&c.flushes),
            flush_micros: get(&c.flush_micros),
            group_commit_flushes: get(&c.group_commit_flushes),
            flushes_by_others: get(&c.flushes_by_others),
            announced_flush_waits: get(&c.announced_flush_waits),
            write_lock_waited_micros: get(&c.write_lock_waited_micros),
            write_lock_held_micros: get(&c.write_lock_held_micros),
            catch_ups: get(&c.catch_ups),
            records_followed: get(&c.records_followed),
            checkpoints: get(&c.checkpoints),
            checkpoint_bytes: get(&c.checkpoint_bytes),
            checkpoint_micros: get(&c.checkpoint_micros),
            mapping_cache_hits: cache.hits,
            mapping_cache_misses: cache.misses,
            mapping_cache_bytes: cache.bytes,
            recoveries: get(&c.recoveries),
            records_replayed: get(&c.records_replayed),
            conflicts: get(&c.conflicts),
            early_conflicts: get(&c.early_conflicts),
            last_seq,
            durable_seq: self.durable_seq(),
            slots_total,
            slots_free,
        }
    }

    /// Count a new snapshot of the latest state of `view` this process knows.
    pub(crate) fn snapshot_known(&self, view: View) -> Arc<State> {
        self.register_snapshot(&mut self.meta(), view)
    }

    /// Count a new snapshot of the latest state of `view` of any process sharing the
    /// store (a failure to catch up with them is returned, counting nothing).
    pub(crate) fn snapshot_latest(&self, view: View) -> Result<Arc<State>> {
        let mut meta = self.meta();
        self.catch_up(&mut meta, false)?;
        Ok(self.register_snapshot(&mut meta, view))
    }

    /// [`Shared::snapshot_latest`] of the written view, once every commit sequenced when it
    /// was called is written (waiting at most `SETTLE_WAIT`): the state a transaction that is
    /// about to commit is best planned on, as commits of other threads are usually in flight.
    pub(crate) fn snapshot_latest_settled(&self) -> Result<Arc<State>> {
        let (target, visible) = {
            let mut meta = self.meta();
            self.catch_up(&mut meta, false)?;
            (meta.state.seq, meta.visible.seq)
        };
        let written_upto = {
            let deadline = std::time::Instant::now() + SETTLE_WAIT;
            let mut f = lock(&self.flush);
            while visible < target && f.written_upto < target && f.poisoned.is_none() {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    break;
                }
                f = self
                    .written_changed
                    .wait_timeout(f, left)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            f.written_upto
        };
        let mut meta = self.meta();
        // Its writer may not have shown it yet (it does right after saying it is written).
        self.publish_written(&mut meta, written_upto);
        Ok(self.register_snapshot(&mut meta, View::Written))
    }

    fn register_snapshot(&self, meta: &mut Meta, view: View) -> Arc<State> {
        let state = match view {
            View::Durable => meta.readable.clone(),
            View::Written => meta.visible.clone(),
        };
        *meta.snapshots.entry(state.seq).or_insert(0) += 1;
        // Already pinned at or below this while catching up; if publishing fails, other
        // processes may reuse what this reads, and the page checksums catch it.
        let _ = self.set_pin(meta, None);
        state
    }

    /// Count one more snapshot of a state already counted (a clone).
    pub(crate) fn retain_snapshot(&self, seq: u64) {
        *self.meta().snapshots.entry(seq).or_insert(0) += 1;
    }

    /// A snapshot of `seq` is gone; the last one lets go of the slots only it could read.
    pub(crate) fn forget_snapshot(&self, seq: u64) {
        let mut meta = self.meta();
        if let Some(count) = meta.snapshots.get_mut(&seq) {
            *count -= 1;
            if *count == 0 {
                meta.snapshots.remove(&seq);
                let _ = self.set_pin(&mut meta, None);
                // Asking other processes for their pins costs system calls (a lock test per
                // process), and a transaction ends a snapshot or two: with sharing, at one
                // end in `RELEASE_CHECK_EVERY` (a slot held a while longer costs only space;
                // counted, not timed, so that a process makes the same calls in every run of
                // the same steps, as the crash-point explorer needs).
                meta.snapshot_ends += 1;
                let due = self.sharing.is_none() || meta.snapshot_ends.is_multiple_of(RELEASE_CHECK_EVERY);
                if due {
                    self.release_unread(&mut meta);
                }
                if meta.give_back_pending && meta.snapshots.is_empty() {
                    meta.give_back_pending = false;
                    // Best effort: space not given back now goes at the next checkpoint.
                    let _ = self.with_writer(&mut meta, |meta| {
                        self.release_unread(meta);
                        self.give_back_space(meta)
                    });
                }
            }
        }
    }

    /// Read the page in `slot` (the caller checks its CRC).
    pub(crate) fn read_slot(&self, slot: u64, buf: &mut [u8]) -> Result<()> {
        debug_assert_ne!(slot, NO_SLOT);
        self.io
            .read_at(buf, slot_offset(slot, self.page_size))
            .map_err(|e| Error::io("reading a page", e))
    }

    /// Write a page of an uncommitted transaction to a slot of its own now (to bound its
    /// memory); the slot is the transaction's until it commits or lets go of it.
    pub(crate) fn write_early_page(&self, data: &[u8]) -> Result<u64> {
        let slot = self.alloc_slot(&mut self.meta())?;
        if let Err(e) = self.rewrite_early_page(slot, data) {
            self.meta().alloc.release(slot, 1);
            return Err(e);
        }
        Ok(slot)
    }

    /// Overwrite a page a transaction wrote early (private to it, so rewritten in place).
    pub(crate) fn rewrite_early_page(&self, slot: u64, data: &[u8]) -> Result<()> {
        self.write_counted(data, slot_offset(slot, self.page_size), "writing a page")?;
        bump(&self.counters.pages_written, 1);
        Ok(())
    }

    /// Give back slots a transaction wrote early and no commit maps.
    pub(crate) fn release_slots(&self, slots: impl IntoIterator<Item = u64>) {
        let mut meta = self.meta();
        for slot in slots {
            meta.alloc.release(slot, 1);
        }
    }
}

// The background flusher's state (`deferred.rs` runs it).

/// The background flusher's schedule, shared with its thread (which holds the engine only
/// weakly, so that dropping the store ends it).
pub(super) struct Deferred {
    pub(super) schedule: Mutex<Schedule>,
    pub(super) wake: Wakeup,
    /// The interval in µs (settable while open: `Store::set_deferred_flush_interval`).
    pub(super) interval_micros: AtomicU64,
    /// `Counters::bytes_written` when the last flush began: bytes written since are not
    /// yet durable, and `Options::deferred_flush_bytes` of them call a flush at once.
    pub(super) bytes_at_last_flush: AtomicU64,
}

impl Deferred {
    pub fn new(opts: &Options) -> Deferred {
        Deferred {
            schedule: Mutex::default(),
            wake: Wakeup::new(),
            interval_micros: AtomicU64::new(micros(opts.deferred_flush_interval)),
            bytes_at_last_flush: AtomicU64::new(0),
        }
    }

    /// A flush is starting that covers everything written up to `bytes_written`.
    pub fn flush_starting(&self, bytes_written: u64) {
        self.bytes_at_last_flush
            .fetch_max(bytes_written, Ordering::Relaxed);
    }
}

pub(super) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[derive(Default)]
pub(super) struct Schedule {
    /// When the next background flush is due: set by the first commit shown undurable
    /// after the last flush, so none waits longer than the interval.
    pub(super) due: Option<Instant>,
    pub(super) thread_started: bool,
    pub(super) stop: bool,
}

// The recent pages' cache (`recent_pages.rs`).

/// A page: its file and number.
pub(crate) type PageKey = (u32, u64);

/// A page's content, shared (the cache and a reader's copy source).
pub(crate) type Content = Arc<[u8]>;

/// The cache itself (`recent_pages.rs` fills and reads it).
#[derive(Default)]
pub(crate) struct RecentPages {
    pub(super) pages: HashMap<PageKey, (PageEntry, Content)>,
}
