//! The onesync SQLite VFS.
//!
//! One crate, two ways in: built as `libonesync.so` it is a loadable SQLite
//! extension whose entry point [`sqlite3_onesync_init`] registers the
//! `onesync` VFS with whatever SQLite loads it; linked as an rlib, a host that
//! bundles its own SQLite calls [`register_static`] with an [`ApiTable`] it
//! fills from that SQLite ([`api_table_from_sys!`]). Either way this crate
//! reaches SQLite only through those function pointers; see README.md.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

mod api;
pub mod backend;
pub mod ffi;
mod file;
mod guard;
mod memfile;
mod store_db;
mod vfs;

use std::ffi::{c_char, c_int, c_void};

pub use api::ApiTable;
pub use backend::{
    passthrough_io, DbBackend, FileSystem, IoResult, LockLevel, MainDbFactory, OpenRequest, Opened,
    PassThrough, PassThroughFactory, PassThroughIo,
};
pub use store_db::{store_stats_json, StoreFactory, StoreOpener, DEFAULT_LOGICAL_DB, STORE_PAGE_SIZE};
pub use vfs::{
    register_static, register_with, stats, RegisterError, RegisterOptions, Registered, Stats,
    MIN_SQLITE_VERSION, VFS_NAME,
};

use ffi::{sqlite3_api_routines, SQLITE_ERROR, SQLITE_OK_LOAD_PERMANENTLY};
use guard::guard;

/// Oldest SQLite the extension loads into: `SQLITE_OK_LOAD_PERMANENTLY`
/// (which keeps the library mapped after the loading connection closes, so
/// the VFS's function pointers stay valid) appeared in 3.14.0.
pub const MIN_EXTENSION_SQLITE_VERSION: i32 = 3_014_000;

/// The extension entry point. SQLite derives this name from the file name
/// `libonesync.so` (strip `lib`, take the letters before the first `.`), so
/// `.load libonesync` finds it without naming it.
///
/// Registers the `onesync` VFS (not as the default) with the loading SQLite
/// and returns `SQLITE_OK_LOAD_PERMANENTLY`.
///
/// # Safety
/// Called by SQLite only: `api` is the loading SQLite's routine table and
/// `err_msg` null or a valid out-pointer for a `sqlite3_malloc`ed message.
#[no_mangle]
pub unsafe extern "C" fn sqlite3_onesync_init(
    _db: *mut c_void,
    err_msg: *mut *mut c_char,
    api: *const sqlite3_api_routines,
) -> c_int {
    guard(SQLITE_ERROR, || {
        // SAFETY: SQLite passes its own routine table (or null, handled).
        let Some(table) = (unsafe { ApiTable::from_routines(api) }) else {
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
        match register_static(&table) {
            Ok(_) => SQLITE_OK_LOAD_PERMANENTLY,
            Err(e) => fail(e.code, &e.to_string()),
        }
    })
}
