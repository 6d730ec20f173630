//! What an open file of the `onesync` VFS is served by.
//!
//! Every file SQLite opens through this VFS is a [`DbBackend`]: the journals
//! are in-memory files, everything else is a [`PassThrough`] to the VFS that
//! was the default at registration. The main database file is opened through
//! a [`MainDbFactory`], the seam where a backend replaces the pass-through: the
//! store backend (`store_db`, `vfs=onesync`) and the F2FS atomic-write backend
//! (`f2fs.rs`, `vfs=onesync-f2fs`).

use std::ffi::c_int;

pub use crate::sys::file_control::{FileControl, FileControlCall, Pragma};
pub use crate::sys::handles::Connection;
pub(crate) use crate::sys::handles::SqliteName;
pub use crate::sys::open_request::OpenRequest;
pub(crate) use crate::sys::passthrough::{count_directory_sync, count_passthrough_sync};
pub use crate::sys::passthrough::{passthrough_io, PassThrough, PassThroughIo};
pub use crate::sys::traits::{DbBackend, IoResult, LockLevel, Opened};

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
    /// For a journal routed [`JournalRoute::Private`]: whether it is on disk all the same
    /// and may be hot (a store's, left by a crash in a transaction over several databases).
    fn private_journal_on_disk(&self, _name: &[u8]) -> bool {
        false
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
