//! The `sqlite3_vfs` this crate registers and its C methods: each finds the registration's
//! state (`pAppData`, a [`VfsMethods`]) and calls its safe method, or forwards to the
//! underlying VFS.

use std::any::TypeId;
use std::ffi::{c_char, c_int, c_void, CString};
use std::mem::size_of;
use std::ptr;
use std::sync::Mutex;

use super::api::ApiTable;
use super::ffi::{
    sqlite3_file, sqlite3_int64, sqlite3_syscall_ptr, sqlite3_vfs, DlSymResult, SQLITE_CANTOPEN,
    SQLITE_ERROR, SQLITE_IOERR, SQLITE_IOERR_DELETE, SQLITE_MISUSE, SQLITE_NOTFOUND, SQLITE_OK,
};
use super::file::{self, OnesyncFile};
use super::guard::guard;
use super::handles::{BaseVfs, SqliteName};
use super::open_request::OpenRequest;
use super::registration::{RegisterError, Registered};
use super::traits::{DbBackend, IoResult};

/// Addresses of every `sqlite3_vfs` this crate registered, in any SQLite of
/// the process, with the type of its state. The lock also serialises find-then-register.
static REGISTERED: Mutex<Vec<(usize, TypeId)>> = Mutex::new(Vec::new());

/// What `pAppData` of a VFS registered by [`register_vfs`] serves: its
/// `xOpen`, `xDelete`, `xAccess` and `xSleep`; every other method forwards to [`Self::base`].
pub(crate) trait VfsMethods: Send + Sync + 'static {
    /// The underlying VFS.
    fn base(&self) -> BaseVfs;
    /// `xOpen`: the file and the out-flags.
    fn open(&self, req: &OpenRequest) -> IoResult<(Box<dyn DbBackend>, c_int)>;
    /// `xDelete`: a raw result code.
    fn delete(&self, name: SqliteName, sync_dir: bool) -> c_int;
    /// `xAccess`: a raw result code, the answer in `*out`.
    fn access(&self, name: SqliteName, flags: c_int, out: &mut c_int) -> c_int;
    /// `xSleep`: waits up to `micros` microseconds.
    fn sleep(micros: u64);
}

/// Registers a VFS called `name` with the SQLite behind `api`, served by the state
/// `make_state` builds from the underlying VFS (the default one). Idempotent per name: if
/// that SQLite already has a VFS called `name`, nothing changes.
pub(crate) fn register_vfs<S: VfsMethods>(
    api: &ApiTable,
    name: String,
    make_default: bool,
    make_state: impl FnOnce(BaseVfs) -> S,
) -> Result<Registered, RegisterError> {
    let name = CString::new(name).map_err(|_| RegisterError::new(SQLITE_MISUSE, "VFS name contains NUL"))?;
    let mut registered = REGISTERED
        .lock()
        .map_err(|_| RegisterError::new(SQLITE_ERROR, "registry lock poisoned"))?;

    // SAFETY: `vfs_find` is this SQLite's own routine; `name` is NUL-terminated.
    if !unsafe { (api.vfs_find)(name.as_ptr()) }.is_null() {
        return Ok(Registered::AlreadyRegistered);
    }
    // SAFETY: as above; a null name asks for the default VFS.
    let base = unsafe { (api.vfs_find)(ptr::null()) };
    // SAFETY: a VFS returned by `vfs_find` stays registered (SQLite never
    // frees one), so the reference is valid for the process.
    let Some(base_ref) = (unsafe { base.as_ref() }) else {
        return Err(RegisterError::new(SQLITE_ERROR, "SQLite has no default VFS"));
    };
    let sz_os_file = c_int::try_from(size_of::<OnesyncFile>())
        .map_err(|_| RegisterError::new(SQLITE_ERROR, "file struct too large"))?;

    // SAFETY: returned by `vfs_find`, so registered (SQLite never frees one); non-null.
    let base = unsafe { BaseVfs::new(base) }
        .ok_or_else(|| RegisterError::new(SQLITE_ERROR, "SQLite has no default VFS"))?;
    let state = Box::into_raw(Box::new(make_state(base)));
    let z_name = name.into_raw();
    let vfs = Box::into_raw(Box::new(sqlite3_vfs {
        iVersion: 3,
        szOsFile: sz_os_file,
        mxPathname: base_ref.mxPathname,
        pNext: ptr::null_mut(),
        zName: z_name,
        pAppData: state.cast(),
        xOpen: Some(x_open::<S>),
        xDelete: Some(x_delete::<S>),
        xAccess: Some(x_access::<S>),
        xFullPathname: Some(x_full_pathname::<S>),
        xDlOpen: Some(x_dl_open::<S>),
        xDlError: Some(x_dl_error::<S>),
        xDlSym: Some(x_dl_sym::<S>),
        xDlClose: Some(x_dl_close::<S>),
        xRandomness: Some(x_randomness::<S>),
        xSleep: Some(x_sleep::<S>),
        xCurrentTime: Some(x_current_time::<S>),
        xGetLastError: Some(x_get_last_error::<S>),
        xCurrentTimeInt64: Some(x_current_time_int64::<S>),
        xSetSystemCall: Some(x_set_system_call::<S>),
        xGetSystemCall: Some(x_get_system_call::<S>),
        xNextSystemCall: Some(x_next_system_call::<S>),
    }));

    // SAFETY: `vfs` is a fully initialised version-3 VFS that is never freed
    // once registered; `vfs_register` is this SQLite's own routine.
    let rc = unsafe { (api.vfs_register)(vfs, c_int::from(make_default)) };
    if rc != SQLITE_OK {
        // SAFETY: SQLite refused the VFS, so nothing else refers to these
        // three allocations; each is reclaimed exactly once.
        unsafe {
            drop(Box::from_raw(vfs));
            drop(Box::from_raw(state));
            drop(CString::from_raw(z_name));
        }
        return Err(RegisterError::new(rc, "sqlite3_vfs_register failed"));
    }
    registered.push((vfs as usize, TypeId::of::<S>()));
    Ok(Registered::New)
}

