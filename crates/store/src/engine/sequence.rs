//! Sequencing: give a commit its sequence number and its place in the chain (record and
//! pages, best contiguous), and make it the latest state. Nothing is written here.

use super::shared::{bump, lock, Meta, Shared};
use crate::error::{Error, Result};
use crate::format::{slot_offset, Op, Record, RecordKind};
use std::collections::BTreeSet;
use std::sync::Arc;

/// A sequenced commit, ready to be written.
pub(super) struct Sequenced {
    pub seq: u64,
    /// A jump record to write first, if the commit did not fit in the reserved window.
    pub jump: Option<(u64, Vec<u8>)>,
    /// (offset, bytes) of the commit record.
    pub record: (u64, Vec<u8>),
    pub record_slots: u64,
    /// Where each buffered page goes, in the caller's order.
    pub page_slots: Vec<u64>,
    pub embedded_pages: u64,
}

/// Where a commit goes (see `Shared::sequence`).
struct Placement {
    start: u64,
    end: u64,
    jumped: bool,
    page_slots: Vec<u64>,
    new_head: u64,
    next_slot: u64,
    next_end: u64,
}

impl Shared {
    /// Give a commit its sequence number and its place in the chain, and make it the
    /// latest state. `buffered` lists the `Page` operations (by index) whose pages the
    /// caller holds; `Sequenced::page_slots` says where each goes. Nothing is written here.
    ///
    /// Placement, best first: record and pages contiguous at the head of the reserved
    /// window (one write); the record at the head and the pages in free slots elsewhere (on
    /// a fragmented store); a jump record at the head leading to a fresh window, when the
    /// record itself does not fit.
    pub(super) fn sequence(
        &self,
        meta: &mut Meta,
        mut ops: Vec<Op>,
        buffered: &[usize],
    ) -> Result<Sequenced> {
        self.check_poison()?;
        let interval = self.opts.checkpoint_interval;
        if (interval > 0 && meta.commits_since_checkpoint >= interval)
            || meta.log_bytes_since_checkpoint >= self.opts.log_capacity
        {
            // Checkpoints by policy are optional: with no room for one, commit anyway.
            match self.checkpoint_locked(meta) {
                Ok(()) | Err(Error::NoSpace) => {}
                Err(e) => return Err(e),
            }
        }
        let seq = meta.state.seq + 1;
        let page_size = self.page_size;
        let record_slots = Record::encoded_len_of(&ops).div_ceil(page_size);
        let pages = buffered.len() as u64;
        // Everything allocated here goes back if a later step fails.
        let mut taken: Vec<(u64, u64)> = Vec::new();
        let placed = (|| -> Result<Placement> {
            let (start, end, jumped) = if meta.head + record_slots <= meta.window_end {
                (meta.head, meta.window_end, false)
            } else {
                let (s, e) = self.new_window(meta, record_slots + pages + 1)?;
                taken.push((s, e - s));
                (s, e, true)
            };
            let page_slots: Vec<u64> = if start + record_slots + pages < end {
                (0..pages).map(|i| start + record_slots + i).collect()
            } else {
                let mut slots = Vec::with_capacity(pages as usize);
                for _ in 0..pages {
                    let slot = self.alloc_slot(meta)?;
                    taken.push((slot, 1));
                    slots.push(slot);
                }
                slots
            };
            let contiguous = page_slots.first() == Some(&(start + record_slots));
            let new_head = start + record_slots + if contiguous { pages } else { 0 };
            // The next commit starts where this one ends only if one like it (or a record
            // and one page, the most common commit) fits there in one write: a record and
            // its pages need one slot more than they take, see above. Else it starts at a
            // new window, so that it need not split into two writes. In a store with little
            // free room the windows are holes between live pages, and this keeps the commit
            // at each hole's end one write.
            let like_this = (record_slots + pages).max(2) + 1;
            let left = end.saturating_sub(new_head);
            let (next_slot, next_end) = if left >= like_this {
                (new_head, end)
            } else {
                let window = match self.new_window(meta, like_this) {
                    // A full medium: what is left of this window, or any free slot.
                    Err(Error::NoSpace) if left > 0 => Ok((new_head, end)),
                    Err(Error::NoSpace) => self.new_window(meta, 1),
                    window => window,
                }?;
                if window.0 != new_head {
                    taken.push((window.0, window.1 - window.0));
                }
                window
            };
            Ok(Placement {
                start,
                end,
                jumped,
                page_slots,
                new_head,
                next_slot,
                next_end,
            })
        })();
        // Commits that add pages (write more than they supersede) keep the reserve; others,
        // a delete or an update on a full disk, may use it. Then the new state.
        let prepared = placed.and_then(|placement| {
            for (&index, &slot) in buffered.iter().zip(&placement.page_slots) {
                if let Some(Op::Page { slot: s, .. }) = ops.get_mut(index) {
                    *s = slot;
                }
            }
            let mut next_state = (*meta.state).clone();
            let mut superseded = Vec::new();
            next_state.apply(&ops, seq, page_size, &mut superseded)?;
            if pages > superseded.len() as u64 {
                self.keep_reserve(meta)?;
                if next_state.base.seq < meta.header.checkpoint.seq {
                    // Keeping the reserve checkpointed the state this one was made from:
                    // make it again from the checkpointed one, which lies on the new base
                    // (invariant 12).
                    next_state = (*meta.state).clone();
                    superseded.clear();
                    next_state.apply(&ops, seq, page_size, &mut superseded)?;
                }
            }
            meta.last_commit_superseded = superseded.len() as u64;
            // Other processes learn that the chain is about to reach `seq` before its record
            // is written (they verify what they read); the next writer then needs to read
            // the chain only when this says there is something new.
            self.publish_progress(meta, meta.header.generation, seq)?;
            Ok((placement, next_state, superseded))
        });
        let (placement, next_state, superseded) = match prepared {
            Ok(prepared) => prepared,
            Err(e) => {
                for (s, n) in taken {
                    meta.alloc.release(s, n);
                }
                return Err(e);
            }
        };
        // From here on nothing fails: the commit is sequenced.
        let Placement {
            start,
            end,
            jumped,
            page_slots,
            new_head,
            next_slot,
            next_end,
        } = placement;
        let mut prev_crc = meta.prev_crc;
        let epoch = meta.header.generation;
        let mut jump_write = None;
        if jumped {
            let jump = Record {
                kind: RecordKind::Jump,
                seq,
                session: meta.session,
                epoch,
                prev_crc,
                next_slot: start,
                window_end: end,
                ops: Vec::new(),
            };
            let (bytes, crc) = jump.encode();
            jump_write = Some((slot_offset(meta.head, page_size), bytes));
            meta.awaiting_checkpoint.push((seq, meta.head));
            if meta.head + 1 < meta.window_end {
                meta.alloc.release(meta.head + 1, meta.window_end - meta.head - 1);
            }
            prev_crc = crc;
            meta.log_bytes_since_checkpoint += page_size;
            bump(&self.counters.jumps, 1);
        }
        if next_slot != new_head && new_head < end {
            meta.alloc.release(new_head, end - new_head);
        }
        let embedded = embedded_pages(&ops);
        let record = Record {
            kind: RecordKind::Commit,
            seq,
            session: meta.session,
            epoch,
            prev_crc,
            next_slot,
            window_end: next_end,
            ops,
        };
        let (bytes, crc) = record.encode();
        meta.awaiting_checkpoint
            .extend((start..start + record_slots).map(|s| (seq, s)));
        meta.awaiting_checkpoint
            .extend(superseded.into_iter().map(|s| (seq, s)));
        meta.head = next_slot;
        meta.window_end = next_end;
        meta.prev_crc = crc;
        meta.state = Arc::new(next_state);
        meta.unpublished.insert(seq, meta.state.clone());
        lock(&self.flush).sequenced = seq;
        meta.commits_since_checkpoint += 1;
        meta.log_bytes_since_checkpoint += record_slots * page_size;
        Ok(Sequenced {
            seq,
            jump: jump_write,
            record: (slot_offset(start, page_size), bytes),
            record_slots,
            page_slots,
            embedded_pages: embedded,
        })
    }
}

/// Pages a commit changed only through overlays carried in its record.
fn embedded_pages(ops: &[Op]) -> u64 {
    let mut whole = BTreeSet::new();
    let mut patched = BTreeSet::new();
    for op in ops {
        match op {
            Op::Page { file, page, .. } => whole.insert((*file, *page)),
            Op::Patch { file, page, .. } => patched.insert((*file, *page)),
            _ => false,
        };
    }
    patched.difference(&whole).count() as u64
}
