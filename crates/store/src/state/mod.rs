//! The mapping from logical pages to slots, as one immutable value per committed state.
//! Commits produce a new `State` by applying their record's operations to the previous one;
//! recovery applies the same operations to the checkpoint, through the same code.
//! Persistent collections make each `State` share almost everything with its predecessor,
//! so a snapshot is a pointer copy.

use crate::error::{Error, Result};
#[cfg(test)]
use crate::format::CheckpointEncoder;
use crate::format::{Checkpoint, Op, NO_SLOT};
use std::sync::Arc;

pub(crate) mod base;
mod entry;
mod overlay;
pub use base::Base;
pub use entry::PageEntry;
pub use overlay::Overlay;

#[derive(Debug, Clone)]
pub struct FileState {
    pub name: Arc<str>,
    pub size: u64,
    /// The pages changed since the base (all below `page_count()`), by page number: each
    /// one's entry now, zeros included. Sparse, so memory follows the pages written.
    pub pages: imbl::OrdMap<u64, PageEntry>,
    /// Pages below this number may have an entry in the base: the file's pages when the
    /// base was made, lowered by every truncation since (0 for a file the base lacks).
    pub base_pages: u64,
    /// How many pages have an entry, base and delta together (what the mapping holds).
    pub mapped: u64,
    /// Sequence number of the last commit that created, resized or deleted the file.
    pub meta_seq: u64,
    /// Sequence number of the last commit that changed the file in any way (after loading
    /// a checkpoint: the checkpoint's).
    pub changed_seq: u64,
}

impl FileState {
    pub fn new(name: &str, meta_seq: u64) -> FileState {
        FileState {
            name: name.into(),
            size: 0,
            pages: imbl::OrdMap::new(),
            base_pages: 0,
            mapped: 0,
            meta_seq,
            changed_seq: meta_seq,
        }
    }

    /// Pages up to `size`, rounded up.
    pub fn page_count(&self, page_size: u64) -> u64 {
        self.size.div_ceil(page_size)
    }
}

/// One committed state of the whole store: the base (the last checkpoint's mapping) with
/// each file's changes since laid over it.
#[derive(Debug, Clone, Default)]
pub struct State {
    pub seq: u64,
    pub files: imbl::OrdMap<u32, FileState>,
    pub next_file_id: u32,
    pub base: Arc<Base>,
}

fn invalid(what: String) -> Error {
    Error::Corrupt(what)
}

#[cfg(test)]
/// A checkpoint stores an entry unless it reads as zeros without an overlay.
fn stored(entry: &PageEntry) -> bool {
    entry.slot != NO_SLOT || entry.overlay.is_some()
}

impl State {
    pub fn file_by_name(&self, name: &str) -> Option<u32> {
        self.files
            .iter()
            .find(|(_, f)| &*f.name == name)
            .map(|(id, _)| *id)
    }

    /// The page's entry: `None` past the end of the file (or for a missing file), zeros for
    /// a page within it that was never written.
    pub fn entry(&self, file: u32, page: u64, page_size: u64) -> Result<Option<PageEntry>> {
        let Some(f) = self.files.get(&file) else {
            return Ok(None);
        };
        if page >= f.page_count(page_size) {
            return Ok(None);
        }
        Ok(Some(self.mapped_entry(file, f, page)?.unwrap_or(PageEntry::ZERO)))
    }

    /// The entry the mapping holds for a page of `f`, delta first, then base.
    fn mapped_entry(&self, file: u32, f: &FileState, page: u64) -> Result<Option<PageEntry>> {
        if let Some(entry) = f.pages.get(&page) {
            return Ok(Some(entry.clone()));
        }
        if page < f.base_pages {
            return self.base.get(file, page);
        }
        Ok(None)
    }

    /// The entries of `file` from page `from` up to `to`, in order: the delta's where it has
    /// one, else the base's.
    /// The pages of `file` below its size whose entry's version is newer than `since`, and
    /// whether the whole mapping was read. The base is the mapping as of its commit and holds
    /// no newer entry, so when `since` is at or after it, the delta alone holds them all.
    pub fn pages_changed_since(&self, file: u32, since: u64, page_size: u64) -> Result<(Vec<u64>, bool)> {
        let Some(f) = self.files.get(&file) else {
            return Ok((Vec::new(), false));
        };
        let end = f.page_count(page_size);
        if since >= self.base.seq {
            let pages = f
                .pages
                .range(..end)
                .filter(|(_, e)| e.seq > since)
                .map(|(p, _)| *p)
                .collect();
            return Ok((pages, false));
        }
        let mut pages = Vec::new();
        for item in self.pages_of(file, 0, end) {
            let (page, entry) = item?;
            if entry.seq > since {
                pages.push(page);
            }
        }
        Ok((pages, true))
    }

