//! A file of the underlying VFS, served through its own `sqlite3_io_methods`.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::ffi::{
    sqlite3_file, sqlite3_io_methods, SQLITE_IOERR, SQLITE_IOERR_SHMMAP, SQLITE_NOTFOUND, SQLITE_OK,
};
use super::file_control::FileControlCall;
use super::handles::{BaseVfs, SqliteName};
use super::traits::{check, DbBackend, IoResult, LockLevel};

/// A file of the underlying VFS, every method forwarded unchanged.
pub struct PassThrough {
    /// The underlying VFS's `sqlite3_file` subclass: `szOsFile` bytes,
    /// 8-byte aligned, at a stable heap address for the file's lifetime.
    mem: Box<[u64]>,
    open: bool,
    /// `SQLITE_IOCAP_*` bits not reported to SQLite (see [`crate::MaskedPassThroughFactory`]).
    hidden_caps: c_int,
}

impl PassThrough {
    /// Opens `name` with the underlying VFS `base`; returns the file and the
    /// out-flags `base` reported.
    pub(crate) fn open(base: BaseVfs, name: SqliteName, flags: c_int) -> IoResult<(Self, c_int)> {
        let base_ref = base.get();
        let x_open = base_ref.xOpen.ok_or(SQLITE_IOERR)?;
        let words = usize::try_from(base_ref.szOsFile).unwrap_or(0).div_ceil(8).max(1);
        let mut this = Self {
            mem: vec![0u64; words].into_boxed_slice(),
            open: false,
            hidden_caps: 0,
        };
        let mut out_flags = 0;
        // SAFETY: `this.file()` points to zeroed, aligned memory of at least
        // `szOsFile` bytes, as xOpen requires; `name` is SQLite's own name pointer.
        let rc = unsafe { x_open(base.as_ptr(), name.as_ptr(), this.file(), flags, &mut out_flags) };
        // SQLite's rule: if xOpen set pMethods, xClose must be called even
        // when xOpen failed, so mark the file open in that case and let
        // `Drop` close it.
        this.open = !this.methods_ptr().is_null();
        check(rc)?;
        if !this.open {
            return Err(SQLITE_IOERR);
        }
        Ok((this, out_flags))
    }

    /// Hides `SQLITE_IOCAP_*` bits from SQLite (see [`crate::MaskedPassThroughFactory`]).
    pub(crate) fn hide_caps(&mut self, caps: c_int) {
        self.hidden_caps = caps;
    }

    fn file(&mut self) -> *mut sqlite3_file {
        self.mem.as_mut_ptr().cast()
    }

    /// The file descriptor, if the underlying VFS is SQLite's unix VFS. Its `unixFile` begins
    /// `{ pMethod, pVfs, pInode, int h, ... }` (unchanged since 3.7), so `h` is the low half
    /// of the fourth word on a 64-bit little-endian machine. A layout guess: callers must
    /// confirm it (e.g. `fstat` against the path) before using the descriptor.
    pub fn unix_fd_candidate(&self) -> Option<i32> {
        if !self.open || !cfg!(all(target_pointer_width = "64", target_endian = "little")) {
            return None;
        }
        let word = *self.mem.get(3)?;
        i32::try_from(word & 0xffff_ffff).ok().filter(|fd| *fd >= 0)
    }

    fn methods_ptr(&self) -> *const sqlite3_io_methods {
        // SAFETY: `mem` is at least one aligned word, and its first word is the
        // `pMethods` field of the `sqlite3_file` header.
        unsafe { (*self.mem.as_ptr().cast::<sqlite3_file>()).pMethods }
    }

    /// The underlying file's method table, while it is open.
    fn methods(&self) -> IoResult<&sqlite3_io_methods> {
        if !self.open {
            return Err(SQLITE_IOERR);
        }
        // SAFETY: an open file's pMethods points to the base VFS's method
        // table, which outlives the file.
        unsafe { self.methods_ptr().as_ref() }.ok_or(SQLITE_IOERR)
    }
}

impl Drop for PassThrough {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

/// Picks a method out of the underlying table, or fails with `SQLITE_IOERR`.
macro_rules! method {
    ($self:ident . $name:ident) => {
        $self.methods()?.$name.ok_or(SQLITE_IOERR)?
    };
}

impl DbBackend for PassThrough {
    fn read(&mut self, buf: &mut [u8], offset: u64) -> IoResult<()> {
        let f = method!(self.xRead);
        let amt = c_int::try_from(buf.len()).map_err(|_| SQLITE_IOERR)?;
        let off = i64::try_from(offset).map_err(|_| SQLITE_IOERR)?;
        // SAFETY: open file; `buf` is writable for `amt` bytes.
        check(unsafe { f(self.file(), buf.as_mut_ptr().cast(), amt, off) })
    }

