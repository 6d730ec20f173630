//! The I/O layer under the store: positioned reads and writes and a data flush. The real
//! implementation is a file; [`crate::sim`] provides one that models power cuts.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

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
}

/// The real I/O: pread/pwrite/fdatasync on a file.
pub struct FileIo {
    file: File,
}

impl FileIo {
    pub fn new(file: File) -> FileIo {
        FileIo { file }
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
}
