//! The durability hand-off: for a commit the store has sequenced, the one place that decides
//! when COMMIT returns against its flush. A commit's ticket (the store's `PendingCommit`)
//! goes sequenced → written → shown → durable; the connection either keeps it to wait for,
//! or has it shown at once and leaves its durability to the store.
//!
//! | `synchronous` | the database's journal | kept or shown ([`hand_off`]) | COMMIT returns ([`wait_at`]) |
//! |---|---|---|---|
//! | FULL, EXTRA | in memory | kept; shown once durable | after the flush: at PHASETWO, or at the last member's xUnlock after the lock is released when SQLite surely unlocks next (locking_mode NORMAL) and someone may want the lock |
//! | NORMAL | in memory | shown at once | at once; durable within the store's interval (its background flush) |
//! | OFF | in memory | shown at once | at once; durable at the next flush of any kind or `PRAGMA onesync_flush` |
//! | any | on disk (a transaction over several databases, `store_journal.rs`) | kept | after the flush, at xSync: before SQLite deletes the super-journal |
//! | FULL, EXTRA, with `onesync_replicate_sync=1` | in memory | kept | after the flush and the replica's acknowledgement, at PHASETWO (`replication.rs`), never after the unlock |
//!
//! A serial commit is sequenced at xSync (one database), COMMIT_ATOMIC_WRITE, or PHASETWO
//! (several databases of the store, `synchronous=OFF`); a concurrent one at its COMMIT
//! (`concurrent.rs`). The straight line of a FULL commit: xSync → `StoreDb::sequence_locked`
//! → `Transaction::commit_without_waiting` (the record's pwrite) → [`hand_off`] keeps it →
//! PHASETWO → [`wait_at`] → `PendingCommit::wait` (the store's group commit: fdatasync).

use onesync_store::{CommitError, PendingCommit};

use super::connections::Synchronous;

/// Keeps a sequenced commit to be waited for (FULL and EXTRA, or any level while the
/// database's journal is on disk), or shows it to readers now (NORMAL: the store's
/// background flush makes it durable within its interval; OFF: the next flush of any kind).
pub(super) fn hand_off(
    pending: PendingCommit,
    synchronous: Synchronous,
    journal_on_disk: bool,
) -> Result<Option<PendingCommit>, CommitError> {
    if journal_on_disk || synchronous == Synchronous::Full {
        return Ok(Some(pending));
    }
    pending.show(synchronous == Synchronous::Normal)?;
    Ok(None)
}

/// Where a kept commit is waited for (the commit at PHASETWO; a commit whose journal is on
/// disk is waited for at its xSync, before this is asked).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum WaitAt {
    PhaseTwo,
    /// At the last member's xUnlock, after the lock is released: the next writer runs during
    /// the flush, and group commit covers both.
    Unlock,
}

/// Waiting after the unlock helps only when SQLite surely unlocks right after PHASETWO
/// (`unlocks_after_commit`: locking_mode NORMAL, an unlock seen) and someone may want the
/// lock (another connection, a waiting writer, another process lately). A commit that must
/// reach the replica before COMMIT returns (`replicate_sync`) is waited for at PHASETWO,
/// where the replica's acknowledgement is waited for too.
pub(super) fn wait_at(
    unlocks_after_commit: bool,
    someone_may_want_the_lock: bool,
    replicate_sync: bool,
) -> WaitAt {
    if unlocks_after_commit && someone_may_want_the_lock && !replicate_sync {
        WaitAt::Unlock
    } else {
        WaitAt::PhaseTwo
    }
}
