//! The mapping from logical pages to slots, as one immutable value per committed state.
//! Commits produce a new `State` by applying their record's operations to the previous one;
//! recovery applies the same operations to the checkpoint, through the same code.
//! Persistent collections make each `State` share almost everything with its predecessor,
//! so a snapshot is a pointer copy.

use crate::error::{Error, Result};
use crate::format::{Checkpoint, CheckpointEncoder, Op, NO_SLOT};
use std::sync::Arc;

/// Bytes laid over a page without rewriting it: sorted, disjoint `(offset, bytes)` ranges.
/// Shared bytes: a merge copies only the region it changes (every process following a
/// commit merges each range the commit patches).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overlay {
    pub ranges: Vec<(u32, Arc<[u8]>)>,
}

impl Overlay {
    pub fn total_bytes(&self) -> usize {
        self.ranges.iter().map(|(_, b)| b.len()).sum()
    }

    pub fn apply_to(&self, page: &mut [u8]) {
        for (offset, bytes) in &self.ranges {
            let start = *offset as usize;
            page[start..start + bytes.len()].copy_from_slice(bytes);
        }
    }

    /// This overlay with `bytes` at `offset` laid on top (see [`Overlay::lay`]).
    pub fn merged(&self, offset: u32, bytes: &[u8]) -> Overlay {
        let mut overlay = self.clone();
        overlay.lay(offset, &Arc::from(bytes));
        overlay
    }

    /// Lay `bytes` at `offset` on top. Ranges stay sorted, disjoint and not adjacent: the
    /// new bytes join every range they overlap or touch into one region, whose bytes are
    /// collected once, or are that region themselves where they cover every range they
    /// touch (every process following a commit lays each range it patches, most of them
    /// over the same range as the commit before).
    pub fn lay(&mut self, offset: u32, bytes: &Arc<[u8]>) {
        let (start, end) = (offset as usize, offset as usize + bytes.len());
        let reaches = |(o, b): &(u32, Arc<[u8]>)| *o as usize + b.len();
        // Ranges are sorted and disjoint, so those touching `start..end` are one run.
        let first = self.ranges.partition_point(|r| reaches(r) < start);
        let last = first + self.ranges[first..].partition_point(|(o, _)| *o as usize <= end);
        let touching = &self.ranges[first..last];
        // Only the first of them can begin before the new bytes, and only the last end
        // after them (the same range, if the bytes land inside one).
        let before: &[u8] = match touching.first() {
            Some((o, b)) if (*o as usize) < start => &b[..start - *o as usize],
            _ => &[],
        };
        let after: &[u8] = match touching.last() {
            Some(r @ (o, b)) if reaches(r) > end => &b[end - *o as usize..],
            _ => &[],
        };
        let region_start = (start - before.len()) as u32;
        let region: Arc<[u8]> = if before.is_empty() && after.is_empty() {
            bytes.clone()
        } else {
            before.iter().chain(bytes.iter()).chain(after).copied().collect()
        };
        self.ranges
            .splice(first..last, std::iter::once((region_start, region)));
    }
}

/// Where one logical page lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageEntry {
    /// The slot holding the page's base content, or `NO_SLOT` for zeros.
    pub slot: u64,
    /// CRC-32C of the slot's content (0 with `NO_SLOT`).
    pub crc: u32,
    /// Sequence number of the commit that last changed this page (for conflict checks).
    pub seq: u64,
    pub overlay: Option<Arc<Overlay>>,
}

impl PageEntry {
    pub const ZERO: PageEntry = PageEntry {
        slot: NO_SLOT,
        crc: 0,
        seq: 0,
        overlay: None,
    };
}

#[derive(Debug, Clone)]
pub struct FileState {
    pub name: Arc<str>,
    pub size: u64,
    /// Pages that are not plain zeros, by page number (all below `page_count()`). Sparse,
    /// so memory follows the pages written, not the logical size.
    pub pages: imbl::OrdMap<u64, PageEntry>,
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
            meta_seq,
            changed_seq: meta_seq,
        }
    }

    /// Pages up to `size`, rounded up.
    pub fn page_count(&self, page_size: u64) -> u64 {
        self.size.div_ceil(page_size)
    }

    /// Set the size; returns the entries of pages that fall past the new end. Costs
    /// O(dropped · log n): growing touches nothing.
    pub fn resize(&mut self, bytes: u64, page_size: u64) -> Vec<PageEntry> {
        let grows = bytes >= self.size;
        self.size = bytes;
        if grows {
            // Every page is below the old end, so below the new one (most commits grow).
            return Vec::new();
        }
        let end = self.page_count(page_size);
        let doomed: Vec<u64> = self.pages.range(end..).map(|(page, _)| *page).collect();
        doomed
            .into_iter()
            .filter_map(|page| self.pages.remove(&page))
            .collect()
    }
}

