//! SQLite through rusqlite's bundled library: the onesync VFS registered statically, and the
//! few helpers every SQLite-facing subcommand shares.

use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use rusqlite::{Connection, OpenFlags};
use serde::Deserialize;

/// How long a connection waits for another one's write lock before SQLITE_BUSY.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Registers the `onesync` VFS with the bundled SQLite (idempotent).
pub fn register_onesync_vfs() -> Result<()> {
    let api = onesync_vfs::api_table_from_sys!(rusqlite::ffi);
    onesync_vfs::register_static(&api).map_err(|e| anyhow!("registering the onesync VFS: {e}"))?;
    // The per-connection hook: an open the VFS refuses fails with its reason in the
    // error message, not only in sqlite3_log.
    onesync_vfs::register_open_refusal_hook(&api)
        .map_err(|e| anyhow!("registering the onesync per-connection hook: {e}"))?;
    Ok(())
}

/// Opens (creating if `create`) the database at `path` through the onesync VFS: `path` is a
/// onesync store and the database is its logical file `main`.
pub fn open_onesync(path: &Path, create: bool) -> Result<Connection> {
    open_onesync_with(path, create, "")
}

/// [`open_onesync`] with URI parameters (`a=1&b=2`; none if empty): opens
/// `file:PATH?vfs=onesync&PARAMETERS`.
pub fn open_onesync_with(path: &Path, create: bool, parameters: &str) -> Result<Connection> {
    register_onesync_vfs()?;
    let mut flags =
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if create {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    let conn = if parameters.is_empty() {
        Connection::open_with_flags_and_vfs(path, flags, onesync_vfs::VFS_NAME)
            .with_context(|| format!("opening {} through the onesync VFS", path.display()))?
    } else {
        let uri = format!("{}?vfs={}&{parameters}", file_uri(path)?, onesync_vfs::VFS_NAME);
        Connection::open_with_flags(&uri, flags)
            .with_context(|| format!("opening {uri} through the onesync VFS"))?
    };
    conn.busy_timeout(BUSY_TIMEOUT)?;
    Ok(conn)
}

/// Makes `conn`'s write transactions on its onesync store concurrent (`PRAGMA
/// onesync_concurrent = 1`, what the URI parameter `concurrent=1` does at open).
pub fn set_concurrent(conn: &Connection) -> Result<()> {
    conn.execute_batch("PRAGMA onesync_concurrent = 1")
        .context("PRAGMA onesync_concurrent = 1")
}

/// `file:` and `path`, absolute, with the characters a URI's path cannot hold escaped.
pub fn file_uri(path: &Path) -> Result<String> {
    let path = std::path::absolute(path).with_context(|| format!("making {} absolute", path.display()))?;
    let text = path
        .to_str()
        .ok_or_else(|| anyhow!("{} is not UTF-8", path.display()))?;
    let mut uri = String::from("file:");
    for byte in text.bytes() {
        match byte {
            b'?' | b'#' | b'%' | b'&' | b'=' | b' ' | 0x80.. => uri.push_str(&format!("%{byte:02X}")),
            _ => uri.push(char::from(byte)),
        }
    }
    Ok(uri)
}

/// Opens (creating) the plain SQLite file at `path` through the onesync-f2fs VFS: each
/// transaction one F2FS atomic write (fails clearly off F2FS).
pub fn open_f2fs(path: &Path) -> Result<Connection> {
    register_onesync_vfs()?;
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_URI
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags_and_vfs(path, flags, onesync_vfs::F2FS_VFS_NAME)
        .with_context(|| format!("opening {} through the onesync-f2fs VFS", path.display()))?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    Ok(conn)
}

/// Opens the plain SQLite file at `path` through SQLite's default VFS.
pub fn open_plain(path: &Path, flags: OpenFlags) -> Result<Connection> {
    let conn = Connection::open_with_flags(path, flags)
        .with_context(|| format!("opening {} with SQLite's default VFS", path.display()))?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    Ok(conn)
}

/// `PRAGMA integrity_check`: `Ok(())` when SQLite answers "ok", otherwise an error listing
/// (the first few of) the problems it found.
pub fn check_integrity(conn: &Connection) -> Result<()> {
    let mut stmt = conn.prepare("PRAGMA integrity_check(20)")?;
    let findings: Vec<String> = stmt
        .query_map([], |row| row.get::<_, String>(0))?
        .collect::<rusqlite::Result<_>>()?;
    if findings == ["ok"] {
        Ok(())
    } else {
        Err(anyhow!("integrity_check failed: {}", findings.join("; ")))
    }
}

/// Runs `body` inside `BEGIN IMMEDIATE` … `COMMIT`, rolling back if anything fails.
pub fn in_transaction<T, E: From<rusqlite::Error>>(
    conn: &Connection,
    body: impl FnOnce() -> std::result::Result<T, E>,
) -> std::result::Result<T, E> {
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let outcome = body().and_then(|value| {
        conn.execute_batch("COMMIT")?;
        Ok(value)
    });
    if outcome.is_err() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    outcome
}

/// True for SQLITE_BUSY and SQLITE_LOCKED (in any extended form): try the transaction again.
pub fn is_busy(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// SQLite's extended result code of `error`, if it is SQLite's.
pub fn extended_code(error: &rusqlite::Error) -> Option<i32> {
    match error {
        rusqlite::Error::SqliteFailure(failure, _) => Some(failure.extended_code),
        _ => None,
    }
}

/// Whether `error` is SQLITE_BUSY_SNAPSHOT: a concurrent writer's COMMIT (onesync's
/// `concurrent=1`) was refused because a commit since its snapshot conflicts with it; SQLite
/// has rolled the transaction back.
pub fn is_busy_snapshot(error: &rusqlite::Error) -> bool {
    extended_code(error) == Some(rusqlite::ffi::SQLITE_BUSY_SNAPSHOT)
}

/// A pause between attempts short next to a transaction (SQLite's own busy handler sleeps at
/// least 1 ms, several times a one-row transaction here).
pub const BUSY_RETRY_PAUSE: Duration = Duration::from_micros(200);

/// Runs `attempt` again, after `pause`, for as long as it fails with SQLITE_BUSY or
/// SQLITE_LOCKED (the busy timeout covers most waits; this covers the rest, such as a
/// snapshot that went stale while waiting). `attempt` must leave nothing half done on error.
pub fn retry_while_busy<T>(
    pause: Duration,
    mut attempt: impl FnMut() -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    loop {
        match attempt() {
            Err(e) if is_busy(&e) => std::thread::sleep(pause),
            other => return other,
        }
    }
}

/// `PRAGMA onesync_commit`: this connection's last commit, how far the store is durable,
/// and (replicated) how far the replica holds it.
#[derive(Deserialize, Debug, Clone, Copy)]
pub struct CommitPoint {
    pub seq: Option<u64>,
    pub durable_seq: u64,
    /// With `onesync_replicate`: the replica holds every commit up to it.
    #[serde(default)]
    pub replicated_seq: Option<u64>,
}

pub fn commit_point(conn: &Connection) -> Result<CommitPoint> {
    let json: String = conn
        .query_row("PRAGMA onesync_commit", [], |r| r.get(0))
        .context("PRAGMA onesync_commit")?;
    serde_json::from_str(&json).with_context(|| format!("parsing PRAGMA onesync_commit: {json}"))
}

/// `PRAGMA onesync_flush`: every commit written so far made durable; returns `durable_seq`.
pub fn onesync_flush(conn: &Connection) -> Result<u64> {
    #[derive(Deserialize)]
    struct Flushed {
        durable_seq: u64,
    }
    let json: String = conn
        .query_row("PRAGMA onesync_flush", [], |r| r.get(0))
        .context("PRAGMA onesync_flush")?;
    let flushed: Flushed =
        serde_json::from_str(&json).with_context(|| format!("parsing PRAGMA onesync_flush: {json}"))?;
    Ok(flushed.durable_seq)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The URI names the same file as the path, awkward characters and all.
    #[test]
    fn a_store_opened_by_uri_is_the_one_at_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a b?c#d%e&f=g.onesync");
        let conn = open_onesync_with(&path, true, "concurrent=1").unwrap();
        conn.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (42)")
            .unwrap();
        drop(conn);
        assert!(path.is_file());
        let conn = open_onesync(&path, false).unwrap();
        let x: i64 = conn.query_row("SELECT x FROM t", [], |r| r.get(0)).unwrap();
        assert_eq!(x, 42);
    }
}
