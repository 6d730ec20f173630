//! What serves a main database file opened through the store VFS: a store, or a plain
//! SQLite file passed through to the default VFS.
//!
//! - A file that is a store (it begins with the store magic) is opened as one, whoever
//!   opens it.
//! - The connection's main database, and any database whose URI says `vfs=onesync`, is a
//!   store: created if missing, refused (`SQLITE_NOTADB`) if it holds something else, made
//!   into a fresh store if it is an existing 0-byte file (read-write with create
//!   permission; read-only, it is an empty database).
//! - Any other database (ATTACHed, or a `VACUUM INTO` target, without `vfs=onesync`) is a
//!   plain SQLite file on the default VFS, its journals on disk, as in stock SQLite.
//! - When this VFS is SQLite's default (`sqlite3_onesync_default_init`) and the URI does
//!   not say `vfs=onesync`, a main database that exists and is not a store (a plain SQLite
//!   file, or anything else) is passed through too, so that an application choosing
//!   onesync for its new databases still opens its old ones as they are.
//! - A file refused as a store (a plain SQLite database named with `vfs=onesync`, a
//!   directory, a missing directory, a damaged store) is opened as a handle that fails,
//!   and the reason reaches `sqlite3_errmsg` (`refusals.rs`).
//!
//! SQLite's xOpen does not say which database of which connection a file is: a main
//! database and an attached one arrive with the same flags. It says so right after, with
//! SQLITE_FCNTL_PDB (the connection; the main database is the one
//! `sqlite3_db_filename(db, "main")` names). Until then, when the file's content does not
//! decide (missing, empty, or not a store), the decision waits: SQLite only reads the
//! header (zeros for a missing or empty file, either way) and asks the sector size and
//! device characteristics (answered alike for both).

use std::ffi::{c_int, c_void, OsStr};
use std::fs::File;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use onesync_store::layout::{HEADER_BLOCK, MAGIC};
use onesync_store::Store;

use super::connections::{is_main_database, join_connection, leave_connection, ConnectionState};
use super::connections::{parse_mapping_cache, parse_switch, parse_sync_interval};
use super::handle::{StoreDb, StoreOpen};
use super::refusals::{self, Refusal, When};
use super::registry::{next_handle, StoreFactory, Want, DEFAULT_LOGICAL_DB};
use super::replication::{is_off, parse_replicate_interval, parse_sync_timeout};
use crate::backend::{
    Connection, DbBackend, FileControl, FileControlCall, IoResult, LockLevel, OpenRequest, Opened,
    PassThrough, SqliteName,
};
use crate::ffi::{
    SQLITE_CANTOPEN, SQLITE_IOCAP_POWERSAFE_OVERWRITE, SQLITE_IOERR_SHMMAP, SQLITE_IOERR_SHORT_READ,
    SQLITE_NOTADB, SQLITE_NOTFOUND, SQLITE_OK, SQLITE_OPEN_CREATE, SQLITE_OPEN_READONLY,
    SQLITE_OPEN_READWRITE,
};
use crate::names::{self, NameClaim, Owner};
use crate::sys::api::ApiTable;

/// What is at a path before anything is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Probe {
    Missing,
    /// An existing file of 0 bytes.
    Empty,
    /// Begins with the store magic (in either header copy).
    Store,
    /// Begins with SQLite's own header string: a plain SQLite database.
    Sqlite,
    Directory,
    /// Anything else: a file that is neither, or unreadable.
    Other,
}

/// The first 16 bytes of every SQLite database file.
const SQLITE_HEADER: &[u8; 16] = b"SQLite format 3\0";

fn probe(path: &Path) -> Probe {
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Probe::Missing,
        // Unreadable: as a store, the store says why; as a plain file, the default VFS.
        Err(_) => return Probe::Other,
    };
    if file.metadata().is_ok_and(|m| m.is_dir()) {
        return Probe::Directory;
    }
    let mut head = vec![0u8; HEADER_BLOCK as usize + MAGIC.len()];
    let mut got = 0;
    while got < head.len() {
        match file.read(&mut head[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Probe::Other,
        }
    }
    let copy = HEADER_BLOCK as usize;
    if got == 0 {
        Probe::Empty
    } else if head.starts_with(SQLITE_HEADER) {
        Probe::Sqlite
    } else if head.starts_with(&MAGIC) || (got >= copy + MAGIC.len() && head[copy..].starts_with(&MAGIC)) {
        // The second copy alone: a crash fell between the two header writes.
        Probe::Store
    } else {
        Probe::Other
    }
}

