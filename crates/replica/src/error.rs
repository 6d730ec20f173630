//! What goes wrong while replicating (apart from the crate root, which every module
//! would otherwise import).

/// What goes wrong while replicating.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The replica (its URL, the object store, a file of it).
    #[error(transparent)]
    Replica(#[from] onesync_ltx::Error),
    /// The store.
    #[error(transparent)]
    Store(#[from] onesync_store::Error),
    /// The logical file does not hold a database SQLite could have written.
    #[error("not a SQLite database: {0}")]
    NotADatabase(String),
    /// Merging files into higher levels, or retention.
    #[error("compaction: {0}")]
    Compaction(String),
    /// This machine's files beside the store.
    #[error("{0}")]
    Local(String),
}
