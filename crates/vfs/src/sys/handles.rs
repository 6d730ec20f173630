//! Safe handles on what SQLite hands over: the underlying VFS, a file's name as xOpen
//! received it, a connection, and the open request built from them.
//!
//! Each wraps a raw pointer that only this module's callers in `sys` create, from SQLite's
//! own arguments, and each is valid for as long as SQLite's contract keeps the pointer
//! valid (the VFS for the process, a file name until its file is closed, a connection
//! while SQLite calls in on it). The rest of the crate only copies them around, compares
//! them and calls their safe methods.

use std::ffi::{c_char, c_int, c_void, CStr};

use super::api::ApiTable;
use super::ffi::{sqlite3_vfs, SQLITE_IOERR, SQLITE_IOERR_DELETE};
use super::passthrough::PassThrough;
use super::traits::{IoResult, Opened};

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

/// What `xOpen` of a file asks a factory for. Valid during that call (the name is SQLite's);
/// this crate keeps a [`OpenRequest::duplicate`] while the file is open.
#[derive(Debug)]
pub struct OpenRequest {
    pub(crate) base: BaseVfs,
    pub(crate) name: SqliteName,
    pub(crate) flags: c_int,
}

impl OpenRequest {
    /// The database path (without URI parameters), if it has one.
    pub fn name(&self) -> Option<&CStr> {
        self.name.get()
    }

    /// SQLite's name for the file.
    pub(crate) fn sqlite_name(&self) -> SqliteName {
        self.name
    }

    /// The same request, kept by this crate for as long as the file is open (SQLite's name
    /// stays valid that long).
    pub(crate) fn duplicate(&self) -> Self {
        Self { ..*self }
    }

    /// The `SQLITE_OPEN_*` flags of the open.
    pub fn flags(&self) -> c_int {
        self.flags
    }

    /// The same file with other open flags.
    pub(crate) fn with_flags(&self, flags: c_int) -> Self {
        Self { flags, ..*self }
    }

    /// A URI parameter of the open (`db`, `nolock`, `vfs`, ...).
    pub(crate) fn uri_parameter(&self, api: &ApiTable, key: &CStr) -> Option<String> {
        api.uri_parameter(self.name, key)
    }

    /// Whether the underlying VFS is SQLite's unix VFS (or one of its
    /// variants: `unix-excl`, `unix-none`, ...).
    pub fn base_is_unix(&self) -> bool {
        let name = self.base.name();
        name.is_some_and(|n| n.to_bytes() == b"unix" || n.to_bytes().starts_with(b"unix-"))
    }

    /// Opens the file with the underlying VFS and returns it as such (for a
    /// backend that wraps it).
    pub fn open_passthrough_file(&self) -> IoResult<(PassThrough, c_int)> {
        PassThrough::open(self.base, self.name, self.flags)
    }

    /// Opens the file with the underlying VFS, unchanged: the pass-through
    /// backend.
    pub fn open_passthrough(&self) -> IoResult<Opened> {
        let (file, out_flags) = self.open_passthrough_file()?;
        Ok(Opened {
            backend: Box::new(file),
            out_flags,
        })
    }
}
