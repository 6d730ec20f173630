//! Registration of the `onesync` VFS and its `sqlite3_vfs` methods.
//!
//! Files are routed by the `SQLITE_OPEN_*` kind SQLite opens them with:
//! journals (main, temp, statement, super) live in memory, unless the
//! [`MainDbFactory`] routes rollback and super-journals itself (the store
//! backend keeps those of plain files on disk); the main database goes to the
//! factory; everything else (WAL, temp databases, ...) passes through to the
//! VFS that was the default at registration.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::fmt;
use std::mem::size_of;
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use crate::api::ApiTable;
use crate::backend::{
    DbBackend, FileSystem, IoResult, JournalRoute, MainDbFactory, OpenRequest, PassThrough,
    PassThroughFactory,
};
use crate::f2fs::{F2fsFactory, F2FS_VFS_NAME};
use crate::ffi::{
    sqlite3_file, sqlite3_int64, sqlite3_syscall_ptr, sqlite3_vfs, DlSymResult, SQLITE_CANTOPEN,
    SQLITE_ERROR, SQLITE_IOERR, SQLITE_IOERR_DELETE, SQLITE_IOERR_DELETE_NOENT, SQLITE_MISUSE,
    SQLITE_NOTFOUND, SQLITE_OK, SQLITE_OPEN_CREATE, SQLITE_OPEN_DELETEONCLOSE, SQLITE_OPEN_EXCLUSIVE,
    SQLITE_OPEN_MAIN_DB, SQLITE_OPEN_MAIN_JOURNAL, SQLITE_OPEN_SUBJOURNAL, SQLITE_OPEN_SUPER_JOURNAL,
    SQLITE_OPEN_TEMP_JOURNAL,
};
use crate::file::{self, OnesyncFile};
use crate::guard::guard;
use crate::memfile::{is_journal_name, MemFile, MemStore};
use crate::store_db::StoreFactory;

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

/// Outcome of a successful registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Registered {
    /// A new VFS was registered.
    New,
    /// That SQLite already had a VFS of this name; nothing was changed.
    AlreadyRegistered,
}

/// Why registration failed: a SQLite result code and a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegisterError {
    pub code: c_int,
    pub message: String,
}

impl RegisterError {
    fn new(code: c_int, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

impl fmt::Display for RegisterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "onesync vfs: {} (SQLite code {})", self.message, self.code)
    }
}

impl std::error::Error for RegisterError {}

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
struct VfsState {
    /// The VFS that was the default at registration.
    base: *mut sqlite3_vfs,
    journals: Arc<MemStore>,
    main_db: Box<dyn MainDbFactory>,
    memory_journals: bool,
    files: Option<Arc<dyn FileSystem>>,
    counters: Counters,
}

/// Addresses of every `sqlite3_vfs` this crate registered, in any SQLite of
/// the process. The lock also serialises find-then-register.
static REGISTERED: Mutex<Vec<usize>> = Mutex::new(Vec::new());

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

