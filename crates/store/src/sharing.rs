//! Several processes on one store file.
//!
//! Every process keeps its own copy of the mapping and follows the commit chain that all of
//! them append to. They coordinate with open-file-description (OFD) byte-range locks on the
//! store file, at offsets far past any data, and with a small side file bound to the store
//! file's identity (see [`side_file_path`]):
//!
//! * `INIT` (exclusive) is held while a read-write process opens or closes the store;
//!   `OPEN` is held shared by every read-write process that has it open. The first one (it
//!   gets `OPEN` exclusively) runs full recovery and owns every free slot; later ones join:
//!   they read the chain and own no free slot until they grow the file (by a step sized
//!   on what they grew themselves, 256 KiB at first by default, not on the whole file).
//! * `WRITE` (exclusive) is held by the process sequencing and writing commits. Taking it, a
//!   process first catches up with the chain, reading the header and the record at the
//!   chain's head from the store file itself (never trusting the side file alone: a process
//!   may have died between writing and publishing), so conflicts are checked against every
//!   process's commits, and it lets go only when its records are written.
//! * Each slot is given back to an allocator by exactly one process: the one whose commit
//!   superseded it, whose record occupies it, or whose checkpoint replaced it. So no slot is
//!   ever free in two processes.
//! * Reader pins: each read-write process claims an entry of the side file (by locking its
//!   byte) and writes there the oldest commit it may still read (`NO_PIN` when none). Slots
//!   superseded after the smallest live pin are not reused. A process whose entry is stale
//!   (it died) no longer holds the lock, and its pin is ignored.
//! * Read-only processes cannot write the side file, so they pin differently: they hold
//!   `READ_ONLY` shared while they read (a snapshot open, or catching up), and while any
//!   process holds it no slot is reused at all. They follow the chain from the store file.
//! * The side file also carries the latest (generation, sequence) published, so a reader
//!   looking for new commits usually reads a few bytes instead of the chain, and in each
//!   entry how far the chain is durable as its owner last saw it: readers show other
//!   processes only commits that are durable.
//! * Group commit across processes. Each process, once its commits up to `w` are written
//!   (their `pwrite`s returned), raises the side file's *written* word to `w`. A process
//!   that needs its commits durable takes `FLUSH` (exclusive, waiting), reads the written
//!   word `W` *before* it flushes, flushes, and publishes `W` as durable in its entry: an
//!   `fdatasync` of the file writes back every dirty page of the file, whichever process
//!   wrote it, so everything written before the flush began is on the medium when it
//!   returns. A process that finds some entry durable at or past its commits (before or
//!   after waiting for `FLUSH`) does not flush at all. While one process flushes, the others
//!   that wrote meanwhile queue on `FLUSH`, and the next flush covers all of them.
//! * Waiting for a flush that covers it. Holding `FLUSH`, the flusher announces the written
//!   word it read (the *covering* word) before it flushes. A process whose commits that
//!   announcement covers waits for `FLUSH` *shared* instead of exclusive: every such waiter
//!   is let go at once when the flush ends, instead of one after another, each taking and
//!   dropping `FLUSH` in turn, while the flushes of the commits written since wait behind
//!   them (with 16 processes on 2 cores, that queue held most of a commit's latency). The
//!   announcement only chooses how to wait: durability is still only what an entry says,
//!   so a waiter still not covered once let go (the flusher died or failed) takes `FLUSH`
//!   exclusive and flushes itself.
//! * Commits shown before they are durable (`synchronous=NORMAL`/`OFF`): once a commit is
//!   written, its process raises the *shown* word to it before the commit is reported,
//!   and a reader of any process shows every commit up to that word. The word only rises
//!   (see [`Sharing::publish_shown`]), so a commit reported shown stays shown to every new
//!   reader whatever order overlapping publications land in.
//! * The lease (`lease`): while one read-write process has the store open since it opened
//!   it, it holds `WRITE`, `FLUSH` and the user locks in memory, noted in the side file; every
//!   other process arriving ends that, and each real take of those locks here first reads
//!   the notes (`Sharing::take`).
//! * The written word also spares followers a read: a process following the chain checks
//!   that a record's pages hold what it says (its writer may still be writing them, or have
//!   died) only past the written word; below it every write returned.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::lease::{self, Lease, NoteValues, NoteWords, USER_NOTES};
pub use crate::locks::FLUSH;
use crate::locks::{
    locked_elsewhere, replication_lock, set_lock, Kind, Lockable, ALONE, INIT, OPEN, READ_ONLY,
};
use crate::shared_words::{MapSideFile, SharedWords};

