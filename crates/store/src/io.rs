//! The I/O layer under the store: positioned reads and writes and a data flush. The real
//! implementation is a file; [`crate::sim`] provides one that models power cuts.
//!
//! # Test hook: the write log (`ONESYNC_IO_LOG`, feature `test-hooks`)
//! Only in builds with the feature `test-hooks` (the lab's `onesync-lab-hooked`); without
//! it `FileIo` reads no environment variable and logs nothing. For crash tests against the real kernel (the lab's `onesync-lab explore`). If the environment
//! variable `ONESYNC_IO_LOG` names a file when a [`FileIo`] is created, that `FileIo` appends
//! to it (opened `O_APPEND`, so the records of every process sharing the log are in one
//! global order, each record one `write(2)`):
//! * after every successful `write_at`: a `W` record with the data (a `Z` record without it
//!   when the data is all zeros, as preallocation writes are);
//! * before every `sync_data`: a `B` record (a write logged before it completed before the
//!   flush began, so the flush covers it), and after a successful one an `S` record.
//!
//! A test rebuilds what a power cut at any point of the log would leave: every write before
//! a completed flush's `B` survives; every later one may be lost, kept or torn. Records
//! (integers little-endian) are [`LOG_HEADER_LEN`] bytes: kind (1 byte, then 3 zero bytes),
//! pid (u32), device (u64) and inode (u64) of the file, offset (u64), length (u64); then
//! `length` bytes of data for `W` and `N`. `N` records are notes a test program writes into
//! the same order with [`IoLog::note`] (e.g. "this commit was acknowledged"). Failing to log
//! is an I/O error of the call (after its write or flush was done). Unset, nothing changes.

use std::fs::{File, OpenOptions};
use std::io;
#[cfg(feature = "test-hooks")]
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
#[cfg(feature = "test-hooks")]
use std::os::unix::fs::MetadataExt;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::OnceLock;

/// The environment variable naming the write log (see the module documentation).
#[cfg(feature = "test-hooks")]
pub const IO_LOG_ENV: &str = "ONESYNC_IO_LOG";
/// Bytes of a log record before its data.
pub const LOG_HEADER_LEN: usize = 40;
/// Record kinds of the write log.
pub const LOG_WRITE: u8 = b'W';
pub const LOG_ZEROS: u8 = b'Z';
pub const LOG_SYNC_BEGIN: u8 = b'B';
pub const LOG_SYNCED: u8 = b'S';
pub const LOG_NOTE: u8 = b'N';

/// The shared write log of this process (a test hook; see the module documentation).
#[cfg(feature = "test-hooks")]
pub struct IoLog {
    file: File,
    pid: u32,
}

#[cfg(feature = "test-hooks")]
impl IoLog {
    /// The log `ONESYNC_IO_LOG` names, if set (opened for appending, created if missing).
    pub fn from_env() -> io::Result<Option<IoLog>> {
        let Some(path) = std::env::var_os(IO_LOG_ENV).filter(|p| !p.is_empty()) else {
            return Ok(None);
        };
        let file = OpenOptions::new().append(true).create(true).open(path)?;
        Ok(Some(IoLog {
            file,
            pid: std::process::id(),
        }))
    }

    /// Appends a note (text of the test's choosing) to the log's one order.
    pub fn note(&self, text: &str) -> io::Result<()> {
        self.append(LOG_NOTE, (0, 0), 0, text.len() as u64, text.as_bytes())
    }

    /// One record, one `write(2)`: a short write would let another process's record in.
    fn append(&self, kind: u8, (dev, ino): (u64, u64), offset: u64, len: u64, data: &[u8]) -> io::Result<()> {
        let mut record = Vec::with_capacity(LOG_HEADER_LEN + data.len());
        record.extend_from_slice(&[kind, 0, 0, 0]);
        record.extend_from_slice(&self.pid.to_le_bytes());
        for field in [dev, ino, offset, len] {
            record.extend_from_slice(&field.to_le_bytes());
        }
        record.extend_from_slice(data);
        let written = (&self.file).write(&record)?;
        if written != record.len() {
            return Err(io::Error::other(format!(
                "{IO_LOG_ENV}: wrote {written} of a {}-byte record",
                record.len()
            )));
        }
        Ok(())
    }
}

/// A `FileIo`'s part in the write log: the log and the file's identity.
#[cfg(feature = "test-hooks")]
struct LoggedFile {
    log: IoLog,
    id: (u64, u64),
}

