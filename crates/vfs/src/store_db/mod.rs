//! The store backend: a main database file opened with `vfs=onesync` is a
//! logical file inside a onesync store (see README.md, "Store backend").
//!
//! * Path `P` is the store file; the database is its logical file `main`, or
//!   the one named by the URI parameter `db=` (`file:P?vfs=onesync&db=aux`).
//!   Which files are stores and which stay plain SQLite files is decided in
//!   `main_file.rs`.
//! * Every database of one store in this process shares one [`Store`] handle
//!   from a registry keyed by the file's identity (device and inode), so that
//!   two names of one file (hard links) share it too.
//! * SQLite's lock levels are kept per logical file in that registry. A
//!   reader (SHARED) reads one store snapshot; a writer (RESERVED and up)
//!   writes into one store transaction per *connection*, shared by all the
//!   databases of that connection in the same store, so that a transaction
//!   over `main` and an attached `aux` commits as one store commit.
//! * The commit is sequenced at `xSync` (one database), at
//!   `SQLITE_FCNTL_COMMIT_ATOMIC_WRITE`, or at `SQLITE_FCNTL_COMMIT_PHASETWO`
//!   (several databases, `synchronous=OFF`). At `synchronous=FULL` and `EXTRA`
//!   it is durable before SQLite returns from COMMIT: waited for at PHASETWO,
//!   or, when SQLite is known to unlock right after (locking_mode NORMAL) and
//!   someone may want the lock, after the lock is released, so the next writer
//!   runs during the flush. At `NORMAL` and `OFF` it is shown to readers once
//!   written and made durable later (the store's deferred flush).
//!
//! The files: `registry.rs` the per-process open stores and their sharing,
//! `connections.rs` which handles belong to which SQLite connection and its
//! locking mode, `locking.rs` SQLite's lock levels over the store, `commit.rs`
//! sequencing and making a connection's store transaction durable, `file.rs`
//! the main database file's methods (`DbBackend`), `main_file.rs` whether a
//! main database is a store or a plain file, `refusals.rs` why an open was
//! refused, told to the application, `concurrent.rs` concurrent write
//! transactions (`concurrent=1`) and their validation at COMMIT, `relocate.rs`
//! renumbering the pages a concurrent transaction appended so that two that
//! grew the file both commit.

mod commit;
mod concurrent;
mod connections;
mod file;
mod locking;
mod main_file;
mod refusals;
mod registry;
mod relocate;

use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

use onesync_store::{Error as StoreError, Options, Store};

use crate::backend::{IoResult, JournalRoute, MainDbFactory, OpenRequest, Opened};
use crate::ffi::{SQLITE_OPEN_MAIN_JOURNAL, SQLITE_OPEN_SUPER_JOURNAL};
use crate::memfile::MemFile;
use crate::names;
use crate::store_journal::StoreJournal;
use crate::super_journal::SuperJournal;
use crate::sys::api::ApiTable;

pub(crate) use connections::{is_main_database, join_connection, leave_connection, note_locking_mode};
pub(crate) use file::{StoreDb, StoreOpen};
pub(crate) use locking::sleep_until_lock_released;
pub(crate) use main_file::refuse_main_db;
pub(crate) use refusals::{note_hook_registered, open_refusal};
pub use registry::store_stats_json;
pub(crate) use registry::{next_handle, Want};

/// Page size of stores this VFS creates (SQLite's default page size, so the
/// common case maps one SQLite page to one store page).
pub const STORE_PAGE_SIZE: u32 = 4096;

/// Page changes up to this many bytes (since the page was last written whole) ride in the
/// commit record. A one-row INSERT or UPDATE changes about a hundred bytes of its leaf page
/// plus SQLite's change counter on page 1: carried in the record, such a commit writes one
/// block instead of a record block and a page.
pub const EMBED_LIMIT: usize = 256;

/// The logical file of a database opened without `db=`.
pub const DEFAULT_LOGICAL_DB: &str = "main";

/// Bytes 24..28 of page 1: SQLite's file change counter, bumped by every
/// commit in rollback-journal mode (and restored by a rollback).
const CHANGE_COUNTER: std::ops::Range<usize> = 24..28;

/// Opens (or, if the flag says so, creates) the store at a path: how a host puts stores on
/// another medium (the lab's power-cut simulation puts them on a `SimDisk`).
pub type StoreOpener = Arc<dyn Fn(&Path, &Options, bool) -> Result<Store, StoreError> + Send + Sync>;

