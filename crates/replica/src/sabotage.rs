//! Defects put back on purpose, for the negative controls of the replication tortures
//! (`onesync-lab replication-torture`, `onesync-lab explore`). The module exists only with the feature
//! `test-hooks`: without it no environment variable changes what the shipper does, and no
//! name of it is in the build (`crates/packages/tests/no_test_hooks.rs`).

/// A defect of the shipper, named by `ONESYNC_REPLICA_SABOTAGE` in a build with `test-hooks`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sabotage {
    /// `replication-lease-ignored`: every process replicating the database ships, as if it
    /// held the lease: two shippers write the same TXIDs, each continuing its own history.
    ReplicationLeaseIgnored,
    /// `position-saved-ahead`: the saved position names the store's durable commit at the
    /// time of the save, not the one the upload shipped: a process taking over after a kill
    /// skips the changes between the two.
    PositionSavedAhead,
    /// `ships-undurable`: a tick ships the latest *written* state of the store, commits a
    /// power cut can still take back among it: the replica runs ahead of what survives.
    ShipsUndurable,
    /// `sync-ack-before-upload`: a synchronous wait (`Shipper::wait_shipped`) returns at
    /// once: COMMIT returns before the replica holds its commit, which ships with a later
    /// tick (the thread's, or a close's).
    SyncAckBeforeUpload,
    /// `txid-from-position`: a shipper taking the lease continues from the TXID its saved
    /// position names, not from the replica's newest: after a crash between an upload and
    /// the save, it writes that TXID again, with other contents.
    TxidFromPosition,
}

impl Sabotage {
    /// The environment variable tortures set in the processes they start.
    pub const ENV: &'static str = "ONESYNC_REPLICA_SABOTAGE";

    /// The sabotage `ONESYNC_REPLICA_SABOTAGE` names, if any.
    pub fn from_env() -> Option<Sabotage> {
        Self::from_name(&std::env::var(Self::ENV).ok()?)
    }

    /// The sabotage of this name, if it is one of the shipper's.
    pub fn from_name(name: &str) -> Option<Sabotage> {
        match name {
            "replication-lease-ignored" => Some(Sabotage::ReplicationLeaseIgnored),
            "position-saved-ahead" => Some(Sabotage::PositionSavedAhead),
            "ships-undurable" => Some(Sabotage::ShipsUndurable),
            "sync-ack-before-upload" => Some(Sabotage::SyncAckBeforeUpload),
            "txid-from-position" => Some(Sabotage::TxidFromPosition),
            _ => None,
        }
    }
}