/// Whether this process may write `path` (the file, or if it is missing its directory):
/// false on a read-only mount and without permission.
fn writable(path: &Path) -> bool {
    let target = if path.exists() {
        path.to_owned()
    } else {
        match path.parent().filter(|p| !p.as_os_str().is_empty()) {
            Some(dir) => dir.to_owned(),
            None => PathBuf::from("."),
        }
    };
    nix::unistd::access(&target, nix::unistd::AccessFlags::W_OK).is_ok()
}

/// What the open was asked for, kept for a decision made later.
struct Request {
    api: ApiTable,
    /// The default VFS and SQLite's name for the file: both outlive the file.
    open: OpenRequest,
    flags: c_int,
    path: PathBuf,
    logical: String,
    nolock: bool,
    concurrent: bool,
    /// `onesync_mapping_cache`, if given: the store's `Options::mapping_cache_bytes`.
    mapping_cache_bytes: Option<usize>,
}

impl Request {
    fn name(&self) -> SqliteName {
        self.open.sqlite_name()
    }

    fn create(&self) -> bool {
        self.flags & SQLITE_OPEN_CREATE != 0
    }

    fn read_only(&self) -> bool {
        self.flags & SQLITE_OPEN_READWRITE == 0
    }

    /// The store this database is; the flags to report (read-only if it could only be
    /// opened so).
    fn store(&self) -> Result<(StoreDb, c_int), (c_int, String)> {
        let (db, read_only) = StoreDb::open(StoreOpen {
            api: self.api,
            opener: None,
            path: &self.path,
            name: self.name(),
            logical: self.logical.clone(),
            want: Want {
                create: self.create(),
                read_only: self.read_only(),
                mapping_cache_bytes: self.mapping_cache_bytes,
            },
            nolock: self.nolock,
            concurrent: self.concurrent,
        })?;
        let flags = if read_only {
            (self.flags & !(SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE)) | SQLITE_OPEN_READONLY
        } else {
            self.flags
        };
        Ok((db, flags))
    }

    /// This file as a plain SQLite file on the default VFS.
    fn plain(&self) -> IoResult<(PlainDb, c_int)> {
        let (file, out_flags) = self.open.with_flags(self.flags).open_passthrough_file()?;
        Ok((PlainDb::new(file, self), out_flags))
    }

    /// An existing 0-byte file opened read-write as a store: a fresh store takes its
    /// place. Returns the store.
    fn store_from_empty(&self) -> Result<(StoreDb, c_int), (c_int, String)> {
        if !self.create() {
            return Err((
                SQLITE_CANTOPEN,
                format!(
                    "onesync: {} is an empty file; open it with SQLITE_OPEN_CREATE (mode=rwc) to \
                     make it a onesync store, or read-only to read it as an empty database",
                    self.path.display()
                ),
            ));
        }
        replace_empty_file(&self.path).map_err(|e| {
            (
                SQLITE_CANTOPEN,
                format!(
                    "onesync: cannot make the empty file {} a store: {e}",
                    self.path.display()
                ),
            )
        })?;
        self.store()
    }

    /// A refusal told as SQLite opens the connection (`refusals.rs`), and logged.
    fn refuse(&self, (code, message): (c_int, String)) -> Refusal {
        self.refuse_when((code, message), When::AtOpen)
    }

    fn refuse_when(&self, (code, message): (c_int, String), when: When) -> Refusal {
        self.api.log(code, &message);
        Refusal { code, message, when }
    }

    /// This file, which is no store, named as one: refused, as stock SQLite gives the code.
    fn refuse_content(&self, probe: Probe) -> Refusal {
        let path = self.path.display();
        match probe {
            Probe::Directory => self.refuse((SQLITE_CANTOPEN, format!("onesync: {path} is a directory"))),
            Probe::Sqlite => self.refuse((
                SQLITE_NOTADB,
                super::registry::not_a_store_message(&self.path, "it is a plain SQLite database"),
            )),
            // Stock SQLite opens a file that is no database and refuses it at first use.
            _ => self.refuse_when(
                (
                    SQLITE_NOTADB,
                    super::registry::not_a_store_message(
                        &self.path,
                        "it is neither a store nor a SQLite database",
                    ),
                ),
                When::AtFirstUse,
            ),
        }
    }

