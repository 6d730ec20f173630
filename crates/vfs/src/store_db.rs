//! The store backend: a main database file opened with `vfs=onesync` is a
//! logical file inside a onesync store (see README.md, "Store backend").
//!
//! * Path `P` is the store file; the database is its logical file `main`, or
//!   the one named by the URI parameter `db=` (`file:P?vfs=onesync&db=aux`).
//! * Every database of one store in this process shares one [`Store`] handle
//!   from a registry keyed by canonical path (the store's flock allows one
//!   open per process).
//! * SQLite's lock levels are kept per logical file in that registry. A
//!   reader (SHARED) reads one store snapshot; a writer (RESERVED and up)
//!   writes into one store transaction per *connection*, shared by all the
//!   databases of that connection in the same store, so that a transaction
//!   over `main` and an attached `aux` commits as one store commit.
//! * The commit is sequenced at `xSync` (one database) or at the first
//!   `xUnlock` of the transaction (several), and waited for (the flush) after
//!   the lock is released, so the next writer runs during the flush.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_char, c_int, c_void};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use onesync_store::{Error as StoreError, FileId, Options, PendingCommit, Snapshot, Store, Transaction};

use crate::api::ApiTable;
use crate::backend::{DbBackend, IoResult, LockLevel, MainDbFactory, OpenRequest, Opened, PragmaCall};
use crate::ffi::{
    SQLITE_BUSY, SQLITE_CANTOPEN, SQLITE_ERROR, SQLITE_FCNTL_BEGIN_ATOMIC_WRITE,
    SQLITE_FCNTL_COMMIT_ATOMIC_WRITE, SQLITE_FCNTL_PDB, SQLITE_FCNTL_PRAGMA,
    SQLITE_FCNTL_ROLLBACK_ATOMIC_WRITE, SQLITE_IOCAP_BATCH_ATOMIC, SQLITE_IOCAP_POWERSAFE_OVERWRITE,
    SQLITE_IOCAP_SAFE_APPEND, SQLITE_IOERR, SQLITE_IOERR_FSYNC, SQLITE_IOERR_LOCK, SQLITE_IOERR_READ,
    SQLITE_IOERR_SHORT_READ, SQLITE_IOERR_TRUNCATE, SQLITE_IOERR_WRITE, SQLITE_NOTADB, SQLITE_NOTFOUND,
    SQLITE_OK, SQLITE_OPEN_CREATE,
};

/// Page size of stores this VFS creates (SQLite's default page size, so the
/// common case maps one SQLite page to one store page).
pub const STORE_PAGE_SIZE: u32 = 4096;

/// Page changes up to this many bytes (since the page was last written whole) ride in the
/// commit record. A one-row INSERT or UPDATE changes about a hundred bytes of its leaf page
/// plus SQLite's change counter on page 1: carried in the record, such a commit writes one
/// block instead of a record block and a page.
pub const EMBED_LIMIT: usize = 256;

/// The logical file of a database opened without `db=`.
pub const DEFAULT_LOGICAL_DB: &str = "main";

/// Bytes 24..28 of page 1: SQLite's file change counter, bumped by every
/// commit in rollback-journal mode (and restored by a rollback).
const CHANGE_COUNTER: std::ops::Range<usize> = 24..28;

/// Opens (or, if the flag says so, creates) the store at a path: how a host puts stores on
/// another medium (the lab's power-cut simulation puts them on a `SimDisk`).
pub type StoreOpener = Arc<dyn Fn(&Path, &Options, bool) -> Result<Store, StoreError> + Send + Sync>;

/// Opens main database files as logical files of stores.
pub struct StoreFactory {
    api: ApiTable,
    opener: Option<StoreOpener>,
}

impl StoreFactory {
    pub fn new(api: ApiTable) -> Self {
        Self { api, opener: None }
    }

    /// Stores opened by `opener` instead of from files (the path is still the registry key,
    /// so every database of one path shares one store).
    pub fn with_opener(api: ApiTable, opener: StoreOpener) -> Self {
        Self {
            api,
            opener: Some(opener),
        }
    }
}

fn not_a_store_message(path: &Path, why: &str) -> String {
    format!(
        "onesync: {} is not a onesync store ({why}); nothing was written to it. \
         To use a plain SQLite database with vfs=onesync, convert it first: onesync import {} NEW.db",
        path.display(),
        path.display()
    )
}

