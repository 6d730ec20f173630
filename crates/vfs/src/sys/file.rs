//! The `sqlite3_file` subclass and its `sqlite3_io_methods`: thin C shims that
//! find the file's [`DbBackend`] and call it, each under [`guard`].

use std::ffi::{c_int, c_void};
use std::ptr;

use super::ffi::{
    sqlite3_file, sqlite3_int64, sqlite3_io_methods, SQLITE_IOERR, SQLITE_IOERR_READ, SQLITE_IOERR_SHMMAP,
    SQLITE_IOERR_WRITE, SQLITE_MISUSE, SQLITE_NOTFOUND, SQLITE_OK,
};
use super::file_control::FileControlCall;
use super::guard::guard;
use super::traits::{DbBackend, LockLevel};

/// Our `sqlite3_file` subclass. SQLite allocates `szOsFile` =
/// `size_of::<OnesyncFile>()` bytes (8-byte aligned) and passes them to xOpen
/// uninitialised; xOpen writes the whole struct, xClose takes the backend out.
#[repr(C)]
pub(crate) struct OnesyncFile {
    /// Must come first: SQLite sees only this header.
    base: sqlite3_file,
    backend: Option<Box<dyn DbBackend>>,
}

/// Fills SQLite's file memory for a freshly opened backend.
///
/// # Safety
/// `file` must be the `szOsFile`-byte buffer SQLite passed to xOpen.
pub(crate) unsafe fn install(file: *mut sqlite3_file, backend: Box<dyn DbBackend>) {
    let methods = if backend.has_shm() {
        &IO_METHODS_SHM
    } else {
        &IO_METHODS
    };
    // SAFETY: the caller guarantees `file` is SQLite's buffer for this VFS,
    // sized and aligned for `OnesyncFile`; `write` does not read the old bytes.
    unsafe {
        file.cast::<OnesyncFile>().write(OnesyncFile {
            base: sqlite3_file { pMethods: methods },
            backend: Some(backend),
        });
    }
}

/// Marks SQLite's file memory as not opened (xOpen failed): SQLite then
/// does not call xClose.
///
/// # Safety
/// As for [`install`].
pub(crate) unsafe fn clear(file: *mut sqlite3_file) {
    // SAFETY: as for `install`; only the header is written.
    unsafe { (*file).pMethods = ptr::null() };
}

/// The backend of an open file, or `None` for a closed/foreign pointer.
///
/// # Safety
/// `file` must be null or a file this VFS opened (its pMethods is ours), and
/// the returned reference must not outlive that call from SQLite.
unsafe fn backend<'a>(file: *mut sqlite3_file) -> Option<&'a mut (dyn DbBackend + 'static)> {
    // SAFETY: per the contract, `file` is null or an `OnesyncFile` that xOpen
    // initialised; SQLite never calls one file's methods concurrently.
    let file = unsafe { file.cast::<OnesyncFile>().as_mut() }?;
    file.backend.as_deref_mut()
}

fn rc(result: Result<(), c_int>) -> c_int {
    match result {
        Ok(()) => SQLITE_OK,
        Err(code) => code,
    }
}

/// Runs `f` on the file's backend under a panic guard.
///
/// # Safety
/// As for [`backend`].
unsafe fn with(file: *mut sqlite3_file, err: c_int, f: impl FnOnce(&mut dyn DbBackend) -> c_int) -> c_int {
    guard(err, || {
        // SAFETY: forwarded contract of `with`.
        match unsafe { backend(file) } {
            Some(b) => f(b),
            None => SQLITE_MISUSE,
        }
    })
}

unsafe extern "C" fn x_close(file: *mut sqlite3_file) -> c_int {
    guard(SQLITE_IOERR, || {
        // SAFETY: SQLite calls xClose once, on a file this VFS opened.
        let Some(file) = (unsafe { file.cast::<OnesyncFile>().as_mut() }) else {
            return SQLITE_MISUSE;
        };
        match file.backend.take() {
            Some(mut b) => rc(b.close()),
            None => SQLITE_OK,
        }
    })
}

unsafe extern "C" fn x_read(
    file: *mut sqlite3_file,
    buf: *mut c_void,
    amt: c_int,
    off: sqlite3_int64,
) -> c_int {
    let op = |b: &mut dyn DbBackend| {
        let (Ok(len), Ok(off)) = (usize::try_from(amt), u64::try_from(off)) else {
            return SQLITE_IOERR_READ;
        };
        if buf.is_null() {
            return SQLITE_IOERR_READ;
        }
        // SAFETY: SQLite's xRead contract: `buf` is writable for `amt` bytes.
        let buf = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), len) };
        rc(b.read(buf, off))
    };
    // SAFETY: SQLite calls io methods only on files this VFS opened.
    unsafe { with(file, SQLITE_IOERR_READ, op) }
}

