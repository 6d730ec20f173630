//! LS-MVBT: a journal-free multi-version B+tree (Kim, Nam, Park, Won, FAST '14).
//!
//! One tree lives in one file of fixed-size nodes; every node id has two slots (ping-pong),
//! every cell a life span [sv, ev), and a commit writes each node it dirtied once and
//! flushes once. There is no journal: recovery reverts an interrupted version with the
//! paper's Algorithm 2. See README.md for the format and the protocol.
#![forbid(unsafe_code)]

mod check;
mod format;
pub mod fuzz;
mod io;
mod node;
mod read;
mod recovery;
mod tree;
mod txn;
mod types;
mod write;

use std::ops::Bound;
use std::path::Path;

pub use tree::Tree;
pub use types::{
    Config, Counters, Error, Key, RecoveryReport, Result, Sabotage, SplitPolicy, StorageIo, Version,
    SPILL_LIMIT_NODES,
};

use tree::FileLock;

impl Tree {
    /// Make a new, empty tree (version 0) in a new file; fails if the file exists and is
    /// not empty.
    pub fn create(path: &Path, config: Config) -> Result<Tree> {
        let (io, lock) = io::open_locked(path, true)?;
        if io.size()? != 0 {
            return Err(Error::Misuse(format!(
                "{} exists and is not empty; refusing to create a tree over it",
                path.display()
            )));
        }
        Tree::create_on(Box::new(io), config).map(|tree| tree.holding(lock))
    }
    /// Open an existing tree, recovering from an interrupted transaction. Takes an
    /// exclusive lock on the file (another process: `Error::Busy`).
    pub fn open(path: &Path, config: Config) -> Result<Tree> {
        let (io, lock) = io::open_locked(path, false)?;
        Tree::open_on(Box::new(io), config)
            .map(|tree| tree.holding(lock))
            .map_err(|e| naming(path, e))
    }
    /// Open, or create when the file is missing or empty.
    pub fn open_or_create(path: &Path, config: Config) -> Result<Tree> {
        let (io, lock) = io::open_locked(path, true)?;
        let tree = if io.size()? == 0 {
            Tree::create_on(Box::new(io), config)
        } else {
            Tree::open_on(Box::new(io), config).map_err(|e| naming(path, e))
        };
        tree.map(|tree| tree.holding(lock))
    }
    /// `create` on any medium (empty medium required).
    pub fn create_on(io: Box<dyn StorageIo>, config: Config) -> Result<Tree> {
        recovery::create(io, config)
    }
    /// `open` on any medium (no file lock).
    pub fn open_on(io: Box<dyn StorageIo>, config: Config) -> Result<Tree> {
        recovery::open(io, config)
    }

    fn holding(mut self, lock: FileLock) -> Tree {
        self.file_lock = Some(lock);
        self
    }

    pub fn config(&self) -> &Config {
        &self.config
    }
    pub fn recovery(&self) -> &RecoveryReport {
        &self.recovery
    }
    pub fn counters(&self) -> Counters {
        self.counters.clone()
    }
    /// The latest committed version.
    pub fn latest_version(&self) -> Version {
        self.latest
    }
    /// The oldest committed version as-of reads may ask for.
    pub fn oldest_readable_version(&self) -> Version {
        self.latest
            .saturating_sub(self.config.keep_versions)
            .max(self.history_floor)
    }
    pub fn in_transaction(&self) -> bool {
        self.txn.is_some()
    }
    /// The largest value `put` accepts: at least four cells must fit a node.
    pub fn max_value_len(&self) -> usize {
        format::max_value_len(self.node_size)
    }
    /// The version of the open write transaction, if any.
    pub fn transaction_version(&self) -> Option<Version> {
        self.txn.as_ref().map(|t| t.version)
    }