impl MainDbFactory for StoreFactory {
    fn open(&self, req: &OpenRequest) -> IoResult<Opened> {
        let name = req.name().ok_or(SQLITE_CANTOPEN)?;
        let path = PathBuf::from(std::ffi::OsStr::from_bytes(name.to_bytes()));
        // SAFETY: `req.name` is the filename SQLite passed to this xOpen.
        let logical = unsafe { self.api.uri_parameter(req.name, c"db") }
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| DEFAULT_LOGICAL_DB.to_owned());
        let create = req.flags() & SQLITE_OPEN_CREATE != 0;
        let store = match registry_acquire(&path, create, self.opener.as_ref()) {
            Ok(store) => store,
            Err((code, msg)) => {
                // xOpen cannot carry a message: SQLite's log gets it, and so
                // does stderr, which is what a CLI user sees.
                self.api.log(code, &msg);
                eprintln!("{msg}");
                return Err(code);
            }
        };
        let id = NEXT_HANDLE.fetch_add(1, Relaxed);
        Ok(Opened {
            backend: Box::new(StoreDb {
                store,
                logical,
                handle: id,
                // Until SQLite tells us its connection (SQLITE_FCNTL_PDB), the
                // handle is its own group.
                conn: usize::MAX - id as usize,
                level: LockLevel::None,
                snapshot: None,
                api: self.api,
                batch: false,
            }),
            out_flags: req.flags(),
        })
    }

    fn private_journals(&self) -> bool {
        true
    }
}

static NEXT_HANDLE: AtomicU64 = AtomicU64::new(1);

/// One open store, shared by every handle on it in this process.
struct OpenStore {
    path: PathBuf,
    store: Store,
    page_size: u64,
    coord: Mutex<Coordination>,
    /// Signalled when a file's writer lets go of RESERVED.
    writer_left: Condvar,
}

/// How long a connection asking for RESERVED waits for another connection of
/// this process to let go of it before SQLite sees SQLITE_BUSY. A writer holds
/// it only while SQLite runs its statements (the flush comes after), so a short
/// blocking wait replaces the busy handler's sleeps of a millisecond or more;
/// it is bounded so that two connections each waiting for the other's
/// database (ATTACH) still get SQLITE_BUSY.
const WRITER_WAIT: Duration = Duration::from_millis(20);

/// Between tries for a database's write lock held by another process (there is no
/// wake-up across processes).
const PROCESS_LOCK_POLL: Duration = Duration::from_micros(100);

/// Releases of a write lock by any connection of this process (a generation count).
static LOCK_RELEASES: Mutex<u64> = Mutex::new(0);
static LOCK_RELEASED: Condvar = Condvar::new();

