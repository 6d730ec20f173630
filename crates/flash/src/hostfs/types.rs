//! The filesystem's public types: mount options, errors, file handles, counters, the longest
//! file name.

use crate::FlashError;

/// Longest file name.
pub const MAX_NAME: usize = 96;

/// How the filesystem makes a file's changes durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Journaling {
    /// ext4 `data=ordered`: metadata journaled, data written home first.
    Ordered,
    /// ext4 `data=journal`: data and metadata journaled.
    Data,
    /// No journal: each file's writes are a drive transaction committed by `fsync`.
    XFtl,
}

/// Mount and format settings.
#[derive(Clone, Debug)]
pub struct FsConfig {
    pub journaling: Journaling,
    /// Journal size in blocks (its superblock included). Format only.
    pub journal_blocks: u64,
    /// Inode table size in blocks (16 inodes per KiB of block... see [`INODE_SIZE`]). Format only.
    pub inode_blocks: u64,
    /// Commit a running journal transaction this old at the next call (jbd2: 5 s).
    pub commit_interval_us: f64,
    /// Send discards (trim) for freed blocks after the freeing operation commits.
    pub discard: bool,
    /// Write dirty cached blocks back once more than this many are dirty.
    pub dirty_limit_blocks: usize,
    /// Smallest allocation when a file grows (ext4 preallocation), in blocks.
    pub min_alloc_blocks: u64,
}

impl Default for FsConfig {
    fn default() -> Self {
        FsConfig {
            journaling: Journaling::Ordered,
            journal_blocks: 256,
            inode_blocks: 4,
            commit_interval_us: 5_000_000.0,
            discard: false,
            dirty_limit_blocks: 4096,
            min_alloc_blocks: 16,
        }
    }
}

impl FsConfig {
    pub fn with_journaling(journaling: Journaling) -> FsConfig {
        FsConfig {
            journaling,
            ..FsConfig::default()
        }
    }
}

/// Why a filesystem call failed.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("the drive has lost power")]
    PowerLost,
    #[error("drive error: {0}")]
    Drive(FlashError),
    #[error("not a onesync flash filesystem: {0}")]
    NotFormatted(String),
    #[error("the filesystem is corrupt: {0}")]
    Corrupt(String),
    #[error("no such file: {0}")]
    NotFound(String),
    #[error("stale file handle (the file was deleted)")]
    StaleHandle,
    #[error("file name too long ({0} bytes, at most {MAX_NAME})")]
    NameTooLong(usize),
    #[error("no free inode (the inode table holds {0} files)")]
    TooManyFiles(usize),
    #[error("no space left on the filesystem: {0}")]
    NoSpace(String),
    #[error("the filesystem is too small for its layout ({0} blocks)")]
    TooSmall(u64),
}

impl From<FlashError> for FsError {
    fn from(e: FlashError) -> Self {
        match e {
            FlashError::PowerLost => FsError::PowerLost,
            other => FsError::Drive(other),
        }
    }
}

pub type FsResult<T> = Result<T, FsError>;

/// An open file: its inode number and the inode's generation (a deleted and reused inode
/// is told apart).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FileId {
    pub ino: u32,
    pub generation: u64,
}

/// What the filesystem did, in blocks and calls.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FsCounters {
    pub fsyncs: u64,
    /// Blocks of file data written to their home location (X-FTL: under a transaction).
    pub data_blocks_written: u64,
    /// Metadata blocks written to their home location (checkpoints, X-FTL transactions).
    pub meta_blocks_written: u64,
    /// Journal blocks written (descriptors, logged blocks, commit blocks, journal superblock).
    pub journal_blocks_written: u64,
    pub journal_commits: u64,
    pub checkpoints: u64,
    pub flushes: u64,
    pub tx_commits: u64,
    pub tx_aborts: u64,
    pub files_created: u64,
    pub files_deleted: u64,
}

/// What mounting cost.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MountReport {
    /// Simulated time from the start of the mount to its end.
    pub sim_us: f64,
    pub journal_transactions_replayed: u64,
    pub blocks_read: u64,
}
