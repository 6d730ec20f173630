//! A simulated slot space for tests (this crate's, and the store's if it likes): slots in
//! memory, a first-fit allocator, a [`BlockIo`] that counts reads and a [`BlockSink`] that
//! records what it placed. A freed block is overwritten with garbage, so reading it through
//! a stale ref fails its CRC instead of passing unnoticed.

use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::types::{BlockIo, BlockRef, BlockSink, Error};

/// Slots in memory. Shared by reference: reads through `&SimSlots`, writes through
/// [`SimSlots::sink`].
pub struct SimSlots {
    slot_size: usize,
    space: Mutex<Space>,
    reads: AtomicU64,
}

#[derive(Default)]
struct Space {
    bytes: Vec<u8>,
    /// Free extents below the end of `bytes`: first slot → length in slots.
    free: BTreeMap<u64, u64>,
    /// Every block placed, in order.
    placed: Vec<BlockRef>,
    /// Garbage for freed slots: a counter, so no two frees write the same bytes.
    frees: u64,
}

impl SimSlots {
    pub fn new(slot_size: usize) -> SimSlots {
        SimSlots {
            slot_size,
            space: Mutex::new(Space::default()),
            reads: AtomicU64::new(0),
        }
    }

    /// A sink placing blocks in these slots.
    pub fn sink(&self) -> SimSink<'_> {
        SimSink { slots: self }
    }

    fn space(&self) -> std::sync::MutexGuard<'_, Space> {
        // A test that panicked holding the lock left nothing half-done that matters here.
        self.space.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Block reads so far.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Every block placed so far, in order.
    pub fn placed(&self) -> Vec<BlockRef> {
        self.space().placed.clone()
    }

    /// Slots allocated and not freed.
    pub fn slots_in_use(&self) -> u64 {
        let space = self.space();
        let total = (space.bytes.len() / self.slot_size) as u64;
        total - space.free.values().sum::<u64>()
    }

    /// Gives a block's slots back to the allocator, overwriting them with garbage.
    pub fn free(&self, block: BlockRef) {
        let mut space = self.space();
        space.frees += 1;
        let seed = space.frees;
        let start = block.slot as usize * self.slot_size;
        let end = start + block.slots as usize * self.slot_size;
        for (i, byte) in space.bytes[start..end].iter_mut().enumerate() {
            *byte = (seed as u8).wrapping_mul(31).wrapping_add(i as u8) | 1;
        }
        let (mut slot, mut len) = (block.slot, u64::from(block.slots));
        // Join the free neighbours on either side.
        if let Some((&before, &before_len)) = space.free.range(..slot).next_back() {
            if before + before_len == slot {
                space.free.remove(&before);
                slot = before;
                len += before_len;
            }
        }
        if let Some(after_len) = space.free.remove(&(slot + len)) {
            len += after_len;
        }
        space.free.insert(slot, len);
    }

    /// Flips bits of one byte of a slot (`offset` from the slot's start).
    pub fn damage(&self, slot: u64, offset: usize, bits: u8) {
        let at = slot as usize * self.slot_size + offset;
        self.space().bytes[at] ^= bits;
    }

    /// The bytes of a block, as stored.
    pub fn block_bytes(&self, block: BlockRef) -> Vec<u8> {
        let start = block.slot as usize * self.slot_size;
        let len = block.slots as usize * self.slot_size;
        self.space().bytes[start..start + len].to_vec()
    }
}

impl BlockIo for SimSlots {
    fn slot_size(&self) -> usize {
        self.slot_size
    }

    fn read_block(&self, block: BlockRef, buf: &mut [u8]) -> io::Result<()> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        let space = self.space();
        // A damaged ref may name any slot: out of range is an error, not an overflow.
        let range = usize::try_from(block.slot)
            .ok()
            .and_then(|slot| slot.checked_mul(self.slot_size))
            .and_then(|start| Some(start..start.checked_add(buf.len())?));
        match range.and_then(|range| space.bytes.get(range)) {
            Some(bytes) => {
                buf.copy_from_slice(bytes);
                Ok(())
            }
            None => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("slot {} is past the end of the slots", block.slot),
            )),
        }
    }
}

/// Places blocks in a [`SimSlots`]: first fit among freed extents, else at the end.
pub struct SimSink<'a> {
    slots: &'a SimSlots,
}

impl BlockSink for SimSink<'_> {
    fn slot_size(&self) -> usize {
        self.slots.slot_size
    }

    fn place(&mut self, bytes: &[u8]) -> Result<u64, Error> {
        let slot_size = self.slots.slot_size;
        if bytes.is_empty() || !bytes.len().is_multiple_of(slot_size) {
            return Err(Error::Sink(
                format!("{} bytes are not a whole number of slots", bytes.len()).into(),
            ));
        }
        let need = (bytes.len() / slot_size) as u64;
        let mut space = self.slots.space();
        let fit = space
            .free
            .iter()
            .find(|(_, &len)| len >= need)
            .map(|(&slot, &len)| (slot, len));
        let slot = match fit {
            Some((slot, len)) => {
                space.free.remove(&slot);
                if len > need {
                    space.free.insert(slot + need, len - need);
                }
                slot
            }
            None => {
                let slot = (space.bytes.len() / slot_size) as u64;
                let end = space.bytes.len() + bytes.len();
                space.bytes.resize(end, 0);
                slot
            }
        };
        let start = slot as usize * slot_size;
        space.bytes[start..start + bytes.len()].copy_from_slice(bytes);
        space.placed.push(BlockRef {
            slot,
            slots: need as u32,
            crc: crc32c::crc32c(bytes),
        });
        Ok(slot)
    }
}
