//! Snapshots and transactions.

use crate::engine::{CommitRequest, Content, PageKey, PendingCommit, Shared, View};
use crate::error::{CommitError, Error, Result};
use crate::format::{Op, MAX_NAME_LEN, NO_SLOT};
use crate::options::Sabotage;
use crate::state::{FileState, PageEntry, State};
use crate::validation::PageMerger;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Identifies a logical file within a store. Ids are never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FileId(pub u32);

/// `slot` of a page this transaction holds in memory until it commits.
const BUFFERED: u64 = NO_SLOT - 1;
/// A transaction keeps at most this many bytes of pages in memory; past it, it writes them
/// to slots early (they then cost a write request of their own at commit).
const BUFFER_BYTES: u64 = 4 << 20;
/// Merge difference runs separated by fewer equal bytes than this.
const DIFF_GAP: usize = 8;
const MAX_OVERLAY_RANGES: usize = 8;

/// A read-only view of one committed state.
pub struct Snapshot {
    pub(crate) shared: Arc<Shared>,
    pub(crate) state: Arc<State>,
}

impl Snapshot {
    /// The latest state this process knows of (it does not look for other processes'
    /// commits).
    pub(crate) fn new(shared: Arc<Shared>, view: View) -> Snapshot {
        let state = shared.snapshot_known(view);
        Snapshot { shared, state }
    }

    /// The latest written state once the commits sequenced now are written.
    pub(crate) fn latest_settled(shared: Arc<Shared>) -> Result<Snapshot> {
        let state = shared.snapshot_latest_settled()?;
        Ok(Snapshot { shared, state })
    }

    /// The latest state of any process sharing the store.
    pub(crate) fn latest(shared: Arc<Shared>, view: View) -> Result<Snapshot> {
        let state = shared.snapshot_latest(view)?;
        Ok(Snapshot { shared, state })
    }

    /// The sequence number of the commit this snapshot shows.
    pub fn seq(&self) -> u64 {
        self.state.seq
    }

    /// The store's page size in bytes.
    pub fn page_size(&self) -> u64 {
        self.shared.page_size
    }

    pub fn file(&self, name: &str) -> Option<FileId> {
        self.state.file_by_name(name).map(FileId)
    }

    /// A transaction on this state (it keeps the state readable while it lives).
    pub fn begin(self) -> Transaction {
        Transaction::new(self)
    }

    /// The sequence number of the last commit that changed the file named `name`.
    pub fn file_changed_at(&self, name: &str) -> Option<u64> {
        let id = self.state.file_by_name(name)?;
        self.state.files.get(&id).map(|f| f.changed_seq)
    }

    /// All logical files, by id.
    pub fn files(&self) -> Vec<(FileId, String)> {
        list_files(&self.state)
    }

    /// Logical size in bytes.
    pub fn file_size(&self, file: FileId) -> Result<u64> {
        size_of(&self.state, file)
    }

    /// Read one page; pages past the end read as zeros.
    pub fn read_page(&self, file: FileId, page: u64, buf: &mut [u8]) -> Result<()> {
        read_page_in(&self.shared, &self.state, file, page, buf)
    }

    /// The version of a page: the sequence number of the commit that last changed it (0
    /// for a page never written), `None` past the file's end or for a missing file. Two
    /// snapshots with the same version of a page hold the same bytes in it.
    pub fn page_version(&self, file: FileId, page: u64) -> Result<Option<u64>> {
        Ok(self
            .state
            .entry(file.0, page, self.shared.page_size)?
            .map(|e| e.seq))
    }
}

/// The pages of a file whose version is newer than a given commit (`Snapshot::changed_since`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangedPages {
    /// Page numbers below the file's size, ascending.
    pub pages: Vec<u64>,
    /// Whether they were found by reading the whole mapping of the file (the commit is
    /// older than the last checkpoint this snapshot's base holds) rather than the pages
    /// changed since that checkpoint alone.
    pub scanned_mapping: bool,
}

