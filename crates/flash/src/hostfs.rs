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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::RangeInclusive;

use crate::{FlashError, Lpn, Ssd, TxId};

/// How the filesystem makes a file's changes durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Journaling {
    /// ext4 `data=ordered`: metadata journaled, data written home first.
    Ordered,
    /// ext4 `data=journal`: data and metadata journaled.
    Data,
    /// No journal: each file's writes are a drive transaction committed by `fsync`.
    XFtl,
}

/// Mount and format settings.
#[derive(Clone, Debug)]
pub struct FsConfig {
    pub journaling: Journaling,
    /// Journal size in blocks (its superblock included). Format only.
    pub journal_blocks: u64,
    /// Inode table size in blocks (16 inodes per KiB of block... see [`INODE_SIZE`]). Format only.
    pub inode_blocks: u64,
    /// Commit a running journal transaction this old at the next call (jbd2: 5 s).
    pub commit_interval_us: f64,
    /// Send discards (trim) for freed blocks after the freeing operation commits.
    pub discard: bool,
    /// Write dirty cached blocks back once more than this many are dirty.
    pub dirty_limit_blocks: usize,
    /// Smallest allocation when a file grows (ext4 preallocation), in blocks.
    pub min_alloc_blocks: u64,
}

impl Default for FsConfig {
    fn default() -> Self {
        FsConfig {
            journaling: Journaling::Ordered,
            journal_blocks: 256,
            inode_blocks: 4,
            commit_interval_us: 5_000_000.0,
            discard: false,
            dirty_limit_blocks: 4096,
            min_alloc_blocks: 16,
        }
    }
}

impl FsConfig {
    pub fn with_journaling(journaling: Journaling) -> FsConfig {
        FsConfig {
            journaling,
            ..FsConfig::default()
        }
    }
}

/// Why a filesystem call failed.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("the drive has lost power")]
    PowerLost,
    #[error("drive error: {0}")]
    Drive(FlashError),
    #[error("not a onesync flash filesystem: {0}")]
    NotFormatted(String),
    #[error("the filesystem is corrupt: {0}")]
    Corrupt(String),
    #[error("no such file: {0}")]
    NotFound(String),
    #[error("stale file handle (the file was deleted)")]
    StaleHandle,
    #[error("file name too long ({0} bytes, at most {MAX_NAME})")]
    NameTooLong(usize),
    #[error("no free inode (the inode table holds {0} files)")]
    TooManyFiles(usize),
    #[error("no space left on the filesystem: {0}")]
    NoSpace(String),
    #[error("the filesystem is too small for its layout ({0} blocks)")]
    TooSmall(u64),
}

impl From<FlashError> for FsError {
    fn from(e: FlashError) -> Self {
        match e {
            FlashError::PowerLost => FsError::PowerLost,
            other => FsError::Drive(other),
        }
    }
}

pub type FsResult<T> = Result<T, FsError>;

/// Bytes per inode record.
pub const INODE_SIZE: usize = 512;
/// Longest file name.
pub const MAX_NAME: usize = 96;
/// Extents an inode holds (ext4 keeps 4 in the inode and grows a tree; a fixed list keeps
/// the format simple and allocation in chunks keeps files to a few extents).
const MAX_EXTENTS: usize = 48;
const SUPER_MAGIC: &[u8; 8] = b"OSFLFS01";
const JSB_MAGIC: u32 = 0x4a53_4231; // "JSB1"
const DESC_MAGIC: u32 = 0x4a44_5343; // "JDSC"
const COMMIT_MAGIC: u32 = 0x4a43_4d54; // "JCMT"
/// Largest allocation chunk when a file grows, in blocks.
const MAX_ALLOC_CHUNK: u64 = 256;

/// An open file: its inode number and the inode's generation (a deleted and reused inode
/// is told apart).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FileId {
    pub ino: u32,
    pub generation: u64,
}

/// What the filesystem did, in blocks and calls.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FsCounters {
    pub fsyncs: u64,
    /// Blocks of file data written to their home location (X-FTL: under a transaction).
    pub data_blocks_written: u64,
    /// Metadata blocks written to their home location (checkpoints, X-FTL transactions).
    pub meta_blocks_written: u64,
    /// Journal blocks written (descriptors, logged blocks, commit blocks, journal superblock).
    pub journal_blocks_written: u64,
    pub journal_commits: u64,
    pub checkpoints: u64,
    pub flushes: u64,
    pub tx_commits: u64,
    pub tx_aborts: u64,
    pub files_created: u64,
    pub files_deleted: u64,
}