    pub fn pages_of(
        &self,
        file: u32,
        from: u64,
        to: u64,
    ) -> impl Iterator<Item = Result<(u64, PageEntry)>> + '_ {
        let (delta, base_end) = match self.files.get(&file) {
            Some(f) => (Some(f.pages.range(from..to.max(from))), f.base_pages.min(to)),
            None => (None, 0),
        };
        MergedPages {
            delta: delta.into_iter().flatten().peekable(),
            base: self.base.pages(file, from, base_end).peekable(),
        }
    }

    /// Every slot this state references.
    pub fn live_slots(&self) -> Result<Vec<u64>> {
        let mut slots = Vec::new();
        for id in self.files.keys() {
            for item in self.pages_of(*id, 0, u64::MAX) {
                let (_, entry) = item?;
                if entry.slot != NO_SLOT {
                    slots.push(entry.slot);
                }
            }
        }
        Ok(slots)
    }

    /// How many pages the mapping holds, over every file.
    pub fn mapped_pages(&self) -> u64 {
        self.files
            .values()
            .fold(0u64, |sum, f| sum.saturating_add(f.mapped))
    }

    /// Give a page of `file` (within it) a new entry; returns the one it had, if any.
    pub fn set_page(&mut self, file: u32, page: u64, entry: PageEntry) -> Result<Option<PageEntry>> {
        let old = match self.files.get(&file) {
            Some(f) => self.mapped_entry(file, f, page)?,
            None => return Err(invalid(format!("no file {file} to map page {page} of"))),
        };
        if let Some(f) = self.files.get_mut(&file) {
            f.pages.insert(page, entry);
            if old.is_none() {
                f.mapped += 1;
            }
        }
        Ok(old)
    }

    /// Set `file`'s size; returns the entries of pages that fall past the new end. Costs
    /// O(dropped · log n): growing touches nothing.
    pub fn resize_file(&mut self, file: u32, bytes: u64, page_size: u64) -> Result<Vec<PageEntry>> {
        let Some(f) = self.files.get(&file) else {
            return Err(invalid(format!("no file {file} to resize")));
        };
        if bytes >= f.size {
            // Every page is below the old end, so below the new one (most commits grow).
            if let Some(f) = self.files.get_mut(&file) {
                f.size = bytes;
            }
            return Ok(Vec::new());
        }
        let end = bytes.div_ceil(page_size);
        let dropped: Vec<PageEntry> = self
            .pages_of(file, end, u64::MAX)
            .map(|item| item.map(|(_, entry)| entry))
            .collect::<Result<_>>()?;
        if let Some(f) = self.files.get_mut(&file) {
            f.size = bytes;
            let past_end: Vec<u64> = f.pages.range(end..).map(|(page, _)| *page).collect();
            for page in past_end {
                f.pages.remove(&page);
            }
            f.base_pages = f.base_pages.min(end);
            f.mapped = f.mapped.checked_sub(dropped.len() as u64).ok_or_else(|| {
                Error::Corrupt(format!(
                    "file {file} drops {} mapped pages but counted {}",
                    dropped.len(),
                    f.mapped
                ))
            })?;
        }
        Ok(dropped)
    }

    /// Apply a record's operations as commit `seq`. Slots this drops or replaces are pushed
    /// to `superseded`. An operation that cannot apply (a missing file, a page past the end,
    /// an overlay outside the page) is an error and leaves `self` partly changed: callers
    /// apply to a copy.
    pub fn apply(&mut self, ops: &[Op], seq: u64, page_size: u64, superseded: &mut Vec<u64>) -> Result<()> {
        let mut i = 0;
        while let Some(op) = ops.get(i) {
            match op {
                Op::Create { file, name } => {
                    if self.files.contains_key(file) || self.file_by_name(name).is_some() {
                        return Err(invalid(format!(
                            "record {seq} creates file {file} ({name:?}) which exists"
                        )));
                    }
                    self.files.insert(*file, FileState::new(name, seq));
                    self.next_file_id = self.next_file_id.max(file.saturating_add(1));
                }
                Op::Delete { file } => {
                    if !self.files.contains_key(file) {
                        return Err(invalid(format!("record {seq} deletes missing file {file}")));
                    }
                    for item in self.pages_of(*file, 0, u64::MAX) {
                        let (_, entry) = item?;
                        if entry.slot != NO_SLOT {
                            superseded.push(entry.slot);
                        }
                    }
                    self.files.remove(file);
                }
                Op::Size { file, bytes } => {
                    self.file_mut(*file, seq)?;
                    let dropped = self.resize_file(*file, *bytes, page_size)?;
                    superseded.extend(dropped.iter().map(|p| p.slot).filter(|s| *s != NO_SLOT));
                    let f = self.file_mut(*file, seq)?;
                    f.meta_seq = seq;
                    f.changed_seq = seq;
                }
                Op::Page {
                    file,
                    page,
                    slot,
                    crc,
                } => {
                    let entry = PageEntry {
                        slot: *slot,
                        crc: *crc,
                        seq,
                        overlay: None,
                    };
                    self.file_for_page(*file, *page, seq, page_size)?;
                    let old = self.set_page(*file, *page, entry)?;
                    if let Some(old) = old.filter(|old| old.slot != NO_SLOT && old.slot != *slot) {
                        superseded.push(old.slot);
                    }
                }
                Op::Patch { file, page, .. } => {
                    // The record's run of patches to this page (a commit sends a page's
                    // ranges together): one walk down the mapping and one overlay for all
                    // of them, laid in place where this state alone holds it.
                    let run = ops[i..]
                        .iter()
                        .take_while(
                            |op| matches!(op, Op::Patch { file: f, page: p, .. } if f == file && p == page),
                        )
                        .count();
                    let patches = ops[i..i + run].iter().filter_map(|op| match op {
                        Op::Patch { offset, bytes, .. } => Some((*offset, bytes)),
                        _ => None,
                    });
                    for (offset, bytes) in patches.clone() {
                        if offset as u64 + bytes.len() as u64 > page_size {
                            return Err(invalid(format!(
                                "record {seq} patches past the end of page {page}"
                            )));
                        }
                    }
                    if !self
                        .file_for_page(*file, *page, seq, page_size)?
                        .pages
                        .contains_key(page)
                    {
                        // First patched since the base: start from the base's entry (its
                        // overlay is copied on the first range laid, the base keeps its own).
                        let f = &self.files[file];
                        let current = self.mapped_entry(*file, f, *page)?;
                        self.set_page(*file, *page, current.unwrap_or(PageEntry::ZERO))?;
                    }
                    let pages = &mut self.file_mut(*file, seq)?.pages;
                    let Some(entry) = pages.get_mut(page) else {
                        return Err(invalid(format!(
                            "record {seq}: page {page} of file {file} vanished"
                        )));
                    };
                    let overlay = Arc::make_mut(entry.overlay.get_or_insert_with(Default::default));
                    for (offset, bytes) in patches {
                        overlay.lay(offset, bytes);
                    }
                    entry.seq = seq;
                    i += run;
                    continue;
                }
            }
            i += 1;
        }
        self.seq = seq;
        Ok(())
    }

    fn file_mut(&mut self, file: u32, seq: u64) -> Result<&mut FileState> {
        self.files
            .get_mut(&file)
            .ok_or_else(|| invalid(format!("record {seq} names missing file {file}")))
    }

    /// The file a record changes `page` of, once the page is known to be inside it.
    fn file_for_page(&mut self, file: u32, page: u64, seq: u64, page_size: u64) -> Result<&mut FileState> {
        let f = self.file_mut(file, seq)?;
        f.changed_seq = seq;
        if page >= f.page_count(page_size) {
            return Err(invalid(format!(
                "record {seq} maps page {page} of file {file} past its end"
            )));
        }
        Ok(f)
    }

    /// The whole mapping as a version-1 checkpoint, and its CRC-32C (tests: a store writes
    /// version 2).
    #[cfg(test)]
    pub fn encode_checkpoint(&self) -> Result<(Vec<u8>, u32)> {
        let mut enc = CheckpointEncoder::new(self.seq, self.next_file_id, self.files.len() as u32);
        for (id, f) in &self.files {
            let mut count = 0u64;
            for item in self.pages_of(*id, 0, u64::MAX) {
                count += u64::from(stored(&item?.1));
            }
            enc.file(*id, &f.name, f.size, count);
            for item in self.pages_of(*id, 0, u64::MAX) {
                let (n, p) = item?;
                if stored(&p) {
                    let overlay = p.overlay.as_deref().map(|o| o.ranges.as_slice()).unwrap_or(&[]);
                    enc.page(n, p.slot, p.crc, overlay);
                }
            }
        }
        Ok(enc.finish())
    }

    /// What a checkpoint writes into the mapping's runs, sorted by key: on a base of runs,
    /// each file's delta (zeros as `NO_SLOT` entries: their version counts), and a
    /// tombstone for each base entry a truncation since cut; on a base in memory (a
    /// version-1 store's first checkpoint), the whole mapping.
    pub fn checkpoint_delta(&self) -> Result<Vec<(onesync_mapping::Key, onesync_mapping::Value)>> {
        use onesync_mapping::{Key, Value};
        let mut delta = Vec::new();
        let on_runs = self.base.stack().is_some();
        for (id, f) in &self.files {
            if !on_runs {
                for item in self.pages_of(*id, 0, u64::MAX) {
                    let (page, entry) = item?;
                    delta.push((Key::new(*id, page), Value::Mapped(base::mapped_of(&entry))));
                }
                continue;
            }
            let mut cut: Vec<(u64, PageEntry)> = Vec::new();
            if f.meta_seq > self.base.seq {
                // Resized since the base: what the base holds past `base_pages` was cut.
                for item in self.base.pages(*id, f.base_pages, u64::MAX) {
                    let (page, entry) = item?;
                    if !f.pages.contains_key(&page) {
                        cut.push((page, entry));
                    }
                }
            }
            let mut cut = cut.into_iter().peekable();
            for (page, entry) in f.pages.iter() {
                while let Some((p, _)) = cut.next_if(|(p, _)| p < page) {
                    delta.push((Key::new(*id, p), Value::Dropped { seq: f.meta_seq }));
                }
                delta.push((Key::new(*id, *page), Value::Mapped(base::mapped_of(entry))));
            }
            for (p, _) in cut {
                delta.push((Key::new(*id, p), Value::Dropped { seq: f.meta_seq }));
            }
        }
        Ok(delta)
    }

    /// This state after a checkpoint wrote its mapping into `base`'s runs: the same files,
    /// every change since now in the base. Costs the number of files.
    pub fn on_runs(&self, base: Base, page_size: u64) -> State {
        let files = self
            .files
            .iter()
            .map(|(id, f)| {
                let mut f = f.clone();
                f.pages = imbl::OrdMap::new();
                f.base_pages = f.page_count(page_size);
                (*id, f)
            })
            .collect();
        State {
            seq: self.seq,
            files,
            next_file_id: self.next_file_id,
            base: Arc::new(base),
        }
    }

    /// This state on a base of its own mapping (after a checkpoint of it): each file's
    /// changes move into the base, and what the truncations since dropped leaves it.
    /// (Here the base is the state's whole mapping in memory; loaded from a checkpoint it
    /// lacks the pages written as zeros, which read and compare as never written.)
    /// Costs what changed since the base, not the mapping's size.
    pub fn rebased(&self, page_size: u64) -> State {
        let mut base_files = imbl::OrdMap::new();
        let mut files = self.files.clone();
        for (id, f) in self.files.iter() {
            let mut pages = self
                .base
                .memory()
                .and_then(|files| files.get(id))
                .cloned()
                .unwrap_or_default();
            if pages.get_max().is_some_and(|(last, _)| *last >= f.base_pages) {
                // Truncated since the base: what lies past the cut leaves it.
                let past_end: Vec<u64> = pages.range(f.base_pages..).map(|(page, _)| *page).collect();
                for page in past_end {
                    pages.remove(&page);
                }
            }
            let Some(f) = files.get_mut(id) else { continue };
            // Zeros written since stay as entries: their sequence number is the page's
            // version, which conflict checks compare.
            for (page, entry) in std::mem::take(&mut f.pages) {
                pages.insert(page, entry);
            }
            f.base_pages = f.page_count(page_size);
            f.mapped = pages.len() as u64;
            base_files.insert(*id, pages);
        }
        State {
            seq: self.seq,
            files,
            next_file_id: self.next_file_id,
            base: Arc::new(Base::new(self.seq, base_files)),
        }
    }

    pub fn from_checkpoint(ck: Checkpoint, page_size: u64) -> Result<State> {
        let mut files = imbl::OrdMap::new();
        let mut base_files = imbl::OrdMap::new();
        let mut next_file_id = ck.next_file_id;
        for cf in ck.files {
            let mut file = FileState {
                size: cf.size,
                meta_seq: ck.seq,
                ..FileState::new(&cf.name, ck.seq)
            };
            let page_count = file.page_count(page_size);
            let mut pages = base::BasePages::new();
            for cp in cf.pages {
                if cp.page >= page_count {
                    return Err(invalid(format!(
                        "checkpoint maps page {} of file {} past its end",
                        cp.page, cf.id
                    )));
                }
                let overlay = if cp.overlay.is_empty() {
                    None
                } else {
                    let mut o = Overlay::default();
                    for (offset, bytes) in &cp.overlay {
                        if *offset as u64 + bytes.len() as u64 > page_size {
                            return Err(invalid("checkpoint overlay runs past its page".into()));
                        }
                        o = o.merged(*offset, bytes);
                    }
                    Some(Arc::new(o))
                };
                let entry = PageEntry {
                    slot: cp.slot,
                    crc: cp.crc,
                    seq: ck.seq,
                    overlay,
                };
                if pages.insert(cp.page, entry).is_some() {
                    return Err(invalid(format!(
                        "checkpoint maps page {} of file {} twice",
                        cp.page, cf.id
                    )));
                }
            }
            file.base_pages = page_count;
            file.mapped = pages.len() as u64;
            next_file_id = next_file_id.max(cf.id.saturating_add(1));
            if files.insert(cf.id, file).is_some() {
                return Err(invalid(format!("checkpoint lists file {} twice", cf.id)));
            }
            base_files.insert(cf.id, pages);
        }
        Ok(State {
            seq: ck.seq,
            files,
            next_file_id,
            base: Arc::new(Base::new(ck.seq, base_files)),
        })
    }
}

