//! The loadable extension `libonesync.so` and the static library `libonesync.a`: the
//! `onesync` VFS (crate `onesync-vfs`) behind SQLite's extension entry points, and nothing
//! else. The entry points are defined in the VFS crate (`src/sys/entry.rs`); re-exported
//! here, they are the library's exported symbols. See README.md.
#![forbid(unsafe_code)]

pub use onesync_vfs::{
    sqlite3_onesync_auto_init, sqlite3_onesync_default_auto_init, sqlite3_onesync_default_init,
    sqlite3_onesync_init,
};
