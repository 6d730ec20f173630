//! The F2FS backend (`onesync-f2fs`): SQLite's own file format, each transaction's database
//! writes turned into one F2FS multi-block atomic write (the MAW paper's scheme, for an
//! unmodified SQLite).
//!
//! The main database file is SQLite's unix VFS file, passed through, with three changes:
//! - the first write of a transaction starts an atomic write on the file
//!   (`F2FS_IOC_START_ATOMIC_WRITE`); later writes join it, invisible on disk;
//! - SQLite's sync of the file commits it (`F2FS_IOC_COMMIT_ATOMIC_WRITE`, which also makes it
//!   durable: one flush, no journal on disk);
//! - a file closed with an atomic write still open aborts it (`F2FS_IOC_ABORT_VOLATILE_WRITE`),
//!   as the kernel does for a process that dies, and a failed write aborts at once, so a
//!   partial transaction can never be committed.
//!
//! Journals live in memory and are private to their connection (the VFS's memory journals),
//! so ROLLBACK, savepoints and statement rollback work as in stock SQLite: a rollback that
//! finds pages already spilled to the file writes the old images back inside the same atomic
//! write, and its sync commits a transaction whose net change is nothing. Truncations during
//! an atomic write are applied right after its commit (F2FS does not truncate an atomic
//! file); until then a larger file is harmless, SQLite takes the database size from the
//! header.
//!
//! A connection that ends its write transaction without syncing (synchronous=OFF) commits at
//! the unlock: the atomic write must not outlive the transaction.
//!
//! Atomicity is per file: ATTACHed databases each commit atomically, but a transaction over
//! several files is not atomic across them (the super-journal is in memory); the store
//! backend (`onesync`) gives that.

use std::ffi::c_int;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::backend::{
    count_passthrough_sync, DbBackend, FileControl, FileControlCall, IoResult, LockLevel, MainDbFactory,
    OpenRequest, Opened, PassThrough, Pragma,
};
use crate::ffi::{
    SQLITE_CANTOPEN, SQLITE_FULL, SQLITE_IOERR_FSYNC, SQLITE_IOERR_WRITE, SQLITE_NOTFOUND, SQLITE_NOTICE,
    SQLITE_OK, SQLITE_OPEN_READWRITE,
};
use crate::sys::api::ApiTable;
use crate::sys::os::{fstat_dev_ino, ioctl_none, ioctl_read_u32};

/// The name this backend's VFS is registered under (`?vfs=onesync-f2fs`).
pub const F2FS_VFS_NAME: &str = "onesync-f2fs";

// The ioctls, from linux/f2fs.h: _IO(0xf5, 1), _IO(0xf5, 2), _IO(0xf5, 5), _IOR(0xf5, 12, u32).
const F2FS_IOC_START_ATOMIC_WRITE: libc::c_ulong = 0xf501;
const F2FS_IOC_COMMIT_ATOMIC_WRITE: libc::c_ulong = 0xf502;
const F2FS_IOC_ABORT_VOLATILE_WRITE: libc::c_ulong = 0xf505;
const F2FS_IOC_GET_FEATURES: libc::c_ulong = 0x8004_f50c;
/// `F2FS_FEATURE_ATOMIC_WRITE`, the bit SQLite's unix VFS checks too.
const F2FS_FEATURE_ATOMIC_WRITE: u32 = 0x0004;

static ATOMIC_BEGINS: AtomicU64 = AtomicU64::new(0);
static ATOMIC_COMMITS: AtomicU64 = AtomicU64::new(0);
static ATOMIC_ABORTS: AtomicU64 = AtomicU64::new(0);
static PLAIN_SYNCS: AtomicU64 = AtomicU64::new(0);
static DEFERRED_TRUNCATES: AtomicU64 = AtomicU64::new(0);

/// What the F2FS backend has done in this process, all files together.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct F2fsStats {
    /// Atomic writes started (first database write of a transaction).
    pub atomic_begins: u64,
    /// Atomic writes committed (each one flush).
    pub atomic_commits: u64,
    /// Atomic writes aborted (failed write, or closed mid-transaction).
    pub atomic_aborts: u64,
    /// Syncs with no atomic write open (plain fsync).
    pub plain_syncs: u64,
    /// Truncations applied after a commit rather than inside the atomic write.
    pub deferred_truncates: u64,
}