impl Snapshot {
    /// The pages of `file` below its size whose version (`page_version`) is newer than
    /// `since`: exactly the pages whose content may differ from what they held at commit
    /// `since` (a page that reads as zeros because it was cut and regrown without being
    /// written has version 0 and is not among them). Costs the pages changed since the
    /// last checkpoint when `since` is at or after it, else a read of the file's mapping.
    pub fn changed_since(&self, file: FileId, since: u64) -> Result<ChangedPages> {
        let (pages, scanned_mapping) =
            self.state
                .pages_changed_since(file.0, since, self.shared.page_size)?;
        Ok(ChangedPages {
            pages,
            scanned_mapping,
        })
    }
}

impl Clone for Snapshot {
    fn clone(&self) -> Snapshot {
        self.shared.retain_snapshot(self.state.seq);
        Snapshot {
            shared: self.shared.clone(),
            state: self.state.clone(),
        }
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        self.shared.forget_snapshot(self.state.seq);
    }
}

fn list_files(state: &State) -> Vec<(FileId, String)> {
    state
        .files
        .iter()
        .map(|(id, f)| (FileId(*id), f.name.to_string()))
        .collect()
}

fn size_of(state: &State, file: FileId) -> Result<u64> {
    Ok(state.files.get(&file.0).ok_or(Error::NoSuchFile(file.0))?.size)
}

/// Read a page's committed content: its slot (checked against its CRC) plus its overlay.
fn read_entry(shared: &Shared, entry: &PageEntry, buf: &mut [u8], what: impl Fn() -> String) -> Result<()> {
    if entry.slot == NO_SLOT {
        buf.fill(0);
    } else {
        shared.read_slot(entry.slot, buf)?;
        if crc32c::crc32c(buf) != entry.crc {
            return Err(Error::Corrupt(format!(
                "{} fails its checksum (slot {})",
                what(),
                entry.slot
            )));
        }
    }
    if let Some(overlay) = &entry.overlay {
        overlay.apply_to(buf);
    }
    Ok(())
}

/// [`read_entry`] of page `page` of `file`, from the recent pages where it is one of them.
fn read_page_entry(
    shared: &Shared,
    (file, page): PageKey,
    entry: &PageEntry,
    buf: &mut [u8],
    what: impl Fn() -> String,
) -> Result<()> {
    if shared.recent_page(file, page, entry, buf) {
        return Ok(());
    }
    read_entry(shared, entry, buf, what)
}

pub(crate) fn read_page_in(
    shared: &Shared,
    state: &State,
    file: FileId,
    page: u64,
    buf: &mut [u8],
) -> Result<()> {
    if buf.len() as u64 != shared.page_size {
        return Err(Error::InvalidArgument(format!(
            "buffer of {} bytes for pages of {}",
            buf.len(),
            shared.page_size
        )));
    }
    let f = state.files.get(&file.0).ok_or(Error::NoSuchFile(file.0))?;
    match state.entry(file.0, page, shared.page_size)? {
        Some(entry) => read_page_entry(shared, (file.0, page), &entry, buf, || {
            format!("page {page} of {:?}", f.name)
        }),
        None => {
            buf.fill(0);
            Ok(())
        }
    }
}

/// Byte ranges where `new` differs from `old`, or `None` once they cover more than `limit`.
fn diff_ranges(old: &[u8], new: &[u8], limit: usize) -> Option<Vec<(usize, usize)>> {
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    let mut covered = 0;
    // Equal 64-byte blocks (most of a page) are skipped with one comparison each, equal
    // 8-byte words of a differing block with one more; only differing words go byte by
    // byte (the per-byte scan of whole blocks was most of this function's time: `perf
    // record onesync-lab bench insert --mode onesync-normal`).
    const BLOCK: usize = 64;
    const WORD: usize = 8;
    for (b, (old_block, new_block)) in old.chunks(BLOCK).zip(new.chunks(BLOCK)).enumerate() {
        if old_block == new_block {
            continue;
        }
        for (w, (old_word, new_word)) in old_block.chunks(WORD).zip(new_block.chunks(WORD)).enumerate() {
            // As integers: a slice comparison would call memcmp for each word.
            let as_u64 = |bytes: &[u8]| <[u8; WORD]>::try_from(bytes).map(u64::from_ne_bytes);
            if matches!((as_u64(old_word), as_u64(new_word)), (Ok(a), Ok(b)) if a == b) {
                continue;
            }
            let at = b * BLOCK + w * WORD;
            for i in (0..old_word.len())
                .filter(|&k| old_word[k] != new_word[k])
                .map(|k| at + k)
            {
                if !add_differing_byte(&mut ranges, &mut covered, i, limit) {
                    return None;
                }
            }
        }
    }
    Some(ranges)
}

