//! The extension entry points: the one SQLite calls when it loads `libonesync.so`, the one
//! it calls for each new connection afterwards (`sqlite3_auto_extension`), and the host's
//! counterpart for a SQLite linked into the host.

use std::ffi::{c_char, c_int, c_void};

use super::api::ApiTable;
use super::ffi::ConnectionInitFn;
use super::ffi::{self, sqlite3_api_routines, SQLITE_ERROR, SQLITE_OK_LOAD_PERMANENTLY};
use super::guard::guard;
use super::handles::Connection;
use super::refusal_hook;
use super::registration::RegisterError;

/// Oldest SQLite the extension loads into: `SQLITE_OK_LOAD_PERMANENTLY`
/// (which keeps the library mapped after the loading connection closes, so
/// the VFS's function pointers stay valid) appeared in 3.14.0.
pub const MIN_EXTENSION_SQLITE_VERSION: i32 = 3_014_000;

/// How an entry point loads the extension.
#[derive(Clone, Copy)]
struct Load {
    /// Make `onesync` SQLite's default VFS.
    make_default: bool,
    /// Called by `sqlite3_load_extension` (answer `SQLITE_OK_LOAD_PERMANENTLY`, and register
    /// the per-connection entry point), not as an automatic extension of a connection
    /// being opened (answer `SQLITE_OK`: anything else fails that open).
    by_load_extension: bool,
}

/// Defines an extension entry point (SQLite's signature, exported unmangled) that runs
/// [`load`] the given way; the doc comment is the entry point's.
macro_rules! entry_point {
    ($(#[$doc:meta])* $name:ident, make_default: $default:expr, by_load_extension: $by_load:expr) => {
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            db: *mut c_void,
            err_msg: *mut *mut c_char,
            api: *const sqlite3_api_routines,
        ) -> c_int {
            let how = Load {
                make_default: $default,
                by_load_extension: $by_load,
            };
            // SAFETY: SQLite's own arguments, passed on.
            unsafe { load(db, err_msg, api, how) }
        }
    };
}

entry_point! {
    /// The extension entry point. SQLite derives this name from the file name
    /// `libonesync.so` (strip `lib`, take the letters before the first `.`), so
    /// `.load libonesync` finds it without naming it.
    ///
    /// Registers the `onesync` VFS (not as the default) with the loading SQLite and,
    /// through `sqlite3_auto_extension`, a check on every connection that SQLite opens
    /// later (so after the CLI's `.load` then `.open` a refused open says why in
    /// `sqlite3_errmsg`), and returns `SQLITE_OK_LOAD_PERMANENTLY`.
    ///
    /// # Safety
    /// Called by SQLite only: `api` is the loading SQLite's routine table, `db`
    /// null or the loading connection, and `err_msg` null or a valid out-pointer
    /// for a `sqlite3_malloc`ed message.
    sqlite3_onesync_init, make_default: false, by_load_extension: true
}

entry_point! {
    /// As [`sqlite3_onesync_init`], and makes `onesync` SQLite's default VFS, so that
    /// applications and drivers that cannot name a VFS (no URI, no `vfs` argument) open
    /// onesync databases: a new database is a store, a store is opened as one, and an existing
    /// file that is not a store (a plain SQLite database) is passed through to the VFS that
    /// was the default before. `.load libonesync sqlite3_onesync_default_init`.
    ///
    /// # Safety
    /// As [`sqlite3_onesync_init`].
    sqlite3_onesync_default_init, make_default: true, by_load_extension: true
}

entry_point! {
    /// The entry point to hand to `sqlite3_auto_extension` (bindings that link SQLite
    /// themselves, or reach it through `ctypes`): SQLite runs it for every connection it opens
    /// from then on. The first run registers the `onesync` VFS (not as the default); each
    /// fails an open this VFS refused with the reason. Returns `SQLITE_OK` (any other answer fails the open). Open one connection
    /// (`:memory:` will do) before the first one that names `vfs=onesync`: SQLite opens a
    /// connection's main database before it runs automatic extensions.
    ///
    /// # Safety
    /// As [`sqlite3_onesync_init`].
    sqlite3_onesync_auto_init, make_default: false, by_load_extension: false
}

entry_point! {
    /// As [`sqlite3_onesync_auto_init`], and the first run makes `onesync` the default VFS (see
    /// [`sqlite3_onesync_default_init`]).
    ///
    /// # Safety
    /// As [`sqlite3_onesync_init`].
    sqlite3_onesync_default_auto_init, make_default: true, by_load_extension: false
}