    /// A missing file that may not be created, or whose directory is missing.
    fn refuse_missing(&self) -> Refusal {
        let dir = self.path.parent().filter(|d| !d.as_os_str().is_empty());
        let why = match dir {
            Some(dir) if !dir.is_dir() => format!(
                "onesync: cannot create {}: the directory {} does not exist",
                self.path.display(),
                dir.display()
            ),
            _ => format!("onesync: {} does not exist", self.path.display()),
        };
        self.refuse((SQLITE_CANTOPEN, why))
    }
}

/// Builds a store under a temporary name next to the empty file at `path` and renames it
/// over that file, if the file is still the same empty one (another process may have done
/// so meanwhile, or written a database into it). The empty file's lock serialises the
/// processes doing this; its permissions carry over.
fn replace_empty_file(path: &Path) -> std::io::Result<()> {
    let empty = File::open(path)?;
    empty.lock()?;
    let meta = empty.metadata()?;
    let still_empty = |empty: &File| -> std::io::Result<bool> {
        let now = std::fs::metadata(path)?;
        Ok(now.dev() == meta.dev() && now.ino() == meta.ino() && empty.metadata()?.len() == 0)
    };
    if !still_empty(&empty)? {
        return Ok(());
    }
    let dir = match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(d) => d.to_owned(),
        None => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let temp = dir.join(format!(
        ".{name}.onesync-from-empty-{}-{stamp:x}",
        std::process::id()
    ));
    let built = (|| -> std::io::Result<()> {
        let opts = onesync_store::Options {
            page_size: super::registry::STORE_PAGE_SIZE,
            ..onesync_store::Options::default()
        };
        Store::create(&temp, &opts)
            .and_then(Store::close)
            .map_err(std::io::Error::other)?;
        std::fs::set_permissions(&temp, meta.permissions())?;
        if still_empty(&empty)? {
            std::fs::rename(&temp, path)?;
            File::open(&dir)?.sync_all()?;
        }
        Ok(())
    })();
    let _ = std::fs::remove_file(&temp);
    built
}

