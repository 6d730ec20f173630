//! The store backend: a main database file opened with `vfs=onesync` is a
//! logical file inside a onesync store (see README.md, "Store backend").
//!
//! * Path `P` is the store file; the database is its logical file `main`, or
//!   the one named by the URI parameter `db=` (`file:P?vfs=onesync&db=aux`).
//!   Which files are stores and which stay plain SQLite files is decided in
//!   `main_file.rs`.
//! * Every database of one store in this process shares one [`Store`] handle
//!   from a registry keyed by the file's identity (device and inode), so that
//!   two names of one file (hard links) share it too.
//! * SQLite's lock levels are kept per logical file in that registry. A
//!   reader (SHARED) reads one store snapshot; a writer (RESERVED and up)
//!   writes into one store transaction per *connection*, shared by all the
//!   databases of that connection in the same store, so that a transaction
//!   over `main` and an attached `aux` commits as one store commit.
//! * The commit is sequenced at `xSync` (one database), at
//!   `SQLITE_FCNTL_COMMIT_ATOMIC_WRITE`, or at `SQLITE_FCNTL_COMMIT_PHASETWO`
//!   (several databases, `synchronous=OFF`), and is durable before SQLite
//!   returns from COMMIT: waited for at PHASETWO, or, when SQLite is known to
//!   unlock right after (locking_mode NORMAL) and someone may want the lock,
//!   after the lock is released, so the next writer runs during the flush.

use std::collections::{BTreeMap, HashMap};
use std::ffi::c_int;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use onesync_store::{
    CommitError, Error as StoreError, FileId, Options, PendingCommit, Snapshot, Store, Transaction,
};

use crate::backend::{
    Connection, DbBackend, FileControl, FileControlCall, IoResult, JournalRoute, LockLevel, MainDbFactory,
    OpenRequest, Opened, Pragma, SqliteName,
};
use crate::ffi::{
    SQLITE_BUSY, SQLITE_CANTOPEN, SQLITE_ERROR, SQLITE_IOCAP_BATCH_ATOMIC, SQLITE_IOCAP_POWERSAFE_OVERWRITE,
    SQLITE_IOCAP_SAFE_APPEND, SQLITE_IOERR, SQLITE_IOERR_FSYNC, SQLITE_IOERR_LOCK, SQLITE_IOERR_READ,
    SQLITE_IOERR_SHORT_READ, SQLITE_IOERR_TRUNCATE, SQLITE_IOERR_WRITE, SQLITE_NOTADB, SQLITE_NOTFOUND,
    SQLITE_OK, SQLITE_OPEN_MAIN_JOURNAL, SQLITE_OPEN_SUPER_JOURNAL, SQLITE_READONLY,
};
use crate::memfile::MemFile;
use crate::names::{self, NameClaim, Owner, StoreKey};
use crate::super_journal::{verdict, SuperJournal, Verdict};
use crate::sys::api::ApiTable;

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

/// Opens main database files as logical files of stores (or, for databases attached
/// without `vfs=onesync`, as plain SQLite files: see `main_file.rs`).
pub struct StoreFactory {
    pub(crate) api: ApiTable,
    pub(crate) opener: Option<StoreOpener>,
}

impl StoreFactory {
    pub fn new(api: ApiTable) -> Self {
        Self { api, opener: None }
    }

    /// Stores opened by `opener` instead of from files (the path is still the registry key,
    /// so every database of one path shares one store). Every main database file of such a
    /// VFS is a store: the medium is the host's, so there is no plain file to fall back to.
    pub fn with_opener(api: ApiTable, opener: StoreOpener) -> Self {
        Self {
            api,
            opener: Some(opener),
        }
    }
}

pub(crate) fn not_a_store_message(path: &Path, why: &str) -> String {
    format!(
        "onesync: {} is not a onesync store ({why}); nothing was written to it. \
         To use a plain SQLite database with vfs=onesync, convert it first: onesync import {} NEW.db",
        path.display(),
        path.display()
    )
}

impl MainDbFactory for StoreFactory {
    fn open(&self, req: &OpenRequest) -> IoResult<Opened> {
        crate::main_file::open(self, req)
    }

    fn private_journals(&self) -> bool {
        true
    }

