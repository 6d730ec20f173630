//! Concurrent write transactions (`concurrent=1`, `PRAGMA onesync_concurrent`): several
//! connections, of this process and others, write one database at once, each on the
//! snapshot its read transaction took; COMMIT validates against every commit since and
//! fails with `SQLITE_BUSY_SNAPSHOT` on a true conflict (crates/vfs/README.md, "Concurrent
//! writers", has the isolation argument).
//!
//! Invariants (1 and 3 checked by debug assertions):
//! 1. A concurrent writer's transaction is held here (`ConcurrentWrite`), not in a store
//!    transaction: whole pages written, pages read, the file's size. Nothing of it reaches
//!    the store before its commit.
//! 2. Every page SQLite used in the transaction is in `reads` or `writes` (or in
//!    `cache_pages`, with `cache_pages_read`), and agrees with the snapshot. SQLite reads
//!    the 16 bytes at offset 24 (change counter, page count, freelist) at a read
//!    transaction's start whenever its cache holds pages, and empties its cache unless
//!    they match what it last saw. They come back changed (an empty
//!    cache: every page is then read through xRead, and noted) unless the handle's
//!    `cache_state` is the snapshot's state: the cache was filled from that very state, or
//!    by this handle's own commit of exactly SQLite's pages with nothing committed since.
//!    Then the cache is kept and every page it may hold (`cache_pages`: all read or
//!    written since SQLite last emptied it) counts as read (`cache_pages_read`). A lone
//!    writer so keeps its cache from one transaction to the next, as a serial one does.
//!    Those pages are checked one by one only if another commit came after the snapshot;
//!    a plan on the snapshot itself instead has the store refuse any commit after it
//!    (`Plan::only_on_base`), and plans again if one came.
//! 3. A commit writes exactly: the base's pages it did not write, unchanged; its writes,
//!    moved past the latest end if another commit grew the file meanwhile; page 1 merged.
//!    It is built on the latest state and is refused by the store if anything it read or
//!    wrote changed between that state and its commit (the loop below then plans again;
//!    which fields name the moved pages is found once, and rewritten for each plan's end).
//! 4. After a commit or a refusal, the transaction is `done`: SQLite's rollback writes
//!    (after a refusal) are dropped, and nothing commits twice.
//! 5. A commit that failed (an I/O error, not a conflict) is `done` and `failed`; its error
//!    reached SQLite. SQLite answers a failed COMMIT_ATOMIC_WRITE of the I/O class by
//!    falling back to its journal: ROLLBACK_ATOMIC_WRITE, the pages again, xSync. So
//!    ROLLBACK_ATOMIC_WRITE after a failure opens the transaction again (a fresh attempt
//!    that fails or commits on its own), and never lets that xSync find it `done` and
//!    report a commit that did not happen (the kernel torture's power cuts found that).
//!
//! | state | xRead | xWrite | xSync / PHASETWO / COMMIT_ATOMIC |
//! |---|---|---|---|
//! | SHARED, concurrent mode | snapshot, page noted | (SQLite never) | nothing |
//! | RESERVED+, open | writes, else snapshot (noted) | into `writes` | commit: OK or BUSY_SNAPSHOT |
//! | RESERVED+, done | writes, else snapshot | dropped | nothing |
//! | RESERVED+, done and failed | writes, else snapshot | dropped | nothing; ROLLBACK_ATOMIC_WRITE → open |

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::ffi::c_int;
use std::sync::Arc;
use std::time::Instant;

use onesync_store::{Error as StoreError, FileId, PendingCommit, Sabotage, Snapshot};

use crate::backend::{IoResult, LockLevel};
use crate::ffi::{
    SQLITE_BUSY, SQLITE_IOERR, SQLITE_IOERR_LOCK, SQLITE_IOERR_READ, SQLITE_IOERR_SHORT_READ, SQLITE_READONLY,
};

use super::durability::hand_off;
use super::handle::{commit_err, read_bytes, store_err, ConcurrentWrite, StoreDb, Writing};
use super::locking::{note_lock_released, process_lock_key, PROCESS_LOCK_POLL, WRITER_WAIT};
use super::registry::{lock, CHANGE_COUNTER};
use super::relocate::{analyze_appended, get32, Relocation};

