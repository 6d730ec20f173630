//! The host side of the simulated drive: a small journaling filesystem on an [`Ssd`].
//!
//! SQLite's journals pay a second time in the filesystem below them ("journaling of
//! journal"); the X-FTL paper's gains are measured against ext4 on the drive. This module is
//! that filesystem, with ext4's costs where they matter to a flash drive:
//!
//! * **Layout** (block = drive page): superblock, group descriptor, inode bitmap, block
//!   bitmap, a directory block, an inode table, a circular journal (its own superblock plus
//!   log blocks), then data. Files are extents of data blocks, allocated in chunks (ext4's
//!   preallocation) next to the file's last extent when possible.
//! * **Page cache**: writes stay in memory until `fsync` (or until more than
//!   [`FsConfig::dirty_limit_blocks`] are dirty); reads are cached. A power cut loses it.
//! * **Ordered journaling** (ext4's default, `data=ordered`): `fsync` writes the file's dirty
//!   data home; if metadata changed (size, allocation, a created or deleted file) it then
//!   commits the running journal transaction: a descriptor block, the changed metadata blocks
//!   and, after a flush, a commit block and a flush (jbd2's PREFLUSH + FUA commit on a drive
//!   without FUA). Otherwise one flush. Logged blocks reach home at a checkpoint, when the
//!   journal is half full: write them, flush, advance the journal's tail, flush.
//! * **Data journaling** (`data=journal`): the same, but data blocks go through the journal
//!   too (written twice: journal, then home at the checkpoint).
//! * **X-FTL**: no journal. A file's writes (data and the metadata blocks they change) go to
//!   the drive as `write_tx` under the file's transaction id; `fsync` commits it, so data and
//!   metadata become durable atomically; [`FlashFs::abort`] drops it (SQLite's ROLLBACK).
//!   This is the paper's ext4 change: "translate read(P)/write(P) to read(t,P)/write(t,P),
//!   transfer commit/abort to the storage, transaction id management per file".
//! * Metadata freed by an uncommitted operation (an unlinked file's blocks) is not reused
//!   before the operation commits, and discards (off by default, as in ext4's default mount)
//!   are sent only after it.
//! * Like jbd2's commit timer, a running transaction older than
//!   [`FsConfig::commit_interval_us`] of simulated time is committed at the next call.
//!
//! [`FlashFs::mount`] after a power cut replays the journal (every complete transaction after
//! the tail) and reads the inode table; what the filesystem trusts on disk is the superblock,
//! the journal and the inodes (bitmaps, the group descriptor and the directory block are
//! rewritten from the inodes: they are written for their cost).

mod allocator;
mod cache;
mod commit;
mod journal;
pub(crate) mod layout;
mod state;
mod types;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use onesync_codec::{OnDisk, Problem};

pub use layout::INODE_SIZE;
pub use state::FlashFs;
pub use types::{
    FileId, FsConfig, FsCounters, FsError, FsResult, HostCosts, Journaling, MountReport, CONTEXT_SWITCH_US,
    MAX_NAME, SYSCALL_8K_WRITE_US,
};

use crate::{Lpn, Ssd};
use allocator::expand;
use cache::{file_blocks, homes};
use layout::{Extents, Inode, InodeSlot, Layout, Superblock};
use state::{FileState, JournalState};

impl FlashFs {
    /// Makes a new, empty filesystem on the drive (mkfs).
    pub fn format(ssd: Ssd, cfg: FsConfig) -> FsResult<FlashFs> {
        let layout = Layout::new(
            ssd.page_size(),
            ssd.logical_pages(),
            cfg.inode_blocks,
            cfg.journal_blocks,
        )?;
        let mut fs = FlashFs::empty(ssd, cfg, layout);
        let zero = vec![0u8; layout.block_size];
        for lpn in layout.inode_start..layout.inode_start + layout.inode_blocks {
            fs.ssd.write(lpn, &zero)?;
        }
        fs.write_journal_superblock(0, 1)?;
        for lpn in [layout.group_desc, layout.inode_bitmap, layout.directory]
            .into_iter()
            .chain(layout.block_bitmap_start..layout.block_bitmap_start + layout.block_bitmap_blocks)
        {
            let block = fs.meta_block(lpn);
            fs.ssd.write(lpn, &block)?;
        }
        fs.ssd
            .write(0, &layout.superblock().to_bytes(&layout.block_size))?;
        fs.flush()?;
        Ok(fs)
    }