/// What mounting cost.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MountReport {
    /// Simulated time from the start of the mount to its end.
    pub sim_us: f64,
    pub journal_transactions_replayed: u64,
    pub blocks_read: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Layout {
    block_size: usize,
    total_blocks: u64,
    group_desc: Lpn,
    inode_bitmap: Lpn,
    block_bitmap_start: Lpn,
    block_bitmap_blocks: u64,
    directory: Lpn,
    inode_start: Lpn,
    inode_blocks: u64,
    journal_start: Lpn,
    journal_blocks: u64,
    data_start: Lpn,
}

impl Layout {
    fn new(block_size: usize, total_blocks: u64, inode_blocks: u64, journal_blocks: u64) -> FsResult<Layout> {
        let bits_per_block = (block_size * 8) as u64;
        let block_bitmap_blocks = total_blocks.div_ceil(bits_per_block).max(1);
        let block_bitmap_start = 3;
        let directory = block_bitmap_start + block_bitmap_blocks;
        let inode_start = directory + 1;
        let journal_start = inode_start + inode_blocks;
        let data_start = journal_start + journal_blocks;
        if journal_blocks < 16 || inode_blocks == 0 || data_start + 16 > total_blocks {
            return Err(FsError::TooSmall(total_blocks));
        }
        Ok(Layout {
            block_size,
            total_blocks,
            group_desc: 1,
            inode_bitmap: 2,
            block_bitmap_start,
            block_bitmap_blocks,
            directory,
            inode_start,
            inode_blocks,
            journal_start,
            journal_blocks,
            data_start,
        })
    }

    fn inodes_per_block(&self) -> usize {
        self.block_size / INODE_SIZE
    }

    fn inode_count(&self) -> usize {
        self.inodes_per_block() * self.inode_blocks as usize
    }

    fn inode_block(&self, ino: u32) -> Lpn {
        self.inode_start + ino as u64 / self.inodes_per_block() as u64
    }

    /// Log blocks of the journal (after its superblock).
    fn log_len(&self) -> u64 {
        self.journal_blocks - 1
    }

    fn log_block(&self, pos: u64) -> Lpn {
        self.journal_start + 1 + pos
    }

    fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; self.block_size];
        b[..8].copy_from_slice(SUPER_MAGIC);
        let fields = [
            self.block_size as u64,
            self.total_blocks,
            self.block_bitmap_blocks,
            self.inode_blocks,
            self.journal_blocks,
        ];
        for (i, v) in fields.iter().enumerate() {
            put_u64(&mut b, 8 + i * 8, *v);
        }
        seal(&mut b);
        b
    }

    fn decode(b: &[u8]) -> FsResult<Layout> {
        if &b[..8] != SUPER_MAGIC {
            return Err(FsError::NotFormatted("no superblock magic in block 0".into()));
        }
        if !sealed(b) {
            return Err(FsError::Corrupt("the superblock fails its checksum".into()));
        }
        let field = |i: usize| get_u64(b, 8 + i * 8);
        let layout = Layout::new(field(0) as usize, field(1), field(3), field(4))?;
        if layout.block_bitmap_blocks != field(2) || layout.block_size != b.len() {
            return Err(FsError::Corrupt("the superblock's layout does not add up".into()));
        }
        Ok(layout)
    }
}

fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// Puts a CRC-32C of everything before the last 4 bytes into the last 4 bytes.
fn seal(b: &mut [u8]) {
    let n = b.len() - 4;
    let crc = crc32c::crc32c(&b[..n]);
    put_u32(b, n, crc);
}