/// Adds differing byte `i` (past every byte added before) to `ranges`, joining it to the last
/// range when the gap is short; `false` once they cover more than `limit` bytes or are too
/// many.
fn add_differing_byte(ranges: &mut Vec<(usize, usize)>, covered: &mut usize, i: usize, limit: usize) -> bool {
    match ranges.last_mut() {
        Some((_, end)) if i < *end + DIFF_GAP => {
            *covered += i + 1 - *end;
            *end = i + 1;
        }
        _ => {
            ranges.push((i, i + 1));
            *covered += 1;
        }
    }
    *covered <= limit && ranges.len() <= MAX_OVERLAY_RANGES
}

/// A set of page writes and file changes that commits atomically, or not at all.
///
/// Isolation: the transaction reads the state it began on plus its own writes. At commit,
/// if another transaction committed since then a change to a page, size or file this one
/// also changed, the commit fails with `Error::Conflict` (first committer wins).
pub struct Transaction {
    base: Snapshot,
    work: State,
    /// Whole pages held until commit, written right after the commit record.
    buffered: BTreeMap<(u32, u64), Arc<[u8]>>,
    /// Slots this transaction wrote early; private until commit, so rewritten in place.
    own_slots: BTreeSet<u64>,
    dirty: BTreeSet<(u32, u64)>,
    /// Smallest size each pre-existing file had during the transaction.
    low_water: BTreeMap<u32, u64>,
    created: BTreeSet<u32>,
    deleted: BTreeSet<u32>,
    finished: bool,
    /// Counted among the store's likely committers (see `Shared::note_active_writer`).
    counted_active: bool,
    /// The last content written to each page, remembered as a recent page once committed.
    fresh: BTreeMap<PageKey, Content>,
    /// Pages read through [`Transaction::read_page_noted`], validated at commit: if another
    /// commit changed one since this transaction began, the commit is refused.
    reads: BTreeSet<(u32, u64)>,
    /// Pages whose changes by other commits are rebased at commit instead of refused.
    mergers: BTreeMap<(u32, u64), PageMerger>,
    /// Refuse the commit if anything at all was committed since `base`
    /// ([`Transaction::refuse_any_later_commit`]).
    only_on_base: bool,
}

impl Transaction {
    pub(crate) fn new(base: Snapshot) -> Transaction {
        let work = (*base.state).clone();
        // A transaction is begun to write: count it as a likely committer from the start,
        // so a flush leader waits for it briefly (see `Shared::wait_durable`).
        let read_only = base.shared.opts.read_only;
        if !read_only {
            base.shared.note_active_writer(true);
        }
        Transaction {
            base,
            work,
            buffered: BTreeMap::new(),
            own_slots: BTreeSet::new(),
            dirty: BTreeSet::new(),
            low_water: BTreeMap::new(),
            created: BTreeSet::new(),
            deleted: BTreeSet::new(),
            finished: false,
            counted_active: !read_only,
            fresh: BTreeMap::new(),
            reads: BTreeSet::new(),
            mergers: BTreeMap::new(),
            only_on_base: false,
        }
    }

    fn shared(&self) -> &Shared {
        &self.base.shared
    }

    /// The sequence number of the state this transaction began on.
    pub fn base_seq(&self) -> u64 {
        self.base.state.seq
    }

    pub fn file(&self, name: &str) -> Option<FileId> {
        self.work.file_by_name(name).map(FileId)
    }

    pub fn files(&self) -> Vec<(FileId, String)> {
        list_files(&self.work)
    }

    pub fn file_size(&self, file: FileId) -> Result<u64> {
        size_of(&self.work, file)
    }

    /// Read a page as this transaction sees it (its own writes included).
    pub fn read_page(&self, file: FileId, page: u64, buf: &mut [u8]) -> Result<()> {
        if let Some(data) = self.buffered.get(&(file.0, page)) {
            if buf.len() != data.len() {
                return Err(Error::InvalidArgument(format!(
                    "buffer of {} bytes for pages of {}",
                    buf.len(),
                    data.len()
                )));
            }
            buf.copy_from_slice(data);
            return Ok(());
        }
        read_page_in(self.shared(), &self.work, file, page, buf)
    }

