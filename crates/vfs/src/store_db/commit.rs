//! Committing a connection's store transaction: sequencing it (at xSync, the atomic-write
//! commit or PHASETWO), checking a super-journal's databases, and waiting until it is
//! durable.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;

use onesync_codec::OnDisk;
use onesync_store::PendingCommit;

use crate::backend::IoResult;
use crate::names;
use crate::super_journal::{verdict, SuperJournalNames, Verdict};
use crate::sys::api::ApiTable;

use super::connections::ConnectionState;
use super::durability::{hand_off, wait_at, WaitAt};
use super::handle::{commit_err, StoreDb, Writing};
use super::locking::{note_lock_released, process_lock_key};
use super::registry::{lock, Coordination, CHANGE_COUNTER};

impl StoreDb {
    /// Sequences the connection's transaction: visible to new snapshots,
    /// durable once the pending commit's wait returns.
    /// With `durable`, it is left pending (to be waited for) whatever the `synchronous`
    /// level: a commit while the database's journal is on disk (`store_journal.rs`).
    pub(super) fn sequence_locked(
        api: &ApiTable,
        coord: &mut Coordination,
        connection: &ConnectionState,
        durable: bool,
    ) -> IoResult<()> {
        let conn = connection.id;
        let Some(ct) = coord.conns.get_mut(&conn) else {
            return Ok(());
        };
        let Some(txn) = ct.txn.take() else {
            return Ok(());
        };
        // The databases written (their handles and names).
        let (written, files): (Vec<u64>, Vec<String>) = ct
            .members
            .iter()
            .filter(|(_, m)| m.wrote)
            .map(|(&handle, m)| (handle, m.logical.clone()))
            .unzip();
        let synchronous = connection.commit_synchronous(&written);
        for m in ct.members.values_mut() {
            m.dirty = false;
            m.wrote = false;
        }
        ct.super_journal = None;
        let pending = txn
            .commit_without_waiting()
            .map_err(commit_err(api, "committing"))?;
        let seq = pending.seq();
        // A kept commit replaces an earlier one of this connection: its flush covers that
        // one too (commits become durable in order).
        if let Some(kept) = hand_off(pending, synchronous, durable).map_err(commit_err(api, "committing"))? {
            ct.pending = Some(kept);
        }
        coord.last_commit.insert(conn, seq);
        for name in files {
            coord.files.entry(name).or_default().changed_at = seq;
        }
        Ok(())
    }

    /// The writer gives up RESERVED: commit or abort the connection's
    /// transaction, release the lock; returns the commit to wait for.
    pub(super) fn leave_writer(&mut self) -> IoResult<Option<PendingCommit>> {
        let page_size = self.store.page_size as usize;
        if self.writing.is_serial() {
            self.writing = Writing::Idle;
        }
        let mut coord = lock(&self.store.coord);
        if let Some(file) = coord.files.get_mut(&self.logical) {
            if file.writer.is_some_and(|(h, _)| h == self.handle) {
                file.writer = None;
                self.store
                    .store
                    .unlock_for_process(process_lock_key(&self.logical));
                self.store.writer_left.notify_all();
                note_lock_released();
            }
        }
        let mut result = Ok(());
        // A SQLite that sends SQLITE_FCNTL_COMMIT_PHASETWO has committed by now: what is
        // left is a rollback's (or a read's). Without it (an old SQLite), guess.
        let phasetwo = self.connection.phasetwo_seen();
        if let Some(ct) = coord.conns.get_mut(&self.connection.id) {
            if let Some(txn) = ct.txn.as_ref().filter(|_| !phasetwo) {
                // Commit when every member synced after its last write (a
                // completed commit), or when a member's change counter moved
                // (synchronous=OFF commits without xSync); a rollback restores
                // the counter and may leave unsynced writes: abort.
                let completed = ct.members.values().all(|m| {
                    !m.dirty || {
                        let mut page = vec![0u8; page_size];
                        txn.file(&m.logical)
                            .map(|id| txn.read_page(id, 0, &mut page).is_ok())
                            .unwrap_or(false)
                            && page[CHANGE_COUNTER] != m.base_counter
                    }
                });
                let any_write = ct.members.values().any(|m| m.wrote);
                if completed && any_write {
                    result = Self::sequence_locked(&self.api, &mut coord, &self.connection, false);
                }
            }
            if let Some(ct) = coord.conns.get_mut(&self.connection.id) {
                ct.abort();
            }
        }
        let mut pending = None;
        if let Some(ct) = coord.conns.get_mut(&self.connection.id) {
            ct.members.remove(&self.handle);
            if ct.members.is_empty() {
                pending = ct.pending.take();
                coord.conns.remove(&self.connection.id);
            }
        }
        drop(coord);
        result.map(|()| pending)
    }

