//! Mapping checkpoints: write the whole mapping (never a data page) and the header that
//! names it, so that recovery starts there and slots superseded before it can be reused;
//! and the final checkpoint on close.

use super::{bump, lock, Meta, Shared};
use crate::error::{Error, Result};
use crate::format::{slot_offset, CheckpointRef, Header, LogRef};
use crate::options::Sabotage;
use std::sync::atomic::Ordering;

impl Shared {
    /// Write a mapping checkpoint now (also makes every sequenced commit durable).
    pub(crate) fn checkpoint(&self) -> Result<()> {
        if self.opts.read_only {
            return Err(Error::ReadOnly);
        }
        self.checkpoint_locked(&mut self.meta())
    }

    /// See `Store::close`.
    pub(crate) fn close(&self) -> Result<()> {
        let checkpoint = || {
            let mut meta = self.meta();
            self.with_writer(&mut meta, |meta| {
                if meta.commits_since_checkpoint > 0 {
                    self.checkpoint_locked(meta)?;
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
        self.with_writer(meta, |meta| self.checkpoint_holding_writer(meta))?;
        // What the checkpoint frees may be reused once readers let go: tell the other
        // processes how far this one's readers really are (raised lazily in between).
        let _ = self.publish_exact_pin(meta);
        Ok(())
    }

    fn checkpoint_holding_writer(&self, meta: &mut Meta) -> Result<()> {
        let last_seq = meta.state.seq;
        self.wait_all_written(last_seq)?;
        // The checkpoint names pages of every commit so far. A power cut may persist the
        // writes since the last flush in any order, so those pages must be durable before
        // the header that names them can be.
        self.make_durable(meta, last_seq)?;
        let (blob, blob_crc) = meta.state.encode_checkpoint();
        let blob_slots = (blob.len() as u64).div_ceil(self.page_size).max(1);
        let extents = self.alloc_extents(meta, blob_slots)?;
        let header = Header {
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
                self.write_counted(now, slot_offset(first, self.page_size), "writing a checkpoint")
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
        let written = written.and_then(|()| {
            self.write_counted(
                &encoded,
                Header::copy_offset(header.generation),
                "writing the header",
            )
        });
        if let Err(e) = written {
            // A torn copy is harmless: the other one durably holds the previous header.
            for (first, n) in extents {
                meta.alloc.release(first, n);
            }
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
            .write_counted(&encoded, other, "writing the second header copy")
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
                // commit before this one while it does.
                meta.awaiting_readers
                    .extend((first..first + n).map(|slot| (last_seq, slot)));
            } else {
                meta.alloc.release(first, n);
            }
        }
        meta.header = header;
        if publish_late {
            // Unpublished, another writer could extend the old chain: stop here instead.
            if let Err(e) = self.publish_progress(meta, header.generation, last_seq) {
                self.poison(format!("publishing a checkpoint to other processes failed: {e}"));
                return Err(e);
            }
        }
        self.rebase_on_checkpoint(meta, header.log.seed);
        Ok(())
    }

    /// A durable checkpoint became the chain's base, written by this process or read from
    /// another's: the log restarts at its seed, and the slots superseded before it now wait
    /// only for readers (invariant 6).
    pub(super) fn rebase_on_checkpoint(&self, meta: &mut Meta, log_seed: u32) {
        meta.prev_crc = log_seed;
        meta.commits_since_checkpoint = 0;
        meta.log_bytes_since_checkpoint = 0;
        let covered = std::mem::take(&mut meta.awaiting_checkpoint);
        meta.awaiting_readers.extend(covered);
        self.release_unread(meta);
    }
}
