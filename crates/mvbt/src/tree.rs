//! The tree's state: [`Tree`] and the types its fields hold (the file lock, the write
//! transaction's before-images and savepoints). Its calls are in the files beside this one:
//! the public API in `lib.rs`, I/O in `io.rs`, transactions in `txn.rs`, and so on.

use crate::node::Node;
use crate::types::{Config, Counters, RecoveryReport, StorageIo, Version};
use nix::fcntl::Flock;
use std::collections::{BTreeSet, HashMap};
use std::fs::File;

/// One tree in one file. One writer transaction at a time; reads at any kept version.
pub struct Tree {
    pub(crate) io: Box<dyn StorageIo>,
    /// The exclusive `flock` of a tree opened by path, held for the tree's life.
    pub(crate) file_lock: Option<FileLock>,
    pub(crate) config: Config,
    pub(crate) node_size: usize,
    pub(crate) recovery: RecoveryReport,
    pub(crate) counters: Counters,
    /// The latest committed version.
    pub(crate) latest: Version,
    /// Versions below this may have lost cells to garbage collection in an earlier session
    /// (the latest version at open: older history is not provable after a restart).
    pub(crate) history_floor: Version,
    pub(crate) root: u64,
    pub(crate) root_level: u32,
    pub(crate) root_since: Version,
    /// Every node reachable from the root, through live and dead entries alike.
    pub(crate) cache: HashMap<u64, Node>,
    /// Per node id: the stamp of each slot's valid image (None: empty or torn).
    pub(crate) slots: Vec<[Option<Version>; 2]>,
    /// Node ids with room in the file and no parent entry.
    pub(crate) free: BTreeSet<u64>,
    /// Parent entries (and the header, for the root) naming each reachable node.
    pub(crate) refs: HashMap<u64, u32>,
    pub(crate) txn: Option<Txn>,
    /// The uncommitted version open reverted in memory whose images are still on disk,
    /// until the next write transaction neutralises them (`recovery.rs`).
    pub(crate) pending_revert: Option<PendingRevert>,
    /// Set when a write failed half way: the in-memory state may no longer match the file.
    pub(crate) poisoned: Option<String>,
}

/// The exclusive `flock` on a tree's file (released when dropped).
pub(crate) type FileLock = Flock<File>;

/// An interrupted version that open reverted in memory (Algorithm 2) but not yet on disk:
/// the file still holds its images, exactly as the crash left them, so another crash
/// before [`Tree::settle_revert`] just makes the next open do the same recovery again.
pub(crate) struct PendingRevert {
    pub version: Version,
    /// Reachable nodes whose newest image is stamped `version` (their cache entries are the
    /// reverted nodes, to be written back stamped as a spill).
    pub rewrite: BTreeSet<u64>,
}

// The write transaction's state (`txn.rs` runs it).

pub(crate) type RootState = (u64, u32, Version);

pub(crate) struct Txn {
    pub version: Version,
    /// Nodes to write at commit.
    pub dirty: BTreeSet<u64>,
    /// Nodes whose newest on-disk image is a spill of this transaction.
    pub spilled: BTreeSet<u64>,
    /// Each touched node as it was before the transaction (None: allocated by it).
    pub pre: HashMap<u64, Option<Node>>,
    pub savepoints: Vec<Savepoint>,
    /// Nodes taken from the free set (they go back on rollback).
    pub allocated: Vec<u64>,
    /// Nodes whose last reference went; free once the commit is durable.
    pub pending_free: Vec<u64>,
    /// Reference count changes, to undo on rollback.
    pub ref_log: Vec<(u64, i32)>,
    pub root_before: RootState,
    pub last_modified: Option<u64>,
}

pub(crate) struct Savepoint {
    /// Node images as they were when the savepoint was taken (copy on first write after
    /// it), with whether the node was dirty then.
    pub(crate) images: HashMap<u64, (Option<Node>, bool)>,
    pub(crate) allocated: usize,
    pub(crate) pending_free: usize,
    pub(crate) ref_log: usize,
    pub(crate) root: RootState,
}
