//! The crate's error: what goes wrong while following a replica, and which errors the next
//! poll may clear.

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
