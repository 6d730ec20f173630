//! SQLite connections (`sqlite3*`, from SQLITE_FCNTL_PDB), one `ConnectionState` each that
//! its handles reach directly: which of our handles belong to it, which is its main
//! database, each database's `locking_mode` (which decides whether a commit's flush may be
//! waited for after the unlock) and `synchronous` level, and what a retry should know.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::backend::{Connection, SqliteName};
use crate::sys::api::ApiTable;

use super::registry::lock;

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
    /// The database's `PRAGMA synchronous`, as far as this VFS saw it set (SQLite sends
    /// every pragma to the file first, as SQLITE_FCNTL_PRAGMA). Not seen: FULL, SQLite's
    /// default, and the safe guess.
    synchronous: Synchronous,
}

/// What a database's `synchronous` level asks of a commit, weakest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Synchronous {
    /// OFF: COMMIT returns once the commit is written and shown; durable at the next flush
    /// of any kind, or `PRAGMA onesync_flush`.
    Off,
    /// NORMAL: as OFF, and a background flush makes it durable within the store's interval.
    Normal,
    /// FULL and EXTRA: COMMIT returns once the commit is durable.
    Full,
}

impl Synchronous {
    /// The level a `PRAGMA synchronous=VALUE` sets (by name or number), if it sets one.
    pub(super) fn parse(value: &str) -> Option<Synchronous> {
        match value.trim().to_ascii_lowercase().as_str() {
            "0" | "off" | "no" | "false" => Some(Synchronous::Off),
            "1" | "normal" => Some(Synchronous::Normal),
            "2" | "full" | "yes" | "true" | "on" | "3" | "extra" => Some(Synchronous::Full),
            _ => None,
        }
    }
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
    /// The connection's last write lock or commit was refused only because its snapshot was
    /// stale: its next SHARED lock is a writer's retry (see `StoreDb::stale_snapshot`).
    retrying_writer: bool,
    /// The snapshot (its sequence number) the connection's last concurrent COMMIT was
    /// refused on: a retry refused on it again has not seen the commits it lost to (see
    /// `try_commit_concurrent`). Another store's number matching costs only a flush.
    refused_on: Option<u64>,
}

/// One SQLite connection (`sqlite3*`) as this VFS knows it, reached directly by each of its
/// handles: its databases' `locking_mode` and `synchronous`, and what its next transaction
/// should know of its last. (Its write transaction in a store is that store's, under the
/// store's mutex: `registry::ConnTxn`.)
pub(super) struct ConnectionState {
    /// The `sqlite3*` (or, before SQLITE_FCNTL_PDB names it, a number of the handle's own).
    pub(super) id: usize,
    info: Mutex<ConnInfo>,
}

/// The connections with a handle of this VFS, by `sqlite3*`: where a handle finds its
/// connection when SQLite names it (SQLITE_FCNTL_PDB).
static CONNS: Mutex<BTreeMap<usize, Arc<ConnectionState>>> = Mutex::new(BTreeMap::new());

/// Whether the file SQLite opened as `name` is the main database of connection `db`
/// (told with SQLITE_FCNTL_PDB). The main database is always opened first; SQLite's
/// `sqlite3_db_filename(db, "main")` is that file's name pointer, or null while the
/// connection is still being opened (where API armor refuses the call).
pub(crate) fn is_main_database(api: &ApiTable, db: Connection, name: SqliteName) -> bool {
    if lock(&CONNS)
        .get(&db.id())
        .is_some_and(|c| !c.info().handles.is_empty())
    {
        return false;
    }
    api.is_main_db_name(db, name).unwrap_or(true)
}

/// Whether this VFS has a handle as connection `db`'s main database.
pub(super) fn has_main_database(db: usize) -> bool {
    lock(&CONNS).get(&db).is_some_and(|c| c.info().main.is_some())
}

/// Adds one of our handles to its connection's bookkeeping; returns the connection.
pub(crate) fn join_connection(conn: usize, handle: u64, is_main: bool, nolock: bool) -> Arc<ConnectionState> {
    let connection = lock(&CONNS)
        .entry(conn)
        .or_insert_with(|| Arc::new(ConnectionState::new(conn)))
        .clone();
    let mut info = connection.info();
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
            synchronous: Synchronous::Full,
        },
    );
    drop(info);
    connection
}

/// Removes one of our handles; the connection is forgotten with its last handle.
pub(crate) fn leave_connection(connection: &ConnectionState, handle: u64) {
    let mut conns = lock(&CONNS);
    let mut info = connection.info();
    info.handles.remove(&handle);
    if info.main == Some(handle) {
        info.main = None;
    }
    if info.handles.is_empty()
        && conns
            .get(&connection.id)
            .is_some_and(|c| std::ptr::eq(&**c, connection))
    {
        conns.remove(&connection.id);
    }
}

impl ConnectionState {
    /// A connection of its own for a handle SQLite has not named a connection for yet.
    pub(super) fn new(id: usize) -> Self {
        Self {
            id,
            info: Mutex::new(ConnInfo::default()),
        }
    }

