//! The store: options, counters, the commit sequencer, group commit and checkpoints.

use crate::alloc::SlotAllocator;
use crate::error::{Error, Result};
use crate::format::{
    valid_page_size, CheckpointRef, Header, LogRef, Op, Record, RecordKind, HEADER_BLOCK,
    MAX_CHECKPOINT_EXTENTS, SLOT_BASE,
};
use crate::io::{FileIo, StorageIo};
use crate::recovery::{header_copies, load_checkpoint, newest_header, pages_intact, record_at, recover};
use crate::sharing::{self, Arrival, Sharing, NO_PIN};
use crate::state::State;
use crate::txn::{Snapshot, Transaction, View};
use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions, TryLockError};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Settings. `page_size` takes effect when a store is created; the rest apply to each open.
#[derive(Debug, Clone)]
pub struct Options {
    /// Page size in bytes: a power of two from 512 to 65536.
    pub page_size: u32,
    /// Commits between mapping checkpoints ("delayed checkpoint"); 0 checkpoints only when
    /// `log_capacity` is reached, on `checkpoint()` and on `close()`.
    pub checkpoint_interval: u64,
    /// Bytes of commit records since the last checkpoint that force a checkpoint: bounds
    /// the work (and time) of recovery.
    pub log_capacity: u64,
    /// Bytes of page slots written at creation, so that commits do not grow the file.
    pub initial_capacity: u64,
    /// The file grows by at least this many bytes at a time (and at least by 1/8 of itself).
    pub growth_step: u64,
    /// A page write that changes at most this many bytes of the page (accumulated since the
    /// page was last written whole) is carried in the commit record instead of a new slot.
    /// 0 turns this off.
    pub embed_limit: usize,
    /// Bytes reserved ahead of the commit chain, so that consecutive commits land next to
    /// each other (each commit is then one contiguous write).
    pub window_bytes: u64,
    /// Open without writing anything; commits fail with `Error::ReadOnly`.
    pub read_only: bool,
    /// Read-only opens only: a read error while following the chain of commits ends the
    /// chain there instead of failing the open, so the commits before the damage can be
    /// copied into a new store (`onesync salvage`); [`Store::salvage_stopped_by`] says where.
    pub salvage: bool,
    /// Negative controls only: put a defect back, so a crash test can show that it finds it.
    #[doc(hidden)]
    pub sabotage: Option<Sabotage>,
}

/// A defect that was fixed, put back on purpose (see [`Options::sabotage`]).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sabotage {
    /// A writer taking the write lock trusts the side file's progress alone, as before issue
    /// 14: a process that died between writing a checkpoint's header and publishing it
    /// makes the next writer extend the old chain, which recovery then drops.
    CheckpointPublication,
}

impl Sabotage {
    /// The environment variable crash tests set in the processes they start.
    pub const ENV: &'static str = "ONESYNC_SABOTAGE";

    /// The sabotage `ONESYNC_SABOTAGE` names (`checkpoint-publication`), if any.
    pub fn from_env() -> Option<Sabotage> {
        match std::env::var(Self::ENV).as_deref() {
            Ok("checkpoint-publication") => Some(Sabotage::CheckpointPublication),
            _ => None,
        }
    }
}