/// SQLite's extended code for "another connection's commit conflicts with this
/// transaction's snapshot": a retry of the whole transaction can succeed.
pub(crate) const SQLITE_BUSY_SNAPSHOT: c_int = SQLITE_BUSY | (2 << 8);

/// How long a commit goes on planning again after losing the race to the store's commit
/// lock before it gives up with SQLITE_BUSY_SNAPSHOT (each loss means another commit went
/// through, so the store as a whole makes progress meanwhile).
const COMMIT_RACE_LIMIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The most pages SQLite's cache is kept with from one transaction to the next. They are
/// checked one by one only when another commit came meanwhile (then up to 2048 page
/// versions, about once each time a lone writer stops being alone); past this SQLite
/// empties its cache and reads what it needs again. A small bound (128) had a lone writer
/// inserting 100 rows per transaction empty its cache every few dozen transactions and
/// fault the freed pages in again, well behind a serial writer; measure with `onesync-lab
/// bench writers --workload own-rows --threads 1 --fs ext4 --rounds 20 --mode
/// onesync,onesync-concurrent`.
const CACHE_PAGES_KEPT_MAX: usize = 2048;

/// Page 1 fields every commit may change: the change counter (24..28), the page count
/// (28..32), version-valid-for (92..96) and the writer's SQLite version (96..100).
const PAGE_ONE_MERGED: [std::ops::Range<usize>; 3] = [24..32, 92..96, 96..100];
const PAGE_COUNT: std::ops::Range<usize> = 28..32;
const VERSION_VALID_FOR: std::ops::Range<usize> = 92..96;

/// What a commit writes on top of the latest state.
struct Plan<'a> {
    /// The pages to commit: those SQLite wrote, as held (at their own numbers, or moved past
    /// the latest end; the store keeps them without a copy), or as changed here (page 1's
    /// header, pointers to moved pages).
    pages: BTreeMap<u64, Cow<'a, Arc<[u8]>>>,
    size: u64,
    /// Pages read (not written), checked unchanged up to the latest state: the store
    /// checks them from there to the commit.
    reads: Vec<u64>,
    /// Planned on the base itself with SQLite's cache kept (its pages count as read): the
    /// store refuses the commit if anything came after the base, instead of checking each
    /// of those pages (a lone writer's usual case; the loop then plans again).
    only_on_base: bool,
    /// Nothing was committed since the base, and `pages` and `size` are exactly the
    /// transaction's: SQLite's cache agrees with the commit (invariant 2).
    verbatim: bool,
    /// The pages the transaction appended move past another commit's end.
    relocated: bool,
}

/// A 4-byte field of page 1 (always there: a page is at least 512 bytes).
fn be32(page: &[u8], at: usize) -> u32 {
    get32(page, at).unwrap_or(0)
}

/// SQLite's page count from page 1 when the header says it is valid, else from the size.
fn page_count(page_one: &[u8], size: u64, page_size: u64) -> u64 {
    let counter = be32(page_one, CHANGE_COUNTER.start);
    let in_header = be32(page_one, PAGE_COUNT.start);
    if in_header != 0 && be32(page_one, VERSION_VALID_FOR.start) == counter {
        u64::from(in_header)
    } else {
        size.div_ceil(page_size)
    }
}

/// Whether two versions of page 1 differ only in the fields every commit may change.
fn page_one_equal_but_merged(a: &[u8], b: &[u8]) -> bool {
    let mut start = 0;
    for r in PAGE_ONE_MERGED {
        if a[start..r.start] != b[start..r.start] {
            return false;
        }
        start = r.end;
    }
    a[start..] == b[start..]
}

impl StoreDb {
    /// Whether this handle's next write transaction is a concurrent one.
    pub(super) fn concurrent_now(&self) -> bool {
        self.concurrent && !self.connection.is_exclusive(self.handle)
    }