#[cfg(feature = "test-hooks")]
impl LoggedFile {
    /// `Ok(None)` when `ONESYNC_IO_LOG` is unset; an error message when it is set but unusable
    /// (then every write and flush fails: a crash test must not run without its record).
    fn for_file(file: &File) -> Result<Option<LoggedFile>, String> {
        let log = IoLog::from_env().map_err(|e| format!("{IO_LOG_ENV}: cannot open the write log: {e}"))?;
        let Some(log) = log else {
            return Ok(None);
        };
        let meta = file
            .metadata()
            .map_err(|e| format!("{IO_LOG_ENV}: cannot identify the file to log: {e}"))?;
        Ok(Some(LoggedFile {
            log,
            id: (meta.dev(), meta.ino()),
        }))
    }
}

/// What the store needs from the medium. Implementations must be safe to call from several
/// threads at once (writes to disjoint ranges may run concurrently).
pub trait StorageIo: Send + Sync {
    /// Fill `buf` from `offset`; a short read is an `UnexpectedEof` error.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Write all of `data` at `offset`, extending the medium if needed.
    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()>;
    /// Make every completed write durable (fdatasync).
    fn sync_data(&self) -> io::Result<()>;
    /// Current length in bytes.
    fn size(&self) -> io::Result<u64>;
    /// Cut the medium to `len` bytes (only ever shorter), giving the space past it back to
    /// the filesystem. Durable with the next `sync_data`. Media that cannot shrink keep
    /// the default, which refuses, and the store then keeps its length.
    fn set_len(&self, _len: u64) -> io::Result<()> {
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }
    /// Fill `buf` from `offset` with what the device holds, not a cache of it. After a
    /// failed flush Linux keeps the lost writes in the page cache, marked clean, so a
    /// plain read would show a commit that never reached the disk; recovery reads the
    /// chain with this. By default the same as `read_at`.
    fn read_durable_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.read_at(buf, offset)
    }
    /// Whether recovery may read the chain ahead on a thread of its own, so that a
    /// device's reads overlap the checks of what it read. Not by default: a simulated
    /// medium that counts calls to cut the power after the n-th wants the same calls in
    /// the same order in every run.
    fn reads_ahead_on_a_thread(&self) -> bool {
        false
    }
}

/// The real I/O: pread/pwrite/fdatasync on a file.
pub struct FileIo {
    file: File,
    /// The same file opened with `O_DIRECT`, for `read_durable_at`; `None` where the
    /// filesystem refuses it (tmpfs), which has no device to differ from.
    direct: OnceLock<Option<File>>,
    /// The test hook `ONESYNC_IO_LOG`, when set.
    #[cfg(feature = "test-hooks")]
    log: Result<Option<LoggedFile>, String>,
}

/// `O_DIRECT` wants buffers, offsets and lengths aligned to the logical block size; this
/// covers every common one.
pub(crate) const DIRECT_ALIGN: usize = 4096;

impl FileIo {
    pub fn new(file: File) -> FileIo {
        #[cfg(feature = "test-hooks")]
        let log = LoggedFile::for_file(&file);
        // The store reads single slots scattered over the file (a record at the chain's
        // head, a page): readahead only adds work. Advice only; failure changes nothing.
        let _ = nix::fcntl::posix_fadvise(&file, 0, 0, nix::fcntl::PosixFadviseAdvice::POSIX_FADV_RANDOM);
        FileIo {
            file,
            direct: OnceLock::new(),
            #[cfg(feature = "test-hooks")]
            log,
        }
    }

    fn direct(&self) -> Option<&File> {
        self.direct
            .get_or_init(|| {
                // A second open file description of the same file (no lock lives on it).
                let path = format!("/proc/self/fd/{}", self.file.as_raw_fd());
                OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_DIRECT)
                    .open(path)
                    .ok()
            })
            .as_ref()
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    #[cfg(feature = "test-hooks")]
    fn log(&self) -> io::Result<Option<&LoggedFile>> {
        self.log
            .as_ref()
            .map(Option::as_ref)
            .map_err(|e| io::Error::other(e.clone()))
    }
}

