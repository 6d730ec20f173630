//! The onesync SQLite VFS.
//!
//! One crate, two ways in: built as `libonesync.so` it is a loadable SQLite
//! extension whose entry point [`sqlite3_onesync_init`] registers the
//! `onesync` VFS with whatever SQLite loads it; linked as an rlib, a host that
//! bundles its own SQLite calls [`register_static`] with an [`ApiTable`] it
//! fills from that SQLite ([`api_table_from_sys!`]). Either way this crate
//! reaches SQLite only through those function pointers; see README.md.
#![deny(unsafe_code)]

pub mod backend;
mod f2fs;
mod memfile;
mod mvbt_vtab;
mod names;
mod store_db;
mod super_journal;
// The one module that talks to C: SQLite's tables, entry points and raw pointers.
#[allow(unsafe_code)]
mod sys;
mod vfs;

pub use backend::{
    passthrough_io, DbBackend, FileSystem, IoResult, JournalRoute, LockLevel, MainDbFactory,
    MaskedPassThroughFactory, OpenRequest, Opened, PassThrough, PassThroughFactory, PassThroughIo,
};
pub use f2fs::{f2fs_atomic_write_support, f2fs_stats, F2fsFactory, F2fsStats, F2FS_VFS_NAME};
pub use mvbt_vtab::{
    mvbt_counters, mvbt_latest_version, mvbt_scan_stats, MvbtScanStats, MvbtValue, DEFAULT_KEEP_VERSIONS,
    IDX_AS_OF, IDX_KEY_EQ, IDX_KEY_HIGH, IDX_KEY_LOW, MVBT_MODULE_NAME,
};
pub use store_db::{store_stats_json, StoreFactory, StoreOpener, DEFAULT_LOGICAL_DB, STORE_PAGE_SIZE};
pub use super_journal::SuperJournalNames;
pub use sys::api::{ApiTable, VtabConfigRoutine, VtabRoutines};
pub use sys::entry::{
    register_mvbt_for_new_connections, sqlite3_onesync_auto_init, sqlite3_onesync_default_auto_init,
    sqlite3_onesync_default_init, sqlite3_onesync_init, MIN_EXTENSION_SQLITE_VERSION,
};
pub use sys::ffi;
pub use sys::vtab::register_mvbt_module;
pub use vfs::{
    make_default, register_static, register_with, stats, RegisterError, RegisterOptions, Registered, Stats,
    MIN_SQLITE_VERSION, VFS_NAME,
};

/// The composition root's half of loading: the virtual table modules registered on a connection
/// (by [`register_mvbt_module`] and the extension's per-connection entry points). `sys` calls
/// this instead of naming the tables itself.
pub(crate) fn register_modules(target: &sys::vtab::ModuleTarget<'_>) -> Result<(), RegisterError> {
    target.register::<mvbt_vtab::MvbtTable>(MVBT_MODULE_NAME)
}

/// The composition root's half of a connection being opened: the code and message to fail
/// it with, if the store backend refused its main database (`store_db/refusals.rs`). `sys`
/// calls this instead of naming the backend.
pub(crate) fn open_refusal(api: &ApiTable, db: backend::Connection) -> Option<(std::ffi::c_int, String)> {
    store_db::open_refusal(api, db)
}

/// A per-connection entry point that calls [`open_refusal`] is registered in this process.
pub(crate) fn note_refusal_hook_registered() {
    store_db::note_hook_registered()
}