/// A file's entries from the delta and the base merged by page number, the delta's first.
struct MergedPages<D, B>
where
    D: Iterator,
    B: Iterator,
{
    delta: std::iter::Peekable<D>,
    base: std::iter::Peekable<B>,
}

impl<'a, D, B> Iterator for MergedPages<D, B>
where
    D: Iterator<Item = (&'a u64, &'a PageEntry)>,
    B: Iterator<Item = Result<(u64, PageEntry)>>,
{
    type Item = Result<(u64, PageEntry)>;

    fn next(&mut self) -> Option<Self::Item> {
        let base_page = match self.base.peek() {
            Some(Ok((page, _))) => Some(*page),
            Some(Err(_)) => return self.base.next(),
            None => None,
        };
        match (self.delta.peek().map(|(page, _)| **page), base_page) {
            (Some(d), Some(b)) if b < d => self.base.next(),
            (Some(d), Some(b)) => {
                if b == d {
                    self.base.next();
                }
                self.delta.next().map(|(page, entry)| Ok((*page, entry.clone())))
            }
            (Some(_), None) => self.delta.next().map(|(page, entry)| Ok((*page, entry.clone()))),
            (None, _) => self.base.next(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlay_merges_and_coalesces() {
        let o = Overlay::default()
            .merged(10, &[1, 2, 3])
            .merged(13, &[4])
            .merged(0, &[9])
            .merged(11, &[7]);
        let ranges: Vec<(u32, Vec<u8>)> = o.ranges.iter().map(|(at, b)| (*at, b.to_vec())).collect();
        assert_eq!(ranges, vec![(0, vec![9]), (10, vec![1, 7, 3, 4])]);
        let mut page = [0u8; 16];
        o.apply_to(&mut page);
        assert_eq!(&page[..], &[9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 7, 3, 4, 0, 0]);
    }

    proptest::proptest! {
        /// Merging range by range gives the same bytes, as sorted, disjoint, non-adjacent
        /// ranges, as laying every byte on a map in order.
        #[test]
        fn overlay_merge_matches_a_byte_map(
            writes in proptest::collection::vec((0u32..200, proptest::collection::vec(proptest::num::u8::ANY, 1..40)), 1..30)
        ) {
            let mut overlay = Overlay::default();
            let mut model = std::collections::BTreeMap::new();
            for (offset, bytes) in &writes {
                overlay = overlay.merged(*offset, bytes);
                for (i, b) in bytes.iter().enumerate() {
                    model.insert(offset + i as u32, *b);
                }
            }
            let mut flat = std::collections::BTreeMap::new();
            for (o, b) in &overlay.ranges {
                for (i, v) in b.iter().enumerate() {
                    flat.insert(o + i as u32, *v);
                }
            }
            proptest::prop_assert_eq!(&flat, &model);
            for pair in overlay.ranges.windows(2) {
                proptest::prop_assert!(pair[0].0 as usize + pair[0].1.len() < pair[1].0 as usize);
            }
        }
    }

    proptest::proptest! {
        /// A record's patches applied together (a page's run laid at once, in place where
        /// the state alone holds its overlay) leave the same overlays as each patch
        /// applied as a commit of its own, on a state shared with an older copy, which
        /// keeps the overlays it had.
        #[test]
        fn a_run_of_patches_applies_as_each_patch_alone(
            patches in proptest::collection::vec((0u64..3, 0u32..100, proptest::collection::vec(proptest::num::u8::ANY, 1..20)), 1..25)
        ) {
            let mut base = State::default();
            let setup = [
                Op::Create { file: 1, name: "a".into() },
                Op::Size { file: 1, bytes: 3 * 512 },
            ];
            base.apply(&setup, 1, 512, &mut Vec::new()).unwrap();
            let ops: Vec<Op> = patches
                .iter()
                .map(|(page, offset, bytes)| Op::Patch {
                    file: 1,
                    page: *page,
                    offset: *offset,
                    bytes: bytes.as_slice().into(),
                })
                .collect();
            let mut together = base.clone();
            together.apply(&ops, 2, 512, &mut Vec::new()).unwrap();
            let older = together.clone();
            together.apply(&ops, 3, 512, &mut Vec::new()).unwrap();
            let mut alone = base.clone();
            for (i, op) in ops.iter().chain(&ops).enumerate() {
                alone.apply(std::slice::from_ref(op), 2 + i as u64, 512, &mut Vec::new()).unwrap();
            }
            let overlays = |s: &State| -> Vec<(u64, Option<Overlay>)> {
                s.files[&1].pages.iter().map(|(p, e)| (*p, e.overlay.as_deref().cloned())).collect()
            };
            let mut once = base.clone();
            for op in &ops {
                once.apply(std::slice::from_ref(op), 2, 512, &mut Vec::new()).unwrap();
            }
            proptest::prop_assert_eq!(overlays(&together), overlays(&alone));
            proptest::prop_assert_eq!(overlays(&older), overlays(&once));
        }
    }

    #[test]
    fn truncation_and_rewrite_supersede_slots() {
        let mut s = State::default();
        let mut gone = Vec::new();
        let ops = [
            Op::Create {
                file: 1,
                name: "a".into(),
            },
            Op::Size {
                file: 1,
                bytes: 3 * 512,
            },
            Op::Page {
                file: 1,
                page: 0,
                slot: 10,
                crc: 1,
            },
            Op::Page {
                file: 1,
                page: 2,
                slot: 12,
                crc: 1,
            },
        ];
        s.apply(&ops, 1, 512, &mut gone).unwrap();
        s.apply(
            &[
                Op::Page {
                    file: 1,
                    page: 0,
                    slot: 20,
                    crc: 2,
                },
                Op::Size { file: 1, bytes: 512 },
            ],
            2,
            512,
            &mut gone,
        )
        .unwrap();
        assert_eq!(gone, vec![10, 12]);
        assert_eq!(s.live_slots().unwrap(), vec![20]);
        let (blob, _) = s.encode_checkpoint().unwrap();
        let back = State::from_checkpoint(Checkpoint::decode(&blob).unwrap(), 512).unwrap();
        assert_eq!(back.entry(1, 0, 512).unwrap().unwrap().slot, 20);
        assert_eq!(back.files[&1].size, 512);
    }

    #[test]
    fn impossible_operations_are_errors() {
        let mut s = State::default();
        let mut gone = Vec::new();
        assert!(s.apply(&[Op::Delete { file: 4 }], 1, 512, &mut gone).is_err());
        s.apply(
            &[Op::Create {
                file: 1,
                name: "a".into(),
            }],
            1,
            512,
            &mut gone,
        )
        .unwrap();
        assert!(s
            .apply(
                &[Op::Page {
                    file: 1,
                    page: 0,
                    slot: 1,
                    crc: 0
                }],
                2,
                512,
                &mut gone
            )
            .is_err());
        assert!(s
            .apply(
                &[Op::Create {
                    file: 2,
                    name: "a".into()
                }],
                2,
                512,
                &mut gone
            )
            .is_err());
    }

    /// What a state says of every page, whatever holds it: each file's size, then each
    /// page's entry up to a little past its end.
    fn every_entry(s: &State, page_size: u64) -> Vec<(u32, u64, Vec<Option<PageEntry>>)> {
        s.files
            .iter()
            .map(|(id, f)| {
                let pages = (0..f.page_count(page_size) + 2)
                    .map(|page| s.entry(*id, page, page_size).unwrap())
                    .collect();
                (*id, f.size, pages)
            })
            .collect()
    }

    proptest::proptest! {
        /// Rebasing (after a checkpoint) changes nothing a state says: the same operations
        /// applied to a state rebased now and then, and to one never rebased, give the
        /// same entries, the same superseded slots and the same counts of mapped pages,
        /// through truncations, regrowth, patches over pages of the base, deletions and
        /// files created again.
        #[test]
        fn a_rebased_state_answers_as_the_state_it_was(
            steps in proptest::collection::vec((0u8..6, 0u64..12, 0u64..1000, proptest::bool::ANY), 1..120)
        ) {
            const PS: u64 = 512;
            let mut plain = State::default();
            let setup = [Op::Create { file: 1, name: "a".into() }, Op::Size { file: 1, bytes: 8 * PS }];
            plain.apply(&setup, 1, PS, &mut Vec::new()).unwrap();
            let mut rebased = plain.rebased(PS);
            let mut file = 1u32;
            for (i, (kind, page, slot, rebase)) in steps.into_iter().enumerate() {
                let seq = i as u64 + 2;
                let size = plain.files[&file].size;
                let ops = match kind {
                    0 if page * PS < size => vec![Op::Page { file, page, slot: slot + 10, crc: slot as u32 }],
                    1 if page * PS < size => vec![Op::Page { file, page, slot: NO_SLOT, crc: 0 }],
                    2 if page * PS < size => vec![Op::Patch { file, page, offset: (slot % 500) as u32, bytes: vec![slot as u8; 3].into() }],
                    3 => vec![Op::Size { file, bytes: page * PS }],
                    4 => vec![Op::Size { file, bytes: (page + 4) * PS }],
                    5 if slot % 4 == 0 => {
                        let next = file + 1;
                        let ops = vec![Op::Delete { file }, Op::Create { file: next, name: "a".into() }, Op::Size { file: next, bytes: 4 * PS }];
                        file = next;
                        ops
                    }
                    _ => continue,
                };
                let (mut gone_plain, mut gone_rebased) = (Vec::new(), Vec::new());
                plain.apply(&ops, seq, PS, &mut gone_plain).unwrap();
                rebased.apply(&ops, seq, PS, &mut gone_rebased).unwrap();
                proptest::prop_assert_eq!(&gone_plain, &gone_rebased);
                if rebase {
                    rebased = rebased.rebased(PS);
                    proptest::prop_assert_eq!(rebased.base.seq, seq);
                }
                proptest::prop_assert_eq!(every_entry(&plain, PS), every_entry(&rebased, PS));
                for s in [&plain, &rebased] {
                    for (id, f) in &s.files {
                        proptest::prop_assert_eq!(f.mapped, s.pages_of(*id, 0, u64::MAX).count() as u64);
                    }
                }
            }
        }
    }
}
