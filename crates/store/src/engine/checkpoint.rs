//! Mapping checkpoints: write the whole mapping (never a data page) and the header that
//! names it, so that recovery starts there and slots superseded before it can be reused;
//! and the final checkpoint on close.

use super::shared::{bump, lock, Meta, Shared};
use crate::error::{Error, Result};
use crate::format::{slot_offset, CheckpointRef, Header, LogRef};
use crate::options::Sabotage;
use crate::state::base::SlotBlocks;
use crate::state::{Base, State};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

/// What a compacting checkpoint moved: slots that the previous header may still name,
/// to be given up only once the new header is durable (or, should it fail, at the next
/// checkpoint).
#[derive(Default)]
pub(super) struct Moved {
    /// The window the chain had (its records start at the old header's `first_slot`),
    /// and the slots of it the new one does not keep.
    old_window: Option<(u64, u64)>,
    left_window: Option<(u64, u64)>,
    /// Slots the moved pages were copied from, and the slots of their copies.
    old_page_slots: Vec<u64>,
    copies: Vec<u64>,
    /// The state naming the old slots (nobody saw the new one: `meta` is held).
    old_state: Option<Arc<State>>,
}

impl Moved {
    /// The new header is durable in both copies: nothing names the old window any more,
    /// and the old page slots wait only for snapshots that began before the move (a
    /// snapshot of `last_seq` may hold the state that names them).
    fn settle(self, meta: &mut Meta, last_seq: u64) {
        if let Some((first, end)) = self.left_window {
            meta.alloc.release(first, end - first);
        }
        meta.moved_awaiting_readers
            .extend(self.old_page_slots.into_iter().map(|slot| (last_seq + 1, slot)));
    }

    /// The checkpoint failed: the durable header names the old window and slots, and
    /// the chain goes on from there; the copies are given back.
    fn give_up(self, meta: &mut Meta) {
        if let Some((first, end)) = self.old_window {
            if meta.head != first {
                meta.alloc.release(meta.head, meta.window_end - meta.head);
            }
            meta.head = first;
            meta.window_end = end;
        }
        for slot in self.copies {
            meta.alloc.release(slot, 1);
        }
        if let Some(state) = self.old_state {
            meta.state = state.clone();
            meta.visible = state.clone();
            meta.readable = state;
        }
    }
}

impl Shared {
    /// Write a mapping checkpoint now (also makes every sequenced commit durable).
    pub(crate) fn checkpoint(&self) -> Result<()> {
        if self.opts.read_only {
            return Err(Error::ReadOnly);
        }
        self.checkpoint_giving_back(&mut self.meta())
    }

    /// A checkpoint, then the free slots at the file's end go back to the filesystem
    /// (`give_back_space`). Not for a checkpoint that makes room: that one is followed by
    /// an allocation.
    pub(super) fn checkpoint_giving_back(&self, meta: &mut Meta) -> Result<()> {
        self.with_writer(meta, |meta| {
            self.checkpoint_locked(meta)?;
            self.give_back_space(meta)
        })
    }

    /// After a commit is written: when that commit superseded at least a growth step's
    /// slots, and a quarter of the file or half of what the mapping now holds, and the file
    /// is more than twice what the mapping holds (a large delete, VACUUM, also of a file
    /// that earlier commits made larger; not the many small commits of an update load,
    /// which checkpoints by policy serve), checkpoint now and give the file's free end back,
    /// rather than at the next checkpoint by policy or at close. Only a process owning every
    /// free slot does (the only one that shrinks the file).
    pub(super) fn give_back_after_commit(&self) -> Result<()> {
        let mut meta = self.meta();
        if !meta.owns_all_slots || meta.growing_ahead {
            return Ok(());
        }
        let capacity = meta.alloc.capacity();
        let superseded = std::mem::take(&mut meta.last_commit_superseded);
        let live = meta.state.mapped_pages();
        let keep = self.opts.growth_slots(live, 0);
        let large = superseded * 4 >= capacity || superseded * 2 >= live;
        if !large || superseded < keep || capacity < 2 * live + 2 * keep {
            return Ok(());
        }
        self.checkpoint_giving_back(&mut meta)?;
        // Slots this process's snapshots still read are given back when the last ends.
        let waiting = meta.awaiting_readers.len() + meta.moved_awaiting_readers.len();
        meta.give_back_pending = waiting as u64 * 4 >= capacity;
        Ok(())
    }

