//! What an open file of the `onesync` VFS is served by.
//!
//! Every file SQLite opens through this VFS is a [`DbBackend`]: the journals
//! are in-memory files, everything else is a [`PassThrough`] to the VFS that
//! was the default at registration. The main database file is opened through
//! a [`MainDbFactory`], the seam where a later backend (e.g. a page store that
//! provides `SQLITE_IOCAP_BATCH_ATOMIC`) replaces the pass-through.

use std::ffi::{c_int, c_void};
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::ffi::{
    SQLITE_IOERR, SQLITE_IOERR_SHMMAP, SQLITE_LOCK_EXCLUSIVE, SQLITE_LOCK_NONE, SQLITE_LOCK_PENDING,
    SQLITE_LOCK_RESERVED, SQLITE_LOCK_SHARED, SQLITE_NOTFOUND, SQLITE_OK,
};
pub use crate::sys::file_control::{FileControl, FileControlCall, Pragma};
pub(crate) use crate::sys::handles::SqliteName;
pub use crate::sys::handles::{Connection, OpenRequest};
pub use crate::sys::passthrough::PassThrough;

/// A SQLite result code as the error: `Err(SQLITE_IOERR_WRITE)` etc.
pub type IoResult<T> = Result<T, c_int>;

pub(crate) fn check(rc: c_int) -> IoResult<()> {
    if rc == SQLITE_OK {
        Ok(())
    } else {
        Err(rc)
    }
}

/// SQLite's file lock levels (`SQLITE_LOCK_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LockLevel {
    None,
    Shared,
    Reserved,
    Pending,
    Exclusive,
}

impl LockLevel {
    /// The level for a raw `SQLITE_LOCK_*` value.
    pub fn from_raw(raw: c_int) -> Option<Self> {
        Some(match raw {
            SQLITE_LOCK_NONE => Self::None,
            SQLITE_LOCK_SHARED => Self::Shared,
            SQLITE_LOCK_RESERVED => Self::Reserved,
            SQLITE_LOCK_PENDING => Self::Pending,
            SQLITE_LOCK_EXCLUSIVE => Self::Exclusive,
            _ => return None,
        })
    }

    /// The raw `SQLITE_LOCK_*` value.
    pub fn raw(self) -> c_int {
        match self {
            Self::None => SQLITE_LOCK_NONE,
            Self::Shared => SQLITE_LOCK_SHARED,
            Self::Reserved => SQLITE_LOCK_RESERVED,
            Self::Pending => SQLITE_LOCK_PENDING,
            Self::Exclusive => SQLITE_LOCK_EXCLUSIVE,
        }
    }
}

/// The hooks one open file is served by; the methods mirror
/// `sqlite3_io_methods` and SQLite's contract for each applies.
///
/// SQLite calls one file's methods from one thread at a time, but not always
/// the same thread, hence `Send`.
pub trait DbBackend: Send {
    /// Fills `buf` from `offset`. Past the end of the file, zero-fill the rest
    /// of `buf` and return `Err(SQLITE_IOERR_SHORT_READ)`.
    fn read(&mut self, buf: &mut [u8], offset: u64) -> IoResult<()>;
    /// Writes all of `buf` at `offset`, extending the file if needed.
    fn write(&mut self, buf: &[u8], offset: u64) -> IoResult<()>;
    /// Sets the file's size to `size`.
    fn truncate(&mut self, size: u64) -> IoResult<()>;
    /// Makes earlier writes durable (`SQLITE_SYNC_*` flags).
    fn sync(&mut self, flags: c_int) -> IoResult<()>;
    /// The file's size in bytes.
    fn size(&mut self) -> IoResult<u64>;
    /// Raises the file lock to `level`.
    fn lock(&mut self, _level: LockLevel) -> IoResult<()> {
        Ok(())
    }
    /// Lowers the file lock to `level` (`None` or `Shared`).
    fn unlock(&mut self, _level: LockLevel) -> IoResult<()> {
        Ok(())
    }
    /// Whether any connection holds a RESERVED or higher lock.
    fn check_reserved_lock(&mut self) -> IoResult<bool> {
        Ok(false)
    }
    /// `xFileControl`, decoded ([`FileControl`]): a raw result code, `SQLITE_NOTFOUND` for
    /// an op the backend does not handle. A backend that wraps another file passes the
    /// call on unchanged.
    fn file_control(&mut self, _call: &FileControlCall<'_>) -> c_int {
        SQLITE_NOTFOUND
    }
    /// `xSectorSize`.
    fn sector_size(&mut self) -> c_int {
        4096
    }
    /// `xDeviceCharacteristics` (`SQLITE_IOCAP_*` bits).
    fn device_characteristics(&mut self) -> c_int {
        0
    }
    /// Whether the shared-memory methods below work (WAL mode needs them).
    /// Asked once, when the file is opened.
    fn has_shm(&self) -> bool {
        false
    }
    /// `xShmMap`: a raw result code; the region pointer goes to `*out`.
    fn shm_map(&mut self, _region: c_int, _size: c_int, _extend: bool, out: &mut *mut c_void) -> c_int {
        *out = ptr::null_mut();
        SQLITE_IOERR_SHMMAP
    }
    /// `xShmLock`: a raw result code.
    fn shm_lock(&mut self, _offset: c_int, _n: c_int, _flags: c_int) -> c_int {
        SQLITE_IOERR
    }
    /// `xShmBarrier`.
    fn shm_barrier(&mut self) {}
    /// `xShmUnmap`: a raw result code.
    fn shm_unmap(&mut self, _delete: bool) -> c_int {
        SQLITE_OK
    }
    /// Called once from `xClose`; the backend is dropped right after.
    fn close(&mut self) -> IoResult<()> {
        Ok(())
    }
}

