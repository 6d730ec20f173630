//! The stores open in this process: one `Store` per store file (keyed by device and inode,
//! and read-only-ness), shared by every handle on it and refcounted; the lock and
//! transaction state each open store coordinates under one mutex.

use std::collections::{BTreeMap, HashMap};
use std::ffi::c_int;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use onesync_store::wakeup::Wakeup;
use onesync_store::{Error as StoreError, Options, PendingCommit, Store, Transaction};

use crate::ffi::{SQLITE_CANTOPEN, SQLITE_NOTADB};
use crate::names::{self, StoreKey};

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
pub(super) const CHANGE_COUNTER: std::ops::Range<usize> = 24..28;

/// Opens (or, if the flag says so, creates) the store at a path: how a host puts stores on
/// another medium (the lab's power-cut simulation puts them on a `SimDisk`).
pub type StoreOpener = Arc<dyn Fn(&Path, &Options, bool) -> Result<Store, StoreError> + Send + Sync>;

/// Opens main database files as logical files of stores (or, for databases attached
/// without `vfs=onesync`, as plain SQLite files: see `main_file.rs`).
pub struct StoreFactory {
    pub(crate) api: ApiTable,
    pub(crate) opener: Option<StoreOpener>,
    #[cfg(feature = "test-hooks")]
    replica_config: Option<ReplicaConfigHook>,
}

/// Test hooks only: changes the configuration of each shipper that `onesync_replicate=URL`
/// starts through a VFS (the crash-point explorer's deterministic shipping).
#[cfg(feature = "test-hooks")]
pub type ReplicaConfigHook = Arc<dyn Fn(&mut onesync_replica::Config) + Send + Sync>;

impl StoreFactory {
    pub fn new(api: ApiTable) -> Self {
        Self {
            api,
            opener: None,
            #[cfg(feature = "test-hooks")]
            replica_config: None,
        }
    }

    /// Stores opened by `opener` instead of from files (the path is still the registry key,
    /// so every database of one path shares one store). Every main database file of such a
    /// VFS is a store: the medium is the host's, so there is no plain file to fall back to.
    pub fn with_opener(api: ApiTable, opener: StoreOpener) -> Self {
        Self {
            opener: Some(opener),
            ..Self::new(api)
        }
    }

    /// Test hooks only: `hook` changes the configuration of every shipper the URI parameter
    /// `onesync_replicate` starts through this VFS (not `PRAGMA onesync_replicate`'s).
    #[cfg(feature = "test-hooks")]
    pub fn with_replica_config(self, hook: ReplicaConfigHook) -> Self {
        Self {
            replica_config: Some(hook),
            ..self
        }
    }

    /// A shipper's configuration as this VFS wants it (`with_replica_config`).
    pub(super) fn configure_replica(&self, config: &mut onesync_replica::Config) {
        #[cfg(feature = "test-hooks")]
        if let Some(hook) = &self.replica_config {
            hook(config);
        }
        #[cfg(not(feature = "test-hooks"))]
        let _ = config;
    }
}

pub(crate) fn not_a_store_message(path: &Path, why: &str) -> String {
    format!(
        "onesync: {} is not a onesync store ({why}); nothing was written to it. Open a plain \
         SQLite database without vfs=onesync, or copy it into a store: onesync import {} \
         NEW.onesync, or VACUUM INTO 'file:NEW.onesync?vfs=onesync'",
        path.display(),
        path.display()
    )
}

pub(super) static NEXT_HANDLE: AtomicU64 = AtomicU64::new(1);

/// A new id for an open database file of this VFS.
pub(crate) fn next_handle() -> u64 {
    NEXT_HANDLE.fetch_add(1, Relaxed)
}

/// The registry's key: the store, and whether it is open read-only.
pub(super) type RegistryKey = (StoreKey, bool);