thread_local! {
    /// This thread's last lock request failed only because its snapshot was stale (the
    /// lock was free or freed): the busy handler's next sleep is skipped.
    static RETRY_AT_ONCE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// ... and the thread will ask for SHARED again to retry its write: if another
    /// connection is writing then, waiting for it to finish *before* taking the snapshot
    /// saves a retry that could only fail again.
    static RETRYING_WRITER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn note_lock_released() {
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

/// SQLITE_BUSY because the snapshot is stale: retrying (with a new one) can succeed now.
fn stale_snapshot() -> c_int {
    RETRY_AT_ONCE.with(|r| r.set(true));
    RETRYING_WRITER.with(|r| r.set(true));
    SQLITE_BUSY
}

/// The key of a logical file's write lock among processes (FNV-1a of its name).
fn process_lock_key(logical: &str) -> u64 {
    logical.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl OpenStore {
    /// Wait (at most `left`) for a file's writer to let go: a writer holds its lock for
    /// tens of microseconds, so first yield a few times (no sleep and wake-up, which cost
    /// as much again on a virtual machine), then sleep on the condvar.
    fn wait_for_writer_change<'a>(
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
}

/// How long a connection waiting for a write lock yields before it sleeps.
const WRITER_SPIN: Duration = Duration::from_micros(30);

/// Lock levels and write transactions of one store, under one mutex.
#[derive(Default)]
struct Coordination {
    files: HashMap<String, FileLock>,
    conns: HashMap<usize, ConnTxn>,
    /// Store sequence number of each connection's last commit (`PRAGMA onesync_commit`).
    last_commit: HashMap<usize, u64>,
}

#[derive(Default)]
struct FileLock {
    /// Handles at SHARED or above.
    shared: usize,
    /// The handle at RESERVED or above, and its connection.
    writer: Option<(u64, usize)>,
    /// Store sequence of the last commit that changed this file through us:
    /// a handle whose snapshot is older must not become its writer (its
    /// cache is stale), as with WAL's SQLITE_BUSY_SNAPSHOT.
    changed_at: u64,
}

/// The write transaction of one SQLite connection on one store.
#[derive(Default)]
struct ConnTxn {
    txn: Option<Transaction>,
    members: BTreeMap<u64, Member>,
    /// Sequenced, not yet known durable: waited for by the last member's unlock.
    pending: Option<PendingCommit>,
}

struct Member {
    logical: String,
    /// Written since its last xSync.
    dirty: bool,
    wrote: bool,
    /// Change counter at the start of the transaction.
    base_counter: [u8; 4],
}

/// Open stores by canonical path, with the number of handles on each.
static REGISTRY: Mutex<BTreeMap<PathBuf, (Arc<OpenStore>, usize)>> = Mutex::new(BTreeMap::new());

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding a lock is caught at the FFI boundary; the data
    // behind it is bookkeeping that stays consistent step by step.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The path with its directory resolved (the file itself may not exist yet).
fn canonical(path: &Path) -> PathBuf {
    if let Ok(p) = path.canonicalize() {
        return p;
    }
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => dir
            .canonicalize()
            .map(|d| d.join(name))
            .unwrap_or_else(|_| path.to_owned()),
        _ => path.to_owned(),
    }
}

fn registry_acquire(
    path: &Path,
    create: bool,
    opener: Option<&StoreOpener>,
) -> Result<Arc<OpenStore>, (c_int, String)> {
    let key = canonical(path);
    let mut registry = lock(&REGISTRY);
    if let Some((store, count)) = registry.get_mut(&key) {
        *count += 1;
        return Ok(store.clone());
    }
    let opts = Options {
        page_size: STORE_PAGE_SIZE,
        embed_limit: EMBED_LIMIT,
        // Negative controls of crash tests only (ONESYNC_SABOTAGE); never set otherwise.
        sabotage: onesync_store::Sabotage::from_env(),
        ..Options::default()
    };
    let opened = match opener {
        Some(open) => open(&key, &opts, create),
        None => Store::open(&key, &opts),
    };
    let store = match opened {
        Ok(s) => s,
        Err(StoreError::NotFound(_)) if create => Store::create(&key, &opts).map_err(|e| {
            (
                SQLITE_CANTOPEN,
                format!("onesync: cannot create store {}: {e}", key.display()),
            )
        })?,
        Err(StoreError::NotFound(_)) => {
            return Err((
                SQLITE_CANTOPEN,
                format!("onesync: {} does not exist", key.display()),
            ))
        }
        Err(e @ (StoreError::NotAStore(_) | StoreError::UnsupportedVersion { .. })) => {
            return Err((SQLITE_NOTADB, not_a_store_message(&key, &e.to_string())))
        }
        Err(e @ StoreError::Truncated(_)) => {
            return Err((SQLITE_NOTADB, not_a_store_message(&key, &e.to_string())))
        }
        Err(e) => {
            return Err((
                SQLITE_CANTOPEN,
                format!("onesync: cannot open store {}: {e}", key.display()),
            ))
        }
    };
    let open = Arc::new(OpenStore {
        path: key.clone(),
        page_size: store.page_size() as u64,
        store,
        coord: Mutex::new(Coordination::default()),
        writer_left: Condvar::new(),
    });
    registry.insert(key, (open.clone(), 1));
    Ok(open)
}

/// Drops one handle's claim; the last one closes the store (checkpointing it),
/// under the registry lock so that a concurrent open waits for the flock.
fn registry_release(store: &Arc<OpenStore>) {
    let mut registry = lock(&REGISTRY);
    let last = match registry.get_mut(&store.path) {
        Some((_, count)) => {
            *count -= 1;
            *count == 0
        }
        None => false,
    };
    if last {
        if let Some((open, _)) = registry.remove(&store.path) {
            let _ = open.store.clone().close();
        }
    }
}

/// One SQLite handle on one logical file.
struct StoreDb {
    store: Arc<OpenStore>,
    logical: String,
    handle: u64,
    /// The SQLite connection (its `sqlite3*`), grouping handles into one
    /// write transaction.
    conn: usize,
    level: LockLevel,
    /// What this handle reads while it holds SHARED and is not the writer.
    snapshot: Option<Snapshot>,
    api: ApiTable,
    /// Inside SQLITE_FCNTL_BEGIN/COMMIT_ATOMIC_WRITE.
    batch: bool,
}

fn store_err(code: c_int) -> impl Fn(StoreError) -> c_int {
    move |e| match e {
        StoreError::NoSpace => crate::ffi::SQLITE_FULL,
        _ => code,
    }
}

/// Reads `buf.len()` bytes at `offset` of a file of `size` bytes with
/// `read_page` reading whole store pages.
fn read_bytes(
    size: u64,
    page_size: u64,
    buf: &mut [u8],
    offset: u64,
    mut read_page: impl FnMut(u64, &mut [u8]) -> IoResult<()>,
) -> IoResult<()> {
    let end = offset.saturating_add(buf.len() as u64);
    let available = end.min(size).saturating_sub(offset) as usize;
    let mut page = vec![0u8; page_size as usize];
    let mut done = 0usize;
    while done < available {
        let at = offset + done as u64;
        let index = at / page_size;
        let within = (at % page_size) as usize;
        let n = (page_size as usize - within).min(available - done);
        read_page(index, &mut page)?;
        buf[done..done + n].copy_from_slice(&page[within..within + n]);
        done += n;
    }
    if available < buf.len() {
        buf[available..].fill(0);
        return Err(SQLITE_IOERR_SHORT_READ);
    }
    Ok(())
}

impl StoreDb {
    fn file_in_snapshot(&self) -> Option<(&Snapshot, Option<FileId>)> {
        self.snapshot.as_ref().map(|s| (s, s.file(&self.logical)))
    }

    /// The connection's transaction, with this handle's file in it (created
    /// on first use).
    fn with_txn<T>(&self, f: impl FnOnce(&mut Transaction, &mut Member) -> IoResult<T>) -> IoResult<T> {
        let mut coord = lock(&self.store.coord);
        let conn = coord.conns.get_mut(&self.conn).ok_or(SQLITE_IOERR)?;
        let member = conn.members.get_mut(&self.handle).ok_or(SQLITE_IOERR)?;
        if conn.txn.is_none() {
            // A write after the commit was sequenced (never expected from
            // SQLite) starts a new transaction rather than being lost.
            conn.txn = Some(self.store.store.begin());
        }
        let txn = conn.txn.as_mut().ok_or(SQLITE_IOERR)?;
        f(txn, member)
    }

    fn become_writer(&mut self) -> IoResult<()> {
        let snapshot_seq = self.snapshot.as_ref().map(|s| s.seq()).unwrap_or(0);
        let deadline = Instant::now() + WRITER_WAIT;
        let mut coord = lock(&self.store.coord);
        let mut waiting = None;
        let changed_at = loop {
            let file = coord.files.entry(self.logical.clone()).or_default();
            // A commit since our snapshot: SQLite's cache is stale, retrying is its only way on.
            if file.changed_at > snapshot_seq {
                return Err(stale_snapshot());
            }
            match file.writer {
                None => break file.changed_at,
                Some((h, _)) if h == self.handle => return Ok(()),
                Some((_, conn)) if conn != self.conn => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(SQLITE_BUSY);
                    }
                    // About to commit: a flush starting meanwhile should wait for us a little.
                    waiting.get_or_insert_with(|| self.store.store.writer_waiting());
                    coord = self.store.wait_for_writer_change(coord, left);
                }
                // Our own connection (the same database twice): waiting would never end.
                Some(_) => return Err(SQLITE_BUSY),
            }
        };
        // Other processes: the same lock, held by the process; then their commits to this
        // database since our snapshot make it stale too.
        let key = process_lock_key(&self.logical);
        let mut coord = self.lock_for_process(coord, key, deadline, snapshot_seq)?;
        if let Err(e) = self.start_writing(&mut coord, changed_at) {
            self.store.store.unlock_for_process(key);
            return Err(e);
        }
        RETRY_AT_ONCE.with(|r| r.set(false));
        Ok(())
    }

    /// Takes the database's write lock among processes (polling until `deadline`: there is
    /// no wake-up across processes); `coord` is let go meanwhile and taken again.
    fn lock_for_process<'a>(
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
                    drop(coord);
                    std::thread::sleep(PROCESS_LOCK_POLL);
                    coord = lock(&self.store.coord);
                    let file = coord.files.entry(self.logical.clone()).or_default();
                    if file.writer.is_some() {
                        return Err(SQLITE_BUSY);
                    }
                    if file.changed_at > snapshot_seq {
                        return Err(stale_snapshot());
                    }
                }
                Ok(false) => return Err(SQLITE_BUSY),
                Err(_) => return Err(SQLITE_IOERR_LOCK),
            }
        }
    }

    /// Holding the write lock in this process and among processes: refuse a stale snapshot,
    /// then join (or begin) the connection's store transaction as this handle's writer.
    fn start_writing(&self, coord: &mut Coordination, changed_at: u64) -> IoResult<()> {
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
            return Err(stale_snapshot());
        }
        let conn = coord.conns.entry(self.conn).or_default();
        if conn.txn.as_ref().is_some_and(|t| t.base_seq() < changed_at) {
            return Err(stale_snapshot());
        }
        let txn = conn.txn.get_or_insert_with(|| latest.begin());
        let mut base_counter = [0u8; 4];
        if let Some(id) = txn.file(&self.logical) {
            if txn.file_size(id).unwrap_or(0) >= CHANGE_COUNTER.end as u64 {
                let mut page = vec![0u8; self.store.page_size as usize];
                txn.read_page(id, 0, &mut page)
                    .map_err(store_err(SQLITE_IOERR_READ))?;
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
            file.writer = Some((self.handle, self.conn));
        }
        Ok(())
    }

    /// A writer retrying after a stale snapshot: wait (bounded) while another connection of
    /// this process holds the database's write lock, so the snapshot taken next is fresh.
    /// Only such retries wait here; readers never do.
    fn wait_for_other_writer(&self) {
        let deadline = Instant::now() + WRITER_WAIT;
        let mut waiting = None;
        let mut coord = lock(&self.store.coord);
        loop {
            let busy = coord
                .files
                .get(&self.logical)
                .and_then(|f| f.writer)
                .is_some_and(|(_, conn)| conn != self.conn);
            let left = deadline.saturating_duration_since(Instant::now());
            if !busy || left.is_zero() {
                return;
            }
            waiting.get_or_insert_with(|| self.store.store.writer_waiting());
            coord = self.store.wait_for_writer_change(coord, left);
        }
    }

    fn is_writer(&self) -> bool {
        self.level >= LockLevel::Reserved
    }

    /// Sequences the connection's transaction: visible to new snapshots,
    /// durable once the pending commit's wait returns.
    fn sequence_locked(coord: &mut Coordination, conn: usize) -> IoResult<()> {
        let Some(ct) = coord.conns.get_mut(&conn) else {
            return Ok(());
        };
        let Some(txn) = ct.txn.take() else {
            return Ok(());
        };
        let files: Vec<String> = ct
            .members
            .values()
            .filter(|m| m.wrote)
            .map(|m| m.logical.clone())
            .collect();
        for m in ct.members.values_mut() {
            m.dirty = false;
            m.wrote = false;
        }
        let pending = txn.commit_without_waiting().map_err(|_| SQLITE_IOERR_FSYNC)?;
        let seq = pending.seq();
        // Chain: an earlier pending commit of this connection is covered by
        // this one's flush (commits become durable in order).
        ct.pending = Some(pending);
        coord.last_commit.insert(conn, seq);
        for name in files {
            coord.files.entry(name).or_default().changed_at = seq;
        }
        Ok(())
    }

    /// The writer gives up RESERVED: commit or abort the connection's
    /// transaction, release the lock; returns the commit to wait for.
    fn leave_writer(&mut self) -> IoResult<Option<PendingCommit>> {
        let page_size = self.store.page_size as usize;
        let mut coord = lock(&self.store.coord);
        if let Some(file) = coord.files.get_mut(&self.logical) {
            if file.writer.is_some_and(|(h, _)| h == self.handle) {
                file.writer = None;
                self.store
                    .store
                    .unlock_for_process(process_lock_key(&self.logical));
                self.store.writer_left.notify_all();
                note_lock_released();
            }
        }
        let mut result = Ok(());
        if let Some(ct) = coord.conns.get_mut(&self.conn) {
            if let Some(txn) = ct.txn.as_ref() {
                // Commit when every member synced after its last write (a
                // completed commit), or when a member's change counter moved
                // (synchronous=OFF commits without xSync); a rollback restores
                // the counter and may leave unsynced writes: abort.
                let completed = ct.members.values().all(|m| {
                    !m.dirty || {
                        let mut page = vec![0u8; page_size];
                        txn.file(&m.logical)
                            .map(|id| txn.read_page(id, 0, &mut page).is_ok())
                            .unwrap_or(false)
                            && page[CHANGE_COUNTER] != m.base_counter
                    }
                });
                let any_write = ct.members.values().any(|m| m.wrote);
                if completed && any_write {
                    result = Self::sequence_locked(&mut coord, self.conn);
                } else if let Some(txn) = coord.conns.get_mut(&self.conn).and_then(|c| c.txn.take()) {
                    txn.abort();
                }
            }
        }
        let mut pending = None;
        if let Some(ct) = coord.conns.get_mut(&self.conn) {
            ct.members.remove(&self.handle);
            if ct.members.is_empty() {
                pending = ct.pending.take();
                coord.conns.remove(&self.conn);
            }
        }
        drop(coord);
        result.map(|()| pending)
    }

    fn size_now(&self) -> IoResult<u64> {
        if self.is_writer() {
            return self.with_txn(|txn, _| {
                Ok(txn
                    .file(&self.logical)
                    .map_or(0, |id| txn.file_size(id).unwrap_or(0)))
            });
        }
        match self.file_in_snapshot() {
            Some((snap, Some(id))) => snap.file_size(id).map_err(store_err(SQLITE_IOERR)),
            Some((_, None)) => Ok(0),
            // No lock held: SQLite asks for the size only under a lock, but
            // answer from the latest state rather than fail.
            None => {
                let snap = self.store.store.snapshot();
                Ok(snap
                    .file(&self.logical)
                    .map_or(0, |id| snap.file_size(id).unwrap_or(0)))
            }
        }
    }

    /// # Safety
    /// `args` is what SQLite passed with `SQLITE_FCNTL_PRAGMA`.
    unsafe fn pragma(&mut self, args: *mut *mut c_char) -> c_int {
        // SAFETY: per the contract.
        let call = unsafe { PragmaCall::new(args) };
        let reply = |text: String| call.reply(&self.api, &text);
        let (name, value) = (&call.name, &call.value);
        match (name.as_deref(), value.as_deref()) {
            (Some("journal_mode"), Some(mode @ ("wal" | "off"))) => {
                reply(format!(
                    "onesync: journal_mode={mode} is not supported: the onesync store commits \
                     atomically itself and keeps the rollback journal in memory; use DELETE, \
                     TRUNCATE, PERSIST or MEMORY"
                ));
                SQLITE_ERROR
            }
            (Some("onesync_stats"), _) => {
                reply(stats_json(&self.store.store));
                SQLITE_OK
            }
            (Some("onesync_commit"), _) => {
                // This connection's last commit, and how far commits are durable: a COMMIT
                // that has returned must have seq <= durable_seq.
                let seq = lock(&self.store.coord).last_commit.get(&self.conn).copied();
                reply(
                    serde_json::json!({
                        "seq": seq,
                        "durable_seq": self.store.store.durable_seq(),
                    })
                    .to_string(),
                );
                SQLITE_OK
            }
            _ => SQLITE_NOTFOUND,
        }
    }
}