    /// [`Transaction::read_page`], and note the page as read: the commit is then refused
    /// (`Error::Conflict`) if another commit changed it since this transaction began, as it
    /// is for the pages this transaction writes. With every page a transaction's decisions
    /// depend on read this way, committed transactions are serializable in commit order.
    pub fn read_page_noted(&mut self, file: FileId, page: u64, buf: &mut [u8]) -> Result<()> {
        self.read_page(file, page, buf)?;
        if !self.dirty.contains(&(file.0, page)) && !self.created.contains(&file.0) {
            self.reads.insert((file.0, page));
        }
        Ok(())
    }

    /// Note a page as read without reading it (the caller read it from an older snapshot
    /// and checked it unchanged up to this transaction's base): validated at commit as
    /// [`Transaction::read_page_noted`]'s pages are.
    pub fn note_read(&mut self, file: FileId, page: u64) {
        if !self.dirty.contains(&(file.0, page)) && !self.created.contains(&file.0) {
            self.reads.insert((file.0, page));
        }
    }

    /// Refuse the commit (`Error::Conflict`) if any commit at all came after the state this
    /// transaction began on: what it read need not be noted then, page by page. For a caller
    /// whose read set is large and whose base is the latest state (it can plan again,
    /// noting its reads, in the rare case it loses that race).
    pub fn refuse_any_later_commit(&mut self) {
        self.only_on_base = true;
    }

    /// At commit, if another commit changed `page` of `file` since this transaction began,
    /// call `merger` (under the commit lock) instead of refusing the commit: what it returns
    /// is committed in place of this transaction's write of the page, and `None` refuses.
    /// The page is held whole in memory until commit (not embedded, not written early).
    pub fn merge_at_commit(&mut self, file: FileId, page: u64, merger: PageMerger) {
        self.mergers.insert((file.0, page), merger);
    }

    fn writable(&self) -> Result<()> {
        if self.shared().opts.read_only {
            return Err(Error::ReadOnly);
        }
        Ok(())
    }

    fn stop_counting_active(&mut self) {
        if std::mem::take(&mut self.counted_active) {
            self.base.shared.note_active_writer(false);
        }
    }

    /// Create an empty logical file.
    pub fn create_file(&mut self, name: &str) -> Result<FileId> {
        self.writable()?;
        if name.is_empty() || name.len() > MAX_NAME_LEN || name.contains('\0') {
            return Err(Error::InvalidArgument(format!(
                "file names are 1 to {MAX_NAME_LEN} bytes without NUL"
            )));
        }
        if self.work.file_by_name(name).is_some() {
            return Err(Error::FileExists(name.to_string()));
        }
        let id = self.shared().new_file_id();
        self.work.files.insert(id, FileState::new(name, 0));
        self.created.insert(id);
        Ok(FileId(id))
    }

    pub fn delete_file(&mut self, file: FileId) -> Result<()> {
        self.writable()?;
        self.work.files.remove(&file.0).ok_or(Error::NoSuchFile(file.0))?;
        if !self.created.remove(&file.0) {
            self.deleted.insert(file.0);
        }
        self.dirty.retain(|(f, _)| *f != file.0);
        self.buffered.retain(|(f, _), _| *f != file.0);
        Ok(())
    }

    /// Set a file's logical size in bytes: pages past the end are dropped, pages added read
    /// as zeros.
    pub fn set_file_size(&mut self, file: FileId, bytes: u64) -> Result<()> {
        self.writable()?;
        let page_size = self.shared().page_size;
        let size = self
            .work
            .files
            .get(&file.0)
            .ok_or(Error::NoSuchFile(file.0))?
            .size;
        if bytes.div_ceil(page_size) > u32::MAX as u64 {
            return Err(Error::InvalidArgument(format!("file size {bytes} is too large")));
        }
        if bytes < size && !self.created.contains(&file.0) {
            let low = self.low_water.entry(file.0).or_insert(size);
            *low = (*low).min(bytes);
        }
        let shrinks = bytes < size;
        self.work.resize_file(file.0, bytes, page_size)?;
        if shrinks {
            // Forget this transaction's writes past the new end (only those: growing a file
            // page by page must not cost a pass over every page written so far).
            let kept = bytes.div_ceil(page_size);
            let past_end = self.dirty.split_off(&(file.0, kept));
            self.dirty
                .extend(past_end.into_iter().filter(|(d, _)| *d != file.0));
            let past_end = self.buffered.split_off(&(file.0, kept));
            self.buffered
                .extend(past_end.into_iter().filter(|((d, _), _)| *d != file.0));
        }
        Ok(())
    }

