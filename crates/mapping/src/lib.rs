//! The page store's page → slot mapping, kept on disk in immutable sorted runs, read on
//! demand through a bounded cache, and written by a checkpoint in proportion to what changed.
//!
//! A [`Stack`] of runs (newest first) maps each [`Key`] (file, page) to a [`Mapped`] (slot,
//! CRC, version, overlay) or to a tombstone (with the version of the commit that dropped it).
//! Each run ([`RunRef`]) is a static B+tree of checksummed blocks, built bottom-up by a
//! [`RunBuilder`]. [`Stack::checkpoint`] writes a sorted delta as a new run, merged with the
//! newest runs per a [`MergePolicy`]. Blocks are read through the store's [`BlockIo`] and a
//! shared [`Cache`]; they are written through its [`BlockSink`]. The byte formats are in
//! [`format`](mod@format); the README has the design.
#![forbid(unsafe_code)]

mod cache;
mod check;
pub mod format;
pub mod fuzz;
mod merge;
mod run;
mod stack;
pub mod testing;
mod types;

pub use cache::{Cache, CacheStats};
pub use check::CheckReport;
pub use run::{RunBuilder, RunIter};
pub use stack::{CheckpointOutcome, MergePolicy, Stack};
pub use types::{BlockIo, BlockRef, BlockSink, Error, Key, Mapped, RunRef, Value, NO_SLOT};
