//! The store's settings ([`Options`]) and counters ([`Stats`]).

use crate::error::{Error, Result};
use crate::format::valid_page_size;

/// Settings. `page_size` takes effect when a store is created; the rest apply to each open.
#[derive(Debug, Clone)]
pub struct Options {
    /// Page size in bytes: a power of two from 512 to 65536.
    pub page_size: u32,
    /// Commits between mapping checkpoints ("delayed checkpoint"); 0 checkpoints only when
    /// `log_capacity` is reached, on `checkpoint()` and on `close()`.
    pub checkpoint_interval: u64,
    /// Bytes of commit records since the last checkpoint that force a checkpoint: bounds
    /// the work (and time) of recovery.
    pub log_capacity: u64,
    /// Bytes of page slots written at creation: a new store is this small (plus its header
    /// and the first checkpoint), and grows in steps as commits need room.
    pub initial_capacity: u64,
    /// The smallest growth step in bytes. The file grows by a quarter of the slots this
    /// process allocates from (the whole file, or what a process that joined others grew
    /// itself), at least this and at most `max_growth_step` (more only if one allocation
    /// needs more). Each step writes zeros and flushes once, before any commit uses it.
    pub growth_step: u64,
    /// The largest growth step in bytes. Below this size a process grows the file rather
    /// than checkpoint early to reuse slots (small steps are cheap, and checkpoints stay as
    /// rare as `checkpoint_interval` makes them); from it on, a checkpoint comes before a
    /// step this large where it frees slots worth a quarter of the step.
    pub max_growth_step: u64,
    /// A page write that changes at most this many bytes of the page (accumulated since the
    /// page was last written whole) is carried in the commit record instead of a new slot.
    /// 0 turns this off.
    pub embed_limit: usize,
    /// Bytes reserved ahead of the commit chain, so that consecutive commits land next to
    /// each other (each commit is then one contiguous write). A window takes at most a
    /// quarter of the slots the process allocates from, so a small store stays small.
    pub window_bytes: u64,
    /// How long a commit shown before it is durable (`PendingCommit::show`: SQLite's
    /// `synchronous=NORMAL`/`OFF`) waits at most for the background flush that makes it
    /// durable: the most a power cut can take back, plus one flush.
    pub deferred_flush_interval: std::time::Duration,
    /// Bytes written by such commits and not yet flushed that start the background flush
    /// at once, before the interval is up.
    pub deferred_flush_bytes: u64,
    /// Open without writing anything; commits fail with `Error::ReadOnly`.
    pub read_only: bool,
    /// Read-only opens only: a read error while following the chain of commits ends the
    /// chain there instead of failing the open, so the commits before the damage can be
    /// copied into a new store (`onesync salvage`); [`Store::salvage_stopped_by`] says where.
    pub salvage: bool,
    /// Maps the side file that processes sharing the store coordinate through (the VFS
    /// maps it at its FFI boundary); without it the side file is read and written with
    /// system calls, two or three more per commit.
    pub map_side_file: Option<crate::SideFileMapper>,
    /// Bytes of the cache of mapping blocks (format version 2), one per open store, shared
    /// by its snapshots and threads: what a store's mapping may hold in memory at most.
    pub mapping_cache_bytes: usize,
    /// Negative controls only (feature `test-hooks`): put a defect back, so a crash test can
    /// show that it finds it.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub sabotage: Option<Sabotage>,
}

