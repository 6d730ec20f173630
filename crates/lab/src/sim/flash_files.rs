//! The `onesync-flash` VFS: SQLite's files on the simulated drive's filesystem
//! ([`FlashFs`]), served through this project's VFS (`RegisterOptions::files`).
//!
//! Stock journal modes see plain files (writes, `fdatasync`); on an X-FTL-mounted
//! filesystem every write of a file belongs to that file's drive transaction, the sync
//! commits it, and a connection that gives up its write lock with writes it never synced
//! (a ROLLBACK, a failed commit) aborts it. SQLite runs with `journal_mode=MEMORY` there, so
//! ROLLBACK and savepoints keep working from its in-memory journal, as on the onesync VFS.
//!
//! One filesystem at a time is installed ([`FlashFiles::install`]); the lab swaps in a new
//! one per run and after every power cut.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use anyhow::{anyhow, Result};
use onesync_flash::hostfs::{FileId, FlashFs, FsError};
use onesync_vfs::ffi::{
    SQLITE_CANTOPEN, SQLITE_FULL, SQLITE_IOCAP_POWERSAFE_OVERWRITE, SQLITE_IOERR, SQLITE_IOERR_DELETE_NOENT,
    SQLITE_IOERR_SHMMAP, SQLITE_IOERR_SHORT_READ, SQLITE_OK, SQLITE_OPEN_CREATE, SQLITE_OPEN_DELETEONCLOSE,
};
use onesync_vfs::{DbBackend, FileSystem, IoResult, LockLevel};

/// The VFS name.
pub const FLASH_VFS: &str = "onesync-flash";

/// Shared-memory regions of one file (the WAL index): one process, so plain heap memory.
type ShmRegions = Vec<Box<[u8]>>;

/// The files of the installed filesystem (a handle: clones share it).
#[derive(Clone, Default)]
pub struct FlashFiles {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    fs: Mutex<Option<FlashFs>>,
    shm: Mutex<HashMap<String, ShmRegions>>,
    anonymous: Mutex<u64>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The registered VFS's files (registered with the lab's SQLite on first use).
pub fn flash_files() -> Result<FlashFiles> {
    static FILES: OnceLock<FlashFiles> = OnceLock::new();
    if let Some(files) = FILES.get() {
        return Ok(files.clone());
    }
    let files = FlashFiles::default();
    let api = onesync_vfs::api_table_from_sys!(rusqlite::ffi);
    onesync_vfs::register_with(
        &api,
        onesync_vfs::RegisterOptions {
            name: FLASH_VFS.to_owned(),
            make_default: false,
            main_db: Box::new(onesync_vfs::PassThroughFactory),
            memory_journals: false,
            files: Some(Arc::new(files.clone())),
        },
    )
    .map_err(|e| anyhow!("registering the {FLASH_VFS} VFS: {e}"))?;
    Ok(FILES.get_or_init(|| files).clone())
}

impl FlashFiles {
    /// Serves SQLite from `fs` from now on (files of the previous one are forgotten).
    pub fn install(&self, fs: FlashFs) {
        *lock(&self.shared.fs) = Some(fs);
        lock(&self.shared.shm).clear();
    }

    /// Takes the filesystem out (to cut its power, restart its drive, read its counters).
    pub fn take(&self) -> Option<FlashFs> {
        lock(&self.shared.shm).clear();
        lock(&self.shared.fs).take()
    }

    /// Runs `f` on the installed filesystem.
    pub fn with<T>(&self, f: impl FnOnce(&mut FlashFs) -> T) -> Result<T> {
        let mut guard = lock(&self.shared.fs);
        let fs = guard
            .as_mut()
            .ok_or_else(|| anyhow!("no flash filesystem is installed"))?;
        Ok(f(fs))
    }

    fn call<T>(&self, err: i32, f: impl FnOnce(&mut FlashFs) -> Result<T, FsError>) -> IoResult<T> {
        let mut guard = lock(&self.shared.fs);
        let fs = guard.as_mut().ok_or(SQLITE_IOERR)?;
        f(fs).map_err(|e| code_for(&e, err))
    }
}

/// The SQLite result code for a filesystem error (`default` for I/O errors).
fn code_for(error: &FsError, default: i32) -> i32 {
    match error {
        FsError::NoSpace(_) => SQLITE_FULL,
        FsError::NotFound(_) | FsError::NameTooLong(_) | FsError::TooManyFiles(_) => SQLITE_CANTOPEN,
        _ => default,
    }
}

/// Files are known by the last component of SQLite's path (the filesystem has one directory).
fn file_name(path: &[u8]) -> String {
    let base = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
    String::from_utf8_lossy(base).into_owned()
}