impl StorageIo for FileIo {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        #[cfg(feature = "test-hooks")]
        let log = self.log()?;
        self.file.write_all_at(data, offset)?;
        #[cfg(feature = "test-hooks")]
        if let Some(l) = log {
            let len = data.len() as u64;
            if data.iter().all(|&b| b == 0) {
                l.log.append(LOG_ZEROS, l.id, offset, len, &[])?;
            } else {
                l.log.append(LOG_WRITE, l.id, offset, len, data)?;
            }
        }
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        #[cfg(feature = "test-hooks")]
        let log = self.log()?;
        #[cfg(feature = "test-hooks")]
        if let Some(l) = log {
            l.log.append(LOG_SYNC_BEGIN, l.id, 0, 0, &[])?;
        }
        self.file.sync_data()?;
        #[cfg(feature = "test-hooks")]
        if let Some(l) = log {
            l.log.append(LOG_SYNCED, l.id, 0, 0, &[])?;
        }
        Ok(())
    }

    fn size(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn reads_ahead_on_a_thread(&self) -> bool {
        true
    }

    fn read_durable_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let Some(direct) = self.direct() else {
            return self.read_at(buf, offset);
        };
        let align = DIRECT_ALIGN as u64;
        let past_end = || io::Error::new(io::ErrorKind::UnexpectedEof, "read past the end of the file");
        // A buffer the device can fill as it is (recovery's read-ahead): no bounce buffer
        // to allocate, clear and copy out of.
        if buf.as_ptr().align_offset(DIRECT_ALIGN) == 0
            && offset.is_multiple_of(align)
            && buf.len().is_multiple_of(DIRECT_ALIGN)
        {
            return match read_direct(direct, buf, offset) {
                Ok(got) if got == buf.len() => Ok(()),
                Ok(_) => Err(past_end()),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => self.read_at(buf, offset),
                Err(e) => Err(e),
            };
        }
        let start = offset / align * align;
        let end = (offset + buf.len() as u64).div_ceil(align) * align;
        let len = (end - start) as usize;
        let mut raw = vec![0u8; len + DIRECT_ALIGN];
        let skip = raw.as_ptr().align_offset(DIRECT_ALIGN);
        let aligned = &mut raw[skip..skip + len];
        // The last block may be short (end of file): read what there is.
        let got = match read_direct(direct, aligned, start) {
            Ok(got) => got,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return self.read_at(buf, offset),
            Err(e) => return Err(e),
        };
        let from = (offset - start) as usize;
        if got < from + buf.len() {
            return Err(past_end());
        }
        buf.copy_from_slice(&aligned[from..from + buf.len()]);
        Ok(())
    }
}

/// Fill `aligned` from `offset` of a file opened with `O_DIRECT`, up to its end; returns
/// the bytes read.
fn read_direct(direct: &File, aligned: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut got = 0;
    while got < aligned.len() {
        match direct.read_at(&mut aligned[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads past the cache return what was written (and flushed), at any offset and length.
    #[test]
    fn durable_reads_match_plain_reads() {
        let dir = tempfile::tempdir().unwrap();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.path().join("f"))
            .unwrap();
        let io = FileIo::new(file);
        let data: Vec<u8> = (0..20_000u32).map(|i| (i * 7 % 251) as u8).collect();
        io.write_at(&data, 0).unwrap();
        io.sync_data().unwrap();
        for (offset, len) in [
            (0usize, 1usize),
            (100, 5000),
            (4095, 2),
            (8192, 512),
            (19_000, 1000),
        ] {
            let mut direct = vec![0u8; len];
            io.read_durable_at(&mut direct, offset as u64).unwrap();
            assert_eq!(direct, &data[offset..offset + len], "{offset}+{len}");
        }
        let mut past = [0u8; 10];
        assert!(io.read_durable_at(&mut past, 19_995).is_err());
        // Aligned buffers are read into as they are (recovery's read-ahead).
        let mut raw = vec![0u8; 3 * DIRECT_ALIGN];
        let skip = raw.as_ptr().align_offset(DIRECT_ALIGN);
        let aligned = &mut raw[skip..skip + 2 * DIRECT_ALIGN];
        io.read_durable_at(aligned, 4096).unwrap();
        assert_eq!(aligned, &data[4096..12_288]);
        assert!(
            io.read_durable_at(aligned, 16_384).is_err(),
            "an aligned read past the end fails"
        );
    }

    /// The record layout the module documentation promises, through `IoLog` directly (the
    /// environment variable is process-wide, so tests do not set it).
    #[cfg(feature = "test-hooks")]
    #[test]
    fn log_records_have_the_documented_layout() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let log = IoLog {
            file: OpenOptions::new().append(true).create(true).open(&path).unwrap(),
            pid: 7,
        };
        log.append(LOG_WRITE, (1, 2), 4096, 3, b"abc").unwrap();
        log.note("hi").unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len(), 2 * LOG_HEADER_LEN + 5);
        assert_eq!(&bytes[..4], b"W\0\0\0");
        assert_eq!(u32::from_le_bytes(bytes[4..8].try_into().unwrap()), 7);
        let field = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
        assert_eq!([field(8), field(16), field(24), field(32)], [1, 2, 4096, 3]);
        assert_eq!(&bytes[40..43], b"abc");
        assert_eq!(bytes[43], LOG_NOTE);
        assert_eq!(&bytes[43 + LOG_HEADER_LEN..], b"hi");
    }
}