    /// Write one whole page; writing past the end extends the file to include it.
    pub fn write_page(&mut self, file: FileId, page: u64, data: &[u8]) -> Result<()> {
        // One copy, shared by the buffered page and the recent pages once committed (see
        // `commit_without_waiting`).
        self.write_shared_page(file, page, Arc::from(data))
    }

    /// [`Transaction::write_page`] of a content the caller already holds shared: no copy.
    pub fn write_shared_page(&mut self, file: FileId, page: u64, content: Arc<[u8]>) -> Result<()> {
        self.write_page_unremembered(file, page, &content)?;
        self.fresh.insert((file.0, page), content);
        Ok(())
    }

    fn write_page_unremembered(&mut self, file: FileId, page: u64, content: &Arc<[u8]>) -> Result<()> {
        let data: &[u8] = content;
        self.writable()?;
        let page_size = self.shared().page_size;
        if data.len() as u64 != page_size {
            return Err(Error::InvalidArgument(format!(
                "page write of {} bytes; pages are {page_size}",
                data.len()
            )));
        }
        let size = self
            .work
            .files
            .get(&file.0)
            .ok_or(Error::NoSuchFile(file.0))?
            .size;
        if page
            .checked_add(1)
            .and_then(|n| n.checked_mul(page_size))
            .is_none()
        {
            return Err(Error::InvalidArgument(format!("page number {page} is too large")));
        }
        if (page + 1) * page_size > size {
            self.set_file_size(file, (page + 1) * page_size)?;
        }
        let shared = self.base.shared.clone();
        let current = self
            .work
            .entry(file.0, page, page_size)?
            .unwrap_or(PageEntry::ZERO);
        let crc = crc32c::crc32c(data);
        if current.slot != NO_SLOT && self.own_slots.contains(&current.slot) {
            shared.rewrite_early_page(current.slot, data)?;
            self.set_entry(
                file,
                page,
                PageEntry {
                    slot: current.slot,
                    crc,
                    seq: 0,
                    overlay: None,
                },
            )?;
            return Ok(());
        }
        let merged_at_commit = self.mergers.contains_key(&(file.0, page));
        if current.slot != BUFFERED && shared.opts.embed_limit > 0 && !merged_at_commit {
            let mut old = vec![0u8; page_size as usize];
            // A page that cannot be read (damaged, say) is simply rewritten whole.
            let readable = read_page_entry(&shared, (file.0, page), &current, &mut old, String::new).is_ok();
            if let Some(ranges) = diff_ranges(&old, data, shared.opts.embed_limit).filter(|_| readable) {
                if ranges.is_empty() {
                    return Ok(());
                }
                let mut overlay = current.overlay.as_deref().cloned().unwrap_or_default();
                for (start, end) in &ranges {
                    overlay = overlay.merged(*start as u32, &data[*start..*end]);
                }
                if overlay.total_bytes() <= shared.opts.embed_limit
                    && overlay.ranges.len() <= MAX_OVERLAY_RANGES
                {
                    self.set_entry(
                        file,
                        page,
                        PageEntry {
                            overlay: Some(Arc::new(overlay)),
                            ..current
                        },
                    )?;
                    return Ok(());
                }
            }
        }
        self.buffered.insert((file.0, page), content.clone());
        self.set_entry(
            file,
            page,
            PageEntry {
                slot: BUFFERED,
                crc,
                seq: 0,
                overlay: None,
            },
        )?;
        if self.buffered.len() as u64 * page_size > BUFFER_BYTES {
            self.spill()?;
        }
        Ok(())
    }

