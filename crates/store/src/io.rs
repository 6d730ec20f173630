//! The I/O layer under the store: positioned reads and writes and a data flush. The real
//! implementation is a file; [`crate::sim`] provides one that models power cuts.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::OnceLock;

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
    /// Fill `buf` from `offset` with what the device holds, not a cache of it. After a
    /// failed flush Linux keeps the lost writes in the page cache, marked clean, so a
    /// plain read would show a commit that never reached the disk; recovery reads the
    /// chain with this. By default the same as `read_at`.
    fn read_durable_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.read_at(buf, offset)
    }
}

/// The real I/O: pread/pwrite/fdatasync on a file.
pub struct FileIo {
    file: File,
    /// The same file opened with `O_DIRECT`, for `read_durable_at`; `None` where the
    /// filesystem refuses it (tmpfs), which has no device to differ from.
    direct: OnceLock<Option<File>>,
}

/// `O_DIRECT` wants buffers, offsets and lengths aligned to the logical block size; this
/// covers every common one.
const DIRECT_ALIGN: usize = 4096;

impl FileIo {
    pub fn new(file: File) -> FileIo {
        FileIo {
            file,
            direct: OnceLock::new(),
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
}

impl StorageIo for FileIo {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(data, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn size(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn read_durable_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let Some(direct) = self.direct() else {
            return self.read_at(buf, offset);
        };
        let align = DIRECT_ALIGN as u64;
        let start = offset / align * align;
        let end = (offset + buf.len() as u64).div_ceil(align) * align;
        let len = (end - start) as usize;
        let mut raw = vec![0u8; len + DIRECT_ALIGN];
        let skip = raw.as_ptr().align_offset(DIRECT_ALIGN);
        let aligned = &mut raw[skip..skip + len];
        let mut got = 0;
        // The last block may be short (end of file): read what there is.
        while got < len {
            match direct.read_at(&mut aligned[got..], start + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return self.read_at(buf, offset),
                Err(e) => return Err(e),
            }
        }
        let from = (offset - start) as usize;
        if got < from + buf.len() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "read past the end of the file",
            ));
        }
        buf.copy_from_slice(&aligned[from..from + buf.len()]);
        Ok(())
    }
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
    }
}
