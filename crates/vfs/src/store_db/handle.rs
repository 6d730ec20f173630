//! One SQLite handle on one logical file of a store: its state (`StoreDb`), the state table
//! below and `assert_state`, which checks it at every callback in debug builds and with the
//! feature `invariants`.
//!
//! | state | `level` | `snapshot` | `writing` | the store's `Coordination` (`registry.rs`) |
//! |---|---|---|---|---|
//! | Idle | NONE | none | `Idle` | not counted |
//! | Reading | SHARED | what it reads: the latest durable state when taken (the latest written for a writer's retry) | `Idle` | counted in `files[logical].shared` |
//! | Serial writer | RESERVED to EXCLUSIVE | its base (reads and writes go to the connection's store transaction) | `Serial` | counted in `shared`; `files[logical].writer` is this handle; a member of `conns[conn]` |
//! | Concurrent writer (`concurrent.rs`) | RESERVED to EXCLUSIVE | its base | `Concurrent`: the transaction | counted in `shared` and in `files[logical].concurrent_writers` |
//!
//! | event (callback) | from | to |
//! |---|---|---|
//! | xLock(SHARED) | Idle | Reading: a snapshot |
//! | xLock(RESERVED) | Reading | Serial writer (`locking.rs`: this process's writer, then the logical file's lock among processes), or Concurrent writer with `concurrent=1`; SQLITE_BUSY leaves it Reading |
//! | xWrite with `nolock=1` | Idle | Serial writer (SQLite takes no locks; ended at PHASETWO) |
//! | xSync, COMMIT_ATOMIC_WRITE, PHASETWO | a writer | the same: the connection's transaction sequenced (`commit.rs`) |
//! | xUnlock(SHARED or NONE) | a writer | Reading or Idle: commit or abort what is left, let go of the locks, then wait for the commit's flush if it is to be waited for there (`commit.rs`) |
//! | xUnlock(NONE) | Reading | Idle |
//! | xClose | any | gone: unlocked first |

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::ffi::c_int;
use std::path::Path;
use std::sync::Arc;

use onesync_store::{CommitError, Error as StoreError, PendingCommit, Snapshot};

use crate::backend::{Connection, IoResult, LockLevel, SqliteName};
use crate::ffi::{SQLITE_IOERR_FSYNC, SQLITE_IOERR_SHORT_READ};
use crate::names::{self, NameClaim, Owner};
use crate::sys::api::ApiTable;

use super::connections::{is_main_database, join_connection, ConnectionState};
use super::registry::{lock, next_handle, registry_acquire, OpenStore, StoreOpener, Want};

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
    /// `concurrent=1`.
    pub concurrent: bool,
}

/// One SQLite handle on one logical file.
pub(crate) struct StoreDb {
    pub(super) store: Arc<OpenStore>,
    pub(super) logical: String,
    pub(super) handle: u64,
    /// Known from SQLITE_FCNTL_PDB, and registered with the connection.
    pub(super) joined: bool,
    /// The SQLite connection (its `sqlite3*` is `connection.id`), grouping handles into one
    /// write transaction, and its state (`connections.rs`); one of the handle's own until
    /// joined.
    pub(super) connection: Arc<ConnectionState>,
    pub(super) level: LockLevel,
    /// What this handle reads while it holds SHARED and is not the writer.
    pub(super) snapshot: Option<Snapshot>,
    pub(super) api: ApiTable,
    /// Inside SQLITE_FCNTL_BEGIN/COMMIT_ATOMIC_WRITE.
    pub(super) batch: bool,
    pub(super) read_only: bool,
    pub(super) nolock: bool,
    /// SQLite's name for the file (compared with `sqlite3_db_filename`).
    pub(super) name: SqliteName,
    pub(super) _claim: NameClaim,
    /// `concurrent=1` or `PRAGMA onesync_concurrent=1`: write transactions run concurrently
    /// with other connections' (see `concurrent.rs`).
    pub(super) concurrent: bool,
    /// `onesync_replicate_sync=1`: COMMIT (FULL) returns once the replica holds the commit
    /// (`replication.rs`), waiting at most this long (none: as long as it takes).
    pub(super) replicate_sync: bool,
    pub(super) replicate_sync_timeout: Option<std::time::Duration>,
    /// A commit of this handle the replica had not acknowledged when its wait ran out.
    pub(super) unreplicated: Option<u64>,
    /// In concurrent mode, the store pages read under SHARED: the read set a write
    /// transaction starts with.
    pub(super) shared_reads: BTreeSet<u64>,
    /// Whether and how this handle writes: the state table's writer rows.
    pub(super) writing: Writing,
    /// In concurrent mode, the store state SQLite's page cache is known to agree with (a
    /// snapshot it read from, or this handle's own commit of exactly its pages); `None`
    /// when unknown. See `concurrent.rs`, invariant 2.
    pub(super) cache_state: Option<u64>,
    /// In concurrent mode, the store pages SQLite may hold in its cache: every page read or
    /// written through this handle since SQLite last emptied its cache. A hash set: every
    /// xRead and xWrite inserts into it (up to `CACHE_PAGES_KEPT_MAX` pages), and as an
    /// ordered set those inserts were most of what a lone concurrent writer spent beyond a
    /// serial one (`perf record`); order matters nowhere (a conflict names any page that
    /// conflicts). Measure: `onesync-lab bench writers --workload own-rows --threads 1 --fs
    /// ext4 --rounds 40 --mode onesync,onesync-concurrent`.
    pub(super) cache_pages: HashSet<u64>,
    /// SQLite kept its cache for this read transaction: every page of `cache_pages` counts
    /// as read by it (invariant 2), without being copied into `shared_reads`.
    pub(super) cache_pages_read: bool,
    /// This connection asked for `journal_mode=WAL` and was answered `wal`, and has asked
    /// for no other mode since: `PRAGMA journal_mode` answers `wal` (crates/vfs/README.md,
    /// "journal_mode").
    pub(super) answers_wal: bool,
    /// Whether the store's name still leads to it (`SQLITE_FCNTL_HAS_MOVED`), kept up to
    /// date by watching the file; `None` before the first question.
    pub(super) moved: Option<MovedWatch>,
}

