//! The table of SQLite entry points this crate calls.
//!
//! The VFS never names a SQLite symbol: it calls SQLite only through an
//! [`ApiTable`] filled at registration time, either from the
//! `sqlite3_api_routines` a loading SQLite passes to the extension entry point
//! or, for static use, by the host from its own linked SQLite
//! ([`api_table_from_sys!`](crate::api_table_from_sys)).

use std::ffi::{c_char, c_int, CStr, CString};

use super::ffi::{
    sqlite3_api_routines, sqlite3_vfs, AutoExtensionFn, ConnectionInitFn, CreateModuleV2Fn, DbFilenameFn,
    DeclareVtabFn, FileControlFn, FreeFn, LibversionNumberFn, LogFn, MallocFn, ResultBlobFn, ResultDoubleFn,
    ResultInt64Fn, ResultNullFn, ResultTextFn, UriParameterFn, ValueBlobFn, ValueBytesFn, ValueDoubleFn,
    ValueInt64Fn, ValueTextFn, ValueTypeFn, VfsFindFn, VfsRegisterFn, VtabConfigFn, VtabOnConflictFn,
};
use super::handles::{Connection, SqliteName};
use super::registration::RegisterError;

/// `sqlite3_vtab_config`, as a loading SQLite hands it over (variadic) or as
/// a host wrapper that passes one `int` (Rust cannot define a variadic function).
#[derive(Clone, Copy, Debug)]
pub enum VtabConfigRoutine {
    Variadic(VtabConfigFn),
    OneInt(unsafe extern "C" fn(*mut std::ffi::c_void, c_int, c_int) -> c_int),
}

/// The routines a virtual table module needs, all of one SQLite: this crate uses
/// `db_filename` (which main database a connection has), a virtual table built on
/// this table (crate `onesync-mvbt-vtab`) uses them all. Optional as a whole in
/// [`ApiTable`], so an old or partial table still serves the VFS.
#[derive(Clone, Copy, Debug)]
pub struct VtabRoutines {
    pub create_module_v2: CreateModuleV2Fn,
    pub declare_vtab: DeclareVtabFn,
    pub free: FreeFn,
    pub value_type: ValueTypeFn,
    pub value_int64: ValueInt64Fn,
    pub value_double: ValueDoubleFn,
    pub value_blob: ValueBlobFn,
    pub value_bytes: ValueBytesFn,
    pub value_text: ValueTextFn,
    pub result_null: ResultNullFn,
    pub result_int64: ResultInt64Fn,
    pub result_double: ResultDoubleFn,
    pub result_blob: ResultBlobFn,
    pub result_text: ResultTextFn,
    /// `sqlite3_vtab_on_conflict` (3.7.7+): `INSERT OR REPLACE` support.
    pub vtab_on_conflict: Option<VtabOnConflictFn>,
    /// `sqlite3_vtab_config` (3.7.7+): declares constraint support.
    pub vtab_config: Option<VtabConfigRoutine>,
    /// `sqlite3_db_filename` (3.7.10+): the default file next to the database.
    pub db_filename: Option<DbFilenameFn>,
    /// `sqlite3_file_control` (3.5+): which VFS a connection's main database is open with.
    pub file_control: Option<FileControlFn>,
}

/// The SQLite routines this crate calls, all taken from one SQLite library.
#[derive(Clone, Copy, Debug)]
pub struct ApiTable {
    pub(crate) vfs_find: VfsFindFn,
    pub(crate) vfs_register: VfsRegisterFn,
    pub(crate) libversion_number: LibversionNumberFn,
    pub(crate) malloc: Option<MallocFn>,
    pub(crate) log: Option<LogFn>,
    pub(crate) uri_parameter: Option<UriParameterFn>,
    pub(crate) vtab: Option<VtabRoutines>,
    pub(crate) auto_extension: Option<AutoExtensionFn>,
}

