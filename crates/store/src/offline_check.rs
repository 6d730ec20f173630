//! The offline check of a version-2 store's durable checkpoint: every block of the
//! mapping's runs read and checked (`Stack::check`), and the free slots its manifest
//! persists compared with the complement of everything the checkpoint names, computed by a
//! full scan (what checkpoints maintain incrementally, and recovery trusts without one).

use crate::error::{Error, Result};
use crate::format::{NO_SLOT, SLOT_BASE};
use crate::free_set::FreeSet;
use crate::io::StorageIo;
use crate::loading::{load_checkpoint, MappingIo};
use crate::recovery::newest_header;
use crate::state::base::{mapping_error, SlotBlocks};
use std::sync::Arc;

/// What [`check_file`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckReport {
    /// Runs, blocks and entries of the mapping (`onesync_mapping::CheckReport`).
    pub runs: usize,
    pub blocks: u64,
    pub entries: u64,
    /// Pages the mapping names a slot for.
    pub page_slots: u64,
    /// Free slots the manifest persists (all found free by the scan).
    pub free_slots: u64,
}

/// Checks the checkpoint the newest header of `io` names (a store nobody is writing to).
/// `Corrupt` names the first problem: a damaged block, a slot named twice, or free slots
/// that differ from the full scan's.
pub fn check_file(io: Arc<dyn StorageIo>) -> Result<CheckReport> {
    let header = newest_header(io.as_ref())?;
    if header.version < 2 {
        return Err(Error::InvalidArgument(
            "a version-1 store has no manifest to check (its first checkpoint writes one)".into(),
        ));
    }
    let page_size = header.page_size as u64;
    let len = io
        .size()
        .map_err(|e| Error::io("reading the store's length", e))?;
    let capacity = len.saturating_sub(SLOT_BASE) / page_size;
    let mapping = MappingIo::new(io.clone(), 1 << 20);
    let loaded = load_checkpoint(io.as_ref(), &header, capacity, &mapping)?;
    let Some(baseline) = loaded.free else {
        return Err(Error::Corrupt("a version-2 header names no manifest".into()));
    };
    let state = loaded.state;
    let stack = state.base.stack().cloned().unwrap_or_default();
    let blocks_io = SlotBlocks {
        io: io.clone(),
        page_size,
    };
    let report = stack.check(&blocks_io).map_err(mapping_error)?;
    let mut named: Vec<u64> = Vec::new();
    let mut page_slots = 0;
    for id in state.files.keys() {
        for item in state.pages_of(*id, 0, u64::MAX) {
            let (_, entry) = item?;
            if entry.slot != NO_SLOT {
                named.push(entry.slot);
                page_slots += 1;
            }
        }
    }
    for run in &stack.runs {
        for block in run.blocks(&blocks_io, None).map_err(mapping_error)? {
            named.extend(block.slot..block.slot + u64::from(block.slots));
        }
    }
    named.extend(header.checkpoint.slots());
    named.extend(header.log.first_slot..header.log.window_end);
    let count = named.len();
    named.sort_unstable();
    named.dedup();
    if named.len() != count {
        return Err(Error::Corrupt(
            "a slot is named twice (page, block, manifest, window)".into(),
        ));
    }
    let scanned = FreeSet::complement(baseline.slot_total, named);
    let mut persisted = baseline.free.clone();
    persisted.clip(baseline.slot_total);
    if scanned != persisted {
        let only_scan: Vec<(u64, u64)> = scanned
            .extents()
            .into_iter()
            .filter(|e| !persisted.extents().contains(e))
            .take(8)
            .collect();
        let only_manifest: Vec<(u64, u64)> = persisted
            .extents()
            .into_iter()
            .filter(|e| !scanned.extents().contains(e))
            .take(8)
            .collect();
        return Err(Error::Corrupt(format!(
            "the manifest's free slots differ from the full scan's: scan only {only_scan:?}, manifest only {only_manifest:?}"
        )));
    }
    Ok(CheckReport {
        runs: report.runs,
        blocks: report.blocks,
        entries: report.entries,
        page_slots,
        free_slots: persisted.extents().iter().map(|&(_, n)| n).sum(),
    })
}
