//! The safe side of the C boundary: the traits and types the rest of the crate implements
//! and returns, which the shims in `sys` call and convert back into result codes.

use std::ffi::{c_int, c_void};
use std::ptr;

use super::ffi::{
    SQLITE_IOERR, SQLITE_IOERR_SHMMAP, SQLITE_LOCK_EXCLUSIVE, SQLITE_LOCK_NONE, SQLITE_LOCK_PENDING,
    SQLITE_LOCK_RESERVED, SQLITE_LOCK_SHARED, SQLITE_NOTFOUND, SQLITE_OK,
};
use super::file_control::FileControlCall;

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
    /// `xFileControl`, decoded ([`FileControl`](super::file_control::FileControl)): a raw result code, `SQLITE_NOTFOUND` for
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

/// An opened main database file.
pub struct Opened {
    pub backend: Box<dyn DbBackend>,
    /// What `xOpen` reports in `*pOutFlags` (usually the request's flags).
    pub out_flags: c_int,
}