impl ApiTable {
    /// Builds a table from a host's own SQLite routines.
    ///
    /// # Safety
    /// Each pointer must be that SQLite routine (`sqlite3_vfs_find`,
    /// `sqlite3_vfs_register`, `sqlite3_libversion_number`) of one and the same
    /// SQLite library, which must stay loaded for the life of the process.
    /// The `sqlite3_vfs` pointers they take and return are that library's own
    /// `struct sqlite3_vfs`, whose layout is [`crate::ffi::sqlite3_vfs`].
    pub unsafe fn new(
        vfs_find: VfsFindFn,
        vfs_register: VfsRegisterFn,
        libversion_number: LibversionNumberFn,
    ) -> Self {
        Self {
            vfs_find,
            vfs_register,
            libversion_number,
            malloc: None,
            log: None,
            uri_parameter: None,
            vtab: None,
            auto_extension: None,
        }
    }

    /// Adds `sqlite3_auto_extension` (for
    /// [`register_open_refusal_hook`](crate::register_open_refusal_hook)).
    ///
    /// # Safety
    /// `auto_extension` must be that routine of the same SQLite as
    /// [`ApiTable::new`]'s, or a wrapper that casts the entry point to the
    /// host's entry-point type and forwards it.
    pub unsafe fn with_auto_extension(mut self, auto_extension: AutoExtensionFn) -> Self {
        self.auto_extension = Some(auto_extension);
        self
    }

    /// Adds the virtual table routines ([`VtabRoutines`]).
    ///
    /// # Safety
    /// Each pointer must be that routine of the same SQLite as
    /// [`ApiTable::new`]'s (a wrapper that forwards its arguments to it
    /// unchanged is fine; `result_blob`/`result_text` wrappers may assume the
    /// destructor argument is `SQLITE_TRANSIENT`).
    pub unsafe fn with_vtab(mut self, routines: VtabRoutines) -> Self {
        self.vtab = Some(routines);
        self
    }

    /// Adds the optional routines: `sqlite3_malloc` (error strings handed to
    /// SQLite), `sqlite3_log` (messages for the user) and
    /// `sqlite3_uri_parameter` (the `db=` parameter naming a logical database).
    ///
    /// # Safety
    /// Each pointer must be that routine of the same SQLite as [`ApiTable::new`]'s.
    pub unsafe fn with_optional(
        mut self,
        malloc: Option<MallocFn>,
        log: Option<LogFn>,
        uri_parameter: Option<UriParameterFn>,
    ) -> Self {
        self.malloc = malloc;
        self.log = log;
        self.uri_parameter = uri_parameter;
        self
    }

    /// Reads the routines this crate needs out of the table SQLite passes to
    /// an extension's entry point. `None` if any of them is missing.
    ///
    /// # Safety
    /// `api` must be null or point to the `sqlite3_api_routines` of a running
    /// SQLite (the third argument of an extension entry point).
    pub unsafe fn from_routines(api: *const sqlite3_api_routines) -> Option<Self> {
        // SAFETY: the caller guarantees `api` is null or a live routines table;
        // our struct is a prefix of SQLite's, so every field read is in bounds.
        let api = unsafe { api.as_ref() }?;
        Some(Self {
            vfs_find: api.vfs_find?,
            vfs_register: api.vfs_register?,
            libversion_number: api.libversion_number?,
            malloc: api.malloc,
            log: api.log,
            uri_parameter: api.uri_parameter,
            vtab: vtab_routines(api),
            // Slot 192 exists from 3.8.7 on: don't read past an older table.
            auto_extension: libversion_at_least(api, 3_008_007)
                .then_some(api.auto_extension)
                .flatten(),
        })
    }

    /// The virtual table routines, if this SQLite has them all.
    pub fn vtab(&self) -> Option<&VtabRoutines> {
        self.vtab.as_ref()
    }