    /// Mounts the filesystem on a drive (after a restart: replays the journal).
    pub fn mount(ssd: Ssd, cfg: FsConfig) -> FsResult<(FlashFs, MountReport)> {
        let started = ssd.now_us();
        let reads_before = ssd.counters().host_reads;
        let mut block = vec![0u8; ssd.page_size()];
        let mut ssd = ssd;
        ssd.read(0, &mut block)?;
        let superblock = Superblock::from_bytes(&block.len(), &block).map_err(|e| match e.problem {
            Problem::BadMagic => FsError::NotFormatted("no superblock magic in block 0".into()),
            _ => layout::corrupt(e, "the superblock"),
        })?;
        let layout = Layout::from_superblock(&superblock)?;
        if layout.total_blocks > ssd.logical_pages() {
            return Err(FsError::Corrupt(format!(
                "the superblock says {} blocks, the drive has {}",
                layout.total_blocks,
                ssd.logical_pages()
            )));
        }
        let mut fs = FlashFs::empty(ssd, cfg, layout);
        let replayed = fs.replay_journal()?;
        fs.load_inodes()?;
        let report = MountReport {
            sim_us: fs.ssd.now_us() - started,
            journal_transactions_replayed: replayed,
            blocks_read: fs.ssd.counters().host_reads - reads_before,
        };
        Ok((fs, report))
    }

    fn empty(ssd: Ssd, cfg: FsConfig, layout: Layout) -> FlashFs {
        let data_blocks = (layout.total_blocks - layout.data_start) as usize;
        let inode_count = layout.inode_count();
        FlashFs {
            ssd,
            cfg,
            layout,
            inodes: vec![None; inode_count],
            names: HashMap::new(),
            used_blocks: vec![false; data_blocks],
            alloc_cursor: 0,
            freed_uncommitted: Vec::new(),
            cache: BTreeMap::new(),
            dirty: BTreeSet::new(),
            meta_dirty: BTreeSet::new(),
            pending_home: BTreeMap::new(),
            journal: JournalState {
                head: 0,
                next_seq: 1,
                used: 0,
            },
            running_since_us: None,
            next_generation: 1,
            next_tx: 1,
            counters: FsCounters::default(),
        }
    }

    /// The drive underneath.
    pub fn ssd(&self) -> &Ssd {
        &self.ssd
    }

    /// The drive, for operations the filesystem does not wrap (power cuts, counters).
    pub fn ssd_mut(&mut self) -> &mut Ssd {
        &mut self.ssd
    }

    /// Gives the drive back (unmounting without writing anything: after a power cut).
    pub fn into_ssd(self) -> Ssd {
        self.ssd
    }

    pub fn journaling(&self) -> Journaling {
        self.cfg.journaling
    }

    pub fn counters(&self) -> FsCounters {
        self.counters
    }

    pub fn block_size(&self) -> usize {
        self.layout.block_size
    }

    /// Data blocks neither in a file nor waiting for a commit to free them.
    pub fn free_blocks(&self) -> u64 {
        self.used_blocks.iter().filter(|used| !**used).count() as u64
    }

    /// Whether a file of that name exists.
    pub fn exists(&self, name: &str) -> bool {
        self.names.contains_key(name)
    }

