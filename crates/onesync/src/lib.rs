//! onesync for rusqlite: registers the `onesync` SQLite VFS with the SQLite that rusqlite
//! links, so that databases opened through it are onesync stores (failure-atomic, one flush
//! per commit). See README.md.
//!
//! ```no_run
//! let conn = rusqlite::Connection::open_in_memory()?;
//! onesync::register(&conn)?;
//! let db = onesync::open("app.onesync")?; // or `file:app.onesync?vfs=onesync`
//! db.execute_batch("CREATE TABLE IF NOT EXISTS t(x); INSERT INTO t VALUES (1);")?;
//! # Ok::<(), onesync::Error>(())
//! ```
#![forbid(unsafe_code)]

use std::path::Path;

use rusqlite::{Connection, OpenFlags};

/// The VFS crate this one wraps (`onesync-vfs`): statistics, other backends, the loadable
/// extension's entry points.
pub use vfs;
pub use vfs::{RegisterError, VFS_NAME};

/// Why registering or opening failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// SQLite refused the VFS or its per-connection hook (too old, out of memory, ...).
    #[error(transparent)]
    Register(#[from] RegisterError),
    /// SQLite failed to open the database (the message says why: e.g. an existing plain
    /// SQLite file opened as a store).
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
}

/// Registers the `onesync` VFS with the SQLite that rusqlite links (not as the default:
/// open stores with [`open`], `file:PATH?vfs=onesync`, or the VFS name `"onesync"`), and on
/// every connection opened from now on the check that puts the reason a store open was
/// refused into the error message. Nothing is registered on `conn` itself (connections
/// opened before keep their VFS and have no such check). Idempotent.
pub fn register(_conn: &Connection) -> Result<(), Error> {
    register_vfs()?;
    Ok(())
}

/// As [`register`], and makes `onesync` SQLite's default VFS, for code that cannot name a
/// VFS: a new database is a store, a store opens as one, and an existing plain SQLite file
/// opens as it always did (through the previous default VFS). Connections opened before
/// keep their VFS.
pub fn register_default(conn: &Connection) -> Result<(), Error> {
    register(conn)?;
    vfs::make_default(&api(), VFS_NAME)?;
    Ok(())
}

/// Opens (creating it if missing) the store at `path` with the `onesync` VFS, registering
/// it first if needed. A path needs no escaping (`#`, `?`, spaces are fine); for URI
/// parameters open `file:PATH?vfs=onesync&...` with rusqlite yourself after [`register`].
pub fn open(path: impl AsRef<Path>) -> Result<Connection, Error> {
    register_vfs()?;
    Ok(Connection::open_with_flags_and_vfs(
        path,
        OpenFlags::default(),
        VFS_NAME,
    )?)
}

/// The routine table of rusqlite's SQLite.
fn api() -> vfs::ApiTable {
    vfs::api_table_from_sys!(rusqlite::ffi)
}

/// The VFS, and the per-connection hook for connections opened from now on.
fn register_vfs() -> Result<(), RegisterError> {
    let api = api();
    vfs::register_static(&api)?;
    vfs::register_open_refusal_hook(&api)
}