    /// `sqlite3_auto_extension` of this SQLite, if the table has it.
    pub fn auto_extension(&self) -> Option<AutoExtensionFn> {
        self.auto_extension
    }

    /// Has this SQLite run `init` on every connection it opens from now on
    /// (`sqlite3_auto_extension`; the same function registered twice runs once). `init` is
    /// a function of this program or of an extension that stays loaded
    /// (`SQLITE_OK_LOAD_PERMANENTLY`), so it stays valid while SQLite may call it.
    pub fn run_on_new_connections(&self, init: ConnectionInitFn) -> Result<(), RegisterError> {
        let Some(auto_extension) = self.auto_extension else {
            return Err(RegisterError {
                code: super::ffi::SQLITE_ERROR,
                message: "the API table lacks sqlite3_auto_extension".into(),
            });
        };
        // SAFETY: this SQLite's `sqlite3_auto_extension` (the table's contract), given an
        // entry point with the signature SQLite calls it with, which stays valid (above).
        let code = unsafe { auto_extension(init as *const std::ffi::c_void) };
        if code != super::ffi::SQLITE_OK {
            return Err(RegisterError {
                code,
                message: format!("sqlite3_auto_extension failed ({code})"),
            });
        }
        Ok(())
    }

    /// `sqlite3_libversion_number()` of the SQLite behind this table.
    pub fn libversion_number(&self) -> i32 {
        // SAFETY: `ApiTable` is only built from genuine SQLite routines
        // (`new`'s and `from_routines`' contracts); this one takes no arguments.
        unsafe { (self.libversion_number)() }
    }

    /// Sends `msg` to SQLite's error log (`sqlite3_log`), where a host that
    /// installed `SQLITE_CONFIG_LOG` sees it, and to stderr only when asked
    /// (`ONESYNC_LOG_STDERR=1`): a library must not write to its host's stderr.
    pub(crate) fn log(&self, code: c_int, msg: &str) {
        if log_to_stderr() {
            eprintln!("onesync: {msg}");
        }
        let (Some(log), Ok(msg)) = (self.log, CString::new(msg.replace('\0', " "))) else {
            return;
        };
        // SAFETY: `log` is this SQLite's `sqlite3_log`; "%s" consumes exactly
        // the one NUL-terminated string passed.
        unsafe { log(code, c"%s".as_ptr(), msg.as_ptr()) };
    }

    /// For a refusal SQLite cannot pass on in its error message (a refused COMMIT reaches
    /// the application as "SQL logic error"): [`ApiTable::log`], and stderr, where a CLI
    /// user sees it.
    pub(crate) fn log_and_print(&self, code: c_int, msg: &str) {
        if !log_to_stderr() {
            eprintln!("{msg}");
        }
        self.log(code, msg);
    }

    /// `sqlite3_uri_parameter(filename, key)` of a name SQLite passed to `xOpen` (it reads
    /// the URI parameters stored after it).
    pub(crate) fn uri_parameter(&self, filename: SqliteName, key: &CStr) -> Option<String> {
        let f = self.uri_parameter?;
        let filename = filename.as_ptr();
        if filename.is_null() {
            return None;
        }
        // SAFETY: an xOpen filename of this SQLite, valid while its file is open;
        // `key` is NUL-terminated.
        let value = unsafe { f(filename, key.as_ptr()) };
        // SAFETY: SQLite returns null or a NUL-terminated string inside `filename`'s block.
        (!value.is_null()).then(|| unsafe { CStr::from_ptr(value) }.to_string_lossy().into_owned())
    }

    /// Whether `name` is the main database's own name pointer of connection `conn`
    /// (`sqlite3_db_filename(conn, "main")`, null while the connection is still being
    /// opened, where API armor refuses the call, counts as yes). `None`: this SQLite lacks
    /// the routine.
    pub(crate) fn is_main_db_name(&self, conn: Connection, name: SqliteName) -> Option<bool> {
        let db_filename = self.vtab().and_then(|v| v.db_filename)?;
        // SAFETY: `conn` is the connection SQLite named with SQLITE_FCNTL_PDB, on the thread
        // that holds its mutex; the result is only compared, never read.
        let main = unsafe { db_filename(conn.as_ptr(), c"main".as_ptr()) };
        Some(main.is_null() || main == name.as_ptr())
    }

