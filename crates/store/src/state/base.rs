//! The mapping as of the last checkpoint, the *base* a [`State`](super::State) lays the
//! pages changed since (its delta) over. A checkpoint makes a new base of the state it
//! writes ([`super::State::rebased`]); every state after it shares that base, and a
//! snapshot older than it keeps the one it began on.
//!
//! Why a base and a delta: a state's lookups, truncations and deletions go through this
//! type's few calls, and a checkpoint needs only the delta; so the base can be kept where
//! it costs no memory (issue 42) without the engine changing. Here it is held in memory,
//! loaded whole from a version-1 checkpoint.

use super::entry::PageEntry;
use crate::error::Result;

/// One file's pages in the base, by page number: sparse (a checkpoint leaves out pages that
/// read as zeros without an overlay; a rebase keeps those written since, for their version).
pub(super) type BasePages = imbl::OrdMap<u64, PageEntry>;

#[derive(Debug, Clone, Default)]
pub struct Base {
    /// The last commit the base includes.
    pub seq: u64,
    pub(super) files: imbl::OrdMap<u32, BasePages>,
}

impl Base {
    pub(super) fn new(seq: u64, files: imbl::OrdMap<u32, BasePages>) -> Base {
        Base { seq, files }
    }

    /// The base's entry for a page, if it holds one.
    pub fn get(&self, file: u32, page: u64) -> Result<Option<PageEntry>> {
        Ok(self.files.get(&file).and_then(|pages| pages.get(&page)).cloned())
    }

    /// The base's entries of `file` from page `from` up to (not including) `to`, in order.
    pub fn pages(
        &self,
        file: u32,
        from: u64,
        to: u64,
    ) -> impl Iterator<Item = Result<(u64, PageEntry)>> + '_ {
        self.files
            .get(&file)
            .into_iter()
            .flat_map(move |pages| pages.range(from..to.max(from)))
            .map(|(page, entry)| Ok((*page, entry.clone())))
    }
}
