//! Defects put back on purpose, for the negative controls of the replication tortures
//! (`onesync-lab replication-torture`). The module exists only with the feature
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
    /// `sync-acks-early`: `Shipper::wait_shipped` returns at once, before the upload: a
    /// synchronous COMMIT returns with its commit not in the replica.
    SyncAcksEarly,
}

impl Sabotage {
    /// The environment variable tortures set in the processes they start.
    pub const ENV: &'static str = "ONESYNC_REPLICA_SABOTAGE";

    /// The sabotage `ONESYNC_REPLICA_SABOTAGE` names, if any.
    pub fn from_env() -> Option<Sabotage> {
        match std::env::var(Self::ENV).as_deref() {
            Ok("replication-lease-ignored") => Some(Sabotage::ReplicationLeaseIgnored),
            Ok("position-saved-ahead") => Some(Sabotage::PositionSavedAhead),
            Ok("ships-undurable") => Some(Sabotage::ShipsUndurable),
            Ok("sync-acks-early") => Some(Sabotage::SyncAcksEarly),
            _ => None,
        }
    }
}