impl Default for Options {
    fn default() -> Options {
        Options {
            page_size: 4096,
            checkpoint_interval: 1000,
            log_capacity: 64 << 20,
            initial_capacity: 64 << 20,
            growth_step: 64 << 20,
            embed_limit: 64,
            window_bytes: 1 << 20,
            read_only: false,
            salvage: false,
            sabotage: None,
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
    /// Pages changed only through overlays carried in commit records.
    pub pages_embedded: u64,
    /// Commits whose record and pages did not fit the reserved run and took two writes.
    pub jumps: u64,
    /// Bytes of pages, records, checkpoints and headers written (not preallocation).
    pub bytes_written: u64,
    /// Calls that wrote (pwrite or the I/O layer's equivalent), preallocation excluded.
    pub write_calls: u64,
    /// Bytes of zeros written to grow the file.
    pub bytes_preallocated: u64,
    /// Calls to fdatasync (or the I/O layer's equivalent).
    pub flushes: u64,
    /// Microseconds spent in group-commit flushes, all together.
    pub flush_micros: u64,
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
pub(crate) struct Counters {
    pub commit_records: AtomicU64,
    pub pages_written: AtomicU64,
    pub pages_embedded: AtomicU64,
    pub jumps: AtomicU64,
    pub bytes_written: AtomicU64,
    pub write_calls: AtomicU64,
    pub bytes_preallocated: AtomicU64,
    pub flushes: AtomicU64,
    pub flush_micros: AtomicU64,
    pub checkpoints: AtomicU64,
    pub recoveries: AtomicU64,
    pub records_replayed: AtomicU64,
    pub conflicts: AtomicU64,
}

pub(crate) fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

/// See [`Store::writer_waiting`].
pub struct WaitingWriter {
    shared: Arc<Shared>,
}

impl Drop for WaitingWriter {
    fn drop(&mut self) {
        self.shared.note_active_writer(false);
    }
}

/// A failure-atomic page store. Cheap to clone; all clones share one open store.
#[derive(Clone)]
pub struct Store {
    pub(crate) shared: Arc<Shared>,
}

pub(crate) struct Shared {
    pub io: Box<dyn StorageIo>,
    pub page_size: u64,
    pub opts: Options,
    pub meta: Mutex<Meta>,
    flush: Mutex<FlushState>,
    /// Signalled when `durable` advances or a flush ends (waiters recheck, one may lead).
    durable_changed: Condvar,
    /// Signalled when commits are written or writers drop out (a gathering leader and
    /// checkpoints wait on it). Two condvars keep waiters for durability asleep while
    /// other commits are merely written.
    written_changed: Condvar,
    pub counters: Counters,
    pub next_file_id: AtomicU32,
    /// Other processes may have the store open (a file opened with `Store::open`).
    pub sharing: Option<Sharing>,
    /// Opened to salvage: the read error that ended the chain early.
    stopped_by: Option<String>,
    /// This process has left the processes sharing the store (closed).
    departed: AtomicBool,
    writer: Mutex<WriterClaims>,
}

/// The cross-process write lock, held while any commit of this process is on its way.
#[derive(Default)]
struct WriterClaims {
    held: bool,
    /// Commits being sequenced or written, and checkpoints running.
    claims: usize,
}

/// Everything commits and checkpoints change, under one lock held only for bookkeeping
/// (page writes and flushes happen outside it).
pub(crate) struct Meta {
    /// The latest sequenced state: commits build on it and are checked against it.
    pub state: Arc<State>,
    /// The latest state whose commits (and all before them) are written: what new
    /// transactions see (a writer may build on a commit whose flush is still running: its
    /// own commit comes later in the chain and is durable only with it). Pages are written
    /// after sequencing, outside the lock.
    pub visible: Arc<State>,
    /// The latest state whose commits are all durable: what snapshots (readers) see, so a
    /// power cut never takes back something a reader was shown.
    pub readable: Arc<State>,
    /// Written states not yet known durable, by sequence number (they become `readable` as
    /// flushes, this process's or another's, cover them).
    pub not_durable: BTreeMap<u64, Arc<State>>,
    /// Sequenced states not yet visible (they become so as the written prefix grows).
    pub unpublished: BTreeMap<u64, Arc<State>>,
    pub header: Header,
    pub alloc: SlotAllocator,
    /// (superseded at seq, slot): still named by a record that recovery would replay.
    pub awaiting_checkpoint: Vec<(u64, u64)>,
    /// (superseded at seq, slot): checkpointed, but a snapshot may still read it.
    pub awaiting_readers: Vec<(u64, u64)>,
    /// Open snapshots by sequence number.
    pub snapshots: BTreeMap<u64, usize>,
    /// Where the next record goes, and the end of the run reserved for it.
    pub head: u64,
    pub window_end: u64,
    pub prev_crc: u32,
    pub session: u64,
    pub commits_since_checkpoint: u64,
    pub log_bytes_since_checkpoint: u64,
    /// The reader pin this process last published (shared stores).
    pub pin: u64,
    /// Every free slot of the file is this process's to allocate (it opened the store
    /// first, or alone); a process that joined others owns only what it grew.
    pub owns_all_slots: bool,
}

/// Group-commit state: which records are written, which are durable, who is flushing.
#[derive(Default)]
struct FlushState {
    /// Highest sequence number handed out: commits up to it will be written shortly.
    sequenced: u64,
    /// Transactions holding changes that have not been written yet: likely committers.
    active_writers: usize,
    /// Commits the last flush covered: more than one means committers run concurrently.
    last_batch: u64,
    /// How long the last group-commit flush took.
    last_flush: Duration,
    written_upto: u64,
    written_ahead: BTreeSet<u64>,
    durable: u64,
    leader_active: bool,
    poisoned: Option<String>,
}

/// How long a flush leader waits at most for commits on their way: half as long as the last
/// flush took (waiting is worth it in proportion to what a flush costs), within these bounds.
const GATHER_WAIT_MIN: Duration = Duration::from_micros(40);
const GATHER_WAIT_MAX: Duration = Duration::from_micros(500);

/// When the last flush covered several commits, the next leader waits at least this long
/// for the others to come round again (they are typically a few microseconds away).
const MIN_GATHER: Duration = Duration::from_micros(40);

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // No code path panics while holding these locks; if one ever did, the data is still
    // consistent at every unlock point, so recover rather than propagate the poison.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) fn slot_offset(slot: u64, page_size: u64) -> u64 {
    SLOT_BASE + slot * page_size
}

/// A sequenced commit, ready to be written.
pub(crate) struct Sequenced {
    pub seq: u64,
    /// A jump record to write first, if the commit did not fit in the reserved window.
    pub jump: Option<(u64, Vec<u8>)>,
    /// (offset, bytes) of the commit record.
    pub record: (u64, Vec<u8>),
    pub record_slots: u64,
    /// Where each buffered page goes, in the caller's order.
    pub page_slots: Vec<u64>,
    pub embedded_pages: u64,
}

/// Where a commit goes (see `Shared::sequence`).
struct Placement {
    start: u64,
    end: u64,
    jumped: bool,
    page_slots: Vec<u64>,
    new_head: u64,
    next_slot: u64,
    next_end: u64,
}

impl Store {
    /// Create a new store file. Fails if `path` exists.
    ///
    /// The store is built under a temporary name in the same directory, flushed, and only
    /// then linked to `path` (which fails rather than replace anything): a crash during
    /// creation leaves no file at `path`, never a half-made one. A crash can leave a
    /// `.NAME.onesync-creating-*` file behind, which is safe to delete.
    pub fn create(path: impl AsRef<Path>, opts: &Options) -> Result<Store> {
        let path = path.as_ref();
        validate_options(opts)?;
        if opts.read_only {
            return Err(Error::InvalidArgument("cannot create a store read-only".into()));
        }
        if path.exists() {
            return Err(Error::AlreadyExists(path.into()));
        }
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let temp = dir.join(format!(
            ".{name}.onesync-creating-{:016x}",
            crate::nonce::random_u64()
        ));
        let file = match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&temp)
        {
            Ok(f) => f,
            Err(e) if is_permission(&e) => {
                return Err(Error::NotWritable {
                    path: path.into(),
                    source: e,
                })
            }
            Err(e) => return Err(Error::io("creating the store file", e)),
        };
        let built = lock_file(&file, path, false)
            .and_then(|()| Store::create_with_io(Box::new(FileIo::new(file)), opts))
            .and_then(|store| {
                // Built; closed before it has a name, then opened by name like any other
                // process would (so that it takes part in sharing).
                drop(store);
                match std::fs::hard_link(&temp, path) {
                    Ok(()) => Ok(()),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        Err(Error::AlreadyExists(path.into()))
                    }
                    Err(e) => Err(Error::io("linking the new store into place", e)),
                }
            });
        // Whatever happened, the temporary name goes.
        let _ = std::fs::remove_file(&temp);
        built?;
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| Error::io("flushing the directory of the new store", e))?;
        Store::open(path, opts)
    }

    /// Open an existing store file, recovering to its last durable commit.
    pub fn open(path: impl AsRef<Path>, opts: &Options) -> Result<Store> {
        let path = path.as_ref();
        let file = match OpenOptions::new().read(true).write(!opts.read_only).open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Error::NotFound(path.into())),
            Err(e) if e.raw_os_error() == Some(libc::EISDIR) => {
                return Err(Error::NotAStore(format!("{} is a directory", path.display())))
            }
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
        // Opening and closing processes take turns; the first one in recovers the store.
        let init = sharing::lock_init(&file, opts.read_only)?;
        // Not a store (or a damaged one): say why, and leave no side file next to it.
        let probe = FileIo::new(
            file.try_clone()
                .map_err(|e| Error::io("opening the store file", e))?,
        );
        let store_id = match newest_header(&probe) {
            Ok(header) => header.store_id,
            Err(_) => {
                recover(&probe, false)?;
                return Err(Error::Corrupt("both header copies fail their checksums".into()));
            }
        };
        let (sharing, arrival) = Sharing::arrive(&file, path, store_id, opts.read_only)?;
        let io: Box<dyn StorageIo> = Box::new(FileIo::new(file));
        let joined = matches!(arrival, Arrival::Joined | Arrival::ReadOnlyJoined);
        if joined {
            // Writers wait while this process reads the chain, so that it does not see a
            // checkpoint half written. (If opening fails, closing the file lets go.)
            if sharing.read_only() {
                sharing.hold_off_writers()?;
            } else {
                sharing.lock_writer()?;
            }
        }
        let opened = Store::open_inner(io, opts, Some(sharing), joined);
        if let Ok(store) = &opened {
            let shared = &store.shared;
            if let Some(s) = &shared.sharing {
                if joined {
                    s.unlock_writer();
                }
                // A read-only process pinned everything while it read; it holds no
                // snapshot yet.
                let _ = shared.set_pin(&mut lock(&shared.meta), None);
            }
        }
        drop(init);
        opened
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
        let window = window_slots(opts);
        let (blob, blob_crc) = State::default().encode_checkpoint();
        let blob_slots = (blob.len() as u64).div_ceil(page_size).max(1);
        let capacity = (opts.initial_capacity / page_size).max(blob_slots + window + 16);
        // Preallocate by writing: commits into written extents change no filesystem metadata.
        write_zeros(io.as_ref(), 0, slot_offset(capacity, page_size))?;
        io.write_at(&blob, slot_offset(0, page_size))
            .map_err(|e| Error::io("writing the first checkpoint", e))?;
        let header = Header {
            page_size: opts.page_size,
            store_id: crate::nonce::random_u64(),
            generation: 1,
            checkpoint: CheckpointRef::new(&[(0, blob_slots)], blob.len() as u64, blob_crc, 0),
            log: LogRef {
                first_slot: blob_slots,
                window_end: blob_slots + window,
                seed: crate::nonce::random_u64() as u32,
            },
        };
        for copy in 0..2 {
            io.write_at(&header.encode(), copy * HEADER_BLOCK)
                .map_err(|e| Error::io("writing the header", e))?;
        }
        io.sync_data()
            .map_err(|e| Error::io("flushing the new store", e))?;
        Store::open_with_io(io, opts)
    }

    /// Open a store on any medium, recovering it. The medium is this process's alone.
    pub fn open_with_io(io: Box<dyn StorageIo>, opts: &Options) -> Result<Store> {
        Store::open_inner(io, opts, None, false)
    }

    /// `joined`: other processes have the store open; follow their chain, repair nothing,
    /// own no free slot (they may free any of them).
    fn open_inner(
        io: Box<dyn StorageIo>,
        opts: &Options,
        sharing: Option<Sharing>,
        joined: bool,
    ) -> Result<Store> {
        if opts.salvage && !opts.read_only {
            return Err(Error::InvalidArgument(
                "salvaging opens a store read-only: set Options::read_only too".into(),
            ));
        }
        let mut recovered = recover(io.as_ref(), opts.salvage)?;
        let stopped_by = recovered.stopped_by.take();
        if joined {
            recovered.alloc = SlotAllocator::none_free(recovered.alloc.capacity());
            recovered.awaiting_checkpoint.clear();
        }
        let page_size = recovered.header.page_size as u64;
        let counters = Counters::default();
        if recovered.records_replayed > 0 {
            bump(&counters.recoveries, 1);
            bump(&counters.records_replayed, recovered.records_replayed);
        }
        let last = recovered.state.seq;
        let next_file_id = recovered.state.next_file_id.max(1);
        if !recovered.copies_agree && !opts.read_only && !joined {
            // A crash fell between the two header writes of a checkpoint (or a copy is
            // damaged): restore the duplicate before any slot is reused.
            let encoded = recovered.header.encode();
            for copy in [0, HEADER_BLOCK] {
                io.write_at(&encoded, copy)
                    .map_err(|e| Error::io("repairing a header copy", e))?;
            }
            io.sync_data()
                .map_err(|e| Error::io("flushing the repaired header", e))?;
        }
        if recovered.records_replayed > 0 {
            // The records recovery read may sit in the page cache only (their writer died
            // before its flush): make them durable before any reader is shown them.
            io.sync_data()
                .map_err(|e| Error::io("flushing the commits recovery found", e))?;
        }
        let state = Arc::new(recovered.state);
        let meta = Meta {
            visible: state.clone(),
            readable: state.clone(),
            not_durable: BTreeMap::new(),
            unpublished: BTreeMap::new(),
            state,
            header: recovered.header,
            alloc: recovered.alloc,
            awaiting_checkpoint: recovered
                .awaiting_checkpoint
                .into_iter()
                .map(|s| (last, s))
                .collect(),
            awaiting_readers: Vec::new(),
            snapshots: BTreeMap::new(),
            head: recovered.head,
            window_end: recovered.window_end,
            prev_crc: recovered.prev_crc,
            session: crate::nonce::random_u64(),
            commits_since_checkpoint: recovered.records_replayed,
            log_bytes_since_checkpoint: recovered.log_bytes,
            owns_all_slots: !joined,
            // A read-only process arrives pinning everything (see `Sharing::arrive`).
            pin: if sharing.as_ref().is_some_and(|s| s.read_only()) {
                0
            } else {
                NO_PIN
            },
        };
        if let (Some(s), false) = (&sharing, joined) {
            s.publish_progress(meta.header.generation, last)?;
        }
        let flush = FlushState {
            sequenced: last,
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
                durable_changed: Condvar::new(),
                written_changed: Condvar::new(),
                counters,
                next_file_id: AtomicU32::new(next_file_id),
                writer: Mutex::new(WriterClaims::default()),
                sharing,
                stopped_by,
                departed: AtomicBool::new(false),
            }),
        })
    }

    /// Opened with `Options::salvage`: the read error that ended the chain early, if one
    /// did (the store then shows the commits before it).
    pub fn salvage_stopped_by(&self) -> Option<&str> {
        self.shared.stopped_by.as_deref()
    }

    pub fn page_size(&self) -> usize {
        self.shared.page_size as usize
    }

    /// A read-only view of the latest committed state. It sees exactly one state, whatever
    /// commits afterwards; the slots it reads are not reused while it lives. On a store
    /// other processes share, a failure to read their latest commits leaves the view at the
    /// latest state this process knows; [`Store::try_snapshot`] reports it instead.
    ///
    /// It shows only durable commits: a commit whose flush is still running (this process's
    /// or another's) is not shown until the flush ends, so a power cut never takes back
    /// anything a reader saw.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot::latest(self.shared.clone(), View::Durable)
            .unwrap_or_else(|_| Snapshot::new(self.shared.clone(), View::Durable))
    }

    /// A view of the latest durable state, of this process or any other.
    pub fn try_snapshot(&self) -> Result<Snapshot> {
        Snapshot::latest(self.shared.clone(), View::Durable)
    }

    /// A view of the latest *written* state, which may include commits whose flush is still
    /// running: only for a caller that will commit a transaction begun on it (its commit,
    /// later in the chain, becomes durable only with them), never to show a reader.
    pub fn try_latest_snapshot(&self) -> Result<Snapshot> {
        Snapshot::latest(self.shared.clone(), View::Written)
    }

    /// Say that a writer is waiting for its turn (e.g. for SQLite's write lock, held by
    /// another connection of this process) and will commit soon: a flush leader then waits
    /// for it briefly, as for a transaction holding changes. Ends when the guard drops.
    pub fn writer_waiting(&self) -> WaitingWriter {
        self.shared.note_active_writer(true);
        WaitingWriter {
            shared: self.shared.clone(),
        }
    }

    /// Begin a transaction on the latest written state (see [`Store::try_latest_snapshot`]).
    pub fn begin(&self) -> Transaction {
        let base = Snapshot::latest(self.shared.clone(), View::Written)
            .unwrap_or_else(|_| Snapshot::new(self.shared.clone(), View::Written));
        Transaction::new(base)
    }

    /// Write a mapping checkpoint now (also makes every sequenced commit durable).
    pub fn checkpoint(&self) -> Result<()> {
        if self.shared.opts.read_only {
            return Err(Error::ReadOnly);
        }
        let mut meta = lock(&self.shared.meta);
        self.shared.checkpoint_locked(&mut meta)
    }

    /// Checkpoint if anything was committed since the last one, so the next open replays
    /// nothing, and leave the processes sharing the store. Dropping a store without `close`
    /// is safe too; the next open recovers.
    ///
    /// Only the last read-write process to close checkpoints: one that leaves others behind
    /// (a reader, say) owns no free slots to write a checkpoint into, and would grow the
    /// file for a checkpoint the others make anyway.
    pub fn close(self) -> Result<()> {
        let shared = &self.shared;
        let checkpoint = || {
            let mut meta = lock(&shared.meta);
            shared.with_writer(&mut meta, |meta| {
                if meta.commits_since_checkpoint > 0 {
                    shared.checkpoint_locked(meta)?;
                }
                Ok(())
            })
        };
        shared.departed.store(true, Ordering::Relaxed);
        if shared.opts.read_only {
            if let Some(s) = &shared.sharing {
                s.depart(false);
            }
            return Ok(());
        }
        let Some(s) = &shared.sharing else {
            return checkpoint();
        };
        let init = s.lock_init();
        let last = init.is_ok() && s.alone();
        let checkpointed = if last {
            // Alone now: a process that joined owns only the slots it grew; take them all,
            // as recovery would, rather than grow the file for the checkpoint.
            shared.own_every_free_slot().and_then(|()| checkpoint())
        } else {
            Ok(())
        };
        if init.is_ok() {
            s.depart(last);
        }
        checkpointed
    }

    /// Try to take the exclusive lock `key` that other processes sharing this store see
    /// (the VFS: SQLite's write lock on one database). Always granted on an unshared store.
    /// Within one process the caller keeps its own account: the lock is the process's.
    pub fn try_lock_for_process(&self, key: u64) -> Result<bool> {
        match &self.shared.sharing {
            Some(s) => s.try_user_lock(key),
            None => Ok(true),
        }
    }

    pub fn unlock_for_process(&self, key: u64) {
        if let Some(s) = &self.shared.sharing {
            s.user_unlock(key);
        }
    }

    /// Whether another process holds the lock `key`.
    pub fn locked_by_other_process(&self, key: u64) -> Result<bool> {
        match &self.shared.sharing {
            Some(s) => s.user_locked_elsewhere(key),
            None => Ok(false),
        }
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
            jumps: get(&c.jumps),
            bytes_written: get(&c.bytes_written),
            write_calls: get(&c.write_calls),
            bytes_preallocated: get(&c.bytes_preallocated),
            flushes: get(&c.flushes),
            flush_micros: get(&c.flush_micros),
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
}

