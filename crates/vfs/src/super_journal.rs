//! The super-journal of a transaction that writes several databases, from a connection of
//! the store VFS.
//!
//! SQLite writes the super-journal (each participating database's journal name, one per
//! `xWrite`) and syncs it before any database's phase one; failing there aborts the COMMIT
//! with nothing written. What it must be depends on who takes part:
//! - logical files of one store only: it stays in memory (the store commits them as one
//!   commit record, no journal is ever hot);
//! - anything else (plain files, stores with one database each, or a mix): a real file,
//!   through the default VFS, so that crash recovery finds it, as stock SQLite's does; each
//!   store takes part with its journal on disk (`store_journal.rs`);
//! - two databases of one store with another database cannot (the store's journal is
//!   named after the store file, so they would share it): refused, with the reason in
//!   `sqlite3_log` and on stderr.
//!
//! The names are known only as they are written, so the bytes are kept in memory and the
//! file is created on disk at the first `xSync`, when the list is complete.

use std::collections::BTreeMap;
use std::ffi::c_int;

use onesync_codec::{DecodeError, OnDisk, Reader, Writer};

use crate::backend::{DbBackend, IoResult, OpenRequest, PassThrough};
use crate::ffi::SQLITE_ERROR;
use crate::memfile::{read_at, write_at};
use crate::names::{self, Owner, StoreKey};
use crate::sys::api::ApiTable;

/// Where a super-journal goes, from the journal names written into it so far.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Logical files of one store: the store commits them together.
    Memory(StoreKey),
    /// Plain files only: on disk, as in stock SQLite.
    Disk,
    /// No atomic commit is possible; the message says why.
    Refuse(String),
}

/// The journal names a super-journal lists, in SQLite's format: each name followed by a NUL.
/// Empty names are skipped, and a name not yet followed by its NUL (SQLite writes one name
/// per `xWrite`) is not listed yet. Reading never fails.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SuperJournalNames(pub Vec<Vec<u8>>);

impl SuperJournalNames {
    /// The complete names in `bytes`, borrowed.
    fn parse(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
        let complete = bytes
            .iter()
            .rposition(|&b| b == 0)
            .map_or(&[][..], |end| &bytes[..end]);
        complete.split(|&b| b == 0).filter(|name| !name.is_empty())
    }
}

impl OnDisk for SuperJournalNames {
    const NAME: &'static str = "super-journal";
    type Context = ();

    fn encode(&self, _: &(), w: &mut Writer) {
        for name in &self.0 {
            w.bytes(name).u8(0);
        }
    }

    /// Takes every remaining byte: the names fill the file.
    fn decode(_: &(), r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let bytes = r.take(r.remaining())?;
        Ok(SuperJournalNames(
            SuperJournalNames::parse(bytes).map(<[u8]>::to_vec).collect(),
        ))
    }
}

/// Classifies the complete (NUL-terminated) names in `bytes`.
pub(crate) fn verdict(bytes: &[u8]) -> Verdict {
    let mut stores = BTreeMap::<StoreKey, usize>::new();
    let mut described = Vec::new();
    let mut plain = 0;
    for journal in SuperJournalNames::parse(bytes) {
        let database = names::database_of_journal(journal).unwrap_or(journal);
        let shown = String::from_utf8_lossy(database);
        match names::owner_of_journal(journal) {
            Some(Owner::Store(key)) => {
                *stores.entry(key).or_default() += 1;
                described.push(format!("{shown} (a onesync store)"));
            }
            // Not a store of this process: a plain file (its journal on disk), ours or
            // another VFS's.
            _ => {
                plain += 1;
                described.push(format!("{shown} (a plain SQLite file)"));
            }
        }
    }
    if stores.len() == 1 && plain == 0 {
        if let Some((key, _)) = stores.pop_first() {
            return Verdict::Memory(key);
        }
    }
    // Each store takes part with its journal on disk (`store_journal.rs`), which is named
    // after the store file: two databases of one store would share it.
    if stores.values().all(|&n| n == 1) {
        return Verdict::Disk;
    }
    Verdict::Refuse(format!(
        "onesync: COMMIT refused: this transaction writes databases that cannot commit \
         atomically together: {}. Several databases of one store commit atomically \
         together, and a store commits atomically with plain files and other stores, but \
         not two databases of one store (ATTACH 'file:STORE?vfs=onesync&db=NAME') together \
         with another database: write those in separate transactions. Nothing was written; \
         the transaction was rolled back.",
        described.join(", ")
    ))
}

/// A new super-journal (SQLite opened it with `SQLITE_OPEN_CREATE`).
pub(crate) struct SuperJournal {
    /// The default VFS and SQLite's name for the file: both outlive the file (SQLite frees
    /// the name after closing it), and are used only to create it on disk.
    open: OpenRequest,
    api: ApiTable,
    bytes: Vec<u8>,
    disk: Option<PassThrough>,
    /// Known by name while open, once it is known to stay in memory.
    in_memory: Option<names::MemorySuperJournal>,
}