/// A defect that was fixed, put back on purpose (see `Options::sabotage`). Without the
/// feature `test-hooks` nothing can set one: [`Options::sabotaged`] is always false, and the
/// names are not in the build (no `Debug`, no `from_env`).
///
/// Compared by `matches!` outside the engine: a comparison through `PartialEq` would put the
/// type's name into the build's debug information.
#[doc(hidden)]
#[cfg_attr(feature = "test-hooks", derive(Debug, PartialEq, Eq))]
#[derive(Clone, Copy)]
pub enum Sabotage {
    /// A checkpoint that moves pages down the file to shrink it writes the copies and the
    /// header naming them with no flush between: a power cut may keep the header and lose
    /// a copy, whose checksum recovery does not check (a checkpoint's pages are trusted).
    MovedPagesUnflushed,
    /// (The VFS's.) A store's journal in a transaction over several databases stays in
    /// memory, as it does alone: the store's part of a transaction a crash interrupts
    /// before the super-journal is deleted stays committed while the plain files' recovery
    /// rolls theirs back.
    StoreJournalInMemory,
    /// (The VFS's.) A store's commit in a transaction over several databases is left to the
    /// deferred flush at `synchronous=NORMAL`, as a lone commit is: a power cut after the
    /// super-journal's deletion takes back the store's part while the plain files keep theirs.
    MultiFileCommitDeferred,
    /// A checkpoint publishes its generation only after writing its header, and a writer
    /// taking the write lock trusts the side file's progress alone (the defects of issues
    /// 14 and 17): a process that died between writing a checkpoint's header and
    /// publishing it makes the next writer extend the old chain, which recovery then drops.
    CheckpointPublication,
    /// Flushes skip the device flush but still count their commits durable: commits shown
    /// undurable (`synchronous=NORMAL`/`OFF`) and reported durable are lost at a power cut.
    SkippedFlush,
    /// Growing hands out the new slots without writing zeros or flushing, as if the file
    /// were extended by the commits' own writes: each such commit's flush then carries a
    /// change of the file's length (filesystem metadata), and a record whose reserved
    /// window reaches past the file's end is dropped by recovery.
    LazyGrowth,
    /// A growth step whose flush fails returns the error without poisoning the store: the
    /// kernel may have dropped other commits' unflushed pages with that failure and reports
    /// it only once, so the next flush succeeds and calls those commits durable.
    GrowthFlushFailureIgnored,
    /// Commits check only the pages a transaction writes, not those it read
    /// (`Transaction::read_page_noted`): concurrent transactions then commit lost updates
    /// and write skew, which the model test of concurrent transactions must find.
    NoReadValidation,
    /// Of a process's concurrent commits, only the one that took the cross-process write
    /// lock catches up with other processes' commits, even when another thread's commit
    /// sequences first: that one builds on a stale state and forks the chain (the defect
    /// the kill torture found with two processes of two concurrent writers each).
    CatchUpByLocker,
    /// The VFS commits a concurrent transaction (`concurrent=1`) without checking the pages
    /// it read and wrote against the commits made since its snapshot: it overwrites them
    /// (the explorer's `unvalidated-snapshot` negative control).
    UnvalidatedSnapshot,
    /// A process flushing for every process (group commit across processes) reads how far
    /// the store is written only after its flush returned, so it calls durable the commits
    /// other processes wrote while it flushed: a power cut then loses acknowledged commits.
    FlushCoverageReadLate,
    /// A concurrent transaction (`concurrent=1`) that keeps SQLite's page cache from its
    /// previous one does not note the cached pages as read: a write skew through pages
    /// read from the cache commits (the warmed write-skew test's negative control).
    CachedPagesUnnoted,
    /// A process following other processes' commits applies every record it finds without
    /// checking that the pages it maps were written, not only those the side file's written
    /// word covers: a record whose writer died (or is still writing) before its pages maps
    /// them to stale slots.
    CatchUpTrustsUnwritten,
    /// A process that waited for a flush another process announced as covering its
    /// commits takes them as durable once that flush's lock is let go, without an entry
    /// saying so: a flusher that died or failed after announcing gets them acknowledged
    /// though nothing flushed them.
    AnnouncedFlushTrusted,
    /// A commit leaves out every range of a patched page's overlay that starts where a
    /// range of the overlay before it starts, even if its bytes changed (comparing offsets
    /// instead of ranges): processes following it, and recovery, keep the old bytes.
    PatchRangesByOffset,
    /// A follower's run of commits kept as operations (`Kept::Ops`) is shown to readers as
    /// the state kept before them, the operations left out: a commit another process showed
    /// or made durable is missing from this process's snapshots.
    KeptOperationsUnapplied,
    /// A transaction fenced on its base (`Transaction::refuse_any_later_commit`), whose
    /// reads are not noted, commits after later commits all the same: nothing checks what
    /// it read (the fenced model test's negative control finds lost updates or write skew).
    FenceIgnored,
    /// A concurrent commit whose new pages move past another commit's end (the VFS's
    /// relocation) leaves one pointer to them unrewritten: it names the old page number,
    /// now another commit's page (the growing model test's negative control).
    RelocatedPointerMissed,
    /// A concurrent COMMIT refused on the same snapshot as the try before it does not make
    /// the commits it lost to durable: after their process died before they were, every
    /// retry conflicts with them again (the explorer's `concurrent-growth` control).
    StalledRetryUnflushed,
    /// A process takes `WRITE`, `FLUSH` and user locks for real without reading the notes
    /// of a process alone with the store, which holds them in memory (`lease`): while that
    /// process commits, the joiner writes too, and the two fork the chain or overwrite each
    /// other's database.
    LeaseIgnored,
    /// A checkpoint gives the blocks of the mapping's runs it replaced back at once, instead
    /// of once no reader can use the old runs (`awaiting_readers`): a snapshot, or another
    /// process, still on the old base reads blocks reused for something else.
    RunBlocksFreedEarly,
    /// A checkpoint writes its manifest and header right after the blocks of its new runs,
    /// with no flush between: a power cut can keep the header and lose blocks it names
    /// (`crash.rs`'s negative control finds pages missing or wrong).
    RunBlocksUnflushed,
}

