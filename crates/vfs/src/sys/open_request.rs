//! What `xOpen` asks a factory for: the underlying VFS, SQLite's name for the file and the
//! open flags, with the calls a backend makes on them (URI parameters, opening through the
//! underlying VFS). Above `passthrough.rs`, which it opens files with, and below the VFS
//! shims that build it.

use std::ffi::{c_int, CStr};

use super::api::ApiTable;
use super::handles::{BaseVfs, SqliteName};
use super::passthrough::PassThrough;
use super::traits::{IoResult, Opened};

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