/// The totals so far (take differences around what you measure).
pub fn f2fs_stats() -> F2fsStats {
    F2fsStats {
        atomic_begins: ATOMIC_BEGINS.load(Relaxed),
        atomic_commits: ATOMIC_COMMITS.load(Relaxed),
        atomic_aborts: ATOMIC_ABORTS.load(Relaxed),
        plain_syncs: PLAIN_SYNCS.load(Relaxed),
        deferred_truncates: DEFERRED_TRUNCATES.load(Relaxed),
    }
}

/// Why a file cannot use this backend, or `Ok` if it can: `path` must be on F2FS with atomic
/// writes (the kernel's answer to `F2FS_IOC_GET_FEATURES` on an open descriptor of it).
pub fn f2fs_atomic_write_support(path: &Path) -> Result<(), String> {
    let file = fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    use std::os::fd::AsRawFd;
    atomic_write_feature(file.as_raw_fd()).map_err(|e| format!("{}: {e}", path.display()))
}

fn atomic_write_feature(fd: c_int) -> Result<(), String> {
    let features = match ioctl_read_u32(fd, F2FS_IOC_GET_FEATURES) {
        Ok(features) => features,
        Err(err) => {
            return Err(format!(
                "not on F2FS (F2FS_IOC_GET_FEATURES: {err}); the onesync-f2fs VFS needs F2FS atomic \
             writes, use the onesync VFS (the page store) on other filesystems"
            ))
        }
    };
    if features & F2FS_FEATURE_ATOMIC_WRITE == 0 {
        return Err(format!(
            "this F2FS has no atomic writes (features {features:#x}); use the onesync VFS"
        ));
    }
    Ok(())
}

/// Opens main database files for the F2FS backend.
pub struct F2fsFactory {
    api: ApiTable,
}

impl F2fsFactory {
    pub fn new(api: ApiTable) -> Self {
        Self { api }
    }

    /// Refuses the open, the reason reaching `sqlite3_errmsg` as the store backend's do.
    fn refuse(&self, req: &OpenRequest, code: c_int, msg: String) -> IoResult<Opened> {
        crate::store_db::refuse_main_db(&self.api, req.flags(), code, format!("onesync-f2fs: {msg}"))
    }
}

/// True if SQLite's hot-journal rule would call `journal` hot: it exists and its header is not
/// zeroed. A crashed stock SQLite (another VFS) can leave one; this backend never reads disk
/// journals, so it must not open over one.
fn is_hot_journal(journal: &Path) -> bool {
    use std::io::Read;
    let Ok(mut file) = fs::File::open(journal) else {
        return false;
    };
    let mut header = [0u8; 8];
    file.read_exact(&mut header).is_ok() && header != [0u8; 8]
}