/// Opens a main database file for the store VFS (see the module's notes).
pub(crate) fn open(factory: &StoreFactory, req: &OpenRequest) -> IoResult<Opened> {
    let name = req.name().ok_or(SQLITE_CANTOPEN)?;
    let path = PathBuf::from(OsStr::from_bytes(name.to_bytes()));
    let param = |key: &std::ffi::CStr| req.uri_parameter(&factory.api, key);
    let logical = param(c"db")
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| DEFAULT_LOGICAL_DB.to_owned());
    let nolock = param(c"nolock").and_then(|v| parse_switch(&v)).unwrap_or(false);
    // A `vfs=` parameter that brought SQLite here names this VFS: the file is to be a store.
    let explicit = param(c"vfs").is_some_and(|v| !v.is_empty());
    // `concurrent=1`: write transactions run concurrently (store_db/concurrent.rs).
    let concurrent = match param(c"concurrent") {
        None => Ok(false),
        Some(value) => parse_switch(&value)
            .ok_or_else(|| format!("onesync: the URI parameter concurrent is 0 or 1, not {value:?}")),
    };
    // `onesync_mapping_cache=N`: the bytes of the store's mapping this process caches
    // (taken by the connection that opens the store in this process first).
    let mapping_cache = param(c"onesync_mapping_cache").map(|v| parse_mapping_cache(&v));
    let r = Request {
        api: factory.api,
        open: req.duplicate(),
        flags: req.flags(),
        path,
        logical,
        nolock,
        concurrent: matches!(concurrent, Ok(true)),
        mapping_cache_bytes: mapping_cache.clone().and_then(Result::ok),
    };
    let refused = |refusal: Refusal| opened_refused(refusal, r.flags);
    if let Err(msg) = concurrent {
        return refused(r.refuse((SQLITE_CANTOPEN, msg)));
    }
    if let Some(Err(msg)) = mapping_cache {
        return refused(r.refuse((SQLITE_CANTOPEN, msg)));
    }
    // `onesync_sync_interval_ms=N`: the store's background flush interval
    // (synchronous=NORMAL), as `PRAGMA onesync_sync_interval_ms` sets it.
    let sync_interval = match param(c"onesync_sync_interval_ms").map(|v| parse_sync_interval(&v)) {
        Some(Err(msg)) => return refused(r.refuse((SQLITE_CANTOPEN, msg))),
        Some(Ok(interval)) => Some(interval),
        None => None,
    };
    // `onesync_replicate=URL` (and `onesync_replicate_interval_ms=N`): ship this database's
    // commits to a replica, as `PRAGMA onesync_replicate` does (replication.rs).
    let replicate = param(c"onesync_replicate").filter(|v| !is_off(v));
    let replicate_interval =
        match param(c"onesync_replicate_interval_ms").map(|v| parse_replicate_interval(&v)) {
            Some(Err(msg)) => return refused(r.refuse((SQLITE_CANTOPEN, msg))),
            Some(Ok(interval)) => Some(interval),
            None => None,
        };
    // `onesync_replicate_sync=1` (and `onesync_replicate_sync_timeout_ms=N`): this
    // connection's FULL COMMITs return once the replica holds them.
    let replicate_sync = match param(c"onesync_replicate_sync").map(|v| {
        parse_switch(&v).ok_or_else(|| format!("onesync: onesync_replicate_sync is 0 or 1, not {v:?}"))
    }) {
        Some(Err(msg)) => return refused(r.refuse((SQLITE_CANTOPEN, msg))),
        Some(Ok(on)) => on,
        None => false,
    };
    let replicate_sync_timeout =
        match param(c"onesync_replicate_sync_timeout_ms").map(|v| parse_sync_timeout(&v)) {
            Some(Err(msg)) => return refused(r.refuse((SQLITE_CANTOPEN, msg))),
            Some(Ok(timeout)) => timeout,
            None => None,
        };
    if replicate_sync && replicate.is_none() {
        return refused(r.refuse((
            SQLITE_CANTOPEN,
            "onesync: onesync_replicate_sync=1 needs onesync_replicate=URL".to_string(),
        )));
    }
    let start_replication = |db: &mut StoreDb| -> Result<(), String> {
        db.replicate_sync = replicate_sync;
        db.replicate_sync_timeout = replicate_sync_timeout;
        let Some(url) = &replicate else { return Ok(()) };
        if db.read_only {
            return Err(format!(
                "onesync: onesync_replicate needs a read-write open, and {} is open read-only",
                r.path.display()
            ));
        }
        db.store.replicate(
            r.api,
            &db.store.path,
            &r.logical,
            url.trim(),
            replicate_interval,
            &|config| factory.configure_replica(config),
        )
    };
    let opened = |backend: MainFile, out_flags: c_int| {
        if let (MainFile::Store(db), Some(interval)) = (&backend, sync_interval) {
            db.store.store.set_deferred_flush_interval(interval);
        }
        Opened {
            backend: Box::new(backend),
            out_flags,
        }
    };
    let store = |result: Result<(StoreDb, c_int), (c_int, String)>| match result {
        Ok((mut db, flags)) => match start_replication(&mut db) {
            Ok(()) => Ok(opened(MainFile::Store(Box::new(db)), flags)),
            Err(msg) => {
                drop(db);
                refused(r.refuse((SQLITE_CANTOPEN, msg)))
            }
        },
        Err(e) => refused(r.refuse(e)),
    };
    let plain = || -> IoResult<Opened> {
        let (db, flags) = r.plain()?;
        Ok(opened(MainFile::Plain(Box::new(db)), flags))
    };
    if let Some(opener) = &factory.opener {
        let (db, read_only) = StoreDb::open(StoreOpen {
            api: r.api,
            opener: Some(opener),
            path: &r.path,
            name: r.name(),
            logical: r.logical.clone(),
            want: Want {
                create: r.create(),
                read_only: r.read_only(),
                mapping_cache_bytes: r.mapping_cache_bytes,
            },
            nolock,
            concurrent: r.concurrent,
        })
        .map_err(|e| r.refuse(e).code)?;
        let flags = if read_only {
            (r.flags & !(SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE)) | SQLITE_OPEN_READONLY
        } else {
            r.flags
        };
        // Replicated as any store (`onesync_replicate`).
        return store(Ok((db, flags)));
    }
    if !explicit && looks_like_an_unparsed_uri(&r.path) && probe(&r.path) == Probe::Missing {
        return refused(r.refuse((
            SQLITE_CANTOPEN,
            format!(
                "onesync: {} looks like a URI, but SQLite was not asked to read URIs, so it \
                 would be a file of that name: open it with SQLITE_OPEN_URI (or a SQLite built \
                 with SQLITE_USE_URI=1), or name the VFS in the open call",
                r.path.display()
            ),
        )));
    }
    let probe = probe(&r.path);
    // Chosen as SQLite's default VFS rather than named: files that are not stores stay
    // what they are.
    let by_default = !explicit && factory.api.default_vfs_is(c"onesync");
    match probe {
        Probe::Store => store(r.store()),
        Probe::Missing if explicit && (!r.create() || !parent_exists(&r.path)) => refused(r.refuse_missing()),
        // Fails as stock SQLite does, at xOpen with its code and log (a database that is not
        // to be a store, or one whose directory is missing: neither a store nor a plain
        // file can be created there, and this keeps the failure at open whether or not a
        // per-connection entry point runs).
        Probe::Missing if !r.create() || !parent_exists(&r.path) => plain(),
        Probe::Missing if explicit => store(r.store()),
        // An empty database, whatever it becomes, when it cannot be written: read-only
        // as asked, or as stock SQLite falls back to.
        Probe::Empty if r.read_only() || !writable(&r.path) => plain(),
        // Another connection of this process has it open as a plain file (an ATTACH of a
        // new file creates it empty): replacing it by a store would leave that connection
        // writing a file nobody reads.
        Probe::Empty if explicit && open_as_plain_file(&r) => refused(r.refuse((
            SQLITE_CANTOPEN,
            format!(
                "onesync: {} is an empty SQLite database that another connection of this \
                 process has open as a plain file; it cannot become a onesync store while it is \
                 open (open it without vfs=onesync to share it as a plain file)",
                r.path.display()
            ),
        ))),
        Probe::Empty if explicit => store(r.store_from_empty()),
        // Not named as a store, onesync only SQLite's default: an existing empty file is an
        // empty SQLite database (as stock), which other connections, of this process or
        // others, may have open; it stays a plain file.
        Probe::Empty if by_default => plain(),
        Probe::Sqlite | Probe::Other | Probe::Directory if explicit => refused(r.refuse_content(probe)),
        Probe::Sqlite | Probe::Other | Probe::Directory if by_default => plain(),
        // Stock SQLite refuses it at open, with its own code.
        Probe::Directory => plain(),
        Probe::Missing | Probe::Empty => Ok(opened(
            MainFile::Pending(Box::new(Pending {
                request: r,
                probe,
                file: None,
            })),
            req.flags(),
        )),
        Probe::Sqlite | Probe::Other => {
            // Served as the plain file meanwhile (it is one, if attached).
            let (file, out_flags) = req.open_passthrough_file()?;
            Ok(opened(
                MainFile::Pending(Box::new(Pending {
                    request: r,
                    probe,
                    file: Some(file),
                })),
                out_flags,
            ))
        }
    }
}