fn window_slots(opts: &Options) -> u64 {
    (opts.window_bytes / opts.page_size as u64).max(2)
}

fn validate_options(opts: &Options) -> Result<()> {
    if !valid_page_size(opts.page_size) {
        return Err(Error::InvalidArgument(format!(
            "page size {} is not a power of two from 512 to 65536",
            opts.page_size
        )));
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

/// Pages a commit changed only through overlays carried in its record.
fn embedded_pages(ops: &[Op]) -> u64 {
    let mut whole = BTreeSet::new();
    let mut patched = BTreeSet::new();
    for op in ops {
        match op {
            Op::Page { file, page, .. } => whole.insert((*file, *page)),
            Op::Patch { file, page, .. } => patched.insert((*file, *page)),
            _ => false,
        };
    }
    patched.difference(&whole).count() as u64
}

impl Drop for Shared {
    /// Dropped without `close` (safe: the next open recovers): still leave the processes
    /// sharing the store, so the last one removes the side file.
    fn drop(&mut self) {
        if self.departed.load(Ordering::Relaxed) {
            return;
        }
        if let Some(s) = &self.sharing {
            if let Ok(_init) = s.lock_init() {
                s.depart(s.alone());
            }
        }
    }
}

impl Shared {
    /// Alone with the store (holding `INIT`, no other process has it open): if this process
    /// joined others, rebuild which slots are free from the file, as the first process's
    /// recovery does, so that it owns every free slot.
    fn own_every_free_slot(&self) -> Result<()> {
        let mut meta = lock(&self.meta);
        if meta.owns_all_slots || !meta.snapshots.is_empty() {
            return Ok(());
        }
        let recovered = recover(self.io.as_ref(), false)?;
        if recovered.state.seq != meta.state.seq {
            // Someone's commit this process has not read: leave the space as it is.
            return Ok(());
        }
        let last = recovered.state.seq;
        meta.header = recovered.header;
        meta.alloc = recovered.alloc;
        meta.awaiting_checkpoint = recovered
            .awaiting_checkpoint
            .into_iter()
            .map(|slot| (last, slot))
            .collect();
        meta.awaiting_readers.clear();
        meta.head = recovered.head;
        meta.window_end = recovered.window_end;
        meta.prev_crc = recovered.prev_crc;
        meta.owns_all_slots = true;
        Ok(())
    }

    /// Give back checkpointed slots that no snapshot, of this process or another, can
    /// read any more.
    pub(crate) fn release_unread(&self, meta: &mut Meta) {
        if meta.awaiting_readers.is_empty() {
            return;
        }
        let own = meta.snapshots.keys().next().copied().unwrap_or(NO_PIN);
        // Unreadable pins keep everything (a slot held too long costs only space).
        let others = match &self.sharing {
            Some(s) => s.others_oldest_pin().unwrap_or(0),
            None => NO_PIN,
        };
        let oldest_reader = own.min(others);
        let Meta {
            awaiting_readers,
            alloc,
            ..
        } = meta;
        awaiting_readers.retain(|&(superseded_at, slot)| {
            // A reader at seq s reads the slot only if it was superseded after s.
            let still_read = oldest_reader < superseded_at;
            if !still_read {
                alloc.release(slot, 1);
            }
            still_read
        });
    }

    /// Publish the oldest commit this process may read: its oldest snapshot, or `also`.
    pub(crate) fn set_pin(&self, meta: &mut Meta, also: Option<u64>) -> Result<()> {
        let Some(s) = &self.sharing else {
            return Ok(());
        };
        let oldest = meta.snapshots.keys().next().copied();
        let want = oldest.into_iter().chain(also).min().unwrap_or(NO_PIN);
        if want != meta.pin {
            s.publish_pin(want)?;
            meta.pin = want;
        }
        Ok(())
    }

    /// Run `f` holding the cross-process write lock: taken (and the chain caught up with)
    /// if this process does not hold it already.
    pub(crate) fn with_writer<T>(
        &self,
        meta: &mut Meta,
        f: impl FnOnce(&mut Meta) -> Result<T>,
    ) -> Result<T> {
        let newly = self.claim_writer()?;
        let result = if newly {
            self.catch_up(meta, true).and_then(|()| f(meta))
        } else {
            f(meta)
        };
        self.release_writer_claim();
        result
    }

    /// Count one more commit or checkpoint of this process on its way, taking the
    /// cross-process write lock if it is not held; returns whether it was taken now (then
    /// the caller must catch up before sequencing anything).
    pub(crate) fn claim_writer(&self) -> Result<bool> {
        let Some(s) = &self.sharing else {
            return Ok(false);
        };
        let mut w = lock(&self.writer);
        if w.held {
            w.claims += 1;
            return Ok(false);
        }
        s.lock_writer()?;
        w.held = true;
        w.claims += 1;
        Ok(true)
    }

    /// The commit or checkpoint is written (or failed); the last one lets the lock go,
    /// after saying how far the chain goes.
    pub(crate) fn release_writer_claim(&self) {
        let Some(s) = &self.sharing else {
            return;
        };
        let mut w = lock(&self.writer);
        w.claims = w.claims.saturating_sub(1);
        if w.claims == 0 && w.held {
            s.unlock_writer();
            w.held = false;
        }
    }

    /// Follow the commits other processes appended (and their checkpoints) into `meta`.
    /// Without the write lock, a record being written ends the chain for now.
    pub(crate) fn catch_up(&self, meta: &mut Meta, holding_writer: bool) -> Result<()> {
        let Some(s) = &self.sharing else {
            return Ok(());
        };
        if !holding_writer && lock(&self.writer).held {
            // This process is the writer: nobody else has written since it caught up.
            return Ok(());
        }
        // Pin what this process knows before looking, so nothing after it is reused
        // meanwhile (or, if it already was, a newer checkpoint shows it).
        // (The pin stays this low until the caller's next snapshot change raises it.)
        let known = meta.state.seq;
        self.set_pin(meta, Some(known))?;
        self.catch_up_pinned(s, meta, holding_writer)
    }

    fn catch_up_pinned(&self, s: &Sharing, meta: &mut Meta, holding_writer: bool) -> Result<()> {
        self.follow_chain(s, meta, holding_writer)?;
        if !meta.not_durable.is_empty() {
            // Others' commits this process read may not be durable yet: show readers what
            // some process has seen flushed.
            let durable = match s.others_durable()? {
                Some(durable) => durable,
                None => {
                    // Nobody to ask: make what this process read durable itself (a flush
                    // works on a read-only descriptor, and finds nothing to do where the
                    // writer already flushed).
                    self.io
                        .sync_data()
                        .map_err(|e| Error::io("flushing the commits this process read", e))?;
                    meta.state.seq
                }
            };
            let durable = durable.max(lock(&self.flush).durable);
            self.promote_durable(meta, durable);
        }
        Ok(())
    }

    fn follow_chain(&self, s: &Sharing, meta: &mut Meta, holding_writer: bool) -> Result<()> {
        let page_size = self.page_size;
        let io = self.io.as_ref();
        let progress = s.progress()?;
        // A reader may trust the side file: writers publish progress before they write a
        // record, and a checkpoint before it writes its header. A writer must not: a
        // process may have died (or failed) between writing and publishing, and a record
        // tagged with a stale generation after a newer checkpoint is lost to recovery. So
        // a writer always reads the header and the record at the chain's head.
        let trust_side_file = !holding_writer || self.opts.sabotage == Some(Sabotage::CheckpointPublication);
        if let Some((generation, seq)) = progress.filter(|_| trust_side_file) {
            if generation == meta.header.generation && seq <= meta.state.seq {
                return Ok(());
            }
        }
        // The file's length costs a stat, which on ext4 cost a committer more than all the
        // rest of this (about 80 µs a commit). The file only grows, and another process grows
        // it only before commits it publishes, so the length this process knows will do
        // unless the side file shows another process at work (or there is none to show it)
        // or the header moved.
        let others_moved = match progress {
            Some((generation, seq)) => generation != meta.header.generation || seq > meta.state.seq,
            None => true,
        };
        let mut capacity = if others_moved {
            self.file_capacity()?
        } else {
            meta.alloc.capacity()
        };
        let (header, copies_agree) = header_copies(io)?;
        if header.generation != meta.header.generation {
            capacity = self.file_capacity()?;
            if holding_writer && !copies_agree {
                // The process that wrote this checkpoint died before making it durable and
                // duplicating its header: finish that before writing anything after it.
                self.io
                    .sync_data()
                    .map_err(|e| Error::io("flushing another process's checkpoint", e))?;
                self.write_counted(
                    &header.encode(),
                    Header::copy_offset(header.generation + 1),
                    "repairing a header copy",
                )?;
                self.io
                    .sync_data()
                    .map_err(|e| Error::io("flushing a repaired header copy", e))?;
                bump(&self.counters.flushes, 2);
            }
            if header.generation < meta.header.generation {
                if holding_writer {
                    return Err(Error::Corrupt("the store's header went back a generation".into()));
                }
                // A checkpoint's header half rewritten: look again next time.
                return Ok(());
            }
            let covered = header.checkpoint.seq;
            if covered > meta.state.seq {
                // Behind the checkpoint: the records before it may be gone; load it. A
                // checkpoint is written only once everything it covers is durable.
                meta.state = Arc::new(load_checkpoint(io, &header, capacity)?);
                meta.readable = meta.state.clone();
                meta.not_durable.clear();
            } else if covered < meta.state.seq {
                return Err(Error::Corrupt(format!(
                    "checkpoint generation {} covers commit {covered}, but this process has read commit {}",
                    header.generation, meta.state.seq
                )));
            }
            meta.header = header;
            meta.head = header.log.first_slot;
            meta.window_end = header.log.window_end;
            meta.prev_crc = header.log.seed;
            meta.commits_since_checkpoint = 0;
            meta.log_bytes_since_checkpoint = 0;
            // This process's superseded slots are covered by that checkpoint.
            let covered_slots = std::mem::take(&mut meta.awaiting_checkpoint);
            meta.awaiting_readers.extend(covered_slots);
            self.release_unread(meta);
        }
        // Slots past the length this process knew belong to others, but it may be the one to
        // free some of them (the extents of another process's checkpoint it replaces).
        meta.alloc.extend_used(capacity);
        let mut superseded_elsewhere = Vec::new();
        while let Some((record, crc, len)) = record_at(io, meta.head, page_size, capacity)? {
            let in_sequence = record.epoch == meta.header.generation
                && record.prev_crc == meta.prev_crc
                && record.seq == meta.state.seq + 1;
            let in_file = record.next_slot < record.window_end
                && record.window_end <= capacity
                && record.ops.iter().all(|op| match op {
                    Op::Page { slot, .. } => *slot == crate::format::NO_SLOT || *slot < capacity,
                    _ => true,
                });
            if !in_sequence || !in_file {
                break;
            }
            if record.kind == RecordKind::Commit {
                if !pages_intact(io, &record, page_size, capacity)? {
                    break;
                }
                let mut next = (*meta.state).clone();
                // The process that wrote the record frees what it superseded, not this one.
                next.apply(&record.ops, record.seq, page_size, &mut superseded_elsewhere)?;
                superseded_elsewhere.clear();
                meta.state = Arc::new(next);
                meta.not_durable.insert(record.seq, meta.state.clone());
                meta.commits_since_checkpoint += 1;
            }
            meta.log_bytes_since_checkpoint += len.div_ceil(page_size) * page_size;
            meta.prev_crc = crc;
            meta.head = record.next_slot;
            meta.window_end = record.window_end;
        }
        meta.visible = meta.state.clone();
        let seq = meta.state.seq;
        {
            let mut f = lock(&self.flush);
            f.sequenced = f.sequenced.max(seq);
            f.written_upto = f.written_upto.max(seq);
        }
        Ok(())
    }

    /// How many slots the file holds now.
    fn file_capacity(&self) -> Result<u64> {
        let len = self
            .io
            .size()
            .map_err(|e| Error::io("reading the store's length", e))?;
        Ok(len.saturating_sub(SLOT_BASE) / self.page_size)
    }

    pub fn check_poison(&self) -> Result<()> {
        match &lock(&self.flush).poisoned {
            Some(why) => Err(Error::Poisoned(why.clone())),
            None => Ok(()),
        }
    }

    pub fn poison(&self, why: String) {
        let mut f = lock(&self.flush);
        if f.poisoned.is_none() {
            f.poisoned = Some(why);
        }
        self.durable_changed.notify_all();
        self.written_changed.notify_all();
    }

    pub fn write_counted(&self, data: &[u8], offset: u64, during: &'static str) -> Result<()> {
        self.io.write_at(data, offset).map_err(|e| Error::io(during, e))?;
        bump(&self.counters.bytes_written, data.len() as u64);
        bump(&self.counters.write_calls, 1);
        Ok(())
    }

    /// Free slots that commits adding pages must leave, so that on a full disk commits
    /// that shrink the store, and the checkpoints that free space, still find room.
    fn reserve(&self, meta: &Meta) -> u64 {
        let pages: u64 = meta.state.files.values().map(|f| f.pages.len() as u64 + 4).sum();
        // About what a checkpoint of the current mapping takes.
        8 + (pages * 24).div_ceil(self.page_size)
    }

    /// After a commit took slots for pages: keep the reserve, growing the file if need be.
    fn keep_reserve(&self, meta: &mut Meta) -> Result<()> {
        let reserve = self.reserve(meta);
        if meta.alloc.free_count() < reserve {
            self.reclaim(meta)?;
        }
        if meta.alloc.free_count() < reserve {
            self.grow(meta, reserve)?;
        }
        Ok(())
    }

    /// Take one free slot for a page (one a large transaction spills early, or one that did
    /// not fit next to its commit record), checkpointing or growing the file if need be.
    pub fn alloc_slot(&self, meta: &mut Meta) -> Result<u64> {
        if meta.alloc.free_count() > self.reserve(meta) {
            if let Some(slot) = meta.alloc.take_run(1) {
                return Ok(slot);
            }
        }
        if self.reclaim(meta)? {
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

    /// Slots for a checkpoint of `n` slots: one run if there is one, else the fewest runs
    /// (longest first) the header can list, else grow the file.
    fn alloc_extents(&self, meta: &mut Meta, n: u64) -> Result<Vec<(u64, u64)>> {
        if let Some(first) = meta.alloc.take_run(n) {
            return Ok(vec![(first, n)]);
        }
        if meta.alloc.free_count() >= n {
            let mut extents = Vec::new();
            let mut missing = n;
            while missing > 0 && extents.len() < MAX_CHECKPOINT_EXTENTS {
                let Some((first, got)) = meta.alloc.take_largest(missing) else {
                    break;
                };
                extents.push((first, got));
                missing -= got;
            }
            if missing == 0 {
                return Ok(extents);
            }
            for (first, got) in extents {
                meta.alloc.release(first, got);
            }
        }
        Ok(vec![(self.alloc_run(meta, n)?, n)])
    }

    /// Reserve a run for the records and pages that follow: a full window if one is free,
    /// else the largest free run of at least `min` slots, else grow.
    fn new_window(&self, meta: &mut Meta, min: u64) -> Result<(u64, u64)> {
        let want = window_slots(&self.opts).max(min);
        for attempt in 0..2 {
            if let Some(first) = meta.alloc.take_run(want) {
                return Ok((first, first + want));
            }
            if meta.alloc.largest_run() >= min {
                if let Some((first, len)) = meta.alloc.take_largest(want) {
                    return Ok((first, first + len));
                }
            }
            if attempt == 0 && !self.reclaim(meta)? {
                break;
            }
        }
        let first = self.alloc_run(meta, want)?;
        Ok((first, first + want))
    }

    /// Before growing the file, free what a checkpoint would free. Returns whether it ran.
    fn reclaim(&self, meta: &mut Meta) -> Result<bool> {
        if meta.awaiting_checkpoint.is_empty() {
            return Ok(false);
        }
        self.checkpoint_locked(meta)?;
        Ok(true)
    }

    /// Extend the file by writing zeros, in a large step, and flush the new size once.
    fn grow(&self, meta: &mut Meta, at_least: u64) -> Result<()> {
        self.with_writer(meta, |meta| self.grow_holding_writer(meta, at_least))
    }

    fn grow_holding_writer(&self, meta: &mut Meta, at_least: u64) -> Result<()> {
        let mut old = meta.alloc.capacity();
        if self.sharing.is_some() {
            // Other processes grow the file too: the new slots start at its end now.
            let len = self
                .io
                .size()
                .map_err(|e| Error::io("reading the store's length", e))?;
            let now = len.saturating_sub(SLOT_BASE) / self.page_size;
            if now > old {
                meta.alloc.extend_used(now);
                old = now;
            }
        }
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

    /// Give a commit its sequence number and its place in the chain, and make it the
    /// latest state. `buffered` lists the `Page` operations (by index) whose pages the
    /// caller holds; `Sequenced::page_slots` says where each goes. Nothing is written here.
    ///
    /// Placement, best first: record and pages contiguous at the head of the reserved
    /// window (one write); the record at the head and the pages in free slots elsewhere (on
    /// a fragmented store); a jump record at the head leading to a fresh window, when the
    /// record itself does not fit.
    pub fn sequence(&self, meta: &mut Meta, mut ops: Vec<Op>, buffered: &[usize]) -> Result<Sequenced> {
        self.check_poison()?;
        let interval = self.opts.checkpoint_interval;
        if (interval > 0 && meta.commits_since_checkpoint >= interval)
            || meta.log_bytes_since_checkpoint >= self.opts.log_capacity
        {
            // Checkpoints by policy are optional: with no room for one, commit anyway.
            match self.checkpoint_locked(meta) {
                Ok(()) | Err(Error::NoSpace) => {}
                Err(e) => return Err(e),
            }
        }
        let seq = meta.state.seq + 1;
        let page_size = self.page_size;
        let record_slots = Record::encoded_len_of(&ops).div_ceil(page_size);
        let pages = buffered.len() as u64;
        // Everything allocated here goes back if a later step fails.
        let mut taken: Vec<(u64, u64)> = Vec::new();
        let placed = (|| -> Result<Placement> {
            let (start, end, jumped) = if meta.head + record_slots <= meta.window_end {
                (meta.head, meta.window_end, false)
            } else {
                let (s, e) = self.new_window(meta, record_slots + pages + 1)?;
                taken.push((s, e - s));
                (s, e, true)
            };
            let page_slots: Vec<u64> = if start + record_slots + pages < end {
                (0..pages).map(|i| start + record_slots + i).collect()
            } else {
                let mut slots = Vec::with_capacity(pages as usize);
                for _ in 0..pages {
                    let slot = self.alloc_slot(meta)?;
                    taken.push((slot, 1));
                    slots.push(slot);
                }
                slots
            };
            let contiguous = page_slots.first() == Some(&(start + record_slots));
            let new_head = start + record_slots + if contiguous { pages } else { 0 };
            let (next_slot, next_end) = if new_head < end {
                (new_head, end)
            } else {
                let (s, e) = self.new_window(meta, 1)?;
                taken.push((s, e - s));
                (s, e)
            };
            Ok(Placement {
                start,
                end,
                jumped,
                page_slots,
                new_head,
                next_slot,
                next_end,
            })
        })();
        // Commits that add pages keep the reserve; others may use it. Then the new state.
        let prepared = placed.and_then(|placement| {
            if pages > 0 {
                self.keep_reserve(meta)?;
            }
            for (&index, &slot) in buffered.iter().zip(&placement.page_slots) {
                if let Some(Op::Page { slot: s, .. }) = ops.get_mut(index) {
                    *s = slot;
                }
            }
            let mut next_state = (*meta.state).clone();
            let mut superseded = Vec::new();
            next_state.apply(&ops, seq, page_size, &mut superseded)?;
            // Other processes learn that the chain is about to reach `seq` before its record
            // is written (they verify what they read); the next writer then needs to read
            // the chain only when this says there is something new.
            if let Some(s) = &self.sharing {
                s.publish_progress(meta.header.generation, seq)?;
            }
            Ok((placement, next_state, superseded))
        });
        let (placement, next_state, superseded) = match prepared {
            Ok(prepared) => prepared,
            Err(e) => {
                for (s, n) in taken {
                    meta.alloc.release(s, n);
                }
                return Err(e);
            }
        };
        // From here on nothing fails: the commit is sequenced.
        let Placement {
            start,
            end,
            jumped,
            page_slots,
            new_head,
            next_slot,
            next_end,
        } = placement;
        let mut prev_crc = meta.prev_crc;
        let epoch = meta.header.generation;
        let mut jump_write = None;
        if jumped {
            let jump = Record {
                kind: RecordKind::Jump,
                seq,
                session: meta.session,
                epoch,
                prev_crc,
                next_slot: start,
                window_end: end,
                ops: Vec::new(),
            };
            let (bytes, crc) = jump.encode();
            jump_write = Some((slot_offset(meta.head, page_size), bytes));
            meta.awaiting_checkpoint.push((seq, meta.head));
            if meta.head + 1 < meta.window_end {
                meta.alloc.release(meta.head + 1, meta.window_end - meta.head - 1);
            }
            prev_crc = crc;
            meta.log_bytes_since_checkpoint += page_size;
            bump(&self.counters.jumps, 1);
        }
        if next_slot != new_head && new_head < end {
            meta.alloc.release(new_head, end - new_head);
        }
        let embedded = embedded_pages(&ops);
        let record = Record {
            kind: RecordKind::Commit,
            seq,
            session: meta.session,
            epoch,
            prev_crc,
            next_slot,
            window_end: next_end,
            ops,
        };
        let (bytes, crc) = record.encode();
        meta.awaiting_checkpoint
            .extend((start..start + record_slots).map(|s| (seq, s)));
        meta.awaiting_checkpoint
            .extend(superseded.into_iter().map(|s| (seq, s)));
        meta.head = next_slot;
        meta.window_end = next_end;
        meta.prev_crc = crc;
        meta.state = Arc::new(next_state);
        meta.unpublished.insert(seq, meta.state.clone());
        lock(&self.flush).sequenced = seq;
        meta.commits_since_checkpoint += 1;
        meta.log_bytes_since_checkpoint += record_slots * page_size;
        Ok(Sequenced {
            seq,
            jump: jump_write,
            record: (slot_offset(start, page_size), bytes),
            record_slots,
            page_slots,
            embedded_pages: embedded,
        })
    }

    /// Wait until every sequenced record has been written (so their slots can be freed).
    fn wait_all_written(&self, last_seq: u64) -> Result<()> {
        let mut f = lock(&self.flush);
        loop {
            if let Some(why) = &f.poisoned {
                return Err(Error::Poisoned(why.clone()));
            }
            if f.written_upto >= last_seq {
                return Ok(());
            }
            f = self.written_changed.wait(f).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Flush now if commits up to `seq` are written but not all durable yet.
    fn make_durable(&self, meta: &mut Meta, seq: u64) -> Result<()> {
        if lock(&self.flush).durable >= seq {
            return Ok(());
        }
        if let Err(e) = self.io.sync_data() {
            self.poison(format!("fdatasync failed: {e}"));
            return Err(Error::io("flushing commits before a checkpoint", e));
        }
        bump(&self.counters.flushes, 1);
        self.note_durable(meta, seq);
        Ok(())
    }

    /// Write the whole mapping to free slots and point the header at it, with one flush.
    /// Then slots superseded before it can be reused. The caller holds the meta lock, so no
    /// commit is sequenced meanwhile.
    ///
    /// The header goes to the copy its generation selects (the other durably holds the
    /// previous generation) and is flushed; then it is duplicated into the other copy and
    /// flushed again, and only then are slots freed. A crash leaves an intact copy of the
    /// newest durable header, and damage to either copy later costs nothing.
    pub fn checkpoint_locked(&self, meta: &mut Meta) -> Result<()> {
        self.with_writer(meta, |meta| self.checkpoint_holding_writer(meta))
    }

    fn checkpoint_holding_writer(&self, meta: &mut Meta) -> Result<()> {
        let last_seq = meta.state.seq;
        self.wait_all_written(last_seq)?;
        // The checkpoint names pages of every commit so far. A power cut may persist the
        // writes since the last flush in any order, so those pages must be durable before
        // the header that names them can be.
        self.make_durable(meta, last_seq)?;
        let (blob, blob_crc) = meta.state.encode_checkpoint();
        let blob_slots = (blob.len() as u64).div_ceil(self.page_size).max(1);
        let extents = self.alloc_extents(meta, blob_slots)?;
        let header = Header {
            generation: meta.header.generation + 1,
            checkpoint: CheckpointRef::new(&extents, blob.len() as u64, blob_crc, last_seq),
            log: LogRef {
                first_slot: meta.head,
                window_end: meta.window_end,
                seed: crate::nonce::random_u64() as u32,
            },
            ..meta.header
        };
        let encoded = header.encode();
        let mut written = Ok(());
        let mut piece = blob.as_slice();
        for &(first, n) in &extents {
            let take = piece.len().min((n * self.page_size) as usize);
            let (now, rest) = piece.split_at(take);
            written = written.and_then(|()| {
                self.write_counted(now, slot_offset(first, self.page_size), "writing a checkpoint")
            });
            piece = rest;
        }
        let written = written.and_then(|()| {
            self.write_counted(
                &encoded,
                Header::copy_offset(header.generation),
                "writing the header",
            )
        });
        if let Err(e) = written {
            // A torn copy is harmless: the other one durably holds the previous header.
            for (first, n) in extents {
                meta.alloc.release(first, n);
            }
            return Err(e);
        }
        if let Err(e) = self.io.sync_data() {
            self.poison(format!("flushing a checkpoint failed: {e}"));
            return Err(Error::io("flushing a checkpoint", e));
        }
        bump(&self.counters.flushes, 1);
        bump(&self.counters.checkpoints, 1);
        self.note_durable(meta, last_seq);
        // Make the duplicate durable before any slot the old checkpoint needed is reused:
        // then damage to either copy later can never roll back onto reused slots.
        let other = Header::copy_offset(header.generation + 1);
        let duplicated = self
            .write_counted(&encoded, other, "writing the second header copy")
            .and_then(|()| {
                self.io
                    .sync_data()
                    .map_err(|e| Error::io("flushing the second header copy", e))
            });
        if let Err(e) = duplicated {
            self.poison(format!("duplicating the header failed: {e}"));
            return Err(e);
        }
        bump(&self.counters.flushes, 1);
        let old = meta.header;
        for &(first, n) in old.checkpoint.extents() {
            if self.sharing.is_some() {
                // Another process may be loading the old checkpoint right now: it pins a
                // commit before this one while it does.
                meta.awaiting_readers
                    .extend((first..first + n).map(|slot| (last_seq, slot)));
            } else {
                meta.alloc.release(first, n);
            }
        }
        meta.header = header;
        if let Some(s) = &self.sharing {
            // Under the write lock still: others see the new generation before any record.
            // Unpublished, another writer could extend the old chain: stop here instead.
            if let Err(e) = s.publish_progress(header.generation, last_seq) {
                self.poison(format!("publishing a checkpoint to other processes failed: {e}"));
                return Err(e);
            }
        }
        meta.prev_crc = header.log.seed;
        meta.commits_since_checkpoint = 0;
        meta.log_bytes_since_checkpoint = 0;
        let covered = std::mem::take(&mut meta.awaiting_checkpoint);
        meta.awaiting_readers.extend(covered);
        self.release_unread(meta);
        Ok(())
    }

    /// A transaction began holding changes (`true`) or stopped (`false`: written, aborted or
    /// failed).
    pub fn note_active_writer(&self, began: bool) {
        let mut f = lock(&self.flush);
        if began {
            f.active_writers += 1;
        } else {
            f.active_writers = f.active_writers.saturating_sub(1);
            self.written_changed.notify_all();
        }
    }

    /// Note that commit `seq` is written: flushes may now cover it, and once every earlier
    /// commit is written too, new snapshots see it.
    pub fn mark_written(&self, seq: u64) {
        let written_upto = {
            let mut f = lock(&self.flush);
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
                self.written_changed.notify_all();
            } else if seq > f.written_upto {
                f.written_ahead.insert(seq);
            }
            f.written_upto
        };
        // Publish every state up to the written prefix (another committer may already have).
        let mut meta = lock(&self.meta);
        while let Some(entry) = meta.unpublished.first_entry() {
            if *entry.key() > written_upto {
                break;
            }
            let (seq, state) = entry.remove_entry();
            meta.visible = state.clone();
            meta.not_durable.insert(seq, state);
        }
        // A flush may have covered it already (a leader flushes what is written).
        let durable = lock(&self.flush).durable;
        self.promote_durable(&mut meta, durable);
    }

    /// Show readers every written state up to `durable`.
    pub(crate) fn promote_durable(&self, meta: &mut Meta, durable: u64) {
        while let Some(entry) = meta.not_durable.first_entry() {
            if *entry.key() > durable {
                break;
            }
            meta.readable = entry.remove();
        }
    }

    /// After a flush of this process covered commits up to `seq`: mark them durable, show
    /// them to readers, tell other processes, wake waiters. Holding the meta lock (taken
    /// before the flush lock, as everywhere).
    fn note_durable(&self, meta: &mut Meta, seq: u64) {
        let mut f = lock(&self.flush);
        f.durable = f.durable.max(seq);
        let durable = f.durable;
        self.promote_durable(meta, durable);
        if let Some(s) = &self.sharing {
            // Readers of other processes show what this says is durable; if it cannot be
            // said, they show less.
            let _ = s.publish_durable(durable);
        }
        self.durable_changed.notify_all();
    }

    /// Group commit: return once a flush covers `seq`. One waiter at a time flushes for
    /// every commit written so far.
    pub fn wait_durable(&self, seq: u64) -> Result<()> {
        let mut f = lock(&self.flush);
        loop {
            if f.durable >= seq {
                return Ok(());
            }
            if let Some(why) = &f.poisoned {
                return Err(Error::Poisoned(why.clone()));
            }
            if !f.leader_active && f.written_upto >= seq {
                f.leader_active = true;
                // Let commits that are on their way (sequenced, or transactions holding
                // changes) land so this flush covers them too; bounded, and a lone committer
                // never waits (PostgreSQL's commit_delay with commit_siblings, adaptively).
                let started = Instant::now();
                let deadline = started + (f.last_flush / 2).clamp(GATHER_WAIT_MIN, GATHER_WAIT_MAX);
                let floor = if f.last_batch > 1 {
                    started + MIN_GATHER
                } else {
                    started
                };
                loop {
                    let now = Instant::now();
                    let on_their_way = f.written_upto < f.sequenced || f.active_writers > 0 || now < floor;
                    if !on_their_way || now >= deadline || f.poisoned.is_some() {
                        break;
                    }
                    let until = if now < floor { floor } else { deadline };
                    f = self
                        .written_changed
                        .wait_timeout(f, until - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
                let target = f.written_upto;
                drop(f);
                let flush_started = Instant::now();
                let result = self.io.sync_data();
                let flush_took = flush_started.elapsed();
                bump(&self.counters.flush_micros, flush_took.as_micros() as u64);
                // Meta before flush, the order everywhere: readers are shown the commits
                // before their committers are told they are durable.
                let mut meta = lock(&self.meta);
                f = lock(&self.flush);
                f.leader_active = false;
                match result {
                    Ok(()) => {
                        bump(&self.counters.flushes, 1);
                        f.last_batch = target.saturating_sub(f.durable);
                        f.last_flush = flush_took;
                        drop(f);
                        self.note_durable(&mut meta, target);
                        drop(meta);
                        f = lock(&self.flush);
                    }
                    Err(e) => {
                        if f.poisoned.is_none() {
                            f.poisoned = Some(format!("fdatasync failed: {e}"));
                        }
                        drop(meta);
                    }
                }
                self.durable_changed.notify_all();
                continue;
            }
            f = self.durable_changed.wait(f).unwrap_or_else(|e| e.into_inner());
        }
    }
}