unsafe extern "C" fn x_write(
    file: *mut sqlite3_file,
    buf: *const c_void,
    amt: c_int,
    off: sqlite3_int64,
) -> c_int {
    let op = |b: &mut dyn DbBackend| {
        let (Ok(len), Ok(off)) = (usize::try_from(amt), u64::try_from(off)) else {
            return SQLITE_IOERR_WRITE;
        };
        if buf.is_null() {
            return SQLITE_IOERR_WRITE;
        }
        // SAFETY: SQLite's xWrite contract: `buf` is readable for `amt` bytes.
        let buf = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) };
        rc(b.write(buf, off))
    };
    // SAFETY: SQLite calls io methods only on files this VFS opened.
    unsafe { with(file, SQLITE_IOERR_WRITE, op) }
}

unsafe extern "C" fn x_truncate(file: *mut sqlite3_file, size: sqlite3_int64) -> c_int {
    let op = |b: &mut dyn DbBackend| match u64::try_from(size) {
        Ok(size) => rc(b.truncate(size)),
        Err(_) => SQLITE_IOERR,
    };
    // SAFETY: SQLite calls io methods only on files this VFS opened.
    unsafe { with(file, SQLITE_IOERR, op) }
}

unsafe extern "C" fn x_sync(file: *mut sqlite3_file, flags: c_int) -> c_int {
    // SAFETY: SQLite calls io methods only on files this VFS opened.
    unsafe { with(file, SQLITE_IOERR, |b| rc(b.sync(flags))) }
}

unsafe extern "C" fn x_file_size(file: *mut sqlite3_file, out: *mut sqlite3_int64) -> c_int {
    let op = |b: &mut dyn DbBackend| {
        let size = match b.size().and_then(|s| i64::try_from(s).map_err(|_| SQLITE_IOERR)) {
            Ok(size) => size,
            Err(code) => return code,
        };
        // SAFETY: SQLite passes a valid out-pointer (checked for null).
        match unsafe { out.as_mut() } {
            Some(out) => {
                *out = size;
                SQLITE_OK
            }
            None => SQLITE_MISUSE,
        }
    };
    // SAFETY: SQLite calls io methods only on files this VFS opened.
    unsafe { with(file, SQLITE_IOERR, op) }
}

unsafe extern "C" fn x_lock(file: *mut sqlite3_file, level: c_int) -> c_int {
    let op = |b: &mut dyn DbBackend| match LockLevel::from_raw(level) {
        Some(level) => rc(b.lock(level)),
        None => SQLITE_MISUSE,
    };
    // SAFETY: SQLite calls io methods only on files this VFS opened.
    unsafe { with(file, SQLITE_IOERR, op) }
}

unsafe extern "C" fn x_unlock(file: *mut sqlite3_file, level: c_int) -> c_int {
    let op = |b: &mut dyn DbBackend| match LockLevel::from_raw(level) {
        Some(level) => rc(b.unlock(level)),
        None => SQLITE_MISUSE,
    };
    // SAFETY: SQLite calls io methods only on files this VFS opened.
    unsafe { with(file, SQLITE_IOERR, op) }
}

unsafe extern "C" fn x_check_reserved_lock(file: *mut sqlite3_file, out: *mut c_int) -> c_int {
    let op = |b: &mut dyn DbBackend| {
        let held = match b.check_reserved_lock() {
            Ok(held) => held,
            Err(code) => return code,
        };
        // SAFETY: SQLite passes a valid out-pointer (checked for null).
        match unsafe { out.as_mut() } {
            Some(out) => {
                *out = c_int::from(held);
                SQLITE_OK
            }
            None => SQLITE_MISUSE,
        }
    };
    // SAFETY: SQLite calls io methods only on files this VFS opened.
    unsafe { with(file, SQLITE_IOERR, op) }
}

unsafe extern "C" fn x_file_control(file: *mut sqlite3_file, op: c_int, arg: *mut c_void) -> c_int {
    let control = |b: &mut dyn DbBackend| {
        // SAFETY: SQLite's arguments of this xFileControl call, used only during it.
        let call = unsafe { FileControlCall::decode(op, arg) };
        b.file_control(&call)
    };
    // SAFETY: SQLite calls io methods only on files this VFS opened.
    unsafe { with(file, SQLITE_NOTFOUND, control) }
}

