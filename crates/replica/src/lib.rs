//! Replication of a onesync store's databases to a Litestream replica: a directory or
//! S3-compatible storage, in Litestream 0.5's layout and LTX files, so that stock
//! `litestream restore` rebuilds a plain SQLite database from it.
//!
//! - `shipper`: the thread that ships a database's durable commits every `interval`,
//!   under a lease among the processes sharing the store, and its crash analysis.
//! - `position`: where shipping stands, saved beside the store, and why a lower bound of
//!   it is enough.
//! - `pages`: SQLite's pages out of a store snapshot, and LTX files of them.
//! - `error`: what goes wrong while replicating.
//! - `sabotage`: defects put back for negative controls (feature `test-hooks` only).
//!
//! The store's commit chain is not kept for the shipper: each batch ships the newest
//! content of every page changed since the last one (`Snapshot::changed_since`), as one
//! TXID, so a replica lagging through an outage costs no space in the store.

mod error;
mod pages;
pub mod position;
#[cfg(feature = "test-hooks")]
pub mod sabotage;
pub mod shipper;

pub use error::Error;
#[cfg(feature = "test-hooks")]
pub use sabotage::Sabotage;
pub use shipper::{Config, Logger, Shipper, Status};
