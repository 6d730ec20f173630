//! Replication of a onesync store's databases to a Litestream replica: a directory or
//! S3-compatible storage, in Litestream 0.5's layout and LTX files, so that stock
//! `litestream restore` rebuilds a plain SQLite database from it.
//!
//! - `shipper`: the thread that ships a database's durable commits every `interval`,
//!   under a lease among the processes sharing the store, and its crash analysis.
//! - `position`: where shipping stands, saved beside the store, and why a lower bound of
//!   it is enough.
//! - `pages`: SQLite's pages out of a store snapshot, and LTX files of them.
//! - `sabotage`: defects put back for negative controls (feature `test-hooks` only).
//!
//! The store's commit chain is not kept for the shipper: each batch ships the newest
//! content of every page changed since the last one (`Snapshot::changed_since`), as one
//! TXID, so a replica lagging through an outage costs no space in the store.

mod pages;
pub mod position;
#[cfg(feature = "test-hooks")]
pub mod sabotage;
pub mod shipper;

#[cfg(feature = "test-hooks")]
pub use sabotage::Sabotage;
pub use shipper::{Config, Logger, Shipper, Status};

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