    /// See `Store::close`.
    pub(crate) fn close(&self) -> Result<()> {
        let checkpoint = || {
            let mut meta = self.meta();
            self.with_writer(&mut meta, |meta| {
                if meta.commits_since_checkpoint > 0 {
                    self.checkpoint_giving_back(meta)?;
                } else {
                    // Slots readers held at the last checkpoint may be free by now.
                    self.release_unread(meta);
                    self.give_back_space(meta)?;
                }
                Ok(())
            })
        };
        self.departed.store(true, Ordering::Relaxed);
        if self.opts.read_only {
            if let Some(s) = &self.sharing {
                s.depart(false);
            }
            return Ok(());
        }
        let Some(s) = &self.sharing else {
            return checkpoint();
        };
        let init = s.lock_init();
        let last = init.is_ok() && s.alone();
        self.closing_alone.store(last, Ordering::Relaxed);
        let checkpointed = if last {
            // Alone now: a process that joined owns only the slots it grew; take them all,
            // as recovery would, rather than grow the file for the checkpoint.
            self.own_every_free_slot().and_then(|()| checkpoint())
        } else {
            // Others stay: commits this process showed before they were durable are made
            // durable before it goes (the last one's checkpoint does it).
            self.flush_written().map(|_| ())
        };
        if init.is_ok() {
            s.depart(last);
        }
        checkpointed
    }
}

