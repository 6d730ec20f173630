//! The mapping as of the last checkpoint, the *base* a [`State`](super::State) lays the
//! pages changed since (its delta) over. A checkpoint makes a new base of the state it
//! writes ([`super::State::rebased`]); every state after it shares that base, and a
//! snapshot older than it keeps the one it began on.
//!
//! Why a base and a delta: a state's lookups, truncations and deletions go through this
//! type's few calls, and a checkpoint needs only the delta; so the base can be kept where
//! it costs no memory (issue 42) without the engine changing. Two kinds:
//! - [`BaseMap::Memory`]: the whole mapping in memory, loaded from a version-1 checkpoint
//!   (until that store's first checkpoint migrates it to version 2).
//! - [`BaseMap::Runs`]: the runs of `onesync_mapping` a version-2 manifest names, read on
//!   demand through the store's slots and a cache bounded in bytes, one per open store.

use super::entry::PageEntry;
use super::overlay::Overlay;
use crate::error::{Error, Result};
use crate::format::slot_offset;
use crate::io::StorageIo;
use onesync_mapping::{BlockIo, BlockRef, Cache, Key, Mapped, Stack};
use std::sync::Arc;

/// One file's pages in the base, by page number: sparse (a checkpoint leaves out pages that
/// read as zeros without an overlay; a rebase keeps those written since, for their version).
pub(super) type BasePages = imbl::OrdMap<u64, PageEntry>;

#[derive(Debug, Clone, Default)]
pub struct Base {
    /// The last commit the base includes.
    pub seq: u64,
    pub(super) map: BaseMap,
}

/// Where a base's entries are.
#[derive(Debug, Clone)]
pub(crate) enum BaseMap {
    Memory(imbl::OrdMap<u32, BasePages>),
    Runs {
        stack: Stack,
        io: SlotBlocks,
        cache: Arc<Cache>,
    },
}

impl Default for BaseMap {
    fn default() -> BaseMap {
        BaseMap::Memory(imbl::OrdMap::new())
    }
}

/// The mapping's blocks read from the store's slots (slot → byte offset as `slot_offset`).
#[derive(Clone)]
pub(crate) struct SlotBlocks {
    pub io: Arc<dyn StorageIo>,
    pub page_size: u64,
}

impl std::fmt::Debug for SlotBlocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SlotBlocks({} byte slots)", self.page_size)
    }
}

impl BlockIo for SlotBlocks {
    fn slot_size(&self) -> usize {
        self.page_size as usize
    }

    fn read_block(&self, block: BlockRef, buf: &mut [u8]) -> std::io::Result<()> {
        // A child's slot comes from a block's bytes: checked, not trusted.
        let offset = block
            .slot
            .checked_mul(self.page_size)
            .and_then(|o| o.checked_add(slot_offset(0, self.page_size)))
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("a mapping block names slot {}, past any file", block.slot),
                )
            })?;
        self.io.read_at(buf, offset)
    }
}

/// A mapping error as the store's: a failed read stays an I/O error, anything else (a
/// block that fails its CRC or does not decode) is corruption, never data.
pub(crate) fn mapping_error(e: onesync_mapping::Error) -> Error {
    match e {
        // A block named past the file's end, or past any file: the mapping is damaged.
        onesync_mapping::Error::Io { during, source }
            if matches!(
                source.kind(),
                std::io::ErrorKind::InvalidData | std::io::ErrorKind::UnexpectedEof
            ) =>
        {
            Error::Corrupt(format!("{during}: {source}"))
        }
        onesync_mapping::Error::Io { during, source } => Error::io(during, source),
        onesync_mapping::Error::Corrupt(why) => Error::Corrupt(why),
        onesync_mapping::Error::Sink(e) => match e.downcast::<Error>() {
            Ok(e) => *e,
            Err(e) => Error::Corrupt(e.to_string()),
        },
    }
}

/// A run's entry as a page entry (an empty overlay is none).
pub(crate) fn entry_of(m: Mapped) -> PageEntry {
    PageEntry {
        slot: m.slot,
        crc: m.crc,
        seq: m.seq,
        overlay: (!m.overlay.is_empty()).then(|| Arc::new(Overlay { ranges: m.overlay })),
    }
}

/// A page entry as a run's entry.
pub(crate) fn mapped_of(e: &PageEntry) -> Mapped {
    let overlay = e.overlay.as_ref().map_or_else(Vec::new, |o| o.ranges.clone());
    Mapped::new(e.slot, e.crc, e.seq, overlay)
}

impl Base {
    pub(super) fn new(seq: u64, files: imbl::OrdMap<u32, BasePages>) -> Base {
        Base {
            seq,
            map: BaseMap::Memory(files),
        }
    }

    /// A base on the runs of a version-2 manifest.
    pub(crate) fn runs(seq: u64, stack: Stack, io: SlotBlocks, cache: Arc<Cache>) -> Base {
        Base {
            seq,
            map: BaseMap::Runs { stack, io, cache },
        }
    }

    /// The runs, for a base on them.
    pub(crate) fn stack(&self) -> Option<&Stack> {
        match &self.map {
            BaseMap::Runs { stack, .. } => Some(stack),
            BaseMap::Memory(_) => None,
        }
    }

    /// The base's entry for a page, if it holds one.
    pub fn get(&self, file: u32, page: u64) -> Result<Option<PageEntry>> {
        match &self.map {
            BaseMap::Memory(files) => Ok(files.get(&file).and_then(|pages| pages.get(&page)).cloned()),
            BaseMap::Runs { stack, io, cache } => Ok(stack
                .get(Key::new(file, page), io, cache)
                .map_err(mapping_error)?
                .map(entry_of)),
        }
    }

    /// The base's entries of `file` from page `from` up to (not including) `to`, in order.
    pub fn pages(
        &self,
        file: u32,
        from: u64,
        to: u64,
    ) -> Box<dyn Iterator<Item = Result<(u64, PageEntry)>> + '_> {
        match &self.map {
            BaseMap::Memory(files) => Box::new(
                files
                    .get(&file)
                    .into_iter()
                    .flat_map(move |pages| pages.range(from..to.max(from)))
                    .map(|(page, entry)| Ok((*page, entry.clone()))),
            ),
            BaseMap::Runs { stack, io, cache } => Box::new(
                stack
                    .range(
                        Key::new(file, from),
                        Key::new(file, to.max(from)),
                        io,
                        Some(cache),
                    )
                    .map(|item| match item {
                        Ok((key, m)) => Ok((key.page, entry_of(m))),
                        Err(e) => Err(mapping_error(e)),
                    }),
            ),
        }
    }

    /// A version-1 base's files, in memory (`None` for a base on runs).
    pub(super) fn memory(&self) -> Option<&imbl::OrdMap<u32, BasePages>> {
        match &self.map {
            BaseMap::Memory(files) => Some(files),
            BaseMap::Runs { .. } => None,
        }
    }
}
