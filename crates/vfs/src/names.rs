//! Which database each open main-database name belongs to: a store, or a plain SQLite file
//! passed through to the default VFS. The store VFS routes a journal by its database
//! (`NAME-journal` is `NAME`'s): a store's journals stay private and in memory, a plain
//! file's go to disk as in stock SQLite; a super-journal lists journal names, so this also
//! tells which stores a multi-file transaction writes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

/// Identifies one store file in this process: its inode, or (for stores on a medium a host
/// supplies, which has no inode) its path.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum StoreKey {
    Inode { dev: u64, ino: u64 },
    Path(PathBuf),
}

/// What a database name is served by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Owner {
    Store(StoreKey),
    Plain,
}

#[derive(Default)]
struct Entry {
    stores: BTreeMap<StoreKey, usize>,
    plain: usize,
}

static NAMES: Mutex<BTreeMap<Vec<u8>, Entry>> = Mutex::new(BTreeMap::new());

fn names() -> MutexGuard<'static, BTreeMap<Vec<u8>, Entry>> {
    // Plain bookkeeping, consistent after every step: a poisoned lock is still usable.
    NAMES.lock().unwrap_or_else(|e| e.into_inner())
}

/// One open database file's entry; dropping it removes the entry.
pub(crate) struct NameClaim {
    name: Vec<u8>,
    owner: Owner,
}

/// Records that the database file `name` (as SQLite passed it to xOpen) is open as `owner`.
pub(crate) fn claim(name: &[u8], owner: Owner) -> NameClaim {
    let mut map = names();
    let entry = map.entry(name.to_vec()).or_default();
    match &owner {
        Owner::Store(key) => *entry.stores.entry(key.clone()).or_default() += 1,
        Owner::Plain => entry.plain += 1,
    }
    NameClaim {
        name: name.to_vec(),
        owner,
    }
}

impl Drop for NameClaim {
    fn drop(&mut self) {
        let mut map = names();
        let Some(entry) = map.get_mut(&self.name) else {
            return;
        };
        match &self.owner {
            Owner::Store(key) => {
                if let Some(n) = entry.stores.get_mut(key) {
                    *n -= 1;
                    if *n == 0 {
                        entry.stores.remove(key);
                    }
                }
            }
            Owner::Plain => entry.plain = entry.plain.saturating_sub(1),
        }
        if entry.stores.is_empty() && entry.plain == 0 {
            map.remove(&self.name);
        }
    }
}

/// The owner of the database `name`, if one is open in this process (a store wins: a
/// store's journals must never be taken for a plain file's).
pub(crate) fn owner_of_database(name: &[u8]) -> Option<Owner> {
    let map = names();
    let entry = map.get(name)?;
    if let Some(key) = entry.stores.keys().next() {
        return Some(Owner::Store(key.clone()));
    }
    (entry.plain > 0).then_some(Owner::Plain)
}

/// The database a rollback journal belongs to (`NAME-journal` → `NAME`).
pub(crate) fn database_of_journal(journal: &[u8]) -> Option<&[u8]> {
    journal.strip_suffix(b"-journal")
}

/// The owner of the database whose rollback journal is `journal`.
pub(crate) fn owner_of_journal(journal: &[u8]) -> Option<Owner> {
    owner_of_database(database_of_journal(journal)?)
}

/// Whether `journal` is the rollback journal of a store open in this process: such a
/// journal is private to its connection and never on disk.
pub(crate) fn is_store_journal(journal: &[u8]) -> bool {
    matches!(owner_of_journal(journal), Some(Owner::Store(_)))
}

/// Whether `name` is the WAL file name of a store open in this process. A store never has
/// one (SQLite's journal for a store is in memory whatever journal_mode says), so SQLite's
/// look for it before every read transaction needs no `stat`.
pub(crate) fn is_store_wal(name: &[u8]) -> bool {
    name.strip_suffix(b"-wal")
        .is_some_and(|db| matches!(owner_of_database(db), Some(Owner::Store(_))))
}

static MEMORY_SUPER_JOURNALS: Mutex<BTreeSet<Vec<u8>>> = Mutex::new(BTreeSet::new());

/// A super-journal kept in memory (its transaction writes logical files of one store),
/// known by name while it is open: each database's phase one names it.
pub(crate) struct MemorySuperJournal(Vec<u8>);

pub(crate) fn hold_memory_super_journal(name: &[u8]) -> MemorySuperJournal {
    MEMORY_SUPER_JOURNALS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(name.to_vec());
    MemorySuperJournal(name.to_vec())
}

impl Drop for MemorySuperJournal {
    fn drop(&mut self) {
        MEMORY_SUPER_JOURNALS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.0);
    }
}

static SUPER_JOURNALS_IN_USE: Mutex<BTreeMap<Vec<u8>, usize>> = Mutex::new(BTreeMap::new());

/// A super-journal named to a store's phase one (SQLITE_FCNTL_SYNC), for as long as that
/// store transaction lives. If the transaction is rolled back, SQLite plays the store's
/// (private) journal back only if the super-journal it names exists; another database's
/// rollback may have deleted it already (it cannot see a private journal as one still
/// needing it). So while in use it exists for this process, as an empty file if need be.
pub(crate) struct SuperJournalInUse(Vec<u8>);