#[cfg(feature = "test-hooks")]
impl Sabotage {
    /// The environment variable crash tests set in the processes they start.
    pub const ENV: &'static str = "ONESYNC_SABOTAGE";

    /// The sabotage `ONESYNC_SABOTAGE` names (`checkpoint-publication`, `skipped-flush`,
    /// `lazy-growth`, `growth-flush-failure-ignored`, `no-read-validation`,
    /// `catch-up-by-locker`, `unvalidated-snapshot`, `flush-coverage-read-late`,
    /// `cached-pages-unnoted`, `catch-up-trusts-unwritten`, `announced-flush-trusted`,
    /// `patch-ranges-by-offset`, `kept-operations-unapplied`, `fence-ignored`,
    /// `relocated-pointer-missed`, `stalled-retry-unflushed`,
    /// `moved-pages-unflushed`, `store-journal-in-memory`, `multi-file-commit-deferred`,
    /// `lease-ignored`, `run-blocks-freed-early`, `run-blocks-unflushed`), if any.
    pub fn from_env() -> Option<Sabotage> {
        match std::env::var(Self::ENV).as_deref() {
            Ok("checkpoint-publication") => Some(Sabotage::CheckpointPublication),
            Ok("skipped-flush") => Some(Sabotage::SkippedFlush),
            Ok("moved-pages-unflushed") => Some(Sabotage::MovedPagesUnflushed),
            Ok("store-journal-in-memory") => Some(Sabotage::StoreJournalInMemory),
            Ok("multi-file-commit-deferred") => Some(Sabotage::MultiFileCommitDeferred),
            Ok("lazy-growth") => Some(Sabotage::LazyGrowth),
            Ok("growth-flush-failure-ignored") => Some(Sabotage::GrowthFlushFailureIgnored),
            Ok("no-read-validation") => Some(Sabotage::NoReadValidation),
            Ok("catch-up-by-locker") => Some(Sabotage::CatchUpByLocker),
            Ok("unvalidated-snapshot") => Some(Sabotage::UnvalidatedSnapshot),
            Ok("flush-coverage-read-late") => Some(Sabotage::FlushCoverageReadLate),
            Ok("cached-pages-unnoted") => Some(Sabotage::CachedPagesUnnoted),
            Ok("catch-up-trusts-unwritten") => Some(Sabotage::CatchUpTrustsUnwritten),
            Ok("announced-flush-trusted") => Some(Sabotage::AnnouncedFlushTrusted),
            Ok("patch-ranges-by-offset") => Some(Sabotage::PatchRangesByOffset),
            Ok("kept-operations-unapplied") => Some(Sabotage::KeptOperationsUnapplied),
            Ok("fence-ignored") => Some(Sabotage::FenceIgnored),
            Ok("relocated-pointer-missed") => Some(Sabotage::RelocatedPointerMissed),
            Ok("stalled-retry-unflushed") => Some(Sabotage::StalledRetryUnflushed),
            Ok("lease-ignored") => Some(Sabotage::LeaseIgnored),
            Ok("run-blocks-freed-early") => Some(Sabotage::RunBlocksFreedEarly),
            Ok("run-blocks-unflushed") => Some(Sabotage::RunBlocksUnflushed),
            _ => None,
        }
    }
}