fn stats_json(store: &Store) -> String {
    let s = store.stats();
    serde_json::json!({
        "page_size": s.page_size,
        "commit_records": s.commit_records,
        "pages_written": s.pages_written,
        "pages_embedded": s.pages_embedded,
        "jumps": s.jumps,
        "bytes_written": s.bytes_written,
        "write_calls": s.write_calls,
        "bytes_preallocated": s.bytes_preallocated,
        "flushes": s.flushes,
        "flush_micros": s.flush_micros,
        "checkpoints": s.checkpoints,
        "recoveries": s.recoveries,
        "records_replayed": s.records_replayed,
        "conflicts": s.conflicts,
        "last_seq": s.last_seq,
        "durable_seq": s.durable_seq,
        "slots_total": s.slots_total,
        "slots_free": s.slots_free,
    })
    .to_string()
}

impl DbBackend for StoreDb {
    fn read(&mut self, buf: &mut [u8], offset: u64) -> IoResult<()> {
        let page_size = self.store.page_size;
        if self.is_writer() {
            let logical = self.logical.clone();
            return self.with_txn(|txn, _| {
                let Some(id) = txn.file(&logical) else {
                    buf.fill(0);
                    return Err(SQLITE_IOERR_SHORT_READ);
                };
                let size = txn.file_size(id).map_err(store_err(SQLITE_IOERR_READ))?;
                read_bytes(size, page_size, buf, offset, |p, page| {
                    txn.read_page(id, p, page).map_err(store_err(SQLITE_IOERR_READ))
                })
            });
        }
        // Not under a lock SQLite reads only to probe; use the latest state.
        let temporary;
        let snap = match self.snapshot.as_ref() {
            Some(s) => s,
            None => {
                temporary = self.store.store.snapshot();
                &temporary
            }
        };
        let Some(id) = snap.file(&self.logical) else {
            buf.fill(0);
            return Err(SQLITE_IOERR_SHORT_READ);
        };
        let size = snap.file_size(id).map_err(store_err(SQLITE_IOERR_READ))?;
        read_bytes(size, page_size, buf, offset, |p, page| {
            snap.read_page(id, p, page).map_err(store_err(SQLITE_IOERR_READ))
        })
    }

