//! The store: transactions, snapshots, group commit, checkpoints and recovery.

use crate::alloc::SlotAllocator;
use crate::error::{CommitError, Error, Result};
use crate::format::{
    valid_page_size, Checkpoint, CheckpointRef, Header, LogRef, Op, Record, HEADER_BLOCK, HEADER_LEN,
    MAX_NAME_LEN, NO_SLOT, RECORD_ALIGN, SLOT_BASE,
};
use crate::io::{FileIo, StorageIo};
use crate::state::{PageEntry, State};
use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions, TryLockError};
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Settings. `page_size` and `log_capacity` take effect when a store is created; the rest
/// apply to each open.
#[derive(Debug, Clone)]
pub struct Options {
    /// Page size in bytes: a power of two from 512 to 65536.
    pub page_size: u32,
    /// Commits between mapping checkpoints ("delayed checkpoint"); 0 checkpoints only when
    /// the log is full, on `checkpoint()` and on `close()`.
    pub checkpoint_interval: u64,
    /// Bytes of commit log; a full log forces a checkpoint.
    pub log_capacity: u64,
    /// Bytes of page slots written at creation, so that commits do not grow the file.
    pub initial_capacity: u64,
    /// The file grows by at least this many bytes at a time (and at least by 1/8 of itself).
    pub growth_step: u64,
    /// A page write that changes at most this many bytes of the page (accumulated since the
    /// page was last written whole) is carried in the commit record instead of a new slot.
    /// 0 turns this off.
    pub embed_limit: usize,
    /// Open without writing anything; commits fail with `Error::ReadOnly`.
    pub read_only: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            page_size: 4096,
            checkpoint_interval: 1000,
            log_capacity: 8 << 20,
            initial_capacity: 64 << 20,
            growth_step: 64 << 20,
            embed_limit: 64,
            read_only: false,
        }
    }
}

/// Counters since the store was opened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    pub page_size: u64,
    /// Commits that changed something (each wrote one commit record).
    pub commit_records: u64,
    /// Whole pages written to slots.
    pub pages_written: u64,
    /// Page changes carried inside commit records instead of slots.
    pub pages_embedded: u64,
    /// Bytes of pages, records, checkpoints and headers written (not preallocation).
    pub bytes_written: u64,
    /// Bytes of zeros written to grow the file.
    pub bytes_preallocated: u64,
    /// Calls to fdatasync (or the I/O layer's equivalent).
    pub flushes: u64,
    pub checkpoints: u64,
    /// 1 if opening replayed commit records written after the last checkpoint.
    pub recoveries: u64,
    /// Records replayed at open.
    pub records_replayed: u64,
    pub conflicts: u64,
    pub last_seq: u64,
    pub durable_seq: u64,
    pub slots_total: u64,
    pub slots_free: u64,
}

#[derive(Default)]
struct Counters {
    commit_records: AtomicU64,
    pages_written: AtomicU64,
    pages_embedded: AtomicU64,
    bytes_written: AtomicU64,
    bytes_preallocated: AtomicU64,
    flushes: AtomicU64,
    checkpoints: AtomicU64,
    recoveries: AtomicU64,
    records_replayed: AtomicU64,
    conflicts: AtomicU64,
}

fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

/// A failure-atomic page store. Cheap to clone; all clones share one open store.
#[derive(Clone)]
pub struct Store {
    shared: Arc<Shared>,
}

struct Shared {
    io: Box<dyn StorageIo>,
    page_size: u64,
    opts: Options,
    meta: Mutex<Meta>,
    flush: Mutex<FlushState>,
    flushed: Condvar,
    counters: Counters,
    next_file_id: AtomicU32,
}

/// Everything commits and checkpoints change, under one lock held only for bookkeeping
/// (page writes and flushes happen outside it).
struct Meta {
    state: Arc<State>,
    header: Header,
    alloc: SlotAllocator,
    /// (superseded at seq, slot): still named by a record the log would replay.
    awaiting_checkpoint: Vec<(u64, u64)>,
    /// (superseded at seq, slot): checkpointed, but a snapshot may still read it.
    awaiting_readers: Vec<(u64, u64)>,
    /// Open snapshots by sequence number.
    snapshots: BTreeMap<u64, usize>,
    /// Byte offset in the log where the next record goes.
    log_tail: u64,
    prev_crc: u32,
    session: u64,
    commits_since_checkpoint: u64,
}