/// A name whose last part begins `file:` and carries `?`: a URI that SQLite passed on as a
/// file name (its caller did not enable URIs).
fn looks_like_an_unparsed_uri(path: &Path) -> bool {
    let whole = path.as_os_str().as_bytes();
    let last = whole.rsplit(|&b| b == b'/').next().unwrap_or(whole);
    whole.windows(5).any(|w| w == b"file:") && last.contains(&b'?')
}

/// Whether a connection of this process has the file SQLite names `r` open as a plain file.
fn open_as_plain_file(r: &Request) -> bool {
    names::owner_of_database(r.name().bytes()) == Some(Owner::Plain)
}

fn parent_exists(path: &Path) -> bool {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .is_none_or(Path::is_dir)
}

/// A refused main database file, told to the application as `refusals.rs` says: a handle
/// whose every use fails, or (no per-connection entry point in this process) a failed xOpen.
fn opened_refused(refusal: Refusal, out_flags: c_int) -> IoResult<Opened> {
    if !refusals::told_at_open(&refusal) {
        return Err(refusal.code);
    }
    Ok(Opened {
        backend: Box::new(MainFile::Failed(Failed::new(refusal))),
        out_flags,
    })
}

/// Refuses a main database file another backend (F2FS) cannot serve, as this one refuses
/// its own: `message` goes to `sqlite3_log` and, through the refusal, to `sqlite3_errmsg`.
pub(crate) fn refuse_main_db(
    api: &ApiTable,
    out_flags: c_int,
    code: c_int,
    message: String,
) -> IoResult<Opened> {
    api.log(code, &message);
    opened_refused(
        Refusal {
            code,
            message,
            when: When::AtOpen,
        },
        out_flags,
    )
}