/// Side-file layout (little-endian):
///
/// | offset | bytes | field |
/// | --- | --- | --- |
/// | 0 | 8 | magic `onesyncP` |
/// | 8 | 8 | checkpoint generation of the latest published progress |
/// | 16 | 8 | sequence number the chain is about to reach (published before the record is written) |
/// | 24 | 8 | sequence number up to which commits are written and shown before they were durable (`synchronous=NORMAL`/`OFF`) |
/// | 32 | 8 | sequence number up to which every commit is written (its writes returned), perhaps not durable |
/// | 40 | 8 | the written word read by the flush announced last (see the module's notes: which flush to wait for, never what is durable) |
/// | 48 | 8 | the lease's note of `WRITE` (`lease`: bit 0 held exclusive, bit 1 shared, by the process alone with the store) |
/// | 56 | 8 | the lease's note of `FLUSH` |
/// | 64 + 16·i | 8 | entry i: the oldest commit its owner may still read (`NO_PIN`: none) |
/// | 72 + 16·i | 8 | entry i: how far the chain was durable when its owner last flushed |
/// | 2080 + 8·j | 8 | the lease's note of user lock j of 8: `(byte << 2) \| bits`, 0 when unused |
const SHM_MAGIC: &[u8; 8] = b"onesyncQ";
pub const SHM_PROGRESS: u64 = 8;
const SHM_SHOWN: u64 = 24;
const SHM_WRITTEN: u64 = 32;
pub const SHM_FLUSH_COVERS: u64 = 40;
const SHM_LEASE_WRITE: u64 = 48;
const SHM_LEASE_FLUSH: u64 = 56;
const SHM_ENTRIES: u64 = 64;
const ENTRY_LEN: u64 = 16;
pub const READER_ENTRIES: u64 = 126;
const SHM_LEASE_USERS: u64 = SHM_ENTRIES + ENTRY_LEN * READER_ENTRIES;
const SHM_LEN: u64 = SHM_LEASE_USERS + 8 * USER_NOTES as u64;
const NOTES: NoteWords = NoteWords {
    write: (SHM_LEASE_WRITE / 8) as usize,
    flush: (SHM_LEASE_FLUSH / 8) as usize,
    users: (SHM_LEASE_USERS / 8) as usize,
};
/// Reader entry `i` is owned by whoever holds the lock on this byte of the side file.
const SHM_ENTRY_LOCKS: i64 = 1 << 20;
/// Held (exclusive) on the side file while a process without a mapping raises the shown
/// word (`Sharing::publish_shown`).
const SHM_SHOWN_LOCK: i64 = SHM_ENTRY_LOCKS - 1;

pub const NO_PIN: u64 = u64::MAX;

const ENTRIES_READ: &str = "reading the side file's entries";
const FLUSH_WAIT: &str = "waiting for another process's flush";

fn io_err(during: &'static str) -> impl Fn(std::io::Error) -> Error {
    move |e| Error::io(during, e)
}

/// How a process came to have the store open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// No other read-write process had it open: recover fully, own every free slot.
    First,
    /// Others have it open read-write: follow their chain.
    Joined,
    /// Read-only, with no read-write process: recover by reading.
    ReadOnly,
    /// Read-only, with read-write processes: follow their chain.
    ReadOnlyJoined,
}

/// This process's part in sharing a store file.
pub struct Sharing {
    /// The store file (the same open file description as the store's: the locks are its).
    file: File,
    /// The side file and this process's entry in it; `None` for a read-only process.
    side: Option<SideFile>,
    /// Where the side file is (a read-only process reads it there when it needs to).
    side_path: PathBuf,
    /// The highest durable sequence number this process published in its entry (it only
    /// ever raises it: another process may be waiting for it).
    published_durable: AtomicU64,
    /// Whether this process holds its per-transaction locks in memory (`lease`).
    lease: Lease,
    /// The negative control `lease-ignored`: a real lock taken without reading the lease's
    /// notes.
    ignore_lease: bool,
}

/// Holds `FLUSH` (see the module's notes); dropped, it lets go.
pub struct FlushGuard<'a> {
    sharing: &'a Sharing,
}

impl Drop for FlushGuard<'_> {
    fn drop(&mut self) {
        self.sharing.give(Lockable::Flush, Kind::Exclusive);
    }
}