    /// Write every buffered page to a slot of its own now, to bound memory.
    fn spill(&mut self) -> Result<()> {
        let shared = self.base.shared.clone();
        let (kept, spilled): (BTreeMap<_, _>, BTreeMap<_, _>) = std::mem::take(&mut self.buffered)
            .into_iter()
            .partition(|(key, _)| self.mergers.contains_key(key));
        self.buffered = kept;
        for ((file, page), data) in spilled {
            let slot = shared.write_early_page(&data)?;
            self.own_slots.insert(slot);
            let crc = crc32c::crc32c(&data);
            self.set_entry(
                FileId(file),
                page,
                PageEntry {
                    slot,
                    crc,
                    seq: 0,
                    overlay: None,
                },
            )?;
        }
        Ok(())
    }

    /// Record a page's new entry (the caller has made sure the page is within the file).
    fn set_entry(&mut self, file: FileId, page: u64, entry: PageEntry) -> Result<()> {
        if self.work.files.contains_key(&file.0) {
            self.work.set_page(file.0, page, entry)?;
            self.dirty.insert((file.0, page));
        }
        Ok(())
    }

    /// The record's operations (the net effect of this transaction on its base) and the
    /// indexes of the `Page` operations whose pages are buffered.
    fn operations(&self) -> Result<(Vec<Op>, Vec<usize>)> {
        let page_size = self.shared().page_size;
        let base = &self.base.state;
        let mut ops: Vec<Op> = self.deleted.iter().map(|&file| Op::Delete { file }).collect();
        for &id in &self.created {
            ops.push(Op::Create {
                file: id,
                name: self.work.files[&id].name.to_string(),
            });
        }
        // Size before this transaction's pages apply: the base size, cut to any truncation.
        let size_before_pages = |id: u32| -> u64 {
            if self.created.contains(&id) {
                return 0;
            }
            let size = base.files.get(&id).map_or(0, |b| b.size);
            self.low_water.get(&id).copied().unwrap_or(size).min(size)
        };
        for (&id, f) in &self.work.files {
            let before = if self.created.contains(&id) {
                0
            } else {
                base.files.get(&id).map_or(0, |b| b.size)
            };
            let low = size_before_pages(id);
            if low < before {
                ops.push(Op::Size { file: id, bytes: low });
            }
            if f.size != low {
                ops.push(Op::Size {
                    file: id,
                    bytes: f.size,
                });
            }
        }
        let mut buffered = Vec::new();
        for &(id, page) in &self.dirty {
            let Some(entry) = self.work.entry(id, page, page_size)? else {
                continue;
            };
            let prior = if page < size_before_pages(id).div_ceil(page_size) {
                base.entry(id, page, page_size)?
            } else {
                None
            };
            let prior_slot = prior.as_ref().map_or(NO_SLOT, |p| p.slot);
            let prior_overlay = prior.as_ref().and_then(|p| p.overlay.as_deref());
            if entry.slot != prior_slot {
                if entry.slot == BUFFERED {
                    buffered.push(ops.len());
                }
                ops.push(Op::Page {
                    file: id,
                    page,
                    slot: entry.slot,
                    crc: entry.crc,
                });
            }
            if let Some(overlay) = entry.overlay.as_deref() {
                if entry.slot != prior_slot || Some(overlay) != prior_overlay {
                    // Over the same slot, only the ranges that are not already the prior
                    // overlay's: laid over it, they give exactly this overlay (merging only
                    // adds bytes, and ranges are maximal runs), and every process following
                    // the record merges each one it is sent.
                    let by_offset = self.shared().opts.sabotaged(Sabotage::PatchRangesByOffset);
                    let kept = |range: &(u32, Arc<[u8]>)| {
                        entry.slot == prior_slot
                            && prior_overlay.is_some_and(|p| {
                                p.ranges
                                    .iter()
                                    .any(|r| r == range || (by_offset && r.0 == range.0))
                            })
                    };
                    for (offset, bytes) in overlay.ranges.iter().filter(|r| !kept(r)) {
                        ops.push(Op::Patch {
                            file: id,
                            page,
                            offset: *offset,
                            bytes: bytes.clone(),
                        });
                    }
                }
            }
        }
        Ok((ops, buffered))
    }

