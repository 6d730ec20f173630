//! SQLite on the simulated flash SSD (`onesync-lab flash`, the X-FTL paper): its journal modes
//! on the simulated drive's filesystem, which is mounted with ordered journaling or X-FTL.

use std::path::Path;

use anyhow::{bail, Context, Result};
use onesync_flash::hostfs::Journaling;
use rusqlite::{Connection, OpenFlags};

use super::Scheme;
use crate::sim::flash_files::{flash_files, FLASH_VFS};

/// SQLite's page size on the drive: one flash page (8 KiB), as a flash-aware setup would.
const SQLITE_PAGE_SIZE: u32 = 8192;

/// A journal mode on the simulated drive's filesystem.
pub struct FlashScheme {
    pub name: &'static str,
    pub description: &'static str,
    /// SQLite's journal_mode.
    pub journal_mode: &'static str,
    /// How the filesystem is mounted.
    pub journaling: Journaling,
    /// Free blocks the scheme's own files need besides the database (a full WAL, a rollback
    /// journal, or nothing), kept free when the drive is aged.
    pub hot_room_blocks: u64,
    /// Whether it has a log to checkpoint before a measurement starts.
    pub has_log: bool,
}

pub const RBJ: FlashScheme = FlashScheme {
    name: "rbj",
    description: "Rollback journal (DELETE) on the ordered-journaling filesystem",
    journal_mode: "DELETE",
    journaling: Journaling::Ordered,
    hot_room_blocks: 120,
    has_log: false,
};

pub const WAL: FlashScheme = FlashScheme {
    name: "wal",
    description: "WAL (synchronous=FULL) on the ordered-journaling filesystem",
    journal_mode: "WAL",
    journaling: Journaling::Ordered,
    // 1,000 frames: a full log.
    hot_room_blocks: 1_100,
    has_log: true,
};

pub const XFTL: FlashScheme = FlashScheme {
    name: "xftl",
    description: "SQLite's journal in memory, the filesystem mounted X-FTL",
    journal_mode: "MEMORY",
    journaling: Journaling::XFtl,
    hot_room_blocks: 40,
    has_log: false,
};

impl Scheme for FlashScheme {
    fn name(&self) -> &'static str {
        self.name
    }

    fn description(&self) -> &'static str {
        self.description
    }

    /// None beyond what [`FlashScheme::connect`] sets: the page size must come before the
    /// journal mode, and the journal mode is checked.
    fn pragmas(&self) -> &'static [&'static str] {
        &[]
    }

    /// Opens `path` on the installed filesystem (see `sim::flash_files`).
    fn connect(&self, path: &Path) -> Result<Connection> {
        flash_files()?;
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags_and_vfs(path, flags, FLASH_VFS)
            .with_context(|| format!("opening {} on the simulated drive", path.display()))?;
        conn.execute_batch(&format!(
            "PRAGMA page_size={SQLITE_PAGE_SIZE}; PRAGMA synchronous=FULL;"
        ))?;
        let set: String = conn.query_row(&format!("PRAGMA journal_mode={}", self.journal_mode), [], |r| {
            r.get(0)
        })?;
        if !set.eq_ignore_ascii_case(self.journal_mode) {
            bail!("journal_mode={} was refused (got {set})", self.journal_mode);
        }
        Ok(conn)
    }
}