/// Every file of a VFS, when the host supplies them (the lab's power-cut simulation): opens,
/// deletions and existence checks of all files, main databases and journals included, go
/// here instead of to the underlying VFS.
pub trait FileSystem: Send + Sync {
    /// Opens `name` (`None`: an anonymous temporary file) with SQLite's open `flags`;
    /// returns the file and the out-flags.
    fn open(&self, name: Option<&[u8]>, flags: c_int) -> IoResult<(Box<dyn DbBackend>, c_int)>;
    /// Deletes `name` (`SQLITE_IOERR_DELETE_NOENT` if it does not exist).
    fn delete(&self, name: &[u8], sync_dir: bool) -> IoResult<()>;
    /// Whether `name` exists.
    fn exists(&self, name: &[u8]) -> IoResult<bool>;
}

/// I/O through pass-through files (of every VFS this crate registered in this process):
/// what the lab's shim counts for stock SQLite modes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PassThroughIo {
    pub write_calls: u64,
    pub bytes_written: u64,
    /// `xSync` calls (each an fsync or fdatasync in SQLite's unix VFS), and `xDelete` calls
    /// that sync the directory (an fsync of it).
    pub syncs: u64,
}

static PT_WRITE_CALLS: AtomicU64 = AtomicU64::new(0);
static PT_BYTES_WRITTEN: AtomicU64 = AtomicU64::new(0);
static PT_SYNCS: AtomicU64 = AtomicU64::new(0);

/// A write through a pass-through file.
pub(crate) fn count_passthrough_write(bytes: usize) {
    PT_WRITE_CALLS.fetch_add(1, Relaxed);
    PT_BYTES_WRITTEN.fetch_add(bytes as u64, Relaxed);
}

/// A flush a backend did itself on a pass-through file (e.g. an F2FS atomic commit).
pub(crate) fn count_passthrough_sync() {
    PT_SYNCS.fetch_add(1, Relaxed);
}

/// A file deleted with its directory synced (SQLite's unix VFS fsyncs the directory).
pub(crate) fn count_directory_sync() {
    PT_SYNCS.fetch_add(1, Relaxed);
}

/// The totals so far (take differences around what you measure).
pub fn passthrough_io() -> PassThroughIo {
    PassThroughIo {
        write_calls: PT_WRITE_CALLS.load(Relaxed),
        bytes_written: PT_BYTES_WRITTEN.load(Relaxed),
        syncs: PT_SYNCS.load(Relaxed),
    }
}

/// An opened main database file.
pub struct Opened {
    pub backend: Box<dyn DbBackend>,
    /// What `xOpen` reports in `*pOutFlags` (usually the request's flags).
    pub out_flags: c_int,
}

/// Where a journal named in `xAccess` / `xDelete` lives, for a factory that decides it
/// per database ([`MainDbFactory::journal_route`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JournalRoute {
    /// Private to its connection, in memory: it never exists by name.
    Private,
    /// On the underlying VFS, as in stock SQLite.
    Disk,
    /// On the underlying VFS if it is there; deleting a missing one succeeds (a
    /// super-journal that stayed in memory).
    DiskIfPresent,
    /// Exists for this process (a live transaction names it), on the underlying VFS if
    /// it is there, otherwise as an empty file; deleting a missing one succeeds.
    InUse,
}

/// Chooses the backend for each main database file the VFS opens.
pub trait MainDbFactory: Send + Sync {
    fn open(&self, req: &OpenRequest) -> IoResult<Opened>;
    /// Whether journals are private to the handle that opened them (never
    /// visible to xAccess/xDelete or other connections). True for a backend
    /// that commits atomically itself, where no journal can ever be hot.
    fn private_journals(&self) -> bool {
        false
    }
    /// For a factory whose databases are not all alike (some plain files with journals on
    /// disk): where the journal or super-journal `name` lives. `None`: the VFS's own rule.
    fn journal_route(&self, _name: &[u8]) -> Option<JournalRoute> {
        None
    }
    /// Opens a rollback journal or super-journal itself; `None`: the VFS's own rule.
    fn open_journal(&self, _req: &OpenRequest) -> Option<IoResult<Opened>> {
        None
    }
}

/// The underlying VFS with some of its device characteristics hidden: e.g.
/// `SQLITE_IOCAP_BATCH_ATOMIC`, so that a SQLite built with batch atomic writes behaves on
/// F2FS as the stock builds (without them) do.
#[derive(Clone, Copy, Debug, Default)]
pub struct MaskedPassThroughFactory {
    /// `SQLITE_IOCAP_*` bits main database files do not report.
    pub hidden_caps: c_int,
}

impl MainDbFactory for MaskedPassThroughFactory {
    fn open(&self, req: &OpenRequest) -> IoResult<Opened> {
        let (mut file, out_flags) = req.open_passthrough_file()?;
        file.hide_caps(self.hidden_caps);
        Ok(Opened {
            backend: Box::new(file),
            out_flags,
        })
    }
}

/// The first backend: the underlying VFS, unchanged.
#[derive(Clone, Copy, Debug, Default)]
pub struct PassThroughFactory;

impl MainDbFactory for PassThroughFactory {
    fn open(&self, req: &OpenRequest) -> IoResult<Opened> {
        req.open_passthrough()
    }
}