/// The state of the VFS called `name` in the SQLite behind `api`, if that VFS was
/// registered by [`register_vfs`] with a state of type `S`.
pub(crate) fn registered_state<S: VfsMethods>(api: &ApiTable, name: &str) -> Option<&'static S> {
    let name = CString::new(name).ok()?;
    let registered = REGISTERED.lock().ok()?;
    // SAFETY: `vfs_find` is this SQLite's own routine; `name` is NUL-terminated.
    let vfs = unsafe { (api.vfs_find)(name.as_ptr()) };
    if vfs.is_null() || !registered.contains(&(vfs as usize, TypeId::of::<S>())) {
        return None;
    }
    // SAFETY: `vfs` is one this crate registered with a state of type `S`, so its
    // pAppData is a leaked `S` that lives for the rest of the process.
    unsafe { state::<S>(vfs) }
}

/// The state of a VFS this crate registered.
///
/// # Safety
/// `vfs` must be null or a VFS registered by [`register_vfs`] with a state of type `S`.
unsafe fn state<'a, S: VfsMethods>(vfs: *mut sqlite3_vfs) -> Option<&'a S> {
    // SAFETY: per the contract, a non-null `vfs` is ours and its pAppData is a
    // leaked `S` that is never freed.
    unsafe { vfs.as_ref()?.pAppData.cast::<S>().as_ref() }
}

/// The underlying VFS of one of ours, as a pointer and a reference.
///
/// # Safety
/// As for [`state`].
unsafe fn base<'a, S: VfsMethods>(vfs: *mut sqlite3_vfs) -> Option<(*mut sqlite3_vfs, &'a sqlite3_vfs)> {
    // SAFETY: forwarded contract; the base VFS stays registered forever.
    let base = unsafe { state::<S>(vfs) }?.base().as_ptr();
    // SAFETY: as above.
    unsafe { base.as_ref() }.map(|r| (base, r))
}

unsafe extern "C" fn x_open<S: VfsMethods>(
    vfs: *mut sqlite3_vfs,
    name: *const c_char,
    file: *mut sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    if file.is_null() {
        return SQLITE_MISUSE;
    }
    // SAFETY: `file` is SQLite's szOsFile buffer for this open. Clearing
    // pMethods first means a failure anywhere below leaves "not opened".
    unsafe { file::clear(file) };
    guard(SQLITE_CANTOPEN, || {
        // SAFETY: SQLite calls xOpen only on this VFS, which we registered with a state `S`.
        let Some(state) = (unsafe { state::<S>(vfs) }) else {
            return SQLITE_MISUSE;
        };
        let req = OpenRequest {
            base: state.base(),
            // SAFETY: `name` is exactly the filename SQLite passed to this xOpen, valid
            // until the file is closed.
            name: unsafe { SqliteName::new(name) },
            flags,
        };
        match state.open(&req) {
            Ok((backend, reported)) => {
                // SAFETY: `file` is SQLite's szOsFile buffer for this open.
                unsafe { file::install(file, backend) };
                // SAFETY: null or a valid out-pointer, per xOpen's contract.
                if let Some(out) = unsafe { out_flags.as_mut() } {
                    *out = reported;
                }
                SQLITE_OK
            }
            Err(rc) => rc,
        }
    })
}