/// How often a process polls for a lock that the process alone with the store holds in
/// memory (there is no wake-up across processes; this only happens while a lease ends).
const LEASE_POLL: std::time::Duration = std::time::Duration::from_micros(100);

struct SideFile {
    file: File,
    path: PathBuf,
    entry: u64,
    /// The side file mapped into memory (a load or store instead of a system call), when
    /// the opener could map it (`Options::map_side_file`).
    mapped: Option<Arc<dyn SharedWords>>,
}

/// The side file's length: what a mapping must cover.
pub const SIDE_FILE_LEN: usize = SHM_LEN as usize;

impl SideFile {
    /// The mapped words from byte `offset` on, if the file is mapped; an error if the
    /// mapping is shorter than `count` words from there.
    fn mapped_words(&self, offset: u64, count: usize, during: &'static str) -> Result<Option<&[AtomicU64]>> {
        let Some(mapped) = &self.mapped else {
            return Ok(None);
        };
        let first = (offset / 8) as usize;
        mapped
            .words()
            .get(first..first + count)
            .map(Some)
            .ok_or_else(|| Error::io(during, std::io::ErrorKind::UnexpectedEof.into()))
    }

    fn write_words(&self, offset: u64, words: &[u64], during: &'static str) -> Result<()> {
        if let Some(mapped) = self.mapped_words(offset, words.len(), during)? {
            // In order: a reader that sees a later word sees the earlier ones of this write
            // (progress: the generation before the sequence number).
            for (word, value) in mapped.iter().zip(words) {
                word.store(*value, Ordering::Release);
            }
            return Ok(());
        }
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        self.file.write_all_at(&bytes, offset).map_err(io_err(during))
    }

    /// `read_words` into `out`, without allocating where the file is mapped (every real
    /// lock taken reads the lease's notes).
    fn read_into(&self, offset: u64, out: &mut [u64], during: &'static str) -> Result<()> {
        match self.mapped_words(offset, out.len(), during)? {
            Some(mapped) => {
                for (value, word) in out.iter_mut().zip(mapped).rev() {
                    *value = word.load(Ordering::Acquire);
                }
            }
            None => out.copy_from_slice(&read_words_at(&self.file, offset, out.len(), during)?),
        }
        Ok(())
    }

    fn read_words(&self, offset: u64, count: usize, during: &'static str) -> Result<Vec<u64>> {
        if let Some(mapped) = self.mapped_words(offset, count, during)? {
            // The reverse of the writer's order (see `write_words`).
            let mut words: Vec<u64> = mapped.iter().rev().map(|w| w.load(Ordering::Acquire)).collect();
            words.reverse();
            return Ok(words);
        }
        read_words_at(&self.file, offset, count, during)
    }
}

fn read_words_at(file: &File, offset: u64, count: usize, during: &'static str) -> Result<Vec<u64>> {
    let mut bytes = vec![0u8; count * 8];
    file.read_exact_at(&mut bytes, offset).map_err(io_err(during))?;
    Ok(bytes
        .chunks_exact(8)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0xff; 8])))
        .collect())
}

impl std::fmt::Debug for Sharing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sharing")
            .field("entry", &self.side.as_ref().map(|s| s.entry))
            .finish()
    }
}

/// Where the side file of a store lives: named after the store file's device and inode
/// (and the store's id, so a reused inode never meets a stale side file), not its path, so
/// every name of the file (hard links, a rename while open) meets the same side file. In
/// `/dev/shm` (memory: nothing in it needs to survive a reboot) where there is one, else
/// `/tmp`; the choice depends on the machine only, so all processes agree.
pub fn side_file_path(file: &File, store_id: u64) -> Result<PathBuf> {
    let meta = file
        .metadata()
        .map_err(io_err("reading the store file's identity"))?;
    let dir = ["/dev/shm", "/tmp"]
        .iter()
        .map(Path::new)
        .find(|d| d.is_dir())
        .unwrap_or(Path::new("/tmp"));
    Ok(dir.join(format!(
        "onesync-{:x}-{:x}-{store_id:016x}.shm",
        meta.dev(),
        meta.ino()
    )))
}

/// Holds `INIT` while a process opens or closes; dropped, it lets go.
pub struct InitGuard {
    file: File,
}

impl Drop for InitGuard {
    fn drop(&mut self) {
        let _ = set_lock(&self.file, Kind::Unlock, INIT, false);
    }
}