    /// Describe the first change another commit made since `base` to something this
    /// transaction changes or read (see `read_page_noted`), after rebasing the pages that
    /// have a merger (see `merge_at_commit`); `merged` gets the pages rebased.
    fn find_conflict(
        &self,
        latest: &State,
        ops: &mut [Op],
        buffered: &[usize],
        pages: &mut [Arc<[u8]>],
        merged: &mut BTreeSet<(u32, u64)>,
    ) -> Option<String> {
        if latest.seq == self.base.state.seq {
            return None;
        }
        if let Some(what) = self.later_commit(latest) {
            return Some(what);
        }
        if let Some(what) = self.find_unmergeable_conflict(latest, ops) {
            return Some(what);
        }
        let shared = self.shared();
        let read = |state: &State, file: u32, page: u64, buf: &mut [u8]| {
            read_page_in(shared, state, FileId(file), page, buf).is_ok()
        };
        crate::validation::rebase_merged(
            shared.page_size,
            &read,
            &self.mergers,
            &self.base.state,
            latest,
            ops,
            buffered,
            pages,
            merged,
        )
        .err()
    }

    /// What `find_conflict` finds against `latest` and would against any later state: a
    /// page or file changed since `base` stays changed (its version only rises). Pages with
    /// a merger are left to `find_conflict`, which may rebase them.
    fn find_early_conflict(&self, latest: &State, ops: &[Op]) -> Option<String> {
        if latest.seq == self.base.state.seq {
            return None;
        }
        if let Some(what) = self.later_commit(latest) {
            return Some(what);
        }
        if !self.mergers.is_empty() {
            return None;
        }
        self.find_unmergeable_conflict(latest, ops)
    }

    /// [`Transaction::refuse_any_later_commit`]'s refusal (`latest` is past the base).
    fn later_commit(&self, latest: &State) -> Option<String> {
        let fenced = self.only_on_base && !self.shared().opts.sabotaged(Sabotage::FenceIgnored);
        fenced.then(|| {
            format!(
                "commit {} came after the state this transaction was planned on ({})",
                latest.seq, self.base.state.seq
            )
        })
    }

    /// The part of `find_conflict` no merger can rebase: a page or file written, or a page
    /// read, that another commit changed since `base`.
    fn find_unmergeable_conflict(&self, latest: &State, ops: &[Op]) -> Option<String> {
        self.find_write_conflict(latest, ops).or_else(|| {
            if self.shared().opts.sabotaged(Sabotage::NoReadValidation) {
                return None;
            }
            crate::validation::changed_reads(
                self.shared().page_size,
                &self.reads,
                &self.mergers,
                &self.base.state,
                latest,
            )
        })
    }

    /// The write-write part of `find_conflict`.
    fn find_write_conflict(&self, latest: &State, ops: &[Op]) -> Option<String> {
        let base_seq = self.base.state.seq;
        // The files this commit creates, by the ids the operations give them now.
        let created: BTreeSet<u32> = ops
            .iter()
            .filter_map(|op| match op {
                Op::Create { file, .. } => Some(*file),
                _ => None,
            })
            .collect();
        for op in ops {
            match op {
                Op::Create { name, .. } if latest.file_by_name(name).is_some() => {
                    return Some(format!("file name {name:?}"))
                }
                Op::Create { .. } => {}
                Op::Delete { file }
                | Op::Size { file, .. }
                | Op::Page { file, .. }
                | Op::Patch { file, .. } => {
                    if created.contains(file) {
                        continue;
                    }
                    let Some(f) = latest.files.get(file) else {
                        return Some(format!("file {file} (deleted)"));
                    };
                    if f.meta_seq > base_seq {
                        return Some(format!("the size of {:?}", f.name));
                    }
                    if let Op::Page { page, .. } | Op::Patch { page, .. } = op {
                        if self.mergers.contains_key(&(*file, *page)) {
                            continue;
                        }
                        match latest.entry(*file, *page, self.shared().page_size) {
                            Ok(entry) if entry.as_ref().is_some_and(|e| e.seq > base_seq) => {
                                return Some(format!("page {page} of {:?}", f.name));
                            }
                            Ok(_) => {}
                            Err(e) => {
                                return Some(format!(
                                    "page {page} of {:?}, whose mapping could not be read ({e})",
                                    f.name
                                ))
                            }
                        }
                    }
                }
            }
        }
        None
    }

