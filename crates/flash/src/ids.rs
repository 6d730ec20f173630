//! The numbers the host names pages and transactions by.

/// Logical page number.
pub type Lpn = u64;
/// Host-chosen transaction id, nonzero.
pub type TxId = u64;