/// One committed state of the whole store.
#[derive(Debug, Clone, Default)]
pub struct State {
    pub seq: u64,
    pub files: imbl::OrdMap<u32, FileState>,
    pub next_file_id: u32,
}

fn invalid(what: String) -> Error {
    Error::Corrupt(what)
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
    pub fn entry(&self, file: u32, page: u64, page_size: u64) -> Option<&PageEntry> {
        let f = self.files.get(&file)?;
        if page >= f.page_count(page_size) {
            return None;
        }
        Some(f.pages.get(&page).unwrap_or(&PageEntry::ZERO))
    }

    /// Every slot this state references.
    pub fn live_slots(&self) -> impl Iterator<Item = u64> + '_ {
        self.files
            .values()
            .flat_map(|f| f.pages.values().map(|p| p.slot).filter(|s| *s != NO_SLOT))
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
                    let gone = self
                        .files
                        .remove(file)
                        .ok_or_else(|| invalid(format!("record {seq} deletes missing file {file}")))?;
                    superseded.extend(gone.pages.values().map(|p| p.slot).filter(|s| *s != NO_SLOT));
                }
                Op::Size { file, bytes } => {
                    let f = self.file_mut(*file, seq)?;
                    let dropped = f.resize(*bytes, page_size);
                    superseded.extend(dropped.iter().map(|p| p.slot).filter(|s| *s != NO_SLOT));
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
                    // One walk down the mapping (this runs for every page of every commit a
                    // process follows).
                    let old = self
                        .file_for_page(*file, *page, seq, page_size)?
                        .pages
                        .insert(*page, entry);
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
                    let pages = &mut self.file_for_page(*file, *page, seq, page_size)?.pages;
                    let entry = match pages.get_mut(page) {
                        Some(entry) => entry,
                        None => {
                            pages.insert(*page, PageEntry::ZERO);
                            pages.get_mut(page).expect("the entry just inserted")
                        }
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

    pub fn encode_checkpoint(&self) -> (Vec<u8>, u32) {
        let mut enc = CheckpointEncoder::new(self.seq, self.next_file_id, self.files.len() as u32);
        let stored = |p: &PageEntry| p.slot != NO_SLOT || p.overlay.is_some();
        for (id, f) in &self.files {
            enc.file(
                *id,
                &f.name,
                f.size,
                f.pages.values().filter(|p| stored(p)).count() as u64,
            );
            for (n, p) in f.pages.iter().filter(|(_, p)| stored(p)) {
                let overlay = p.overlay.as_deref().map(|o| o.ranges.as_slice()).unwrap_or(&[]);
                enc.page(*n, p.slot, p.crc, overlay);
            }
        }
        enc.finish()
    }

    pub fn from_checkpoint(ck: Checkpoint, page_size: u64) -> Result<State> {
        let mut files = imbl::OrdMap::new();
        let mut next_file_id = ck.next_file_id;
        for cf in ck.files {
            let mut file = FileState {
                size: cf.size,
                meta_seq: ck.seq,
                ..FileState::new(&cf.name, ck.seq)
            };
            let page_count = file.page_count(page_size);
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
                if file.pages.insert(cp.page, entry).is_some() {
                    return Err(invalid(format!(
                        "checkpoint maps page {} of file {} twice",
                        cp.page, cf.id
                    )));
                }
            }
            next_file_id = next_file_id.max(cf.id.saturating_add(1));
            if files.insert(cf.id, file).is_some() {
                return Err(invalid(format!("checkpoint lists file {} twice", cf.id)));
            }
        }
        Ok(State {
            seq: ck.seq,
            files,
            next_file_id,
        })
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
        assert_eq!(s.live_slots().collect::<Vec<_>>(), vec![20]);
        let (blob, _) = s.encode_checkpoint();
        let back = State::from_checkpoint(Checkpoint::decode(&blob).unwrap(), 512).unwrap();
        assert_eq!(back.entry(1, 0, 512).unwrap().slot, 20);
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
}
