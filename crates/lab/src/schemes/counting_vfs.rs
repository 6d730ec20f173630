//! The counting shim the stock schemes run through: a VFS of the onesync crate registered
//! with pass-through files only (journals, WAL and shared memory included), so SQLite behaves
//! as over its default VFS while every `xWrite` and `xSync` is counted
//! (`onesync_vfs::passthrough_io`).

use std::path::Path;

use anyhow::{anyhow, Context, Result};
use rusqlite::{Connection, OpenFlags};

use crate::sqlite::BUSY_TIMEOUT;

/// The plain shim's VFS name.
const COUNTING_VFS: &str = "onesync-counting";
/// The shim that lets the bundled SQLite use batch atomic writes (scheme batch-atomic).
const COUNTING_BATCH_VFS: &str = "onesync-counting-batch";
/// `SQLITE_IOCAP_BATCH_ATOMIC`: what the unix VFS of a SQLite built with batch atomic writes
/// reports for a file on F2FS.
const SQLITE_IOCAP_BATCH_ATOMIC: i32 = 0x4000;

/// Whether the shim passes the file's batch-atomic capability through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchAtomic {
    /// Hidden, as stock builds (which lack it) behave on F2FS.
    Hidden,
    /// Passed through: SQLite may commit with one batch atomic write.
    PassedThrough,
}

/// Registers the counting shims (idempotent): pass-through files for everything, counted.
/// The lab's bundled SQLite is built with batch atomic writes; the plain shim hides the
/// capability so the stock modes behave as stock builds (which lack it) do on F2FS, and the
/// batch shim passes it through.
fn register() -> Result<()> {
    for (name, hidden_caps) in [(COUNTING_VFS, SQLITE_IOCAP_BATCH_ATOMIC), (COUNTING_BATCH_VFS, 0)] {
        onesync_vfs::register_with(
            &onesync_vfs::api_table_from_sys!(rusqlite::ffi),
            onesync_vfs::RegisterOptions {
                name: name.to_owned(),
                make_default: false,
                main_db: Box::new(onesync_vfs::MaskedPassThroughFactory { hidden_caps }),
                memory_journals: false,
                files: None,
            },
        )
        .map_err(|e| anyhow!("registering the counting VFS {name}: {e}"))?;
    }
    Ok(())
}

/// Opens (creating if need be) the plain SQLite file at `path` through the counting shim.
pub fn open(path: &Path, batch_atomic: BatchAtomic) -> Result<Connection> {
    register()?;
    let flags =
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let vfs = match batch_atomic {
        BatchAtomic::Hidden => COUNTING_VFS,
        BatchAtomic::PassedThrough => COUNTING_BATCH_VFS,
    };
    let conn = Connection::open_with_flags_and_vfs(path, flags, vfs)
        .with_context(|| format!("opening {} through the counting VFS", path.display()))?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    Ok(conn)
}
