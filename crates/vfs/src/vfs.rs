//! Registration of the `onesync` VFS and its `sqlite3_vfs` methods.
//!
//! Files are routed by the `SQLITE_OPEN_*` kind SQLite opens them with:
//! journals (main, temp, statement, super) live in memory, unless the
//! [`MainDbFactory`] routes rollback and super-journals itself (the store
//! backend keeps those of plain files on disk); the main database goes to the
//! factory; everything else (WAL, temp databases, ...) passes through to the
//! VFS that was the default at registration.

use std::ffi::{c_int, CStr};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use crate::backend::{
    DbBackend, FileSystem, IoResult, JournalRoute, MainDbFactory, OpenRequest, PassThroughFactory,
};
use crate::f2fs::{F2fsFactory, F2FS_VFS_NAME};
use crate::ffi::{
    SQLITE_ERROR, SQLITE_IOERR_DELETE_NOENT, SQLITE_OK, SQLITE_OPEN_CREATE, SQLITE_OPEN_DELETEONCLOSE,
    SQLITE_OPEN_EXCLUSIVE, SQLITE_OPEN_MAIN_DB, SQLITE_OPEN_MAIN_JOURNAL, SQLITE_OPEN_SUBJOURNAL,
    SQLITE_OPEN_SUPER_JOURNAL, SQLITE_OPEN_TEMP_JOURNAL,
};
use crate::memfile::{is_journal_name, MemFile, MemStore};
use crate::names::{self, StoreJournalPlace};
use crate::store_db::StoreFactory;
use crate::sys::api::ApiTable;
use crate::sys::handles::{BaseVfs, SqliteName};
pub use crate::sys::registration::{RegisterError, Registered};
use crate::sys::vfs::VfsMethods;
use crate::sys::vfs::{register_vfs, registered_state};

/// The name the extension entry point registers.
pub const VFS_NAME: &str = "onesync";

/// Oldest SQLite this crate registers with: version-3 `sqlite3_io_methods`
/// (xFetch/xUnfetch) appeared in 3.8.2.
pub const MIN_SQLITE_VERSION: i32 = 3_008_002;

/// The open kinds this VFS keeps in memory.
const MEMORY_KINDS: c_int =
    SQLITE_OPEN_MAIN_JOURNAL | SQLITE_OPEN_TEMP_JOURNAL | SQLITE_OPEN_SUBJOURNAL | SQLITE_OPEN_SUPER_JOURNAL;

/// How to register.
pub struct RegisterOptions {
    /// VFS name (`?vfs=` in a URI, or the `vfs` argument of `sqlite3_open_v2`).
    pub name: String,
    /// Make it SQLite's default VFS. The extension entry point never does.
    pub make_default: bool,
    /// Opens main database files. The default here is [`PassThroughFactory`]
    /// (files passed through unchanged, for tests and comparisons);
    /// [`register_static`] and the extension use [`StoreFactory`].
    pub main_db: Box<dyn MainDbFactory>,
    /// Keep journals in memory (the onesync way). `false` passes them through to the
    /// underlying VFS like every other file: with [`PassThroughFactory`] that is stock SQLite
    /// with its I/O counted ([`passthrough_io`](crate::backend::passthrough_io)), the lab's
    /// shim for measuring stock journal modes.
    pub memory_journals: bool,
    /// Serve every file from this instead of the underlying VFS (and of `main_db` and the
    /// in-memory journals): a simulation of a disk, for crash tests of stock SQLite.
    pub files: Option<Arc<dyn FileSystem>>,
}

impl Default for RegisterOptions {
    fn default() -> Self {
        Self {
            name: VFS_NAME.to_owned(),
            make_default: false,
            main_db: Box::new(PassThroughFactory),
            memory_journals: true,
            files: None,
        }
    }
}

/// Counters of one registered VFS.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Journal opens, by kind (in memory; with the store backend, a plain file's
    /// journals and super-journals are on disk): rollback journals
    /// (`SQLITE_OPEN_MAIN_JOURNAL`), ...
    pub journal_opens: u64,
    /// ... statement journals (`SQLITE_OPEN_SUBJOURNAL`; SQLite opens one
    /// only when its own in-memory buffer spills), ...
    pub statement_journal_opens: u64,
    /// ... super-journals of multi-database commits
    /// (`SQLITE_OPEN_SUPER_JOURNAL`), ...
    pub super_journal_opens: u64,
    /// ... and journals of temp databases (`SQLITE_OPEN_TEMP_JOURNAL`).
    pub temp_journal_opens: u64,
    /// Main database opens (through the [`MainDbFactory`]).
    pub main_db_opens: u64,
    /// Other opens passed through (WAL, temp databases, ...).
    pub passthrough_opens: u64,
    /// In-memory journals removed by `xDelete`.
    pub memory_deletes: u64,
    /// Named in-memory journals that exist right now.
    pub memory_files: u64,
}

