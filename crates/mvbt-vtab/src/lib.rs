//! The `mvbt` virtual table module: an SQLite table over an LS-MVBT tree
//! (`onesync-mvbt`), with as-of reads of committed versions. A research table, kept out of
//! the VFS and its packages: loaded as its own extension (`.load libonesync_mvbt_vtab`, entry
//! point [`sqlite3_onesyncmvbtvtab_init`]) or registered by a host that links SQLite
//! ([`register_mvbt_for_new_connections`], [`register_mvbt_module`]).
//!
//! ```sql
//! CREATE VIRTUAL TABLE kv USING mvbt(file='kv.mvbt', keep_versions=100);
//! -- declared as: CREATE TABLE x(key INTEGER PRIMARY KEY, value BLOB, as_of HIDDEN)
//! SELECT value FROM kv WHERE key = 7 AND as_of = 3;
//! ```
//!
//! See README.md for options, transactions and limits. SQLite reaches this module through
//! the shims of `sys/vtab.rs`, which call `MvbtTable`'s `VirtualTable` methods: the table
//! and its transactions in `table.rs`, cursors in `cursor.rs`, query plans (`xBestIndex`)
//! in `plan.rs`.
#![deny(unsafe_code)]

mod args;
mod cursor;
mod error;
mod plan;
mod registry;
// The one module that talks to C: the module table, the entry points and raw pointers.
#[allow(unsafe_code)]
mod sys;
mod table;
mod value;

use std::ffi::{c_int, CStr};

pub use args::DEFAULT_KEEP_VERSIONS;
pub use registry::{mvbt_counters, mvbt_latest_version, mvbt_scan_stats, MvbtScanStats};
pub use sys::entry::{register_mvbt_for_new_connections, register_mvbt_module, sqlite3_onesyncmvbtvtab_init};
pub use value::MvbtValue;

/// The composition root's half of registering: the tables registered on a connection (by
/// the entry points and [`register_mvbt_module`]). `sys` calls this instead of naming the
/// table itself.
pub(crate) fn register_modules(
    target: &sys::vtab::ModuleTarget<'_>,
) -> Result<(), onesync_vfs::RegisterError> {
    target.register::<table::MvbtTable>(MVBT_MODULE_NAME)
}

/// The name to use in `CREATE VIRTUAL TABLE ... USING mvbt(...)`.
pub const MVBT_MODULE_NAME: &str = "mvbt";

/// The schema every `mvbt` table declares. `key` is an ordinary column to
/// SQLite (a virtual table's INTEGER PRIMARY KEY is not a rowid alias), so the
/// rowid is reported equal to it.
const SCHEMA: &CStr = c"CREATE TABLE x(key INTEGER PRIMARY KEY, value BLOB, as_of HIDDEN)";
const COL_ROWID: c_int = -1;
const COL_KEY: c_int = 0;
const COL_VALUE: c_int = 1;
const COL_AS_OF: c_int = 2;

/// Rows a cursor fetches from the tree at a time.
const PAGE_ROWS: usize = 256;

/// `idxNum` bits: which constraints the plan hands to `xFilter` (`idxStr`
/// lists them, one letter per argument: `e` key =, `g` >, `G` >=, `l` <,
/// `L` <=, `v` as_of =).
pub const IDX_KEY_EQ: c_int = 1;
/// See [`IDX_KEY_EQ`]: a lower bound on the key.
pub const IDX_KEY_LOW: c_int = 2;
/// See [`IDX_KEY_EQ`]: an upper bound on the key.
pub const IDX_KEY_HIGH: c_int = 4;
/// See [`IDX_KEY_EQ`]: `as_of = V`.
pub const IDX_AS_OF: c_int = 8;
