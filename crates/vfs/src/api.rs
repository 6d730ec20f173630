//! The table of SQLite entry points this crate calls.
//!
//! The VFS never names a SQLite symbol: it calls SQLite only through an
//! [`ApiTable`] filled at registration time, either from the
//! `sqlite3_api_routines` a loading SQLite passes to the extension entry point
//! or, for static use, by the host from its own linked SQLite
//! ([`api_table_from_sys!`](crate::api_table_from_sys)).

use std::ffi::{c_char, c_int, CStr, CString};

use crate::ffi::{
    sqlite3_api_routines, LibversionNumberFn, LogFn, MallocFn, UriParameterFn, VfsFindFn, VfsRegisterFn,
};

/// The SQLite routines this crate calls, all taken from one SQLite library.
#[derive(Clone, Copy, Debug)]
pub struct ApiTable {
    pub(crate) vfs_find: VfsFindFn,
    pub(crate) vfs_register: VfsRegisterFn,
    pub(crate) libversion_number: LibversionNumberFn,
    pub(crate) malloc: Option<MallocFn>,
    pub(crate) log: Option<LogFn>,
    pub(crate) uri_parameter: Option<UriParameterFn>,
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
        }
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
    pub(crate) unsafe fn from_routines(api: *const sqlite3_api_routines) -> Option<Self> {
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
        })
    }

    /// `sqlite3_libversion_number()` of the SQLite behind this table.
    pub fn libversion_number(&self) -> i32 {
        // SAFETY: `ApiTable` is only built from genuine SQLite routines
        // (`new`'s and `from_routines`' contracts); this one takes no arguments.
        unsafe { (self.libversion_number)() }
    }

    /// Sends `msg` to SQLite's error log (`sqlite3_log`), where a host that
    /// installed `SQLITE_CONFIG_LOG` sees it.
    pub(crate) fn log(&self, code: c_int, msg: &str) {
        let (Some(log), Ok(msg)) = (self.log, CString::new(msg.replace('\0', " "))) else {
            return;
        };
        // SAFETY: `log` is this SQLite's `sqlite3_log`; "%s" consumes exactly
        // the one NUL-terminated string passed.
        unsafe { log(code, c"%s".as_ptr(), msg.as_ptr()) };
    }

    /// `sqlite3_uri_parameter(filename, key)`.
    ///
    /// # Safety
    /// `filename` must be a filename SQLite passed to `xOpen` (it reads the
    /// URI parameters stored after it).
    pub(crate) unsafe fn uri_parameter(&self, filename: *const c_char, key: &CStr) -> Option<String> {
        let f = self.uri_parameter?;
        if filename.is_null() {
            return None;
        }
        // SAFETY: per the contract; `key` is NUL-terminated.
        let value = unsafe { f(filename, key.as_ptr()) };
        // SAFETY: SQLite returns null or a NUL-terminated string inside `filename`'s block.
        (!value.is_null()).then(|| unsafe { CStr::from_ptr(value) }.to_string_lossy().into_owned())
    }

    /// Copies `msg` into memory from `sqlite3_malloc`, for an `*pzErrMsg`
    /// out-parameter that SQLite will `sqlite3_free`. Null if unavailable.
    pub(crate) fn sqlite_string(&self, msg: &str) -> *mut c_char {
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

/// Builds an [`ApiTable`] from a `libsqlite3-sys`-style crate the host links,
/// e.g. `onesync::api_table_from_sys!(rusqlite::ffi)` or
/// `onesync::api_table_from_sys!(libsqlite3_sys)`.
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
        }
    }};
}
