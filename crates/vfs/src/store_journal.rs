//! A store's rollback journal: SQLite's `NAME-journal` of a database that is a logical file
//! of a store.
//!
//! A store commits atomically by itself, so its journal serves only ROLLBACK and statement
//! rollback, and stays in memory: no other connection can ever take it for a hot journal.
//! The one exception is a transaction over several databases whose super-journal is on disk
//! (a store together with plain SQLite files, or two stores). There the store is one
//! participant of SQLite's own super-journal protocol, and its journal must be where any
//! participant's is, on disk:
//!
//! 1. SQLite writes the super-journal (the participants' journal names) and syncs it.
//! 2. Phase one, per database: SQLite writes the super-journal's name at the end of the
//!    database's journal and syncs the journal. A store's journal goes to disk at that sync
//!    ([`StoreJournal::sync`]: created, written whole, flushed with its directory), because
//!    its last bytes name a super-journal.
//! 3. SQLite writes the store's pages and syncs the store: the store commits, durably
//!    (`store_db/file.rs` waits for the flush while the journal is on disk).
//! 4. SQLite deletes the super-journal (and syncs the directory): the commit point.
//! 5. Phase two: SQLite deletes each journal.
//!
//! A crash before 4 leaves the super-journal and the journals: the next open of each
//! database finds its journal hot and plays it back, since the super-journal it names
//! exists. For a store that playback writes the old pages as a new commit, durable before
//! the journal is deleted. A plain file's recovery (stock SQLite's, with or without onesync)
//! deletes the super-journal only once no journal it lists still names it, so it keeps it
//! while the store's journal is on disk: the store is rolled back too. After 4 a journal
//! names a super-journal that is gone: not hot, deleted. So every participant commits or
//! none does, as in stock SQLite.
//!
//! While the store's journal is on disk (from 2 until it is deleted) every commit of that
//! database is made durable before `xSync` returns, at any `synchronous`: the phase-one
//! commit (else a crash after 4 could lose it) and the commit of a playback (else the journal
//! could be deleted before the rollback is durable).
//!
//! A store journal on disk is reported by `xAccess` only if its last bytes name a
//! super-journal, so that nothing else (a leftover of a plain file once at that path) is
//! ever played back into a store.

use std::ffi::c_int;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::ffi::OsStrExt;

use crate::backend::{DbBackend, IoResult, OpenRequest, PassThrough};
use crate::ffi::SQLITE_OPEN_CREATE;
use crate::memfile::{read_at, write_at};
use crate::names;

/// The last 8 bytes of a journal whose end names a super-journal (SQLite's `aJournalMagic`).
const JOURNAL_MAGIC: [u8; 8] = [0xd9, 0xd5, 0x05, 0xf9, 0x20, 0xa1, 0x63, 0xd7];
/// Name length, checksum, magic.
const TRAILER_LEN: usize = 16;
/// SQLite's longest path (`mxPathname` of the unix VFS).
const MAX_NAME: usize = 512;

/// The super-journal a journal's last bytes name, as SQLite's `readSuperJournal` reads it:
/// `name | u32 length | u32 checksum | magic`, the checksum the sum of the name's bytes as C
/// `char`s (signed here).
pub(crate) fn super_journal_named_by(journal: &[u8]) -> Option<&[u8]> {
    let size = journal.len();
    if size < TRAILER_LEN || journal[size - 8..] != JOURNAL_MAGIC {
        return None;
    }
    let word = |at: usize| u32::from_be_bytes(journal[at..at + 4].try_into().unwrap_or_default());
    let len = word(size - 16) as usize;
    if len == 0 || len >= MAX_NAME || len > size - TRAILER_LEN {
        return None;
    }
    let name = &journal[size - TRAILER_LEN - len..size - TRAILER_LEN];
    let sum = name
        .iter()
        .fold(0u32, |sum, &b| sum.wrapping_add(b as i8 as i32 as u32));
    (sum == word(size - 12) && !name.contains(&0)).then_some(name)
}

/// Whether a store journal is on disk at `path` that may be hot: one that a multi-file
/// transaction put there and a crash (or a live transaction) left, naming its super-journal,
/// its header not zeroed (SQLite takes a journal whose first byte is 0 for no journal).
pub(crate) fn may_be_hot(path: &[u8]) -> bool {
    let path = std::path::Path::new(std::ffi::OsStr::from_bytes(path));
    let Ok(mut file) = std::fs::File::open(path) else {
        return false;
    };
    let mut first = [0u8; 1];
    if file.read_exact(&mut first).is_err() || first[0] == 0 {
        return false;
    }
    let tail_len = (TRAILER_LEN + MAX_NAME) as u64;
    let Ok(size) = file.seek(SeekFrom::End(0)) else {
        return false;
    };
    let start = size.saturating_sub(tail_len);
    let mut tail = Vec::new();
    file.seek(SeekFrom::Start(start)).is_ok()
        && file.read_to_end(&mut tail).is_ok()
        && super_journal_named_by(&tail).is_some()
}

/// An open store journal: in memory, and from the sync that names a super-journal on, on
/// disk too (every write goes to both; reads come from memory, which holds the same bytes).
pub(crate) struct StoreJournal {
    /// The default VFS and SQLite's name for the journal, to create it on disk.
    open: OpenRequest,
    bytes: Vec<u8>,
    disk: Option<PassThrough>,
    /// Held while the journal is open and on disk: `xDelete` from another handle spares it.
    _on_disk: Option<names::StoreJournalOnDisk>,
    /// The test-hooks build's negative control: never goes to disk.
    keep_in_memory: bool,
}