fn sealed(b: &[u8]) -> bool {
    let n = b.len() - 4;
    crc32c::crc32c(&b[..n]) == get_u32(b, n)
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Extents(Vec<(Lpn, u64)>);

impl Extents {
    fn blocks(&self) -> u64 {
        self.0.iter().map(|e| e.1).sum()
    }

    fn lpn_of(&self, fblock: u64) -> Option<Lpn> {
        let mut base = 0;
        for &(start, len) in &self.0 {
            if fblock < base + len {
                return Some(start + (fblock - base));
            }
            base += len;
        }
        None
    }

    fn end(&self) -> Option<Lpn> {
        self.0.last().map(|&(start, len)| start + len)
    }

    fn push(&mut self, start: Lpn, len: u64) {
        if let Some(last) = self.0.last_mut() {
            if last.0 + last.1 == start {
                last.1 += len;
                return;
            }
        }
        self.0.push((start, len));
    }

    /// Keeps the first `keep` blocks; returns the rest as extents.
    fn cut(&mut self, keep: u64) -> Vec<(Lpn, u64)> {
        let mut freed = Vec::new();
        let mut kept = Vec::new();
        let mut base = 0;
        for &(start, len) in &self.0 {
            if base + len <= keep {
                kept.push((start, len));
            } else if base >= keep {
                freed.push((start, len));
            } else {
                let k = keep - base;
                kept.push((start, k));
                freed.push((start + k, len - k));
            }
            base += len;
        }
        self.0 = kept;
        freed
    }
}

#[derive(Clone, Debug)]
struct Inode {
    name: String,
    generation: u64,
    size: u64,
    extents: Extents,
}

impl Inode {
    fn encode_into(&self, b: &mut [u8]) {
        b.fill(0);
        b[0] = 1;
        b[1] = self.name.len() as u8;
        b[2..2 + self.name.len()].copy_from_slice(self.name.as_bytes());
        put_u64(b, 100, self.size);
        put_u64(b, 108, self.generation);
        b[116..118].copy_from_slice(&(self.extents.0.len() as u16).to_le_bytes());
        for (i, &(start, len)) in self.extents.0.iter().enumerate() {
            put_u32(b, 120 + i * 8, start as u32);
            put_u32(b, 124 + i * 8, len as u32);
        }
        seal(b);
    }

    fn decode(b: &[u8]) -> FsResult<Option<Inode>> {
        if b.iter().all(|&x| x == 0) {
            return Ok(None);
        }
        if !sealed(b) {
            return Err(FsError::Corrupt("an inode fails its checksum".into()));
        }
        if b[0] == 0 {
            return Ok(None);
        }
        let name_len = b[1] as usize;
        let count = u16::from_le_bytes([b[116], b[117]]) as usize;
        if name_len > MAX_NAME || count > MAX_EXTENTS {
            return Err(FsError::Corrupt(
                "an inode's name or extent count is out of range".into(),
            ));
        }
        let name = String::from_utf8(b[2..2 + name_len].to_vec())
            .map_err(|_| FsError::Corrupt("an inode's name is not UTF-8".into()))?;
        let extents = (0..count)
            .map(|i| (get_u32(b, 120 + i * 8) as u64, get_u32(b, 124 + i * 8) as u64))
            .collect();
        Ok(Some(Inode {
            name,
            generation: get_u64(b, 108),
            size: get_u64(b, 100),
            extents: Extents(extents),
        }))
    }
}

/// One open-able file's in-memory state.
#[derive(Clone, Debug)]
struct FileState {
    inode: Inode,
    /// File blocks that hold data (allocated blocks past these read as zeros: ext4's
    /// unwritten extents).
    initialized: BTreeSet<u64>,
    /// The inode changed since its last commit (an fdatasync must commit).
    needs_commit: bool,
    /// Written since the last commit: the modification time changed (only `fsync` cares).
    times_changed: bool,
    /// X-FTL: the open drive transaction, the blocks written under it, and the inode as
    /// last committed (restored by an abort).
    tx: Option<TxId>,
    tx_written: BTreeSet<u64>,
    committed: Option<Inode>,
}

#[derive(Clone, Copy, Debug, Default)]
struct JournalState {
    /// Next log position to write, and the sequence number of the next transaction.
    head: u64,
    next_seq: u64,
    /// Log blocks in use since the tail (wasted wrap-around space included).
    used: u64,
}

/// The filesystem. Not thread-safe: share it behind a mutex.
pub struct FlashFs {
    ssd: Ssd,
    cfg: FsConfig,
    layout: Layout,
    inodes: Vec<Option<FileState>>,
    names: HashMap<String, u32>,
    /// Data blocks in use (index: lpn - data_start).
    used_blocks: Vec<bool>,
    alloc_cursor: u64,
    /// Freed by operations not yet committed: reusable (and discardable) after the commit.
    /// (X-FTL: with the file whose commit releases them; `None`: any commit.)
    freed_uncommitted: Vec<(Lpn, u64, Option<u32>)>,
    /// The page cache: every file block read or written since the mount.
    cache: BTreeMap<(u32, u64), Box<[u8]>>,
    /// Cached blocks changed since they were last written to the drive.
    dirty: BTreeSet<(u32, u64)>,
    /// Metadata blocks changed in the running transaction.
    meta_dirty: BTreeSet<Lpn>,
    /// Blocks logged in the journal and not yet written home (newest content).
    pending_home: BTreeMap<Lpn, Box<[u8]>>,
    journal: JournalState,
    running_since_us: Option<f64>,
    next_generation: u64,
    next_tx: TxId,
    counters: FsCounters,
}

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
        fs.ssd.write(0, &layout.encode())?;
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
        let layout = Layout::decode(&block)?;
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

    /// Opens `name`, creating it (empty) if `create` and it does not exist.
    pub fn open(&mut self, name: &str, create: bool) -> FsResult<FileId> {
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

    /// Blocks in use: every file's extents and blocks freed by uncommitted operations.
    fn rebuild_used(&mut self) {
        self.used_blocks.fill(false);
        let mut taken: Vec<Lpn> = self
            .inodes
            .iter()
            .flatten()
            .flat_map(|s| expand(&s.inode.extents).collect::<Vec<_>>())
            .collect();
        taken.extend(self.freed_uncommitted.iter().flat_map(|&(s, l, _)| s..s + l));
        for lpn in taken {
            self.set_used(lpn, true);
        }
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

    // ----- internals -----

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

    fn tx_of(&mut self, ino: u32) -> FsResult<TxId> {
        let next = self.next_tx;
        let state = self.file_mut(ino)?;
        let tx = *state.tx.get_or_insert(next);
        if tx == next {
            self.next_tx += 1;
        }
        Ok(tx)
    }

    fn dirty_meta(&mut self, lpns: &[Lpn]) {
        if self.meta_dirty.is_empty() {
            self.running_since_us = Some(self.ssd.now_us());
        }
        self.meta_dirty.extend(lpns.iter().copied());
    }

    fn block_bitmap_blocks(&self) -> impl Iterator<Item = Lpn> {
        self.layout.block_bitmap_start..self.layout.block_bitmap_start + self.layout.block_bitmap_blocks
    }

    fn set_used(&mut self, lpn: Lpn, used: bool) {
        if let Some(slot) = lpn
            .checked_sub(self.layout.data_start)
            .and_then(|i| self.used_blocks.get_mut(i as usize))
        {
            *slot = used;
        }
    }

    /// Allocates blocks so that file block `last` exists.
    fn ensure_allocated(&mut self, ino: u32, last: u64) -> FsResult<()> {
        let have = self.file(ino)?.inode.extents.blocks();
        if last < have {
            return Ok(());
        }
        let need = last + 1 - have;
        let chunk = need.max(have.clamp(self.cfg.min_alloc_blocks, MAX_ALLOC_CHUNK));
        let mut goal = self.file(ino)?.inode.extents.end();
        let mut got = 0;
        let mut new_extents = Vec::new();
        while got < chunk {
            let want = chunk - got;
            let (start, len) = match self.find_free(goal, want) {
                Some(run) => run,
                None if got >= need => break,
                None => {
                    // Undo this call's allocation before failing.
                    for &(s, l) in &new_extents {
                        for lpn in s..s + l {
                            self.set_used(lpn, false);
                        }
                    }
                    return Err(FsError::NoSpace(format!(
                        "no free block for {need} more block(s)"
                    )));
                }
            };
            for lpn in start..start + len {
                self.set_used(lpn, true);
            }
            new_extents.push((start, len));
            got += len;
            goal = Some(start + len);
        }
        let state = self.file_mut(ino)?;
        let mut extents = state.inode.extents.clone();
        for &(s, l) in &new_extents {
            extents.push(s, l);
        }
        if extents.0.len() > MAX_EXTENTS {
            for &(s, l) in &new_extents {
                for lpn in s..s + l {
                    self.set_used(lpn, false);
                }
            }
            return Err(FsError::NoSpace(format!(
                "file too fragmented (over {MAX_EXTENTS} extents)"
            )));
        }
        let state = self.file_mut(ino)?;
        state.inode.extents = extents;
        state.needs_commit = true;
        let mut meta = vec![self.layout.inode_block(ino), self.layout.group_desc];
        meta.extend(self.block_bitmap_blocks());
        self.dirty_meta(&meta);
        Ok(())
    }

    /// A free run of up to `want` blocks: at `goal` if free there, else the first free run
    /// from the allocation cursor.
    fn find_free(&mut self, goal: Option<Lpn>, want: u64) -> Option<(Lpn, u64)> {
        let n = self.used_blocks.len() as u64;
        let run_at = |used: &[bool], i: u64| {
            let mut len = 0;
            while i + len < n && len < want && !used[(i + len) as usize] {
                len += 1;
            }
            len
        };
        if let Some(g) = goal.and_then(|g| g.checked_sub(self.layout.data_start)) {
            if g < n && !self.used_blocks[g as usize] {
                let len = run_at(&self.used_blocks, g);
                return Some((g + self.layout.data_start, len));
            }
        }
        for k in 0..n {
            let i = (self.alloc_cursor + k) % n;
            if !self.used_blocks[i as usize] {
                let len = run_at(&self.used_blocks, i);
                self.alloc_cursor = (i + len) % n;
                return Some((i + self.layout.data_start, len));
            }
        }
        None
    }

    /// Brings a file block into the cache (zeros if never written).
    fn load_block(&mut self, ino: u32, fblock: u64) -> FsResult<()> {
        if self.cache.contains_key(&(ino, fblock)) {
            return Ok(());
        }
        let bs = self.layout.block_size;
        let mut data = vec![0u8; bs].into_boxed_slice();
        let state = self.file(ino)?;
        let size = state.inode.size;
        if state.initialized.contains(&fblock) {
            if let Some(lpn) = state.inode.extents.lpn_of(fblock) {
                if let Some(pending) = self.pending_home.get(&lpn) {
                    data.copy_from_slice(pending);
                } else {
                    self.ssd.read(lpn, &mut data)?;
                }
            }
        }
        // As Linux's readpage does: bytes past the end of the file read as zeros, whatever
        // the block holds there (data of an extension that a crash kept from committing), so
        // that growing the file later shows zeros and writes them.
        let block_start = fblock * bs as u64;
        if size < block_start + bs as u64 {
            data[size.saturating_sub(block_start) as usize..].fill(0);
        }
        self.cache.insert((ino, fblock), data);
        Ok(())
    }

    /// The cached block, marked dirty (a zero block if it was not cached).
    fn dirty_block(&mut self, ino: u32, fblock: u64) -> &mut Box<[u8]> {
        self.dirty.insert((ino, fblock));
        let size = self.layout.block_size;
        self.cache
            .entry((ino, fblock))
            .or_insert_with(|| vec![0u8; size].into_boxed_slice())
    }

    fn drop_cached(&mut self, ino: u32, from_block: u64) {
        let keys: Vec<(u32, u64)> = self
            .cache
            .range(file_blocks(ino, from_block))
            .map(|(k, _)| *k)
            .collect();
        for key in keys {
            self.cache.remove(&key);
            self.dirty.remove(&key);
        }
    }

    /// Takes the file's dirty blocks out of the dirty state: (file block, home lpn, content).
    fn take_dirty(&mut self, ino: u32) -> FsResult<Vec<DirtyBlock>> {
        let keys: Vec<(u32, u64)> = self.dirty.range(file_blocks(ino, 0)).copied().collect();
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            let fblock = key.1;
            let lpn = self.file(ino)?.inode.extents.lpn_of(fblock).ok_or_else(|| {
                FsError::Corrupt(format!("cached block {fblock} of inode {ino} has no home"))
            })?;
            self.dirty.remove(&key);
            out.push(DirtyBlock {
                fblock,
                lpn,
                data: self.cache[&key].clone(),
            });
        }
        Ok(out)
    }

    /// Writes the file's dirty blocks to the drive: home (ordered), into its transaction
    /// (X-FTL), or through a journal commit (data journaling).
    fn write_back_file(&mut self, ino: u32) -> FsResult<()> {
        let blocks = self.take_dirty(ino)?;
        if blocks.is_empty() {
            return Ok(());
        }
        match self.cfg.journaling {
            Journaling::Ordered => {
                for DirtyBlock { lpn, data, .. } in blocks {
                    self.ssd.write(lpn, &data)?;
                    self.counters.data_blocks_written += 1;
                }
            }
            Journaling::XFtl => {
                let tx = self.tx_of(ino)?;
                for DirtyBlock { fblock, lpn, data } in blocks {
                    self.ssd.write_tx(tx, lpn, &data)?;
                    self.counters.data_blocks_written += 1;
                    self.file_mut(ino)?.tx_written.insert(fblock);
                }
            }
            Journaling::Data => self.journal_commit(homes(blocks))?,
        }
        Ok(())
    }

    fn write_back_all(&mut self) -> FsResult<()> {
        let inos: Vec<u32> = self.names.values().copied().collect();
        for ino in inos {
            self.write_back_file(ino)?;
        }
        Ok(())
    }

    /// jbd2's commit timer.
    fn commit_if_due(&mut self) -> FsResult<()> {
        let Some(since) = self.running_since_us else {
            return Ok(());
        };
        if self.ssd.now_us() - since < self.cfg.commit_interval_us || self.meta_dirty.is_empty() {
            return Ok(());
        }
        match self.cfg.journaling {
            Journaling::XFtl => self.commit_meta_tx(),
            _ => {
                self.write_back_all()?;
                self.journal_commit(Vec::new())
            }
        }
    }

    /// X-FTL: writes the metadata blocks `meta` under `tx` and commits it.
    fn commit_with_meta(&mut self, tx: TxId, meta: &[Lpn]) -> FsResult<()> {
        for &lpn in meta {
            let block = self.meta_block(lpn);
            self.ssd.write_tx(tx, lpn, &block)?;
            self.counters.meta_blocks_written += 1;
        }
        self.ssd.commit(tx)?;
        self.counters.tx_commits += 1;
        self.counters.flushes += 1;
        Ok(())
    }

    /// X-FTL: commits the metadata changes not yet committed with a file.
    fn commit_meta_tx(&mut self) -> FsResult<()> {
        if self.meta_dirty.is_empty() {
            return self.flush();
        }
        let tx = self.next_tx;
        self.next_tx += 1;
        let meta: Vec<Lpn> = std::mem::take(&mut self.meta_dirty).into_iter().collect();
        self.commit_with_meta(tx, &meta)?;
        self.after_commit(None)
    }

    fn flush(&mut self) -> FsResult<()> {
        self.ssd.flush()?;
        self.counters.flushes += 1;
        Ok(())
    }

    /// After the running transaction committed: freed blocks become reusable (and are
    /// discarded if so mounted).
    fn after_commit(&mut self, committed_file: Option<u32>) -> FsResult<()> {
        self.running_since_us = None;
        if self.cfg.journaling != Journaling::XFtl {
            for state in self.inodes.iter_mut().flatten() {
                state.needs_commit = false;
            }
        }
        // Under X-FTL a truncation is durable only with its file's commit; everything else
        // (journal commits, unlinks) with any commit.
        let (released, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.freed_uncommitted)
            .into_iter()
            .partition(|&(_, _, owner)| {
                self.cfg.journaling != Journaling::XFtl || owner.is_none() || owner == committed_file
            });
        self.freed_uncommitted = kept;
        for (start, len, _) in released {
            for lpn in start..start + len {
                self.set_used(lpn, false);
                self.pending_home.remove(&lpn);
                if self.cfg.discard {
                    self.ssd.trim(lpn)?;
                }
            }
        }
        Ok(())
    }

    /// Commits the running transaction's metadata plus `data` blocks through the journal.
    fn journal_commit(&mut self, data: Vec<(Lpn, Box<[u8]>)>) -> FsResult<()> {
        let meta: Vec<Lpn> = std::mem::take(&mut self.meta_dirty).into_iter().collect();
        let mut blocks: Vec<(Lpn, Box<[u8]>)> = meta
            .into_iter()
            .map(|lpn| (lpn, self.meta_block(lpn).into_boxed_slice()))
            .collect();
        blocks.extend(data);
        if blocks.is_empty() {
            return self.flush();
        }
        let log_len = self.layout.log_len();
        let per_txn = (((self.layout.block_size - 32) / 8) as u64).min(log_len / 2 - 2) as usize;
        let chunks: Vec<Vec<(Lpn, Box<[u8]>)>> = blocks.chunks(per_txn).map(|c| c.to_vec()).collect();
        for chunk in chunks {
            let need = chunk.len() as u64 + 2;
            let wrap_waste = if self.journal.head + need > log_len {
                log_len - self.journal.head
            } else {
                0
            };
            if self.journal.used + wrap_waste + need > log_len {
                self.checkpoint()?;
            }
            if self.journal.head + need > log_len {
                self.journal.used += log_len - self.journal.head;
                self.journal.head = 0;
            }
            let seq = self.journal.next_seq;
            let bs = self.layout.block_size;
            let mut desc = vec![0u8; bs];
            put_u32(&mut desc, 0, DESC_MAGIC);
            put_u64(&mut desc, 4, seq);
            put_u32(&mut desc, 12, chunk.len() as u32);
            let mut data_crc = 0u32;
            for (i, (lpn, block)) in chunk.iter().enumerate() {
                put_u64(&mut desc, 16 + i * 8, *lpn);
                data_crc = crc32c::crc32c_append(data_crc, block);
            }
            seal(&mut desc);
            let mut pos = self.journal.head;
            self.ssd.write(self.layout.log_block(pos), &desc)?;
            pos += 1;
            for (_, block) in &chunk {
                self.ssd.write(self.layout.log_block(pos), block)?;
                pos += 1;
            }
            // PREFLUSH: the logged blocks (and ordered data) before the commit block.
            self.flush()?;
            let mut commit = vec![0u8; bs];
            put_u32(&mut commit, 0, COMMIT_MAGIC);
            put_u64(&mut commit, 4, seq);
            put_u32(&mut commit, 12, data_crc);
            seal(&mut commit);
            self.ssd.write(self.layout.log_block(pos), &commit)?;
            // FUA on a drive without it: a flush.
            self.flush()?;
            self.counters.journal_blocks_written += need;
            self.counters.journal_commits += 1;
            self.journal.head = (pos + 1) % log_len;
            self.journal.used += need;
            self.journal.next_seq += 1;
            for (lpn, block) in chunk {
                self.pending_home.insert(lpn, block);
            }
        }
        self.after_commit(None)?;
        if self.journal.used > log_len / 2 {
            self.checkpoint()?;
        }
        Ok(())
    }

    /// Writes logged blocks home and empties the journal.
    fn checkpoint(&mut self) -> FsResult<()> {
        let pending = std::mem::take(&mut self.pending_home);
        if !pending.is_empty() {
            for (lpn, block) in &pending {
                self.ssd.write(*lpn, block)?;
                if *lpn >= self.layout.data_start {
                    self.counters.data_blocks_written += 1;
                } else {
                    self.counters.meta_blocks_written += 1;
                }
            }
            self.flush()?;
        }
        self.write_journal_superblock(self.journal.head, self.journal.next_seq)?;
        self.flush()?;
        self.journal.used = 0;
        self.counters.checkpoints += 1;
        Ok(())
    }

    fn write_journal_superblock(&mut self, tail: u64, seq: u64) -> FsResult<()> {
        let mut b = vec![0u8; self.layout.block_size];
        put_u32(&mut b, 0, JSB_MAGIC);
        put_u64(&mut b, 4, tail);
        put_u64(&mut b, 12, seq);
        seal(&mut b);
        self.ssd.write(self.layout.journal_start, &b)?;
        self.counters.journal_blocks_written += 1;
        Ok(())
    }

    /// Mount: applies every complete journal transaction after the tail, then empties the
    /// journal. Returns how many were applied.
    fn replay_journal(&mut self) -> FsResult<u64> {
        let bs = self.layout.block_size;
        let mut block = vec![0u8; bs];
        self.ssd.read(self.layout.journal_start, &mut block)?;
        if get_u32(&block, 0) != JSB_MAGIC || !sealed(&block) {
            return Err(FsError::Corrupt("the journal superblock is damaged".into()));
        }
        let log_len = self.layout.log_len();
        let (mut pos, mut seq) = (get_u64(&block, 4), get_u64(&block, 12));
        if pos >= log_len {
            return Err(FsError::Corrupt("the journal tail is out of range".into()));
        }
        let mut replay: BTreeMap<Lpn, Box<[u8]>> = BTreeMap::new();
        let mut applied = 0;
        let mut scanned = 0;
        let mut torn_at = None;
        loop {
            if scanned > log_len {
                break;
            }
            // The writer wraps to the start of the log when a transaction does not fit.
            let found = match self.read_descriptor(pos, seq, &mut block)? {
                Some(at) => Some(at),
                None if pos != 0 => self.read_descriptor(0, seq, &mut block)?,
                None => None,
            };
            let Some(found_at) = found else {
                break;
            };
            if found_at == 0 && pos != 0 {
                scanned += log_len - pos;
            }
            pos = found_at;
            let count = get_u32(&block, 12) as u64;
            if count == 0 || pos + count + 2 > log_len {
                torn_at = Some(pos);
                break;
            }
            let homes: Vec<Lpn> = (0..count as usize).map(|i| get_u64(&block, 16 + i * 8)).collect();
            let mut logged = Vec::with_capacity(count as usize);
            let mut data_crc = 0u32;
            for i in 0..count {
                let mut b = vec![0u8; bs].into_boxed_slice();
                self.ssd.read(self.layout.log_block(pos + 1 + i), &mut b)?;
                data_crc = crc32c::crc32c_append(data_crc, &b);
                logged.push(b);
            }
            self.ssd
                .read(self.layout.log_block(pos + 1 + count), &mut block)?;
            let complete = get_u32(&block, 0) == COMMIT_MAGIC
                && sealed(&block)
                && get_u64(&block, 4) == seq
                && get_u32(&block, 12) == data_crc;
            if !complete {
                torn_at = Some(pos);
                break;
            }
            for (home, b) in homes.into_iter().zip(logged) {
                if home < self.layout.total_blocks && home != 0 {
                    replay.insert(home, b);
                }
            }
            applied += 1;
            pos += count + 2;
            scanned += count + 2;
            seq += 1;
            if pos >= log_len {
                pos = 0;
            }
        }
        for (lpn, b) in &replay {
            self.ssd.write(*lpn, b)?;
        }
        if !replay.is_empty() {
            self.flush()?;
        }
        self.journal = JournalState {
            head: pos,
            next_seq: seq,
            used: 0,
        };
        // A torn transaction's descriptor must not be found again: the next transaction
        // with its sequence number may be written elsewhere (after a wrap), and a later
        // replay would stop at the torn one.
        if let Some(torn) = torn_at {
            self.ssd.write(self.layout.log_block(torn), &vec![0u8; bs])?;
        }
        if applied > 0 || torn_at.is_some() {
            self.write_journal_superblock(pos, seq)?;
            self.flush()?;
        }
        Ok(applied)
    }

    /// Reads the log block at `pos`: `Some(pos)` if it is the descriptor of transaction `seq`.
    fn read_descriptor(&mut self, pos: u64, seq: u64, block: &mut [u8]) -> FsResult<Option<u64>> {
        self.ssd.read(self.layout.log_block(pos), block)?;
        let ok = get_u32(block, 0) == DESC_MAGIC && sealed(block) && get_u64(block, 4) == seq;
        Ok(ok.then_some(pos))
    }

    fn load_inodes(&mut self) -> FsResult<()> {
        let bs = self.layout.block_size;
        let per_block = self.layout.inodes_per_block();
        let mut block = vec![0u8; bs];
        for b in 0..self.layout.inode_blocks {
            self.ssd.read(self.layout.inode_start + b, &mut block)?;
            for i in 0..per_block {
                let ino = (b as usize * per_block + i) as u32;
                let Some(inode) = Inode::decode(&block[i * INODE_SIZE..(i + 1) * INODE_SIZE])? else {
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

    /// The current content of a metadata block.
    fn meta_block(&self, lpn: Lpn) -> Vec<u8> {
        let bs = self.layout.block_size;
        let mut b = vec![0u8; bs];
        let l = &self.layout;
        if lpn >= l.inode_start && lpn < l.inode_start + l.inode_blocks {
            let first = ((lpn - l.inode_start) as usize) * l.inodes_per_block();
            for i in 0..l.inodes_per_block() {
                if let Some(Some(state)) = self.inodes.get(first + i) {
                    // X-FTL: a file's changes become durable only with its own commit, so
                    // other files' inodes go in as last committed (a file never committed
                    // does not exist yet).
                    let inode = match self.cfg.journaling {
                        Journaling::XFtl => state.committed.as_ref(),
                        _ => Some(&state.inode),
                    };
                    if let Some(inode) = inode {
                        inode.encode_into(&mut b[i * INODE_SIZE..(i + 1) * INODE_SIZE]);
                    }
                }
            }
            return b;
        }
        if lpn == l.inode_bitmap {
            for (i, s) in self.inodes.iter().enumerate() {
                if s.is_some() {
                    b[i / 8] |= 1 << (i % 8);
                }
            }
        } else if lpn == l.directory {
            let mut at = 0;
            let mut names: Vec<(&String, &u32)> = self.names.iter().collect();
            names.sort();
            for (name, ino) in names {
                if at + 8 + name.len() > bs - 4 {
                    break;
                }
                put_u32(&mut b, at, *ino);
                put_u32(&mut b, at + 4, name.len() as u32);
                b[at + 8..at + 8 + name.len()].copy_from_slice(name.as_bytes());
                at += 8 + name.len();
            }
        } else if lpn == l.group_desc {
            let free = self.used_blocks.iter().filter(|u| !**u).count() as u64;
            put_u64(&mut b, 0, free);
            put_u64(
                &mut b,
                8,
                self.inodes.iter().filter(|s| s.is_none()).count() as u64,
            );
        } else if lpn >= l.block_bitmap_start && lpn < l.block_bitmap_start + l.block_bitmap_blocks {
            let first = (lpn - l.block_bitmap_start) as usize * bs * 8;
            for (i, used) in self.used_blocks.iter().enumerate().skip(first).take(bs * 8 - 32) {
                if *used {
                    let bit = i - first;
                    b[bit / 8] |= 1 << (bit % 8);
                }
            }
        }
        seal(&mut b);
        b
    }
}

fn expand(extents: &Extents) -> impl Iterator<Item = Lpn> + '_ {
    extents.0.iter().flat_map(|&(s, l)| s..s + l)
}

/// Cache keys of file `ino` from block `from`.
fn file_blocks(ino: u32, from: u64) -> RangeInclusive<(u32, u64)> {
    (ino, from)..=(ino, u64::MAX)
}

/// A file block taken out of the dirty state to be written.
struct DirtyBlock {
    fblock: u64,
    /// Its home on the drive.
    lpn: Lpn,
    data: Box<[u8]>,
}

/// Dirty blocks as (home, content), for the journal.
fn homes(blocks: Vec<DirtyBlock>) -> Vec<(Lpn, Box<[u8]>)> {
    blocks.into_iter().map(|b| (b.lpn, b.data)).collect()
}