/// Take `INIT` on `file` (waiting for another process's open or close to finish); shared
/// for a read-only process (its file descriptor cannot take exclusive locks).
pub fn lock_init(file: &File, read_only: bool) -> Result<InitGuard> {
    let file = file.try_clone().map_err(io_err("locking the store file"))?;
    let kind = if read_only { Kind::Shared } else { Kind::Exclusive };
    set_lock(&file, kind, INIT, true).map_err(io_err("locking the store file"))?;
    Ok(InitGuard { file })
}

/// Open (creating if need be) the side file with the store file's owner and permissions, so
/// a store one user opened can be opened by every user who may write the store.
fn open_side_file(store: &File, path: &Path) -> Result<File> {
    let meta = store
        .metadata()
        .map_err(io_err("reading the store file's permissions"))?;
    let mode = meta.mode() & 0o666;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(mode)
        .open(path)
        .map_err(io_err("opening the store's side file"))?;
    let side = file
        .metadata()
        .map_err(io_err("reading the side file's permissions"))?;
    // The umask may have taken bits away; the owner (root, say) may differ from the store's.
    if side.mode() & 0o777 != mode && side.uid() == nix::unistd::geteuid().as_raw() {
        let _ = file.set_permissions(std::fs::Permissions::from_mode(mode));
    }
    if side.uid() != meta.uid() && nix::unistd::geteuid().is_root() {
        let _ = std::os::unix::fs::fchown(&file, Some(meta.uid()), Some(meta.gid()));
    }
    Ok(file)
}

impl Sharing {
    /// Take part in sharing `file`, the store at `path` whose id is `store_id`. Call
    /// holding `INIT`, so that recovery or joining runs before anyone else opens or closes.
    pub fn arrive(
        file: &File,
        path: &Path,
        store_id: u64,
        read_only: bool,
        map: Option<&MapSideFile>,
        ignore_lease: bool,
    ) -> Result<(Sharing, Arrival)> {
        let lock_err = io_err("locking the store file");
        let mine = file.try_clone().map_err(io_err("joining the store"))?;
        if read_only {
            // Held until the open has read what it needs (see `pin`).
            set_lock(file, Kind::Shared, READ_ONLY, true).map_err(&lock_err)?;
            let others = locked_elsewhere(file, OPEN).map_err(&lock_err)?;
            let arrival = if others {
                Arrival::ReadOnlyJoined
            } else {
                Arrival::ReadOnly
            };
            let side_path = side_file_path(file, store_id)?;
            // Before any lock that a process alone with the store may hold in memory.
            lease::signal_join(&side_path, file)?;
            let sharing = Sharing {
                file: mine,
                side: None,
                side_path,
                published_durable: AtomicU64::new(0),
                lease: Lease::none(NOTES),
                ignore_lease,
            };
            return Ok((sharing, arrival));
        }
        let first = set_lock(file, Kind::Exclusive, OPEN, false).map_err(&lock_err)?;
        let release_open = || {
            let _ = set_lock(file, Kind::Unlock, OPEN, false);
        };
        let side_path = match side_file_path(file, store_id) {
            Ok(p) => p,
            Err(e) => {
                release_open();
                return Err(e);
            }
        };
        let shm = match open_side_file(file, &side_path) {
            Ok(shm) => shm,
            Err(e) => {
                release_open();
                return Err(e);
            }
        };
        let claimed = (|| -> Result<Sharing> {
            let io = |during| move |e: std::io::Error| Error::io(during, e);
            if first {
                // Nobody else: whatever the side file says is from processes now gone.
                let mut fresh = vec![0u8; SHM_LEN as usize];
                fresh[..8].copy_from_slice(SHM_MAGIC);
                for entry in
                    fresh[SHM_ENTRIES as usize..SHM_LEASE_USERS as usize].chunks_exact_mut(ENTRY_LEN as usize)
                {
                    entry[..8].copy_from_slice(&NO_PIN.to_le_bytes());
                }
                shm.write_all_at(&fresh, 0)
                    .map_err(io("resetting the store's side file"))?;
                shm.set_len(SHM_LEN)
                    .map_err(io("resetting the store's side file"))?;
                set_lock(file, Kind::Shared, OPEN, false).map_err(io("locking the store file"))?;
            } else {
                // Before any lock that a process alone with the store may hold in memory.
                lease::signal_join(&side_path, file)?;
                if !set_lock(file, Kind::Shared, OPEN, false).map_err(io("locking the store file"))? {
                    return Err(Error::Locked(path.into()));
                }
            }
            for entry in 0..READER_ENTRIES {
                if set_lock(&shm, Kind::Exclusive, SHM_ENTRY_LOCKS + entry as i64, false)
                    .map_err(io("claiming a reader entry"))?
                {
                    // A joiner may find a side file shorter than it needs (one a crashed first
                    // process left half written): a mapping past its end would fault.
                    let len = shm
                        .metadata()
                        .map_err(io("reading the side file's length"))?
                        .len();
                    if len < SHM_LEN {
                        return Err(Error::Corrupt(format!(
                            "the side file {} is {len} bytes, shorter than {SHM_LEN}",
                            side_path.display()
                        )));
                    }
                    let mapped: Option<Arc<dyn SharedWords>> = match map {
                        Some(map) => Some(Arc::from(
                            map(&shm, SIDE_FILE_LEN).map_err(io("mapping the store's side file"))?,
                        )),
                        None => None,
                    };
                    // The first process takes the lease where it can (both files mapped).
                    let lease = match (first, map, &mapped) {
                        (true, Some(map), Some(words)) => {
                            Lease::take_alone(file, &side_path, words, NOTES, map)
                        }
                        _ => None,
                    }
                    .unwrap_or_else(|| Lease::none(NOTES));
                    let sharing = Sharing {
                        file: file.try_clone().map_err(io("joining the store"))?,
                        side: Some(SideFile {
                            file: shm,
                            path: side_path.clone(),
                            entry,
                            mapped,
                        }),
                        side_path: side_path.clone(),
                        published_durable: AtomicU64::new(0),
                        lease,
                        ignore_lease,
                    };
                    sharing.publish_pin(NO_PIN)?;
                    return Ok(sharing);
                }
            }
            Err(Error::Locked(path.into()))
        })();
        match claimed {
            Ok(sharing) => Ok((sharing, if first { Arrival::First } else { Arrival::Joined })),
            Err(e) => {
                release_open();
                Err(e)
            }
        }
    }

