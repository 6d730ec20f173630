//! The onesync SQLite VFS.
//!
//! Two ways in: the loadable extension `libonesync.so` (crates/extension, which re-exports
//! the entry points defined here) runs [`sqlite3_onesync_init`], which registers the
//! `onesync` VFS with whatever SQLite loads it; a host that links its own SQLite calls
//! [`register_static`] with an [`ApiTable`] it fills from that SQLite
//! ([`api_table_from_sys!`]). Either way this crate reaches SQLite only through those
//! function pointers; see README.md.
#![deny(unsafe_code)]

pub mod backend;
mod f2fs;
mod memfile;
mod names;
mod store_db;
mod store_journal;
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
pub use store_db::{store_stats_json, StoreFactory, StoreOpener, DEFAULT_LOGICAL_DB, STORE_PAGE_SIZE};
pub use super_journal::SuperJournalNames;
pub use sys::api::{ApiTable, VtabConfigRoutine, VtabRoutines};
pub use sys::entry::{
    register_open_refusal_hook, sqlite3_onesync_auto_init, sqlite3_onesync_default_auto_init,
    sqlite3_onesync_default_init, sqlite3_onesync_init, MIN_EXTENSION_SQLITE_VERSION,
};
pub use sys::ffi;
pub use vfs::{
    make_default, register_static, register_with, stats, RegisterError, RegisterOptions, Registered, Stats,
    MIN_SQLITE_VERSION, VFS_NAME,
};

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

/// Makes sure the per-connection entry point runs for a connection with a refusal to tell
/// at open (`sys/entry.rs`).
pub(crate) fn rearm_refusal_hook() {
    sys::entry::rearm_refusal_hook()
}