    /// Commit: returns once the transaction is durable. On error the transaction did not
    /// take effect, unless `CommitError::seq` is set and a crash intervened (then it may).
    pub fn commit(self) -> Result<u64, CommitError> {
        self.commit_without_waiting()?.wait()
    }

    /// The first half of `commit`: sequence and write the transaction, so that it is visible
    /// to new snapshots and transactions, without waiting for the flush. The caller can
    /// release its own locks, then call [`PendingCommit::wait`], which returns once the
    /// transaction is durable (sharing a flush with whoever commits meanwhile).
    pub fn commit_without_waiting(mut self) -> Result<PendingCommit, CommitError> {
        // Before `finished`: a mapping that cannot be read leaves the transaction to be
        // dropped as one abandoned (its early slots go back).
        let (ops, buffered) = self
            .operations()
            .map_err(|error| CommitError { seq: None, error })?;
        self.finished = true;
        let shared = self.base.shared.clone();
        let early_slots = std::mem::take(&mut self.own_slots);
        if ops.is_empty() {
            return Ok(shared.commit_nothing(self.base.state.seq, early_slots));
        }
        let mut pages = Vec::with_capacity(buffered.len());
        for &index in &buffered {
            if let Op::Page { file, page, .. } = &ops[index] {
                match self.buffered.remove(&(*file, *page)) {
                    Some(data) => pages.push(data),
                    None => {
                        return Err(CommitError {
                            seq: None,
                            error: Error::Corrupt(format!("buffered page {page} of file {file} is missing")),
                        })
                    }
                }
            }
        }
        let request = CommitRequest {
            ops,
            buffered,
            pages,
            created: &self.created,
            early_slots,
        };
        let mut merged = BTreeSet::new();
        let pending = shared.commit(
            request,
            |latest, ops| self.find_early_conflict(latest, ops),
            |latest, ops, buffered, pages| self.find_conflict(latest, ops, buffered, pages, &mut merged),
        )?;
        self.stop_counting_active();
        // Files created here were renumbered at commit, and rebased pages differ from what
        // was written: neither is remembered.
        let fresh = std::mem::take(&mut self.fresh)
            .into_iter()
            .filter(|(key @ (file, _), _)| !self.created.contains(file) && !merged.contains(key))
            .collect();
        shared.remember_committed(pending.seq(), fresh);
        Ok(pending)
    }

    /// Discard every change.
    pub fn abort(mut self) {
        self.finished = true;
        self.release_own_slots();
    }

    fn release_own_slots(&mut self) {
        let slots = std::mem::take(&mut self.own_slots);
        if !slots.is_empty() {
            self.base.shared.release_slots(slots);
        }
    }
}

impl Drop for Transaction {
    fn drop(&mut self) {
        // Committed (already uncounted), aborted, failed or abandoned: no longer on its way.
        self.stop_counting_active();
        if !self.finished {
            self.finished = true;
            self.release_own_slots();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The byte-at-a-time definition `diff_ranges` must agree with (every byte compared; the
    /// same rule for joining them into ranges).
    fn diff_ranges_by_byte(old: &[u8], new: &[u8], limit: usize) -> Option<Vec<(usize, usize)>> {
        let mut ranges: Vec<(usize, usize)> = Vec::new();
        let mut covered = 0;
        for i in (0..old.len()).filter(|&i| old[i] != new[i]) {
            if !add_differing_byte(&mut ranges, &mut covered, i, limit) {
                return None;
            }
        }
        Some(ranges)
    }

    #[test]
    fn diff_ranges_agrees_with_the_byte_by_byte_definition() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..2000 {
            let len = [4096, 1000, 65, 7][round % 4];
            let old: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let mut new = old.clone();
            for _ in 0..(next() % 40) {
                let at = (next() as usize) % len;
                let run = 1 + (next() as usize) % 12;
                for byte in new.iter_mut().skip(at).take(run) {
                    *byte = byte.wrapping_add(1 + (next() % 255) as u8);
                }
            }
            for limit in [0, 16, 256, 4096] {
                assert_eq!(
                    diff_ranges(&old, &new, limit),
                    diff_ranges_by_byte(&old, &new, limit),
                    "round {round}, limit {limit}"
                );
            }
        }
    }
}