    /// xRead in concurrent mode, for a reader (SHARED): note the pages read; the 16 bytes
    /// at offset 24 come back changed so SQLite empties its cache, unless the cache agrees
    /// with the snapshot; then every page it may hold is noted (invariant 2).
    pub(super) fn note_shared_read(&mut self, buf: &mut [u8], offset: u64) {
        let page_size = self.store.page_size;
        let snapshot_seq = self.snapshot.as_ref().map(Snapshot::seq);
        if offset == 24 && buf.len() == 16 {
            let keep = snapshot_seq.is_some()
                && self.cache_state == snapshot_seq
                && self.cache_pages.len() <= CACHE_PAGES_KEPT_MAX;
            if keep {
                self.cache_pages_read =
                    !matches!(self.store.store.sabotage(), Some(Sabotage::CachedPagesUnnoted));
            } else {
                buf[15] ^= 0xff;
                self.cache_pages.clear();
            }
            self.cache_state = snapshot_seq;
            return;
        }
        let first = offset / page_size;
        let last = (offset + buf.len().max(1) as u64 - 1) / page_size;
        self.shared_reads.extend(first..=last);
        self.cache_pages.extend(first..=last);
    }

    /// Whether another handle of this connection writes this store now: then this one
    /// writes serially too, in the connection's one store transaction (a transaction over
    /// two databases of one store commits atomically only so).
    pub(super) fn connection_writes_store(&self) -> bool {
        lock(&self.store.coord)
            .conns
            .get(&self.connection.id)
            .is_some_and(|c| !c.members.is_empty())
    }