/// Whether an entry point made `onesync` the default already (once: an application that
/// chose another default afterwards keeps it).
static MADE_DEFAULT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// What every entry point does.
///
/// # Safety
/// As [`sqlite3_onesync_init`].
unsafe fn load(
    db: *mut c_void,
    err_msg: *mut *mut c_char,
    api: *const sqlite3_api_routines,
    how: Load,
) -> c_int {
    guard(SQLITE_ERROR, || {
        // SAFETY: SQLite passes its own routine table (or null, handled).
        let Some(table) = (unsafe { ApiTable::from_routines(api) }) else {
            // SQLite built without extension loading hands an automatic extension no table.
            return SQLITE_ERROR;
        };
        let fail = |code: c_int, msg: &str| {
            // SAFETY: `err_msg` is null or SQLite's out-pointer for the message.
            if let Some(out) = unsafe { err_msg.as_mut() } {
                *out = table.sqlite_string(msg);
            }
            code
        };
        let version = table.libversion_number();
        if version < MIN_EXTENSION_SQLITE_VERSION {
            return fail(
                SQLITE_ERROR,
                &format!("onesync needs SQLite >= {MIN_EXTENSION_SQLITE_VERSION}, this is {version}"),
            );
        }
        if let Err(e) = crate::register_static(&table) {
            return fail(e.code, &e.to_string());
        }
        if how.make_default && !MADE_DEFAULT.swap(true, std::sync::atomic::Ordering::SeqCst) {
            let rc = table.make_default_vfs(c"onesync");
            if rc != ffi::SQLITE_OK {
                return fail(rc, "onesync: could not make onesync the default VFS");
            }
        }
        if !how.by_load_extension {
            remember_refusal_hook(table, onesync_connection_init);
            // SAFETY: SQLite's arguments, with its own table.
            return unsafe { check_new_connection(&table, db, err_msg) };
        }
        // The library stays loaded (SQLITE_OK_LOAD_PERMANENTLY). A SQLite without
        // `sqlite3_auto_extension` loads the VFS all the same, without the check.
        if table.run_on_new_connections(onesync_connection_init).is_ok() {
            remember_refusal_hook(table, onesync_connection_init);
        }
        SQLITE_OK_LOAD_PERMANENTLY
    })
}

/// The routines of the host that called [`register_open_refusal_hook`].
static HOST_API: std::sync::OnceLock<ApiTable> = std::sync::OnceLock::new();

/// For a host that links its own SQLite (e.g. rusqlite's bundled one, with
/// [`api_table_from_sys!`](crate::api_table_from_sys)): on every connection that SQLite opens
/// from now on (`sqlite3_auto_extension`), fails an open this VFS refused (a plain SQLite file
/// opened as a store, a bad URI parameter, ...) with the reason in `sqlite3_errmsg`, not only
/// in `sqlite3_log`. The loadable extension's entry points register the same check.
/// Idempotent; the first table given is the one used.
pub fn register_open_refusal_hook(api: &ApiTable) -> Result<(), RegisterError> {
    let api = *HOST_API.get_or_init(|| *api);
    // This crate is linked into the host, so the function stays valid.
    api.run_on_new_connections(host_connection_init)?;
    remember_refusal_hook(api, host_connection_init);
    Ok(())
}

/// Remembers the per-connection entry point for [`refusal_hook::rearm`], then tells the
/// store backend (through the crate root) that one is registered.
fn remember_refusal_hook(api: ApiTable, hook: ConnectionInitFn) {
    refusal_hook::remember(api, hook);
    crate::note_refusal_hook_registered();
}

/// Run by the host's SQLite for each connection it opens after
/// [`register_open_refusal_hook`]. Uses the host's table, not the
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
        // SAFETY: SQLite's arguments, and the host's own table.
        unsafe { check_new_connection(table, db, err_msg) }
    })
}

/// Run as SQLite opens connection `db`: fails the open if this VFS refused its main
/// database, with the reason in `err_msg` (nothing when `db` is null).
///
/// # Safety
/// `db` is null or a connection of the SQLite behind `table`; `err_msg` is null or SQLite's
/// out-pointer for a message.
unsafe fn check_new_connection(table: &ApiTable, db: *mut c_void, err_msg: *mut *mut c_char) -> c_int {
    if db.is_null() {
        return ffi::SQLITE_OK;
    }
    if let Some((code, message)) = crate::open_refusal(table, Connection::new(db)) {
        // SAFETY: `err_msg` is null or SQLite's out-pointer for the message.
        if let Some(out) = unsafe { err_msg.as_mut() } {
            *out = table.sqlite_string(&message);
        }
        return code;
    }
    ffi::SQLITE_OK
}

/// Run by SQLite for each connection it opens after the extension was
/// loaded (`sqlite3_auto_extension`): the open-refusal check there.
///
/// # Safety
/// Called by SQLite only, with the same arguments as an entry point.
unsafe extern "C" fn onesync_connection_init(
    db: *mut c_void,
    err_msg: *mut *mut c_char,
    api: *const sqlite3_api_routines,
) -> c_int {
    guard(SQLITE_ERROR, || {
        // SAFETY: SQLite passes its own routine table (or null, handled).
        let Some(table) = (unsafe { ApiTable::from_routines(api) }) else {
            return SQLITE_ERROR;
        };
        // SAFETY: SQLite's arguments, with its own table.
        unsafe { check_new_connection(&table, db, err_msg) }
    })
}
