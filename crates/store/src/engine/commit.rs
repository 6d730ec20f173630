//! The one entry of the engine: take a transaction's operations and pages, and return a
//! commit that is sequenced and written ([`PendingCommit`]), perhaps not yet durable.

use super::catch_up::WriterClaim;
use super::group_commit::PendingCommit;
use super::shared::{bump, Shared};
use crate::error::{CommitError, Error, Result};
use crate::format::{slot_offset, Op};
use crate::state::State;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// What a transaction hands the engine to commit.
pub(crate) struct CommitRequest<'a> {
    /// The net effect of the transaction on the state it began on, in order.
    pub ops: Vec<Op>,
    /// Indexes of the `Page` operations whose pages are in `pages` (their slots are chosen
    /// when the commit is sequenced).
    pub buffered: Vec<usize>,
    /// The whole pages held in memory, in the order of `buffered`.
    pub pages: Vec<Arc<[u8]>>,
    /// Ids of the files the transaction creates (handed out by this process alone).
    pub created: &'a BTreeSet<u32>,
    /// Slots the transaction wrote early: those the commit maps become the store's, the
    /// rest are freed, whatever the outcome.
    pub early_slots: BTreeSet<u64>,
}

impl Shared {
    /// Commit `request`: take the write lock (catching up with other processes), check it
    /// with `conflict` against the latest state (`Some(what)` refuses it; it may also rebase
    /// buffered pages, given the operations, which of them are buffered, and those pages),
    /// sequence it and write its record and pages. Returns once it is written: visible to
    /// new transactions, durable only once [`PendingCommit::wait`] returns.
    /// `early_conflict` may refuse it sooner, against a state followed before the lock is
    /// taken: only with a conflict `conflict` would find against any later state too.
    pub(crate) fn commit(
        self: &Arc<Self>,
        request: CommitRequest<'_>,
        early_conflict: impl FnOnce(&State, &[Op]) -> Option<String>,
        conflict: impl FnOnce(&State, &mut [Op], &[usize], &mut [Arc<[u8]>]) -> Option<String>,
    ) -> Result<PendingCommit, CommitError> {
        let fail = |error: Error| CommitError { seq: None, error };
        let CommitRequest {
            ops,
            buffered,
            mut pages,
            created,
            mut early_slots,
        } = request;
        // Follow other processes' commits before queueing for their write lock, as a reader
        // may (a record being written ends the chain for now): the lock's holder then follows
        // only what came while it waited, and a commit that already conflicts is refused
        // without queueing for the lock at all. Its holder works beside every other process
        // for the CPU, and the next one waits for it (16 processes: the lock held 98 µs per
        // commit against 114). Only once another process has committed.
        if self.others_write() {
            let mut meta = self.meta();
            let refused = match self.catch_up(&mut meta, false) {
                Err(e) => Some(e),
                Ok(()) => early_conflict(&meta.state, &ops).map(|what| {
                    bump(&self.counters.conflicts, 1);
                    bump(&self.counters.early_conflicts, 1);
                    Error::Conflict(what)
                }),
            };
            drop(meta);
            if let Some(e) = refused {
                self.release_slots(early_slots);
                return Err(fail(e));
            }
        }
        // Room for it (a record and its pages), grown outside the locks if need be.
        self.room_before_commit(buffered.len() as u64 + 1);
        // Other processes: take their write lock (held until this commit is written), and
        // check against every commit they made.
        let claim = match WriterClaim::take(self) {
            Ok(claim) => claim,
            Err(e) => {
                self.release_slots(early_slots);
                return Err(fail(e));
            }
        };
        let sequenced = {
            let mut meta = self.meta();
            let result = (|| {
                self.catch_up_if_due(&mut meta, claim.took_lock)?;
                // Ids of files this transaction creates were handed out by this process
                // alone: another process may have committed a file with the same id since.
                let mut ops = ops;
                renumber_created_files(&mut ops, created, &meta.state, &self.next_file_id);
                if let Some(what) = conflict(&meta.state, &mut ops, &buffered, &mut pages) {
                    bump(&self.counters.conflicts, 1);
                    return Err(Error::Conflict(what));
                }
                let mapped: BTreeSet<u64> = ops
                    .iter()
                    .filter_map(|op| match op {
                        Op::Page { slot, .. } => Some(*slot),
                        _ => None,
                    })
                    .collect();
                let sequenced = self.sequence(&mut meta, ops, &buffered)?;
                // Early-written slots the commit maps now belong to the store.
                early_slots.retain(|s| !mapped.contains(s));
                Ok(sequenced)
            })();
            for slot in std::mem::take(&mut early_slots) {
                meta.alloc.release(slot, 1);
            }
            result.map_err(fail)?
        };
        let seq = sequenced.seq;
        let page_size = self.page_size;
        // The record, then the pages: runs of consecutive slots go out as one write, and the
        // first run joins the record when it follows it directly (the usual case).
        let mut writes: Vec<(u64, Vec<u8>)> = sequenced.jump.into_iter().collect();
        let (record_offset, mut record_bytes) = sequenced.record;
        let record_end = record_offset + sequenced.record_slots * page_size;
        let first_joins = sequenced
            .page_slots
            .first()
            .is_some_and(|s| slot_offset(*s, page_size) == record_end);
        // Whole slots: a write of part of a block makes the kernel read the rest first
        // (a read from the disk, if the block is not cached) before it can write it.
        record_bytes.resize((sequenced.record_slots * page_size) as usize, 0);
        writes.push((record_offset, record_bytes));
        let mut run_next_slot = None;
        for (i, (page, &slot)) in pages.iter().zip(&sequenced.page_slots).enumerate() {
            let joins = match run_next_slot {
                Some(next) => next == slot,
                None => i == 0 && first_joins,
            };
            match writes.last_mut() {
                Some((_, bytes)) if joins => bytes.extend_from_slice(page),
                _ => writes.push((slot_offset(slot, page_size), page.to_vec())),
            }
            run_next_slot = Some(slot + 1);
        }
        // Written outside the lock: concurrent committers write theirs at the same time.
        for (offset, bytes) in &writes {
            if let Err(e) = self.write_counted(bytes, *offset, "writing a commit") {
                // A hole in the chain would hide every later commit: stop committing.
                self.poison(format!("writing commit {seq} failed: {e}"));
                return Err(CommitError {
                    seq: Some(seq),
                    error: e,
                });
            }
        }
        bump(&self.counters.commit_records, 1);
        bump(&self.counters.pages_written, pages.len() as u64);
        bump(&self.counters.pages_embedded, sequenced.embedded_pages);
        self.mark_written(seq);
        drop(claim);
        // Outside the write lock: a growth step's flush would hold up every other process.
        // A step that fails to grow is tried again inside a later commit, which reports it;
        // a failed flush has poisoned the store, and this commit's wait says so.
        let _ = self.grow_ahead(sequenced.record_slots + pages.len() as u64);
        // Space a large delete or VACUUM freed goes back now; a failure here is the
        // checkpoint's (a failed flush poisoned the store, and this commit's wait says so).
        let _ = self.give_back_after_commit();
        Ok(PendingCommit::sequenced(self.clone(), seq))
    }

