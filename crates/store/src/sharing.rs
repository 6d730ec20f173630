//! Several processes on one store file.
//!
//! Every process keeps its own copy of the mapping and follows the commit chain that all of
//! them append to. They coordinate with open-file-description (OFD) byte-range locks on the
//! store file, at offsets far past any data, and with a small side file `PATH-onesync-shm`:
//!
//! * `INIT` (exclusive) is held while a process opens or closes the store; `OPEN` is held
//!   shared by every process that has it open. The first process (it gets `OPEN`
//!   exclusively) runs full recovery and owns every free slot; later ones join: they read the
//!   chain and own no free slot until they grow the file.
//! * `WRITE` (exclusive) is held by the process sequencing and writing commits. Taking it,
//!   a process first catches up with the chain, so conflicts are checked against every
//!   process's commits, and it lets go only when its records are written.
//! * Each slot is given back to an allocator by exactly one process: the one whose commit
//!   superseded it, whose record occupies it, or whose checkpoint replaced it. So no slot is
//!   ever free in two processes.
//! * Reader pins: each process claims an entry of the side file (by locking its byte) and
//!   writes there the oldest commit it may still read (`NO_PIN` when none). Slots superseded
//!   after the smallest live pin are not reused. A process whose entry is stale (it died) no
//!   longer holds the lock, and its pin is ignored.
//! * The side file also carries the latest (generation, sequence) written, so a process
//!   looking for new commits usually reads 16 bytes instead of the chain.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg};

use crate::error::{Error, Result};

/// Lock offsets: past any store, below i64::MAX.
const LOCK_BASE: i64 = 1 << 62;
const OPEN: i64 = LOCK_BASE;
const INIT: i64 = LOCK_BASE + 1;
const WRITE: i64 = LOCK_BASE + 2;
/// Held shared by read-only processes (they do not share: see `Sharing::arrive`).
const READ_ONLY: i64 = LOCK_BASE + 3;
/// Locks the VFS takes per logical file (SQLite's RESERVED), hashed into this range.
const USER_BASE: i64 = LOCK_BASE + 4096;
const USER_RANGE: u64 = 1 << 24;

/// Side-file layout: magic, generation, sequence, then one pin per reader entry.
const SHM_MAGIC: &[u8; 8] = b"onesyncP";
const SHM_PROGRESS: u64 = 8;
const SHM_PINS: u64 = 64;
pub const READER_ENTRIES: u64 = 126;
/// Reader entry `i` is owned by whoever holds the lock on this byte of the side file.
const SHM_ENTRY_LOCKS: i64 = 1 << 20;

pub const NO_PIN: u64 = u64::MAX;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Shared,
    Exclusive,
    Unlock,
}

fn flock(kind: Kind, start: i64) -> libc::flock {
    let l_type = match kind {
        Kind::Shared => libc::F_RDLCK,
        Kind::Exclusive => libc::F_WRLCK,
        Kind::Unlock => libc::F_UNLCK,
    };
    libc::flock {
        l_type: l_type as i16,
        l_whence: libc::SEEK_SET as i16,
        l_start: start,
        l_len: 1,
        l_pid: 0,
    }
}

/// Take (or change, or drop) one byte's lock; `Ok(false)` if another holder conflicts.
fn set_lock(file: &File, kind: Kind, start: i64, wait: bool) -> std::io::Result<bool> {
    let fl = flock(kind, start);
    loop {
        let arg = if wait {
            FcntlArg::F_OFD_SETLKW(&fl)
        } else {
            FcntlArg::F_OFD_SETLK(&fl)
        };
        match fcntl(file, arg) {
            Ok(_) => return Ok(true),
            Err(Errno::EINTR) => continue,
            Err(Errno::EAGAIN | Errno::EACCES) if !wait => return Ok(false),
            Err(e) => return Err(e.into()),
        }
    }
}