#[derive(Default)]
struct Counters {
    journal_opens: AtomicU64,
    statement_journal_opens: AtomicU64,
    super_journal_opens: AtomicU64,
    temp_journal_opens: AtomicU64,
    main_db_opens: AtomicU64,
    passthrough_opens: AtomicU64,
    memory_deletes: AtomicU64,
}

/// What `pAppData` of a registered `onesync` VFS points to. Leaked: SQLite
/// keeps the VFS for the rest of the process.
pub(crate) struct VfsState {
    /// The VFS that was the default at registration.
    base: BaseVfs,
    journals: Arc<MemStore>,
    main_db: Box<dyn MainDbFactory>,
    memory_journals: bool,
    files: Option<Arc<dyn FileSystem>>,
    counters: Counters,
}

/// Registers a VFS with the SQLite behind `api`. Idempotent per name: if that
/// SQLite already has a VFS called `opts.name`, nothing changes.
pub fn register_with(api: &ApiTable, mut opts: RegisterOptions) -> Result<Registered, RegisterError> {
    let version = api.libversion_number();
    if version < MIN_SQLITE_VERSION {
        return Err(RegisterError::new(
            SQLITE_ERROR,
            format!("SQLite {version} is older than the required {MIN_SQLITE_VERSION}"),
        ));
    }
    let name = std::mem::take(&mut opts.name);
    let make_default = opts.make_default;
    register_vfs(api, name, make_default, |base| VfsState::new(base, opts))
}

/// Counters of the VFS called `name` in the SQLite behind `api`, if that VFS
/// was registered by this crate.
pub fn stats(api: &ApiTable, name: &str) -> Option<Stats> {
    registered_state::<VfsState>(api, name).map(VfsState::stats)
}

/// Registers the `onesync` VFS (not as the default) with the SQLite behind
/// `api`: the static path, for a host that links SQLite itself and fills the
/// table from it (see [`api_table_from_sys!`](crate::api_table_from_sys)).
///
/// Also registers `onesync-f2fs` ([`F2FS_VFS_NAME`]): plain SQLite files on F2FS, each
/// transaction one kernel atomic write. The answer is the `onesync` VFS's.
pub fn register_static(api: &ApiTable) -> Result<Registered, RegisterError> {
    let store = register_with(
        api,
        RegisterOptions {
            main_db: Box::new(StoreFactory::new(*api)),
            ..RegisterOptions::default()
        },
    )?;
    register_with(
        api,
        RegisterOptions {
            name: F2FS_VFS_NAME.to_owned(),
            main_db: Box::new(F2fsFactory::new(*api)),
            ..RegisterOptions::default()
        },
    )?;
    Ok(store)
}

/// Makes the registered VFS called `name` SQLite's default (what
/// [`sqlite3_onesync_default_init`](crate::sqlite3_onesync_default_init) does after
/// registering): connections that name no VFS then open through it. With the `onesync` VFS
/// ([`register_static`] first) a new database is a store, a store opens as one, and an
/// existing plain SQLite file passes through to the VFS that was the default at
/// registration.
pub fn make_default(api: &ApiTable, name: &str) -> Result<(), RegisterError> {
    let c_name = std::ffi::CString::new(name)
        .map_err(|_| RegisterError::new(SQLITE_ERROR, format!("VFS name {name:?} contains NUL")))?;
    match api.make_default_vfs(&c_name) {
        SQLITE_OK => Ok(()),
        code => Err(RegisterError::new(
            code,
            format!("could not make {name:?} the default VFS (is it registered?)"),
        )),
    }
}

impl VfsState {
    fn new(base: BaseVfs, opts: RegisterOptions) -> Self {
        Self {
            base,
            journals: Arc::new(MemStore::default()),
            main_db: opts.main_db,
            memory_journals: opts.memory_journals,
            files: opts.files,
            counters: Counters::default(),
        }
    }