    /// Lock RESERVED as a concurrent writer: other concurrent writers go on; a serial writer
    /// of this process or another excludes them.
    pub(super) fn become_concurrent_writer(&mut self) -> IoResult<()> {
        if self.read_only {
            return Err(SQLITE_READONLY);
        }
        let deadline = Instant::now() + WRITER_WAIT;
        let key = process_lock_key(&self.logical);
        let mut coord = lock(&self.store.coord);
        loop {
            let file = coord.files.entry(self.logical.clone()).or_default();
            match file.writer {
                None => {}
                Some((_, conn)) if conn == self.connection.id => return Err(SQLITE_BUSY),
                Some(_) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(SQLITE_BUSY);
                    }
                    coord = self.store.wait_for_writer_change(coord, left);
                    continue;
                }
            }
            if file.concurrent_writers > 0 {
                break;
            }
            // The first concurrent writer of this process holds the database's process lock
            // shared, which serial writers of other processes take exclusively.
            match self.store.store.try_lock_for_process_shared(key) {
                Ok(true) => break,
                Ok(false) if Instant::now() < deadline => {
                    self.store.note_contention();
                    drop(coord);
                    std::thread::sleep(PROCESS_LOCK_POLL);
                    coord = lock(&self.store.coord);
                }
                Ok(false) => return Err(SQLITE_BUSY),
                Err(_) => return Err(SQLITE_IOERR_LOCK),
            }
        }
        let file = coord.files.entry(self.logical.clone()).or_default();
        file.concurrent_writers += 1;
        drop(coord);
        let size = match self.file_in_snapshot() {
            Some((snap, Some(id))) => {
                snap.file_size(id)
                    .map_err(store_err(&self.api, SQLITE_IOERR, "reading the file size"))?
            }
            _ => 0,
        };
        self.writing = Writing::Concurrent(ConcurrentWrite {
            reads: std::mem::take(&mut self.shared_reads),
            writes: BTreeMap::new(),
            base_size: size,
            size,
            wrote: false,
            done: false,
            failed: false,
            committed_verbatim: None,
            pending: None,
        });
        Ok(())
    }

    /// The concurrent writer lets go of RESERVED: what was not committed is dropped (a
    /// rollback's, or a refused commit's); returns the commit's flush to wait for.
    pub(super) fn leave_concurrent_writer(&mut self) -> Option<PendingCommit> {
        let cw = self.writing.take_concurrent()?;
        if cw.wrote {
            // SQLite's cache now holds what it wrote: known only after a commit of exactly
            // those pages (a rollback, a refusal or a merged commit leaves it unknown).
            self.cache_state = cw.committed_verbatim;
        }
        let mut coord = lock(&self.store.coord);
        if let Some(file) = coord.files.get_mut(&self.logical) {
            file.concurrent_writers = file.concurrent_writers.saturating_sub(1);
            if file.concurrent_writers == 0 {
                self.store
                    .store
                    .unlock_for_process(process_lock_key(&self.logical));
                self.store.writer_left.notify_all();
                note_lock_released();
            }
        }
        cw.pending
    }

    /// xRead of a concurrent writer: its own writes, else the base (noted).
    pub(super) fn concurrent_read(&mut self, buf: &mut [u8], offset: u64) -> IoResult<()> {
        let page_size = self.store.page_size;
        let Some((snap, id)) = self.snapshot.as_ref().map(|s| (s, s.file(&self.logical))) else {
            return Err(SQLITE_IOERR_READ);
        };
        let Some(cw) = self.writing.concurrent_mut() else {
            return Err(SQLITE_IOERR_READ);
        };
        debug_assert!(
            self.level >= LockLevel::Reserved,
            "invariant 1: a writer's transaction"
        );
        let base_pages = cw.base_size.div_ceil(page_size);
        let err = store_err(&self.api, SQLITE_IOERR_READ, "reading");
        let size = cw.size;
        let cache_pages = &mut self.cache_pages;
        read_bytes(size, page_size, buf, offset, |p, page| {
            cache_pages.insert(p);
            if let Some(data) = cw.writes.get(&p) {
                page.copy_from_slice(data);
                return Ok(());
            }
            match id {
                Some(id) if p < base_pages => {
                    cw.reads.insert(p);
                    snap.read_page(id, p, page).map_err(&err)
                }
                _ => {
                    page.fill(0);
                    Ok(())
                }
            }
        })
    }

    /// xWrite of a concurrent writer (dropped once the transaction is done).
    pub(super) fn concurrent_write_bytes(&mut self, buf: &[u8], offset: u64) -> IoResult<()> {
        let page_size = self.store.page_size as usize;
        if self.writing.concurrent().is_some_and(|cw| cw.done) {
            return Ok(());
        }
        let mut done = 0usize;
        while done < buf.len() {
            let at = offset + done as u64;
            let index = at / page_size as u64;
            let within = (at % page_size as u64) as usize;
            let n = (page_size - within).min(buf.len() - done);
            let whole = n == page_size;
            let cw = self.writing.concurrent_mut().ok_or(SQLITE_IOERR)?;
            if whole {
                // SQLite writes whole pages (the usual case): one copy, into the page kept.
                let data = &buf[done..done + n];
                match cw.writes.get_mut(&index).and_then(Arc::get_mut) {
                    Some(unshared) => unshared.copy_from_slice(data),
                    None => {
                        cw.writes.insert(index, Arc::from(data));
                    }
                }
                self.cache_pages.insert(index);
                done += n;
                continue;
            }
            // Read-modify-write: SQLite's page is smaller than the store's.
            let known = cw.writes.get(&index).map(|data| data.to_vec());
            let mut page = match known {
                Some(data) => data,
                None => {
                    let mut page = vec![0u8; page_size];
                    let start = index * page_size as u64;
                    // Past the end reads as zeros (a short read is expected there).
                    match self.concurrent_read(&mut page, start) {
                        Ok(()) | Err(SQLITE_IOERR_SHORT_READ) => {}
                        Err(e) => return Err(e),
                    }
                    page
                }
            };
            page[within..within + n].copy_from_slice(&buf[done..done + n]);
            let cw = self.writing.concurrent_mut().ok_or(SQLITE_IOERR)?;
            cw.writes.insert(index, Arc::from(page));
            self.cache_pages.insert(index);
            done += n;
        }
        let cw = self.writing.concurrent_mut().ok_or(SQLITE_IOERR)?;
        cw.size = cw.size.max(offset + buf.len() as u64);
        cw.wrote = true;
        Ok(())
    }

    pub(super) fn concurrent_truncate(&mut self, size: u64) -> IoResult<()> {
        let page_size = self.store.page_size;
        let cw = self.writing.concurrent_mut().ok_or(SQLITE_IOERR)?;
        if cw.done {
            return Ok(());
        }
        cw.size = size;
        let kept = size.div_ceil(page_size);
        cw.writes.retain(|&p, _| p < kept);
        cw.wrote = true;
        Ok(())
    }

    /// Commit the concurrent transaction if it wrote anything and is not done: `Ok` once it
    /// is sequenced (a FULL commit's flush is left in `pending`), `SQLITE_BUSY_SNAPSHOT` on a
    /// conflict (the transaction is then done, and SQLite rolls it back).
    pub(super) fn commit_concurrent(&mut self) -> IoResult<()> {
        let result = self.try_commit_concurrent();
        if let (Err(code), Some(cw)) = (result, self.writing.concurrent_mut()) {
            cw.failed = cw.done && code != SQLITE_BUSY_SNAPSHOT;
        }
        result
    }

    /// SQLite gave up its batch atomic write (ROLLBACK_ATOMIC_WRITE): before a commit, or
    /// after a failed one (it then writes the pages again through its journal and syncs),
    /// the transaction is open again with nothing written (invariant 5).
    pub(super) fn concurrent_batch_undone(&mut self) {
        if let Some(cw) = self.writing.concurrent_mut().filter(|cw| !cw.done || cw.failed) {
            cw.writes.clear();
            cw.wrote = false;
            cw.size = cw.base_size;
            cw.done = false;
            cw.failed = false;
            cw.committed_verbatim = None;
        }
    }

    fn try_commit_concurrent(&mut self) -> IoResult<()> {
        let Some(cw) = self.writing.concurrent_mut() else {
            return Ok(());
        };
        if cw.done || !cw.wrote {
            return Ok(());
        }
        cw.done = true;
        let Some(base) = self.snapshot.as_ref() else {
            return Err(SQLITE_IOERR);
        };
        let mut lost_to = String::new();
        // Found on the first plan that moves pages, applied again by the plans after it.
        let mut relocation = None;
        let give_up = Instant::now() + COMMIT_RACE_LIMIT;
        while Instant::now() < give_up {
            let latest = self
                .store
                .store
                .try_latest_settled_snapshot()
                .map_err(|_| SQLITE_IOERR_LOCK)?;
            let sabotage = self.store.store.sabotage();
            let cached = self.cache_pages_read.then_some(&self.cache_pages);
            let plan = match plan_commit(
                base,
                &latest,
                &self.logical,
                cw,
                cached,
                &mut relocation,
                sabotage,
            ) {
                Ok(plan) => plan,
                Err(why) => {
                    // A retry refused on the same snapshot as the try before it has not seen
                    // the commits it lost to: its read transaction took the durable state (a
                    // retry reads the latest written one, unless SQLite took and dropped
                    // SHARED in between, reloading a schema another commit changed), and
                    // they are not durable. If their process died before they were, nobody
                    // flushes them, and every retry conflicted with them again (`explore
                    // --scenario concurrent-growth`: B refused five times over). Then make
                    // them durable here. Not at every refusal: waiting for a flush at each
                    // one costs hot rows much of their rate (`onesync-lab bench writers
                    // --workload hot-rows --threads 16 --mode onesync-concurrent`).
                    let stalled = self.connection.refused_again_on(base.seq());
                    let flush = stalled && !matches!(sabotage, Some(Sabotage::StalledRetryUnflushed));
                    if flush && latest.seq() > self.store.store.durable_seq() {
                        // A failed flush poisons the store; the retry then reports it.
                        let _ = self.store.store.flush();
                    }
                    return Err(self.refuse_conflict(&why));
                }
            };
            let mut txn = latest.begin();
            let api = self.api;
            let err = store_err(&api, SQLITE_IOERR, "committing");
            let id = match txn.file(&self.logical) {
                Some(id) => id,
                None => txn.create_file(&self.logical).map_err(&err)?,
            };
            for &p in &plan.reads {
                txn.note_read(id, p);
            }
            if plan.only_on_base {
                txn.refuse_any_later_commit();
            }
            for (&p, data) in &plan.pages {
                txn.write_shared_page(id, p, Arc::clone(data)).map_err(&err)?;
            }
            txn.set_file_size(id, plan.size).map_err(&err)?;
            let (verbatim, relocated) = (plan.verbatim, plan.relocated);
            match txn.commit_without_waiting() {
                Ok(pending) => {
                    self.store.concurrent_commits.count(verbatim, relocated);
                    let cw = self.writing.concurrent_mut().ok_or(SQLITE_IOERR)?;
                    cw.writes.clear();
                    cw.committed_verbatim = verbatim.then_some(pending.seq());
                    return self.sequenced(pending);
                }
                // Another commit came between the plan and the commit lock: plan again.
                Err(e) if matches!(e.error, StoreError::Conflict(_)) => {
                    lost_to = e.error.to_string();
                    continue;
                }
                Err(e) => return Err(commit_err(&self.api, "committing")(e)),
            }
        }
        Err(self.refuse_conflict(&format!("other commits kept coming first (the last: {lost_to})")))
    }

    fn refuse_conflict(&mut self, why: &str) -> c_int {
        if let Some(cw) = self.writing.concurrent_mut() {
            cw.writes.clear();
        }
        // The retry reads the latest written state, not the durable one, which lacks the
        // commits in flight it lost to (it would only conflict again).
        self.connection.note_retrying_writer();
        self.api.log(
            SQLITE_BUSY_SNAPSHOT,
            &format!(
                "onesync: concurrent COMMIT of {:?} refused: {why}; retry the transaction",
                self.logical
            ),
        );
        SQLITE_BUSY_SNAPSHOT
    }

    /// A concurrent commit went through: show it (NORMAL, OFF) or keep its flush to wait for
    /// (FULL), as a serial commit does.
    fn sequenced(&mut self, pending: PendingCommit) -> IoResult<()> {
        let seq = pending.seq();
        let synchronous = self.connection.commit_synchronous(&[self.handle]);
        let pending = hand_off(pending, synchronous, false).map_err(commit_err(&self.api, "committing"))?;
        if let Some(cw) = self.writing.concurrent_mut() {
            cw.pending = pending;
        }
        let mut coord = lock(&self.store.coord);
        coord.last_commit.insert(self.connection.id, seq);
        let file = coord.files.entry(self.logical.clone()).or_default();
        file.changed_at = file.changed_at.max(seq);
        Ok(())
    }
}