/// Whether some other open file description holds a lock on the byte that conflicts with
/// an exclusive one.
fn locked_elsewhere(file: &File, start: i64) -> std::io::Result<bool> {
    let mut fl = flock(Kind::Exclusive, start);
    fcntl(file, FcntlArg::F_OFD_GETLK(&mut fl))?;
    Ok(fl.l_type != libc::F_UNLCK as i16)
}

fn io_err(during: &'static str) -> impl Fn(std::io::Error) -> Error {
    move |e| Error::io(during, e)
}

/// How a process came to have the store open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// No other process had it open: recover fully, own every free slot.
    First,
    /// Others have it open: follow their chain.
    Joined,
    /// Read-only: only with other read-only processes, keeping writers out.
    ReadOnly,
}

/// This process's part in sharing a store file.
pub struct Sharing {
    /// The store file (the same open file description as the store's: the locks are its).
    file: File,
    shm: File,
    shm_path: PathBuf,
    entry: u64,
}

impl std::fmt::Debug for Sharing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sharing").field("entry", &self.entry).finish()
    }
}

/// The side file's path for a store at `path`.
pub fn shm_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push("-onesync-shm");
    PathBuf::from(name)
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

impl Sharing {
    /// Take part in sharing `file`, the store at `path`. Call holding `INIT`, so that
    /// recovery or joining runs before anyone else opens or closes.
    pub fn arrive(file: &File, path: &Path, read_only: bool) -> Result<(Option<Sharing>, Arrival)> {
        let lock_err = io_err("locking the store file");
        if read_only {
            // A reader that cannot write the side file cannot publish what it reads, so
            // read-only processes keep writers out (and are kept out by them).
            if locked_elsewhere(file, OPEN).map_err(&lock_err)? {
                return Err(Error::Locked(path.into()));
            }
            set_lock(file, Kind::Shared, READ_ONLY, false).map_err(&lock_err)?;
            return Ok((None, Arrival::ReadOnly));
        }
        if locked_elsewhere(file, READ_ONLY).map_err(&lock_err)? {
            return Err(Error::Locked(path.into()));
        }
        let first = set_lock(file, Kind::Exclusive, OPEN, false).map_err(&lock_err)?;
        let shm_path = shm_path(path);
        let shm = match OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&shm_path)
        {
            Ok(shm) => shm,
            Err(e) => {
                if first {
                    let _ = set_lock(file, Kind::Unlock, OPEN, false);
                }
                return Err(Error::io("opening the store's side file", e));
            }
        };
        let claimed = (|| -> Result<Option<Sharing>> {
            let io = |during| move |e: std::io::Error| Error::io(during, e);
            if first {
                // Nobody else: whatever the side file says is from processes now gone.
                let mut fresh = vec![0u8; (SHM_PINS + 8 * READER_ENTRIES) as usize];
                fresh[..8].copy_from_slice(SHM_MAGIC);
                for pin in fresh[SHM_PINS as usize..].chunks_exact_mut(8) {
                    pin.copy_from_slice(&NO_PIN.to_le_bytes());
                }
                shm.write_all_at(&fresh, 0)
                    .map_err(io("resetting the store's side file"))?;
                set_lock(file, Kind::Shared, OPEN, false).map_err(io("locking the store file"))?;
            } else if !set_lock(file, Kind::Shared, OPEN, false).map_err(io("locking the store file"))? {
                return Err(Error::Locked(path.into()));
            }
            for entry in 0..READER_ENTRIES {
                if set_lock(&shm, Kind::Exclusive, SHM_ENTRY_LOCKS + entry as i64, false)
                    .map_err(io("claiming a reader entry"))?
                {
                    let sharing = Sharing {
                        file: file.try_clone().map_err(io("joining the store"))?,
                        shm,
                        shm_path,
                        entry,
                    };
                    sharing.publish_pin(NO_PIN)?;
                    return Ok(Some(sharing));
                }
            }
            Err(Error::Locked(path.into()))
        })();
        match claimed {
            Ok(sharing) => Ok((sharing, if first { Arrival::First } else { Arrival::Joined })),
            Err(e) => {
                let _ = set_lock(file, Kind::Unlock, OPEN, false);
                Err(e)
            }
        }
    }

    /// Take `INIT` (to close).
    pub fn lock_init(&self) -> Result<InitGuard> {
        lock_init(&self.file, false)
    }

    /// Whether this is the only process with the store open (call holding `INIT`).
    pub fn alone(&self) -> bool {
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

    pub fn lock_writer(&self) -> Result<()> {
        set_lock(&self.file, Kind::Exclusive, WRITE, true)
            .map_err(io_err("locking the store for writing"))?;
        Ok(())
    }

    pub fn unlock_writer(&self) {
        let _ = set_lock(&self.file, Kind::Unlock, WRITE, false);
    }

    fn user_offset(key: u64) -> i64 {
        USER_BASE + (key % USER_RANGE) as i64
    }

    /// Try the exclusive user lock `key` (the VFS: SQLite's RESERVED on one database).
    pub fn try_user_lock(&self, key: u64) -> Result<bool> {
        set_lock(&self.file, Kind::Exclusive, Self::user_offset(key), false)
            .map_err(io_err("locking a database of the store"))
    }

    pub fn user_unlock(&self, key: u64) {
        let _ = set_lock(&self.file, Kind::Unlock, Self::user_offset(key), false);
    }

    pub fn user_locked_elsewhere(&self, key: u64) -> Result<bool> {
        locked_elsewhere(&self.file, Self::user_offset(key)).map_err(io_err("testing a database lock"))
    }

    /// Publish the oldest commit this process may still read.
    pub fn publish_pin(&self, pin: u64) -> Result<()> {
        self.shm
            .write_all_at(&pin.to_le_bytes(), SHM_PINS + 8 * self.entry)
            .map_err(io_err("publishing a reader pin"))
    }

    /// The smallest pin of the other live processes (`NO_PIN` if none).
    pub fn others_oldest_pin(&self) -> Result<u64> {
        let mut table = vec![0u8; (8 * READER_ENTRIES) as usize];
        self.shm
            .read_exact_at(&mut table, SHM_PINS)
            .map_err(io_err("reading the reader pins"))?;
        let mut oldest = NO_PIN;
        for (entry, bytes) in table.chunks_exact(8).enumerate() {
            let pin = u64::from_le_bytes(bytes.try_into().unwrap_or([0xff; 8]));
            if entry as u64 == self.entry || pin >= oldest {
                continue;
            }
            // A pin counts only while its owner lives (holds the entry's lock).
            if locked_elsewhere(&self.shm, SHM_ENTRY_LOCKS + entry as i64)
                .map_err(io_err("testing a reader entry"))?
            {
                oldest = pin;
            }
        }
        Ok(oldest)
    }

    /// Record that commits up to `seq` of checkpoint generation `generation` are written.
    pub fn publish_progress(&self, generation: u64, seq: u64) -> Result<()> {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&generation.to_le_bytes());
        bytes[8..].copy_from_slice(&seq.to_le_bytes());
        self.shm
            .write_all_at(&bytes, SHM_PROGRESS)
            .map_err(io_err("publishing the store's progress"))
    }

    /// The latest (generation, sequence) some process published.
    pub fn progress(&self) -> Result<(u64, u64)> {
        let mut bytes = [0u8; 16];
        self.shm
            .read_exact_at(&mut bytes, SHM_PROGRESS)
            .map_err(io_err("reading the store's progress"))?;
        let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or([0; 8]));
        Ok((word(0), word(8)))
    }

    /// Leave: give up the reader entry and, if this was the last process, remove the side
    /// file (call holding `INIT`).
    pub fn depart(&self, last: bool) {
        let _ = self.publish_pin(NO_PIN);
        if last {
            let _ = std::fs::remove_file(&self.shm_path);
        }
        let _ = set_lock(
            &self.shm,
            Kind::Unlock,
            SHM_ENTRY_LOCKS + self.entry as i64,
            false,
        );
        let _ = set_lock(&self.file, Kind::Unlock, OPEN, false);
    }
}