impl MainDbFactory for F2fsFactory {
    fn open(&self, req: &OpenRequest) -> IoResult<Opened> {
        let Some(name) = req.name() else {
            return self.refuse(
                req,
                SQLITE_CANTOPEN,
                "a temporary database cannot use F2FS atomic writes".into(),
            );
        };
        let path = Path::new(std::ffi::OsStr::from_bytes(name.to_bytes()));
        if !req.base_is_unix() {
            return self.refuse(
                req,
                SQLITE_CANTOPEN,
                "the default VFS is not SQLite's unix VFS; the F2FS backend wraps it".into(),
            );
        }
        let beside = |suffix: &str| {
            let mut name = path.as_os_str().to_owned();
            name.push(suffix);
            std::path::PathBuf::from(name)
        };
        let (journal, wal) = (beside("-journal"), beside("-wal"));
        let leftover = if is_hot_journal(&journal) {
            Some(("rollback journal", journal))
        } else if fs::metadata(&wal).is_ok_and(|m| m.len() > 0) {
            Some(("write-ahead log", wal))
        } else {
            None
        };
        if let Some((what, side)) = leftover {
            return self.refuse(
                req,
                SQLITE_CANTOPEN,
                format!(
                    "{} has a {what} ({}) left by another SQLite; open it once with stock SQLite to \
                     recover, then use onesync-f2fs",
                    path.display(),
                    side.display()
                ),
            );
        }
        // A new file: ask its directory first, so that a refusal leaves nothing behind.
        if !path.exists() {
            if let Some(parent) = path.parent().filter(|p| p.is_dir()) {
                if let Err(msg) = f2fs_atomic_write_support(parent) {
                    return self.refuse(req, SQLITE_CANTOPEN, msg);
                }
            }
        }
        let (file, out_flags) = req.open_passthrough_file()?;
        let writable = out_flags & SQLITE_OPEN_READWRITE != 0;
        let fd = match verified_fd(&file, path) {
            Some(fd) => fd,
            None => {
                return self.refuse(
                    req,
                    SQLITE_CANTOPEN,
                    format!(
                        "{}: could not find the unix VFS's descriptor of the file",
                        path.display()
                    ),
                )
            }
        };
        if let Err(msg) = atomic_write_feature(fd) {
            return self.refuse(req, SQLITE_CANTOPEN, format!("{}: {msg}", path.display()));
        }
        Ok(Opened {
            backend: Box::new(F2fsAtomicFile {
                file,
                fd,
                api: self.api,
                writable,
                atomic: false,
                deferred_truncate: None,
            }),
            out_flags,
        })
    }

    fn private_journals(&self) -> bool {
        true
    }
}

/// The unix VFS's descriptor of `file`, if it is `path`'s (same device and inode).
fn verified_fd(file: &PassThrough, path: &Path) -> Option<c_int> {
    let fd = file.unix_fd_candidate()?;
    let want = fs::metadata(path).ok()?;
    let (dev, ino) = fstat_dev_ino(fd)?;
    (dev == want.dev() && ino == want.ino()).then_some(fd)
}

/// A main database file whose transactions are F2FS atomic writes.
struct F2fsAtomicFile {
    file: PassThrough,
    fd: c_int,
    api: ApiTable,
    writable: bool,
    /// An atomic write is open on the file.
    atomic: bool,
    /// A truncation SQLite asked for during the atomic write, applied after its commit.
    deferred_truncate: Option<u64>,
}

impl F2fsAtomicFile {
    fn begin(&mut self) -> IoResult<()> {
        if self.atomic {
            return Ok(());
        }
        let api = &self.api;
        ioctl_none(self.fd, F2FS_IOC_START_ATOMIC_WRITE).map_err(|e| {
            let msg = format!("onesync-f2fs: F2FS_IOC_START_ATOMIC_WRITE: {e}");
            api.log(SQLITE_IOERR_WRITE, &msg);
            SQLITE_IOERR_WRITE
        })?;
        ATOMIC_BEGINS.fetch_add(1, Relaxed);
        self.atomic = true;
        Ok(())
    }

    /// Commits the open atomic write (durable on return), then applies a deferred truncation.
    fn commit(&mut self) -> IoResult<()> {
        if !self.atomic {
            return Ok(());
        }
        self.atomic = false;
        count_passthrough_sync();
        if let Err(e) = ioctl_none(self.fd, F2FS_IOC_COMMIT_ATOMIC_WRITE) {
            // The kernel dropped the atomic pages: the file holds the last commit.
            let msg = format!("onesync-f2fs: F2FS_IOC_COMMIT_ATOMIC_WRITE: {e}");
            self.api.log(SQLITE_IOERR_FSYNC, &msg);
            let _ = ioctl_none(self.fd, F2FS_IOC_ABORT_VOLATILE_WRITE);
            ATOMIC_ABORTS.fetch_add(1, Relaxed);
            return Err(if e.raw_os_error() == Some(libc::ENOSPC) {
                SQLITE_FULL
            } else {
                SQLITE_IOERR_FSYNC
            });
        }
        ATOMIC_COMMITS.fetch_add(1, Relaxed);
        if let Some(size) = self.deferred_truncate.take() {
            DEFERRED_TRUNCATES.fetch_add(1, Relaxed);
            self.file.truncate(size)?;
        }
        Ok(())
    }