    /// Commit a transaction that changed nothing: it waits only for the state it began on.
    pub(crate) fn commit_nothing(
        self: &Arc<Self>,
        base_seq: u64,
        early_slots: BTreeSet<u64>,
    ) -> PendingCommit {
        self.release_slots(early_slots);
        PendingCommit::unchanged(self.clone(), base_seq)
    }
}

/// Give every file the transaction creates an id no committed state has used: ids come from
/// a per-process counter, and another process sharing the store may have committed a file
/// with the same id (or created and deleted one) since this transaction took it. Called
/// holding the write lock, after catching up, so `latest` has every process's commits.
fn renumber_created_files(ops: &mut [Op], created: &BTreeSet<u32>, latest: &State, counter: &AtomicU32) {
    counter.fetch_max(latest.next_file_id, Ordering::Relaxed);
    let renumbered: BTreeMap<u32, u32> = created
        .iter()
        .filter(|&&id| id < latest.next_file_id || latest.files.contains_key(&id))
        .map(|&id| (id, counter.fetch_add(1, Ordering::Relaxed)))
        .collect();
    if renumbered.is_empty() {
        return;
    }
    for op in ops {
        let (Op::Create { file, .. }
        | Op::Delete { file }
        | Op::Size { file, .. }
        | Op::Page { file, .. }
        | Op::Patch { file, .. }) = op;
        if let Some(&new) = renumbered.get(file) {
            *file = new;
        }
    }
}