pub(crate) fn use_super_journal(name: &[u8]) -> SuperJournalInUse {
    *SUPER_JOURNALS_IN_USE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(name.to_vec())
        .or_default() += 1;
    SuperJournalInUse(name.to_vec())
}

impl SuperJournalInUse {
    pub(crate) fn name(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for SuperJournalInUse {
    fn drop(&mut self) {
        let mut map = SUPER_JOURNALS_IN_USE.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = map.get_mut(&self.0) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.0);
            }
        }
    }
}

pub(crate) fn is_super_journal_in_use(name: &[u8]) -> bool {
    SUPER_JOURNALS_IN_USE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains_key(name)
}

pub(crate) fn is_memory_super_journal(name: &[u8]) -> bool {
    MEMORY_SUPER_JOURNALS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(name)
}

/// Store journals this process put on disk or found there (`store_journal.rs`), by name,
/// with how many open handles hold each: `xDelete` of a store journal unlinks only a known
/// one that no handle holds, so deleting the usual store journal (never on disk) costs no
/// system call, and one handle's delete never takes a live journal from another.
static STORE_JOURNALS_ON_DISK: Mutex<BTreeMap<Vec<u8>, usize>> = Mutex::new(BTreeMap::new());

fn store_journals_on_disk() -> MutexGuard<'static, BTreeMap<Vec<u8>, usize>> {
    STORE_JOURNALS_ON_DISK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Held by an open store journal that is on disk.
pub(crate) struct StoreJournalOnDisk(Vec<u8>);

pub(crate) fn store_journal_on_disk(name: &[u8]) -> StoreJournalOnDisk {
    *store_journals_on_disk().entry(name.to_vec()).or_default() += 1;
    StoreJournalOnDisk(name.to_vec())
}

impl Drop for StoreJournalOnDisk {
    fn drop(&mut self) {
        if let Some(n) = store_journals_on_disk().get_mut(&self.0) {
            *n = n.saturating_sub(1);
        }
    }
}

/// Where a store journal of this process is, for `xDelete`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum StoreJournalPlace {
    /// Never on disk (in memory, private to its handle).
    Memory,
    /// On disk, and open in a handle.
    OpenOnDisk,
    /// On disk, no handle holds it: it may be deleted.
    ClosedOnDisk,
}

pub(crate) fn store_journal_place(name: &[u8]) -> StoreJournalPlace {
    match store_journals_on_disk().get(name) {
        None => StoreJournalPlace::Memory,
        Some(0) => StoreJournalPlace::ClosedOnDisk,
        Some(_) => StoreJournalPlace::OpenOnDisk,
    }
}

/// Whether a store journal is open on disk in this process (its database's commits are made
/// durable before `xSync` returns).
pub(crate) fn is_store_journal_open_on_disk(name: &[u8]) -> bool {
    store_journal_place(name) == StoreJournalPlace::OpenOnDisk
}

/// A store journal was deleted from disk.
pub(crate) fn forget_store_journal(name: &[u8]) {
    let mut map = store_journals_on_disk();
    if map.get(name) == Some(&0) {
        map.remove(name);
    }
}

/// Whether a path names a super-journal by SQLite's rule: `-mj` and nine hex digits.
pub(crate) fn is_super_journal_name(name: &[u8]) -> bool {
    match name.len().checked_sub(12) {
        Some(start) => {
            let tail = &name[start..];
            tail.starts_with(b"-mj") && tail[3..].iter().all(u8::is_ascii_hexdigit)
        }
        None => false,
    }
}

/// `path` as the path of a `file:` URI, as SQLite decodes it: `%`, `?`, `#`, spaces and
/// every byte outside printable ASCII percent-encoded (a bare `#` would end the path).
pub(crate) fn uri_path(path: &std::path::Path) -> String {
    use std::fmt::Write;
    use std::os::unix::ffi::OsStrExt;
    let mut out = String::new();
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_graphic() && !matches!(b, b'%' | b'?' | b'#') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_come_and_go() {
        let key = StoreKey::Path("/names-test/s".into());
        let a = claim(b"/names-test/s", Owner::Store(key.clone()));
        let b = claim(b"/names-test/p", Owner::Plain);
        assert_eq!(
            owner_of_journal(b"/names-test/s-journal"),
            Some(Owner::Store(key.clone()))
        );
        assert!(is_store_journal(b"/names-test/s-journal"));
        assert_eq!(owner_of_journal(b"/names-test/p-journal"), Some(Owner::Plain));
        assert_eq!(owner_of_journal(b"/names-test/q-journal"), None);
        drop(a);
        drop(b);
        assert_eq!(owner_of_journal(b"/names-test/s-journal"), None);
        assert_eq!(owner_of_database(b"/names-test/p"), None);
    }

    #[test]
    fn super_journal_names() {
        assert!(is_super_journal_name(b"/tmp/x.db-mj1A2B3C9D4"));
        assert!(!is_super_journal_name(b"/tmp/x.db-journal"));
        assert!(!is_super_journal_name(b"/tmp/x.db-mjXYZ"));
    }

    #[test]
    fn uri_path_encodes_what_would_end_or_change_the_path() {
        let p = std::path::Path::new("/tmp/a b#c?d%e.onesync");
        assert_eq!(super::uri_path(p), "/tmp/a%20b%23c%3Fd%25e.onesync");
    }
}