    fn journal_route(&self, name: &[u8]) -> Option<JournalRoute> {
        if names::database_of_journal(name).is_some() {
            // A store's journal serves only its own handle's rollback; a plain file's is
            // stock SQLite's, on disk.
            return Some(if names::is_store_journal(name) {
                JournalRoute::Private
            } else {
                JournalRoute::Disk
            });
        }
        // Super-journals of stores alone stay in memory and never exist by name; those of
        // plain files are on disk, where crash recovery looks for them.
        if !names::is_super_journal_name(name) {
            return None;
        }
        Some(if names::is_super_journal_in_use(name) {
            JournalRoute::InUse
        } else {
            JournalRoute::DiskIfPresent
        })
    }

    fn open_journal(&self, req: &OpenRequest) -> Option<IoResult<Opened>> {
        let flags = req.flags();
        let name = req.name().map(|n| n.to_bytes());
        if flags & SQLITE_OPEN_SUPER_JOURNAL != 0 {
            // A new one is judged by the names written into it; an existing one (read by
            // a plain file's crash recovery, which also opens the journals it lists this
            // way) is on disk.
            if flags & crate::ffi::SQLITE_OPEN_CREATE != 0 {
                return Some(Ok(Opened {
                    backend: Box::new(SuperJournal::new(*req, self.api)),
                    out_flags: flags,
                }));
            }
            let gone = |n: &[u8]| !Path::new(std::ffi::OsStr::from_bytes(n)).exists();
            if name.is_some_and(|n| names::is_super_journal_in_use(n) && gone(n)) {
                // Read by a rollback of a store transaction that names it: it lists nothing.
                return Some(Ok(Opened {
                    backend: Box::new(MemFile::anonymous()),
                    out_flags: flags,
                }));
            }
            return Some(req.open_passthrough());
        }
        if flags & SQLITE_OPEN_MAIN_JOURNAL != 0 {
            return Some(match name {
                Some(n) if !names::is_store_journal(n) => req.open_passthrough(),
                _ => Ok(Opened {
                    backend: Box::new(MemFile::anonymous()),
                    out_flags: flags,
                }),
            });
        }
        None
    }
}

static NEXT_HANDLE: AtomicU64 = AtomicU64::new(1);

/// A new id for an open database file of this VFS.
pub(crate) fn next_handle() -> u64 {
    NEXT_HANDLE.fetch_add(1, Relaxed)
}

/// The registry's key: the store, and whether it is open read-only.
type RegistryKey = (StoreKey, bool);

