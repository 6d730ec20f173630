//! The store's public face: [`Store`], creating and opening a store file (or any medium),
//! and the calls that hand over to the engine (`engine/`), snapshots and transactions
//! (`txn.rs`).

use crate::engine::{write_zeros, Shared, View};
use crate::error::{Error, Result};
use crate::format::{slot_offset, CheckpointRef, Header, LogRef, Manifest, FORMAT_VERSION, HEADER_BLOCK};
use crate::io::{FileIo, StorageIo};
use crate::loading::MappingIo;
use crate::options::{Options, Sabotage, Stats};
use crate::recovery::{newest_header, recover};
use crate::sharing::{self, Arrival, Sharing};
use crate::txn::{Snapshot, Transaction};
use std::fs::{File, OpenOptions, TryLockError};
use std::path::Path;
use std::sync::Arc;

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

impl Store {
    /// Create a new store file. Fails if `path` exists.
    ///
    /// The store is built under a temporary name in the same directory, flushed, and only
    /// then linked to `path` (which fails rather than replace anything): a crash during
    /// creation leaves no file at `path`, never a half-made one. A crash can leave a
    /// `.NAME.onesync-creating-*` file behind, which is safe to delete.
    pub fn create(path: impl AsRef<Path>, opts: &Options) -> Result<Store> {
        let path = path.as_ref();
        opts.validate()?;
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
        let probe: Arc<dyn StorageIo> = Arc::new(FileIo::new(
            file.try_clone()
                .map_err(|e| Error::io("opening the store file", e))?,
        ));
        let store_id = match newest_header(probe.as_ref()) {
            Ok(header) => header.store_id,
            Err(_) => {
                recover(probe.as_ref(), &MappingIo::new(probe.clone(), 0), false)?;
                return Err(Error::Corrupt("both header copies fail their checksums".into()));
            }
        };
        let (sharing, arrival) = Sharing::arrive(
            &file,
            path,
            store_id,
            opts.read_only,
            opts.map_side_file.as_ref().map(|m| m.0.as_ref()),
            opts.sabotaged(Sabotage::LeaseIgnored),
        )?;
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
            if let Some(s) = shared.sharing() {
                if joined {
                    s.unlock_writer();
                }
                // A read-only process pinned everything while it read; it holds no
                // snapshot yet.
                shared.refresh_pin();
            }
        }
        drop(init);
        opened
    }
    /// Create a store on an empty medium (e.g. a [`crate::sim::SimDisk`]).
    pub fn create_with_io(io: Box<dyn StorageIo>, opts: &Options) -> Result<Store> {
        opts.validate()?;
        if io
            .size()
            .map_err(|e| Error::io("reading the medium's length", e))?
            != 0
        {
            return Err(Error::InvalidArgument("the medium is not empty".into()));
        }
        let page_size = opts.page_size as u64;
        // The first manifest names no file and one free extent: it fits a slot.
        let blob_slots = 1;
        // Small: the first window is a share of the first slots, and the file grows in
        // steps as commits need room (`Options::growth_step`).
        let initial = (opts.initial_capacity / page_size).max(blob_slots + 2 + 16);
        let window = opts.window_slots(initial);
        let capacity = initial.max(blob_slots + window + 16);
        let manifest = Manifest {
            seq: 0,
            next_file_id: 0,
            slot_total: capacity,
            files: Vec::new(),
            runs: Vec::new(),
            free: vec![(blob_slots + window, capacity - blob_slots - window)],
        };
        let (blob, blob_crc) = manifest.encode_with_crc();
        // Preallocate by writing: commits into written extents change no filesystem metadata.
        write_zeros(io.as_ref(), 0, slot_offset(capacity, page_size))?;
        io.write_at(&blob, slot_offset(0, page_size))
            .map_err(|e| Error::io("writing the first checkpoint", e))?;
        let header = Header {
            version: FORMAT_VERSION,
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
        let io: Arc<dyn StorageIo> = Arc::from(io);
        let mapping = MappingIo::new(io.clone(), opts.mapping_cache_bytes);
        let recovered = recover(io.as_ref(), &mapping, opts.salvage)?;
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
        Ok(Store {
            shared: Arc::new(Shared::new(mapping, opts, recovered, sharing, joined)?),
        })
    }

    /// Opened with `Options::salvage`: the read error that ended the chain early, if one
    /// did (the store then shows the commits before it).
    pub fn salvage_stopped_by(&self) -> Option<&str> {
        self.shared.stopped_by()
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

    /// [`Store::snapshot`] without looking for other processes' commits: the latest
    /// durable state this process knows of, which includes every commit of its own that
    /// has returned. For a reader that must see its own commits and nothing newer
    /// needs to be looked for, such as SQLite's SHARED lock between a COMMIT and the
    /// unlock that follows it at once (catching up there cost each process a read of
    /// the chain per transaction, only to drop the snapshot).
    pub fn snapshot_known(&self) -> Snapshot {
        Snapshot::new(self.shared.clone(), View::Durable)
    }

    /// A view of the latest state readers are shown, of this process or any other: durable,
    /// but for commits shown before their flush (`PendingCommit::show`: synchronous=NORMAL
    /// and OFF), which a power cut can still take back.
    pub fn try_snapshot(&self) -> Result<Snapshot> {
        Snapshot::latest(self.shared.clone(), View::Durable)
    }

    /// [`Store::try_snapshot`], every commit of it durable: commits shown before their flush
    /// are flushed first. For what leaves this machine (replication), which must never hold
    /// a commit a power cut takes back.
    pub fn try_durable_snapshot(&self) -> Result<Snapshot> {
        let snap = self.try_snapshot()?;
        if snap.seq() > self.durable_seq() {
            let durable = self.flush()?;
            if durable < snap.seq() {
                return Err(Error::Io {
                    during: "flushing the commits of a snapshot",
                    source: std::io::Error::other(format!(
                        "commit {} is not durable after a flush (durable up to {durable})",
                        snap.seq()
                    )),
                });
            }
        }
        Ok(snap)
    }

    /// A view of the latest *written* state, which may include commits whose flush is still
    /// running: only for a caller that will commit a transaction begun on it (its commit,
    /// later in the chain, becomes durable only with them), never to show a reader.
    pub fn try_latest_snapshot(&self) -> Result<Snapshot> {
        Snapshot::latest(self.shared.clone(), View::Written)
    }

    /// [`Store::try_latest_snapshot`], once the commits already sequenced (by other threads,
    /// writing them right now) are written: what a transaction planned just before its commit
    /// should build on, so that it is not refused for commits it could have seen.
    pub fn try_latest_settled_snapshot(&self) -> Result<Snapshot> {
        Snapshot::latest_settled(self.shared.clone())
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
        self.shared.checkpoint()
    }

    /// Checkpoint if anything was committed since the last one, so the next open replays
    /// nothing, and leave the processes sharing the store. Dropping a store without `close`
    /// is safe too; the next open recovers.
    ///
    /// Only the last read-write process to close checkpoints: one that leaves others behind
    /// (a reader, say) owns no free slots to write a checkpoint into, and would grow the
    /// file for a checkpoint the others make anyway.
    pub fn close(self) -> Result<()> {
        self.shared.close()
    }

    /// Try to take the exclusive lock `key` that other processes sharing this store see
    /// (the VFS: SQLite's write lock on one database). Always granted on an unshared store.
    /// Within one process the caller keeps its own account: the lock is the process's.
    pub fn try_lock_for_process(&self, key: u64) -> Result<bool> {
        match self.shared.sharing() {
            Some(s) => s.try_user_lock(key),
            None => Ok(true),
        }
    }

    /// [`Store::try_lock_for_process`], shared with other processes' shared holders
    /// (concurrent writers), exclusive of its exclusive holders (serial writers).
    pub fn try_lock_for_process_shared(&self, key: u64) -> Result<bool> {
        match self.shared.sharing() {
            Some(s) => s.try_user_lock_shared(key),
            None => Ok(true),
        }
    }

    /// Try to take replication lease `key` (`onesync-replica`: one process ships a logical
    /// file's commits; the key names the file). A real lock among processes, let go by the
    /// kernel when its holder dies; always granted on an unshared store. Within one process
    /// the caller keeps its own account, as for [`Store::try_lock_for_process`].
    pub fn try_lock_replication(&self, key: u64) -> Result<bool> {
        match self.shared.sharing() {
            Some(s) => s.try_replication_lock(key),
            None => Ok(true),
        }
    }

    pub fn unlock_replication(&self, key: u64) {
        if let Some(s) = self.shared.sharing() {
            s.replication_unlock(key);
        }
    }

    pub fn unlock_for_process(&self, key: u64) {
        if let Some(s) = self.shared.sharing() {
            s.user_unlock(key);
        }
    }

    /// Whether this process takes its per-transaction locks (the write lock, the flush lock,
    /// [`Store::try_lock_for_process`]) in memory, without a system call: it was the first
    /// to open the store and no other process has opened it since (the lease of
    /// `src/lease.rs`).
    pub fn holds_lease(&self) -> bool {
        self.shared.sharing().is_some_and(|s| s.holds_lease())
    }

    /// Whether another process holds the lock `key`.
    pub fn locked_by_other_process(&self, key: u64) -> Result<bool> {
        match self.shared.sharing() {
            Some(s) => s.user_locked_elsewhere(key),
            None => Ok(false),
        }
    }

    /// The defect this store was opened with on purpose (negative controls only).
    pub fn sabotage(&self) -> Option<crate::Sabotage> {
        #[cfg(feature = "test-hooks")]
        return self.shared.opts.sabotage;
        #[cfg(not(feature = "test-hooks"))]
        None
    }

    /// Sequence number of the latest commit (durable or not yet).
    pub fn last_seq(&self) -> u64 {
        self.shared.last_seq()
    }

    /// Make every commit written so far durable now (commits shown before they were
    /// durable included); returns the durable sequence number.
    pub fn flush(&self) -> Result<u64> {
        self.shared.flush_written()
    }

    /// The longest a commit shown before it was durable (`PendingCommit::show` with a
    /// background flush) waits for that flush; starts as `Options::deferred_flush_interval`.
    pub fn deferred_flush_interval(&self) -> std::time::Duration {
        self.shared.deferred_flush_interval()
    }

    /// Change [`Store::deferred_flush_interval`] for this open store (every handle of it).
    pub fn set_deferred_flush_interval(&self, interval: std::time::Duration) {
        self.shared.set_deferred_flush_interval(interval);
    }

    /// Sequence number up to which every commit is durable.
    pub fn durable_seq(&self) -> u64 {
        self.shared.durable_seq()
    }

    pub fn stats(&self) -> Stats {
        self.shared.stats()
    }
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
