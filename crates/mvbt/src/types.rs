//! The values the tree's calls take and give: keys, versions, errors, configuration,
//! counters and the recovery report.

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
    /// The first write transaction after a recovery does not neutralise the reverted
    /// version's images (the write open defers) before reusing its number.
    SkipDeferredRevert,
    /// Open's walk does not fall back to a node's other slot when the slot claiming the
    /// newer stamp is torn.
    NoFallbackFromTornClaim,
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
    /// Images of the reverted version rewritten or zeroed. Open defers that write to the
    /// first write transaction (`Tree::begin`), so this is 0 until then.
    pub nodes_rewritten: u64,
    pub cells_reverted: u64,
    /// Slots found torn (a failed checksum) among those open verified: the images of the
    /// newest version and each reachable node's newest (torn writes of the interrupted
    /// commit).
    pub torn_slots: u64,
    pub micros: u64,
}

/// A transaction dirtying more nodes than this spills them (as a pager spills its cache).
pub const SPILL_LIMIT_NODES: usize = 2000;