/// One open store, shared by every handle on it in this process.
pub(super) struct OpenStore {
    pub(super) key: RegistryKey,
    /// The store file's path as first opened, resolved (replication keeps its position
    /// beside it).
    pub(super) path: PathBuf,
    pub(super) store: Store,
    pub(super) page_size: u64,
    pub(super) coord: Mutex<Coordination>,
    /// Signalled when a file's writer lets go of RESERVED.
    pub(super) writer_left: Wakeup,
    /// Connections of this process waiting for a write lock of this store right now.
    pub(super) waiting_writers: AtomicUsize,
    /// When a write lock of this store was last found held by another process.
    pub(super) contended_at: Mutex<Option<Instant>>,
    /// How this process's concurrent commits went (`PRAGMA onesync_stats`).
    pub(super) concurrent_commits: ConcurrentCommits,
    /// The shippers of this store's replicated databases, by logical file
    /// (`replication.rs`); stopped before the store closes.
    pub(super) replicas: Mutex<BTreeMap<String, Arc<onesync_replica::Shipper>>>,
}

/// Concurrent commits of this process that were not on their own snapshot: rebased onto
/// later commits (page 1 merged), and of them, those whose appended pages moved past
/// another commit's end. A test can so tell that these paths ran.
#[derive(Default)]
pub(super) struct ConcurrentCommits {
    pub(super) rebased: AtomicU64,
    pub(super) relocated: AtomicU64,
}

impl ConcurrentCommits {
    pub(super) fn count(&self, verbatim: bool, relocated: bool) {
        if !verbatim {
            self.rebased.fetch_add(1, Relaxed);
        }
        if relocated {
            self.relocated.fetch_add(1, Relaxed);
        }
    }
}

/// Lock levels and write transactions of one store, under one mutex.
#[derive(Default)]
pub(super) struct Coordination {
    pub(super) files: HashMap<String, FileLock>,
    pub(super) conns: HashMap<usize, ConnTxn>,
    /// Store sequence number of each connection's last commit (`PRAGMA onesync_commit`).
    pub(super) last_commit: HashMap<usize, u64>,
    /// Open handles on this store, by connection.
    pub(super) handles_by_conn: HashMap<usize, usize>,
}

#[derive(Default)]
pub(super) struct FileLock {
    /// Handles at SHARED or above.
    pub(super) shared: usize,
    /// The handle at RESERVED or above, and its connection.
    pub(super) writer: Option<(u64, usize)>,
    /// Store sequence of the last commit that changed this file through us:
    /// a handle whose snapshot is older must not become its writer (its
    /// cache is stale), as with WAL's SQLITE_BUSY_SNAPSHOT.
    pub(super) changed_at: u64,
    /// Concurrent writers (`concurrent=1`) of this process at RESERVED or above; while
    /// there are any, this process holds the file's process lock shared.
    pub(super) concurrent_writers: usize,
}

/// The write transaction of one SQLite connection on one store.
#[derive(Default)]
pub(super) struct ConnTxn {
    pub(super) txn: Option<Transaction>,
    pub(super) members: BTreeMap<u64, Member>,
    /// Sequenced, not yet known durable: waited for at PHASETWO, or by the last member's
    /// unlock.
    pub(super) pending: Option<PendingCommit>,
    /// The super-journal SQLite named at this transaction's phase one: it commits at
    /// PHASETWO only, never at an xSync (a rollback after a failed phase one syncs too).
    pub(super) super_journal: Option<names::SuperJournalInUse>,
}