    /// Whether the VFS called `name` is SQLite's default one now.
    pub(crate) fn default_vfs_is(&self, name: &CStr) -> bool {
        // SAFETY: this SQLite's `sqlite3_vfs_find`; null asks for the default, `name` is
        // NUL-terminated. The pointers are only compared.
        let (default, named) = unsafe { ((self.vfs_find)(std::ptr::null()), (self.vfs_find)(name.as_ptr())) };
        !named.is_null() && default == named
    }

    /// Makes the registered VFS called `name` SQLite's default (`sqlite3_vfs_register` with
    /// `makeDflt`, which moves a registered VFS to the head of the list). Returns SQLite's
    /// result code (`SQLITE_ERROR` when no such VFS is registered).
    pub(crate) fn make_default_vfs(&self, name: &CStr) -> c_int {
        // SAFETY: this SQLite's `sqlite3_vfs_find`; `name` is NUL-terminated.
        let vfs = unsafe { (self.vfs_find)(name.as_ptr()) };
        if vfs.is_null() {
            return super::ffi::SQLITE_ERROR;
        }
        // SAFETY: `vfs` is registered with this SQLite (it just found it) and stays so.
        unsafe { (self.vfs_register)(vfs, 1) }
    }

    /// Whether connection `conn`'s main database is open with the VFS called `name`
    /// (`SQLITE_FCNTL_VFS_POINTER`: a connection in shared-cache mode has the file of the
    /// connection it shares). `None`: this SQLite lacks the routine, or the connection has
    /// no file.
    pub(crate) fn main_db_vfs_is(&self, conn: Connection, name: &CStr) -> Option<bool> {
        let file_control = self.vtab().and_then(|v| v.file_control)?;
        let mut vfs: *mut sqlite3_vfs = std::ptr::null_mut();
        // SAFETY: `conn` is a connection of this SQLite that its caller is being run for (an
        // auto-extension entry point); SQLite writes one `sqlite3_vfs` pointer to the out
        // argument, which outlives the call.
        let rc = unsafe {
            file_control(
                conn.as_ptr(),
                c"main".as_ptr(),
                super::ffi::SQLITE_FCNTL_VFS_POINTER,
                (&raw mut vfs).cast(),
            )
        };
        // SAFETY: this SQLite's `sqlite3_vfs_find`; `name` is NUL-terminated. The pointers
        // are only compared.
        let named = unsafe { (self.vfs_find)(name.as_ptr()) };
        (rc == super::ffi::SQLITE_OK && !vfs.is_null()).then(|| vfs == named)
    }

    /// `sqlite3_db_filename(conn, "main")` as a path, if this SQLite has the routine and
    /// the main database is a file.
    pub(crate) fn main_db_filename(&self, conn: Connection) -> Option<std::path::PathBuf> {
        use std::os::unix::ffi::OsStrExt;
        let db_filename = self.vtab().and_then(|v| v.db_filename)?;
        // SAFETY: `conn` is a connection of this SQLite that its caller is being run for
        // (an auto-extension entry point); the name is NUL-terminated.
        let main = unsafe { db_filename(conn.as_ptr(), c"main".as_ptr()) };
        if main.is_null() {
            return None;
        }
        // SAFETY: SQLite returns a NUL-terminated string that lives as long as the connection.
        let bytes = unsafe { CStr::from_ptr(main) }.to_bytes();
        (!bytes.is_empty()).then(|| std::path::PathBuf::from(std::ffi::OsStr::from_bytes(bytes)))
    }

