//! What a checkpoint writes of the mapping (format version 2): the delta since the last
//! checkpoint as a new run of `onesync_mapping`, merged per its policy, placed in free
//! slots; and the free slots the manifest persists, kept up to date from what the commits
//! since freed and what the new checkpoint names, not by scanning the mapping.

use super::shared::{Meta, Shared};
use crate::error::{Error, Result};
use crate::format::{slot_offset, Manifest, ManifestFile, MAX_CHECKPOINT_EXTENTS, NO_SLOT};
use crate::free_set::FreeSet;
use crate::loading::FreeBaseline;
use crate::state::base::{mapping_error, SlotBlocks};
use crate::state::State;
use onesync_mapping::{BlockRef, BlockSink, Key, MergePolicy, Stack, Value};

/// Blocks placed in slots the allocator gives, written and counted as a checkpoint's.
/// Blocks placed one after the other are written together (one write call for a run of
/// them, as a commit is one), up to `PENDING_MAX` bytes.
struct SlotSink<'a> {
    shared: &'a Shared,
    meta: &'a mut Meta,
    /// (first slot, slots) of every block placed: given back should the checkpoint fail.
    placed: Vec<(u64, u64)>,
    /// Blocks placed but not yet written: their first slot and bytes.
    pending: Option<(u64, Vec<u8>)>,
}

/// The most bytes of placed blocks a checkpoint holds before writing them.
const PENDING_MAX: usize = 256 << 10;

impl SlotSink<'_> {
    /// Writes the blocks placed and not yet written.
    fn write_pending(&mut self) -> Result<()> {
        if let Some((first, bytes)) = self.pending.take() {
            self.shared.write_for_checkpoint(
                &bytes,
                slot_offset(first, self.shared.page_size),
                "writing the mapping",
            )?;
        }
        Ok(())
    }
}

impl BlockSink for SlotSink<'_> {
    fn slot_size(&self) -> usize {
        self.shared.page_size as usize
    }

    fn place(&mut self, bytes: &[u8]) -> Result<u64, onesync_mapping::Error> {
        let page_size = self.shared.page_size;
        let n = (bytes.len() as u64).div_ceil(page_size);
        let sink = |e: Error| onesync_mapping::Error::Sink(Box::new(e));
        let first = self.shared.alloc_run(self.meta, n).map_err(sink)?;
        self.placed.push((first, n));
        let follows = self.pending.as_ref().is_some_and(|(start, held)| {
            start + held.len() as u64 / page_size == first && held.len() + bytes.len() <= PENDING_MAX
        });
        if !follows {
            self.write_pending().map_err(sink)?;
            self.pending = Some((first, Vec::with_capacity(bytes.len())));
        }
        if let Some((_, held)) = &mut self.pending {
            held.extend_from_slice(bytes);
        }
        Ok(first)
    }
}

/// A checkpoint's mapping, written, and its manifest, placed but not yet written.
pub(super) struct Written {
    pub manifest: Vec<u8>,
    pub crc: u32,
    /// Where the manifest goes.
    pub extents: Vec<(u64, u64)>,
    /// The runs the new base lies on.
    pub stack: Stack,
    /// Blocks of the runs the checkpoint replaced: freed once no reader can use them.
    pub replaced: Vec<BlockRef>,
    /// Blocks of the new run (given back if the header is not written).
    pub placed: Vec<(u64, u64)>,
    /// What the manifest persists as free.
    pub free: FreeBaseline,
}

impl Written {
    /// The header was not written: the blocks and the manifest's slots go back.
    pub fn give_back(&self, meta: &mut Meta) {
        for &(first, n) in self.placed.iter().chain(&self.extents) {
            meta.alloc.release(first, n);
        }
    }
}