impl ConnTxn {
    /// Ends the transaction without committing it.
    pub(super) fn abort(&mut self) {
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

pub(super) struct Member {
    pub(super) logical: String,
    /// Written since its last xSync.
    pub(super) dirty: bool,
    pub(super) wrote: bool,
    /// Change counter at the start of the transaction.
    pub(super) base_counter: [u8; 4],
}

/// Open stores by identity and read-only-ness, with the number of handles on each.
pub(super) static REGISTRY: Mutex<BTreeMap<RegistryKey, (Arc<OpenStore>, usize)>> =
    Mutex::new(BTreeMap::new());

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding a lock is caught at the FFI boundary; the data
    // behind it is bookkeeping that stays consistent step by step.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The path with its directory resolved (the file itself may not exist yet).
pub(super) fn canonical(path: &Path) -> PathBuf {
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

pub(super) fn inode_key(meta: &std::fs::Metadata) -> StoreKey {
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
    /// The bytes of mapping blocks to cache (`onesync_mapping_cache`), else the default.
    pub mapping_cache_bytes: Option<usize>,
}

pub(super) fn store_options(read_only: bool, want: &Want) -> Options {
    let defaults = Options::default();
    Options {
        mapping_cache_bytes: want.mapping_cache_bytes.unwrap_or(defaults.mapping_cache_bytes),
        page_size: STORE_PAGE_SIZE,
        embed_limit: EMBED_LIMIT,
        read_only,
        map_side_file: Some(crate::sys::shared_map::side_file_mapper()),
        // Negative controls of crash tests only (ONESYNC_SABOTAGE): builds with the feature
        // `test-hooks`, never libonesync.so.
        #[cfg(feature = "test-hooks")]
        sabotage: onesync_store::Sabotage::from_env(),
        // Growth steps of at most 8 MiB, not the store's 64 MiB: a step's zeros are flushed
        // ahead of need, and a commit's flush can queue behind that flush, so a smaller step
        // bounds the tail latency (`onesync-lab bench writers --workload own-rows --threads
        // 16 --fs ext4 --txns 9000 --mode onesync-concurrent` compares the two).
        max_growth_step: 8 << 20,
        ..defaults
    }
}

pub(super) fn open_error(path: &Path, e: StoreError) -> (c_int, String) {
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
pub(super) fn registry_acquire(
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
        let store = open(&path, &store_options(want.read_only, &want), want.create)
            .map_err(|e| open_error(&path, e))?;
        return Ok((
            register(&mut registry, (key, want.read_only), store, &path),
            want.read_only,
        ));
    }
    // The name may be replaced meanwhile (a rename): the store must be the inode the key
    // names, so the name is looked up again after the open.
    for _ in 0..3 {
        let meta = match std::fs::metadata(path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && want.create => {
                match Store::create(path, &store_options(false, &want)) {
                    Ok(store) => {
                        let meta = std::fs::metadata(path)
                            .map_err(|e| (SQLITE_CANTOPEN, format!("onesync: {}: {e}", path.display())))?;
                        let key = (inode_key(&meta), false);
                        return Ok((register(&mut registry, key, store, path), false));
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
        let (store, read_only) = match Store::open(path, &store_options(want.read_only, &want)) {
            Ok(store) => (store, want.read_only),
            // A read-only file or mount: read-only, as stock SQLite falls back to.
            Err(StoreError::NotWritable { .. }) if !want.read_only => {
                if let Some(hit) = share(&mut registry, &key) {
                    return Ok(hit);
                }
                let store =
                    Store::open(path, &store_options(true, &want)).map_err(|e| open_error(path, e))?;
                (store, true)
            }
            Err(e) => return Err(open_error(path, e)),
        };
        if std::fs::metadata(path).is_ok_and(|m| inode_key(&m) == key) {
            return Ok((register(&mut registry, (key, read_only), store, path), read_only));
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

pub(super) fn register(
    registry: &mut BTreeMap<RegistryKey, (Arc<OpenStore>, usize)>,
    key: RegistryKey,
    store: Store,
    path: &Path,
) -> Arc<OpenStore> {
    let open = Arc::new(OpenStore {
        key: key.clone(),
        path: canonical(path),
        page_size: store.page_size() as u64,
        store,
        coord: Mutex::new(Coordination::default()),
        writer_left: Wakeup::new(),
        waiting_writers: AtomicUsize::new(0),
        contended_at: Mutex::new(None),
        concurrent_commits: ConcurrentCommits::default(),
        replicas: Mutex::new(BTreeMap::new()),
    });
    registry.insert(key, (open.clone(), 1));
    open
}

/// Drops one handle's claim; the last one closes the store (checkpointing it),
/// under the registry lock so that a concurrent open waits for the flock.
pub(super) fn registry_release(store: &Arc<OpenStore>) {
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
            open.stop_all_replication();
            let _ = open.store.clone().close();
        }
    }
}