    fn write(&mut self, buf: &[u8], offset: u64) -> IoResult<()> {
        if !self.is_writer() {
            // SQLite writes the database file only under RESERVED or higher.
            return Err(SQLITE_IOERR_WRITE);
        }
        let page_size = self.store.page_size;
        let logical = self.logical.clone();
        self.with_txn(|txn, member| {
            let err = store_err(SQLITE_IOERR_WRITE);
            let id = match txn.file(&logical) {
                Some(id) => id,
                None => txn.create_file(&logical).map_err(&err)?,
            };
            let old_size = txn.file_size(id).map_err(&err)?;
            let end = offset + buf.len() as u64;
            let mut page = vec![0u8; page_size as usize];
            let mut done = 0usize;
            while done < buf.len() {
                let at = offset + done as u64;
                let index = at / page_size;
                let within = (at % page_size) as usize;
                let n = (page_size as usize - within).min(buf.len() - done);
                if n < page_size as usize {
                    // Read-modify-write: SQLite's page is smaller than the store's.
                    txn.read_page(id, index, &mut page).map_err(&err)?;
                    page[within..within + n].copy_from_slice(&buf[done..done + n]);
                    txn.write_page(id, index, &page).map_err(&err)?;
                } else {
                    txn.write_page(id, index, &buf[done..done + n]).map_err(&err)?;
                }
                done += n;
            }
            // write_page rounds the size up to whole store pages; SQLite
            // derives its page count from the exact size.
            let want = old_size.max(end);
            if txn.file_size(id).map_err(&err)? != want {
                txn.set_file_size(id, want).map_err(&err)?;
            }
            member.dirty = true;
            member.wrote = true;
            Ok(())
        })
    }