    /// Copies `msg` into memory from `sqlite3_malloc`, for an `*pzErrMsg`
    /// out-parameter that SQLite will `sqlite3_free`. Null if unavailable.
    pub fn sqlite_string(&self, msg: &str) -> *mut c_char {
        let Some(malloc) = self.malloc else {
            return std::ptr::null_mut();
        };
        let bytes: Vec<u8> = msg.bytes().filter(|&b| b != 0).collect();
        let Ok(len) = i32::try_from(bytes.len() + 1) else {
            return std::ptr::null_mut();
        };
        // SAFETY: `malloc` is this SQLite's `sqlite3_malloc`; a positive size is valid.
        let p = unsafe { malloc(len) }.cast::<u8>();
        if p.is_null() {
            return p.cast();
        }
        // SAFETY: `p` points to `len` = bytes.len() + 1 writable bytes just allocated.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len());
            *p.add(bytes.len()) = 0;
        }
        p.cast()
    }
}

/// Whether the SQLite that passed `api` (a live routines table, which
/// `from_routines`' contract guarantees) is at least `version`.
fn libversion_at_least(api: &sqlite3_api_routines, version: c_int) -> bool {
    // SAFETY: the slot is that SQLite's `sqlite3_libversion_number` (no arguments).
    api.libversion_number.is_some_and(|f| unsafe { f() } >= version)
}

/// The virtual table routines of a routines table (all slots below 193, which
/// every SQLite that can load this extension has).
fn vtab_routines(api: &sqlite3_api_routines) -> Option<VtabRoutines> {
    Some(VtabRoutines {
        create_module_v2: api.create_module_v2?,
        declare_vtab: api.declare_vtab?,
        free: api.free?,
        value_type: api.value_type?,
        value_int64: api.value_int64?,
        value_double: api.value_double?,
        value_blob: api.value_blob?,
        value_bytes: api.value_bytes?,
        value_text: api.value_text?,
        result_null: api.result_null?,
        result_int64: api.result_int64?,
        result_double: api.result_double?,
        result_blob: api.result_blob?,
        result_text: api.result_text?,
        vtab_on_conflict: api.vtab_on_conflict,
        vtab_config: api.vtab_config.map(VtabConfigRoutine::Variadic),
        db_filename: api.db_filename,
        file_control: api.file_control,
    })
}

/// Builds an [`ApiTable`] from a `libsqlite3-sys`-style crate the host links,
/// e.g. `onesync_vfs::api_table_from_sys!(rusqlite::ffi)` or
/// `onesync_vfs::api_table_from_sys!(libsqlite3_sys)`.
///
/// The expansion lives in the host crate and calls the host's own
/// `sqlite3_vfs_find` / `sqlite3_vfs_register` / `sqlite3_libversion_number`,
/// so it type-checks against whatever linkage the host chose (`bundled`,
/// system, or `loadable_extension`); this crate stays free of that choice.
#[macro_export]
macro_rules! api_table_from_sys {
    ($($sys:ident)::+) => {{
        unsafe extern "C" fn __onesync_vfs_find(
            name: *const ::std::ffi::c_char,
        ) -> *mut $crate::ffi::sqlite3_vfs {
            // SAFETY: forwards the caller's arguments unchanged to the host's SQLite;
            // its `sqlite3_vfs` has the layout of `$crate::ffi::sqlite3_vfs`.
            unsafe { $($sys)::+::sqlite3_vfs_find(name) }.cast()
        }
        unsafe extern "C" fn __onesync_vfs_register(
            vfs: *mut $crate::ffi::sqlite3_vfs,
            make_default: ::std::ffi::c_int,
        ) -> ::std::ffi::c_int {
            // SAFETY: as above; the pointer is passed through with the same layout.
            unsafe { $($sys)::+::sqlite3_vfs_register(vfs.cast(), make_default) }
        }
        unsafe extern "C" fn __onesync_libversion_number() -> ::std::ffi::c_int {
            // SAFETY: takes no arguments.
            unsafe { $($sys)::+::sqlite3_libversion_number() }
        }
        unsafe extern "C" fn __onesync_auto_extension(entry: *const ::std::ffi::c_void) -> ::std::ffi::c_int {
            type HostEntry = unsafe extern "C" fn(
                *mut $($sys)::+::sqlite3,
                *mut *mut ::std::ffi::c_char,
                *const $($sys)::+::sqlite3_api_routines,
            ) -> ::std::ffi::c_int;
            // SAFETY: `entry` is an extension entry point of this crate (same C
            // signature; the pointer types differ only in which crate declared them).
            let entry: HostEntry = unsafe { ::std::mem::transmute(entry) };
            // SAFETY: the host's own routine, given a valid entry point.
            unsafe { $($sys)::+::sqlite3_auto_extension(Some(entry)) }
        }
        // SAFETY: the wrappers above and the routines below are the host's own
        // linked SQLite.
        unsafe {
            $crate::ApiTable::new(
                __onesync_vfs_find,
                __onesync_vfs_register,
                __onesync_libversion_number,
            )
            .with_optional(
                Some($($sys)::+::sqlite3_malloc as $crate::ffi::MallocFn),
                Some($($sys)::+::sqlite3_log as $crate::ffi::LogFn),
                Some($($sys)::+::sqlite3_uri_parameter as $crate::ffi::UriParameterFn),
            )
            .with_vtab($crate::__vtab_routines_from_sys!($($sys)::+))
            .with_auto_extension(__onesync_auto_extension)
        }
    }};
}