/// One open store, shared by every handle on it in this process.
struct OpenStore {
    key: RegistryKey,
    store: Store,
    page_size: u64,
    coord: Mutex<Coordination>,
    /// Signalled when a file's writer lets go of RESERVED.
    writer_left: Condvar,
    /// Connections of this process waiting for a write lock of this store right now.
    waiting_writers: AtomicUsize,
    /// When a write lock of this store was last found held by another process.
    contended_at: Mutex<Option<Instant>>,
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

/// For this long after another process was seen holding a write lock of a store, commits
/// let go of the lock before their flush (the other process may be waiting for it).
const CONTENTION_MEMORY: Duration = Duration::from_secs(2);

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

/// Counts a connection waiting for a write lock while it lives.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Relaxed);
        Self(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
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

    fn note_contention(&self) {
        *lock(&self.contended_at) = Some(Instant::now());
    }

    fn contended_recently(&self) -> bool {
        lock(&self.contended_at).is_some_and(|t| t.elapsed() < CONTENTION_MEMORY)
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
    /// Open handles on this store, by connection.
    handles_by_conn: HashMap<usize, usize>,
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
    /// Sequenced, not yet known durable: waited for at PHASETWO, or by the last member's
    /// unlock.
    pending: Option<PendingCommit>,
    /// The super-journal SQLite named at this transaction's phase one: it commits at
    /// PHASETWO only, never at an xSync (a rollback after a failed phase one syncs too).
    super_journal: Option<names::SuperJournalInUse>,
}

impl ConnTxn {
    /// Ends the transaction without committing it.
    fn abort(&mut self) {
        if let Some(txn) = self.txn.take() {
            txn.abort();
        }
        for m in self.members.values_mut() {
            m.dirty = false;
            m.wrote = false;
        }
        self.super_journal = None;
    }
}

struct Member {
    logical: String,
    /// Written since its last xSync.
    dirty: bool,
    wrote: bool,
    /// Change counter at the start of the transaction.
    base_counter: [u8; 4],
}

/// Open stores by identity and read-only-ness, with the number of handles on each.
static REGISTRY: Mutex<BTreeMap<RegistryKey, (Arc<OpenStore>, usize)>> = Mutex::new(BTreeMap::new());

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

fn inode_key(meta: &std::fs::Metadata) -> StoreKey {
    StoreKey::Inode {
        dev: meta.dev(),
        ino: meta.ino(),
    }
}

/// How a store is wanted.
#[derive(Clone, Copy)]
pub(crate) struct Want {
    /// Create it if the path does not exist.
    pub create: bool,
    /// Open it read-only (`mode=ro`, `immutable=1`).
    pub read_only: bool,
}

fn store_options(read_only: bool) -> Options {
    Options {
        page_size: STORE_PAGE_SIZE,
        embed_limit: EMBED_LIMIT,
        read_only,
        // Negative controls of crash tests only (ONESYNC_SABOTAGE); never set otherwise.
        sabotage: onesync_store::Sabotage::from_env(),
        ..Options::default()
    }
}

fn open_error(path: &Path, e: StoreError) -> (c_int, String) {
    match e {
        StoreError::NotFound(_) => (
            SQLITE_CANTOPEN,
            format!("onesync: {} does not exist", path.display()),
        ),
        e @ (StoreError::NotAStore(_) | StoreError::UnsupportedVersion { .. } | StoreError::Truncated(_)) => {
            (SQLITE_NOTADB, not_a_store_message(path, &e.to_string()))
        }
        e => (
            SQLITE_CANTOPEN,
            format!("onesync: cannot open store {}: {e}", path.display()),
        ),
    }
}

/// A registered store for a handle, and whether it is read-only.
fn registry_acquire(
    path: &Path,
    want: Want,
    opener: Option<&StoreOpener>,
) -> Result<(Arc<OpenStore>, bool), (c_int, String)> {
    let mut registry = lock(&REGISTRY);
    let share = |registry: &mut BTreeMap<RegistryKey, (Arc<OpenStore>, usize)>, key: &StoreKey| {
        // A read-only handle can share this process's read-write store; a read-write one
        // needs one.
        let keys = [(key.clone(), false), (key.clone(), true)];
        let usable = if want.read_only { &keys[..] } else { &keys[..1] };
        for k in usable {
            if let Some((store, count)) = registry.get_mut(k) {
                *count += 1;
                return Some((store.clone(), want.read_only || k.1));
            }
        }
        None
    };
    if let Some(open) = opener {
        let path = canonical(path);
        let key = StoreKey::Path(path.clone());
        if let Some(hit) = share(&mut registry, &key) {
            return Ok(hit);
        }
        let store =
            open(&path, &store_options(want.read_only), want.create).map_err(|e| open_error(&path, e))?;
        return Ok((
            register(&mut registry, (key, want.read_only), store),
            want.read_only,
        ));
    }
    // The name may be replaced meanwhile (a rename): the store must be the inode the key
    // names, so the name is looked up again after the open.
    for _ in 0..3 {
        let meta = match std::fs::metadata(path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && want.create => {
                match Store::create(path, &store_options(false)) {
                    Ok(store) => {
                        let meta = std::fs::metadata(path)
                            .map_err(|e| (SQLITE_CANTOPEN, format!("onesync: {}: {e}", path.display())))?;
                        let key = (inode_key(&meta), false);
                        return Ok((register(&mut registry, key, store), false));
                    }
                    // Another process created it first: open that.
                    Err(StoreError::AlreadyExists(_)) => continue,
                    Err(e) => {
                        return Err((
                            SQLITE_CANTOPEN,
                            format!("onesync: cannot create store {}: {e}", path.display()),
                        ))
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(open_error(path, StoreError::NotFound(path.into())))
            }
            Err(e) => {
                return Err((
                    SQLITE_CANTOPEN,
                    format!("onesync: cannot open store {}: {e}", path.display()),
                ))
            }
        };
        let key = inode_key(&meta);
        if let Some(hit) = share(&mut registry, &key) {
            return Ok(hit);
        }
        let (store, read_only) = match Store::open(path, &store_options(want.read_only)) {
            Ok(store) => (store, want.read_only),
            // A read-only file or mount: read-only, as stock SQLite falls back to.
            Err(StoreError::NotWritable { .. }) if !want.read_only => {
                if let Some(hit) = share(&mut registry, &key) {
                    return Ok(hit);
                }
                let store = Store::open(path, &store_options(true)).map_err(|e| open_error(path, e))?;
                (store, true)
            }
            Err(e) => return Err(open_error(path, e)),
        };
        if std::fs::metadata(path).is_ok_and(|m| inode_key(&m) == key) {
            return Ok((register(&mut registry, (key, read_only), store), read_only));
        }
        let _ = store.close();
    }
    Err((
        SQLITE_CANTOPEN,
        format!(
            "onesync: {} kept changing while it was opened (renamed over?)",
            path.display()
        ),
    ))
}

fn register(
    registry: &mut BTreeMap<RegistryKey, (Arc<OpenStore>, usize)>,
    key: RegistryKey,
    store: Store,
) -> Arc<OpenStore> {
    let open = Arc::new(OpenStore {
        key: key.clone(),
        page_size: store.page_size() as u64,
        store,
        coord: Mutex::new(Coordination::default()),
        writer_left: Condvar::new(),
        waiting_writers: AtomicUsize::new(0),
        contended_at: Mutex::new(None),
    });
    registry.insert(key, (open.clone(), 1));
    open
}

/// Drops one handle's claim; the last one closes the store (checkpointing it),
/// under the registry lock so that a concurrent open waits for the flock.
fn registry_release(store: &Arc<OpenStore>) {
    let mut registry = lock(&REGISTRY);
    let last = match registry.get_mut(&store.key) {
        Some((_, count)) => {
            *count -= 1;
            *count == 0
        }
        None => false,
    };
    if last {
        if let Some((open, _)) = registry.remove(&store.key) {
            let _ = open.store.clone().close();
        }
    }
}

// ---------------------------------------------------------------------------------------
// Connections: which of our handles belong to each, and their locking modes.
// ---------------------------------------------------------------------------------------

/// A handle's `locking_mode`, as far as this VFS can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Normal,
    Exclusive,
    /// A database attached to a connection whose main database is not ours: an unqualified
    /// `PRAGMA locking_mode` goes to the main database's file, which we never see.
    Unknown,
}

struct HandleMode {
    mode: Mode,
    /// SQLite unlocked this handle since its mode was last set: proof that the mode is
    /// really NORMAL (in EXCLUSIVE mode SQLite never unlocks; this also covers a build
    /// whose default is EXCLUSIVE).
    unlocked: bool,
    /// `nolock=1`: SQLite never calls xLock or xUnlock.
    nolock: bool,
}

#[derive(Default)]
struct ConnInfo {
    handles: BTreeMap<u64, HandleMode>,
    /// Our handle that is the connection's main database, if it is ours.
    main: Option<u64>,
    /// An unqualified `PRAGMA locking_mode=EXCLUSIVE` may have run: databases attached
    /// later start exclusive.
    default_exclusive: bool,
    /// SQLite sent SQLITE_FCNTL_COMMIT_PHASETWO on this connection: an unlock without it
    /// ends a transaction that did not commit.
    phasetwo: bool,
}

static CONNS: Mutex<BTreeMap<usize, ConnInfo>> = Mutex::new(BTreeMap::new());

/// Whether the file SQLite opened as `name` is the main database of connection `db`
/// (told with SQLITE_FCNTL_PDB). The main database is always opened first; SQLite's
/// `sqlite3_db_filename(db, "main")` is that file's name pointer, or null while the
/// connection is still being opened (where API armor refuses the call).
pub(crate) fn is_main_database(api: &ApiTable, db: Connection, name: SqliteName) -> bool {
    if lock(&CONNS).get(&db.id()).is_some_and(|c| !c.handles.is_empty()) {
        return false;
    }
    api.is_main_db_name(db, name).unwrap_or(true)
}

/// Adds one of our handles to its connection's bookkeeping.
pub(crate) fn join_connection(conn: usize, handle: u64, is_main: bool, nolock: bool) {
    let mut conns = lock(&CONNS);
    let info = conns.entry(conn).or_default();
    let mode = if is_main {
        info.main = Some(handle);
        Mode::Normal
    } else if info.main.is_none() {
        Mode::Unknown
    } else if info.default_exclusive {
        Mode::Exclusive
    } else {
        Mode::Normal
    };
    info.handles.insert(
        handle,
        HandleMode {
            mode,
            unlocked: false,
            nolock,
        },
    );
}

pub(crate) fn leave_connection(conn: usize, handle: u64) {
    let mut conns = lock(&CONNS);
    if let Some(info) = conns.get_mut(&conn) {
        info.handles.remove(&handle);
        if info.main == Some(handle) {
            info.main = None;
        }
        if info.handles.is_empty() {
            conns.remove(&conn);
        }
    }
}

/// `PRAGMA locking_mode=...` arrived at `handle`'s file: for the schema it names, or for
/// an unqualified pragma the main database, which then applies it to every database.
pub(crate) fn note_locking_mode(conn: usize, handle: u64, value: Option<&str>) {
    let mode = match value {
        Some("exclusive") => Mode::Exclusive,
        Some("normal") => Mode::Normal,
        _ => return,
    };
    let mut conns = lock(&CONNS);
    let Some(info) = conns.get_mut(&conn) else {
        return;
    };
    if let Some(h) = info.handles.get_mut(&handle) {
        h.mode = mode;
        h.unlocked = false;
    }
    // At the main database a qualified and an unqualified pragma look alike: assume the
    // wider one for EXCLUSIVE (then every database waits at PHASETWO: correct, only
    // slower) and the narrower one for NORMAL.
    if info.main == Some(handle) && mode == Mode::Exclusive {
        info.default_exclusive = true;
        for h in info.handles.values_mut() {
            if h.mode != Mode::Unknown {
                h.mode = Mode::Exclusive;
            }
            h.unlocked = false;
        }
    }
}

fn note_unlocked(conn: usize, handle: u64) {
    if let Some(h) = lock(&CONNS)
        .get_mut(&conn)
        .and_then(|c| c.handles.get_mut(&handle))
    {
        h.unlocked = true;
    }
}

fn note_phasetwo(conn: usize) {
    if let Some(c) = lock(&CONNS).get_mut(&conn) {
        c.phasetwo = true;
    }
}

fn phasetwo_seen(conn: usize) -> bool {
    lock(&CONNS).get(&conn).is_some_and(|c| c.phasetwo)
}

/// Whether SQLite will surely unlock every one of these handles right after PHASETWO.
fn unlocks_after_commit(conn: usize, handles: &[u64]) -> bool {
    let conns = lock(&CONNS);
    let Some(info) = conns.get(&conn) else {
        return false;
    };
    handles.iter().all(|h| {
        info.handles
            .get(h)
            .is_some_and(|m| m.mode == Mode::Normal && m.unlocked && !m.nolock)
    })
}

/// What a store handle needs to know at open.
pub(crate) struct StoreOpen<'a> {
    pub api: ApiTable,
    pub opener: Option<&'a StoreOpener>,
    pub path: &'a Path,
    /// SQLite's name for the file (for journal routing and SQLITE_FCNTL_PDB).
    pub name: SqliteName,
    pub logical: String,
    pub want: Want,
    pub nolock: bool,
}

/// One SQLite handle on one logical file.
pub(crate) struct StoreDb {
    store: Arc<OpenStore>,
    logical: String,
    handle: u64,
    /// The SQLite connection (its `sqlite3*`), grouping handles into one
    /// write transaction.
    conn: usize,
    /// Known from SQLITE_FCNTL_PDB, and registered with the connection.
    joined: bool,
    level: LockLevel,
    /// What this handle reads while it holds SHARED and is not the writer.
    snapshot: Option<Snapshot>,
    api: ApiTable,
    /// Inside SQLITE_FCNTL_BEGIN/COMMIT_ATOMIC_WRITE.
    batch: bool,
    read_only: bool,
    nolock: bool,
    /// SQLite's name for the file (compared with `sqlite3_db_filename`).
    name: SqliteName,
    _claim: NameClaim,
}

impl StoreDb {
    /// Opens (or creates) the store and this handle on it; returns it and whether it is
    /// read-only. Errors carry the message for the user.
    pub(crate) fn open(o: StoreOpen<'_>) -> Result<(Self, bool), (c_int, String)> {
        let (store, read_only) = registry_acquire(o.path, o.want, o.opener)?;
        let name = o.name.bytes().to_vec();
        let claim = names::claim(&name, Owner::Store(store.key.0.clone()));
        let handle = next_handle();
        Ok((
            StoreDb {
                store,
                logical: o.logical,
                handle,
                // Until SQLite tells us its connection (SQLITE_FCNTL_PDB), the
                // handle is its own group.
                conn: usize::MAX - handle as usize,
                joined: false,
                level: LockLevel::None,
                snapshot: None,
                api: o.api,
                batch: false,
                read_only,
                nolock: o.nolock,
                name: o.name,
                _claim: claim,
            },
            read_only,
        ))
    }
}

/// Maps a store error to SQLite's `code` (`SQLITE_FULL` for a full disk) and tells
/// SQLite's error log (`sqlite3_log`) what failed and why, with the OS error where there is
/// one: SQLite's own message for an I/O error is only "disk I/O error".
fn store_err<'a>(api: &'a ApiTable, code: c_int, what: &'a str) -> impl Fn(StoreError) -> c_int + 'a {
    move |e| {
        let code = match e {
            StoreError::NoSpace => crate::ffi::SQLITE_FULL,
            _ => code,
        };
        api.log(code, &format!("onesync: {what}: {e}"));
        code
    }
}

/// For a commit that failed or whose flush failed: `SQLITE_IOERR_FSYNC` whatever the cause
/// (as before this logging; a full disk is not singled out here), with the reason logged.
fn commit_err<'a>(api: &'a ApiTable, what: &'a str) -> impl Fn(CommitError) -> c_int + 'a {
    move |e| {
        api.log(SQLITE_IOERR_FSYNC, &format!("onesync: {what}: {}", e.error));
        SQLITE_IOERR_FSYNC
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
                    // About to commit: a flush starting meanwhile should wait for us a little,
                    // and the writer ahead of us should let go of the lock before its flush.
                    waiting.get_or_insert_with(|| self.store.store.writer_waiting());
                    counted.get_or_insert_with(|| Waiting::new(&self.store.waiting_writers));
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
        drop(counted);
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
                    self.store.note_contention();
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
    fn sequence_locked(api: &ApiTable, coord: &mut Coordination, conn: usize) -> IoResult<()> {
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
        ct.super_journal = None;
        let pending = txn
            .commit_without_waiting()
            .map_err(commit_err(api, "committing"))?;
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
        // A SQLite that sends SQLITE_FCNTL_COMMIT_PHASETWO has committed by now: what is
        // left is a rollback's (or a read's). Without it (an old SQLite), guess.
        let phasetwo = phasetwo_seen(self.conn);
        if let Some(ct) = coord.conns.get_mut(&self.conn) {
            if let Some(txn) = ct.txn.as_ref().filter(|_| !phasetwo) {
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
                    result = Self::sequence_locked(&self.api, &mut coord, self.conn);
                }
            }
            if let Some(ct) = coord.conns.get_mut(&self.conn) {
                ct.abort();
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
            Some((snap, Some(id))) => {
                snap.file_size(id)
                    .map_err(store_err(&self.api, SQLITE_IOERR, "reading the file size"))
            }
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

    /// `SQLITE_FCNTL_PRAGMA`: `SQLITE_NOTFOUND` for a pragma left to SQLite.
    fn pragma(&mut self, call: &Pragma<'_>) -> c_int {
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
            (Some("locking_mode"), value) => {
                // Noted, then left to SQLite (which applies it).
                note_locking_mode(self.conn, self.handle, value);
                SQLITE_NOTFOUND
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
                let err = store_err(&self.api, SQLITE_IOERR_READ, "reading");
                let size = txn.file_size(id).map_err(&err)?;
                read_bytes(size, page_size, buf, offset, |p, page| {
                    txn.read_page(id, p, page).map_err(&err)
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
        let err = store_err(&self.api, SQLITE_IOERR_READ, "reading");
        let size = snap.file_size(id).map_err(&err)?;
        read_bytes(size, page_size, buf, offset, |p, page| {
            snap.read_page(id, p, page).map_err(&err)
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
            let err = store_err(&self.api, SQLITE_IOERR_WRITE, "writing");
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
            let err = store_err(&self.api, SQLITE_IOERR_TRUNCATE, "truncating");
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
        if ct.members.len() == 1
            && !self.batch
            && ct.super_journal.is_none()
            && ct.members.values().any(|m| m.wrote)
        {
            Self::sequence_locked(&self.api, &mut coord, self.conn)?;
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
        if level < self.level {
            note_unlocked(self.conn, self.handle);
        }
        self.unlock_to(level)
    }

    fn check_reserved_lock(&mut self) -> IoResult<bool> {
        let coord = lock(&self.store.coord);
        if coord.files.get(&self.logical).is_some_and(|f| f.writer.is_some()) {
            return Ok(true);
        }
        drop(coord);
        let elsewhere = self
            .store
            .store
            .locked_by_other_process(process_lock_key(&self.logical))
            .map_err(|_| SQLITE_IOERR_LOCK)?;
        if elsewhere {
            self.store.note_contention();
        }
        Ok(elsewhere)
    }

    fn file_control(&mut self, call: &FileControlCall<'_>) -> c_int {
        match call.control {
            FileControl::Pdb(db) => {
                if let Some(db) = db {
                    self.join(db);
                }
                SQLITE_OK
            }
            FileControl::Sync { super_journal } => match self.super_journal_named(super_journal) {
                // Not handled: SQLite goes on to xSync.
                Ok(()) => SQLITE_NOTFOUND,
                Err(why) => {
                    self.api.log(SQLITE_ERROR, &why);
                    eprintln!("{why}");
                    SQLITE_ERROR
                }
            },
            FileControl::CommitPhaseTwo => match self.commit_phase_two() {
                Ok(()) => SQLITE_OK,
                Err(code) => code,
            },
            FileControl::Pragma(ref pragma) => self.pragma(pragma),
            FileControl::BeginAtomic => {
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
            FileControl::CommitAtomic => {
                self.batch = false;
                let mut coord = lock(&self.store.coord);
                match Self::sequence_locked(&self.api, &mut coord, self.conn) {
                    Ok(()) => SQLITE_OK,
                    Err(code) => code,
                }
            }
            FileControl::RollbackAtomic => {
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
            FileControl::Other(_) => SQLITE_NOTFOUND,
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
            result = self.unlock_to(LockLevel::None);
        }
        // A connection closes its databases together; keeping its entry past that would
        // let the map grow with every connection ever opened.
        let mut coord = lock(&self.store.coord);
        coord.last_commit.remove(&self.conn);
        if self.joined {
            if let Some(n) = coord.handles_by_conn.get_mut(&self.conn) {
                *n -= 1;
                if *n == 0 {
                    coord.handles_by_conn.remove(&self.conn);
                }
            }
        }
        drop(coord);
        if self.joined {
            leave_connection(self.conn, self.handle);
        }
        registry_release(&self.store);
        result
    }
}

impl StoreDb {
    /// SQLITE_FCNTL_PDB: the connection this file belongs to.
    fn join(&mut self, db: Connection) {
        if self.joined || self.level != LockLevel::None {
            return;
        }
        let is_main = is_main_database(&self.api, db, self.name);
        self.conn = db.id();
        self.joined = true;
        join_connection(self.conn, self.handle, is_main, self.nolock);
        *lock(&self.store.coord)
            .handles_by_conn
            .entry(self.conn)
            .or_default() += 1;
    }

    /// SQLITE_FCNTL_SYNC with a super-journal's name: this database's phase one of a
    /// transaction over several databases. Only logical files of this one store can commit
    /// with it; a super-journal of this VFS already refused anything else, but one written
    /// by another VFS (the connection's main database is not ours) is checked here, before
    /// this store commits anything: refusing rolls the whole transaction back.
    fn super_journal_named(&self, name: &[u8]) -> Result<(), String> {
        if !self.is_writer() {
            return Ok(());
        }
        let mut coord = lock(&self.store.coord);
        let Some(ct) = coord.conns.get_mut(&self.conn) else {
            return Ok(());
        };
        if ct.super_journal.as_ref().is_none_or(|s| s.name() != name) {
            ct.super_journal = Some(names::use_super_journal(name));
        }
        drop(coord);
        let checked = self.check_super_journal(name);
        if checked.is_err() {
            // Nothing of it may ever commit: SQLite rolls back what it wrote into the
            // store on top of the last commit, into a new transaction.
            if let Some(ct) = lock(&self.store.coord).conns.get_mut(&self.conn) {
                let told = ct.super_journal.take();
                ct.abort();
                ct.super_journal = told;
            }
        }
        checked
    }

    fn check_super_journal(&self, name: &[u8]) -> Result<(), String> {
        if names::is_memory_super_journal(name) {
            return Ok(());
        }
        let path = Path::new(std::ffi::OsStr::from_bytes(name));
        let listed = std::fs::read(path).map_err(|e| {
            format!(
                "onesync: COMMIT refused: cannot read the super-journal {} to check that this \
                 transaction's databases can commit atomically together ({e})",
                path.display()
            )
        })?;
        match verdict(&listed) {
            Verdict::Memory(key) if key == self.store.key.0 => Ok(()),
            Verdict::Refuse(why) => Err(why),
            _ => Err(format!(
                "onesync: COMMIT refused: the super-journal {} does not list this store's \
                 database ({}), so it cannot commit atomically with the others",
                path.display(),
                self.logical
            )),
        }
    }

    /// SQLITE_FCNTL_COMMIT_PHASETWO: every database of the transaction has finished its
    /// phase one and SQLite considers the transaction committed. Sequence what is not yet
    /// (synchronous=OFF, several databases, a truncation after the sync), and make it
    /// durable before COMMIT returns: here, unless SQLite surely unlocks right after and
    /// letting go of the lock before the flush can help another writer.
    fn commit_phase_two(&mut self) -> IoResult<()> {
        note_phasetwo(self.conn);
        if !self.is_writer() {
            return Ok(());
        }
        let mut coord = lock(&self.store.coord);
        let Some(ct) = coord.conns.get_mut(&self.conn) else {
            return Ok(());
        };
        if ct.members.values().any(|m| m.wrote) {
            Self::sequence_locked(&self.api, &mut coord, self.conn)?;
        } else {
            // Nothing written since the last commit (a read in exclusive mode began it).
            ct.abort();
        }
        let others = coord.handles_by_conn.keys().any(|&c| c != self.conn);
        let Some(ct) = coord.conns.get_mut(&self.conn) else {
            return Ok(());
        };
        let Some(pending) = ct.pending.take() else {
            return Ok(());
        };
        let members: Vec<u64> = ct.members.keys().copied().collect();
        let helps = others || self.store.waiting_writers.load(Relaxed) > 0 || self.store.contended_recently();
        if helps && unlocks_after_commit(self.conn, &members) {
            // Waited for by the last member's xUnlock, after the lock is released.
            ct.pending = Some(pending);
            return Ok(());
        }
        drop(coord);
        pending
            .wait()
            .map_err(commit_err(&self.api, "making a commit durable"))?;
        Ok(())
    }

    fn unlock_to(&mut self, level: LockLevel) -> IoResult<()> {
        if level >= self.level {
            return Ok(());
        }
        let mut to_wait = None;
        let mut result = Ok(());
        let left_writer = self.is_writer() && level < LockLevel::Reserved;
        if left_writer {
            match self.leave_writer() {
                Ok(p) => to_wait = p,
                Err(e) => result = Err(e),
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
            if let Err(e) = pending.wait() {
                result = Err(commit_err(&self.api, "making a commit durable")(e));
            }
        }
        // Still reading (SHARED): read what was just committed from now on (readers see
        // durable commits only, so after the wait).
        if left_writer && level == LockLevel::Shared {
            self.snapshot = Some(self.store.store.snapshot());
        }
        result
    }
}

/// `PRAGMA onesync_stats` of the store at `path`, if this process has it open.
pub fn store_stats_json(path: &Path) -> Option<String> {
    let key = match std::fs::metadata(path) {
        Ok(meta) => inode_key(&meta),
        Err(_) => StoreKey::Path(canonical(path)),
    };
    let registry = lock(&REGISTRY);
    [false, true]
        .iter()
        .find_map(|&ro| registry.get(&(key.clone(), ro)))
        .map(|(s, _)| stats_json(&s.store))
}