/// The answer to `SQLITE_FCNTL_HAS_MOVED`, and an inotify watch on the store file that says
/// when to look again (a rename, an unlink, a change of links), so that the question SQLite
/// asks at every write transaction costs one non-blocking read, not a `stat` of the path.
/// Without a watch (inotify unavailable, or its per-user limit reached) every question
/// looks at the path.
pub(crate) struct MovedWatch {
    pub(super) watch: Option<nix::sys::inotify::Inotify>,
    pub(super) moved: bool,
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
                joined: false,
                connection: Arc::new(ConnectionState::new(usize::MAX - handle as usize)),
                level: LockLevel::None,
                snapshot: None,
                api: o.api,
                batch: false,
                read_only,
                nolock: o.nolock,
                name: o.name,
                _claim: claim,
                concurrent: o.concurrent,
                replicate_sync: false,
                replicate_sync_timeout: None,
                unreplicated: None,
                shared_reads: BTreeSet::new(),
                writing: Writing::Idle,
                cache_state: None,
                cache_pages: HashSet::new(),
                cache_pages_read: false,
                answers_wal: false,
                moved: None,
            },
            read_only,
        ))
    }
}

/// Maps a store error to SQLite's `code` (`SQLITE_FULL` for a full disk) and tells
/// SQLite's error log (`sqlite3_log`) what failed and why, with the OS error where there is
/// one: SQLite's own message for an I/O error is only "disk I/O error".
pub(super) fn store_err<'a>(
    api: &'a ApiTable,
    code: c_int,
    what: &'a str,
) -> impl Fn(StoreError) -> c_int + 'a {
    move |e| {
        let code = match e {
            StoreError::NoSpace => crate::ffi::SQLITE_FULL,
            _ => code,
        };
        api.log(code, &format!("onesync: {what}: {e}"));
        code
    }
}

/// For a commit that failed or whose flush failed: `SQLITE_FULL` when the store could not
/// grow for it (the medium is full; the commit was refused before it was given a place in
/// the chain, so nothing of it is written and every earlier commit stands, as stock SQLite's
/// "database or disk is full"), else `SQLITE_IOERR_FSYNC`, with the reason logged.
pub(super) fn commit_err<'a>(api: &'a ApiTable, what: &'a str) -> impl Fn(CommitError) -> c_int + 'a {
    move |e| {
        let code = match (&e.error, e.seq) {
            (StoreError::NoSpace, None) => crate::ffi::SQLITE_FULL,
            _ => SQLITE_IOERR_FSYNC,
        };
        api.log(code, &format!("onesync: {what}: {}", e.error));
        code
    }
}

