//! Errors the drive returns. Host misuse is an error, never a panic.

use crate::ids::{Lpn, TxId};

#[derive(Debug, thiserror::Error)]
pub enum FlashError {
    /// The drive is off: every call after a power cut until [`crate::Ssd::restart`].
    #[error("the drive has lost power")]
    PowerLost,
    #[error("logical page {lpn} is out of range (the drive has {logical_pages})")]
    OutOfRange { lpn: Lpn, logical_pages: u64 },
    /// Garbage collection cannot free a block: every candidate block is entirely valid
    /// (too little over-provisioning, or active transactions pin too many old copies).
    #[error("no space: garbage collection found no block to reclaim")]
    NoSpace,
    /// Transaction id 0 is reserved.
    #[error("transaction id {0} is not valid (0 is reserved)")]
    UnknownTx(TxId),
    #[error("buffer of {got} bytes, the page size is {expected}")]
    BadLength { expected: usize, got: usize },
    #[error("invalid drive configuration: {0}")]
    BadConfig(String),
    /// A mapped page failed its checks (ECC, OOB lpn or CRC): the FTL lost data. Never
    /// happens unless a [`crate::Sabotage`] is on (or there is a bug).
    #[error("logical page {lpn}: {detail}")]
    Corrupt { lpn: Lpn, detail: String },
    /// The metadata area does not decode into a consistent mapping.
    #[error("metadata is inconsistent: {0}")]
    BadMetadata(String),
    /// The FTL broke a NAND rule (programming a page that is not erased, out of order) or
    /// another internal invariant. A bug.
    #[error("internal error: {0}")]
    Internal(String),
}