/// A main database file refused: every use fails with the refusal's code (see
/// `refusals.rs` for how the application learns why).
struct Failed {
    refusal: Refusal,
    handle: u64,
}

impl Failed {
    fn new(refusal: Refusal) -> Self {
        Self {
            refusal,
            handle: next_handle(),
        }
    }
}

/// A file whose backend is decided at SQLITE_FCNTL_PDB.
struct Pending {
    request: Request,
    /// What the file held when it was opened.
    probe: Probe,
    /// The file as it is, for a non-empty file that is not a store.
    file: Option<PassThrough>,
}

/// The backends of a main database file of the store VFS.
enum MainFile {
    Pending(Box<Pending>),
    /// The two backends are boxed: each is hundreds of bytes, the other variants a few words.
    Store(Box<StoreDb>),
    Plain(Box<PlainDb>),
    /// Refused (logged when it was decided): every call fails so.
    Failed(Failed),
}

impl MainFile {
    /// Decides a pending file: as the main database of `db`, or, without a connection
    /// (a SQLite that never sent SQLITE_FCNTL_PDB), as a main database.
    fn decide(&mut self, db: Option<Connection>) {
        let MainFile::Pending(pending) = self else {
            return;
        };
        let r = &pending.request;
        let is_main = db.is_none_or(|db| is_main_database(&r.api, db, r.name()));
        let file = pending.file.take();
        let next = match (is_main, file) {
            // An attached database, or a VACUUM INTO target: a plain file.
            (false, Some(file)) => MainFile::Plain(Box::new(PlainDb::new(file, r))),
            (false, None) => match r.plain() {
                Ok((db, _)) => MainFile::Plain(Box::new(db)),
                Err(code) => MainFile::Failed(Failed::new(Refusal {
                    code,
                    message: format!("onesync: cannot open {}", r.path.display()),
                    when: When::AtFirstUse,
                })),
            },
            (true, Some(file)) => {
                drop(file);
                MainFile::Failed(Failed::new(r.refuse_content(pending.probe)))
            }
            // Open as a plain file by another connection of this process (an empty file, or
            // one created since the open): it stays one (see `open_as_plain_file`).
            (true, None) if r.path.exists() && open_as_plain_file(r) => match r.plain() {
                Ok((db, _)) => MainFile::Plain(Box::new(db)),
                Err(code) => MainFile::Failed(Failed::new(Refusal {
                    code,
                    message: format!("onesync: cannot open {}", r.path.display()),
                    when: When::AtFirstUse,
                })),
            },
            (true, None) => {
                let result = if r.path.exists() {
                    r.store_from_empty()
                } else {
                    r.store()
                };
                match result {
                    Ok((db, flags)) => {
                        if flags & SQLITE_OPEN_READONLY != 0 && !r.read_only() {
                            // Told SQLite read-write already; its writes will fail.
                            let msg = format!(
                                "onesync: {} can only be read; writes will fail with SQLITE_READONLY",
                                r.path.display()
                            );
                            r.api.log(crate::ffi::SQLITE_READONLY, &msg);
                        }
                        MainFile::Store(Box::new(db))
                    }
                    Err(e) => MainFile::Failed(Failed::new(r.refuse(e))),
                }
            }
        };
        if let (MainFile::Failed(failed), Some(db)) = (&next, db) {
            refusals::note(db.id(), failed.handle, &failed.refusal);
        }
        *self = next;
    }

    /// The decided backend (deciding as a main database if still pending).
    fn active(&mut self) -> IoResult<&mut dyn DbBackend> {
        if matches!(self, MainFile::Pending(_)) {
            self.decide(None);
        }
        match self {
            MainFile::Store(db) => Ok(db.as_mut()),
            MainFile::Plain(db) => Ok(db.as_mut()),
            MainFile::Failed(failed) => Err(failed.refusal.code),
            MainFile::Pending(_) => Err(SQLITE_CANTOPEN),
        }
    }
}

