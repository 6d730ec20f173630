//! SQLite's lock levels over a store: SHARED takes a snapshot, RESERVED and up is the one
//! writer per logical file (in this process, a map and a condvar; among processes, an OFD
//! byte lock), with the waits and wake-ups that replace the busy handler's sleeps.

use std::ffi::c_int;
use std::sync::{Mutex, MutexGuard};

use onesync_store::wakeup::{Counted, Wakeup};
use std::time::{Duration, Instant};

use crate::backend::{IoResult, LockLevel};
use crate::ffi::{SQLITE_BUSY, SQLITE_IOERR_LOCK, SQLITE_IOERR_READ, SQLITE_READONLY};

use super::handle::{commit_err, store_err, StoreDb, Writing};
use super::registry::{lock, Coordination, Member, OpenStore, CHANGE_COUNTER};

/// How long a connection asking for RESERVED waits for another connection of
/// this process to let go of it before SQLite sees SQLITE_BUSY. A writer holds
/// it only while SQLite runs its statements (the flush comes after), so a short
/// blocking wait replaces the busy handler's sleeps of a millisecond or more;
/// it is bounded so that two connections each waiting for the other's
/// database (ATTACH) still get SQLITE_BUSY.
pub(super) const WRITER_WAIT: Duration = Duration::from_millis(20);

/// Between tries for a database's write lock held by another process (there is no
/// wake-up across processes).
pub(super) const PROCESS_LOCK_POLL: Duration = Duration::from_micros(100);

/// For this long after another process was seen holding a write lock of a store, commits
/// let go of the lock before their flush (the other process may be waiting for it).
pub(super) const CONTENTION_MEMORY: Duration = Duration::from_secs(2);

/// Releases of a write lock by any connection of this process (a generation count).
pub(super) static LOCK_RELEASES: Mutex<u64> = Mutex::new(0);
pub(super) static LOCK_RELEASED: Wakeup = Wakeup::new();