/// Opens main database files as logical files of stores (or, for databases attached
/// without `vfs=onesync`, as plain SQLite files: see `main_file.rs`).
pub struct StoreFactory {
    pub(crate) api: ApiTable,
    pub(crate) opener: Option<StoreOpener>,
}

impl StoreFactory {
    pub fn new(api: ApiTable) -> Self {
        Self { api, opener: None }
    }

    /// Stores opened by `opener` instead of from files (the path is still the registry key,
    /// so every database of one path shares one store). Every main database file of such a
    /// VFS is a store: the medium is the host's, so there is no plain file to fall back to.
    pub fn with_opener(api: ApiTable, opener: StoreOpener) -> Self {
        Self {
            api,
            opener: Some(opener),
        }
    }
}

pub(crate) fn not_a_store_message(path: &Path, why: &str) -> String {
    format!(
        "onesync: {} is not a onesync store ({why}); nothing was written to it. Open a plain \
         SQLite database without vfs=onesync, or copy it into a store: onesync import {} \
         NEW.onesync, or VACUUM INTO 'file:NEW.onesync?vfs=onesync'",
        path.display(),
        path.display()
    )
}

impl MainDbFactory for StoreFactory {
    fn open(&self, req: &OpenRequest) -> IoResult<Opened> {
        main_file::open(self, req)
    }

    fn private_journals(&self) -> bool {
        true
    }

    fn journal_route(&self, name: &[u8]) -> Option<JournalRoute> {
        if names::database_of_journal(name).is_some() {
            // A store's journal serves only its own handle's rollback; a plain file's is
            // stock SQLite's, on disk.
            return Some(if names::is_store_journal(name) {
                JournalRoute::Private
            } else {
                JournalRoute::Disk
            });
        }
        // Super-journals of stores alone stay in memory and never exist by name; those of
        // plain files are on disk, where crash recovery looks for them.
        if !names::is_super_journal_name(name) {
            return None;
        }
        Some(if names::is_super_journal_in_use(name) {
            JournalRoute::InUse
        } else {
            JournalRoute::DiskIfPresent
        })
    }

    /// Looked for at each `xAccess`, as stock SQLite looks for a hot journal at every
    /// transaction: a process that died in a transaction over several databases may have
    /// left one at any moment, and a transaction that wrote on top of it before it is
    /// played back would be overwritten by that playback.
    fn private_journal_on_disk(&self, name: &[u8]) -> bool {
        crate::store_journal::may_be_hot(name)
    }

    fn open_journal(&self, req: &OpenRequest) -> Option<IoResult<Opened>> {
        let flags = req.flags();
        let name = req.name().map(|n| n.to_bytes());
        if flags & SQLITE_OPEN_SUPER_JOURNAL != 0 {
            // A new one is judged by the names written into it; an existing one (read by
            // a plain file's crash recovery, which also opens the journals it lists this
            // way) is on disk.
            if flags & crate::ffi::SQLITE_OPEN_CREATE != 0 {
                return Some(Ok(Opened {
                    backend: Box::new(SuperJournal::new(req.duplicate(), self.api)),
                    out_flags: flags,
                }));
            }
            let gone = |n: &[u8]| !Path::new(std::ffi::OsStr::from_bytes(n)).exists();
            if name.is_some_and(|n| names::is_super_journal_in_use(n) && gone(n)) {
                // Read by a rollback of a store transaction that names it: it lists nothing.
                return Some(Ok(Opened {
                    backend: Box::new(MemFile::anonymous()),
                    out_flags: flags,
                }));
            }
            return Some(req.open_passthrough());
        }
        if flags & SQLITE_OPEN_MAIN_JOURNAL != 0 {
            return Some(match name {
                Some(n) if !names::is_store_journal(n) => req.open_passthrough(),
                // In memory, on disk only while a transaction over several databases needs
                // it there (`store_journal.rs`).
                Some(n) => StoreJournal::open(req, n).map(|journal| Opened {
                    backend: Box::new(journal),
                    out_flags: flags,
                }),
                None => Ok(Opened {
                    backend: Box::new(MemFile::anonymous()),
                    out_flags: flags,
                }),
            });
        }
        None
    }
}
