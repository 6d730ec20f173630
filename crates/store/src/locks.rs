//! The byte-range locks processes sharing a store coordinate with: open-file-description
//! (OFD) locks on single bytes of the store file far past any data, so they never meet a
//! read or a write, and are let go by the kernel when their holder dies.

use std::fs::File;

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg};

/// Lock offsets: past any store, below i64::MAX.
const LOCK_BASE: i64 = 1 << 62;
pub(crate) const OPEN: i64 = LOCK_BASE;
pub(crate) const INIT: i64 = LOCK_BASE + 1;
pub(crate) const WRITE: i64 = LOCK_BASE + 2;
/// Held shared by read-only processes while they read (see `sharing`'s notes).
pub(crate) const READ_ONLY: i64 = LOCK_BASE + 3;
/// Held (exclusive) by the process flushing for every process's written commits.
pub const FLUSH: i64 = LOCK_BASE + 4;
/// Held (exclusive) by a process that holds `WRITE`, `FLUSH` and the user locks in its
/// memory instead, while no other process has signalled that it joined (see `lease`).
pub(crate) const ALONE: i64 = LOCK_BASE + 5;
/// Locks the VFS takes per logical file (SQLite's RESERVED), hashed into this range.
const USER_BASE: i64 = LOCK_BASE + 4096;
pub(crate) const USER_RANGE: u64 = 1 << 24;
/// The replication lease of each logical file (`onesync-replica`: the process holding it
/// ships the file's commits), hashed into this range, past the user locks. Held for as long
/// as a process ships, so always a real lock (never kept in memory under `ALONE`): the
/// kernel lets it go when its holder dies, and another process takes over.
const REPLICATION_BASE: i64 = USER_BASE + USER_RANGE as i64;
const REPLICATION_RANGE: u64 = 1 << 20;

/// The lock byte of replication lease `key`.
pub(crate) fn replication_lock(key: u64) -> i64 {
    REPLICATION_BASE + (key % REPLICATION_RANGE) as i64
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Shared,
    Exclusive,
    Unlock,
}

/// The locks a process may hold in its memory while it is alone with the store (`lease`):
/// those it takes per transaction. The others (`OPEN`, `INIT`, `READ_ONLY`, the side file's
/// entry locks) are taken at open, close and checkpoints, and are always real.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lockable {
    Write,
    Flush,
    /// A user lock, by its byte in the user range (keys that hash together share it).
    User(u64),
}

impl Lockable {
    pub(crate) fn user(key: u64) -> Lockable {
        Lockable::User(key % USER_RANGE)
    }

    pub(crate) fn offset(self) -> i64 {
        match self {
            Lockable::Write => WRITE,
            Lockable::Flush => FLUSH,
            Lockable::User(byte) => USER_BASE + byte as i64,
        }
    }
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
pub(crate) fn set_lock(file: &File, kind: Kind, start: i64, wait: bool) -> std::io::Result<bool> {
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
pub(crate) fn locked_elsewhere(file: &File, start: i64) -> std::io::Result<bool> {
    let mut fl = flock(Kind::Exclusive, start);
    fcntl(file, FcntlArg::F_OFD_GETLK(&mut fl))?;
    Ok(fl.l_type != libc::F_UNLCK as i16)
}