unsafe extern "C" fn x_delete<S: VfsMethods>(
    vfs: *mut sqlite3_vfs,
    name: *const c_char,
    sync_dir: c_int,
) -> c_int {
    guard(SQLITE_IOERR_DELETE, || {
        // SAFETY: SQLite calls xDelete only on this VFS, with a NUL-terminated name.
        let (Some(state), false) = (unsafe { state::<S>(vfs) }, name.is_null()) else {
            return SQLITE_MISUSE;
        };
        // SAFETY: SQLite's name for this call.
        state.delete(unsafe { SqliteName::new(name) }, sync_dir != 0)
    })
}

unsafe extern "C" fn x_access<S: VfsMethods>(
    vfs: *mut sqlite3_vfs,
    name: *const c_char,
    flags: c_int,
    out: *mut c_int,
) -> c_int {
    guard(SQLITE_IOERR, || {
        // SAFETY: SQLite calls xAccess only on this VFS, with a NUL-terminated
        // name and a valid out-pointer.
        let (Some(state), false, Some(out)) = (unsafe { state::<S>(vfs) }, name.is_null(), unsafe {
            out.as_mut()
        }) else {
            return SQLITE_MISUSE;
        };
        // SAFETY: SQLite's name for this call.
        state.access(unsafe { SqliteName::new(name) }, flags, out)
    })
}

/// Defines a `sqlite3_vfs` method that forwards unchanged to the underlying
/// VFS, returning `$fallback` if that VFS lacks it (or on panic).
macro_rules! forward {
    ($fn_name:ident, $field:ident, $min_version:expr, ($($arg:ident : $ty:ty),*) -> $ret:ty, $fallback:expr) => {
        unsafe extern "C" fn $fn_name<S: VfsMethods>(vfs: *mut sqlite3_vfs $(, $arg: $ty)*) -> $ret {
            guard($fallback, || {
                // SAFETY: SQLite calls this only on our VFS.
                match unsafe { base::<S>(vfs) } {
                    Some((p, b)) if b.iVersion >= $min_version => match b.$field {
                        // SAFETY: forwarding SQLite's arguments unchanged to the
                        // underlying VFS, which has this method.
                        Some(f) => unsafe { f(p $(, $arg)*) },
                        None => $fallback,
                    },
                    _ => $fallback,
                }
            })
        }
    };
}

forward!(x_full_pathname, xFullPathname, 1, (name: *const c_char, n_out: c_int, out: *mut c_char) -> c_int, SQLITE_CANTOPEN);
forward!(x_dl_open, xDlOpen, 1, (name: *const c_char) -> *mut c_void, ptr::null_mut());
forward!(x_dl_error, xDlError, 1, (n: c_int, msg: *mut c_char) -> (), ());
forward!(x_dl_sym, xDlSym, 1, (handle: *mut c_void, symbol: *const c_char) -> DlSymResult, None);
forward!(x_dl_close, xDlClose, 1, (handle: *mut c_void) -> (), ());
forward!(x_randomness, xRandomness, 1, (n: c_int, out: *mut c_char) -> c_int, 0);
/// SQLite's busy handler sleeps here between tries for a lock (1, 2, 5, 10... ms). A try
/// that failed only because another connection had just committed retries at once, and a
/// sleep ends early when a connection of this process lets go of a write lock: commits take
/// a fraction of a millisecond, so whole-millisecond sleeps would leave the database idle.
unsafe extern "C" fn x_sleep<S: VfsMethods>(_vfs: *mut sqlite3_vfs, micros: c_int) -> c_int {
    guard(0, || {
        S::sleep(u64::try_from(micros).unwrap_or(0));
        micros
    })
}
forward!(x_current_time, xCurrentTime, 1, (out: *mut f64) -> c_int, SQLITE_ERROR);
forward!(x_get_last_error, xGetLastError, 1, (n: c_int, out: *mut c_char) -> c_int, 0);
forward!(x_current_time_int64, xCurrentTimeInt64, 2, (out: *mut sqlite3_int64) -> c_int, SQLITE_ERROR);
forward!(x_set_system_call, xSetSystemCall, 3, (name: *const c_char, f: sqlite3_syscall_ptr) -> c_int, SQLITE_NOTFOUND);
forward!(x_get_system_call, xGetSystemCall, 3, (name: *const c_char) -> sqlite3_syscall_ptr, None);
forward!(x_next_system_call, xNextSystemCall, 3, (name: *const c_char) -> *const c_char, ptr::null());
