//! Safe handles on what SQLite hands over: the underlying VFS, a file's name as xOpen
//! received it, and a connection. The bottom of `sys` beside `ffi`: it names nothing else,
//! so everything above can pass these around (the open request built from them is
//! `open_request.rs`).
//!
//! Each wraps a raw pointer that only this module's callers in `sys` create, from SQLite's
//! own arguments, and each is valid for as long as SQLite's contract keeps the pointer
//! valid (the VFS for the process, a file name until its file is closed, a connection
//! while SQLite calls in on it). The rest of the crate only copies them around, compares
//! them and calls their safe methods.

use std::ffi::{c_char, c_int, c_void, CStr};

use super::ffi::{sqlite3_vfs, SQLITE_IOERR, SQLITE_IOERR_DELETE};

/// The VFS that was the default when ours was registered: every file this crate does not
/// serve itself goes there.
#[derive(Clone, Copy, Debug)]
pub struct BaseVfs(*mut sqlite3_vfs);

// SAFETY: a registered `sqlite3_vfs` is immutable and never freed; SQLite's VFS methods may
// be called from any thread.
unsafe impl Send for BaseVfs {}
// SAFETY: as above.
unsafe impl Sync for BaseVfs {}

impl BaseVfs {
    /// # Safety
    /// `vfs` is a registered VFS (SQLite never frees one).
    pub(crate) unsafe fn new(vfs: *mut sqlite3_vfs) -> Option<Self> {
        (!vfs.is_null()).then_some(Self(vfs))
    }

    pub(crate) fn as_ptr(self) -> *mut sqlite3_vfs {
        self.0
    }

    pub(crate) fn get(&self) -> &sqlite3_vfs {
        // SAFETY: non-null (checked in `new`) and registered, hence valid for the process.
        unsafe { &*self.0 }
    }

    /// Its registered name (`unix`, `unix-excl`, ...).
    pub fn name(&self) -> Option<&CStr> {
        let z = self.get().zName;
        // SAFETY: a registered VFS's zName is null or a NUL-terminated string it owns.
        (!z.is_null()).then(|| unsafe { CStr::from_ptr(z) })
    }

    /// `xDelete` of the underlying VFS.
    pub fn delete(&self, name: SqliteName, sync_dir: bool) -> c_int {
        match self.get().xDelete {
            // SAFETY: SQLite's own name pointer, passed to this VFS's method unchanged.
            Some(f) => unsafe { f(self.0, name.0, c_int::from(sync_dir)) },
            None => SQLITE_IOERR_DELETE,
        }
    }

    /// `xAccess` of the underlying VFS: a result code, the answer in `out`.
    pub fn access(&self, name: SqliteName, flags: c_int, out: &mut c_int) -> c_int {
        match self.get().xAccess {
            // SAFETY: SQLite's own name pointer; `out` is a valid out-pointer.
            Some(f) => unsafe { f(self.0, name.0, flags, out) },
            None => SQLITE_IOERR,
        }
    }
}

/// A file name as SQLite passed it to xOpen, xDelete or xAccess (null for an anonymous
/// temporary file). After an xOpen name SQLite stores the URI parameters, which
/// `ApiTable::uri_parameter` reads; it stays valid until that file is closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SqliteName(*const c_char);

// SAFETY: the name is read-only memory SQLite keeps for the file's life; it is only read.
unsafe impl Send for SqliteName {}
// SAFETY: as above.
unsafe impl Sync for SqliteName {}

impl SqliteName {
    /// # Safety
    /// `name` is null or a NUL-terminated name SQLite passed to a VFS method, valid for as
    /// long as the handle is used.
    pub(crate) unsafe fn new(name: *const c_char) -> Self {
        Self(name)
    }

    pub(crate) fn as_ptr(self) -> *const c_char {
        self.0
    }

    /// The name (without URI parameters), if there is one.
    pub fn get(&self) -> Option<&CStr> {
        // SAFETY: null or NUL-terminated and valid (see `new`).
        (!self.0.is_null()).then(|| unsafe { CStr::from_ptr(self.0) })
    }

    /// The name's bytes; empty for an anonymous file.
    pub fn bytes(&self) -> &[u8] {
        self.get().map_or(&[], CStr::to_bytes)
    }
}

/// A SQLite connection (`sqlite3*`), as `SQLITE_FCNTL_PDB` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Connection(*mut c_void);

// SAFETY: only compared and handed back to SQLite on the thread that is calling in on the
// connection (SQLite holds the connection's mutex then).
unsafe impl Send for Connection {}
// SAFETY: as above.
unsafe impl Sync for Connection {}

impl Connection {
    pub(crate) fn new(db: *mut c_void) -> Self {
        Self(db)
    }

    pub(crate) fn as_ptr(self) -> *mut c_void {
        self.0
    }

    /// The pointer as a number: the connection's identity.
    pub fn id(&self) -> usize {
        self.0 as usize
    }
}
