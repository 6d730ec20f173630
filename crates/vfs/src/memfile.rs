//! In-memory files for the journals (rollback, statement, super, temp).
//!
//! Named journals live in a [`MemStore`] keyed by their exact path bytes, so
//! `xAccess` and `xDelete` on that name see them, and another connection of
//! the same process that opens the same name sees the same bytes. Unnamed
//! journals (statement journals, usually) are private to their handle.

use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::backend::{DbBackend, IoResult};
use crate::ffi::{SQLITE_CANTOPEN, SQLITE_IOERR, SQLITE_IOERR_SHORT_READ};

/// The bytes of one in-memory file, shared by every open handle to it.
pub(crate) type Bytes = Arc<Mutex<Vec<u8>>>;

fn lock(m: &Mutex<Vec<u8>>) -> IoResult<MutexGuard<'_, Vec<u8>>> {
    m.lock().map_err(|_| SQLITE_IOERR)
}

/// All named in-memory files of one registered VFS.
#[derive(Default)]
pub(crate) struct MemStore {
    files: Mutex<HashMap<Vec<u8>, Bytes>>,
}

impl MemStore {
    fn table(&self) -> IoResult<MutexGuard<'_, HashMap<Vec<u8>, Bytes>>> {
        self.files.lock().map_err(|_| SQLITE_IOERR)
    }

    /// Opens `name`, creating it when `create` is set. With `exclusive`, an
    /// existing file is an error (SQLite's `SQLITE_OPEN_EXCLUSIVE`).
    pub(crate) fn open(&self, name: &[u8], create: bool, exclusive: bool) -> IoResult<Bytes> {
        let mut table = self.table()?;
        match table.get(name) {
            Some(_) if exclusive => Err(SQLITE_CANTOPEN),
            Some(bytes) => Ok(Arc::clone(bytes)),
            None if create => {
                let bytes = Bytes::default();
                table.insert(name.to_vec(), Arc::clone(&bytes));
                Ok(bytes)
            }
            None => Err(SQLITE_CANTOPEN),
        }
    }

    pub(crate) fn exists(&self, name: &[u8]) -> IoResult<bool> {
        Ok(self.table()?.contains_key(name))
    }

    /// Removes `name`; true if it was there. Open handles keep their bytes.
    pub(crate) fn remove(&self, name: &[u8]) -> IoResult<bool> {
        Ok(self.table()?.remove(name).is_some())
    }

    /// Removes `name` only if it still refers to `bytes` (delete-on-close must
    /// not remove a newer file that reused the name).
    fn remove_if_same(&self, name: &[u8], bytes: &Bytes) -> IoResult<()> {
        let mut table = self.table()?;
        if table.get(name).is_some_and(|b| Arc::ptr_eq(b, bytes)) {
            table.remove(name);
        }
        Ok(())
    }

    /// Number of named in-memory files.
    pub(crate) fn len(&self) -> usize {
        self.files.lock().map(|t| t.len()).unwrap_or(0)
    }
}

/// Whether a path names a journal this VFS keeps in memory, by SQLite's naming
/// rules: `<db>-journal`, or a super-journal `<db>-mjXXXXXX9XX`
/// (`-mj` and nine hex digits).
pub(crate) fn is_journal_name(name: &[u8]) -> bool {
    if name.ends_with(b"-journal") {
        return true;
    }
    match name.len().checked_sub(12) {
        Some(start) => {
            let tail = &name[start..];
            tail.starts_with(b"-mj") && tail[3..].iter().all(u8::is_ascii_hexdigit)
        }
        None => false,
    }
}

/// An open handle to an in-memory file.
pub(crate) struct MemFile {
    bytes: Bytes,
    /// Set for a named file opened with `SQLITE_OPEN_DELETEONCLOSE`.
    delete_on_close: Option<(Arc<MemStore>, Vec<u8>)>,
}

impl MemFile {
    pub(crate) fn new(bytes: Bytes, delete_on_close: Option<(Arc<MemStore>, Vec<u8>)>) -> Self {
        Self {
            bytes,
            delete_on_close,
        }
    }

    pub(crate) fn anonymous() -> Self {
        Self::new(Bytes::default(), None)
    }
}

