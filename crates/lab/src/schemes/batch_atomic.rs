//! The bundled SQLite's own batch atomic writes (SQLITE_ENABLE_BATCH_ATOMIC_WRITE), through
//! the counting shim with the file's batch-atomic capability passed through.

use std::path::Path;

use anyhow::Result;
use rusqlite::Connection;

use super::counting_vfs::{self, BatchAtomic};
use super::Scheme;

pub struct BatchAtomicWrites;

pub const BATCH_ATOMIC: BatchAtomicWrites = BatchAtomicWrites;

impl Scheme for BatchAtomicWrites {
    fn name(&self) -> &'static str {
        "batch-atomic"
    }

    fn description(&self) -> &'static str {
        "The bundled SQLite's own batch atomic writes (SQLITE_ENABLE_BATCH_ATOMIC_WRITE) on its \
         default VFS, journal_mode=PERSIST, synchronous=FULL (atomic only on F2FS)"
    }

    fn pragmas(&self) -> &'static [&'static str] {
        &["PRAGMA journal_mode=PERSIST", "PRAGMA synchronous=FULL"]
    }

    fn connect(&self, path: &Path) -> Result<Connection> {
        counting_vfs::open(path, BatchAtomic::PassedThrough)
    }
}
