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
mod txn;
mod write;

use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;
use std::path::Path;

/// Keys are SQLite integers.
pub type Key = i64;
/// A committed state of the tree. Version 0 is the empty tree made by `create`; the first
/// commit makes version 1.
pub type Version = u64;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// Not an mvbt file, or damaged beyond what recovery may repair (both slots of a node bad).
    #[error("{0}")]
    Corrupt(String),
    /// API misuse (no transaction, nested begin, unknown savepoint, value too large, ...).
    #[error("{0}")]
    Misuse(String),
    /// An as-of read below the oldest version the tree still keeps.
    #[error("version {asked} is no longer kept (oldest readable: {oldest})")]
    VersionGone { asked: Version, oldest: Version },
    /// Another process holds the file.
    #[error("{0}")]
    Busy(String),
}
pub type Result<T> = std::result::Result<T, Error>;

/// How an overflowing node splits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitPolicy {
    /// Becker et al.: the node dies, its live cells go to one or two new nodes.
    Classic,
    /// The paper's Algorithm 1: one new sibling takes the upper live half; the overflowed
    /// node keeps the lower half live and the moved cells dead.
    Lazy,
}

/// Settings. Node size is fixed at `create` and stored in the file; the policies are
/// per-open (they change how future writes behave, not the format).
#[derive(Clone, Debug)]
pub struct Config {
    /// 512 ..= 8192, a multiple of 512. Default 4096.
    pub node_size: usize,
    pub split: SplitPolicy,
    /// Cells kept free in a lazy node so that later inserts into it don't split it again
    /// while its dead cells can't be collected yet. Default 1.
    pub reserved_cells: usize,
    /// Commit stamps the version into the nodes it writes anyway instead of also
    /// rewriting the header node. Default true.
    pub metadata_embedding: bool,
    /// On overflow, first try to move cells into a sibling (dirties the sibling). Default false.
    pub sibling_redistribution: bool,
    /// Committed versions kept readable by as-of reads besides the latest (dead cells
    /// older than that are collected, lazily, in nodes a transaction dirties anyway).
    /// Default 0: only the latest.
    pub keep_versions: u64,
    /// Flush (fdatasync) at commit. Default true; false only for tests and for measuring
    /// CPU cost.
    pub durable: bool,
    /// Negative controls for the crash tests: deliberately broken recovery.
    #[doc(hidden)]
    pub sabotage: Option<Sabotage>,
}

/// Deliberate bugs, so that tests can show they would catch them.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sabotage {
    /// Recovery leaves cells and entries whose life ended at the reverted version dead
    /// instead of restoring their end version to infinity.
    SkipRevertEndVersions,
}

impl Default for Config {
    fn default() -> Config {
        Config::ls_mvbt()
    }
}

impl Config {
    /// All of the paper's optimisations: lazy split + one reserved cell, metadata embedding,
    /// no sibling redistribution, lazy GC.
    pub fn ls_mvbt() -> Config {
        Config {
            node_size: 4096,
            split: SplitPolicy::Lazy,
            reserved_cells: 1,
            metadata_embedding: true,
            sibling_redistribution: false,
            keep_versions: 0,
            durable: true,
            sabotage: None,
        }
    }
    /// The ablation's base: classic split, no embedding, no redistribution.
    pub fn mvbt() -> Config {
        Config {
            split: SplitPolicy::Classic,
            metadata_embedding: false,
            ..Config::ls_mvbt()
        }
    }
    /// MVBT + metadata embedding.
    pub fn mvbt_embedding() -> Config {
        Config {
            metadata_embedding: true,
            ..Config::mvbt()
        }
    }
    /// MVBT + lazy split.
    pub fn mvbt_lazy_split() -> Config {
        Config {
            split: SplitPolicy::Lazy,
            ..Config::mvbt()
        }
    }
}

/// The medium under a tree (a file, or `onesync_store::sim::SimDisk` in crash tests): the
/// page store's I/O trait, reused.
pub use onesync_store::io::StorageIo;

/// Running totals since open.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub commits: u64,
    pub rollbacks: u64,
    /// Node images written (commit batches and spills), header included.
    pub nodes_written: u64,
    pub nodes_read: u64,
    pub fsyncs: u64,
    pub splits: u64,
    /// Of `splits`, the lazy ones.
    pub lazy_splits: u64,
    /// Overflows absorbed by the reserved buffer instead of splitting.
    pub reserve_absorbed: u64,
    pub redistributions: u64,
    pub gc_cells: u64,
}

/// What the last open's recovery did.
#[derive(Clone, Debug, Default)]
pub struct RecoveryReport {
    /// The latest consistent (committed) version found.
    pub latest_version: Version,
    /// The uncommitted version reverted by Algorithm 2, if any.
    pub reverted_version: Option<Version>,
    pub nodes_scanned: u64,
    pub nodes_rewritten: u64,
    pub cells_reverted: u64,
    /// Slots whose checksum failed (torn writes of the interrupted commit).
    pub torn_slots: u64,
    pub micros: u64,
}

/// A transaction dirtying more nodes than this spills them (as a pager spills its cache).
pub const SPILL_LIMIT_NODES: usize = 2000;

/// One tree in one file. One writer transaction at a time; reads at any kept version.
pub struct Tree {
    io: Box<dyn StorageIo>,
    /// The exclusive `flock` of a tree opened by path, held for the tree's life.
    file_lock: Option<io::FileLock>,
    config: Config,
    node_size: usize,
    recovery: RecoveryReport,
    counters: Counters,
    /// The latest committed version.
    latest: Version,
    /// Versions below this may have lost cells to garbage collection in an earlier session
    /// (the latest version at open: older history is not provable after a restart).
    history_floor: Version,
    root: u64,
    root_level: u32,
    root_since: Version,
    /// Every node reachable from the root, through live and dead entries alike.
    cache: HashMap<u64, node::Node>,
    /// Per node id: the stamp of each slot's valid image (None: empty or torn).
    slots: Vec<[Option<Version>; 2]>,
    /// Node ids with room in the file and no parent entry.
    free: BTreeSet<u64>,
    /// Parent entries (and the header, for the root) naming each reachable node.
    refs: HashMap<u64, u32>,
    txn: Option<txn::Txn>,
    /// Set when a write failed half way: the in-memory state may no longer match the file.
    poisoned: Option<String>,
}

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

    fn holding(mut self, lock: io::FileLock) -> Tree {
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