    fn truncate(&mut self, size: u64) -> IoResult<()> {
        if !self.is_writer() {
            return Err(SQLITE_IOERR_TRUNCATE);
        }
        let logical = self.logical.clone();
        self.with_txn(|txn, member| {
            let err = store_err(SQLITE_IOERR_TRUNCATE);
            let id = match txn.file(&logical) {
                Some(id) => id,
                None => txn.create_file(&logical).map_err(&err)?,
            };
            txn.set_file_size(id, size).map_err(&err)?;
            member.dirty = true;
            member.wrote = true;
            Ok(())
        })
    }

    fn sync(&mut self, _flags: c_int) -> IoResult<()> {
        if !self.is_writer() {
            return Ok(());
        }
        let mut coord = lock(&self.store.coord);
        let Some(ct) = coord.conns.get_mut(&self.conn) else {
            return Ok(());
        };
        if let Some(m) = ct.members.get_mut(&self.handle) {
            m.dirty = false;
        }
        // One database: its sync is the commit. Several (an attached database
        // of the same store): SQLite syncs each in turn, so the commit waits
        // for the first unlock, after every database's phase one.
        if ct.members.len() == 1 && !self.batch && ct.members.values().any(|m| m.wrote) {
            Self::sequence_locked(&mut coord, self.conn)?;
        }
        Ok(())
    }

