//! The store backend's `MainDbFactory`: main database files through `main_file.rs`, and
//! where each journal of a store connection lives (in memory, or on disk while a
//! transaction over several databases needs it there).

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::backend::{IoResult, JournalRoute, MainDbFactory, OpenRequest, Opened};
use crate::ffi::{SQLITE_OPEN_MAIN_JOURNAL, SQLITE_OPEN_SUPER_JOURNAL};
use crate::memfile::MemFile;
use crate::names;
use crate::store_journal::StoreJournal;
use crate::super_journal::SuperJournal;

use super::main_file;
use super::registry::StoreFactory;

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