    fn write(&mut self, buf: &[u8], offset: u64) -> IoResult<()> {
        let f = method!(self.xWrite);
        let amt = c_int::try_from(buf.len()).map_err(|_| SQLITE_IOERR)?;
        let off = i64::try_from(offset).map_err(|_| SQLITE_IOERR)?;
        count_passthrough_write(buf.len());
        // SAFETY: open file; `buf` is readable for `amt` bytes.
        check(unsafe { f(self.file(), buf.as_ptr().cast(), amt, off) })
    }

    fn truncate(&mut self, size: u64) -> IoResult<()> {
        let f = method!(self.xTruncate);
        let size = i64::try_from(size).map_err(|_| SQLITE_IOERR)?;
        // SAFETY: open file.
        check(unsafe { f(self.file(), size) })
    }

    fn sync(&mut self, flags: c_int) -> IoResult<()> {
        let f = method!(self.xSync);
        count_passthrough_sync();
        // SAFETY: open file.
        check(unsafe { f(self.file(), flags) })
    }

    fn size(&mut self) -> IoResult<u64> {
        let f = method!(self.xFileSize);
        let mut size = 0i64;
        // SAFETY: open file; `size` is a valid out-pointer.
        check(unsafe { f(self.file(), &mut size) })?;
        u64::try_from(size).map_err(|_| SQLITE_IOERR)
    }

    fn lock(&mut self, level: LockLevel) -> IoResult<()> {
        let f = method!(self.xLock);
        // SAFETY: open file.
        check(unsafe { f(self.file(), level.raw()) })
    }

    fn unlock(&mut self, level: LockLevel) -> IoResult<()> {
        let f = method!(self.xUnlock);
        // SAFETY: open file.
        check(unsafe { f(self.file(), level.raw()) })
    }

    fn check_reserved_lock(&mut self) -> IoResult<bool> {
        let f = method!(self.xCheckReservedLock);
        let mut out = 0;
        // SAFETY: open file; `out` is a valid out-pointer.
        check(unsafe { f(self.file(), &mut out) })?;
        Ok(out != 0)
    }

    fn file_control(&mut self, call: &FileControlCall<'_>) -> c_int {
        let f = match self.methods().map(|m| m.xFileControl) {
            Ok(Some(f)) => f,
            _ => return SQLITE_NOTFOUND,
        };
        let (op, arg) = call.raw();
        // SAFETY: open file; `op` and `arg` are passed on exactly as SQLite gave them.
        unsafe { f(self.file(), op, arg) }
    }

    fn sector_size(&mut self) -> c_int {
        match self.methods().map(|m| m.xSectorSize) {
            // SAFETY: open file.
            Ok(Some(f)) => unsafe { f(self.file()) },
            _ => 4096,
        }
    }

    fn device_characteristics(&mut self) -> c_int {
        match self.methods().map(|m| m.xDeviceCharacteristics) {
            // SAFETY: open file.
            Ok(Some(f)) => (unsafe { f(self.file()) }) & !self.hidden_caps,
            _ => 0,
        }
    }

    fn has_shm(&self) -> bool {
        self.methods()
            .is_ok_and(|m| m.iVersion >= 2 && m.xShmMap.is_some() && m.xShmLock.is_some())
    }

    fn shm_map(&mut self, region: c_int, size: c_int, extend: bool, out: &mut *mut c_void) -> c_int {
        let f = match self.methods().map(|m| (m.iVersion >= 2, m.xShmMap)) {
            Ok((true, Some(f))) => f,
            _ => return SQLITE_IOERR_SHMMAP,
        };
        // SAFETY: open file with a version-2 table; `out` is a valid out-pointer.
        unsafe { f(self.file(), region, size, c_int::from(extend), out) }
    }

    fn shm_lock(&mut self, offset: c_int, n: c_int, flags: c_int) -> c_int {
        match self.methods().map(|m| (m.iVersion >= 2, m.xShmLock)) {
            // SAFETY: open file with a version-2 table.
            Ok((true, Some(f))) => unsafe { f(self.file(), offset, n, flags) },
            _ => SQLITE_IOERR,
        }
    }

    fn shm_barrier(&mut self) {
        if let Ok((true, Some(f))) = self.methods().map(|m| (m.iVersion >= 2, m.xShmBarrier)) {
            // SAFETY: open file with a version-2 table.
            unsafe { f(self.file()) }
        }
    }

    fn shm_unmap(&mut self, delete: bool) -> c_int {
        match self.methods().map(|m| (m.iVersion >= 2, m.xShmUnmap)) {
            // SAFETY: open file with a version-2 table.
            Ok((true, Some(f))) => unsafe { f(self.file(), c_int::from(delete)) },
            _ => SQLITE_OK,
        }
    }

    fn close(&mut self) -> IoResult<()> {
        if !self.open {
            return Ok(());
        }
        let f = self.methods()?.xClose;
        self.open = false;
        match f {
            // SAFETY: the file is open and is closed exactly once.
            Some(f) => check(unsafe { f(self.file()) }),
            None => Ok(()),
        }
    }
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