impl Shared {
    /// Wait until every sequenced record has been written (so their slots can be freed).
    fn wait_all_written(&self, last_seq: u64) -> Result<()> {
        let mut f = lock(&self.flush);
        loop {
            if let Some(why) = &f.poisoned {
                return Err(Error::Poisoned(why.clone()));
            }
            if f.written_upto >= last_seq {
                return Ok(());
            }
            f = self.written_changed.wait(f).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Flush now if commits up to `seq` are written but not all durable yet.
    fn make_durable(&self, meta: &mut Meta, seq: u64) -> Result<()> {
        if lock(&self.flush).durable >= seq {
            return Ok(());
        }
        if let Err(e) = self.io.sync_data() {
            self.poison(format!("fdatasync failed: {e}"));
            return Err(Error::io("flushing commits before a checkpoint", e));
        }
        bump(&self.counters.flushes, 1);
        self.note_durable(meta, seq);
        Ok(())
    }

    /// Write the whole mapping to free slots and point the header at it, with one flush.
    /// Then slots superseded before it can be reused. The caller holds the meta lock, so no
    /// commit is sequenced meanwhile.
    ///
    /// The header goes to the copy its generation selects (the other durably holds the
    /// previous generation) and is flushed; then it is duplicated into the other copy and
    /// flushed again, and only then are slots freed. A crash leaves an intact copy of the
    /// newest durable header, and damage to either copy later costs nothing.
    pub(super) fn checkpoint_locked(&self, meta: &mut Meta) -> Result<()> {
        self.with_writer(meta, |meta| self.checkpoint_holding_writer(meta, false))?;
        // What the checkpoint frees may be reused once readers let go: tell the other
        // processes how far this one's readers really are (raised lazily in between).
        let _ = self.publish_exact_pin(meta);
        Ok(())
    }

    /// `compact`: also move the chain's window and the pages in the file's upper part to
    /// the lowest free slots (`compact_into_low_slots`), so that the end of the file can be
    /// given back. Only for a process alone with the store (`give_back_space`).
    pub(super) fn checkpoint_holding_writer(&self, meta: &mut Meta, compact: bool) -> Result<()> {
        let started = Instant::now();
        let last_seq = meta.state.seq;
        self.wait_all_written(last_seq)?;
        // The checkpoint names pages of every commit so far. A power cut may persist the
        // writes since the last flush in any order, so those pages must be durable before
        // the header that names them can be.
        self.make_durable(meta, last_seq)?;
        let moved = if compact {
            self.compact_into_low_slots(meta)?
        } else {
            Moved::default()
        };
        // The delta into runs, and the manifest naming them (format version 2).
        let mapping = match self.write_mapping(meta, &moved.old_page_slots, compact) {
            Ok(mapping) => mapping,
            Err(e) => {
                moved.give_up(meta);
                return Err(e);
            }
        };
        // The negative control of moved pages names them unflushed: this flush would make
        // them durable too, so it goes with it.
        let unflushed = (self.opts.sabotaged(Sabotage::MovedPagesUnflushed)
            && !moved.old_page_slots.is_empty())
            || self.opts.sabotaged(Sabotage::RunBlocksUnflushed);
        if !mapping.placed.is_empty() && !unflushed {
            // The manifest names the new blocks by their CRCs, which opening does not check
            // (it reads no block): they must be durable before the header naming the
            // manifest can be. (The manifest itself is covered by the header's CRC.)
            if let Err(e) = self.io.sync_data() {
                self.poison(format!("flushing the mapping's blocks failed: {e}"));
                mapping.give_back(meta);
                moved.give_up(meta);
                return Err(Error::io("flushing the mapping's blocks", e));
            }
            bump(&self.counters.flushes, 1);
        }
        let (blob, blob_crc, extents) = (&mapping.manifest, mapping.crc, mapping.extents.clone());
        let header = Header {
            version: crate::format::FORMAT_VERSION,
            generation: meta.header.generation + 1,
            checkpoint: CheckpointRef::new(&extents, blob.len() as u64, blob_crc, last_seq),
            log: LogRef {
                first_slot: meta.head,
                window_end: meta.window_end,
                seed: crate::nonce::random_u64() as u32,
            },
            ..meta.header
        };
        let encoded = header.encode();
        let mut written = Ok(());
        let mut piece = blob.as_slice();
        for &(first, n) in &extents {
            let take = piece.len().min((n * self.page_size) as usize);
            let (now, rest) = piece.split_at(take);
            written = written.and_then(|()| {
                self.write_for_checkpoint(now, slot_offset(first, self.page_size), "writing a checkpoint")
            });
            piece = rest;
        }
        // Other processes learn of the new generation before its header is written, as of
        // a record before it is written: a writer that finds the side file unchanged since
        // its own last publication may then trust that nobody wrote since (`follow_chain`).
        // (The negative control publishes only afterwards, as before issue 17.)
        let publish_late = self.opts.sabotaged(Sabotage::CheckpointPublication);
        let written = written.and_then(|()| {
            if publish_late {
                Ok(())
            } else {
                self.publish_progress(meta, header.generation, last_seq)
            }
        });
        if let Err(e) = written {
            // Nothing names the manifest or the blocks yet.
            mapping.give_back(meta);
            // The moved pages' copies are named by nothing durable; the state in memory
            // names them, so they stay (the old slots wait as superseded ones do).
            moved.give_up(meta);
            return Err(e);
        }
        if let Err(e) = self.write_for_checkpoint(
            &encoded,
            Header::copy_offset(header.generation),
            "writing the header",
        ) {
            // The copy may have landed whole all the same (an error after the write), and a
            // later flush make it durable: the blocks and manifest it names must never be
            // reused, so nothing more is written, as after a failed flush. (A torn copy
            // alone would be harmless: the other one durably holds the previous header.)
            self.poison(format!("writing a checkpoint's header failed: {e}"));
            return Err(e);
        }
        if let Err(e) = self.io.sync_data() {
            self.poison(format!("flushing a checkpoint failed: {e}"));
            return Err(Error::io("flushing a checkpoint", e));
        }
        bump(&self.counters.flushes, 1);
        bump(&self.counters.checkpoints, 1);
        self.note_durable(meta, last_seq);
        // Make the duplicate durable before any slot the old checkpoint needed is reused:
        // then damage to either copy later can never roll back onto reused slots.
        let other = Header::copy_offset(header.generation + 1);
        let duplicated = self
            .write_for_checkpoint(&encoded, other, "writing the second header copy")
            .and_then(|()| {
                self.io
                    .sync_data()
                    .map_err(|e| Error::io("flushing the second header copy", e))
            });
        if let Err(e) = duplicated {
            self.poison(format!("duplicating the header failed: {e}"));
            return Err(e);
        }
        bump(&self.counters.flushes, 1);
        let old = meta.header;
        for &(first, n) in old.checkpoint.extents() {
            if self.sharing.is_some() {
                // Another process may be loading the old checkpoint right now: it pins a
                // commit at or before this one while it does (at it: a compacting
                // checkpoint's second one has the seq of the first).
                meta.moved_awaiting_readers
                    .extend((first..first + n).map(|slot| (last_seq + 1, slot)));
            } else {
                meta.alloc.release(first, n);
            }
        }
        // Readers on the old base (snapshots here, states of other processes) may still
        // read the replaced runs' blocks: they wait for every reader at or below this
        // checkpoint's commit, which may equal the last one's (a compacting checkpoint).
        let freed_early = self.opts.sabotaged(Sabotage::RunBlocksFreedEarly);
        for block in &mapping.replaced {
            if freed_early {
                meta.alloc.release(block.slot, u64::from(block.slots));
            } else {
                meta.moved_awaiting_readers
                    .extend((block.slot..block.slot + u64::from(block.slots)).map(|s| (last_seq + 1, s)));
            }
        }
        meta.header = header;
        moved.settle(meta, last_seq);
        // The new base: the runs just written; the state's changes are all in them now.
        let base = Base::runs(
            last_seq,
            mapping.stack,
            SlotBlocks {
                io: self.io.clone(),
                page_size: self.page_size,
            },
            self.mapping.cache.clone(),
        );
        let rebased = Arc::new(meta.state.on_runs(base, self.page_size));
        if meta.visible.seq == rebased.seq {
            meta.visible = rebased.clone();
        }
        if meta.readable.seq == rebased.seq {
            meta.readable = rebased.clone();
        }
        meta.state = rebased;
        meta.free_baseline = Some(mapping.free);
        meta.freed_since.clear();
        if publish_late {
            // Unpublished, another writer could extend the old chain: stop here instead.
            if let Err(e) = self.publish_progress(meta, header.generation, last_seq) {
                self.poison(format!("publishing a checkpoint to other processes failed: {e}"));
                return Err(e);
            }
        }
        self.rebase_on_checkpoint(meta, header.log.seed);
        bump(
            &self.counters.checkpoint_micros,
            started.elapsed().as_micros() as u64,
        );
        Ok(())
    }

    /// `write_counted`, also counted as a checkpoint's (`checkpoint_bytes`).
    pub(super) fn write_for_checkpoint(&self, data: &[u8], offset: u64, during: &'static str) -> Result<()> {
        self.write_counted(data, offset, during)?;
        bump(&self.counters.checkpoint_bytes, data.len() as u64);
        Ok(())
    }

    /// Before a compacting checkpoint writes its mapping: give the chain a window at the
    /// lowest free run, and copy each page held in a slot past the room the store needs
    /// (its live slots, the reserve, a growth step) into the lowest free slot, so that the
    /// file's end is free. The copies are made durable by the checkpoint's first flush,
    /// before the header that names them; the old slots are freed only after both header
    /// copies are durable (`Moved::settle`), so a crash anywhere recovers the previous
    /// checkpoint and its slots unchanged. Content, checksums and each page's sequence
    /// number stay as they were: only where the page lives changes, for snapshots taken
    /// from now on (older ones read the old slots, kept for them).
    fn compact_into_low_slots(&self, meta: &mut Meta) -> Result<Moved> {
        let mut moved = Moved::default();
        if !meta.unpublished.is_empty()
            || !meta.not_durable.is_empty()
            || meta.visible.seq != meta.state.seq
            || meta.readable.seq != meta.state.seq
        {
            return Ok(moved);
        }
        let (head, end) = (meta.head, meta.window_end);
        let window = end.saturating_sub(head);
        // Slots that wait for readers will be free (the store is cut only after they are).
        let room = self.live_slots(meta) + self.opts.growth_slots(0, 0);
        // The window: a new one at the lowest free run, if that is lower, sized for the
        // store as it will be (a window taken when the file was large, or after a large
        // commit, may be a quarter of it or as large as that commit).
        let want = window.min(self.compacted_window(meta));
        if window > want || end > room {
            moved.old_window = Some((head, end));
            match meta.alloc.take_run(want) {
                Some(first) if first < head => {
                    moved.left_window = Some((head, end));
                    meta.head = first;
                    meta.window_end = first + want;
                }
                other => {
                    if let Some(first) = other {
                        meta.alloc.release(first, want);
                    }
                    // Where it is, shortened.
                    moved.left_window = Some((head + want, end));
                    meta.window_end = head + want;
                }
            }
        }
        let mut state = (*meta.state).clone();
        let mut page = vec![0u8; self.page_size as usize];
        let files: Vec<u32> = state.files.keys().copied().collect();
        for id in files {
            let mut high = Vec::new();
            for item in state.pages_of(id, 0, u64::MAX) {
                let (n, entry) = match item {
                    Ok(found) => found,
                    Err(e) => {
                        moved.give_up(meta);
                        return Err(e);
                    }
                };
                if entry.slot != crate::format::NO_SLOT && entry.slot >= room {
                    high.push((n, entry));
                }
            }
            for (n, mut entry) in high {
                let Some(to) = meta.alloc.take_run(1) else {
                    break;
                };
                if to >= entry.slot {
                    meta.alloc.release(to, 1);
                    continue;
                }
                let copied = self.read_slot(entry.slot, &mut page).and_then(|()| {
                    self.write_counted(&page, slot_offset(to, self.page_size), "moving a page")
                });
                if let Err(e) = copied {
                    meta.alloc.release(to, 1);
                    moved.give_up(meta);
                    return Err(e);
                }
                moved.old_page_slots.push(entry.slot);
                moved.copies.push(to);
                entry.slot = to;
                if let Err(e) = state.set_page(id, n, entry) {
                    moved.give_up(meta);
                    return Err(e);
                }
            }
        }
        if !moved.old_page_slots.is_empty() {
            // The checkpoint names the copies by their checksums, which recovery does not
            // check for a checkpoint's pages (only for a record's): they must be durable
            // before the header that names them is written, not merely flushed with it.
            if self.opts.sabotaged(Sabotage::MovedPagesUnflushed) {
                // (negative control)
            } else if let Err(e) = self.io.sync_data() {
                self.poison(format!("flushing moved pages failed: {e}"));
                moved.give_up(meta);
                return Err(Error::io("flushing moved pages", e));
            }
            bump(&self.counters.flushes, 1);
            moved.old_state = Some(meta.state.clone());
            let state = Arc::new(state);
            meta.state = state.clone();
            meta.visible = state.clone();
            meta.readable = state;
        }
        Ok(moved)
    }

    /// A durable checkpoint became the chain's base, written by this process or read from
    /// another's: the log restarts at its seed, and the slots superseded before it now wait
    /// only for readers (invariant 6).
    pub(super) fn rebase_on_checkpoint(&self, meta: &mut Meta, log_seed: u32) {
        if meta.state.base.seq < meta.header.checkpoint.seq {
            // Invariant 12. States shown to readers at the same commit take it too (others
            // keep their own base, as snapshots do).
            let rebased = Arc::new(meta.state.rebased(self.page_size));
            if meta.visible.seq == rebased.seq {
                meta.visible = rebased.clone();
            }
            if meta.readable.seq == rebased.seq {
                meta.readable = rebased.clone();
            }
            meta.state = rebased;
        }
        meta.prev_crc = log_seed;
        meta.commits_since_checkpoint = 0;
        meta.log_bytes_since_checkpoint = 0;
        let covered = std::mem::take(&mut meta.awaiting_checkpoint);
        meta.awaiting_readers.extend(covered);
        self.release_unread(meta);
    }
}
