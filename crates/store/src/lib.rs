//! # onesync-store
//!
//! A failure-atomic page store: a single file holding logical files of fixed-size pages,
//! where a transaction's page writes, file creations, deletions and size changes become
//! durable together with exactly one flush, or not at all.
//!
//! ## How a commit works
//! Pages are written out of place, to free *slots*; committed pages are never overwritten.
//! A commit writes its *commit record* (its sequence number, each page it maps with the
//! CRC-32C of that page's content, new logical sizes, and where the next record will go)
//! followed by its pages as one contiguous write, then issues one `fdatasync`. Records form a
//! chain through the slots, starting from the last *mapping checkpoint*; recovery follows it
//! and stops at the first record that is missing, torn, out of sequence, off the chain, or
//! whose pages do not match their checksums. Checkpoints, taken every `checkpoint_interval`
//! commits, write the mapping table only; no data page is ever copied. The file starts
//! small (256 KiB of slots) and grows ahead of the commits in steps of zeros written and
//! flushed (a quarter of itself, 256 KiB to 64 MiB), so a commit's flush journals no
//! filesystem metadata.
//!
//! Small changes (SQLite's change counter on page 1, say) are carried in the commit record as
//! an overlay on the page instead of a new slot (`Options::embed_limit`).
//!
//! Commits from several threads take consecutive places in the chain from a sequencer, write
//! concurrently and share flushes: one committer flushes for every commit written so far
//! (group commit).
//!
//! ## Durability contract
//! After a crash at any instant, opening the store yields exactly the state after some prefix
//! of the commits in sequence order, and that prefix contains every commit whose `commit()`
//! returned `Ok`. Never part of a transaction; never a corrupt store. A commit that returned
//! an error with a sequence number (`CommitError::seq`) may or may not be in that prefix; one
//! without did not happen. After a failed write or flush the store refuses further commits
//! (`Error::Poisoned`), since it can no longer tell what reached the disk; reopening recovers.
//!
//! A slot is reused only once the commit that superseded it is covered by a durable checkpoint
//! (so no record that recovery may replay names it) and no open snapshot can read it.
//!
//! ## Concurrency
//! Any number of processes may open a store, read-write or read-only (see `sharing.rs`):
//! each sees every process's commits in its new snapshots, and the durability contract holds
//! for them all. Within a process, any number of threads may run transactions and
//! snapshots. Transactions see the state they began on plus their own writes and fail with
//! `Error::Conflict` if another commit changed the same page, file size or file since (first
//! committer wins). Snapshots show the latest *durable* commit, so a power cut never takes
//! back what a reader saw; transactions begin on the latest *written* one, which may still
//! be waiting for its flush (their own commit is later in the chain and becomes durable
//! only with it). See the README's "The crash contract".
#![forbid(unsafe_code)]

mod alloc;
mod engine;
mod error;
mod format;
mod free_set;
pub mod io;
mod lease;
mod loading;
mod locks;
mod nonce;
mod offline_check;
mod options;
mod recovery;
mod shared_words;
mod sharing;
pub mod sim;
mod state;
mod store;
mod txn;
mod validation;
pub mod wakeup;

pub use engine::PendingCommit;
pub use error::{CommitError, Error, Result};
pub use format::{FORMAT_VERSION, MAX_PAGE_SIZE, MIN_PAGE_SIZE};
pub use offline_check::{check_file, CheckReport};
pub use options::{Options, Sabotage, Stats};
pub use shared_words::{SharedWords, SideFileMapper};
pub use sharing::SIDE_FILE_LEN;
pub use store::{Store, WaitingWriter};
pub use txn::{ChangedPages, FileId, Snapshot, Transaction};
pub use validation::PageMerger;

/// Layout facts for tests and tools that inspect or damage store files deliberately.
pub mod layout {
    /// The on-disk structures, each an `onesync_codec::OnDisk` (for the decoder fuzz
    /// targets in `fuzz/`).
    pub use crate::format::{Checkpoint, Header, Manifest, Record};
    pub use crate::format::{HEADER_BLOCK, HEADER_LEN, MAGIC, SLOT_BASE};
    /// The byte of the store file whose OFD lock a process holds while it flushes for every
    /// process (exclusive), and others wait on shared for a flush announced to cover them.
    pub use crate::sharing::FLUSH as FLUSH_LOCK;
    pub use crate::sharing::SHM_FLUSH_COVERS as SIDE_FILE_FLUSH_COVERS;
    pub use crate::sharing::SHM_PROGRESS as SIDE_FILE_PROGRESS;

    /// Where the side file of the store at `path` lives (it exists while a read-write
    /// process has the store open).
    pub fn side_file(path: &std::path::Path) -> crate::Result<std::path::PathBuf> {
        let file = std::fs::File::open(path).map_err(|e| crate::Error::io("opening the store file", e))?;
        let probe = crate::io::FileIo::new(
            file.try_clone()
                .map_err(|e| crate::Error::io("opening the store file", e))?,
        );
        let header = crate::recovery::newest_header(&probe)?;
        crate::sharing::side_file_path(&file, header.store_id)
    }
}