/// Group-commit state: which records are written, which are durable, who is flushing.
#[derive(Default)]
struct FlushState {
    written_upto: u64,
    written_ahead: BTreeSet<u64>,
    durable: u64,
    leader_active: bool,
    poisoned: Option<String>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // No code path panics while holding these locks; if one ever did, the data is still
    // consistent at every unlock point, so recover rather than propagate the poison.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Store {
    /// Create a new store file. Fails if `path` exists.
    pub fn create(path: impl AsRef<Path>, opts: &Options) -> Result<Store> {
        let path = path.as_ref();
        validate_options(opts)?;
        if opts.read_only {
            return Err(Error::InvalidArgument("cannot create a store read-only".into()));
        }
        let file = match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(Error::AlreadyExists(path.into()))
            }
            Err(e) if is_permission(&e) => {
                return Err(Error::NotWritable {
                    path: path.into(),
                    source: e,
                })
            }
            Err(e) => return Err(Error::io("creating the store file", e)),
        };
        lock_file(&file, path, false)?;
        let store = Store::create_with_io(Box::new(FileIo::new(file)), opts);
        if store.is_err() {
            // Leave nothing half-made behind for a later open to trip over.
            let _ = std::fs::remove_file(path);
        }
        let store = store?;
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| Error::io("flushing the directory of the new store", e))?;
        Ok(store)
    }

    /// Open an existing store file, recovering to its last durable commit.
    pub fn open(path: impl AsRef<Path>, opts: &Options) -> Result<Store> {
        let path = path.as_ref();
        let file = match OpenOptions::new().read(true).write(!opts.read_only).open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Error::NotFound(path.into())),
            Err(e) if is_permission(&e) && !opts.read_only => {
                return Err(Error::NotWritable {
                    path: path.into(),
                    source: e,
                })
            }
            Err(e) => return Err(Error::io("opening the store file", e)),
        };
        if file.metadata().map(|m| m.is_dir()).unwrap_or(false) {
            return Err(Error::NotAStore(format!("{} is a directory", path.display())));
        }
        lock_file(&file, path, opts.read_only)?;
        Store::open_with_io(Box::new(FileIo::new(file)), opts)
    }

    /// Create a store on an empty medium (e.g. a [`crate::sim::SimDisk`]).
    pub fn create_with_io(io: Box<dyn StorageIo>, opts: &Options) -> Result<Store> {
        validate_options(opts)?;
        if io
            .size()
            .map_err(|e| Error::io("reading the medium's length", e))?
            != 0
        {
            return Err(Error::InvalidArgument("the medium is not empty".into()));
        }
        let page_size = opts.page_size as u64;
        let log_slots = (opts.log_capacity.div_ceil(page_size)).max(1);
        let empty = State::default();
        let (blob, blob_crc) = empty.encode_checkpoint();
        let blob_slots = (blob.len() as u64).div_ceil(page_size);
        let capacity = (opts.initial_capacity / page_size).max(log_slots + blob_slots + 16);
        // Preallocate by writing: commits into written extents change no filesystem metadata.
        write_zeros(io.as_ref(), 0, SLOT_BASE + capacity * page_size)?;
        let blob_slot = log_slots;
        io.write_at(&blob, slot_offset(blob_slot, page_size))
            .map_err(|e| Error::io("writing the first checkpoint", e))?;
        let header = Header {
            page_size: opts.page_size,
            store_id: rand::random(),
            generation: 1,
            checkpoint: CheckpointRef {
                first_slot: blob_slot,
                len: blob.len() as u64,
                crc: blob_crc,
                seq: 0,
            },
            log: LogRef {
                first_slot: 0,
                slots: log_slots,
                seed: rand::random(),
            },
        };
        for generation in [0, 1] {
            let copy = Header { generation, ..header };
            io.write_at(&copy.encode(), Header::copy_offset(generation))
                .map_err(|e| Error::io("writing the header", e))?;
        }
        io.sync_data()
            .map_err(|e| Error::io("flushing the new store", e))?;
        Store::open_with_io(io, opts)
    }

    /// Open a store on any medium, recovering it.
    pub fn open_with_io(io: Box<dyn StorageIo>, opts: &Options) -> Result<Store> {
        let recovered = recover(io.as_ref())?;
        let page_size = recovered.header.page_size as u64;
        let counters = Counters::default();
        if recovered.records_replayed > 0 {
            bump(&counters.recoveries, 1);
            bump(&counters.records_replayed, recovered.records_replayed);
        }
        let last = recovered.state.seq;
        let next_file_id = recovered.state.next_file_id.max(1);
        let meta = Meta {
            state: Arc::new(recovered.state),
            header: recovered.header,
            alloc: recovered.alloc,
            awaiting_checkpoint: recovered.superseded.into_iter().map(|s| (last, s)).collect(),
            awaiting_readers: Vec::new(),
            snapshots: BTreeMap::new(),
            log_tail: recovered.log_tail,
            prev_crc: recovered.prev_crc,
            session: rand::random(),
            commits_since_checkpoint: recovered.records_replayed,
        };
        let flush = FlushState {
            written_upto: last,
            durable: last,
            ..FlushState::default()
        };
        Ok(Store {
            shared: Arc::new(Shared {
                io,
                page_size,
                opts: opts.clone(),
                meta: Mutex::new(meta),
                flush: Mutex::new(flush),
                flushed: Condvar::new(),
                counters,
                next_file_id: AtomicU32::new(next_file_id),
            }),
        })
    }

    pub fn page_size(&self) -> usize {
        self.shared.page_size as usize
    }

    /// A read-only view of the latest committed state. It sees exactly one state, whatever
    /// commits afterwards; the slots it reads are not reused while it lives.
    pub fn snapshot(&self) -> Snapshot {
        let mut meta = lock(&self.shared.meta);
        let state = meta.state.clone();
        *meta.snapshots.entry(state.seq).or_insert(0) += 1;
        Snapshot {
            shared: self.shared.clone(),
            state,
        }
    }

    /// Begin a transaction on the latest committed state.
    pub fn begin(&self) -> Transaction {
        let base = self.snapshot();
        let work = (*base.state).clone();
        Transaction {
            base,
            work,
            own_slots: BTreeSet::new(),
            dirty: BTreeSet::new(),
            low_water: BTreeMap::new(),
            created: BTreeSet::new(),
            deleted: BTreeSet::new(),
            finished: false,
        }
    }

    /// Write a mapping checkpoint now (also makes every sequenced commit durable).
    pub fn checkpoint(&self) -> Result<()> {
        self.refuse_if_read_only()?;
        let mut meta = lock(&self.shared.meta);
        self.shared.checkpoint_locked(&mut meta, 0)
    }

    /// Checkpoint if anything was committed since the last one, so the next open replays
    /// nothing. Dropping a store without `close` is safe too; the next open recovers.
    pub fn close(self) -> Result<()> {
        if self.shared.opts.read_only {
            return Ok(());
        }
        let mut meta = lock(&self.shared.meta);
        if meta.commits_since_checkpoint > 0 {
            self.shared.checkpoint_locked(&mut meta, 0)?;
        }
        Ok(())
    }

    /// Sequence number of the latest commit (durable or not yet).
    pub fn last_seq(&self) -> u64 {
        lock(&self.shared.meta).state.seq
    }

    /// Sequence number up to which every commit is durable.
    pub fn durable_seq(&self) -> u64 {
        lock(&self.shared.flush).durable
    }

    pub fn stats(&self) -> Stats {
        let c = &self.shared.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (last_seq, slots_total, slots_free) = {
            let meta = lock(&self.shared.meta);
            (meta.state.seq, meta.alloc.capacity(), meta.alloc.free_count())
        };
        Stats {
            page_size: self.shared.page_size,
            commit_records: get(&c.commit_records),
            pages_written: get(&c.pages_written),
            pages_embedded: get(&c.pages_embedded),
            bytes_written: get(&c.bytes_written),
            bytes_preallocated: get(&c.bytes_preallocated),
            flushes: get(&c.flushes),
            checkpoints: get(&c.checkpoints),
            recoveries: get(&c.recoveries),
            records_replayed: get(&c.records_replayed),
            conflicts: get(&c.conflicts),
            last_seq,
            durable_seq: self.durable_seq(),
            slots_total,
            slots_free,
        }
    }

    fn refuse_if_read_only(&self) -> Result<()> {
        if self.shared.opts.read_only {
            return Err(Error::ReadOnly);
        }
        Ok(())
    }
}

