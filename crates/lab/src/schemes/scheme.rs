//! What a commit scheme is ([`Scheme`]) and the classes it is described by: below `mod.rs`,
//! the registry of modes, so that each scheme's file names these and not the registry.

use std::path::Path;

use anyhow::Result;
use rusqlite::Connection;

/// What a database of a scheme is on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Storage {
    /// A plain SQLite file (with its journal or log beside it): metered by the counting shim,
    /// power-cut on simulated files.
    PlainFile,
    /// A onesync store: metered by its own counters (`PRAGMA onesync_stats`), power-cut on
    /// the store's simulated disk.
    Store,
}

/// What a scheme promises about a transaction whose COMMIT returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// Survives a power cut.
    AtCommit,
    /// Atomic, but may be lost to a power cut until a later checkpoint or flush (WAL and
    /// onesync at synchronous=NORMAL or OFF).
    AfterCheckpoint,
    /// Not crash-safe: a power cut may leave half a transaction (a negative control).
    None,
}

/// What makes durable, later, a commit a onesync store showed before it was durable
/// (`synchronous=NORMAL` and `OFF`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeferredFlush {
    /// The store's background flush, within `Options::deferred_flush_interval` (NORMAL).
    Background,
    /// Only a flush of another kind: a checkpoint, close, `PRAGMA onesync_flush` or a FULL
    /// commit (OFF).
    OnDemand,
}

/// An RGB colour for charts.
pub type Rgb = (u8, u8, u8);

/// Chart colour of schemes without their own.
pub const DEFAULT_COLOR: Rgb = (0xd9, 0x5f, 0x02);

/// A commit scheme.
pub trait Scheme: Sync {
    /// The name on the command line and in the JSON output.
    fn name(&self) -> &'static str;

    /// One line for `--help`.
    fn description(&self) -> &'static str;

    /// Statements run on every new connection, in order (journal mode, synchronous, ...).
    fn pragmas(&self) -> &'static [&'static str];

    /// Opens (creating if need be) the database at `path` through the scheme's VFS, before
    /// its pragmas.
    fn connect(&self, path: &Path) -> Result<Connection>;

    /// What its database is on disk.
    fn storage(&self) -> Storage {
        Storage::PlainFile
    }

    /// What it promises at COMMIT.
    fn durability(&self) -> Durability {
        Durability::AtCommit
    }

    /// For a onesync store whose COMMIT returns before the commit is durable: what makes it
    /// durable later (crash tests then check that a prefix of the commits survives, holding
    /// every one reported durable).
    fn deferred_flush(&self) -> Option<DeferredFlush> {
        None
    }

    /// The `vfs-kill-torture --child` that runs it (WAL variants share `wal`).
    fn kill_child(&self) -> &'static str {
        self.name()
    }

    /// Its colour in the report's charts.
    fn chart_color(&self) -> Rgb {
        DEFAULT_COLOR
    }
}

impl dyn Scheme {
    /// Opens (creating if need be) the database at `path`, with the scheme's pragmas.
    pub fn open(&self, path: &Path) -> Result<Connection> {
        let conn = self.connect(path)?;
        apply_pragmas(&conn, self.pragmas())?;
        Ok(conn)
    }

    /// `stem` with the extension of the scheme's database (`.onesync` for a store, else `.db`).
    pub fn database_file(&self, stem: &str) -> String {
        match self.storage() {
            Storage::Store => format!("{stem}.onesync"),
            Storage::PlainFile => format!("{stem}.db"),
        }
    }
}

/// Runs `pragmas` on `conn` (journal_mode answers with a row; the others with nothing).
pub fn apply_pragmas(conn: &Connection, pragmas: &[&str]) -> Result<()> {
    for pragma in pragmas {
        let mut stmt = conn.prepare(pragma)?;
        let mut rows = stmt.query([])?;
        while rows.next()?.is_some() {}
    }
    Ok(())
}