    pub fn read_only(&self) -> bool {
        self.side.is_none()
    }

    /// Take `INIT` (to close).
    pub fn lock_init(&self) -> Result<InitGuard> {
        lock_init(&self.file, self.read_only())
    }

    /// Whether this is the only read-write process with the store open (call holding
    /// `INIT`).
    pub fn alone(&self) -> bool {
        if self.read_only() {
            return false;
        }
        // Converting our shared OPEN lock to exclusive succeeds only if nobody else holds it;
        // then convert back.
        match set_lock(&self.file, Kind::Exclusive, OPEN, false) {
            Ok(true) => {
                let _ = set_lock(&self.file, Kind::Shared, OPEN, false);
                true
            }
            _ => false,
        }
    }

    /// Take `INIT` without waiting, and only if no other process, read-write or
    /// read-only, has the store open: then none can arrive or read while it is held.
    /// `None` if another process holds `INIT` or has the store open.
    pub fn try_lock_init_alone(&self) -> Result<Option<InitGuard>> {
        if self.read_only() {
            return Ok(None);
        }
        let file = self.file.try_clone().map_err(io_err("locking the store file"))?;
        if !set_lock(&file, Kind::Exclusive, INIT, false).map_err(io_err("locking the store file"))? {
            return Ok(None);
        }
        let guard = InitGuard { file };
        let readers = locked_elsewhere(&self.file, READ_ONLY).map_err(io_err("locking the store file"))?;
        Ok((self.alone() && !readers).then_some(guard))
    }

    /// Take `what` as `kind` (waiting for it, or `Ok(false)` if another process holds it):
    /// in memory while this process holds the lease (`lease`); else for real, once no
    /// process alone with the store holds it in memory (`lease`, invariant 3).
    fn take(&self, what: Lockable, kind: Kind, wait: bool, during: &'static str) -> Result<bool> {
        if self.lease.take(&self.file, what, kind)? {
            return Ok(true);
        }
        while self.held_by_alone_process(what, kind)? {
            if !wait {
                return Ok(false);
            }
            std::thread::sleep(LEASE_POLL);
        }
        set_lock(&self.file, kind, what.offset(), wait).map_err(io_err(during))
    }

    /// Let `what` go (held as `kind`).
    fn give(&self, what: Lockable, kind: Kind) {
        if !self.lease.give(what, kind) {
            let _ = set_lock(&self.file, Kind::Unlock, what.offset(), false);
        }
    }

