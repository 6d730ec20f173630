//! The store's side file mapped into memory (`onesync_store::SharedWords`): processes sharing
//! a store then publish progress, pins and durability with a store to memory instead of a
//! `pwrite` each (as SQLite's WAL does with its `-shm` file).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use onesync_store::{SharedWords, SideFileMapper};

/// A shared, writable mapping of the first `len` bytes of a file, unmapped when dropped.
struct MappedWords {
    base: *mut libc::c_void,
    len: usize,
}

// SAFETY: the mapping is only ever accessed through `AtomicU64`s (which are Sync), and the
// pointer is owned by this value alone until `Drop` unmaps it.
unsafe impl Send for MappedWords {}
// SAFETY: as above: shared access goes through atomics only.
unsafe impl Sync for MappedWords {}

impl SharedWords for MappedWords {
    fn words(&self) -> &[AtomicU64] {
        // SAFETY: `base` is a live MAP_SHARED mapping of `len` bytes (page-aligned, so
        // aligned for u64), readable and writable, valid until `self` is dropped, which the
        // returned borrow cannot outlive. Every access goes through AtomicU64, so writes by
        // other processes or threads are not data races. The caller made the file at least
        // `len` bytes long, so no word lies past its end (which would fault).
        unsafe { std::slice::from_raw_parts(self.base as *const AtomicU64, self.len / 8) }
    }
}

impl Drop for MappedWords {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are exactly what mmap returned and took; no borrow of the
        // words outlives `self`.
        unsafe {
            libc::munmap(self.base, self.len);
        }
    }
}

fn map_words(file: &File, len: usize) -> std::io::Result<Box<dyn SharedWords>> {
    // SAFETY: a new mapping at an address the kernel picks; the descriptor is only read
    // (the mapping keeps its own reference to the file, so it outlives `file`).
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(Box::new(MappedWords { base, len }))
}

/// The mapper the VFS hands to every store it opens.
pub fn side_file_mapper() -> SideFileMapper {
    SideFileMapper(Arc::new(map_words))
}