fn validate_options(opts: &Options) -> Result<()> {
    if !valid_page_size(opts.page_size) {
        return Err(Error::InvalidArgument(format!(
            "page size {} is not a power of two from 512 to 65536",
            opts.page_size
        )));
    }
    if opts.log_capacity < RECORD_ALIGN * 8 {
        return Err(Error::InvalidArgument(
            "log capacity must be at least 4 KiB".into(),
        ));
    }
    Ok(())
}

fn is_permission(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::PermissionDenied || e.raw_os_error() == Some(libc::EROFS)
}

fn lock_file(file: &File, path: &Path, shared: bool) -> Result<()> {
    let attempt = if shared {
        file.try_lock_shared()
    } else {
        file.try_lock()
    };
    match attempt {
        Ok(()) => Ok(()),
        Err(TryLockError::WouldBlock) => Err(Error::Locked(path.into())),
        Err(TryLockError::Error(e)) => Err(Error::io("locking the store file", e)),
    }
}

fn slot_offset(slot: u64, page_size: u64) -> u64 {
    SLOT_BASE + slot * page_size
}

fn write_zeros(io: &dyn StorageIo, from: u64, to: u64) -> Result<()> {
    const CHUNK: u64 = 1 << 20;
    let zeros = vec![0u8; CHUNK as usize];
    let mut at = from;
    while at < to {
        let n = (to - at).min(CHUNK);
        io.write_at(&zeros[..n as usize], at)
            .map_err(|e| Error::io("preallocating the store file", e))?;
        at += n;
    }
    Ok(())
}