    /// Whether this process holds its per-transaction locks in memory (`lease`).
    pub fn holds_lease(&self) -> bool {
        self.lease.is_alone()
    }

    /// Whether another process, alone with the store, holds `what` in memory in a way that
    /// conflicts with `kind` (`lease`, invariants 3 and 5).
    fn held_by_alone_process(&self, what: Lockable, kind: Kind) -> Result<bool> {
        if self.ignore_lease {
            return Ok(false);
        }
        let during = "reading the lease's notes";
        let mut notes = NoteValues::default();
        match &self.side {
            Some(side) => {
                let mut head = [0u64; 2];
                side.read_into(SHM_LEASE_WRITE, &mut head, during)?;
                side.read_into(SHM_LEASE_USERS, &mut notes.users, during)?;
                [notes.write, notes.flush] = head;
            }
            // A read-only process reads the side file where it is (none: no notes).
            None => match File::open(&self.side_path) {
                Ok(file) => {
                    let head = read_words_at(&file, SHM_LEASE_WRITE, 2, during)?;
                    [notes.write, notes.flush] = [head[0], head[1]];
                    // A side file of an older layout holds no notes there.
                    if let Ok(users) = read_words_at(&file, SHM_LEASE_USERS, USER_NOTES, during) {
                        notes.users.copy_from_slice(&users);
                    }
                }
                Err(_) => return Ok(false),
            },
        }
        if !notes.conflict(what, kind) {
            return Ok(false);
        }
        locked_elsewhere(&self.file, ALONE).map_err(io_err(during))
    }

    pub fn lock_writer(&self) -> Result<()> {
        self.take(
            Lockable::Write,
            Kind::Exclusive,
            true,
            "locking the store for writing",
        )?;
        Ok(())
    }

    /// Keep writers out while reading the chain from its start (a read-only process
    /// joining; its descriptor can take only shared locks).
    pub fn hold_off_writers(&self) -> Result<()> {
        self.take(
            Lockable::Write,
            Kind::Shared,
            true,
            "locking the store for reading",
        )?;
        Ok(())
    }

    pub fn unlock_writer(&self) {
        let kind = if self.read_only() {
            Kind::Shared
        } else {
            Kind::Exclusive
        };
        self.give(Lockable::Write, kind);
    }

    /// Try the exclusive user lock `key` (the VFS: SQLite's RESERVED on one database).
    pub fn try_user_lock(&self, key: u64) -> Result<bool> {
        self.take(
            Lockable::user(key),
            Kind::Exclusive,
            false,
            "locking a database of the store",
        )
    }

    /// The lock `key` shared: held by any number of processes at once, and refused while
    /// one holds it exclusively (`try_user_lock`).
    pub fn try_user_lock_shared(&self, key: u64) -> Result<bool> {
        self.take(
            Lockable::user(key),
            Kind::Shared,
            false,
            "locking a database of the store (shared)",
        )
    }

    /// Takes replication lease `key` without waiting (always a real lock: see
    /// `locks::replication_lock`).
    pub fn try_replication_lock(&self, key: u64) -> Result<bool> {
        set_lock(&self.file, Kind::Exclusive, replication_lock(key), false)
            .map_err(io_err("taking the replication lease"))
    }

    pub fn replication_unlock(&self, key: u64) {
        let _ = set_lock(&self.file, Kind::Unlock, replication_lock(key), false);
    }

    pub fn user_unlock(&self, key: u64) {
        self.give(Lockable::user(key), Kind::Exclusive);
    }

    pub fn user_locked_elsewhere(&self, key: u64) -> Result<bool> {
        let what = Lockable::user(key);
        if locked_elsewhere(&self.file, what.offset()).map_err(io_err("testing a database lock"))? {
            return Ok(true);
        }
        self.held_by_alone_process(what, Kind::Exclusive)
    }

    /// Publish the oldest commit this process may still read. A read-only process holds
    /// `READ_ONLY` while it has any (which stops all slot reuse) and lets go when it has
    /// none.
    pub fn publish_pin(&self, pin: u64) -> Result<()> {
        match &self.side {
            Some(side) => side.write_words(
                SHM_ENTRIES + ENTRY_LEN * side.entry,
                &[pin],
                "publishing a reader pin",
            ),
            None => {
                let kind = if pin == NO_PIN { Kind::Unlock } else { Kind::Shared };
                set_lock(&self.file, kind, READ_ONLY, true)
                    .map_err(io_err("pinning what a read-only process reads"))?;
                Ok(())
            }
        }
    }