/// The [`VtabRoutines`] half of [`api_table_from_sys!`]: wrappers that cast
/// this crate's opaque pointer types to the host's and forward each call.
#[doc(hidden)]
#[macro_export]
macro_rules! __vtab_routines_from_sys {
    ($($sys:ident)::+) => {{
        use ::std::ffi::{c_char, c_int, c_void};
        use $crate::ffi::{sqlite3_context, sqlite3_module, sqlite3_value};
        // Every wrapper below forwards its arguments unchanged to the
        // host's SQLite routine of the same name; the pointer casts are between
        // this crate's declarations of SQLite's types and the host's, which
        // have the same layout (tests/layout.rs).
        unsafe extern "C" fn create_module_v2(
            db: *mut c_void,
            name: *const c_char,
            module: *const sqlite3_module,
            aux: *mut c_void,
            destroy: Option<unsafe extern "C" fn(*mut c_void)>,
        ) -> c_int {
            // SAFETY: see above.
            unsafe { $($sys)::+::sqlite3_create_module_v2(db.cast(), name, module.cast(), aux, destroy) }
        }
        unsafe extern "C" fn declare_vtab(db: *mut c_void, sql: *const c_char) -> c_int {
            // SAFETY: see above.
            unsafe { $($sys)::+::sqlite3_declare_vtab(db.cast(), sql) }
        }
        unsafe extern "C" fn vtab_config(db: *mut c_void, op: c_int, arg: c_int) -> c_int {
            // SAFETY: see above; the options this crate sets take one int.
            unsafe { $($sys)::+::sqlite3_vtab_config(db.cast(), op, arg) }
        }
        unsafe extern "C" fn vtab_on_conflict(db: *mut c_void) -> c_int {
            // SAFETY: see above.
            unsafe { $($sys)::+::sqlite3_vtab_on_conflict(db.cast()) }
        }
        unsafe extern "C" fn db_filename(db: *mut c_void, schema: *const c_char) -> *const c_char {
            // SAFETY: see above.
            unsafe { $($sys)::+::sqlite3_db_filename(db.cast(), schema) }
        }
        unsafe extern "C" fn file_control(db: *mut c_void, schema: *const c_char, op: c_int, arg: *mut c_void) -> c_int {
            // SAFETY: see above.
            unsafe { $($sys)::+::sqlite3_file_control(db.cast(), schema, op, arg) }
        }
        unsafe extern "C" fn free(p: *mut c_void) {
            // SAFETY: see above.
            unsafe { $($sys)::+::sqlite3_free(p) }
        }
        unsafe extern "C" fn value_type(v: *mut sqlite3_value) -> c_int {
            // SAFETY: see above.
            unsafe { $($sys)::+::sqlite3_value_type(v.cast()) }
        }
        unsafe extern "C" fn value_int64(v: *mut sqlite3_value) -> i64 {
            // SAFETY: see above.
            unsafe { $($sys)::+::sqlite3_value_int64(v.cast()) }
        }
        unsafe extern "C" fn value_double(v: *mut sqlite3_value) -> f64 {
            // SAFETY: see above.
            unsafe { $($sys)::+::sqlite3_value_double(v.cast()) }
        }
        unsafe extern "C" fn value_blob(v: *mut sqlite3_value) -> *const c_void {
            // SAFETY: see above.
            unsafe { $($sys)::+::sqlite3_value_blob(v.cast()) }
        }
        unsafe extern "C" fn value_bytes(v: *mut sqlite3_value) -> c_int {
            // SAFETY: see above.
            unsafe { $($sys)::+::sqlite3_value_bytes(v.cast()) }
        }
        unsafe extern "C" fn value_text(v: *mut sqlite3_value) -> *const u8 {
            // SAFETY: see above.
            unsafe { $($sys)::+::sqlite3_value_text(v.cast()) }
        }
        unsafe extern "C" fn result_null(ctx: *mut sqlite3_context) {
            // SAFETY: see above.
            unsafe { $($sys)::+::sqlite3_result_null(ctx.cast()) }
        }
        unsafe extern "C" fn result_int64(ctx: *mut sqlite3_context, v: i64) {
            // SAFETY: see above.
            unsafe { $($sys)::+::sqlite3_result_int64(ctx.cast(), v) }
        }
        unsafe extern "C" fn result_double(ctx: *mut sqlite3_context, v: f64) {
            // SAFETY: see above.
            unsafe { $($sys)::+::sqlite3_result_double(ctx.cast(), v) }
        }
        unsafe extern "C" fn result_blob(
            ctx: *mut sqlite3_context,
            p: *const c_void,
            n: c_int,
            _transient: $crate::ffi::Destructor,
        ) {
            // SAFETY: see above; this crate only ever passes SQLITE_TRANSIENT.
            unsafe { $($sys)::+::sqlite3_result_blob(ctx.cast(), p, n, $($sys)::+::SQLITE_TRANSIENT()) }
        }
        unsafe extern "C" fn result_text(
            ctx: *mut sqlite3_context,
            p: *const c_char,
            n: c_int,
            _transient: $crate::ffi::Destructor,
        ) {
            // SAFETY: see above; this crate only ever passes SQLITE_TRANSIENT.
            unsafe { $($sys)::+::sqlite3_result_text(ctx.cast(), p, n, $($sys)::+::SQLITE_TRANSIENT()) }
        }
        $crate::VtabRoutines {
            create_module_v2,
            declare_vtab,
            free,
            value_type,
            value_int64,
            value_double,
            value_blob,
            value_bytes,
            value_text,
            result_null,
            result_int64,
            result_double,
            result_blob,
            result_text,
            vtab_on_conflict: Some(vtab_on_conflict),
            vtab_config: Some($crate::VtabConfigRoutine::OneInt(vtab_config)),
            db_filename: Some(db_filename),
            file_control: Some(file_control),
        }
    }};
}

/// `ONESYNC_LOG_STDERR=1`: every message sent to `sqlite3_log` goes to stderr too (read once).
fn log_to_stderr() -> bool {
    static TO_STDERR: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TO_STDERR.get_or_init(|| std::env::var_os("ONESYNC_LOG_STDERR").is_some_and(|v| v == "1"))
}
