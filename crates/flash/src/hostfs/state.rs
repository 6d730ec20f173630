//! The filesystem's in-memory state: [`FlashFs`] and the types its fields hold (each open-able
//! file's state, the journal's position). Its calls are in the files beside this one: the file
//! API in `mod.rs`, the page cache in `cache.rs`, the journal in `journal.rs`, and so on.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::layout::{Inode, Layout};
use super::types::{FsConfig, FsCounters};
use crate::ids::{Lpn, TxId};
use crate::ssd::Ssd;

/// One open-able file's in-memory state.
#[derive(Clone, Debug)]
pub(super) struct FileState {
    pub(super) inode: Inode,
    /// File blocks that hold data (allocated blocks past these read as zeros: ext4's
    /// unwritten extents).
    pub(super) initialized: BTreeSet<u64>,
    /// The inode changed since its last commit (an fdatasync must commit).
    pub(super) needs_commit: bool,
    /// Written since the last commit: the modification time changed (only `fsync` cares).
    pub(super) times_changed: bool,
    /// X-FTL: the open drive transaction, the blocks written under it, and the inode as
    /// last committed (restored by an abort).
    pub(super) tx: Option<TxId>,
    pub(super) tx_written: BTreeSet<u64>,
    pub(super) committed: Option<Inode>,
}

/// The filesystem. Not thread-safe: share it behind a mutex.
pub struct FlashFs {
    pub(super) ssd: Ssd,
    pub(super) cfg: FsConfig,
    pub(super) layout: Layout,
    pub(super) inodes: Vec<Option<FileState>>,
    pub(super) names: HashMap<String, u32>,
    /// Data blocks in use (index: lpn - data_start).
    pub(super) used_blocks: Vec<bool>,
    pub(super) alloc_cursor: u64,
    /// Freed by operations not yet committed: reusable (and discardable) after the commit.
    /// (X-FTL: with the file whose commit releases them; `None`: any commit.)
    pub(super) freed_uncommitted: Vec<(Lpn, u64, Option<u32>)>,
    /// The page cache: every file block read or written since the mount.
    pub(super) cache: BTreeMap<(u32, u64), Box<[u8]>>,
    /// Cached blocks changed since they were last written to the drive.
    pub(super) dirty: BTreeSet<(u32, u64)>,
    /// Metadata blocks changed in the running transaction.
    pub(super) meta_dirty: BTreeSet<Lpn>,
    /// Blocks logged in the journal and not yet written home (newest content).
    pub(super) pending_home: BTreeMap<Lpn, Box<[u8]>>,
    pub(super) journal: JournalState,
    pub(super) running_since_us: Option<f64>,
    pub(super) next_generation: u64,
    pub(super) next_tx: TxId,
    pub(super) counters: FsCounters,
}

// The journal's position (`journal.rs` writes and replays it).

#[derive(Clone, Copy, Debug, Default)]
pub(super) struct JournalState {
    /// Next log position to write, and the sequence number of the next transaction.
    pub(super) head: u64,
    pub(super) next_seq: u64,
    /// Log blocks in use since the tail (wasted wrap-around space included).
    pub(super) used: u64,
}