    fn abort(&mut self) {
        if self.atomic {
            self.atomic = false;
            self.deferred_truncate = None;
            let _ = ioctl_none(self.fd, F2FS_IOC_ABORT_VOLATILE_WRITE);
            ATOMIC_ABORTS.fetch_add(1, Relaxed);
        }
    }

    /// `SQLITE_FCNTL_PRAGMA`: `SQLITE_NOTFOUND` for a pragma left to SQLite.
    fn pragma(&mut self, call: &Pragma<'_>) -> c_int {
        match (call.name.as_deref(), call.value.as_deref()) {
            (Some("journal_mode"), _) if call.journal_mode_change() == Some("wal") => {
                // A plain SQLite file whose readers do block its writer: WAL's promises are
                // not kept here, so the answer is stock's to a change it cannot make, the mode
                // in effect (crates/vfs/README.md, "journal_mode").
                self.api.log(
                    SQLITE_NOTICE,
                    "onesync-f2fs: journal_mode=WAL answered with the mode in effect: each \
                     transaction is one F2FS atomic write of the database file, which a WAL \
                     would bypass",
                );
                call.make_sqlite_run_it_as_a_query();
                SQLITE_NOTFOUND
            }
            (Some("onesync_f2fs_stats"), _) => {
                call.reply(
                    &self.api,
                    &serde_json::to_string(&f2fs_stats()).unwrap_or_default(),
                );
                SQLITE_OK
            }
            _ => SQLITE_NOTFOUND,
        }
    }
}

impl DbBackend for F2fsAtomicFile {
    fn read(&mut self, buf: &mut [u8], offset: u64) -> IoResult<()> {
        self.file.read(buf, offset)
    }

    fn write(&mut self, buf: &[u8], offset: u64) -> IoResult<()> {
        if self.writable {
            self.begin()?;
        }
        if let Some(size) = self.deferred_truncate.as_mut() {
            *size = (*size).max(offset + buf.len() as u64);
        }
        let written = self.file.write(buf, offset);
        if written.is_err() {
            // A transaction missing a write must never commit: drop it now.
            self.abort();
        }
        written
    }

    fn truncate(&mut self, size: u64) -> IoResult<()> {
        if self.atomic {
            let current = self.deferred_truncate.unwrap_or(u64::MAX);
            self.deferred_truncate = Some(current.min(size));
            return Ok(());
        }
        self.file.truncate(size)
    }

    fn sync(&mut self, flags: c_int) -> IoResult<()> {
        if self.atomic {
            return self.commit();
        }
        PLAIN_SYNCS.fetch_add(1, Relaxed);
        self.file.sync(flags)
    }

    fn size(&mut self) -> IoResult<u64> {
        let size = self.file.size()?;
        Ok(self.deferred_truncate.map_or(size, |t| t.min(size)))
    }

    fn lock(&mut self, level: LockLevel) -> IoResult<()> {
        self.file.lock(level)
    }

    fn unlock(&mut self, level: LockLevel) -> IoResult<()> {
        if level < LockLevel::Reserved {
            // The write transaction ended without a sync (synchronous=OFF): its writes are
            // SQLite's final word on the file, so they commit before others may read it.
            self.commit()?;
        }
        self.file.unlock(level)
    }

    fn check_reserved_lock(&mut self) -> IoResult<bool> {
        self.file.check_reserved_lock()
    }

    fn file_control(&mut self, call: &FileControlCall<'_>) -> c_int {
        if let FileControl::Pragma(pragma) = &call.control {
            let rc = self.pragma(pragma);
            if rc != SQLITE_NOTFOUND {
                return rc;
            }
        }
        self.file.file_control(call)
    }

    fn sector_size(&mut self) -> c_int {
        self.file.sector_size()
    }

    fn device_characteristics(&mut self) -> c_int {
        // Not SQLITE_IOCAP_BATCH_ATOMIC: the whole transaction is already one atomic write,
        // in every SQLite, whether or not it was built with batch atomic writes.
        self.file.device_characteristics()
    }

    fn close(&mut self) -> IoResult<()> {
        self.abort();
        self.file.close()
    }
}