    /// Publish that the chain is durable up to `seq` (after a flush of this process); a
    /// lower value than this process published before changes nothing.
    pub fn publish_durable(&self, seq: u64) -> Result<()> {
        let Some(side) = &self.side else {
            return Ok(());
        };
        let previous = self.published_durable.fetch_max(seq, Ordering::AcqRel);
        if seq <= previous {
            return Ok(());
        }
        side.write_words(
            SHM_ENTRIES + ENTRY_LEN * side.entry + 8,
            &[seq],
            "publishing how far the store is durable",
        )
    }

    /// Whether this process takes part in group commit across processes (a read-only one
    /// has no entry to publish in, and writes nothing to flush).
    pub fn flushes_together(&self) -> bool {
        self.side.is_some()
    }

    /// Record that every commit up to `seq` is written (see the module's notes). Another
    /// process may have published more: the word only rises (without a mapping, a racing
    /// lower value may win, which is still true, only less useful).
    pub fn publish_written(&self, seq: u64) -> Result<()> {
        let Some(side) = &self.side else {
            return Ok(());
        };
        const DURING: &str = "publishing how far the store is written";
        if let Some(word) = side.mapped_words(SHM_WRITTEN, 1, DURING)? {
            word[0].fetch_max(seq, Ordering::AcqRel);
            return Ok(());
        }
        if side.read_words(SHM_WRITTEN, 1, DURING)?[0] < seq {
            side.write_words(SHM_WRITTEN, &[seq], DURING)?;
        }
        Ok(())
    }

    /// Up to where every process's commits are written (0 for a read-only process).
    pub fn written(&self) -> Result<u64> {
        let Some(side) = &self.side else {
            return Ok(0);
        };
        Ok(side.read_words(SHM_WRITTEN, 1, "reading how far the store is written")?[0])
    }