impl Default for Options {
    fn default() -> Options {
        Options {
            page_size: 4096,
            checkpoint_interval: 1000,
            log_capacity: 64 << 20,
            // Two rows of SQLite fit in a few slots: a new store is about 256 KiB and grows
            // a quarter at a time, from 256 KiB steps up to 64 MiB ones.
            initial_capacity: 256 << 10,
            growth_step: 256 << 10,
            max_growth_step: 64 << 20,
            embed_limit: 64,
            window_bytes: 1 << 20,
            // WAL at NORMAL is durable only at its checkpoints; 20 ms bounds the window
            // well below a person's notice while sharing one flush among many commits.
            deferred_flush_interval: std::time::Duration::from_millis(20),
            // About what WAL's default autocheckpoint lets its log reach (1,000 pages).
            deferred_flush_bytes: 4 << 20,
            read_only: false,
            salvage: false,
            map_side_file: None,
            mapping_cache_bytes: 8 << 20,
            #[cfg(feature = "test-hooks")]
            sabotage: None,
        }
    }
}

/// Counters since the store was opened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    pub page_size: u64,
    /// Commits that changed something (each wrote one commit record).
    pub commit_records: u64,
    /// Whole pages written to slots.
    pub pages_written: u64,
    /// Pages changed only through overlays carried in commit records.
    pub pages_embedded: u64,
    /// Commits whose record and pages did not fit the reserved run and took two writes.
    pub jumps: u64,
    /// Bytes of pages, records, checkpoints and headers written (not preallocation).
    pub bytes_written: u64,
    /// Calls that wrote (pwrite or the I/O layer's equivalent), preallocation excluded.
    pub write_calls: u64,
    /// Bytes of zeros written to grow the file.
    pub bytes_preallocated: u64,
    /// Times the file grew (each wrote zeros and flushed once).
    pub growths: u64,
    /// Bytes of free slots at the file's end given back to the filesystem (truncated
    /// after a checkpoint freed them).
    pub bytes_returned: u64,
    /// Of `growths`, those made inside a commit's or checkpoint's locks, every other
    /// commit waiting for their zeros and flush (the rest grew ahead, outside them).
    pub growths_holding_locks: u64,
    /// Calls to fdatasync (or the I/O layer's equivalent).
    pub flushes: u64,
    /// Microseconds spent in group-commit flushes, all together.
    pub flush_micros: u64,
    /// Group-commit flushes this process ran (the ones `flush_micros` times; `flushes`
    /// also counts growth, checkpoint and follower flushes).
    pub group_commit_flushes: u64,
    /// Group-commit waits that another process's flush covered (this process flushed
    /// nothing for them).
    pub flushes_by_others: u64,
    /// Waits for a flush another process announced to cover this process's commits (shared
    /// with every process it covered; see `sharing.rs`), whether or not it then did.
    pub announced_flush_waits: u64,
    /// Microseconds this process waited for the cross-process write lock (held by
    /// another process), all threads together.
    pub write_lock_waited_micros: u64,
    /// Microseconds this process held the cross-process write lock: every commit sequences
    /// and writes under it, so over all processes this is its share of the run's time.
    pub write_lock_held_micros: u64,
    /// Catch-ups that followed other processes' commits (at least one record).
    pub catch_ups: u64,
    /// Other processes' commit records this process applied to its mapping.
    pub records_followed: u64,
    pub checkpoints: u64,
    /// Bytes checkpoints wrote: the mapping and both header copies (part of `bytes_written`;
    /// the pages a compacting checkpoint moves are not counted here).
    pub checkpoint_bytes: u64,
    /// Microseconds spent in checkpoints that succeeded, all together (from waiting for
    /// the commits in flight to the second header copy's flush).
    pub checkpoint_micros: u64,
    /// Reads of mapping blocks the cache served (`Options::mapping_cache_bytes`).
    pub mapping_cache_hits: u64,
    /// Reads of mapping blocks that went to the file.
    pub mapping_cache_misses: u64,
    /// Bytes of mapping blocks the cache holds now.
    pub mapping_cache_bytes: u64,
    /// 1 if opening replayed commit records written after the last checkpoint.
    pub recoveries: u64,
    /// Records replayed at open.
    pub records_replayed: u64,
    pub conflicts: u64,
    /// Of `conflicts`, those found before the commit queued for the write lock (against
    /// other processes' commits followed just before).
    pub early_conflicts: u64,
    pub last_seq: u64,
    pub durable_seq: u64,
    pub slots_total: u64,
    pub slots_free: u64,
}