    fn info(&self) -> std::sync::MutexGuard<'_, ConnInfo> {
        lock(&self.info)
    }

    /// `PRAGMA locking_mode=...` arrived at `handle`'s file: for the schema it names, or for
    /// an unqualified pragma the main database, which then applies it to every database.
    pub(crate) fn note_locking_mode(&self, handle: u64, value: Option<&str>) {
        let mode = match value {
            Some("exclusive") => Mode::Exclusive,
            Some("normal") => Mode::Normal,
            _ => return,
        };
        let mut info = self.info();
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

    /// `PRAGMA synchronous=...` arrived at `handle`'s file: it applies to that database only
    /// (an unqualified one to the main database).
    pub(super) fn note_synchronous(&self, handle: u64, value: Option<&str>) {
        let Some(level) = value.and_then(Synchronous::parse) else {
            return;
        };
        if let Some(h) = self.info().handles.get_mut(&handle) {
            h.synchronous = level;
        }
    }

    /// What a commit of these handles' databases asks for: the strongest of their levels
    /// (FULL for a handle this VFS does not know).
    pub(super) fn commit_synchronous(&self, handles: &[u64]) -> Synchronous {
        let info = self.info();
        handles
            .iter()
            .map(|h| info.handles.get(h).map_or(Synchronous::Full, |m| m.synchronous))
            .max()
            .unwrap_or(Synchronous::Full)
    }

    /// Whether `handle` is (or may be) in `locking_mode=EXCLUSIVE`: SQLite then keeps its
    /// cache across transactions without the change-counter check, so concurrency is off
    /// for it.
    pub(super) fn is_exclusive(&self, handle: u64) -> bool {
        self.info()
            .handles
            .get(&handle)
            .is_some_and(|m| m.mode != Mode::Normal)
    }

    pub(super) fn note_unlocked(&self, handle: u64) {
        if let Some(h) = self.info().handles.get_mut(&handle) {
            h.unlocked = true;
        }
    }

    pub(super) fn note_phasetwo(&self) {
        self.info().phasetwo = true;
    }

    pub(super) fn phasetwo_seen(&self) -> bool {
        self.info().phasetwo
    }

    /// Whether SQLite will surely unlock every one of these handles right after PHASETWO.
    pub(super) fn unlocks_after_commit(&self, handles: &[u64]) -> bool {
        let info = self.info();
        handles.iter().all(|h| {
            info.handles
                .get(h)
                .is_some_and(|m| m.mode == Mode::Normal && m.unlocked && !m.nolock)
        })
    }

    /// Note that the connection's next SHARED lock is a writer's retry.
    pub(super) fn note_retrying_writer(&self) {
        self.info().retrying_writer = true;
    }

    /// Whether this SHARED lock is a writer's retry (told once).
    pub(super) fn take_retrying_writer(&self) -> bool {
        std::mem::take(&mut self.info().retrying_writer)
    }

    /// Notes the snapshot a concurrent COMMIT was refused on; whether the last refusal was
    /// on the same one.
    pub(super) fn refused_again_on(&self, seq: u64) -> bool {
        self.info().refused_on.replace(seq) == Some(seq)
    }
}

/// A boolean URI parameter or pragma value as SQLite spells them (`1`, `on`, `yes`, `true`
/// and their opposites), if it is one.
pub(crate) fn parse_switch(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "on" | "yes" | "true" => Some(true),
        "0" | "off" | "no" | "false" => Some(false),
        _ => None,
    }
}

/// The largest `onesync_mapping_cache` may be: 64 GiB.
const MAX_MAPPING_CACHE: u64 = 64 << 30;

/// Parses the URI parameter `onesync_mapping_cache`: the bytes of mapping blocks a process
/// keeps cached per store, a whole number with an optional binary suffix `k`, `m` or `g`
/// (`64m`), up to 64 GiB; 0 caches nothing (every lookup reads its blocks).
pub(crate) fn parse_mapping_cache(value: &str) -> Result<usize, String> {
    let trimmed = value.trim().to_ascii_lowercase();
    let (digits, unit) = match trimmed.strip_suffix(['k', 'm', 'g']) {
        Some(digits) => (digits, trimmed.as_bytes()[trimmed.len() - 1]),
        None => (trimmed.as_str(), b' '),
    };
    let shift = match unit {
        b'k' => 10,
        b'm' => 20,
        b'g' => 30,
        _ => 0,
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_shl(shift).filter(|bytes| bytes >> shift == n))
        .filter(|&bytes| bytes <= MAX_MAPPING_CACHE)
        .and_then(|bytes| usize::try_from(bytes).ok())
        .ok_or_else(|| {
            format!(
                "onesync: onesync_mapping_cache must be a whole number of bytes, optionally \
                 followed by k, m or g, up to 64g, not {value:?}"
            )
        })
}

/// The longest `onesync_sync_interval_ms` may be: an hour (longer is OFF in all but name).
const MAX_SYNC_INTERVAL_MS: u64 = 3_600_000;

/// Parses `onesync_sync_interval_ms` (PRAGMA or URI parameter): whole milliseconds,
/// 0 to an hour; 0 flushes as soon as the background flusher can.
pub(crate) fn parse_sync_interval(value: &str) -> Result<std::time::Duration, String> {
    match value.trim().parse::<u64>() {
        Ok(ms) if ms <= MAX_SYNC_INTERVAL_MS => Ok(std::time::Duration::from_millis(ms)),
        _ => Err(format!(
            "onesync: onesync_sync_interval_ms must be a whole number of milliseconds from 0 to \
             {MAX_SYNC_INTERVAL_MS}, not {value:?}"
        )),
    }
}