thread_local! {
    /// This thread's last lock request failed only because its snapshot was stale (the
    /// lock was free or freed): the busy handler's next sleep is skipped. Per thread, not
    /// per connection: SQLite's busy handler sleeps through the VFS's xSleep, which names
    /// no connection, on the thread whose request failed.
    static RETRY_AT_ONCE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

pub(super) fn note_lock_released() {
    *lock(&LOCK_RELEASES) += 1;
    LOCK_RELEASED.notify_all();
}

/// Sleep up to `micros`, less if a write lock of this process is released meanwhile, and
/// not at all right after a stale-snapshot refusal (see `x_sleep`).
pub fn sleep_until_lock_released(micros: u64) {
    if RETRY_AT_ONCE.with(|r| r.replace(false)) {
        return;
    }
    let deadline = Instant::now() + Duration::from_micros(micros);
    let mut releases = lock(&LOCK_RELEASES);
    let seen = *releases;
    while *releases == seen {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        releases = LOCK_RELEASED
            .wait_timeout(releases, left)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

impl StoreDb {
    /// SQLITE_BUSY because the snapshot is stale: retrying (with a new one) can succeed now.
    /// The connection will ask for SHARED again to retry its write: if another connection
    /// is writing then, waiting for it to finish *before* taking the snapshot saves a retry
    /// that could only fail again.
    pub(super) fn stale_snapshot(&self) -> c_int {
        RETRY_AT_ONCE.with(|r| r.set(true));
        self.connection.note_retrying_writer();
        SQLITE_BUSY
    }
}

/// The key of a logical file's write lock among processes (FNV-1a of its name).
pub(super) fn process_lock_key(logical: &str) -> u64 {
    logical.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl OpenStore {
    /// Wait (at most `left`) for a file's writer to let go: a writer holds its lock for
    /// tens of microseconds, so first yield a few times (no sleep and wake-up, which cost
    /// as much again on a virtual machine), then sleep on the condvar.
    pub(super) fn wait_for_writer_change<'a>(
        &'a self,
        coord: MutexGuard<'a, Coordination>,
        left: Duration,
    ) -> MutexGuard<'a, Coordination> {
        let releases = *lock(&LOCK_RELEASES);
        drop(coord);
        let spin_until = Instant::now() + WRITER_SPIN.min(left);
        while Instant::now() < spin_until {
            std::thread::yield_now();
            if *lock(&LOCK_RELEASES) != releases {
                return lock(&self.coord);
            }
        }
        let coord = lock(&self.coord);
        if *lock(&LOCK_RELEASES) != releases {
            return coord;
        }
        self.writer_left
            .wait_timeout(coord, left.saturating_sub(WRITER_SPIN))
            .unwrap_or_else(|e| e.into_inner())
            .0
    }

    pub(super) fn note_contention(&self) {
        *lock(&self.contended_at) = Some(Instant::now());
    }

    pub(super) fn contended_recently(&self) -> bool {
        lock(&self.contended_at).is_some_and(|t| t.elapsed() < CONTENTION_MEMORY)
    }
}

/// How long a connection waiting for a write lock yields before it sleeps.
pub(super) const WRITER_SPIN: Duration = Duration::from_micros(30);

impl StoreDb {
    pub(super) fn become_writer(&mut self) -> IoResult<()> {
        if self.read_only {
            return Err(SQLITE_READONLY);
        }
        let snapshot_seq = self.snapshot.as_ref().map(|s| s.seq()).unwrap_or(0);
        let deadline = Instant::now() + WRITER_WAIT;
        let mut coord = lock(&self.store.coord);
        let mut waiting = None;
        let mut counted = None;
        let changed_at = loop {
            let file = coord.files.entry(self.logical.clone()).or_default();
            // A commit since our snapshot: SQLite's cache is stale, retrying is its only way on.
            if file.changed_at > snapshot_seq {
                return Err(self.stale_snapshot());
            }
            let held_by_another = match file.writer {
                Some((h, _)) if h == self.handle => return Ok(()),
                // Our own connection (the same database twice): waiting would never end.
                Some((_, conn)) if conn == self.connection.id => return Err(SQLITE_BUSY),
                Some(_) => true,
                // Concurrent writers (`concurrent=1`) hold the file as a group: a serial
                // writer waits for all of them.
                None => file.concurrent_writers > 0,
            };
            if !held_by_another {
                break file.changed_at;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(SQLITE_BUSY);
            }
            // About to commit: a flush starting meanwhile should wait for us a little, and
            // the writer ahead of us should let go of the lock before its flush.
            waiting.get_or_insert_with(|| self.store.store.writer_waiting());
            counted.get_or_insert_with(|| Counted::new(&self.store.waiting_writers));
            coord = self.store.wait_for_writer_change(coord, left);
        };
        // Other processes: the same lock, held by the process; then their commits to this
        // database since our snapshot make it stale too.
        let key = process_lock_key(&self.logical);
        let mut coord = self.lock_for_process(coord, key, deadline, snapshot_seq)?;
        drop(counted);
        if let Err(e) = self.start_writing(&mut coord, changed_at) {
            self.store.store.unlock_for_process(key);
            return Err(e);
        }
        drop(coord);
        self.writing = Writing::Serial;
        RETRY_AT_ONCE.with(|r| r.set(false));
        Ok(())
    }

    /// Takes the database's write lock among processes (polling until `deadline`: there is
    /// no wake-up across processes); `coord` is let go meanwhile and taken again.
    pub(super) fn lock_for_process<'a>(
        &'a self,
        mut coord: MutexGuard<'a, Coordination>,
        key: u64,
        deadline: Instant,
        snapshot_seq: u64,
    ) -> IoResult<MutexGuard<'a, Coordination>> {
        loop {
            match self.store.store.try_lock_for_process(key) {
                Ok(true) => return Ok(coord),
                Ok(false) if Instant::now() < deadline => {
                    self.store.note_contention();
                    drop(coord);
                    std::thread::sleep(PROCESS_LOCK_POLL);
                    coord = lock(&self.store.coord);
                    let file = coord.files.entry(self.logical.clone()).or_default();
                    if file.writer.is_some() {
                        return Err(SQLITE_BUSY);
                    }
                    if file.changed_at > snapshot_seq {
                        return Err(self.stale_snapshot());
                    }
                }
                Ok(false) => return Err(SQLITE_BUSY),
                Err(_) => return Err(SQLITE_IOERR_LOCK),
            }
        }
    }

    /// Holding the write lock in this process and among processes: refuse a stale snapshot,
    /// then join (or begin) the connection's store transaction as this handle's writer.
    pub(super) fn start_writing(&self, coord: &mut Coordination, changed_at: u64) -> IoResult<()> {
        // What the transaction builds on: the latest written state, durable or not yet.
        let latest = self
            .store
            .store
            .try_latest_snapshot()
            .map_err(|_| SQLITE_IOERR_LOCK)?;
        if self
            .snapshot
            .as_ref()
            .is_some_and(|ours| ours.file_changed_at(&self.logical) != latest.file_changed_at(&self.logical))
        {
            return Err(self.stale_snapshot());
        }
        let conn = coord.conns.entry(self.connection.id).or_default();
        if conn.txn.as_ref().is_some_and(|t| t.base_seq() < changed_at) {
            return Err(self.stale_snapshot());
        }
        let txn = conn.txn.get_or_insert_with(|| latest.begin());
        let mut base_counter = [0u8; 4];
        if let Some(id) = txn.file(&self.logical) {
            if txn.file_size(id).unwrap_or(0) >= CHANGE_COUNTER.end as u64 {
                let mut page = vec![0u8; self.store.page_size as usize];
                txn.read_page(id, 0, &mut page).map_err(store_err(
                    &self.api,
                    SQLITE_IOERR_READ,
                    "reading page 1",
                ))?;
                base_counter.copy_from_slice(&page[CHANGE_COUNTER]);
            }
        }
        conn.members.insert(
            self.handle,
            Member {
                logical: self.logical.clone(),
                dirty: false,
                wrote: false,
                base_counter,
            },
        );
        if let Some(file) = coord.files.get_mut(&self.logical) {
            file.writer = Some((self.handle, self.connection.id));
        }
        Ok(())
    }

    /// A writer retrying after a stale snapshot: wait (bounded) while another connection of
    /// this process holds the database's write lock, so the snapshot taken next is fresh.
    /// Only such retries wait here; readers never do.
    pub(super) fn wait_for_other_writer(&self) {
        let deadline = Instant::now() + WRITER_WAIT;
        let mut waiting = None;
        let mut coord = lock(&self.store.coord);
        loop {
            let busy = coord
                .files
                .get(&self.logical)
                .and_then(|f| f.writer)
                .is_some_and(|(_, conn)| conn != self.connection.id);
            let left = deadline.saturating_duration_since(Instant::now());
            if !busy || left.is_zero() {
                return;
            }
            waiting.get_or_insert_with(|| self.store.store.writer_waiting());
            coord = self.store.wait_for_writer_change(coord, left);
        }
    }

    pub(super) fn is_writer(&self) -> bool {
        self.level >= LockLevel::Reserved
    }

    pub(super) fn unlock_to(&mut self, level: LockLevel) -> IoResult<()> {
        if level >= self.level {
            return Ok(());
        }
        let mut to_wait = None;
        let mut result = Ok(());
        let left_writer = self.is_writer() && level < LockLevel::Reserved;
        if left_writer && self.writing.is_concurrent() {
            to_wait = self.leave_concurrent_writer();
        } else if left_writer {
            match self.leave_writer() {
                Ok(p) => to_wait = p,
                Err(e) => result = Err(e),
            }
        }
        if level == LockLevel::None {
            self.shared_reads.clear();
            self.cache_pages_read = false;
        }
        if level == LockLevel::None && self.level >= LockLevel::Shared {
            let mut coord = lock(&self.store.coord);
            if let Some(f) = coord.files.get_mut(&self.logical) {
                f.shared = f.shared.saturating_sub(1);
            }
            drop(coord);
            self.snapshot = None;
        }
        self.level = level;
        // The lock is released before the flush: the next writer proceeds
        // while this commit's flush is in flight, and group commit covers both.
        if let Some(pending) = to_wait {
            if let Err(e) = pending.wait() {
                result = Err(commit_err(&self.api, "making a commit durable")(e));
            }
        }
        // Still reading (SHARED): read what was just committed from now on (readers see
        // durable commits only, so after the wait). SQLite's cache holds this connection's
        // own commit and it looks for others' only when it takes SHARED again, which it
        // usually does at once (autocommit unlocks to NONE next): the state this process
        // knows will do, and looking for other processes' commits here was a catch-up per
        // transaction thrown away.
        if left_writer && level == LockLevel::Shared {
            self.snapshot = Some(self.store.store.snapshot_known());
        }
        result
    }
}
