//! onesync for rusqlite: registers the `onesync` SQLite VFS with the SQLite that rusqlite
//! links, so that databases opened through it are onesync stores (failure-atomic, one flush
//! per commit). See README.md.
//!
//! ```no_run
//! let conn = rusqlite::Connection::open_in_memory()?;
//! onesync::register(&conn)?;
//! let db = onesync::open("app.onesync")?; // or `file:app.onesync?onesync_sync_interval_ms=5`
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
/// it first if needed. A path needs no escaping (`#`, `?`, spaces are fine): it is opened
/// as the URI `file:PATH?vfs=onesync` (percent-encoded), so every refusal carries the
/// reason that URI gets from SQLite (a directory, a missing directory, a plain SQLite
/// file), and an existing empty file becomes a store as it does there (SQLite treats an
/// empty file as a new database). A path that begins with `file:` is a URI, as SQLite
/// reads it with URIs on (rusqlite's default): it is opened as given, with `vfs=onesync`
/// added if it names no VFS (URI parameters such as `onesync_sync_interval_ms=N` go there);
/// one naming another VFS is refused (`SQLITE_CANTOPEN`). Name a file that begins with
/// `file:` as `./file:...`.
pub fn open(path: impl AsRef<Path>) -> Result<Connection, Error> {
    register_vfs()?;
    let uri = store_uri(path.as_ref())?;
    Ok(Connection::open_with_flags(
        uri,
        OpenFlags::default() | OpenFlags::SQLITE_OPEN_URI,
    )?)
}

/// The URI [`open`] opens for `path` (see there).
fn store_uri(path: &Path) -> Result<String, Error> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    if bytes.starts_with(b"file:") {
        let uri = String::from_utf8_lossy(bytes).into_owned();
        return uri_naming_onesync(uri);
    }
    // Two leading slashes would read as `file://authority/`: one means the same path.
    let start = bytes.iter().take_while(|&&b| b == b'/').count().saturating_sub(1);
    let mut uri = String::from("file:");
    for &b in &bytes[start..] {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            uri.push(b as char);
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri.push_str("?vfs=onesync");
    Ok(uri)
}

/// A URI given to [`open`]: as it is if it names the `onesync` VFS, with `vfs=onesync`
/// added if it names none; refused if it names another.
fn uri_naming_onesync(uri: String) -> Result<String, Error> {
    let (body, fragment) = match uri.find('#') {
        Some(at) => uri.split_at(at),
        None => (uri.as_str(), ""),
    };
    let query = body.split_once('?').map_or("", |(_, q)| q);
    let vfs = query
        .split('&')
        .filter_map(|param| param.split_once('=').or(Some((param, ""))))
        .find(|(key, _)| *key == "vfs")
        .map(|(_, value)| value);
    match vfs {
        Some(VFS_NAME) => Ok(uri.clone()),
        None => {
            let joint = if body.contains('?') { "&" } else { "?" };
            Ok(format!("{body}{joint}vfs={VFS_NAME}{fragment}"))
        }
        Some(other) => Err(Error::Sqlite(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CANTOPEN),
            Some(format!(
                "onesync: {uri} names the VFS {other:?}: onesync::open opens onesync stores \
                 (vfs=onesync); open other databases with rusqlite's Connection::open"
            )),
        ))),
    }
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