/// Registers a VFS with the SQLite behind `api`. Idempotent per name: if that
/// SQLite already has a VFS called `opts.name`, nothing changes.
pub fn register_with(api: &ApiTable, opts: RegisterOptions) -> Result<Registered, RegisterError> {
    let version = api.libversion_number();
    if version < MIN_SQLITE_VERSION {
        return Err(RegisterError::new(
            SQLITE_ERROR,
            format!("SQLite {version} is older than the required {MIN_SQLITE_VERSION}"),
        ));
    }
    let name =
        CString::new(opts.name).map_err(|_| RegisterError::new(SQLITE_MISUSE, "VFS name contains NUL"))?;
    let mut registered = REGISTERED
        .lock()
        .map_err(|_| RegisterError::new(SQLITE_ERROR, "registry lock poisoned"))?;

    // SAFETY: `vfs_find` is this SQLite's own routine; `name` is NUL-terminated.
    if !unsafe { (api.vfs_find)(name.as_ptr()) }.is_null() {
        return Ok(Registered::AlreadyRegistered);
    }
    // SAFETY: as above; a null name asks for the default VFS.
    let base = unsafe { (api.vfs_find)(ptr::null()) };
    // SAFETY: a VFS returned by `vfs_find` stays registered (SQLite never
    // frees one), so the reference is valid for the process.
    let Some(base_ref) = (unsafe { base.as_ref() }) else {
        return Err(RegisterError::new(SQLITE_ERROR, "SQLite has no default VFS"));
    };
    let sz_os_file = c_int::try_from(size_of::<OnesyncFile>())
        .map_err(|_| RegisterError::new(SQLITE_ERROR, "file struct too large"))?;

    let state = Box::into_raw(Box::new(VfsState {
        base,
        journals: Arc::new(MemStore::default()),
        main_db: opts.main_db,
        memory_journals: opts.memory_journals,
        files: opts.files,
        counters: Counters::default(),
    }));
    let z_name = name.into_raw();
    let vfs = Box::into_raw(Box::new(sqlite3_vfs {
        iVersion: 3,
        szOsFile: sz_os_file,
        mxPathname: base_ref.mxPathname,
        pNext: ptr::null_mut(),
        zName: z_name,
        pAppData: state.cast(),
        xOpen: Some(x_open),
        xDelete: Some(x_delete),
        xAccess: Some(x_access),
        xFullPathname: Some(x_full_pathname),
        xDlOpen: Some(x_dl_open),
        xDlError: Some(x_dl_error),
        xDlSym: Some(x_dl_sym),
        xDlClose: Some(x_dl_close),
        xRandomness: Some(x_randomness),
        xSleep: Some(x_sleep),
        xCurrentTime: Some(x_current_time),
        xGetLastError: Some(x_get_last_error),
        xCurrentTimeInt64: Some(x_current_time_int64),
        xSetSystemCall: Some(x_set_system_call),
        xGetSystemCall: Some(x_get_system_call),
        xNextSystemCall: Some(x_next_system_call),
    }));

    // SAFETY: `vfs` is a fully initialised version-3 VFS that is never freed
    // once registered; `vfs_register` is this SQLite's own routine.
    let rc = unsafe { (api.vfs_register)(vfs, c_int::from(opts.make_default)) };
    if rc != SQLITE_OK {
        // SAFETY: SQLite refused the VFS, so nothing else refers to these
        // three allocations; each is reclaimed exactly once.
        unsafe {
            drop(Box::from_raw(vfs));
            drop(Box::from_raw(state));
            drop(CString::from_raw(z_name));
        }
        return Err(RegisterError::new(rc, "sqlite3_vfs_register failed"));
    }
    registered.push(vfs as usize);
    Ok(Registered::New)
}

/// Counters of the VFS called `name` in the SQLite behind `api`, if that VFS
/// was registered by this crate.
pub fn stats(api: &ApiTable, name: &str) -> Option<Stats> {
    let name = CString::new(name).ok()?;
    let registered = REGISTERED.lock().ok()?;
    // SAFETY: `vfs_find` is this SQLite's own routine; `name` is NUL-terminated.
    let vfs = unsafe { (api.vfs_find)(name.as_ptr()) };
    if vfs.is_null() || !registered.contains(&(vfs as usize)) {
        return None;
    }
    // SAFETY: `vfs` is one this crate registered, so its pAppData is a leaked
    // `VfsState` that lives for the rest of the process.
    let state = unsafe { state(vfs) }?;
    let c = &state.counters;
    Some(Stats {
        journal_opens: c.journal_opens.load(Relaxed),
        statement_journal_opens: c.statement_journal_opens.load(Relaxed),
        super_journal_opens: c.super_journal_opens.load(Relaxed),
        temp_journal_opens: c.temp_journal_opens.load(Relaxed),
        main_db_opens: c.main_db_opens.load(Relaxed),
        passthrough_opens: c.passthrough_opens.load(Relaxed),
        memory_deletes: c.memory_deletes.load(Relaxed),
        memory_files: state.journals.len() as u64,
    })
}

/// The state of a VFS this crate registered.
///
/// # Safety
/// `vfs` must be null or a VFS registered by [`register_with`].
unsafe fn state<'a>(vfs: *mut sqlite3_vfs) -> Option<&'a VfsState> {
    // SAFETY: per the contract, a non-null `vfs` is ours and its pAppData is a
    // leaked `VfsState` that is never freed.
    unsafe { vfs.as_ref()?.pAppData.cast::<VfsState>().as_ref() }
}

/// The underlying VFS of one of ours, as a pointer and a reference.
///
/// # Safety
/// As for [`state`].
unsafe fn base<'a>(vfs: *mut sqlite3_vfs) -> Option<(*mut sqlite3_vfs, &'a sqlite3_vfs)> {
    // SAFETY: forwarded contract; the base VFS stays registered forever.
    let base = unsafe { state(vfs) }?.base;
    // SAFETY: as above.
    unsafe { base.as_ref() }.map(|r| (base, r))
}

/// The bytes of a filename SQLite passed in (null: `None`).
///
/// # Safety
/// `name` must be null or NUL-terminated and valid for `'a`.
unsafe fn name_bytes<'a>(name: *const c_char) -> Option<&'a [u8]> {
    // SAFETY: per the contract.
    (!name.is_null()).then(|| unsafe { CStr::from_ptr(name) }.to_bytes())
}