impl Shared {
    /// Writes the state's delta into runs and lays out the manifest naming them, with the
    /// free slots: the last manifest's, plus the slots past its total, the old window, the
    /// old manifest, what the commits since freed (`Meta::freed_since`), the replaced runs'
    /// blocks and `moved_from`; less the pages the delta maps, the new blocks, the window
    /// and the new manifest. After a version-1 checkpoint (no free slots persisted yet),
    /// once: every slot but the whole mapping's. On an error, nothing stays allocated.
    /// `compact`: the runs are all rewritten into the lowest free slots too (their blocks may
    /// lie where the file is to be cut).
    pub(super) fn write_mapping(
        &self,
        meta: &mut Meta,
        moved_from: &[u64],
        compact: bool,
    ) -> Result<Written> {
        let state = meta.state.clone();
        let page_size = self.page_size;
        let delta = state.checkpoint_delta()?;
        let named_pages: Vec<u64> = delta
            .iter()
            .filter_map(|(_, value)| match value {
                Value::Mapped(m) if m.slot != NO_SLOT => Some(m.slot),
                _ => None,
            })
            .collect();
        let old_stack = state.base.stack().cloned().unwrap_or_default();
        let io = SlotBlocks {
            io: self.io.clone(),
            page_size,
        };
        // File ids are never reused: a file the state lacks was deleted.
        let keep = |key: Key| state.files.contains_key(&key.file);
        let mut sink = SlotSink {
            shared: self,
            meta,
            placed: Vec::new(),
            pending: None,
        };
        let outcome = old_stack
            .checkpoint(
                delta,
                &keep,
                if compact {
                    MergePolicy::ALL
                } else {
                    MergePolicy::DEFAULT
                },
                &io,
                &mut sink,
            )
            .map_err(mapping_error)
            .and_then(|outcome| sink.write_pending().map(|()| outcome));
        let placed = std::mem::take(&mut sink.placed);
        let give_back = |meta: &mut Meta, placed: &[(u64, u64)]| {
            for &(first, n) in placed {
                meta.alloc.release(first, n);
            }
        };
        let outcome = match outcome {
            Ok(outcome) => outcome,
            Err(e) => {
                give_back(meta, &placed);
                return Err(e);
            }
        };
        let total = meta.alloc.capacity();
        let free =
            match self.free_before_manifest(meta, &state, &outcome, &placed, &named_pages, moved_from, total)
            {
                Ok(free) => free,
                Err(e) => {
                    give_back(meta, &placed);
                    return Err(e);
                }
            };
        let mut manifest = Manifest {
            seq: state.seq,
            next_file_id: state.next_file_id,
            slot_total: total,
            files: state
                .files
                .iter()
                .map(|(id, f)| ManifestFile {
                    id: *id,
                    name: f.name.to_string(),
                    size: f.size,
                    mapped: f.mapped,
                })
                .collect(),
            runs: outcome.stack.runs.clone(),
            free: free.extents(),
        };
        // Taking the manifest's slots out of the free ones splits at most one extent per
        // manifest extent, and growing for it adds at most one: room for two more extents
        // first, and if the slots came in several runs, again with room for as many.
        let len = manifest.encode_with_crc().0.len();
        let mut room = 2;
        let (extents, free, bytes, crc) = loop {
            let most = len + 16 * room;
            let extents = match self.alloc_extents(meta, (most as u64).div_ceil(page_size)) {
                Ok(extents) => extents,
                Err(e) => {
                    give_back(meta, &placed);
                    return Err(e);
                }
            };
            let mut free = free.clone();
            let grown_to = meta.alloc.capacity();
            free.add(total, grown_to);
            for &(first, n) in &extents {
                free.remove(first, first + n);
            }
            manifest.slot_total = grown_to;
            manifest.free = free.extents();
            let (bytes, crc) = manifest.encode_with_crc();
            let taken: u64 = extents.iter().map(|&(_, n)| n).sum();
            if bytes.len() as u64 <= taken * page_size || room > MAX_CHECKPOINT_EXTENTS {
                break (extents, free, bytes, crc);
            }
            for &(first, n) in &extents {
                meta.alloc.release(first, n);
            }
            room = extents.len() + 1;
        };
        if bytes.len() as u64 > extents.iter().map(|&(_, n)| n).sum::<u64>() * page_size {
            give_back(meta, &placed);
            give_back(meta, &extents);
            return Err(Error::Corrupt(
                "the manifest outgrew the slots taken for it".into(),
            ));
        }
        let grown_to = manifest.slot_total;
        super::invariants::debug_assert_manifest_free(
            meta,
            &free,
            grown_to,
            named_pages
                .iter()
                .map(|&slot| (slot, 1))
                .chain(placed.iter().copied())
                .chain(extents.iter().copied()),
        );
        Ok(Written {
            manifest: bytes,
            crc,
            extents,
            stack: outcome.stack,
            replaced: outcome.freed,
            placed,
            free: FreeBaseline {
                slot_total: grown_to,
                free,
            },
        })
    }

    /// The free slots below `total` as of the new checkpoint, its manifest aside.
    #[allow(clippy::too_many_arguments)]
    fn free_before_manifest(
        &self,
        meta: &Meta,
        state: &State,
        outcome: &onesync_mapping::CheckpointOutcome,
        placed: &[(u64, u64)],
        named_pages: &[u64],
        moved_from: &[u64],
        total: u64,
    ) -> Result<FreeSet> {
        let mut free = match &meta.free_baseline {
            Some(baseline) => {
                let mut free = baseline.free.clone();
                free.add(baseline.slot_total, total);
                let old = meta.header;
                free.add(old.log.first_slot, old.log.window_end);
                for &(first, n) in old.checkpoint.extents() {
                    free.add(first, first + n);
                }
                for &slot in meta.freed_since.iter().chain(moved_from) {
                    free.add(slot, slot + 1);
                }
                for block in &outcome.freed {
                    free.add(block.slot, block.slot + u64::from(block.slots));
                }
                free
            }
            None => {
                // Once, for a store migrating from version 1 (its delta is the whole
                // mapping): every slot but the mapping's pages and blocks.
                let mut named = state.live_slots()?;
                let io = SlotBlocks {
                    io: self.io.clone(),
                    page_size: self.page_size,
                };
                let kept = usize::from(outcome.written_slots > 0);
                for run in outcome.stack.runs.iter().skip(kept) {
                    for block in run.blocks(&io, None).map_err(mapping_error)? {
                        named.extend(block.slot..block.slot + u64::from(block.slots));
                    }
                }
                FreeSet::complement(total, named)
            }
        };
        for &slot in named_pages {
            free.remove(slot, slot + 1);
        }
        for &(first, n) in placed {
            free.remove(first, first + n);
        }
        free.remove(meta.head, meta.window_end);
        free.clip(total);
        Ok(free)
    }
}