    fn stats(&self) -> Stats {
        let c = &self.counters;
        Stats {
            journal_opens: c.journal_opens.load(Relaxed),
            statement_journal_opens: c.statement_journal_opens.load(Relaxed),
            super_journal_opens: c.super_journal_opens.load(Relaxed),
            temp_journal_opens: c.temp_journal_opens.load(Relaxed),
            main_db_opens: c.main_db_opens.load(Relaxed),
            passthrough_opens: c.passthrough_opens.load(Relaxed),
            memory_deletes: c.memory_deletes.load(Relaxed),
            memory_files: self.journals.len() as u64,
        }
    }

    /// `xOpen`: the backend that serves a file of kind `req.flags()`, and the flags to
    /// report.
    fn open(&self, req: &OpenRequest) -> IoResult<(Box<dyn DbBackend>, c_int)> {
        let state = self;
        let flags = req.flags();
        if let Some(files) = &state.files {
            return files.open(req.name().map(CStr::to_bytes), flags);
        }
        if flags & (SQLITE_OPEN_MAIN_JOURNAL | SQLITE_OPEN_SUPER_JOURNAL) != 0 {
            if let Some(opened) = state.main_db.open_journal(req) {
                let c = &state.counters;
                let counter = if flags & SQLITE_OPEN_SUPER_JOURNAL != 0 {
                    &c.super_journal_opens
                } else {
                    &c.journal_opens
                };
                counter.fetch_add(1, Relaxed);
                let opened = opened?;
                return Ok((opened.backend, opened.out_flags));
            }
        }
        if state.memory_journals && flags & MEMORY_KINDS != 0 {
            let c = &state.counters;
            let counter = if flags & SQLITE_OPEN_MAIN_JOURNAL != 0 {
                &c.journal_opens
            } else if flags & SQLITE_OPEN_SUBJOURNAL != 0 {
                &c.statement_journal_opens
            } else if flags & SQLITE_OPEN_SUPER_JOURNAL != 0 {
                &c.super_journal_opens
            } else {
                &c.temp_journal_opens
            };
            counter.fetch_add(1, Relaxed);
            let file = match req.name().map(CStr::to_bytes) {
                // A store-backed database's journal serves only its own handle's
                // rollback: no other connection may ever treat it as hot.
                _ if state.main_db.private_journals() => MemFile::anonymous(),
                None => MemFile::anonymous(),
                Some(key) => {
                    let create = flags & SQLITE_OPEN_CREATE != 0;
                    let exclusive = flags & SQLITE_OPEN_EXCLUSIVE != 0;
                    let bytes = state.journals.open(key, create, exclusive)?;
                    let on_close = (flags & SQLITE_OPEN_DELETEONCLOSE != 0)
                        .then(|| (Arc::clone(&state.journals), key.to_vec()));
                    MemFile::new(bytes, on_close)
                }
            };
            return Ok((Box::new(file), flags));
        }
        if flags & SQLITE_OPEN_MAIN_DB != 0 {
            state.counters.main_db_opens.fetch_add(1, Relaxed);
            let opened = state.main_db.open(req)?;
            return Ok((opened.backend, opened.out_flags));
        }
        state.counters.passthrough_opens.fetch_add(1, Relaxed);
        let (file, out_flags) = req.open_passthrough_file()?;
        Ok((Box::new(file), out_flags))
    }

