//! The types every layer shares: keys and values of the mapping, references to blocks and
//! runs, the two traits through which the store lends its slots, and the error.

use std::fmt;
use std::io;
use std::sync::Arc;

/// `slot` of a mapping whose base content is zeros: the page is its overlay alone.
pub const NO_SLOT: u64 = u64::MAX;

/// A logical page: its file id and page number, ordered by file, then page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub file: u32,
    pub page: u64,
}

impl Key {
    /// The smallest key: where a walk of a whole run starts.
    pub const MIN: Key = Key { file: 0, page: 0 };
    /// The largest key.
    pub const MAX: Key = Key {
        file: u32::MAX,
        page: u64::MAX,
    };

    pub const fn new(file: u32, page: u64) -> Key {
        Key { file, page }
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "(file {}, page {})", self.file, self.page)
    }
}

/// Where a page lives: the slot holding its base content (or [`NO_SLOT`]), that content's
/// CRC-32C, the page's version, and the byte ranges laid over it (sorted by offset, disjoint,
/// not adjacent; the store's `Overlay`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapped {
    pub slot: u64,
    pub crc: u32,
    /// The page's version: the sequence number of the commit that last changed it (the
    /// store's `PageEntry::seq`). Stored exactly, never implied by the checkpoint: conflict
    /// checks compare it between states of the mapping.
    pub seq: u64,
    pub overlay: Vec<(u32, Arc<[u8]>)>,
}

impl Mapped {
    pub fn new(slot: u64, crc: u32, seq: u64, overlay: Vec<(u32, Arc<[u8]>)>) -> Mapped {
        Mapped {
            slot,
            crc,
            seq,
            overlay,
        }
    }
}

/// What a run holds for a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Mapped(Mapped),
    /// A tombstone: the key has no mapping, whatever older runs hold for it. `seq` is the
    /// sequence number of the commit that dropped the page.
    Dropped {
        seq: u64,
    },
}

/// A block on disk: its first slot, its length in slots, and the CRC-32C of all its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BlockRef {
    pub slot: u64,
    pub slots: u32,
    pub crc: u32,
}

/// One run: its root block and what a reader needs to know without reading it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunRef {
    pub root: BlockRef,
    /// Levels of blocks: 1 when the root is a leaf.
    pub height: u8,
    /// Entries in the run, tombstones included.
    pub entries: u64,
    /// Slots of all the run's blocks.
    pub slots: u64,
    /// The run's smallest and largest keys: a lookup outside them reads nothing.
    pub first: Key,
    pub last: Key,
}

/// How the mapping reads its blocks: the store's slots.
pub trait BlockIo: Sync {
    /// The store's page size, which is also its slot size (512..=65536, a power of two).
    fn slot_size(&self) -> usize;
    /// Reads the whole block into `buf` (`block.slots * slot_size` bytes).
    fn read_block(&self, block: BlockRef, buf: &mut [u8]) -> io::Result<()>;
}

/// How the mapping writes its blocks: the store places them in free slots.
pub trait BlockSink {
    fn slot_size(&self) -> usize;
    /// Place `bytes` (a whole number of slots) in free slots of the sink's choosing,
    /// contiguous, and write them; returns the first slot.
    fn place(&mut self, bytes: &[u8]) -> Result<u64, Error>;
}

/// Why a mapping operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading a block failed; `during` says what the mapping was doing.
    #[error("{during}: {source}")]
    Io {
        during: &'static str,
        #[source]
        source: io::Error,
    },
    /// A block does not match its CRC or does not decode, or keys are out of order: never a
    /// wrong value instead.
    #[error("the page mapping is damaged: {0}")]
    Corrupt(String),
    /// The sink failed: the store's own error, which it gets back by downcasting.
    #[error(transparent)]
    Sink(Box<dyn std::error::Error + Send + Sync>),
}

/// One step of a stream that ends after its last entry or its first error: `done` is set
/// then, and the stream yields nothing more.
pub(crate) fn ends_at_first_error<T>(
    done: &mut bool,
    step: Result<Option<T>, Error>,
) -> Option<Result<T, Error>> {
    match step {
        Ok(Some(entry)) => Some(Ok(entry)),
        Ok(None) => {
            *done = true;
            None
        }
        Err(e) => {
            *done = true;
            Some(Err(e))
        }
    }
}
