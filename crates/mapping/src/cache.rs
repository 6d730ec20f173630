//! Reading a block (CRC-checked, then validated once) and the byte-bounded cache of blocks
//! so read, shared by every run and snapshot of a process.
//!
//! The cache is keyed by `(slot, CRC, slots)`: a slot freed and reused for another block holds
//! other bytes with (all but surely) another CRC, so a stale block is never served, and
//! nothing needs invalidating when the store frees a run.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use onesync_codec::DecodeError;
use quick_cache::sync::Cache as QuickCache;
use quick_cache::{DefaultHashBuilder, OptionsBuilder, Weighter};

use crate::format::{block_len, block_level, max_leaf_len, valid_slot_size, InnerView, LeafView};
use crate::types::{BlockIo, BlockRef, Error};

/// A block that passed its CRC and every field check: its views read it in place.
pub(crate) struct Block {
    bytes: Box<[u8]>,
    level: u8,
}

impl Block {
    pub(crate) fn level(&self) -> u8 {
        self.level
    }

    /// The block as a leaf; `Corrupt` if it is an inner block (its parent said otherwise).
    pub(crate) fn leaf(&self, at: BlockRef) -> Result<LeafView<'_>, Error> {
        match self.level {
            0 => Ok(LeafView::of_checked(&self.bytes)),
            level => Err(corrupt(at, format!("level {level}, where a leaf was expected"))),
        }
    }

    /// The block as an inner block; `Corrupt` if it is a leaf.
    pub(crate) fn inner(&self, at: BlockRef) -> Result<InnerView<'_>, Error> {
        match self.level {
            0 => Err(corrupt(at, "a leaf, where an inner block was expected".into())),
            _ => Ok(InnerView::of_checked(&self.bytes)),
        }
    }
}

pub(crate) fn corrupt(at: BlockRef, why: String) -> Error {
    Error::Corrupt(format!(
        "block at slot {} ({} slots, CRC {:#010x}): {why}",
        at.slot, at.slots, at.crc
    ))
}

/// The slot size `io` reports, if blocks can live in such slots.
pub(crate) fn checked_slot_size(slot_size: usize) -> Result<usize, Error> {
    if !valid_slot_size(slot_size) {
        return Err(Error::Corrupt(format!(
            "slot size {slot_size} is not a power of two in 512..=65536"
        )));
    }
    Ok(slot_size)
}

/// Reads `at`, a block at `level`, through `cache` when there is one (a merge reads around
/// it, so that a whole run passing through does not evict what lookups use).
pub(crate) fn fetch(
    io: &dyn BlockIo,
    cache: Option<&Cache>,
    at: BlockRef,
    level: u8,
) -> Result<Arc<Block>, Error> {
    let slot_size = checked_slot_size(io.slot_size())?;
    // Bound the read before allocating for it: a damaged ref must not ask for gigabytes.
    let block_slots = (block_len(slot_size) / slot_size) as u32;
    let fits = if level == 0 {
        (block_slots..=(max_leaf_len(slot_size) / slot_size) as u32).contains(&at.slots)
    } else {
        at.slots == block_slots
    };
    if !fits {
        return Err(corrupt(
            at,
            format!("{} slots for a level-{level} block", at.slots),
        ));
    }
    let len = at.slots as usize * slot_size;
    let block = match cache {
        Some(cache) => {
            let cached = cache.get_or_load(at, || load(io, at, slot_size))?;
            // A cache shared by stores of other slot sizes could hold this ref's bytes at
            // another length; those are not this store's block.
            if cached.bytes.len() == len {
                cached
            } else {
                load(io, at, slot_size)?
            }
        }
        None => load(io, at, slot_size)?,
    };
    if block.level != level {
        return Err(corrupt(
            at,
            format!("level {}, where its parent expects {level}", block.level),
        ));
    }
    Ok(block)
}

/// Reads a block, checks its CRC against the ref, and validates it whole.
fn load(io: &dyn BlockIo, at: BlockRef, slot_size: usize) -> Result<Arc<Block>, Error> {
    let mut bytes = vec![0u8; at.slots as usize * slot_size].into_boxed_slice();
    io.read_block(at, &mut bytes).map_err(|source| Error::Io {
        during: "reading a block of the page mapping",
        source,
    })?;
    let crc = crc32c::crc32c(&bytes);
    if crc != at.crc {
        return Err(corrupt(at, format!("its bytes have CRC {crc:#010x}")));
    }
    let invalid = |e: DecodeError| corrupt(at, e.to_string());
    let level = match block_level(&bytes) {
        Some(0) => LeafView::parse(&bytes, slot_size).map(|_| 0).map_err(invalid)?,
        Some(_) => InnerView::parse(&bytes, slot_size)
            .map(|v| v.level())
            .map_err(invalid)?,
        None => {
            let magic = bytes.get(..4).unwrap_or_default();
            return Err(corrupt(at, format!("no block magic ({magic:02x?})")));
        }
    };
    Ok(Arc::new(Block { bytes, level }))
}

/// What a cached block weighs: its bytes.
#[derive(Clone)]
struct ByBytes;

impl Weighter<(u64, u32, u32), Arc<Block>> for ByBytes {
    fn weight(&self, _: &(u64, u32, u32), block: &Arc<Block>) -> u64 {
        block.bytes.len() as u64
    }
}

/// Blocks read recently, at most `max_bytes` of them; shared (`Arc<Cache>`) by every run,
/// stack and thread of a process.
pub struct Cache {
    blocks: QuickCache<(u64, u32, u32), Arc<Block>, ByBytes>,
    hits: AtomicU64,
    misses: AtomicU64,
}

/// What a [`Cache`] holds and how it has served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Block reads the cache served.
    pub hits: u64,
    /// Block reads that went to the disk.
    pub misses: u64,
    /// Bytes of the blocks held.
    pub bytes: u64,
    /// Blocks held.
    pub blocks: u64,
}

impl Cache {
    /// A cache of at most `max_bytes` of blocks.
    pub fn new(max_bytes: usize) -> Cache {
        let items = (max_bytes / 4096).max(1);
        // quick_cache splits its capacity among shards, rounding each up; shards of at least
        // 64 blocks, and a capacity they divide, keep the whole within `max_bytes`.
        let shards = 1 << (items / 64).clamp(1, 16).ilog2();
        let capacity = (max_bytes / shards * shards) as u64;
        let options = OptionsBuilder::new()
            .shards(shards)
            .estimated_items_capacity(items)
            .weight_capacity(capacity)
            .build()
            .expect("every option is set");
        Cache {
            blocks: QuickCache::with_options(
                options,
                ByBytes,
                DefaultHashBuilder::default(),
                Default::default(),
            ),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            bytes: self.blocks.weight(),
            blocks: self.blocks.len() as u64,
        }
    }

    /// The block at `at`, loaded by `load` on a miss (one loader per block at a time: other
    /// threads wanting it wait for it rather than read it too).
    fn get_or_load(
        &self,
        at: BlockRef,
        load: impl FnOnce() -> Result<Arc<Block>, Error>,
    ) -> Result<Arc<Block>, Error> {
        let mut missed = false;
        let block = self.blocks.get_or_insert_with(&(at.slot, at.crc, at.slots), || {
            missed = true;
            load()
        })?;
        let counter = if missed { &self.misses } else { &self.hits };
        counter.fetch_add(1, Ordering::Relaxed);
        Ok(block)
    }
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("stats", &self.stats())
            .field("capacity", &self.blocks.capacity())
            .finish()
    }
}
