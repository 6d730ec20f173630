//! Words of memory shared between processes: the side file (and the lease's join file)
//! mapped by whoever opens the store. The VFS maps them at its FFI boundary, where this
//! workspace keeps its `unsafe`; without a mapper the store reads and writes the files.

use std::fs::File;
use std::sync::atomic::AtomicU64;

/// The side file's bytes as 64-bit words shared with other processes, mapped by whoever
/// opens the store (the VFS does it at its FFI boundary, where this workspace keeps its
/// `unsafe`). `words()` covers at least the length asked of the mapper
/// ([`crate::SIDE_FILE_LEN`] bytes for the side file).
pub trait SharedWords: Send + Sync {
    fn words(&self) -> &[AtomicU64];
}

/// Maps an open side file of at least the given length (see [`SharedWords`]).
pub type MapSideFile = dyn Fn(&File, usize) -> std::io::Result<Box<dyn SharedWords>> + Send + Sync;

/// [`MapSideFile`] as an [`Options`](crate::Options) field.
#[derive(Clone)]
pub struct SideFileMapper(pub std::sync::Arc<MapSideFile>);

impl std::fmt::Debug for SideFileMapper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SideFileMapper")
    }
}