/// Reads `buf.len()` bytes at `offset` of a file of `size` bytes with
/// `read_page` reading whole store pages.
pub(super) fn read_bytes(
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

/// Whether and how a handle writes (the state table's last column but one).
pub(super) enum Writing {
    /// Idle or Reading: not a writer.
    Idle,
    /// The file's writer in this process; its pages go to the connection's store
    /// transaction (`locking.rs`, `commit.rs`).
    Serial,
    /// A concurrent write transaction of its own (`concurrent.rs`).
    Concurrent(ConcurrentWrite),
}

impl Writing {
    pub(super) fn is_concurrent(&self) -> bool {
        matches!(self, Writing::Concurrent(_))
    }

    pub(super) fn is_serial(&self) -> bool {
        matches!(self, Writing::Serial)
    }

    pub(super) fn concurrent(&self) -> Option<&ConcurrentWrite> {
        match self {
            Writing::Concurrent(cw) => Some(cw),
            _ => None,
        }
    }

    pub(super) fn concurrent_mut(&mut self) -> Option<&mut ConcurrentWrite> {
        match self {
            Writing::Concurrent(cw) => Some(cw),
            _ => None,
        }
    }

    /// The concurrent transaction, leaving `Idle`; `None` (and no change) otherwise.
    pub(super) fn take_concurrent(&mut self) -> Option<ConcurrentWrite> {
        match std::mem::replace(self, Writing::Idle) {
            Writing::Concurrent(cw) => Some(cw),
            other => {
                *self = other;
                None
            }
        }
    }
}

/// A concurrent writer's transaction (invariant 1).
pub(super) struct ConcurrentWrite {
    /// Store pages (0-based) read from the base, validated at commit.
    pub(super) reads: BTreeSet<u64>,
    /// Whole store pages written.
    pub(super) writes: BTreeMap<u64, Arc<[u8]>>,
    /// The file's size in bytes in the snapshot the transaction is based on.
    pub(super) base_size: u64,
    /// The file's size in bytes as this transaction has it.
    pub(super) size: u64,
    pub(super) wrote: bool,
    /// Committed or refused (invariant 4).
    pub(super) done: bool,
    /// The commit failed on an error other than a conflict (invariant 5).
    pub(super) failed: bool,
    /// The commit's sequence number, if it committed exactly SQLite's pages and size on the
    /// state the transaction began on (SQLite's cache then agrees with it: invariant 2).
    pub(super) committed_verbatim: Option<u64>,
    /// A FULL commit's flush, waited for at PHASETWO or at the unlock.
    pub(super) pending: Option<PendingCommit>,
}

impl StoreDb {
    /// SQLITE_FCNTL_PDB: the connection this file belongs to.
    pub(super) fn join(&mut self, db: Connection) {
        if self.joined || self.level != LockLevel::None {
            return;
        }
        let is_main = is_main_database(&self.api, db, self.name);
        self.joined = true;
        self.connection = join_connection(db.id(), self.handle, is_main, self.nolock);
        *lock(&self.store.coord)
            .handles_by_conn
            .entry(self.connection.id)
            .or_default() += 1;
    }
}

impl StoreDb {
    /// Checks the state table at the top of this module (debug builds and the feature
    /// `invariants`): called on entry to every callback of the main database file.
    pub(super) fn assert_state(&self, callback: &str) {
        if !cfg!(any(debug_assertions, feature = "invariants")) {
            return;
        }
        let here = || format!("{callback} on {} (handle {})", self.logical, self.handle);
        assert_eq!(
            self.level >= LockLevel::Shared,
            self.snapshot.is_some(),
            "a snapshot exactly while SHARED or above: {}",
            here()
        );
        assert_eq!(
            self.level >= LockLevel::Reserved,
            !matches!(self.writing, Writing::Idle),
            "a writer exactly at RESERVED and above: {}",
            here()
        );
        let coord = lock(&self.store.coord);
        let file = coord.files.get(&self.logical);
        if self.level >= LockLevel::Shared {
            assert!(
                file.is_some_and(|f| f.shared >= 1),
                "SHARED not counted: {}",
                here()
            );
        }
        if self.level >= LockLevel::Reserved {
            if self.writing.is_concurrent() {
                assert!(
                    file.is_some_and(|f| f.concurrent_writers >= 1),
                    "a concurrent writer not counted: {}",
                    here()
                );
            } else {
                assert!(
                    self.writing.is_serial(),
                    "a writer neither serial nor concurrent: {}",
                    here()
                );
                assert_eq!(
                    file.and_then(|f| f.writer),
                    Some((self.handle, self.connection.id)),
                    "a serial writer that is not the file's writer: {}",
                    here()
                );
                assert!(
                    coord
                        .conns
                        .get(&self.connection.id)
                        .is_some_and(|c| c.members.contains_key(&self.handle)),
                    "a serial writer outside its connection's transaction: {}",
                    here()
                );
            }
        } else if file.and_then(|f| f.writer).is_some_and(|(h, _)| h == self.handle) {
            panic!("the file's writer below RESERVED: {}", here());
        }
    }
}