    /// SQLITE_FCNTL_SYNC with a super-journal's name: this database's phase one of a
    /// transaction over several databases. Only logical files of this one store can commit
    /// with it; a super-journal of this VFS already refused anything else, but one written
    /// by another VFS (the connection's main database is not ours) is checked here, before
    /// this store commits anything: refusing rolls the whole transaction back.
    pub(super) fn super_journal_named(&self, name: &[u8]) -> Result<(), String> {
        if !self.is_writer() {
            return Ok(());
        }
        let mut coord = lock(&self.store.coord);
        let Some(ct) = coord.conns.get_mut(&self.connection.id) else {
            return Ok(());
        };
        if ct.super_journal.as_ref().is_none_or(|s| s.name() != name) {
            ct.super_journal = Some(names::use_super_journal(name));
        }
        drop(coord);
        let checked = self.check_super_journal(name);
        if checked.is_err() {
            // Nothing of it may ever commit: SQLite rolls back what it wrote into the
            // store on top of the last commit, into a new transaction.
            if let Some(ct) = lock(&self.store.coord).conns.get_mut(&self.connection.id) {
                let told = ct.super_journal.take();
                ct.abort();
                ct.super_journal = told;
            }
        }
        checked
    }

    pub(super) fn check_super_journal(&self, name: &[u8]) -> Result<(), String> {
        if names::is_memory_super_journal(name) {
            return Ok(());
        }
        let path = Path::new(std::ffi::OsStr::from_bytes(name));
        let listed = std::fs::read(path).map_err(|e| {
            format!(
                "onesync: COMMIT refused: cannot read the super-journal {} to check that this \
                 transaction's databases can commit atomically together ({e})",
                path.display()
            )
        })?;
        let listed_here = SuperJournalNames::from_bytes(&(), &listed)
            .is_ok_and(|names| names.0.iter().any(|j| *j == self.journal_name()));
        match verdict(&listed) {
            Verdict::Memory(key) if key == self.store.key.0 => Ok(()),
            Verdict::Disk if listed_here => self.check_journal_on_disk(),
            Verdict::Refuse(why) => Err(why),
            _ => Err(format!(
                "onesync: COMMIT refused: the super-journal {} does not list this store's \
                 database ({}), so it cannot commit atomically with the others",
                path.display(),
                self.logical
            )),
        }
    }

    /// SQLite's name for this database's rollback journal.
    pub(super) fn journal_name(&self) -> Vec<u8> {
        [self.name.bytes(), b"-journal"].concat()
    }

    /// A store in a transaction over several databases with a super-journal on disk: its
    /// journal must be on disk before it commits (`store_journal.rs`, step 2), so that a
    /// crash before the super-journal is deleted rolls the store back with the others.
    fn check_journal_on_disk(&self) -> Result<(), String> {
        if self.writing.is_concurrent() {
            return Err(format!(
                "onesync: COMMIT refused: a concurrent write transaction (concurrent=1) on {} \
                 cannot commit atomically with other databases; nothing was written",
                self.logical
            ));
        }
        let in_memory_on_purpose = matches!(
            self.store.store.sabotage(),
            Some(onesync_store::Sabotage::StoreJournalInMemory)
        );
        if names::is_store_journal_open_on_disk(&self.journal_name()) || in_memory_on_purpose {
            return Ok(());
        }
        Err(format!(
            "onesync: COMMIT refused: the journal of {} ({}) is not on disk, so the store \
             could not be rolled back with the other databases after a crash (SQLite did not \
             sync it: journal_mode=MEMORY or OFF?); nothing was written",
            self.logical,
            String::from_utf8_lossy(&self.journal_name())
        ))
    }

    /// SQLITE_FCNTL_COMMIT_PHASETWO: every database of the transaction has finished its
    /// phase one and SQLite considers the transaction committed. Sequence what is not yet
    /// (synchronous=OFF, several databases, a truncation after the sync), and make it
    /// durable before COMMIT returns: here, unless SQLite surely unlocks right after and
    /// letting go of the lock before the flush can help another writer.
    pub(super) fn commit_phase_two(&mut self) -> IoResult<()> {
        self.connection.note_phasetwo();
        if !self.is_writer() {
            return Ok(());
        }
        let mut coord = lock(&self.store.coord);
        let Some(ct) = coord.conns.get_mut(&self.connection.id) else {
            return Ok(());
        };
        if ct.members.values().any(|m| m.wrote) {
            Self::sequence_locked(&self.api, &mut coord, &self.connection, false)?;
        } else {
            // Nothing written since the last commit (a read in exclusive mode began it).
            ct.abort();
        }
        let others = coord.handles_by_conn.keys().any(|&c| c != self.connection.id);
        let last_commit = coord.last_commit.get(&self.connection.id).copied();
        let Some(ct) = coord.conns.get_mut(&self.connection.id) else {
            return Ok(());
        };
        let Some(pending) = ct.pending.take() else {
            // Durable already (waited for at xSync, its journal on disk) or nothing to wait
            // for; synchronous replication still waits for the replica here.
            drop(coord);
            if let Some(seq) = last_commit {
                self.wait_replicated(seq);
            }
            return Ok(());
        };
        let members: Vec<u64> = ct.members.keys().copied().collect();
        let helps = others || self.store.waiting_writers.load(Relaxed) > 0 || self.store.contended_recently();
        let unlocks = self.connection.unlocks_after_commit(&members);
        if wait_at(unlocks, helps, self.replicate_sync) == WaitAt::Unlock {
            // Waited for by the last member's xUnlock, after the lock is released.
            ct.pending = Some(pending);
            return Ok(());
        }
        drop(coord);
        let seq = pending.seq();
        pending
            .wait()
            .map_err(commit_err(&self.api, "making a commit durable"))?;
        self.wait_replicated(seq);
        Ok(())
    }
}