impl DbBackend for MainFile {
    fn read(&mut self, buf: &mut [u8], offset: u64) -> IoResult<()> {
        match self {
            // SQLite reads the header before it says which connection this is.
            MainFile::Pending(p) => match &mut p.file {
                Some(file) => file.read(buf, offset),
                None => {
                    buf.fill(0);
                    Err(SQLITE_IOERR_SHORT_READ)
                }
            },
            // Read while SQLite opens the file (it then fails at open or at the first lock):
            // as a missing file reads.
            MainFile::Failed(_) => {
                buf.fill(0);
                Err(SQLITE_IOERR_SHORT_READ)
            }
            _ => self.active()?.read(buf, offset),
        }
    }

    fn write(&mut self, buf: &[u8], offset: u64) -> IoResult<()> {
        self.active()?.write(buf, offset)
    }

    fn truncate(&mut self, size: u64) -> IoResult<()> {
        self.active()?.truncate(size)
    }

    fn sync(&mut self, flags: c_int) -> IoResult<()> {
        self.active()?.sync(flags)
    }

    fn size(&mut self) -> IoResult<u64> {
        match self {
            MainFile::Pending(p) => match &mut p.file {
                Some(file) => file.size(),
                None => Ok(0),
            },
            _ => self.active()?.size(),
        }
    }

    fn lock(&mut self, level: LockLevel) -> IoResult<()> {
        self.active()?.lock(level)
    }

    fn unlock(&mut self, level: LockLevel) -> IoResult<()> {
        self.active()?.unlock(level)
    }

    fn check_reserved_lock(&mut self) -> IoResult<bool> {
        self.active()?.check_reserved_lock()
    }

    fn file_control(&mut self, call: &FileControlCall<'_>) -> c_int {
        if let (MainFile::Failed(failed), FileControl::Pdb(Some(db))) = (&*self, &call.control) {
            refusals::note(db.id(), failed.handle, &failed.refusal);
            return SQLITE_NOTFOUND;
        }
        if let MainFile::Pending(p) = self {
            if let FileControl::Pdb(db) = call.control {
                self.decide(db);
            } else {
                // Hints sent while SQLite opens the file (busy handler, mmap size).
                return match &mut p.file {
                    Some(file) => file.file_control(call),
                    None => SQLITE_NOTFOUND,
                };
            }
        }
        match self.active() {
            Ok(backend) => backend.file_control(call),
            Err(code) => code,
        }
    }

    fn sector_size(&mut self) -> c_int {
        match self {
            MainFile::Pending(p) => p.file.as_mut().map_or(4096, |f| f.sector_size()),
            MainFile::Store(db) => db.sector_size(),
            MainFile::Plain(db) => db.sector_size(),
            MainFile::Failed(_) => 4096,
        }
    }

    fn device_characteristics(&mut self) -> c_int {
        match self {
            // What both a store and the unix VFS report that matters while SQLite opens
            // the file (it sets the sector size SQLite assumes).
            MainFile::Pending(p) => p
                .file
                .as_mut()
                .map_or(SQLITE_IOCAP_POWERSAFE_OVERWRITE, |f| f.device_characteristics()),
            MainFile::Store(db) => db.device_characteristics(),
            MainFile::Plain(db) => db.device_characteristics(),
            MainFile::Failed(_) => 0,
        }
    }

    fn has_shm(&self) -> bool {
        // Asked once, at open: a file that may still turn out plain gets the methods
        // (a store's fail; a store answers a journal_mode=WAL request made to it itself).
        match self {
            MainFile::Pending(_) => true,
            MainFile::Store(db) => db.has_shm(),
            MainFile::Plain(db) => db.has_shm(),
            MainFile::Failed(_) => false,
        }
    }

    fn shm_map(&mut self, region: c_int, size: c_int, extend: bool, out: &mut *mut c_void) -> c_int {
        match self.active() {
            Ok(backend) => backend.shm_map(region, size, extend, out),
            Err(_) => {
                *out = std::ptr::null_mut();
                SQLITE_IOERR_SHMMAP
            }
        }
    }

    fn shm_lock(&mut self, offset: c_int, n: c_int, flags: c_int) -> c_int {
        match self.active() {
            Ok(backend) => backend.shm_lock(offset, n, flags),
            Err(code) => code,
        }
    }