    fn size(&mut self) -> IoResult<u64> {
        self.size_now()
    }

    fn lock(&mut self, level: LockLevel) -> IoResult<()> {
        if level <= self.level {
            return Ok(());
        }
        if self.level == LockLevel::None {
            let retrying_writer = RETRYING_WRITER.with(|r| r.replace(false));
            if retrying_writer {
                self.wait_for_other_writer();
            }
            // A reader sees the latest durable commit of any process sharing the store, so a
            // power cut never takes back a row it was shown. A writer retrying after a stale
            // snapshot builds on the latest written one (its commit comes later in the chain
            // and is durable only with it).
            let snapshot = if retrying_writer {
                self.store.store.try_latest_snapshot()
            } else {
                self.store.store.try_snapshot()
            }
            .map_err(|_| SQLITE_IOERR_LOCK)?;
            let mut coord = lock(&self.store.coord);
            coord.files.entry(self.logical.clone()).or_default().shared += 1;
            drop(coord);
            self.snapshot = Some(snapshot);
            self.level = LockLevel::Shared;
        }
        if level >= LockLevel::Reserved && self.level < LockLevel::Reserved {
            self.become_writer()?;
        }
        self.level = level;
        Ok(())
    }

    fn unlock(&mut self, level: LockLevel) -> IoResult<()> {
        if level >= self.level {
            return Ok(());
        }
        let mut to_wait = None;
        let mut result = Ok(());
        if self.is_writer() && level < LockLevel::Reserved {
            match self.leave_writer() {
                Ok(p) => to_wait = p,
                Err(e) => result = Err(e),
            }
            // Still reading (SHARED): read what was just committed from now on.
            if level == LockLevel::Shared {
                self.snapshot = Some(self.store.store.snapshot());
            }
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
            pending.wait().map_err(|_| SQLITE_IOERR_FSYNC)?;
        }
        result
    }