/// Validates the transaction against the commits between its base and `latest` and plans
/// what it commits on `latest` (invariant 3); `Err` says what conflicts.
fn plan_commit<'a>(
    base: &Snapshot,
    latest: &Snapshot,
    logical: &str,
    cw: &'a ConcurrentWrite,
    cached: Option<&HashSet<u64>>,
    relocation: &mut Option<Relocation>,
    sabotage: Option<Sabotage>,
) -> Result<Plan<'a>, String> {
    let page_size = base.page_size();
    let as_written = || -> BTreeMap<u64, Cow<'a, Arc<[u8]>>> {
        cw.writes.iter().map(|(&p, d)| (p, Cow::Borrowed(d))).collect()
    };
    // Nothing committed since the base: nothing to validate here (the store validates the
    // reads from `latest` to the commit).
    let moved = latest.seq() != base.seq();
    let (base_id, latest_id) = (base.file(logical), latest.file(logical));
    let Some(base_id) = base_id else {
        if latest_id.is_some() {
            return Err("another connection created the database meanwhile".into());
        }
        return Ok(Plan {
            pages: as_written(),
            size: cw.size,
            reads: Vec::new(),
            only_on_base: false,
            verbatim: !moved,
            relocated: false,
        });
    };
    let Some(latest_id) = latest_id else {
        return Err("the database was deleted meanwhile".into());
    };
    let base_size = base.file_size(base_id).map_err(|e| e.to_string())?;
    let latest_size = latest.file_size(latest_id).map_err(|e| e.to_string())?;
    let base_pages = base_size.div_ceil(page_size);
    // A version that cannot be read counts as changed: the transaction cannot be shown safe.
    let unchanged = |p: u64| matches!((base.page_version(base_id, p), latest.page_version(latest_id, p)), (Ok(a), Ok(b)) if a == b);
    // Page 1 is merged below; pages past the base's end are this transaction's own.
    // Negative controls only: without these checks lost updates and write skew commit.
    let validate_writes = !matches!(sabotage, Some(Sabotage::UnvalidatedSnapshot));
    let validate_reads = validate_writes && !matches!(sabotage, Some(Sabotage::NoReadValidation));
    let all_reads = || cw.reads.iter().chain(cached.into_iter().flatten());
    if moved {
        let reads = all_reads().filter(|_| validate_reads);
        let writes = cw.writes.keys().filter(|_| validate_writes);
        for &p in reads.chain(writes) {
            if p != 0 && p < base_pages && !unchanged(p) {
                let how = if cw.writes.contains_key(&p) {
                    "written"
                } else {
                    "read"
                };
                return Err(format!(
                    "page {} ({how} by this transaction) was changed by another commit",
                    p + 1
                ));
            }
        }
    }
    let only_on_base = cached.is_some() && !moved;
    let reads: Vec<u64> = if only_on_base {
        Vec::new()
    } else {
        let reads: BTreeSet<u64> = all_reads()
            .copied()
            .filter(|p| *p != 0 && *p < base_pages && !cw.writes.contains_key(p))
            .collect();
        reads.into_iter().collect()
    };
    if base_pages == 0 || unchanged(0) {
        if latest_size != base_size {
            return Err("the file's size changed but page 1 did not".into());
        }
        return Ok(Plan {
            pages: as_written(),
            size: cw.size,
            reads,
            only_on_base,
            verbatim: !moved,
            relocated: false,
        });
    }
    let read = |snap: &Snapshot, id: FileId| -> Result<Vec<u8>, String> {
        let mut page = vec![0u8; page_size as usize];
        snap.read_page(id, 0, &mut page).map_err(|e| e.to_string())?;
        Ok(page)
    };
    let base_one = read(base, base_id)?;
    let latest_one = read(latest, latest_id)?;
    if !page_one_equal_but_merged(&base_one, &latest_one) {
        return Err(
            "page 1 (the schema, the freelist or header fields) was changed by another commit".into(),
        );
    }
    let mine_one = cw.writes.get(&0).map_or_else(|| base_one.clone(), |d| d.to_vec());
    let b = page_count(&base_one, base_size, page_size);
    let l = page_count(&latest_one, latest_size, page_size);
    let m = page_count(&mine_one, cw.size, page_size);
    // The transaction's pages: as they are, or moved past the latest end.
    let relocated = l != b && m != b;
    let (mut pages, size) = if l == b {
        (as_written(), cw.size)
    } else {
        let sqlite_page_size = match u32::from(u16::from_be_bytes([base_one[16], base_one[17]])) {
            1 => 65536,
            n => n,
        };
        if u64::from(sqlite_page_size) != page_size
            || base_size != b * page_size
            || latest_size != l * page_size
        {
            return Err("the file grew meanwhile and its pages cannot be matched to the store's".into());
        }
        if l < b || m < b || cw.size != m * page_size {
            return Err("the file shrank meanwhile".into());
        }
        if m == b {
            // Page 1 takes the latest page count below.
            (as_written(), l * page_size)
        } else {
            let written: BTreeMap<u32, &Arc<[u8]>> =
                cw.writes.iter().map(|(&p, d)| ((p + 1) as u32, d)).collect();
            let cant_move = |why: String| {
                format!("the file grew meanwhile and this transaction's new pages cannot move: {why}")
            };
            let relocation = match relocation {
                Some(found) => found,
                None => {
                    let read_base = |pgno: u32| -> Option<Vec<u8>> {
                        let mut page = vec![0u8; page_size as usize];
                        base.read_page(base_id, u64::from(pgno) - 1, &mut page).ok()?;
                        Some(page)
                    };
                    let found = relocation
                        .insert(analyze_appended(&written, &read_base, b as u32).map_err(cant_move)?);
                    if matches!(sabotage, Some(Sabotage::RelocatedPointerMissed)) {
                        found.forget_one_field();
                    }
                    found
                }
            };
            let moved = relocation
                .apply(&written, l as u32)
                .map_err(cant_move)?
                .into_iter()
                .map(|(p, d)| (u64::from(p) - 1, d))
                .collect();
            (moved, (l + m - b) * page_size)
        }
    };
    // Page 1 merged: this transaction's (as moved, if its pages moved), with the latest page
    // count if it did not grow the file itself, and the latest change counter plus one.
    let mut one = pages.remove(&0).map_or(mine_one, |moved| moved.to_vec());
    if l != b && m == b {
        one[PAGE_COUNT].copy_from_slice(&(l as u32).to_be_bytes());
    }
    let counter = be32(&latest_one, CHANGE_COUNTER.start)
        .wrapping_add(1)
        .to_be_bytes();
    one[CHANGE_COUNTER].copy_from_slice(&counter);
    one[VERSION_VALID_FOR].copy_from_slice(&counter);
    pages.insert(0, Cow::Owned(Arc::from(one)));
    debug_assert!(
        pages.keys().all(|&p| p < size.div_ceil(page_size)),
        "invariant 3: every page committed lies within the committed size"
    );
    Ok(Plan {
        pages,
        size,
        reads,
        only_on_base,
        verbatim: false,
        relocated,
    })
}