    /// Names of all files.
    pub fn file_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.names.keys().cloned().collect();
        names.sort();
        names
    }

    /// The host CPU of one file system call.
    fn syscall(&mut self) {
        self.ssd.host_compute(self.cfg.host.syscall_us);
    }

    /// Opens `name`, creating it (empty) if `create` and it does not exist.
    pub fn open(&mut self, name: &str, create: bool) -> FsResult<FileId> {
        self.syscall();
        self.commit_if_due()?;
        if let Some(&ino) = self.names.get(name) {
            let generation = self.file(ino)?.inode.generation;
            return Ok(FileId { ino, generation });
        }
        if !create {
            return Err(FsError::NotFound(name.to_owned()));
        }
        if name.len() > MAX_NAME {
            return Err(FsError::NameTooLong(name.len()));
        }
        let ino = self
            .inodes
            .iter()
            .position(Option::is_none)
            .ok_or(FsError::TooManyFiles(self.inodes.len()))? as u32;
        let generation = self.next_generation;
        self.next_generation += 1;
        let inode = Inode {
            name: name.to_owned(),
            generation,
            size: 0,
            extents: Extents::default(),
        };
        self.inodes[ino as usize] = Some(FileState {
            committed: None,
            inode,
            initialized: BTreeSet::new(),
            needs_commit: true,
            times_changed: false,
            tx: None,
            tx_written: BTreeSet::new(),
        });
        self.names.insert(name.to_owned(), ino);
        self.counters.files_created += 1;
        self.dirty_meta(&[
            self.layout.inode_block(ino),
            self.layout.inode_bitmap,
            self.layout.directory,
            self.layout.group_desc,
        ]);
        Ok(FileId { ino, generation })
    }

    /// Deletes `name` (its blocks become free once the deletion commits).
    pub fn unlink(&mut self, name: &str) -> FsResult<()> {
        self.syscall();
        self.commit_if_due()?;
        let ino = *self
            .names
            .get(name)
            .ok_or_else(|| FsError::NotFound(name.to_owned()))?;
        let state = self.inodes[ino as usize].take().ok_or(FsError::StaleHandle)?;
        self.names.remove(name);
        if let Some(tx) = state.tx {
            self.ssd.abort(tx)?;
        }
        let mut extents = state.inode.extents.clone();
        for entry in &mut self.freed_uncommitted {
            if entry.2 == Some(ino) {
                entry.2 = None;
            }
        }
        self.freed_uncommitted
            .extend(extents.cut(0).into_iter().map(|(s, l)| (s, l, None)));
        self.drop_cached(ino, 0);
        self.counters.files_deleted += 1;
        let mut meta = vec![
            self.layout.inode_block(ino),
            self.layout.inode_bitmap,
            self.layout.directory,
            self.layout.group_desc,
        ];
        meta.extend(self.block_bitmap_blocks());
        self.dirty_meta(&meta);
        Ok(())
    }

    /// Makes the directory durable (SQLite's `xDelete` with `dirSync`, `fsync` of a
    /// directory): commits the running transaction.
    pub fn sync_directory(&mut self) -> FsResult<()> {
        self.syscall();
        match self.cfg.journaling {
            Journaling::XFtl => self.commit_meta_tx(),
            _ => {
                if self.meta_dirty.is_empty() {
                    return self.flush();
                }
                self.write_back_all()?;
                self.journal_commit(Vec::new())
            }
        }
    }

    /// The file's size in bytes.
    pub fn size(&self, id: FileId) -> FsResult<u64> {
        Ok(self.handle(id)?.inode.size)
    }

    /// Reads up to `buf.len()` bytes at `offset`; returns how many were in the file (the rest
    /// of `buf` is zeroed).
    pub fn read(&mut self, id: FileId, offset: u64, buf: &mut [u8]) -> FsResult<usize> {
        self.syscall();
        self.commit_if_due()?;
        let size = self.handle(id)?.inode.size;
        let bs = self.layout.block_size as u64;
        let available = size.saturating_sub(offset).min(buf.len() as u64) as usize;
        buf[available..].fill(0);
        let mut done = 0usize;
        while done < available {
            let pos = offset + done as u64;
            let fblock = pos / bs;
            let within = (pos % bs) as usize;
            let n = (self.layout.block_size - within).min(available - done);
            self.load_block(id.ino, fblock)?;
            let block = &self.cache[&(id.ino, fblock)];
            buf[done..done + n].copy_from_slice(&block[within..within + n]);
            done += n;
        }
        Ok(available)
    }

    /// Writes `data` at `offset`, growing the file as needed.
    pub fn write(&mut self, id: FileId, offset: u64, data: &[u8]) -> FsResult<()> {
        self.syscall();
        self.commit_if_due()?;
        self.handle(id)?;
        let bs = self.layout.block_size as u64;
        let end = offset + data.len() as u64;
        if data.is_empty() {
            return Ok(());
        }
        let had = self.file(id.ino)?.inode.extents.blocks();
        self.ensure_allocated(id.ino, (end - 1) / bs)?;
        let old_size = self.file(id.ino)?.inode.size;
        if end > old_size {
            self.zero_old_tail(id.ino, old_size)?;
        }
        // Blocks allocated now inside the old size fill a hole (a truncate grew the file).
        self.zero_gap(id.ino, had * bs, old_size)?;
        if offset > old_size {
            self.zero_gap(id.ino, old_size, offset)?;
        }
        let mut done = 0usize;
        while done < data.len() {
            let pos = offset + done as u64;
            let fblock = pos / bs;
            let within = (pos % bs) as usize;
            let n = (self.layout.block_size - within).min(data.len() - done);
            if n < self.layout.block_size {
                self.load_block(id.ino, fblock)?;
            }
            self.dirty_block(id.ino, fblock)[within..within + n].copy_from_slice(&data[done..done + n]);
            let state = self.file_mut(id.ino)?;
            state.initialized.insert(fblock);
            state.times_changed = true;
            done += n;
        }
        let state = self.file_mut(id.ino)?;
        if end > state.inode.size {
            state.inode.size = end;
            state.needs_commit = true;
            let block = self.layout.inode_block(id.ino);
            self.dirty_meta(&[block]);
        }
        if self.dirty.len() > self.cfg.dirty_limit_blocks {
            self.write_back_all()?;
        }
        Ok(())
    }

    /// Sets the file's size.
    pub fn truncate(&mut self, id: FileId, size: u64) -> FsResult<()> {
        self.syscall();
        self.commit_if_due()?;
        let bs = self.layout.block_size as u64;
        let old = self.handle(id)?.inode.size;
        if size == old {
            return Ok(());
        }
        if size < old {
            let keep_blocks = size.div_ceil(bs);
            // The partial last block's tail must read as zeros if the file grows again.
            if !size.is_multiple_of(bs) && self.file(id.ino)?.initialized.contains(&(size / bs)) {
                self.load_block(id.ino, size / bs)?;
                self.dirty_block(id.ino, size / bs)[(size % bs) as usize..].fill(0);
            }
            self.drop_cached(id.ino, keep_blocks);
            let state = self.file_mut(id.ino)?;
            let freed = state.inode.extents.cut(keep_blocks);
            state.initialized.retain(|&b| b < keep_blocks);
            self.freed_uncommitted
                .extend(freed.into_iter().map(|(s, l)| (s, l, Some(id.ino))));
            let meta: Vec<Lpn> = self
                .block_bitmap_blocks()
                .chain([self.layout.group_desc])
                .collect();
            self.dirty_meta(&meta);
        }
        if size > old {
            self.zero_old_tail(id.ino, old)?;
            self.zero_gap(id.ino, old, size)?;
        }
        let state = self.file_mut(id.ino)?;
        state.inode.size = size;
        state.needs_commit = true;
        let block = self.layout.inode_block(id.ino);
        self.dirty_meta(&[block]);
        Ok(())
    }

    /// Before the file grows past `old_size`: the block holding the old end is rewritten with
    /// zeros past it (Linux's `pagecache_isize_extended`), since on the drive it may hold
    /// bytes of an extension a crash undid, which must not reappear inside the new size.
    fn zero_old_tail(&mut self, ino: u32, old_size: u64) -> FsResult<()> {
        let bs = self.layout.block_size as u64;
        let fblock = old_size / bs;
        if old_size.is_multiple_of(bs) || !self.file(ino)?.initialized.contains(&fblock) {
            return Ok(());
        }
        // Loading zeroes the block past the old end.
        self.load_block(ino, fblock)?;
        self.dirty_block(ino, fblock);
        Ok(())
    }

    /// A hole from `from` to `to` (bytes) reads as zeros: allocated blocks in it that never
    /// held data are written as zeros (ext4 marks them unwritten; after a restart this
    /// filesystem trusts every allocated block below the size).
    fn zero_gap(&mut self, ino: u32, from: u64, to: u64) -> FsResult<()> {
        let bs = self.layout.block_size as u64;
        let allocated = self.file(ino)?.inode.extents.blocks();
        for fblock in from.div_ceil(bs)..to.div_ceil(bs).min(allocated) {
            if self.file(ino)?.initialized.contains(&fblock) {
                continue;
            }
            self.dirty_block(ino, fblock).fill(0);
            self.file_mut(ino)?.initialized.insert(fblock);
        }
        Ok(())
    }

    /// `fsync`: [`fdatasync`](Self::fdatasync), and the inode's times too (so any write
    /// since the last commit makes a metadata commit, as FIO's `fsync=N` pays on ext4).
    pub fn fsync(&mut self, id: FileId) -> FsResult<()> {
        if std::mem::take(&mut self.file_mut(id.ino)?.times_changed) {
            let state = self.file_mut(id.ino)?;
            state.needs_commit = true;
            let block = self.layout.inode_block(id.ino);
            self.dirty_meta(&[block]);
        }
        self.fdatasync(id)
    }

    /// `fdatasync`: makes the file's data (and the metadata needed to read it) durable.
    pub fn fdatasync(&mut self, id: FileId) -> FsResult<()> {
        self.handle(id)?;
        self.syscall();
        self.counters.fsyncs += 1;
        match self.cfg.journaling {
            Journaling::XFtl => {
                self.write_back_file(id.ino)?;
                let tx = self.tx_of(id.ino)?;
                // This file's inode goes into the commit as it is now (see `meta_block`).
                let state = self.file_mut(id.ino)?;
                let previous = state.committed.replace(state.inode.clone());
                // Another file's commit may have written this inode block since (with this
                // file's committed inode): a changed inode goes in again.
                if state.needs_commit {
                    let block = self.layout.inode_block(id.ino);
                    self.meta_dirty.insert(block);
                }
                let meta: Vec<Lpn> = std::mem::take(&mut self.meta_dirty).into_iter().collect();
                if let Err(e) = self.commit_with_meta(tx, &meta) {
                    self.file_mut(id.ino)?.committed = previous;
                    self.meta_dirty.extend(meta);
                    return Err(e);
                }
                self.after_commit(Some(id.ino))?;
                let state = self.file_mut(id.ino)?;
                state.tx = None;
                state.tx_written.clear();
                state.needs_commit = false;
                Ok(())
            }
            Journaling::Ordered => {
                self.write_back_file(id.ino)?;
                if self.file(id.ino)?.needs_commit {
                    self.journal_commit(Vec::new())
                } else {
                    self.flush()
                }
            }
            Journaling::Data => {
                let blocks = self.take_dirty(id.ino)?;
                if blocks.is_empty() && !self.file(id.ino)?.needs_commit {
                    return self.flush();
                }
                self.journal_commit(homes(blocks))
            }
        }
    }

    /// X-FTL: drops the file's uncommitted transaction (its writes since the last `fsync`,
    /// cached or on the drive, and its size and allocation changes). Elsewhere a no-op: the
    /// journaling modes leave undoing to the application.
    pub fn abort(&mut self, id: FileId) -> FsResult<()> {
        if self.cfg.journaling != Journaling::XFtl {
            return Ok(());
        }
        self.handle(id)?;
        self.syscall();
        let state = self.file_mut(id.ino)?;
        let tx = state.tx.take();
        let written: Vec<u64> = std::mem::take(&mut state.tx_written).into_iter().collect();
        let restored = state.committed.clone().unwrap_or_else(|| Inode {
            size: 0,
            extents: Extents::default(),
            ..state.inode.clone()
        });
        if let Some(tx) = tx {
            self.ssd.abort(tx)?;
            self.counters.tx_aborts += 1;
        }
        for fblock in written {
            self.cache.remove(&(id.ino, fblock));
        }
        // Drop dirty blocks; clean ones still hold committed data.
        let dirty: Vec<(u32, u64)> = self.dirty.range(file_blocks(id.ino, 0)).copied().collect();
        for key in dirty {
            self.cache.remove(&key);
            self.dirty.remove(&key);
        }
        let state = self.file_mut(id.ino)?;
        state.inode = restored;
        let keep = state.inode.extents.blocks();
        state.initialized.retain(|&b| b < keep);
        state.needs_commit = false;
        // Blocks the aborted transaction allocated are free again at once (nothing durable
        // refers to them); blocks it freed were never released.
        let restored_set: BTreeSet<Lpn> = expand(&self.file(id.ino)?.inode.extents).collect();
        let mut still_freed = Vec::new();
        for (start, len, owner) in std::mem::take(&mut self.freed_uncommitted) {
            for lpn in start..start + len {
                if !restored_set.contains(&lpn) {
                    still_freed.push((lpn, 1, owner));
                }
            }
        }
        self.freed_uncommitted = still_freed;
        self.rebuild_used();
        Ok(())
    }

    /// Writes back every dirty block and commits every open transaction (unmount, sync(2)).
    pub fn sync_all(&mut self) -> FsResult<()> {
        let inos: Vec<u32> = self.names.values().copied().collect();
        for ino in inos {
            let generation = self.file(ino)?.inode.generation;
            self.fdatasync(FileId { ino, generation })?;
        }
        self.sync_directory()
    }

    fn handle(&self, id: FileId) -> FsResult<&FileState> {
        match self.inodes.get(id.ino as usize) {
            Some(Some(s)) if s.inode.generation == id.generation => Ok(s),
            _ => Err(FsError::StaleHandle),
        }
    }

    fn file(&self, ino: u32) -> FsResult<&FileState> {
        self.inodes
            .get(ino as usize)
            .and_then(Option::as_ref)
            .ok_or(FsError::StaleHandle)
    }

    fn file_mut(&mut self, ino: u32) -> FsResult<&mut FileState> {
        self.inodes
            .get_mut(ino as usize)
            .and_then(Option::as_mut)
            .ok_or(FsError::StaleHandle)
    }

    fn load_inodes(&mut self) -> FsResult<()> {
        let bs = self.layout.block_size;
        let per_block = self.layout.inodes_per_block();
        let mut block = vec![0u8; bs];
        for b in 0..self.layout.inode_blocks {
            self.ssd.read(self.layout.inode_start + b, &mut block)?;
            for i in 0..per_block {
                let ino = (b as usize * per_block + i) as u32;
                let record = &block[i * INODE_SIZE..(i + 1) * INODE_SIZE];
                let InodeSlot::Used(inode) =
                    InodeSlot::from_bytes(&(), record).map_err(|e| layout::corrupt(e, "an inode"))?
                else {
                    continue;
                };
                for &(start, len) in &inode.extents.0 {
                    if start < self.layout.data_start || start + len > self.layout.total_blocks {
                        return Err(FsError::Corrupt(format!(
                            "inode {ino} has an extent outside the data area"
                        )));
                    }
                    for lpn in start..start + len {
                        if self.used_blocks[(lpn - self.layout.data_start) as usize] {
                            return Err(FsError::Corrupt(format!("block {lpn} belongs to two files")));
                        }
                        self.set_used(lpn, true);
                    }
                }
                if self.names.insert(inode.name.clone(), ino).is_some() {
                    return Err(FsError::Corrupt(format!("two files are called {:?}", inode.name)));
                }
                let blocks = inode.size.div_ceil(bs as u64).min(inode.extents.blocks());
                self.next_generation = self.next_generation.max(inode.generation + 1);
                self.inodes[ino as usize] = Some(FileState {
                    initialized: (0..blocks).collect(),
                    needs_commit: false,
                    times_changed: false,
                    tx: None,
                    tx_written: BTreeSet::new(),
                    committed: Some(inode.clone()),
                    inode,
                });
            }
        }
        Ok(())
    }
}
