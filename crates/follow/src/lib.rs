//! Read replicas (issue 43, item 5): a onesync store that follows a Litestream replica.
//! The latest state is restored into a new store, then each new LTX file of the replica is
//! applied as **one store transaction** on the logical file `main`, together with where
//! following stands (the logical file `onesync-follow`). A process that opens the store
//! read-only (`file:OUT?vfs=onesync&mode=ro`) therefore sees, at every read transaction, the
//! source database as of one TXID: a consistent prefix of its history.
//!
//! - `state`: where following stands, kept in the store itself (so a killed follower
//!   resumes exactly where its last commit left it).
//! - `apply`: one LTX file's SQLite pages written into a store transaction (store pages and
//!   SQLite pages need not be the same size).
//! - `follower`: [`Follower`]: which file comes next (level 0, else the higher levels that
//!   cover the TXIDs needed, else the newest snapshot), and the loop's steps.

mod apply;
pub mod follower;
pub mod state;

pub use follower::{Applied, Follower, Poll};
pub use state::{read_state, FollowState, DATABASE_FILE, STATE_FILE};

/// What goes wrong while following.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The replica (its URL, the object store, a file of it).
    #[error(transparent)]
    Replica(#[from] onesync_ltx::Error),
    /// The follower's store.
    #[error(transparent)]
    Store(#[from] onesync_store::Error),
    /// The replica no longer continues what this store applied, or the store was changed
    /// by someone else: following cannot go on without a new restore.
    #[error("{0}")]
    Diverged(String),
    /// The store given is not one this replica's follower made.
    #[error("{0}")]
    Usage(String),
}

impl Error {
    /// Whether the next poll may succeed without anyone doing anything: the object store
    /// unreachable, a file gone between listing and reading it (compaction, retention), a
    /// replica that does not restore yet (empty, or being written). Nothing was applied.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Error::Replica(
                onesync_ltx::Error::Storage { .. }
                    | onesync_ltx::Error::Io { .. }
                    | onesync_ltx::Error::Restore(_)
            )
        )
    }
}