    fn check_reserved_lock(&mut self) -> IoResult<bool> {
        let coord = lock(&self.store.coord);
        if coord.files.get(&self.logical).is_some_and(|f| f.writer.is_some()) {
            return Ok(true);
        }
        drop(coord);
        self.store
            .store
            .locked_by_other_process(process_lock_key(&self.logical))
            .map_err(|_| SQLITE_IOERR_LOCK)
    }

    unsafe fn file_control(&mut self, op: c_int, arg: *mut c_void) -> c_int {
        match op {
            SQLITE_FCNTL_PDB => {
                // SAFETY: for SQLITE_FCNTL_PDB, `arg` is a `sqlite3**`
                // naming the connection this file belongs to.
                if let Some(db) = unsafe { arg.cast::<*mut c_void>().as_ref() } {
                    if self.level == LockLevel::None {
                        self.conn = *db as usize;
                    }
                }
                SQLITE_OK
            }
            // SAFETY: for SQLITE_FCNTL_PRAGMA, `arg` is SQLite's char*[3].
            SQLITE_FCNTL_PRAGMA if !arg.is_null() => unsafe { self.pragma(arg.cast()) },
            SQLITE_FCNTL_BEGIN_ATOMIC_WRITE => {
                // The batch can be undone only if it is the whole store
                // transaction; otherwise SQLite falls back to its journal.
                let clean = !self.is_writer()
                    || lock(&self.store.coord)
                        .conns
                        .get(&self.conn)
                        .is_none_or(|c| c.members.values().all(|m| !m.wrote));
                if !clean {
                    return SQLITE_IOERR;
                }
                self.batch = true;
                SQLITE_OK
            }
            SQLITE_FCNTL_COMMIT_ATOMIC_WRITE => {
                self.batch = false;
                let mut coord = lock(&self.store.coord);
                match Self::sequence_locked(&mut coord, self.conn) {
                    Ok(()) => SQLITE_OK,
                    Err(code) => code,
                }
            }
            SQLITE_FCNTL_ROLLBACK_ATOMIC_WRITE => {
                self.batch = false;
                let mut coord = lock(&self.store.coord);
                if let Some(ct) = coord.conns.get_mut(&self.conn) {
                    if let Some(txn) = ct.txn.take() {
                        txn.abort();
                    }
                    for m in ct.members.values_mut() {
                        m.dirty = false;
                        m.wrote = false;
                    }
                }
                SQLITE_OK
            }
            _ => SQLITE_NOTFOUND,
        }
    }

    fn sector_size(&mut self) -> c_int {
        self.store.page_size as c_int
    }

    fn device_characteristics(&mut self) -> c_int {
        SQLITE_IOCAP_BATCH_ATOMIC | SQLITE_IOCAP_SAFE_APPEND | SQLITE_IOCAP_POWERSAFE_OVERWRITE
    }

    fn close(&mut self) -> IoResult<()> {
        let mut result = Ok(());
        if self.level > LockLevel::None {
            result = self.unlock(LockLevel::None);
        }
        // A connection closes its databases together; keeping its entry past that would
        // let the map grow with every connection ever opened.
        lock(&self.store.coord).last_commit.remove(&self.conn);
        registry_release(&self.store);
        result
    }
}

/// `PRAGMA onesync_stats` of the store at `path`, if this process has it open.
pub fn store_stats_json(path: &Path) -> Option<String> {
    let registry = lock(&REGISTRY);
    registry.get(&canonical(path)).map(|(s, _)| stats_json(&s.store))
}