    /// `xDelete` of `name`: a result code.
    fn delete(&self, name: SqliteName, sync_dir: bool) -> c_int {
        let state = self;
        let key = name.bytes();
        if let Some(files) = &state.files {
            return match files.delete(key, sync_dir) {
                Ok(()) => SQLITE_OK,
                Err(rc) => rc,
            };
        }
        match state.main_db.journal_route(key) {
            // A store's journal: on disk only if a transaction over several databases put
            // it there (or found it there after a crash), and then deleted once no handle
            // holds it.
            Some(JournalRoute::Private) => {
                return match names::store_journal_place(key) {
                    StoreJournalPlace::Memory | StoreJournalPlace::OpenOnDisk => SQLITE_OK,
                    StoreJournalPlace::ClosedOnDisk => {
                        let rc = state.base.delete(name, sync_dir);
                        if sync_dir && rc == SQLITE_OK {
                            crate::backend::count_directory_sync();
                        }
                        match rc {
                            SQLITE_OK | SQLITE_IOERR_DELETE_NOENT => {
                                names::forget_store_journal(key);
                                SQLITE_OK
                            }
                            rc => rc,
                        }
                    }
                };
            }
            // A super-journal that stayed in memory was never on disk.
            Some(JournalRoute::DiskIfPresent | JournalRoute::InUse)
                if names::is_memory_super_journal(key) =>
            {
                return SQLITE_OK;
            }
            Some(route) => {
                let rc = state.base.delete(name, sync_dir);
                // The default VFS syncs the directory only after an unlink that succeeded.
                if sync_dir && rc == SQLITE_OK {
                    crate::backend::count_directory_sync();
                }
                return match (route, rc) {
                    (JournalRoute::DiskIfPresent | JournalRoute::InUse, SQLITE_IOERR_DELETE_NOENT) => {
                        SQLITE_OK
                    }
                    _ => rc,
                };
            }
            None => {}
        }
        match state.journals.remove(key) {
            _ if !state.memory_journals => {}
            Ok(true) => {
                state.counters.memory_deletes.fetch_add(1, Relaxed);
                return SQLITE_OK;
            }
            // Private journals were never in the table: deleting one is done.
            Ok(false) if is_journal_name(key) && state.main_db.private_journals() => return SQLITE_OK,
            Ok(false) if is_journal_name(key) => return SQLITE_IOERR_DELETE_NOENT,
            Ok(false) => {}
            Err(rc) => return rc,
        }
        if sync_dir {
            crate::backend::count_directory_sync();
        }
        state.base.delete(name, sync_dir)
    }

    /// `xAccess` of `name`: a result code, the answer in `out`.
    fn access(&self, name: SqliteName, flags: c_int, out: &mut c_int) -> c_int {
        let state = self;
        let key = name.bytes();
        if let Some(files) = &state.files {
            return match files.exists(key) {
                Ok(exists) => {
                    *out = c_int::from(exists);
                    SQLITE_OK
                }
                Err(rc) => rc,
            };
        }
        if crate::names::is_store_wal(key) {
            *out = 0;
            return SQLITE_OK;
        }
        match state.main_db.journal_route(key) {
            Some(JournalRoute::Private) => {
                // Only a journal a transaction over several databases left on disk, naming
                // its super-journal, can be hot (`store_journal.rs`).
                *out = c_int::from(state.main_db.private_journal_on_disk(key));
                return SQLITE_OK;
            }
            Some(JournalRoute::InUse) => {
                *out = 1;
                return SQLITE_OK;
            }
            _ => {}
        }
        match state.journals.exists(key) {
            // Routed to disk: asked of the underlying VFS below.
            _ if state.main_db.journal_route(key).is_some() => {}
            _ if !state.memory_journals => {}
            Ok(true) => {
                *out = 1;
                return SQLITE_OK;
            }
            Ok(false) if is_journal_name(key) => {
                *out = 0;
                return SQLITE_OK;
            }
            Ok(false) => {}
            Err(rc) => return rc,
        }
        state.base.access(name, flags, out)
    }
}

impl VfsMethods for VfsState {
    fn base(&self) -> BaseVfs {
        self.base
    }

    fn open(&self, req: &OpenRequest) -> IoResult<(Box<dyn DbBackend>, c_int)> {
        VfsState::open(self, req)
    }

    fn delete(&self, name: SqliteName, sync_dir: bool) -> c_int {
        VfsState::delete(self, name, sync_dir)
    }

    fn access(&self, name: SqliteName, flags: c_int, out: &mut c_int) -> c_int {
        VfsState::access(self, name, flags, out)
    }

    fn sleep(micros: u64) {
        crate::store_db::sleep_until_lock_released(micros);
    }
}

/// The composition root's half of a connection being opened: the code and message to fail
/// it with, if the store backend refused its main database (`store_db/refusals.rs`). The
/// entry points (`sys/entry.rs`) call this through the crate root instead of naming the
/// backend.
pub(crate) fn open_refusal(
    api: &ApiTable,
    db: crate::backend::Connection,
) -> Option<(std::ffi::c_int, String)> {
    crate::store_db::open_refusal(api, db)
}

/// A per-connection entry point that calls [`open_refusal`] is registered in this process.
pub(crate) fn note_refusal_hook_registered() {
    crate::store_db::note_hook_registered()
}
