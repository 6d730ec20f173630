//! What a file is (by its first 16 bytes), refusing to overwrite, removing what a failed
//! command wrote, and opening plain SQLite files and stores read-only or read-write.

use std::fs::{self, File};
use std::io::{ErrorKind, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use rusqlite::{Connection, OpenFlags};

/// The first 16 bytes of every plain SQLite database file.
pub const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// What an existing file is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Store,
    Plain,
    Empty,
    Other,
}

impl Kind {
    fn described(self) -> &'static str {
        match self {
            Kind::Store => "a onesync store",
            Kind::Plain => "a plain SQLite database",
            Kind::Empty => "an empty file",
            Kind::Other => "neither a SQLite database nor a onesync store",
        }
    }
}

/// The kind of the file at `path`, by its first 16 bytes; an error if it is missing or
/// cannot be read.
pub fn kind(path: &Path) -> Result<Kind> {
    let mut head = Vec::with_capacity(16);
    let read = File::open(path).and_then(|f| f.take(16).read_to_end(&mut head));
    match read {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => bail!("{} does not exist", path.display()),
        Err(e) => return Err(anyhow!("cannot read {}: {e}", path.display())),
    }
    Ok(if head == onesync_store::layout::MAGIC {
        Kind::Store
    } else if head == SQLITE_MAGIC {
        Kind::Plain
    } else if head.is_empty() {
        Kind::Empty
    } else {
        Kind::Other
    })
}

/// Fails unless `path` is a file of kind `wanted`, naming what it is and what `command`
/// needs.
pub fn require(path: &Path, wanted: Kind, command: &str) -> Result<()> {
    let found = kind(path)?;
    if found != wanted {
        bail!(
            "{} is {}; onesync {command} needs {}",
            path.display(),
            found.described(),
            wanted.described()
        );
    }
    Ok(())
}

/// Fails if anything is at `path`, a dangling symlink included (we would write through it).
pub fn refuse_existing(path: &Path, command: &str) -> Result<()> {
    match fs::symlink_metadata(path) {
        Ok(_) => bail!(
            "{} already exists; onesync {command} never overwrites a file",
            path.display()
        ),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("checking whether {} exists", path.display())),
    }
}

/// `path` with `suffix` appended (`x.db` -> `x.db-wal`).
pub fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Deletes a file this command creates unless the command finished: dropped on every
/// error path, kept by [`RemoveUnlessKept::keep`].
pub struct RemoveUnlessKept<'a> {
    path: &'a Path,
    kept: bool,
}

impl<'a> RemoveUnlessKept<'a> {
    pub fn new(path: &'a Path) -> Self {
        Self { path, kept: false }
    }

    pub fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for RemoveUnlessKept<'_> {
    fn drop(&mut self) {
        if !self.kept {
            let _ = fs::remove_file(self.path);
        }
    }
}

/// Creates `dst` with `write`, then integrity-checks it through a connection from
/// `open_dst`; removes what was written if anything fails. Refuses an existing `dst`.
pub fn write_checked(
    dst: &Path,
    command: &str,
    write: impl FnOnce() -> Result<()>,
    open_dst: impl FnOnce() -> Result<Connection>,
) -> Result<()> {
    refuse_existing(dst, command)?;
    let written = RemoveUnlessKept::new(dst);
    write()?;
    let verdict = integrity(&open_dst()?).with_context(|| format!("integrity-checking {}", dst.display()))?;
    if verdict != "ok" {
        bail!(
            "the copy in {} failed its integrity check (so it was removed): {verdict}",
            dst.display()
        );
    }
    written.keep();
    Ok(())
}

/// `PRAGMA integrity_check`'s rows, joined by "; " ("ok" if all is well).
pub fn integrity(conn: &Connection) -> Result<String> {
    let mut stmt = conn.prepare("PRAGMA integrity_check")?;
    let rows = stmt
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows.join("; "))
}

/// `path` as an absolute URI path, percent-encoded but for `/` and RFC 3986's unreserved
/// characters (`%`, `?`, `#` and spaces would otherwise end or change it).
fn uri_path(path: &Path) -> Result<String> {
    let path = std::path::absolute(path).with_context(|| format!("resolving {}", path.display()))?;
    let mut out = String::new();
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    Ok(out)
}

/// The URI that opens the store at `path` through the onesync VFS: `file:PATH?vfs=onesync`.
pub fn store_uri(path: &Path) -> Result<String> {
    Ok(format!("file:{}?vfs={}", uri_path(path)?, onesync::VFS_NAME))
}

/// Flags for opening by URI; the URI's `mode=` decides read-only or read-write.
fn uri_flags() -> OpenFlags {
    OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_URI
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
}

/// A connection to the plain SQLite file `path` on SQLite's default VFS (never a store:
/// this program never makes onesync the default), created if `read_only` is false.
pub fn open_plain(path: &Path, read_only: bool) -> Result<Connection> {
    let mut query = if read_only { "mode=ro" } else { "mode=rwc" }.to_owned();
    // A WAL-mode file opens read-only only where its -shm can be made (not in a read-only
    // directory); with no -wal next to it there is nothing but the file to read, which
    // `immutable` reads without a -shm.
    if read_only && fs::symlink_metadata(sibling(path, "-wal")).is_err() {
        let mut header = [0u8; 20];
        let is_wal = File::open(path)
            .and_then(|mut f| f.read_exact(&mut header))
            .is_ok_and(|()| header[18..20] == [2, 2]);
        if is_wal {
            query.push_str("&immutable=1");
        }
    }
    let uri = format!("file:{}?{query}", uri_path(path)?);
    Connection::open_with_flags(&uri, uri_flags()).with_context(|| format!("opening {}", path.display()))
}

/// A connection to the store at `path` through the onesync VFS (registered first), created
/// if missing unless `read_only`.
pub fn open_store(path: &Path, read_only: bool) -> Result<Connection> {
    register()?;
    let mode = if read_only { "&mode=ro" } else { "" };
    let uri = format!("{}{mode}", store_uri(path)?);
    Connection::open_with_flags(&uri, uri_flags())
        .with_context(|| format!("opening the store {}", path.display()))
}

/// Registers the onesync VFS with this program's SQLite (once; later calls do nothing).
pub fn register() -> Result<()> {
    let conn = Connection::open_in_memory()?;
    onesync::register(&conn).context("registering the onesync VFS")?;
    Ok(())
}
