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
#[cfg(feature = "test-hooks")]
pub use store_db::ReplicaConfigHook;
pub use store_db::{store_stats_json, StoreFactory, StoreOpener, DEFAULT_LOGICAL_DB, STORE_PAGE_SIZE};
pub use super_journal::SuperJournalNames;
pub use sys::api::{ApiTable, VtabConfigRoutine, VtabRoutines};
pub use sys::entry::{
    register_open_refusal_hook, sqlite3_onesync_auto_init, sqlite3_onesync_default_auto_init,
    sqlite3_onesync_default_init, sqlite3_onesync_init, MIN_EXTENSION_SQLITE_VERSION,
};
pub use sys::ffi;
// What the entry points and the store backend reach through the crate root, so that `sys`
// names no module above it: the store backend's refusals (`vfs.rs`) and the re-arming of the
// per-connection check (`sys/refusal_hook.rs`).
pub(crate) use sys::refusal_hook::rearm as rearm_refusal_hook;
pub use vfs::{
    make_default, register_static, register_with, stats, RegisterError, RegisterOptions, Registered, Stats,
    MIN_SQLITE_VERSION, VFS_NAME,
};
pub(crate) use vfs::{note_refusal_hook_registered, open_refusal};