impl FileSystem for FlashFiles {
    fn open(&self, name: Option<&[u8]>, flags: i32) -> IoResult<(Box<dyn DbBackend>, i32)> {
        let (name, delete_on_close) = match name {
            Some(path) => (file_name(path), flags & SQLITE_OPEN_DELETEONCLOSE != 0),
            None => {
                let mut n = lock(&self.shared.anonymous);
                *n += 1;
                (format!("temp-{n}"), true)
            }
        };
        let create = flags & SQLITE_OPEN_CREATE != 0;
        let id = self.call(SQLITE_CANTOPEN, |fs| fs.open(&name, create))?;
        Ok((
            Box::new(FlashHandle {
                files: self.clone(),
                id,
                name,
                delete_on_close,
                level: LockLevel::None,
                unsynced_writes: false,
            }),
            flags,
        ))
    }

    fn delete(&self, name: &[u8], sync_dir: bool) -> IoResult<()> {
        let name = file_name(name);
        if !self.exists(name.as_bytes())? {
            return Err(SQLITE_IOERR_DELETE_NOENT);
        }
        self.call(SQLITE_IOERR, |fs| {
            fs.unlink(&name)?;
            if sync_dir {
                fs.sync_directory()?;
            }
            Ok(())
        })
    }

    fn exists(&self, name: &[u8]) -> IoResult<bool> {
        let name = file_name(name);
        self.call(SQLITE_IOERR, |fs| Ok(fs.exists(&name)))
    }
}

struct FlashHandle {
    files: FlashFiles,
    id: FileId,
    name: String,
    delete_on_close: bool,
    level: LockLevel,
    /// Writes since the last sync: a drive transaction an unlock must abort.
    unsynced_writes: bool,
}

impl DbBackend for FlashHandle {
    fn read(&mut self, buf: &mut [u8], offset: u64) -> IoResult<()> {
        let id = self.id;
        let n = self
            .files
            .call(onesync_vfs::ffi::SQLITE_IOERR_READ, |fs| fs.read(id, offset, buf))?;
        if n < buf.len() {
            return Err(SQLITE_IOERR_SHORT_READ);
        }
        Ok(())
    }

    fn write(&mut self, buf: &[u8], offset: u64) -> IoResult<()> {
        let id = self.id;
        self.unsynced_writes = true;
        self.files.call(onesync_vfs::ffi::SQLITE_IOERR_WRITE, |fs| {
            fs.write(id, offset, buf)
        })
    }

    fn truncate(&mut self, size: u64) -> IoResult<()> {
        let id = self.id;
        self.unsynced_writes = true;
        self.files.call(onesync_vfs::ffi::SQLITE_IOERR_TRUNCATE, |fs| {
            fs.truncate(id, size)
        })
    }

    fn sync(&mut self, _flags: i32) -> IoResult<()> {
        let id = self.id;
        self.files
            .call(onesync_vfs::ffi::SQLITE_IOERR_FSYNC, |fs| fs.fdatasync(id))?;
        self.unsynced_writes = false;
        Ok(())
    }

    fn size(&mut self) -> IoResult<u64> {
        let id = self.id;
        self.files.call(SQLITE_IOERR, |fs| fs.size(id))
    }

    fn lock(&mut self, level: LockLevel) -> IoResult<()> {
        self.level = self.level.max(level);
        Ok(())
    }

    fn unlock(&mut self, level: LockLevel) -> IoResult<()> {
        if level < LockLevel::Reserved && self.level >= LockLevel::Reserved && self.unsynced_writes {
            // The transaction ended without its sync: a rollback (X-FTL: abort).
            let id = self.id;
            self.unsynced_writes = false;
            self.files.call(SQLITE_IOERR, |fs| fs.abort(id))?;
        }
        self.level = level;
        Ok(())
    }

    fn sector_size(&mut self) -> i32 {
        4096
    }

    fn device_characteristics(&mut self) -> i32 {
        SQLITE_IOCAP_POWERSAFE_OVERWRITE
    }

    fn has_shm(&self) -> bool {
        true
    }

    fn shm_map(&mut self, region: i32, size: i32, extend: bool, out: &mut *mut std::ffi::c_void) -> i32 {
        let (Ok(region), Ok(size)) = (usize::try_from(region), usize::try_from(size)) else {
            return SQLITE_IOERR_SHMMAP;
        };
        let mut shm = lock(&self.files.shared.shm);
        let regions = shm.entry(self.name.clone()).or_default();
        if regions.len() <= region {
            if !extend {
                *out = std::ptr::null_mut();
                return SQLITE_OK;
            }
            regions.resize_with(region + 1, || vec![0u8; size].into_boxed_slice());
        }
        // The boxed region never moves or shrinks until shm_unmap (or a new filesystem).
        *out = regions[region].as_mut_ptr().cast();
        SQLITE_OK
    }

    fn shm_lock(&mut self, _offset: i32, _n: i32, _flags: i32) -> i32 {
        // One connection per database in the lab's flash runs.
        SQLITE_OK
    }

    fn shm_unmap(&mut self, delete: bool) -> i32 {
        if delete {
            lock(&self.files.shared.shm).remove(&self.name);
        }
        SQLITE_OK
    }

    fn close(&mut self) -> IoResult<()> {
        if self.delete_on_close {
            let name = self.name.clone();
            // A temporary file's deletion failing (power lost) loses nothing.
            let _ = self.files.call(SQLITE_IOERR, |fs| fs.unlink(&name));
        }
        Ok(())
    }
}