unsafe extern "C" fn x_sector_size(file: *mut sqlite3_file) -> c_int {
    // SAFETY: SQLite calls io methods only on files this VFS opened.
    unsafe { with(file, 4096, |b| b.sector_size()) }
}

unsafe extern "C" fn x_device_characteristics(file: *mut sqlite3_file) -> c_int {
    // SAFETY: SQLite calls io methods only on files this VFS opened.
    unsafe { with(file, 0, |b| b.device_characteristics()) }
}

unsafe extern "C" fn x_shm_map(
    file: *mut sqlite3_file,
    region: c_int,
    size: c_int,
    extend: c_int,
    out: *mut *mut c_void,
) -> c_int {
    let op = |b: &mut dyn DbBackend| {
        // SAFETY: SQLite passes a valid out-pointer (checked for null).
        match unsafe { out.as_mut() } {
            Some(out) => b.shm_map(region, size, extend != 0, out),
            None => SQLITE_MISUSE,
        }
    };
    // SAFETY: SQLite calls io methods only on files this VFS opened.
    unsafe { with(file, SQLITE_IOERR_SHMMAP, op) }
}

unsafe extern "C" fn x_shm_lock(file: *mut sqlite3_file, offset: c_int, n: c_int, flags: c_int) -> c_int {
    // SAFETY: SQLite calls io methods only on files this VFS opened.
    unsafe { with(file, SQLITE_IOERR, |b| b.shm_lock(offset, n, flags)) }
}

unsafe extern "C" fn x_shm_barrier(file: *mut sqlite3_file) {
    let op = |b: &mut dyn DbBackend| {
        b.shm_barrier();
        SQLITE_OK
    };
    // SAFETY: SQLite calls io methods only on files this VFS opened.
    unsafe { with(file, SQLITE_OK, op) };
}

unsafe extern "C" fn x_shm_unmap(file: *mut sqlite3_file, delete: c_int) -> c_int {
    // SAFETY: SQLite calls io methods only on files this VFS opened.
    unsafe { with(file, SQLITE_IOERR, |b| b.shm_unmap(delete != 0)) }
}

/// No memory-mapped pages: `*pp = NULL` tells SQLite to fall back to xRead.
unsafe extern "C" fn x_fetch(
    _file: *mut sqlite3_file,
    _off: sqlite3_int64,
    _amt: c_int,
    pp: *mut *mut c_void,
) -> c_int {
    guard(SQLITE_IOERR, || {
        // SAFETY: SQLite passes a valid out-pointer (checked for null).
        if let Some(pp) = unsafe { pp.as_mut() } {
            *pp = ptr::null_mut();
        }
        SQLITE_OK
    })
}

unsafe extern "C" fn x_unfetch(_file: *mut sqlite3_file, _off: sqlite3_int64, _p: *mut c_void) -> c_int {
    SQLITE_OK
}

/// Every method; files whose backend has shared memory (WAL-capable) use it.
const ALL_METHODS: sqlite3_io_methods = sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(x_close),
    xRead: Some(x_read),
    xWrite: Some(x_write),
    xTruncate: Some(x_truncate),
    xSync: Some(x_sync),
    xFileSize: Some(x_file_size),
    xLock: Some(x_lock),
    xUnlock: Some(x_unlock),
    xCheckReservedLock: Some(x_check_reserved_lock),
    xFileControl: Some(x_file_control),
    xSectorSize: Some(x_sector_size),
    xDeviceCharacteristics: Some(x_device_characteristics),
    xShmMap: Some(x_shm_map),
    xShmLock: Some(x_shm_lock),
    xShmBarrier: Some(x_shm_barrier),
    xShmUnmap: Some(x_shm_unmap),
    xFetch: Some(x_fetch),
    xUnfetch: Some(x_unfetch),
};

static IO_METHODS_SHM: sqlite3_io_methods = ALL_METHODS;

/// Files without shared memory: SQLite then refuses WAL mode for them (it
/// checks `xShmMap` before switching).
static IO_METHODS: sqlite3_io_methods = sqlite3_io_methods {
    xShmMap: None,
    xShmLock: None,
    xShmBarrier: None,
    xShmUnmap: None,
    ..ALL_METHODS
};