    fn shm_barrier(&mut self) {
        if let Ok(backend) = self.active() {
            backend.shm_barrier();
        }
    }

    fn shm_unmap(&mut self, delete: bool) -> c_int {
        match self {
            MainFile::Store(db) => db.shm_unmap(delete),
            MainFile::Plain(db) => db.shm_unmap(delete),
            _ => SQLITE_OK,
        }
    }

    fn close(&mut self) -> IoResult<()> {
        match self {
            MainFile::Pending(p) => p.file.as_mut().map_or(Ok(()), |f| f.close()),
            MainFile::Store(db) => db.close(),
            MainFile::Plain(db) => db.close(),
            MainFile::Failed(failed) => {
                refusals::forget(failed.handle);
                Ok(())
            }
        }
    }
}

/// A plain SQLite database file opened through the store VFS: the default VFS's file,
/// unchanged; recorded so that its journals go to disk and its connection is known.
pub(crate) struct PlainDb {
    file: PassThrough,
    api: ApiTable,
    name: SqliteName,
    handle: u64,
    conn: Option<std::sync::Arc<ConnectionState>>,
    nolock: bool,
    _claim: NameClaim,
}

impl PlainDb {
    fn new(file: PassThrough, r: &Request) -> Self {
        let name = r.name().bytes().to_vec();
        Self {
            file,
            api: r.api,
            name: r.name(),
            handle: next_handle(),
            conn: None,
            nolock: r.nolock,
            _claim: names::claim(&name, Owner::Plain),
        }
    }
}

impl DbBackend for PlainDb {
    fn read(&mut self, buf: &mut [u8], offset: u64) -> IoResult<()> {
        self.file.read(buf, offset)
    }

    fn write(&mut self, buf: &[u8], offset: u64) -> IoResult<()> {
        self.file.write(buf, offset)
    }

    fn truncate(&mut self, size: u64) -> IoResult<()> {
        self.file.truncate(size)
    }

    fn sync(&mut self, flags: c_int) -> IoResult<()> {
        self.file.sync(flags)
    }

    fn size(&mut self) -> IoResult<u64> {
        self.file.size()
    }

    fn lock(&mut self, level: LockLevel) -> IoResult<()> {
        self.file.lock(level)
    }

    fn unlock(&mut self, level: LockLevel) -> IoResult<()> {
        self.file.unlock(level)
    }

    fn check_reserved_lock(&mut self) -> IoResult<bool> {
        self.file.check_reserved_lock()
    }

    fn file_control(&mut self, call: &FileControlCall<'_>) -> c_int {
        match &call.control {
            FileControl::Pdb(Some(db)) if self.conn.is_none() => {
                let is_main = is_main_database(&self.api, *db, self.name);
                self.conn = Some(join_connection(db.id(), self.handle, is_main, self.nolock));
            }
            FileControl::Pragma(pragma) => {
                // An unqualified locking_mode pragma of a connection whose main database is
                // this file applies to its attached stores too.
                if let (Some("locking_mode"), Some(conn)) = (pragma.name.as_deref(), &self.conn) {
                    conn.note_locking_mode(self.handle, pragma.value.as_deref());
                }
            }
            _ => {}
        }
        self.file.file_control(call)
    }

    fn sector_size(&mut self) -> c_int {
        self.file.sector_size()
    }

    fn device_characteristics(&mut self) -> c_int {
        self.file.device_characteristics()
    }

    fn has_shm(&self) -> bool {
        self.file.has_shm()
    }

    fn shm_map(&mut self, region: c_int, size: c_int, extend: bool, out: &mut *mut c_void) -> c_int {
        self.file.shm_map(region, size, extend, out)
    }

    fn shm_lock(&mut self, offset: c_int, n: c_int, flags: c_int) -> c_int {
        self.file.shm_lock(offset, n, flags)
    }

    fn shm_barrier(&mut self) {
        self.file.shm_barrier()
    }

    fn shm_unmap(&mut self, delete: bool) -> c_int {
        self.file.shm_unmap(delete)
    }

    fn close(&mut self) -> IoResult<()> {
        if let Some(conn) = self.conn.take() {
            leave_connection(&conn, self.handle);
        }
        self.file.close()
    }
}