    /// The value of `key` now (inside a transaction: including its own writes).
    pub fn get(&mut self, key: Key) -> Result<Option<Vec<u8>>> {
        let at = self.current_read_version();
        self.read_get(key, at)
    }
    /// The value of `key` as of committed version `version`.
    pub fn get_at(&mut self, key: Key, version: Version) -> Result<Option<Vec<u8>>> {
        self.check_readable(version)?;
        self.read_get(key, version)
    }
    /// Up to `limit` pairs with keys in the range, ascending, now (`at: None`) or as of a
    /// committed version. Callers page through a big range by calling again from the last
    /// key returned.
    pub fn range(
        &mut self,
        low: Bound<Key>,
        high: Bound<Key>,
        at: Option<Version>,
        limit: usize,
    ) -> Result<Vec<(Key, Vec<u8>)>> {
        let version = match at {
            Some(v) => {
                self.check_readable(v)?;
                v
            }
            None => self.current_read_version(),
        };
        self.read_range(low, high, version, limit)
    }
    /// Live pairs now (or as of `at`).
    pub fn count(&mut self, at: Option<Version>) -> Result<u64> {
        let version = match at {
            Some(v) => {
                self.check_readable(v)?;
                v
            }
            None => self.current_read_version(),
        };
        self.read_count(version)
    }

    /// Start the write transaction (its version is `latest_version() + 1`).
    pub fn begin(&mut self) -> Result<()> {
        self.txn_begin()
    }
    /// Insert or replace; returns whether the key existed.
    pub fn put(&mut self, key: Key, value: &[u8]) -> Result<bool> {
        self.txn_put(key, value)
    }
    /// Delete; returns whether the key existed.
    pub fn delete(&mut self, key: Key) -> Result<bool> {
        self.txn_delete(key)
    }
    /// Mark a savepoint inside the transaction; returns its depth (1 = outermost).
    pub fn savepoint(&mut self) -> Result<usize> {
        self.txn_savepoint()
    }
    /// Undo everything after savepoint `depth` (it stays open).
    pub fn rollback_to(&mut self, depth: usize) -> Result<()> {
        self.txn_rollback_to(depth)
    }
    /// Forget savepoints `depth` and deeper, keeping their changes.
    pub fn release(&mut self, depth: usize) -> Result<()> {
        self.txn_release(depth)
    }
    /// Write the dirty nodes and flush once; returns the new version. A transaction that
    /// changed nothing commits without I/O and returns the unchanged version.
    pub fn commit(&mut self) -> Result<Version> {
        self.txn_commit()
    }
    /// Abort the transaction: put back the before-images of what it touched (and rewrite
    /// the ones it spilled). Crash recovery, which has no before-images, uses Algorithm 2.
    pub fn rollback(&mut self) -> Result<()> {
        self.txn_rollback()
    }
    /// Write the transaction's dirty nodes now, uncommitted, and flush (as a pager spills
    /// its cache). Used by the recovery experiment to leave a big aborted transaction on
    /// disk, and automatically when a transaction dirties more than the cache holds.
    pub fn spill(&mut self) -> Result<()> {
        self.txn_spill()
    }
    /// Check the tree's invariants (ordering, life spans, parent/child ranges, checksums);
    /// returns a description of the first problem.
    pub fn check(&mut self) -> Result<()> {
        self.check_tree()
    }

    fn current_read_version(&self) -> Version {
        self.txn.as_ref().map(|t| t.version).unwrap_or(self.latest)
    }

    fn check_readable(&self, version: Version) -> Result<()> {
        if version > self.latest {
            return Err(Error::Misuse(format!(
                "version {version} is not committed (latest committed: {})",
                self.latest
            )));
        }
        let oldest = self.oldest_readable_version();
        if version < oldest {
            return Err(Error::VersionGone {
                asked: version,
                oldest,
            });
        }
        Ok(())
    }
}

/// A corruption error naming the file it is about.
fn naming(path: &Path, error: Error) -> Error {
    match error {
        Error::Corrupt(m) => Error::Corrupt(format!("{}: {m}", path.display())),
        other => other,
    }
}