impl Shared {
    fn read_slot(&self, entry: &PageEntry, buf: &mut [u8], what: impl Fn() -> String) -> Result<()> {
        if entry.slot == NO_SLOT {
            buf.fill(0);
        } else {
            self.io
                .read_at(buf, slot_offset(entry.slot, self.page_size))
                .map_err(|e| Error::io("reading a page", e))?;
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

    fn check_poison(&self) -> Result<()> {
        match &lock(&self.flush).poisoned {
            Some(why) => Err(Error::Poisoned(why.clone())),
            None => Ok(()),
        }
    }

    fn poison(&self, why: String) {
        let mut f = lock(&self.flush);
        if f.poisoned.is_none() {
            f.poisoned = Some(why);
        }
        self.flushed.notify_all();
    }

    /// Take one free slot, checkpointing or growing the file if there is none.
    fn alloc_slot(&self, meta: &mut Meta) -> Result<u64> {
        if let Some(slot) = meta.alloc.take_run(1) {
            return Ok(slot);
        }
        if meta.awaiting_checkpoint.len() as u64 >= meta.alloc.capacity() / 4 {
            self.checkpoint_locked(meta, 0)?;
            if let Some(slot) = meta.alloc.take_run(1) {
                return Ok(slot);
            }
        }
        self.grow(meta, 1)?;
        meta.alloc
            .take_run(1)
            .ok_or_else(|| Error::Corrupt("no free slot after growing".into()))
    }

    fn alloc_run(&self, meta: &mut Meta, n: u64) -> Result<u64> {
        if let Some(first) = meta.alloc.take_run(n) {
            return Ok(first);
        }
        self.grow(meta, n)?;
        meta.alloc
            .take_run(n)
            .ok_or_else(|| Error::Corrupt("no free run after growing".into()))
    }

    /// Extend the file by writing zeros, in a large step, and flush the new size once.
    fn grow(&self, meta: &mut Meta, at_least: u64) -> Result<()> {
        let old = meta.alloc.capacity();
        let step = (self.opts.growth_step / self.page_size)
            .max(old / 8)
            .max(at_least)
            .max(16);
        let new = old + step;
        write_zeros(
            self.io.as_ref(),
            slot_offset(old, self.page_size),
            slot_offset(new, self.page_size),
        )?;
        self.io
            .sync_data()
            .map_err(|e| Error::io("flushing the grown store file", e))?;
        bump(&self.counters.bytes_preallocated, step * self.page_size);
        bump(&self.counters.flushes, 1);
        meta.alloc.grow(new);
        Ok(())
    }

    fn write_counted(&self, data: &[u8], offset: u64, during: &'static str) -> Result<()> {
        self.io.write_at(data, offset).map_err(|e| Error::io(during, e))?;
        bump(&self.counters.bytes_written, data.len() as u64);
        Ok(())
    }

    /// Wait until every sequenced record has been written (so the log can restart).
    fn wait_all_written(&self, last_seq: u64) -> Result<()> {
        let mut f = lock(&self.flush);
        loop {
            if let Some(why) = &f.poisoned {
                return Err(Error::Poisoned(why.clone()));
            }
            if f.written_upto >= last_seq {
                return Ok(());
            }
            f = self.flushed.wait(f).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Write the whole mapping to free slots and point the header at it with one flush.
    /// Then the log restarts and slots superseded before it can be reused. The caller holds
    /// the meta lock, so no commit is sequenced meanwhile.
    fn checkpoint_locked(&self, meta: &mut Meta, min_log_bytes: u64) -> Result<()> {
        let last_seq = meta.state.seq;
        self.wait_all_written(last_seq)?;
        let (blob, blob_crc) = meta.state.encode_checkpoint();
        let blob_slots = (blob.len() as u64).div_ceil(self.page_size).max(1);
        let blob_first = self.alloc_run(meta, blob_slots)?;
        let mut release_on_failure = vec![(blob_first, blob_slots)];
        let result = (|| -> Result<Header> {
            self.write_counted(
                &blob,
                slot_offset(blob_first, self.page_size),
                "writing a checkpoint",
            )?;
            let mut log = LogRef {
                seed: rand::random(),
                ..meta.header.log
            };
            if min_log_bytes > log.slots * self.page_size {
                // A record larger than the log: move the log to a larger run.
                let slots = (log.slots * 2).max(min_log_bytes.div_ceil(self.page_size));
                let first = self.alloc_run(meta, slots)?;
                release_on_failure.push((first, slots));
                write_zeros(
                    self.io.as_ref(),
                    slot_offset(first, self.page_size),
                    slot_offset(first + slots, self.page_size),
                )?;
                log = LogRef {
                    first_slot: first,
                    slots,
                    seed: log.seed,
                };
            }
            let header = Header {
                generation: meta.header.generation + 1,
                checkpoint: CheckpointRef {
                    first_slot: blob_first,
                    len: blob.len() as u64,
                    crc: blob_crc,
                    seq: last_seq,
                },
                log,
                ..meta.header
            };
            self.write_counted(
                &header.encode(),
                Header::copy_offset(header.generation),
                "writing the header",
            )?;
            Ok(header)
        })();
        let header = match result {
            Ok(h) => h,
            Err(e) => {
                // Nothing durable points at these slots yet.
                for (first, n) in release_on_failure {
                    meta.alloc.release(first, n);
                }
                return Err(e);
            }
        };
        if let Err(e) = self.io.sync_data() {
            self.poison(format!("flushing a checkpoint failed: {e}"));
            return Err(Error::io("flushing a checkpoint", e));
        }
        bump(&self.counters.flushes, 1);
        bump(&self.counters.checkpoints, 1);
        {
            let mut f = lock(&self.flush);
            f.durable = f.durable.max(last_seq);
            self.flushed.notify_all();
        }
        let old = meta.header;
        meta.alloc.release(
            old.checkpoint.first_slot,
            (old.checkpoint.len.div_ceil(self.page_size)).max(1),
        );
        if old.log.first_slot != header.log.first_slot {
            meta.alloc.release(old.log.first_slot, old.log.slots);
        }
        meta.header = header;
        meta.log_tail = 0;
        meta.prev_crc = header.log.seed;
        meta.commits_since_checkpoint = 0;
        let covered = std::mem::take(&mut meta.awaiting_checkpoint);
        meta.awaiting_readers.extend(covered);
        release_unread(meta);
        Ok(())
    }

    /// Group commit: mark `seq` written, then return once a flush covers it. One waiter at
    /// a time flushes for everyone whose record is written.
    fn wait_durable(&self, seq: u64, written: bool) -> Result<()> {
        let mut f = lock(&self.flush);
        if written {
            if seq == f.written_upto + 1 {
                f.written_upto = seq;
                while let Some(next) = f
                    .written_ahead
                    .first()
                    .copied()
                    .filter(|n| *n == f.written_upto + 1)
                {
                    f.written_ahead.remove(&next);
                    f.written_upto = next;
                }
                self.flushed.notify_all();
            } else if seq > f.written_upto {
                f.written_ahead.insert(seq);
            }
        }
        loop {
            if f.durable >= seq {
                return Ok(());
            }
            if let Some(why) = &f.poisoned {
                return Err(Error::Poisoned(why.clone()));
            }
            if !f.leader_active && f.written_upto >= seq {
                f.leader_active = true;
                let target = f.written_upto;
                drop(f);
                let result = self.io.sync_data();
                f = lock(&self.flush);
                f.leader_active = false;
                match result {
                    Ok(()) => {
                        bump(&self.counters.flushes, 1);
                        f.durable = f.durable.max(target);
                    }
                    Err(e) => {
                        if f.poisoned.is_none() {
                            f.poisoned = Some(format!("fdatasync failed: {e}"));
                        }
                    }
                }
                self.flushed.notify_all();
                continue;
            }
            f = self.flushed.wait(f).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Give back checkpointed slots that no open snapshot can read any more.
fn release_unread(meta: &mut Meta) {
    let oldest_reader = meta.snapshots.keys().next().copied();
    let Meta {
        awaiting_readers,
        alloc,
        ..
    } = meta;
    awaiting_readers.retain(|&(superseded_at, slot)| {
        // A snapshot at seq s reads the slot only if it was superseded after s.
        let still_read = oldest_reader.is_some_and(|s| s < superseded_at);
        if !still_read {
            alloc.release(slot, 1);
        }
        still_read
    });
}

/// A read-only view of one committed state.
pub struct Snapshot {
    shared: Arc<Shared>,
    state: Arc<State>,
}

impl Clone for Snapshot {
    fn clone(&self) -> Snapshot {
        *lock(&self.shared.meta)
            .snapshots
            .entry(self.state.seq)
            .or_insert(0) += 1;
        Snapshot {
            shared: self.shared.clone(),
            state: self.state.clone(),
        }
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        let mut meta = lock(&self.shared.meta);
        let seq = self.state.seq;
        if let Some(count) = meta.snapshots.get_mut(&seq) {
            *count -= 1;
            if *count == 0 {
                meta.snapshots.remove(&seq);
                release_unread(&mut meta);
            }
        }
    }
}

/// Reading through a state: shared by snapshots and transactions.
fn read_page_in(shared: &Shared, state: &State, file: FileId, page: u64, buf: &mut [u8]) -> Result<()> {
    if buf.len() as u64 != shared.page_size {
        return Err(Error::InvalidArgument(format!(
            "buffer of {} bytes for pages of {}",
            buf.len(),
            shared.page_size
        )));
    }
    let f = state.files.get(&file.0).ok_or(Error::NoSuchFile(file.0))?;
    match f.pages.get(page as usize) {
        Some(entry) => shared.read_slot(entry, buf, || format!("page {page} of {:?}", f.name)),
        None => {
            buf.fill(0);
            Ok(())
        }
    }
}

/// Identifies a logical file within a store. Ids are never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FileId(pub u32);

impl Snapshot {
    /// The sequence number of the commit this snapshot shows.
    pub fn seq(&self) -> u64 {
        self.state.seq
    }

    pub fn file(&self, name: &str) -> Option<FileId> {
        self.state.file_by_name(name).map(FileId)
    }

    /// All logical files, by id.
    pub fn files(&self) -> Vec<(FileId, String)> {
        self.state
            .files
            .iter()
            .map(|(id, f)| (FileId(*id), f.name.to_string()))
            .collect()
    }

    /// Logical size in bytes.
    pub fn file_size(&self, file: FileId) -> Result<u64> {
        Ok(self
            .state
            .files
            .get(&file.0)
            .ok_or(Error::NoSuchFile(file.0))?
            .size)
    }

    /// Read one page; pages past the end read as zeros.
    pub fn read_page(&self, file: FileId, page: u64, buf: &mut [u8]) -> Result<()> {
        read_page_in(&self.shared, &self.state, file, page, buf)
    }
}

/// A set of page writes and file changes that commits atomically, or not at all.
///
/// Isolation: the transaction reads the state it began on plus its own writes. At commit,
/// if another transaction committed since then a change to a page, size or file this one
/// also changed, the commit fails with `Error::Conflict` (first committer wins).
pub struct Transaction {
    base: Snapshot,
    work: State,
    /// Slots this transaction wrote; private until commit, so rewritten in place.
    own_slots: BTreeSet<u64>,
    dirty: BTreeSet<(u32, u64)>,
    /// Smallest size each pre-existing file had during the transaction.
    low_water: BTreeMap<u32, u64>,
    created: BTreeSet<u32>,
    deleted: BTreeSet<u32>,
    finished: bool,
}

/// Merge difference runs separated by fewer equal bytes than this.
const DIFF_GAP: usize = 8;
const MAX_OVERLAY_RANGES: usize = 8;

/// Byte ranges where `new` differs from `old`.
fn diff_ranges(old: &[u8], new: &[u8]) -> Vec<(usize, usize)> {
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for i in (0..old.len()).filter(|&i| old[i] != new[i]) {
        match ranges.last_mut() {
            Some((_, end)) if i < *end + DIFF_GAP => *end = i + 1,
            _ => ranges.push((i, i + 1)),
        }
    }
    ranges
}

impl Transaction {
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
        self.work
            .files
            .iter()
            .map(|(id, f)| (FileId(*id), f.name.to_string()))
            .collect()
    }

    pub fn file_size(&self, file: FileId) -> Result<u64> {
        Ok(self
            .work
            .files
            .get(&file.0)
            .ok_or(Error::NoSuchFile(file.0))?
            .size)
    }

    /// Read a page as this transaction sees it (its own writes included).
    pub fn read_page(&self, file: FileId, page: u64, buf: &mut [u8]) -> Result<()> {
        read_page_in(self.shared(), &self.work, file, page, buf)
    }

    fn writable(&self) -> Result<()> {
        if self.shared().opts.read_only {
            return Err(Error::ReadOnly);
        }
        Ok(())
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
        let id = self.shared().next_file_id.fetch_add(1, Ordering::Relaxed);
        let file = crate::state::FileState {
            name: name.into(),
            size: 0,
            pages: imbl::Vector::new(),
            meta_seq: 0,
        };
        self.work.files.insert(id, file);
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
        Ok(())
    }

    /// Set a file's logical size in bytes: pages past the end are dropped, pages added read
    /// as zeros.
    pub fn set_file_size(&mut self, file: FileId, bytes: u64) -> Result<()> {
        self.writable()?;
        let page_size = self.shared().page_size;
        let f = self
            .work
            .files
            .get_mut(&file.0)
            .ok_or(Error::NoSuchFile(file.0))?;
        if bytes.div_ceil(page_size) > u32::MAX as u64 {
            return Err(Error::InvalidArgument(format!("file size {bytes} is too large")));
        }
        if bytes < f.size && !self.created.contains(&file.0) {
            let low = self.low_water.entry(file.0).or_insert(f.size);
            *low = (*low).min(bytes);
        }
        let pages = bytes.div_ceil(page_size) as usize;
        if pages < f.pages.len() {
            f.pages.truncate(pages);
        }
        while f.pages.len() < pages {
            f.pages.push_back(PageEntry::ZERO);
        }
        f.size = bytes;
        let kept = pages as u64;
        self.dirty.retain(|(d, p)| *d != file.0 || *p < kept);
        Ok(())
    }

    /// Write one whole page; writing past the end extends the file to include it.
    pub fn write_page(&mut self, file: FileId, page: u64, data: &[u8]) -> Result<()> {
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
        if (page + 1) * page_size > size {
            self.set_file_size(file, (page + 1) * page_size)?;
        }
        let shared = self.base.shared.clone();
        let current = self.work.entry(file.0, page).cloned().unwrap_or(PageEntry::ZERO);
        let crc = crc32c::crc32c(data);
        if current.slot != NO_SLOT && self.own_slots.contains(&current.slot) {
            shared.write_counted(data, slot_offset(current.slot, page_size), "writing a page")?;
            bump(&shared.counters.pages_written, 1);
            self.set_entry(
                file,
                page,
                PageEntry {
                    slot: current.slot,
                    crc,
                    seq: 0,
                    overlay: None,
                },
            );
            return Ok(());
        }
        if shared.opts.embed_limit > 0 {
            let mut old = vec![0u8; page_size as usize];
            shared.read_slot(&current, &mut old, || format!("page {page} of file {}", file.0))?;
            let ranges = diff_ranges(&old, data);
            if ranges.is_empty() {
                return Ok(());
            }
            let mut overlay = current.overlay.as_deref().cloned().unwrap_or_default();
            for (start, end) in &ranges {
                overlay = overlay.merged(*start as u32, &data[*start..*end]);
            }
            if overlay.total_bytes() <= shared.opts.embed_limit && overlay.ranges.len() <= MAX_OVERLAY_RANGES
            {
                self.set_entry(
                    file,
                    page,
                    PageEntry {
                        overlay: Some(Arc::new(overlay)),
                        ..current
                    },
                );
                return Ok(());
            }
        }
        let slot = shared.alloc_slot(&mut lock(&shared.meta))?;
        if let Err(e) = shared.write_counted(data, slot_offset(slot, page_size), "writing a page") {
            lock(&shared.meta).alloc.release(slot, 1);
            return Err(e);
        }
        bump(&shared.counters.pages_written, 1);
        self.own_slots.insert(slot);
        self.set_entry(
            file,
            page,
            PageEntry {
                slot,
                crc,
                seq: 0,
                overlay: None,
            },
        );
        Ok(())
    }

    fn set_entry(&mut self, file: FileId, page: u64, entry: PageEntry) {
        if let Some(slot) = self
            .work
            .files
            .get_mut(&file.0)
            .and_then(|f| f.pages.get_mut(page as usize))
        {
            *slot = entry;
            self.dirty.insert((file.0, page));
        }
    }

    /// The record's operations: the net effect of this transaction on its base.
    fn operations(&self) -> Vec<Op> {
        let page_size = self.shared().page_size;
        let base = &self.base.state;
        let mut ops: Vec<Op> = self.deleted.iter().map(|&file| Op::Delete { file }).collect();
        for &id in &self.created {
            ops.push(Op::Create {
                file: id,
                name: self.work.files[&id].name.to_string(),
            });
        }
        for (&id, f) in &self.work.files {
            let before = if self.created.contains(&id) {
                0
            } else {
                base.files.get(&id).map_or(0, |b| b.size)
            };
            let low = self.low_water.get(&id).copied().unwrap_or(before).min(before);
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
        for &(id, page) in &self.dirty {
            let Some(entry) = self.work.entry(id, page) else {
                continue;
            };
            let before_size = if self.created.contains(&id) {
                0
            } else {
                let size = base.files.get(&id).map_or(0, |b| b.size);
                self.low_water.get(&id).copied().unwrap_or(size).min(size)
            };
            let prior = if page < before_size.div_ceil(page_size) {
                base.entry(id, page)
            } else {
                None
            };
            let prior_slot = prior.map_or(NO_SLOT, |p| p.slot);
            let prior_overlay = prior.and_then(|p| p.overlay.as_deref());
            if entry.slot != prior_slot {
                ops.push(Op::Page {
                    file: id,
                    page,
                    slot: entry.slot,
                    crc: entry.crc,
                });
            }
            if let Some(overlay) = entry.overlay.as_deref() {
                if entry.slot != prior_slot || Some(overlay) != prior_overlay {
                    for (offset, bytes) in &overlay.ranges {
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
        ops
    }

    /// Describe the first change another commit made since `base` to something this
    /// transaction changes.
    fn find_conflict(&self, latest: &State, ops: &[Op]) -> Option<String> {
        let base_seq = self.base.state.seq;
        if latest.seq == base_seq {
            return None;
        }
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
                    if self.created.contains(file) {
                        continue;
                    }
                    let Some(f) = latest.files.get(file) else {
                        return Some(format!("file {file} (deleted)"));
                    };
                    if f.meta_seq > base_seq {
                        return Some(format!("the size of {:?}", f.name));
                    }
                    if let Op::Page { page, .. } | Op::Patch { page, .. } = op {
                        if f.pages.get(*page as usize).is_none_or(|e| e.seq > base_seq) {
                            return Some(format!("page {page} of {:?}", f.name));
                        }
                    }
                }
            }
        }
        None
    }

    /// Commit: returns once the transaction is durable. On error the transaction did not
    /// take effect, unless `CommitError::seq` is set and a crash intervened (then it may).
    pub fn commit(mut self) -> Result<u64, CommitError> {
        self.finished = true;
        let shared = self.base.shared.clone();
        let fail = |error: Error| CommitError { seq: None, error };
        let ops = self.operations();
        if ops.is_empty() {
            self.release_own_slots(&mut lock(&shared.meta));
            let seq = self.base.state.seq;
            shared.wait_durable(seq, false).map_err(fail)?;
            return Ok(seq);
        }
        let (seq, record, position) = {
            let mut meta = lock(&shared.meta);
            let sequenced = (|| -> Result<(u64, Vec<u8>, u64)> {
                shared.check_poison()?;
                if let Some(what) = self.find_conflict(&meta.state, &ops) {
                    bump(&shared.counters.conflicts, 1);
                    return Err(Error::Conflict(what));
                }
                let seq = meta.state.seq + 1;
                let mut record = Record {
                    seq,
                    session: meta.session,
                    prev_crc: meta.prev_crc,
                    ops,
                };
                let len = record.encode().0.len() as u64;
                let log_bytes = meta.header.log.slots * shared.page_size;
                let interval = shared.opts.checkpoint_interval;
                if meta.log_tail + len > log_bytes
                    || (interval > 0 && meta.commits_since_checkpoint >= interval)
                {
                    shared.checkpoint_locked(&mut meta, len)?;
                    record.prev_crc = meta.prev_crc;
                }
                let (bytes, crc) = record.encode();
                let mut next = (*meta.state).clone();
                let mut superseded = Vec::new();
                next.apply(&record.ops, seq, shared.page_size, &mut superseded)?;
                let position = slot_offset(meta.header.log.first_slot, shared.page_size) + meta.log_tail;
                meta.log_tail += bytes.len() as u64;
                meta.prev_crc = crc;
                meta.commits_since_checkpoint += 1;
                meta.state = Arc::new(next);
                meta.awaiting_checkpoint
                    .extend(superseded.into_iter().map(|s| (seq, s)));
                let mapped: BTreeSet<u64> = record
                    .ops
                    .iter()
                    .filter_map(|op| match op {
                        Op::Page { slot, .. } => Some(*slot),
                        _ => None,
                    })
                    .collect();
                self.own_slots.retain(|s| !mapped.contains(s));
                Ok((seq, bytes, position))
            })();
            self.release_own_slots(&mut meta);
            sequenced.map_err(fail)?
        };
        // The record is written outside the lock: concurrent committers write theirs at once.
        if let Err(e) = shared.write_counted(&record, position, "writing a commit record") {
            // A hole in the log would hide every later record: stop committing.
            shared.poison(format!("writing commit record {seq} failed: {e}"));
            return Err(CommitError {
                seq: Some(seq),
                error: e,
            });
        }
        bump(&shared.counters.commit_records, 1);
        shared.wait_durable(seq, true).map_err(|error| CommitError {
            seq: Some(seq),
            error,
        })?;
        Ok(seq)
    }

    /// Discard every change.
    pub fn abort(mut self) {
        self.finished = true;
        let shared = self.base.shared.clone();
        self.release_own_slots(&mut lock(&shared.meta));
    }

    fn release_own_slots(&mut self, meta: &mut Meta) {
        for slot in std::mem::take(&mut self.own_slots) {
            meta.alloc.release(slot, 1);
        }
        let embedded = self.dirty.iter().filter(|(f, p)| {
            self.work
                .entry(*f, *p)
                .is_some_and(|e| e.overlay.is_some() && !self.created.contains(f))
        });
        if self.finished {
            bump(&self.base.shared.counters.pages_embedded, embedded.count() as u64);
        }
    }
}

impl Drop for Transaction {
    fn drop(&mut self) {
        if !self.finished {
            self.finished = true;
            let shared = self.base.shared.clone();
            for slot in std::mem::take(&mut self.own_slots) {
                lock(&shared.meta).alloc.release(slot, 1);
            }
        }
    }
}

/// What recovery found.
struct Recovered {
    header: Header,
    state: State,
    alloc: SlotAllocator,
    superseded: Vec<u64>,
    log_tail: u64,
    prev_crc: u32,
    records_replayed: u64,
}

/// Read the headers, load the newest intact checkpoint, replay the log's valid prefix.
fn recover(io: &dyn StorageIo) -> Result<Recovered> {
    let len = io
        .size()
        .map_err(|e| Error::io("reading the store's length", e))?;
    let mut head = vec![0u8; len.min(SLOT_BASE) as usize];
    io.read_at(&mut head, 0)
        .map_err(|e| Error::io("reading the header", e))?;
    let copies: Vec<Result<Header>> = [0u64, HEADER_BLOCK]
        .iter()
        .map(|&at| match head.get(at as usize..at as usize + HEADER_LEN) {
            Some(bytes) => Header::decode(bytes),
            None => Err(Error::NotAStore("file too short".into())),
        })
        .collect();
    let mut valid: Vec<Header> = copies.iter().filter_map(|c| c.as_ref().ok().copied()).collect();
    if valid.is_empty() {
        return Err(match (&copies[0], &copies[1]) {
            (Err(e @ Error::UnsupportedVersion { .. }), _)
            | (_, Err(e @ Error::UnsupportedVersion { .. })) => Error::UnsupportedVersion {
                found: version_of(e),
                supported: crate::format::FORMAT_VERSION,
            },
            (Err(Error::NotAStore(_)), Err(Error::NotAStore(_))) if len >= HEADER_LEN as u64 => {
                Error::NotAStore("the file does not begin with the onesync store magic".into())
            }
            (Err(Error::NotAStore(_)), Err(Error::NotAStore(_))) => Error::NotAStore(format!(
                "the file is {len} bytes, too short to hold a store header"
            )),
            _ => Error::Corrupt("both header copies fail their checksums".into()),
        });
    }
    if valid.len() == 2
        && (valid[0].store_id != valid[1].store_id || valid[0].page_size != valid[1].page_size)
    {
        return Err(Error::Corrupt(
            "the two header copies describe different stores".into(),
        ));
    }
    if len < SLOT_BASE {
        return Err(Error::Truncated(format!(
            "{len} bytes, shorter than the {SLOT_BASE}-byte header area"
        )));
    }
    valid.sort_by_key(|h| std::cmp::Reverse(h.generation));
    let page_size = valid[0].page_size as u64;
    let capacity = (len - SLOT_BASE) / page_size;
    let damaged_copy = copies.iter().any(|c| c.is_err());
    let mut last_error = None;
    for (i, header) in valid.iter().enumerate() {
        match load_checkpoint(io, header, capacity) {
            Ok(state) => {
                let fell_back = i > 0 || damaged_copy;
                return replay(io, *header, state, capacity, fell_back);
            }
            Err(e @ Error::Truncated(_)) => return Err(e),
            Err(e @ Error::Io { .. }) => return Err(e),
            Err(e) => last_error = Some(e),
        }
    }
    Err(last_error.unwrap_or_else(|| Error::Corrupt("no usable checkpoint".into())))
}

fn version_of(e: &Error) -> u32 {
    match e {
        Error::UnsupportedVersion { found, .. } => *found,
        _ => 0,
    }
}

fn load_checkpoint(io: &dyn StorageIo, header: &Header, capacity: u64) -> Result<State> {
    let page_size = header.page_size as u64;
    let ck = header.checkpoint;
    let ck_slots = ck.len.div_ceil(page_size).max(1);
    let end = ck.first_slot.checked_add(ck_slots);
    let log_end = header.log.first_slot.checked_add(header.log.slots);
    if end.is_none_or(|e| e > capacity) || log_end.is_none_or(|e| e > capacity) {
        return Err(Error::Truncated(format!(
            "the header names slots up to {} but the file holds {capacity}",
            end.unwrap_or(u64::MAX).max(log_end.unwrap_or(u64::MAX))
        )));
    }
    let mut blob = vec![0u8; ck.len as usize];
    io.read_at(&mut blob, slot_offset(ck.first_slot, page_size))
        .map_err(|e| Error::io("reading the checkpoint", e))?;
    if crc32c::crc32c(&blob) != ck.crc {
        return Err(Error::Corrupt(format!(
            "the checkpoint of generation {} fails its checksum",
            header.generation
        )));
    }
    let decoded = Checkpoint::decode(&blob)?;
    if decoded.seq != ck.seq {
        return Err(Error::Corrupt(
            "checkpoint and header disagree on the sequence number".into(),
        ));
    }
    let state = State::from_checkpoint(decoded, page_size)?;
    let slots: Vec<u64> = state.live_slots().collect();
    if let Some(beyond) = slots.iter().find(|s| **s >= capacity) {
        return Err(Error::Truncated(format!(
            "a page lives in slot {beyond} but the file holds {capacity} slots"
        )));
    }
    Ok(state)
}

/// Reads the log front to back in large chunks.
struct LogReader<'a> {
    io: &'a dyn StorageIo,
    start: u64,
    len: u64,
    chunk_at: u64,
    chunk: Vec<u8>,
}

impl LogReader<'_> {
    const CHUNK: u64 = 1 << 20;

    /// The intact record at `at`, with its CRC and length; `None` where the log ends.
    fn record_at(&mut self, at: u64) -> Result<Option<(Record, u32, u64)>> {
        let Some(first) = self.bytes(at, RECORD_ALIGN)? else {
            return Ok(None);
        };
        let Some(len) = Record::peek_len(first) else {
            return Ok(None);
        };
        let Some(bytes) = self.bytes(at, len)? else {
            return Ok(None);
        };
        Ok(Record::decode(bytes).map(|(record, crc)| (record, crc, len)))
    }

    fn bytes(&mut self, at: u64, n: u64) -> Result<Option<&[u8]>> {
        if at + n > self.len {
            return Ok(None);
        }
        if at < self.chunk_at || at + n > self.chunk_at + self.chunk.len() as u64 {
            let size = (self.len - at).min(Self::CHUNK.max(n));
            self.chunk.resize(size as usize, 0);
            self.io
                .read_at(&mut self.chunk, self.start + at)
                .map_err(|e| Error::io("reading the log", e))?;
            self.chunk_at = at;
        }
        let from = (at - self.chunk_at) as usize;
        Ok(Some(&self.chunk[from..from + n as usize]))
    }
}

fn replay(
    io: &dyn StorageIo,
    header: Header,
    mut state: State,
    capacity: u64,
    fell_back: bool,
) -> Result<Recovered> {
    let page_size = header.page_size as u64;
    let mut log = LogReader {
        io,
        start: slot_offset(header.log.first_slot, page_size),
        len: header.log.slots * page_size,
        chunk_at: 0,
        chunk: Vec::new(),
    };
    let mut tail = 0u64;
    let mut prev_crc = header.log.seed;
    let mut superseded = Vec::new();
    let mut replayed = 0u64;
    let mut page = vec![0u8; page_size as usize];
    while let Some((record, crc, record_len)) = log.record_at(tail)? {
        if record.prev_crc != prev_crc || record.seq != state.seq + 1 {
            if tail == 0 && fell_back && record.seq > state.seq {
                // The log was restarted by a checkpoint newer than the one we fell back to:
                // rolling back to ours would silently drop commits.
                return Err(Error::Corrupt(format!(
                    "the newest header copy is damaged and the log holds commit {} from after the checkpoint it replaced; refusing to roll back",
                    record.seq
                )));
            }
            break;
        }
        let mut pages_intact = true;
        for op in &record.ops {
            if let Op::Page { slot, crc, .. } = op {
                if *slot == NO_SLOT {
                    continue;
                }
                if *slot >= capacity {
                    return Err(Error::Truncated(format!(
                        "commit {} maps a page to slot {slot} past the end of the file",
                        record.seq
                    )));
                }
                io.read_at(&mut page, slot_offset(*slot, page_size))
                    .map_err(|e| Error::io("verifying a page", e))?;
                if crc32c::crc32c(&page) != *crc && !cfg!(feature = "deliberately-broken-recovery") {
                    pages_intact = false;
                    break;
                }
            }
        }
        if !pages_intact {
            break;
        }
        let mut next = state.clone();
        next.apply(&record.ops, record.seq, page_size, &mut superseded)?;
        state = next;
        prev_crc = crc;
        tail += record_len;
        replayed += 1;
    }
    let live: Vec<u64> = state.live_slots().collect();
    let mut used = live.clone();
    used.sort_unstable();
    used.dedup();
    if used.len() != live.len() {
        return Err(Error::Corrupt("two pages map to the same slot".into()));
    }
    let live_set: BTreeSet<u64> = used.iter().copied().collect();
    superseded.retain(|s| !live_set.contains(s));
    superseded.sort_unstable();
    superseded.dedup();
    let ck_slots = header.checkpoint.len.div_ceil(page_size).max(1);
    let reserved = (header.checkpoint.first_slot..header.checkpoint.first_slot + ck_slots)
        .chain(header.log.first_slot..header.log.first_slot + header.log.slots);
    let alloc = SlotAllocator::new(
        capacity,
        used.iter()
            .copied()
            .chain(superseded.iter().copied())
            .chain(reserved),
    );
    Ok(Recovered {
        header,
        state,
        alloc,
        superseded,
        log_tail: tail,
        prev_crc,
        records_replayed: replayed,
    })
}