    /// Take `FLUSH`, waiting while another process flushes.
    pub fn lock_flush(&self) -> Result<FlushGuard<'_>> {
        self.take(Lockable::Flush, Kind::Exclusive, true, FLUSH_WAIT)?;
        Ok(FlushGuard { sharing: self })
    }

    /// Holding `FLUSH`: say that the flush about to run covers every commit up to `covers`
    /// (the written word it read), so that the processes it covers wait for it shared.
    pub fn announce_flush(&self, covers: u64) -> Result<()> {
        let Some(side) = &self.side else {
            return Ok(());
        };
        side.write_words(SHM_FLUSH_COVERS, &[covers], "announcing a flush")
    }

    /// Whether the flush announced last covers commit `seq` (it may have ended, or died).
    pub fn announced_flush_covers(&self, seq: u64) -> Result<bool> {
        let Some(side) = &self.side else {
            return Ok(false);
        };
        Ok(side.read_words(SHM_FLUSH_COVERS, 1, "reading the announced flush")?[0] >= seq)
    }

    /// Wait until nobody holds `FLUSH` exclusive (the announced flush has ended), sharing
    /// the wait with every other process waiting for that flush.
    pub fn wait_for_flush(&self) -> Result<()> {
        self.take(Lockable::Flush, Kind::Shared, true, FLUSH_WAIT)?;
        self.give(Lockable::Flush, Kind::Shared);
        Ok(())
    }

    /// The reader entries' words: `(pin, durable)` of each entry in turn.
    fn entry_words(&self) -> Result<Vec<u64>> {
        let Some(side) = &self.side else {
            return Ok(Vec::new());
        };
        side.read_words(SHM_ENTRIES, 2 * READER_ENTRIES as usize, ENTRIES_READ)
    }

    /// The smallest pin of the other live processes (`NO_PIN` if none); 0 while a
    /// read-only process reads (it cannot publish what it reads).
    pub fn others_oldest_pin(&self) -> Result<u64> {
        if locked_elsewhere(&self.file, READ_ONLY).map_err(io_err("testing for read-only readers"))? {
            return Ok(0);
        }
        let Some(side) = &self.side else {
            return Ok(0);
        };
        let words = self.entry_words()?;
        let mut pins: Vec<(u64, u64)> = words
            .chunks_exact(2)
            .enumerate()
            .map(|(entry, e)| (e[0], entry as u64))
            .filter(|&(pin, entry)| entry != side.entry && pin != NO_PIN)
            .collect();
        // Lowest first: the first whose owner lives is the answer, so its liveness is
        // usually the only one tested (each test is a system call).
        pins.sort_unstable();
        for (pin, entry) in pins {
            // A pin counts only while its owner lives (holds the entry's lock).
            if locked_elsewhere(&side.file, SHM_ENTRY_LOCKS + entry as i64)
                .map_err(io_err("testing a reader entry"))?
            {
                return Ok(pin);
            }
        }
        Ok(NO_PIN)
    }

    /// How far any process has seen the chain durable (values of processes gone stay true:
    /// a durable commit stays durable). `None` when it cannot be known: a read-only process
    /// finds no side file (no read-write process has the store open).
    pub fn others_durable(&self) -> Result<Option<u64>> {
        let words = match &self.side {
            Some(_) => self.entry_words()?,
            // A read-only process reads the side file where it is now (a read-write
            // process arriving first creates it anew).
            None => match File::open(&self.side_path) {
                Ok(file) => read_words_at(&file, SHM_ENTRIES, 2 * READER_ENTRIES as usize, ENTRIES_READ)?,
                Err(_) => return Ok(None),
            },
        };
        Ok(Some(words.chunks_exact(2).map(|e| e[1]).max().unwrap_or(0)))
    }

    /// Record that commits up to `seq` are written and shown to readers before they are
    /// durable (`synchronous=NORMAL`/`OFF`), so other processes' readers show them too.
    /// The word only rises: two processes' commits at NORMAL overlap (`concurrent=1`), and a
    /// publication of the earlier one landing after the later one's must not take the later
    /// one back, which other processes' new readers would then miss although its COMMIT
    /// returned (until the next flush made it durable).
    pub fn publish_shown(&self, seq: u64) -> Result<()> {
        let Some(side) = &self.side else {
            return Ok(());
        };
        const DURING: &str = "publishing commits shown before durable";
        if let Some(word) = side.mapped_words(SHM_SHOWN, 1, DURING)? {
            word[0].fetch_max(seq, Ordering::AcqRel);
            return Ok(());
        }
        // Without a mapping, the read and the write are one step under a lock of the side
        // file (held only for them).
        set_lock(&side.file, Kind::Exclusive, SHM_SHOWN_LOCK, true).map_err(io_err(DURING))?;
        let raised = match side.read_words(SHM_SHOWN, 1, DURING) {
            Ok(words) if words[0] >= seq => Ok(()),
            Ok(_) => side.write_words(SHM_SHOWN, &[seq], DURING),
            Err(e) => Err(e),
        };
        let _ = set_lock(&side.file, Kind::Unlock, SHM_SHOWN_LOCK, false);
        raised
    }

    /// Up to where some process showed commits before they were durable (0 for a read-only
    /// process: it shows only what is durable).
    pub fn others_shown(&self) -> Result<u64> {
        let Some(side) = &self.side else {
            return Ok(0);
        };
        Ok(side.read_words(SHM_SHOWN, 1, "reading commits shown before durable")?[0])
    }

    /// Record that commits up to `seq` of checkpoint generation `generation` are about to
    /// be written (a record) or are covered (a checkpoint).
    pub fn publish_progress(&self, generation: u64, seq: u64) -> Result<()> {
        let Some(side) = &self.side else {
            return Ok(());
        };
        side.write_words(
            SHM_PROGRESS,
            &[generation, seq],
            "publishing the store's progress",
        )
    }

    /// The latest (generation, sequence) some process published; `None` for a read-only
    /// process (it reads the store file instead).
    pub fn progress(&self) -> Result<Option<(u64, u64)>> {
        let Some(side) = &self.side else {
            return Ok(None);
        };
        let words = side.read_words(SHM_PROGRESS, 2, "reading the store's progress")?;
        Ok(Some((words[0], words[1])))
    }

    /// Leave: give up the reader entry and, if this was the last read-write process, remove
    /// the side file (call holding `INIT`).
    pub fn depart(&self, last: bool) {
        let _ = self.publish_pin(NO_PIN);
        if let Some(side) = &self.side {
            if last {
                let _ = std::fs::remove_file(&side.path);
                let _ = std::fs::remove_file(lease::join_file_path(&side.path));
            }
            let _ = set_lock(
                &side.file,
                Kind::Unlock,
                SHM_ENTRY_LOCKS + side.entry as i64,
                false,
            );
        }
        if self.lease.is_alone() {
            let _ = set_lock(&self.file, Kind::Unlock, ALONE, false);
        }
        let _ = set_lock(&self.file, Kind::Unlock, OPEN, false);
    }
}