/// A process grows the file by this fraction (1/N) of the slots it allocates from.
pub(crate) const GROWTH_DIVISOR: u64 = 4;
/// A window ahead of the chain takes at most this fraction (1/N) of those slots.
pub(crate) const WINDOW_DIVISOR: u64 = 4;
/// The smallest growth in slots, whatever the options say.
const MIN_GROWTH_SLOTS: u64 = 16;

impl Options {
    /// Whether the defect `s` is put back (a negative control); always false without the
    /// feature `test-hooks`.
    #[cfg(feature = "test-hooks")]
    #[inline]
    pub fn sabotaged(&self, s: Sabotage) -> bool {
        self.sabotage == Some(s)
    }

    /// Whether the defect `s` is put back: never, without the feature `test-hooks`.
    #[cfg(not(feature = "test-hooks"))]
    #[inline]
    pub fn sabotaged(&self, _: Sabotage) -> bool {
        false
    }

    /// Slots reserved ahead of the commit chain at a time, for a process allocating from
    /// `base` slots: `window_bytes`, but at most a quarter of `base` (at least 2).
    pub(crate) fn window_slots(&self, base: u64) -> u64 {
        (self.window_bytes / self.page_size as u64)
            .min(base / WINDOW_DIVISOR)
            .max(2)
    }

    /// Slots to add to a file when a process allocating from `base` slots needs `at_least`
    /// more: a quarter of `base`, within the smallest and largest step, and `at_least`.
    pub(crate) fn growth_slots(&self, base: u64, at_least: u64) -> u64 {
        let page_size = self.page_size as u64;
        let smallest = (self.growth_step / page_size).max(MIN_GROWTH_SLOTS);
        let largest = (self.max_growth_step / page_size).max(smallest);
        (base / GROWTH_DIVISOR).clamp(smallest, largest).max(at_least)
    }

    /// Whether a process allocating from `base` slots checkpoints to reuse slots before it
    /// grows the file (see `max_growth_step`).
    pub(crate) fn reclaims_before_growing(&self, base: u64) -> bool {
        base >= self.max_growth_step / self.page_size as u64
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if !valid_page_size(self.page_size) {
            return Err(Error::InvalidArgument(format!(
                "page size {} is not a power of two from 512 to 65536",
                self.page_size
            )));
        }
        Ok(())
    }
}