/// Opens the backend that serves a file of kind `flags`.
///
/// # Safety
/// `name` must be the filename SQLite passed to xOpen: null or NUL-terminated,
/// and valid until the file is closed.
unsafe fn open_backend(
    state: &VfsState,
    name: *const c_char,
    flags: c_int,
) -> IoResult<(Box<dyn DbBackend>, c_int)> {
    if let Some(files) = &state.files {
        // SAFETY: per this function's contract.
        return files.open(unsafe { name_bytes(name) }, flags);
    }
    if flags & (SQLITE_OPEN_MAIN_JOURNAL | SQLITE_OPEN_SUPER_JOURNAL) != 0 {
        let req = OpenRequest {
            base: state.base,
            name,
            flags,
        };
        if let Some(opened) = state.main_db.open_journal(&req) {
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
        // SAFETY: per this function's contract.
        let file = match unsafe { name_bytes(name) } {
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
        let opened = state.main_db.open(&OpenRequest {
            base: state.base,
            name,
            flags,
        })?;
        return Ok((opened.backend, opened.out_flags));
    }
    state.counters.passthrough_opens.fetch_add(1, Relaxed);
    // SAFETY: `state.base` is the registered default VFS, which outlives every
    // file; `name` is SQLite's xOpen filename, valid until xClose.
    let (file, out_flags) = unsafe { PassThrough::open(state.base, name, flags) }?;
    Ok((Box::new(file), out_flags))
}

unsafe extern "C" fn x_open(
    vfs: *mut sqlite3_vfs,
    name: *const c_char,
    file: *mut sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    if file.is_null() {
        return SQLITE_MISUSE;
    }
    // SAFETY: `file` is SQLite's szOsFile buffer for this open. Clearing
    // pMethods first means a failure anywhere below leaves "not opened".
    unsafe { file::clear(file) };
    guard(SQLITE_CANTOPEN, || {
        // SAFETY: SQLite calls xOpen only on this VFS, which we registered.
        let Some(state) = (unsafe { state(vfs) }) else {
            return SQLITE_MISUSE;
        };
        // SAFETY: `name` is exactly the filename SQLite passed to this xOpen.
        match unsafe { open_backend(state, name, flags) } {
            Ok((backend, reported)) => {
                // SAFETY: `file` is SQLite's szOsFile buffer for this open.
                unsafe { file::install(file, backend) };
                // SAFETY: null or a valid out-pointer, per xOpen's contract.
                if let Some(out) = unsafe { out_flags.as_mut() } {
                    *out = reported;
                }
                SQLITE_OK
            }
            Err(rc) => rc,
        }
    })
}

unsafe extern "C" fn x_delete(vfs: *mut sqlite3_vfs, name: *const c_char, sync_dir: c_int) -> c_int {
    guard(SQLITE_IOERR_DELETE, || {
        // SAFETY: SQLite calls xDelete only on this VFS, with a NUL-terminated name.
        let (Some(state), Some(key)) = (unsafe { state(vfs) }, unsafe { name_bytes(name) }) else {
            return SQLITE_MISUSE;
        };
        if let Some(files) = &state.files {
            return match files.delete(key, sync_dir != 0) {
                Ok(()) => SQLITE_OK,
                Err(rc) => rc,
            };
        }
        match state.main_db.journal_route(key) {
            Some(JournalRoute::Private) => return SQLITE_OK,
            Some(route) => {
                if sync_dir != 0 {
                    crate::backend::count_directory_sync();
                }
                // SAFETY: as above.
                let rc = match unsafe { base(vfs) } {
                    // SAFETY: forwarding SQLite's arguments to the underlying VFS.
                    Some((p, b)) => b
                        .xDelete
                        .map_or(SQLITE_IOERR_DELETE, |f| unsafe { f(p, name, sync_dir) }),
                    None => SQLITE_MISUSE,
                };
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
        if sync_dir != 0 {
            crate::backend::count_directory_sync();
        }
        // SAFETY: as above.
        match unsafe { base(vfs) } {
            // SAFETY: forwarding SQLite's arguments to the underlying VFS.
            Some((p, b)) => b
                .xDelete
                .map_or(SQLITE_IOERR_DELETE, |f| unsafe { f(p, name, sync_dir) }),
            None => SQLITE_MISUSE,
        }
    })
}

unsafe extern "C" fn x_access(
    vfs: *mut sqlite3_vfs,
    name: *const c_char,
    flags: c_int,
    out: *mut c_int,
) -> c_int {
    guard(SQLITE_IOERR, || {
        // SAFETY: SQLite calls xAccess only on this VFS, with a NUL-terminated
        // name and a valid out-pointer.
        let (Some(state), Some(key), Some(out_ref)) =
            (unsafe { state(vfs) }, unsafe { name_bytes(name) }, unsafe {
                out.as_mut()
            })
        else {
            return SQLITE_MISUSE;
        };
        if let Some(files) = &state.files {
            return match files.exists(key) {
                Ok(exists) => {
                    *out_ref = c_int::from(exists);
                    SQLITE_OK
                }
                Err(rc) => rc,
            };
        }
        match state.main_db.journal_route(key) {
            Some(JournalRoute::Private) => {
                *out_ref = 0;
                return SQLITE_OK;
            }
            Some(JournalRoute::InUse) => {
                *out_ref = 1;
                return SQLITE_OK;
            }
            _ => {}
        }
        match state.journals.exists(key) {
            // Routed to disk: asked of the underlying VFS below.
            _ if state.main_db.journal_route(key).is_some() => {}
            _ if !state.memory_journals => {}
            Ok(true) => {
                *out_ref = 1;
                return SQLITE_OK;
            }
            Ok(false) if is_journal_name(key) => {
                *out_ref = 0;
                return SQLITE_OK;
            }
            Ok(false) => {}
            Err(rc) => return rc,
        }
        // SAFETY: as above.
        match unsafe { base(vfs) } {
            // SAFETY: forwarding SQLite's arguments to the underlying VFS.
            Some((p, b)) => b
                .xAccess
                .map_or(SQLITE_IOERR, |f| unsafe { f(p, name, flags, out) }),
            None => SQLITE_MISUSE,
        }
    })
}

/// Defines a `sqlite3_vfs` method that forwards unchanged to the underlying
/// VFS, returning `$fallback` if that VFS lacks it (or on panic).
macro_rules! forward {
    ($fn_name:ident, $field:ident, $min_version:expr, ($($arg:ident : $ty:ty),*) -> $ret:ty, $fallback:expr) => {
        unsafe extern "C" fn $fn_name(vfs: *mut sqlite3_vfs $(, $arg: $ty)*) -> $ret {
            guard($fallback, || {
                // SAFETY: SQLite calls this only on our VFS.
                match unsafe { base(vfs) } {
                    Some((p, b)) if b.iVersion >= $min_version => match b.$field {
                        // SAFETY: forwarding SQLite's arguments unchanged to the
                        // underlying VFS, which has this method.
                        Some(f) => unsafe { f(p $(, $arg)*) },
                        None => $fallback,
                    },
                    _ => $fallback,
                }
            })
        }
    };
}

forward!(x_full_pathname, xFullPathname, 1, (name: *const c_char, n_out: c_int, out: *mut c_char) -> c_int, SQLITE_CANTOPEN);
forward!(x_dl_open, xDlOpen, 1, (name: *const c_char) -> *mut c_void, ptr::null_mut());
forward!(x_dl_error, xDlError, 1, (n: c_int, msg: *mut c_char) -> (), ());
forward!(x_dl_sym, xDlSym, 1, (handle: *mut c_void, symbol: *const c_char) -> DlSymResult, None);
forward!(x_dl_close, xDlClose, 1, (handle: *mut c_void) -> (), ());
forward!(x_randomness, xRandomness, 1, (n: c_int, out: *mut c_char) -> c_int, 0);
/// SQLite's busy handler sleeps here between tries for a lock (1, 2, 5, 10... ms). A try
/// that failed only because another connection had just committed retries at once, and a
/// sleep ends early when a connection of this process lets go of a write lock: commits take
/// a fraction of a millisecond, so whole-millisecond sleeps would leave the database idle.
unsafe extern "C" fn x_sleep(_vfs: *mut sqlite3_vfs, micros: c_int) -> c_int {
    guard(0, || {
        crate::store_db::sleep_until_lock_released(u64::try_from(micros).unwrap_or(0));
        micros
    })
}
forward!(x_current_time, xCurrentTime, 1, (out: *mut f64) -> c_int, SQLITE_ERROR);
forward!(x_get_last_error, xGetLastError, 1, (n: c_int, out: *mut c_char) -> c_int, 0);
forward!(x_current_time_int64, xCurrentTimeInt64, 2, (out: *mut sqlite3_int64) -> c_int, SQLITE_ERROR);
forward!(x_set_system_call, xSetSystemCall, 3, (name: *const c_char, f: sqlite3_syscall_ptr) -> c_int, SQLITE_NOTFOUND);
forward!(x_get_system_call, xGetSystemCall, 3, (name: *const c_char) -> sqlite3_syscall_ptr, None);
forward!(x_next_system_call, xNextSystemCall, 3, (name: *const c_char) -> *const c_char, ptr::null());
