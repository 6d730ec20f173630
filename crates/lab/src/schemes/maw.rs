//! The onesync-f2fs VFS: a plain SQLite file on F2FS, each transaction one kernel atomic
//! write (F2FS_IOC_START/COMMIT_ATOMIC_WRITE), SQLite's journal in memory.

use std::path::Path;

use anyhow::Result;
use rusqlite::Connection;

use super::Scheme;
use crate::sqlite::open_f2fs;

pub struct Maw;

pub const MAW: Maw = Maw;

impl Scheme for Maw {
    fn name(&self) -> &'static str {
        "maw"
    }

    fn description(&self) -> &'static str {
        "The onesync-f2fs VFS: a plain SQLite file on F2FS, each transaction one kernel atomic \
         write, journal in memory (synchronous=FULL; needs F2FS, e.g. `onesync-lab vm`)"
    }

    fn pragmas(&self) -> &'static [&'static str] {
        &["PRAGMA synchronous=FULL"]
    }

    fn connect(&self, path: &Path) -> Result<Connection> {
        open_f2fs(path)
    }
}
