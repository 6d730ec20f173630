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
mod registration;
mod registry;
mod schema;
// The one module that talks to C: the module table, the entry points and raw pointers.
#[allow(unsafe_code)]
mod sys;
mod table;
mod value;

pub use args::DEFAULT_KEEP_VERSIONS;
pub use registry::{mvbt_counters, mvbt_latest_version, mvbt_recovery, mvbt_scan_stats, MvbtScanStats};
pub use schema::{IDX_AS_OF, IDX_KEY_EQ, IDX_KEY_HIGH, IDX_KEY_LOW, MVBT_MODULE_NAME};
pub use sys::entry::{register_mvbt_for_new_connections, register_mvbt_module, sqlite3_onesyncmvbtvtab_init};
pub use value::MvbtValue;

/// The composition root, defined in `registration.rs`: `sys` calls it through the crate root,
/// so that it names no table.
pub(crate) use registration::register_modules;