/// Reads `buf.len()` bytes at `offset` from `data`; past the end the rest of
/// `buf` is zero-filled and the result is `SQLITE_IOERR_SHORT_READ`, as SQLite
/// requires of `xRead`.
pub(crate) fn read_at(data: &[u8], buf: &mut [u8], offset: u64) -> IoResult<()> {
    let start = usize::try_from(offset).unwrap_or(usize::MAX).min(data.len());
    let n = (data.len() - start).min(buf.len());
    buf[..n].copy_from_slice(&data[start..start + n]);
    if n < buf.len() {
        buf[n..].fill(0);
        return Err(SQLITE_IOERR_SHORT_READ);
    }
    Ok(())
}

/// Writes `buf` at `offset` into `data`, zero-extending any gap.
pub(crate) fn write_at(data: &mut Vec<u8>, buf: &[u8], offset: u64) -> IoResult<()> {
    let start = usize::try_from(offset).map_err(|_| SQLITE_IOERR)?;
    let end = start.checked_add(buf.len()).ok_or(SQLITE_IOERR)?;
    if data.len() < end {
        data.resize(end, 0);
    }
    data[start..end].copy_from_slice(buf);
    Ok(())
}

impl DbBackend for MemFile {
    fn read(&mut self, buf: &mut [u8], offset: u64) -> IoResult<()> {
        read_at(&lock(&self.bytes)?, buf, offset)
    }

    fn write(&mut self, buf: &[u8], offset: u64) -> IoResult<()> {
        write_at(&mut *lock(&self.bytes)?, buf, offset)
    }

    fn truncate(&mut self, size: u64) -> IoResult<()> {
        let size = usize::try_from(size).map_err(|_| SQLITE_IOERR)?;
        lock(&self.bytes)?.resize(size, 0);
        Ok(())
    }

    fn sync(&mut self, _flags: c_int) -> IoResult<()> {
        Ok(())
    }

    fn size(&mut self) -> IoResult<u64> {
        Ok(lock(&self.bytes)?.len() as u64)
    }

    fn close(&mut self) -> IoResult<()> {
        if let Some((store, name)) = self.delete_on_close.take() {
            store.remove_if_same(&name, &self.bytes)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_write_truncate_size() {
        let mut f = MemFile::anonymous();
        f.write(b"hello", 3).unwrap();
        assert_eq!(f.size().unwrap(), 8);
        let mut buf = [9u8; 8];
        f.read(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"\0\0\0hello");
        let mut buf = [9u8; 4];
        assert_eq!(f.read(&mut buf, 6), Err(SQLITE_IOERR_SHORT_READ));
        assert_eq!(&buf, b"lo\0\0");
        f.truncate(4).unwrap();
        assert_eq!(f.size().unwrap(), 4);
        let mut buf = [9u8; 2];
        assert_eq!(f.read(&mut buf, 100), Err(SQLITE_IOERR_SHORT_READ));
        assert_eq!(buf, [0, 0]);
    }

    #[test]
    fn store_open_exists_remove() {
        let store = Arc::new(MemStore::default());
        assert_eq!(
            store.open(b"a-journal", false, false).err(),
            Some(SQLITE_CANTOPEN)
        );
        let a = store.open(b"a-journal", true, false).unwrap();
        assert!(store.exists(b"a-journal").unwrap());
        assert_eq!(store.open(b"a-journal", true, true).err(), Some(SQLITE_CANTOPEN));
        let again = store.open(b"a-journal", false, false).unwrap();
        assert!(Arc::ptr_eq(&a, &again));
        assert!(store.remove(b"a-journal").unwrap());
        assert!(!store.exists(b"a-journal").unwrap());
        assert!(!store.remove(b"a-journal").unwrap());
    }

    #[test]
    fn delete_on_close_spares_a_newer_file() {
        let store = Arc::new(MemStore::default());
        let old = store.open(b"j", true, false).unwrap();
        let mut f = MemFile::new(old, Some((Arc::clone(&store), b"j".to_vec())));
        store.remove(b"j").unwrap();
        let _new = store.open(b"j", true, false).unwrap();
        f.close().unwrap();
        assert!(store.exists(b"j").unwrap());
    }

    #[test]
    fn journal_names() {
        assert!(is_journal_name(b"/tmp/x.db-journal"));
        assert!(is_journal_name(b"/tmp/x.db-mj1A2B3C9D4"));
        assert!(!is_journal_name(b"/tmp/x.db"));
        assert!(!is_journal_name(b"/tmp/x.db-wal"));
        assert!(!is_journal_name(b"/tmp/x.db-mjXYZ"));
    }
}