impl SuperJournal {
    pub(crate) fn new(open: OpenRequest, api: ApiTable) -> Self {
        Self {
            open,
            api,
            bytes: Vec::new(),
            disk: None,
            in_memory: None,
        }
    }

    fn refuse(&self, why: &str) -> c_int {
        self.api.log_and_print(SQLITE_ERROR, why);
        SQLITE_ERROR
    }

    /// Creates the file on disk with what was written so far.
    fn on_disk(&mut self) -> IoResult<&mut PassThrough> {
        if self.disk.is_none() {
            let (mut file, _) = self.open.open_passthrough_file()?;
            file.write(&self.bytes, 0)?;
            self.disk = Some(file);
        }
        self.disk.as_mut().ok_or(SQLITE_ERROR)
    }
}

impl DbBackend for SuperJournal {
    fn read(&mut self, buf: &mut [u8], offset: u64) -> IoResult<()> {
        match &mut self.disk {
            Some(file) => file.read(buf, offset),
            None => read_at(&self.bytes, buf, offset),
        }
    }

    fn write(&mut self, buf: &[u8], offset: u64) -> IoResult<()> {
        if let Some(file) = &mut self.disk {
            return file.write(buf, offset);
        }
        write_at(&mut self.bytes, buf, offset)?;
        // Refuse at the first name that makes an atomic commit impossible.
        match verdict(&self.bytes) {
            Verdict::Refuse(why) => Err(self.refuse(&why)),
            _ => Ok(()),
        }
    }

    fn truncate(&mut self, size: u64) -> IoResult<()> {
        match &mut self.disk {
            Some(file) => file.truncate(size),
            None => {
                self.bytes.truncate(usize::try_from(size).unwrap_or(usize::MAX));
                Ok(())
            }
        }
    }

    fn sync(&mut self, flags: c_int) -> IoResult<()> {
        if let Some(file) = &mut self.disk {
            return file.sync(flags);
        }
        match verdict(&self.bytes) {
            Verdict::Memory(_) => {
                if let (None, Some(name)) = (&self.in_memory, self.open.name()) {
                    self.in_memory = Some(names::hold_memory_super_journal(name.to_bytes()));
                }
                Ok(())
            }
            Verdict::Disk => self.on_disk()?.sync(flags),
            Verdict::Refuse(why) => Err(self.refuse(&why)),
        }
    }

    fn size(&mut self) -> IoResult<u64> {
        match &mut self.disk {
            Some(file) => file.size(),
            None => Ok(self.bytes.len() as u64),
        }
    }

    fn close(&mut self) -> IoResult<()> {
        self.in_memory = None;
        match &mut self.disk {
            Some(file) => file.close(),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts() {
        let a = StoreKey::Path("/sj-test/a".into());
        let b = StoreKey::Path("/sj-test/b".into());
        let _a = names::claim(b"/sj-test/a", Owner::Store(a.clone()));
        let _b = names::claim(b"/sj-test/b", Owner::Store(b));
        let _p = names::claim(b"/sj-test/p", Owner::Plain);
        assert_eq!(
            verdict(b"/sj-test/a-journal\0/sj-test/a-journal\0"),
            Verdict::Memory(a.clone())
        );
        assert_eq!(
            verdict(b"/sj-test/p-journal\0/sj-test/q-journal\0"),
            Verdict::Disk
        );
        assert_eq!(
            verdict(b"/sj-test/a-journal\0/sj-test/b-journal\0"),
            Verdict::Disk
        );
        assert_eq!(
            verdict(b"/sj-test/a-journal\0/sj-test/p-journal\0"),
            Verdict::Disk
        );
        assert!(matches!(
            verdict(b"/sj-test/a-journal\0/sj-test/a-journal\0/sj-test/p-journal\0"),
            Verdict::Refuse(_)
        ));
        // An incomplete name is not judged yet.
        assert_eq!(verdict(b"/sj-test/a-journal\0/sj-test/p-jou"), Verdict::Memory(a));
    }

    #[test]
    fn names_in_sqlite_format() {
        let listed = SuperJournalNames::from_bytes(&(), b"/d/a-journal\0\0/d/b-journal\0/d/c-jo").unwrap();
        assert_eq!(
            listed,
            SuperJournalNames(vec![b"/d/a-journal".to_vec(), b"/d/b-journal".to_vec()])
        );
        assert_eq!(listed.to_bytes(&()), b"/d/a-journal\0/d/b-journal\0");
        assert_eq!(
            SuperJournalNames::from_bytes(&(), b"").unwrap(),
            SuperJournalNames::default()
        );
    }

    #[test]
    fn decoder_survives_the_fuzz_harness() {
        let seeds = vec![
            b"/d/a-journal\0/d/b-journal\0".to_vec(),
            b"/d/a-journal\0\0/d/c-jo".to_vec(),
            Vec::new(),
        ];
        let report = onesync_codec::fuzz::check_decoder::<SuperJournalNames>(&(), &seeds, 5_000);
        assert_eq!(
            report.decoded, 5_000,
            "every byte string lists some names: {report:?}"
        );
    }
}
