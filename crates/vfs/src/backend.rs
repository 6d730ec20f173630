//! What an open file of the `onesync` VFS is served by.
//!
//! Every file SQLite opens through this VFS is a [`DbBackend`]: the journals
//! are in-memory files, everything else is a [`PassThrough`] to the VFS that
//! was the default at registration. The main database file is opened through
//! a [`MainDbFactory`], the seam where a later backend (e.g. a page store that
//! provides `SQLITE_IOCAP_BATCH_ATOMIC`) replaces the pass-through.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::ffi::{
    sqlite3_file, sqlite3_io_methods, sqlite3_vfs, SQLITE_IOERR, SQLITE_IOERR_SHMMAP, SQLITE_LOCK_EXCLUSIVE,
    SQLITE_LOCK_NONE, SQLITE_LOCK_PENDING, SQLITE_LOCK_RESERVED, SQLITE_LOCK_SHARED, SQLITE_NOTFOUND,
    SQLITE_OK,
};

/// A SQLite result code as the error: `Err(SQLITE_IOERR_WRITE)` etc.
pub type IoResult<T> = Result<T, c_int>;

fn check(rc: c_int) -> IoResult<()> {
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
    /// `xFileControl`: a raw result code, `SQLITE_NOTFOUND` for an unknown op.
    ///
    /// # Safety
    /// `arg` is what SQLite passed with `op`: valid as that op documents
    /// (often null, an `int*`, or a `char**`), and nothing more.
    unsafe fn file_control(&mut self, _op: c_int, _arg: *mut c_void) -> c_int {
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

/// A file of the underlying VFS, every method forwarded unchanged.
pub struct PassThrough {
    /// The underlying VFS's `sqlite3_file` subclass: `szOsFile` bytes,
    /// 8-byte aligned, at a stable heap address for the file's lifetime.
    mem: Box<[u64]>,
    open: bool,
    /// `SQLITE_IOCAP_*` bits not reported to SQLite (see [`MaskedPassThroughFactory`]).
    hidden_caps: c_int,
}

impl PassThrough {
    /// Opens `name` with the underlying VFS `base`; returns the file and the
    /// out-flags `base` reported.
    ///
    /// # Safety
    /// `base` must be a registered VFS that outlives the returned file, and
    /// `name` null or a filename SQLite handed to `xOpen` (which stays valid
    /// until the file is closed).
    pub(crate) unsafe fn open(
        base: *mut sqlite3_vfs,
        name: *const c_char,
        flags: c_int,
    ) -> IoResult<(Self, c_int)> {
        // SAFETY: the caller guarantees `base` is a live VFS.
        let base_ref = unsafe { base.as_ref() }.ok_or(SQLITE_IOERR)?;
        let x_open = base_ref.xOpen.ok_or(SQLITE_IOERR)?;
        let words = usize::try_from(base_ref.szOsFile).unwrap_or(0).div_ceil(8).max(1);
        let mut this = Self {
            mem: vec![0u64; words].into_boxed_slice(),
            open: false,
            hidden_caps: 0,
        };
        let mut out_flags = 0;
        // SAFETY: `this.file()` points to zeroed, aligned memory of at least
        // `szOsFile` bytes, as xOpen requires; `name` is valid per the contract.
        let rc = unsafe { x_open(base, name, this.file(), flags, &mut out_flags) };
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
        PT_WRITE_CALLS.fetch_add(1, Relaxed);
        PT_BYTES_WRITTEN.fetch_add(buf.len() as u64, Relaxed);
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
        PT_SYNCS.fetch_add(1, Relaxed);
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

    unsafe fn file_control(&mut self, op: c_int, arg: *mut c_void) -> c_int {
        let f = match self.methods().map(|m| m.xFileControl) {
            Ok(Some(f)) => f,
            _ => return SQLITE_NOTFOUND,
        };
        // SAFETY: open file; `arg` is passed through exactly as SQLite gave it.
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

/// A `SQLITE_FCNTL_PRAGMA` call as a backend sees it: the pragma's name and value
/// (lowercased), and the slot its answer goes to.
pub(crate) struct PragmaCall {
    pub name: Option<String>,
    pub value: Option<String>,
    slot: *mut *mut c_char,
}

impl PragmaCall {
    /// # Safety
    /// `args` is the `char*[3]` SQLite passed with `SQLITE_FCNTL_PRAGMA`: [0] the result
    /// slot, [1] the pragma name, [2] its value or null.
    pub(crate) unsafe fn new(args: *mut *mut c_char) -> Self {
        let text = |p: *mut c_char| {
            (!p.is_null()).then(|| {
                // SAFETY: per the contract, a NUL-terminated string (null was ruled out).
                let text = unsafe { CStr::from_ptr(p) };
                text.to_string_lossy().to_ascii_lowercase()
            })
        };
        // SAFETY: per the contract, the array has three entries.
        let (name, value) = unsafe { (*args.add(1), *args.add(2)) };
        Self {
            name: text(name),
            value: text(value),
            slot: args,
        }
    }

    /// Answers with `text` (the pragma's result row, or with `SQLITE_ERROR` its message).
    pub(crate) fn reply(&self, api: &crate::api::ApiTable, text: &str) {
        // SAFETY: slot [0] is SQLite's out-pointer; it frees what we put there with
        // sqlite3_free, so it comes from sqlite3_malloc (the API table's routine).
        unsafe { *self.slot = api.sqlite_string(text) };
    }
}

/// What `xOpen` of the main database file asks a [`MainDbFactory`] for.
pub struct OpenRequest {
    pub(crate) base: *mut sqlite3_vfs,
    pub(crate) name: *const c_char,
    pub(crate) flags: c_int,
}

impl OpenRequest {
    /// The database path (without URI parameters), if it has one.
    pub fn name(&self) -> Option<&CStr> {
        // SAFETY: `name` is null or the NUL-terminated filename SQLite passed
        // to xOpen, valid for at least as long as this request.
        (!self.name.is_null()).then(|| unsafe { CStr::from_ptr(self.name) })
    }

    /// The `SQLITE_OPEN_*` flags of the open.
    pub fn flags(&self) -> c_int {
        self.flags
    }

    /// Whether the underlying VFS is SQLite's unix VFS (or one of its
    /// variants: `unix-excl`, `unix-none`, ...).
    pub fn base_is_unix(&self) -> bool {
        // SAFETY: `base` is the registered default VFS (it outlives every
        // request); its zName is NUL-terminated or null.
        let name = unsafe { self.base.as_ref() }
            .filter(|b| !b.zName.is_null())
            // SAFETY: as above.
            .map(|b| unsafe { CStr::from_ptr(b.zName) });
        name.is_some_and(|n| n.to_bytes() == b"unix" || n.to_bytes().starts_with(b"unix-"))
    }

    /// Opens the file with the underlying VFS and returns it as such (for a
    /// backend that wraps it).
    pub fn open_passthrough_file(&self) -> IoResult<(PassThrough, c_int)> {
        // SAFETY: an `OpenRequest` is only built by this crate's xOpen with the
        // registered base VFS and SQLite's own filename pointer.
        unsafe { PassThrough::open(self.base, self.name, self.flags) }
    }

    /// Opens the file with the underlying VFS, unchanged: the pass-through
    /// backend.
    pub fn open_passthrough(&self) -> IoResult<Opened> {
        // SAFETY: an `OpenRequest` is only built by this crate's xOpen with the
        // registered base VFS and SQLite's own filename pointer.
        let (file, out_flags) = unsafe { PassThrough::open(self.base, self.name, self.flags) }?;
        Ok(Opened {
            backend: Box::new(file),
            out_flags,
        })
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
        file.hidden_caps = self.hidden_caps;
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
