//! The entry points: the one SQLite calls when it loads `libonesync_mvbt_vtab.so`, the one it
//! calls for each new connection afterwards (`sqlite3_auto_extension`), and the host's
//! counterparts for a SQLite linked into the host.

use std::ffi::{c_char, c_int, c_void};

use onesync_vfs::ffi::{self, sqlite3_api_routines, SQLITE_ERROR, SQLITE_OK_LOAD_PERMANENTLY};
use onesync_vfs::{ApiTable, RegisterError};

use super::guard;
use super::vtab::ModuleTarget;

/// The extension entry point. SQLite derives this name from the file name
/// `libonesync_mvbt_vtab.so` (strip `lib`, keep the letters before the first `.`), so
/// `.load libonesync_mvbt_vtab` finds it without naming it.
///
/// Registers the `mvbt` module on the loading connection and, through
/// `sqlite3_auto_extension`, on every connection that SQLite opens later (so the CLI's
/// `.load` then `.open` has it too), and returns `SQLITE_OK_LOAD_PERMANENTLY`.
///
/// # Safety
/// Called by SQLite only: `api` is the loading SQLite's routine table, `db` null or the
/// loading connection, and `err_msg` null or a valid out-pointer for a `sqlite3_malloc`ed
/// message.
#[no_mangle]
pub unsafe extern "C" fn sqlite3_onesyncmvbtvtab_init(
    db: *mut c_void,
    err_msg: *mut *mut c_char,
    api: *const sqlite3_api_routines,
) -> c_int {
    // SAFETY: SQLite's own arguments, passed on: the loading connection gets the module as a
    // connection opened later would.
    let code = unsafe { loaded_connection_init(db, err_msg, api) };
    if code != ffi::SQLITE_OK {
        return code;
    }
    guard(SQLITE_ERROR, || {
        // SAFETY: SQLite passes its own routine table (the call above checked it is there).
        let Some(table) = (unsafe { ApiTable::from_routines(api) }) else {
            return SQLITE_ERROR;
        };
        // The library stays loaded (SQLITE_OK_LOAD_PERMANENTLY). Without
        // `sqlite3_auto_extension` only the loading connection has the module.
        let _ = table.run_on_new_connections(loaded_connection_init);
        SQLITE_OK_LOAD_PERMANENTLY
    })
}

/// Run by SQLite for each connection it opens after the extension was loaded
/// (`sqlite3_auto_extension`): registers the `mvbt` module there.
///
/// # Safety
/// Called by SQLite only, with the same arguments as an entry point.
unsafe extern "C" fn loaded_connection_init(
    db: *mut c_void,
    err_msg: *mut *mut c_char,
    api: *const sqlite3_api_routines,
) -> c_int {
    guard(SQLITE_ERROR, || {
        // SAFETY: SQLite passes its own routine table (or null, handled).
        let Some(table) = (unsafe { ApiTable::from_routines(api) }) else {
            return SQLITE_ERROR;
        };
        if db.is_null() {
            return ffi::SQLITE_OK;
        }
        // SAFETY: SQLite's arguments, with its own table.
        unsafe { register_or_report(&table, db, err_msg) }
    })
}

/// Registers the `mvbt` module on connection `db` of the SQLite behind `api`.
///
/// # Safety
/// `db` must be an open `sqlite3*` of the SQLite whose routines `api` holds
/// (for rusqlite: `conn.handle().cast()` with `api_table_from_sys!(rusqlite::ffi)`),
/// used only as SQLite allows (e.g. not concurrently from another thread in
/// a non-serialized build).
pub unsafe fn register_mvbt_module(db: *mut c_void, api: &ApiTable) -> Result<(), RegisterError> {
    // SAFETY: the caller's contract is `ModuleTarget::new`'s.
    let target = unsafe { ModuleTarget::new(db, api) };
    crate::register_modules(&target)
}

/// The routines of the host that called [`register_mvbt_for_new_connections`].
static HOST_API: std::sync::OnceLock<ApiTable> = std::sync::OnceLock::new();

/// For a host that links its own SQLite (e.g. rusqlite's bundled one, with
/// [`api_table_from_sys!`](onesync_vfs::api_table_from_sys)): registers the `mvbt` module on
/// every connection that SQLite opens from now on (`sqlite3_auto_extension`). Idempotent; the
/// first table given is the one used.
pub fn register_mvbt_for_new_connections(api: &ApiTable) -> Result<(), RegisterError> {
    let api = *HOST_API.get_or_init(|| *api);
    if api.vtab().is_none() {
        return Err(RegisterError {
            code: SQLITE_ERROR,
            message: "the API table lacks the virtual table routines".into(),
        });
    }
    // This crate is linked into the host, so the function stays valid.
    api.run_on_new_connections(host_connection_init)
}

/// Run by the host's SQLite for each connection it opens after
/// [`register_mvbt_for_new_connections`]. Uses the host's table, not the
/// `api` argument (null when the host's SQLite omits extension loading).
///
/// # Safety
/// Called by SQLite only, with the same arguments as an entry point.
unsafe extern "C" fn host_connection_init(
    db: *mut c_void,
    err_msg: *mut *mut c_char,
    _api: *const sqlite3_api_routines,
) -> c_int {
    guard(SQLITE_ERROR, || {
        let Some(table) = HOST_API.get() else {
            return SQLITE_ERROR;
        };
        if db.is_null() {
            return ffi::SQLITE_OK;
        }
        // SAFETY: SQLite's arguments, and the host's own table.
        unsafe { register_or_report(table, db, err_msg) }
    })
}

/// [`register_mvbt_module`], its failure as a result code and a message in `err_msg`.
///
/// # Safety
/// `db` is a connection of the SQLite behind `table`; `err_msg` is null or SQLite's
/// out-pointer for a message.
unsafe fn register_or_report(table: &ApiTable, db: *mut c_void, err_msg: *mut *mut c_char) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { register_mvbt_module(db, table) } {
        Ok(()) => ffi::SQLITE_OK,
        Err(e) => {
            // SAFETY: `err_msg` is null or SQLite's out-pointer for the message.
            if let Some(out) = unsafe { err_msg.as_mut() } {
                *out = table.sqlite_string(&e.to_string());
            }
            e.code
        }
    }
}