impl StoreJournal {
    /// SQLite opens a journal to write (with `SQLITE_OPEN_CREATE`: a new one, in memory) or
    /// to read a hot one (without: the one on disk, if there is one naming a
    /// super-journal, else an empty one, as a store's journal always was).
    pub(crate) fn open(req: &OpenRequest, name: &[u8]) -> IoResult<Self> {
        let mut journal = Self {
            open: req.duplicate(),
            bytes: Vec::new(),
            disk: None,
            _on_disk: None,
            keep_in_memory: keep_in_memory(),
        };
        if req.flags() & SQLITE_OPEN_CREATE == 0 && may_be_hot(name) {
            let (mut file, _) = req.open_passthrough_file()?;
            let size = file.size()?;
            journal.bytes = vec![0; usize::try_from(size).map_err(|_| crate::ffi::SQLITE_IOERR)?];
            file.read(&mut journal.bytes, 0)?;
            journal.disk = Some(file);
            journal._on_disk = Some(names::store_journal_on_disk(name));
        }
        Ok(journal)
    }

    /// Whether the journal's last bytes name a super-journal that is on disk: not one kept
    /// in memory (databases of this store alone commit as one store commit, with no journal
    /// anywhere), nor the stale name a persistent journal (`journal_mode=PERSIST`) may still
    /// end with from an earlier transaction (its super-journal is gone).
    fn names_a_super_journal_on_disk(&self) -> bool {
        super_journal_named_by(&self.bytes).is_some_and(|name| {
            !names::is_memory_super_journal(name)
                && std::path::Path::new(std::ffi::OsStr::from_bytes(name)).exists()
        })
    }

    /// Step 2 of the protocol: the whole journal on disk, flushed with its directory entry
    /// (the default VFS syncs the directory at a new journal's first sync).
    fn write_to_disk(&mut self, flags: c_int) -> IoResult<()> {
        let (mut file, _) = self.open.open_passthrough_file()?;
        file.truncate(0)?;
        file.write(&self.bytes, 0)?;
        file.sync(flags)?;
        self.disk = Some(file);
        if let Some(name) = self.open.name() {
            self._on_disk = Some(names::store_journal_on_disk(name.to_bytes()));
        }
        Ok(())
    }
}

#[cfg(feature = "test-hooks")]
fn keep_in_memory() -> bool {
    matches!(
        onesync_store::Sabotage::from_env(),
        Some(onesync_store::Sabotage::StoreJournalInMemory)
    )
}

#[cfg(not(feature = "test-hooks"))]
fn keep_in_memory() -> bool {
    false
}

impl DbBackend for StoreJournal {
    fn read(&mut self, buf: &mut [u8], offset: u64) -> IoResult<()> {
        read_at(&self.bytes, buf, offset)
    }

    fn write(&mut self, buf: &[u8], offset: u64) -> IoResult<()> {
        write_at(&mut self.bytes, buf, offset)?;
        match &mut self.disk {
            Some(file) => file.write(buf, offset),
            None => Ok(()),
        }
    }

    fn truncate(&mut self, size: u64) -> IoResult<()> {
        self.bytes
            .resize(usize::try_from(size).map_err(|_| crate::ffi::SQLITE_IOERR)?, 0);
        match &mut self.disk {
            Some(file) => file.truncate(size),
            None => Ok(()),
        }
    }

    fn sync(&mut self, flags: c_int) -> IoResult<()> {
        if let Some(file) = &mut self.disk {
            return file.sync(flags);
        }
        if self.names_a_super_journal_on_disk() && !self.keep_in_memory {
            return self.write_to_disk(flags);
        }
        Ok(())
    }

    fn size(&mut self) -> IoResult<u64> {
        Ok(self.bytes.len() as u64)
    }

    fn close(&mut self) -> IoResult<()> {
        self._on_disk = None;
        match self.disk.take() {
            Some(mut file) => file.close(),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A journal's end as SQLite's `writeSuperJournal` writes it.
    fn trailer(name: &[u8]) -> Vec<u8> {
        let sum = name
            .iter()
            .fold(0u32, |s, &b| s.wrapping_add(b as i8 as i32 as u32));
        let mut out = vec![0xAA; 600];
        out.extend_from_slice(name);
        out.extend_from_slice(&(name.len() as u32).to_be_bytes());
        out.extend_from_slice(&sum.to_be_bytes());
        out.extend_from_slice(&JOURNAL_MAGIC);
        out
    }

    #[test]
    fn reads_the_super_journal_name_as_sqlite_does() {
        let name = b"/d/main.db-mj01234567A";
        assert_eq!(super_journal_named_by(&trailer(name)), Some(&name[..]));
        // Bytes over 0x7f count as C's signed chars.
        let odd = "/d/ü-mj0123456789".as_bytes();
        assert_eq!(super_journal_named_by(&trailer(odd)), Some(odd));
        let mut bad_sum = trailer(name);
        let at = bad_sum.len() - 12;
        bad_sum[at] ^= 1;
        assert_eq!(super_journal_named_by(&bad_sum), None);
        let mut no_magic = trailer(name);
        *no_magic.last_mut().unwrap() ^= 1;
        assert_eq!(super_journal_named_by(&no_magic), None);
        assert_eq!(super_journal_named_by(&[0; 16]), None);
        assert_eq!(super_journal_named_by(&trailer(name)[600..]), Some(&name[..]));
        assert_eq!(super_journal_named_by(&trailer(name)[601..]), None);
        assert_eq!(super_journal_named_by(b""), None);
    }
}
