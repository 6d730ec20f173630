//! LS-MVBT (`onesync-lab mvbt`, the LS-MVBT paper): a table kept in the `mvbt` virtual table of
//! the onesync extension, over `onesync-mvbt`, in one of the engine's variants (the
//! ablation's steps). The database itself is opened with SQLite's default VFS.

use std::path::Path;

use anyhow::{anyhow, Context, Result};
use rusqlite::{Connection, OpenFlags};

use super::Scheme;

/// An `mvbt` virtual table with one of the engine's variants.
#[derive(Debug, PartialEq, Eq)]
pub struct MvbtTable {
    /// The vtable's `variant=` argument, also the scheme's name.
    pub variant: &'static str,
    pub description: &'static str,
}

pub const MVBT: MvbtTable = MvbtTable {
    variant: "mvbt",
    description: "The ablation's base: classic split, no metadata embedding",
};

pub const MVBT_EMBEDDING: MvbtTable = MvbtTable {
    variant: "mvbt+embedding",
    description: "MVBT + metadata embedding",
};

pub const MVBT_LAZY_SPLIT: MvbtTable = MvbtTable {
    variant: "mvbt+lazy-split",
    description: "MVBT + lazy split",
};

pub const LS_MVBT: MvbtTable = MvbtTable {
    variant: "ls-mvbt",
    description: "All of the paper's optimisations: lazy split, metadata embedding, lazy GC",
};

impl MvbtTable {
    /// Creates the table `kv(key, value)` of this variant, its tree in `tree_path`.
    pub fn create_table(&self, conn: &Connection, tree_path: &Path) -> Result<()> {
        conn.execute_batch(&format!(
            "CREATE VIRTUAL TABLE kv USING mvbt(file='{}', variant='{}', keep_versions=0)",
            tree_path.display(),
            self.variant
        ))?;
        Ok(())
    }
}

impl Scheme for MvbtTable {
    fn name(&self) -> &'static str {
        self.variant
    }

    fn description(&self) -> &'static str {
        self.description
    }

    fn pragmas(&self) -> &'static [&'static str] {
        &[]
    }

    fn connect(&self, path: &Path) -> Result<Connection> {
        open_with_mvbt(path)
    }
}

/// Opens (creating) a database with SQLite's default VFS and the `mvbt` module registered.
pub fn open_with_mvbt(path: &Path) -> Result<Connection> {
    register_mvbt()?;
    let flags =
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    Connection::open_with_flags(path, flags).with_context(|| format!("opening {}", path.display()))
}

/// Makes every connection opened from now on have the `mvbt` module (idempotent).
pub fn register_mvbt() -> Result<()> {
    onesync_mvbt_vtab::register_mvbt_for_new_connections(&onesync_vfs::api_table_from_sys!(rusqlite::ffi))
        .map_err(|e| anyhow!("registering the mvbt module: {e}"))
}
