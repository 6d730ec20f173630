//! The mapping's on-disk structures: leaf blocks, inner blocks and run refs.
//!
//! All integers are little-endian. A block is a whole number of slots: normally one slot
//! (so that a checkpoint never needs a contiguous run of free slots, which a small or full
//! store may lack), and a leaf holding one entry too large for that is as many slots as it
//! needs. Bytes after what a
//! block uses are zero, and the decoders require it: every value has one encoding. A block has
//! no checksum of its own; whoever names it (its parent, or the run ref for a root) holds the
//! CRC-32C of all its `slots × slot_size` bytes.
//!
//! # Leaf block
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 4 | magic | u32 `0x4c4d_534f`, the bytes `"OSML"` |
//! | 4 | 1 | level | u8, 0 |
//! | 5 | 1 | reserved | 0 |
//! | 6 | 2 | count | u16, `n` ≥ 1 entries |
//! | 8 | 4 | used | u32, bytes used: `16 + 40n + heap`, at most the block's length |
//! | 12 | 4 | reserved | 0 |
//! | 16 | 40·n | entries | `n` leaf entries, keys strictly increasing |
//! | 16 + 40n | heap | overlay heap | the entries' overlay ranges, up to `used` |
//! | used | rest | padding | zeros to the end of the block |
//!
//! The block is `max(block length, used rounded up to slots)` bytes; one longer than the
//! block length holds one entry.
//!
//! Leaf entry (40 bytes; fixed-size, so a cached leaf is binary-searched in place):
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 4 | file | u32, the key's file id |
//! | 4 | 8 | page | u64, the key's page number |
//! | 12 | 8 | slot | u64, the slot of the page's base content, or `NO_SLOT` (zeros) |
//! | 20 | 4 | CRC | u32, CRC-32C of that content |
//! | 24 | 8 | seq | u64, the page's version: the sequence number of the commit that last changed it (for a tombstone, the commit that dropped it); any value, for both kinds |
//! | 32 | 1 | kind | u8: 0 a mapping; 1 a tombstone (then slot, CRC, range count and heap offset are 0) |
//! | 33 | 1 | range count | u8, overlay ranges |
//! | 34 | 2 | reserved | 0 |
//! | 36 | 4 | heap offset | u32, where the entry's ranges start: the first mapping's at `16 + 40n`, each next mapping's where the one before ends |
//!
//! Overlay range, in the heap (`m` = length); an entry's ranges are sorted by offset,
//! disjoint and not adjacent:
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 4 | offset | u32, byte offset in the page; offset + `m` ≤ slot size |
//! | 4 | 2 | length | u16, `m` ≥ 1 |
//! | 6 | m | bytes | laid over the page's bytes at `offset` |
//!
//! # Inner block
//!
//! Always the block length.
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 4 | magic | u32 `0x494d_534f`, the bytes `"OSMI"` |
//! | 4 | 1 | level | u8, 1..=7; its children are at `level − 1` |
//! | 5 | 1 | reserved | 0 |
//! | 6 | 2 | count | u16, `n` ≥ 1 children |
//! | 8 | 8 | reserved | 0 |
//! | 16 | 28·n | children | `n` children, first keys strictly increasing |
//! | 16 + 28n | rest | padding | zeros to the end of the block |
//!
//! Child (28 bytes):
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 4 | first file | u32 ⎫ the child's first key: equal to the first key of the |
//! | 4 | 8 | first page | u64 ⎭ child block (checked on each read that descends, and by `check`) |
//! | 12 | 8 | slot | u64, the child block's first slot |
//! | 20 | 4 | slots | u32, its length in slots: the block length for an inner child; for a leaf at least that, at most the longest leaf (one entry with 255 ranges and a page of overlay bytes) |
//! | 24 | 4 | CRC | u32, CRC-32C of all its bytes |
//!
//! # Run ref
//!
//! 60 bytes, kept by the store (in its manifest) for each run of the stack.
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 8 | root slot | u64 |
//! | 8 | 4 | root slots | u32, ≥ 1 |
//! | 12 | 4 | root CRC | u32, CRC-32C of the root block |
//! | 16 | 1 | height | u8, 1..=8 levels of blocks; 1 when the root is a leaf |
//! | 17 | 3 | reserved | 0 |
//! | 20 | 8 | entries | u64, ≥ 1, tombstones included |
//! | 28 | 8 | slots | u64, slots of all the run's blocks |
//! | 36 | 4 | first file | u32 ⎫ the run's smallest key |
//! | 40 | 8 | first page | u64 ⎭ |
//! | 48 | 4 | last file | u32 ⎫ the run's largest key, ≥ the first |
//! | 52 | 8 | last page | u64 ⎭ |

use std::sync::Arc;

use onesync_codec::{DecodeError, OnDisk, Reader, Writer};

use crate::types::{BlockRef, Key, Mapped, RunRef, Value};

/// The most levels a run has (a root at level 7).
pub const MAX_HEIGHT: u8 = 8;
/// The most overlay ranges one entry holds (its count is a byte).
pub const MAX_RANGES: usize = 255;

const LEAF_MAGIC: u32 = 0x4c4d_534f; // "OSML"
const INNER_MAGIC: u32 = 0x494d_534f; // "OSMI"
pub(crate) const HEADER_LEN: usize = 16;
pub(crate) const ENTRY_LEN: usize = 40;
const CHILD_LEN: usize = 28;
const RANGE_HEADER_LEN: usize = 6;
const KIND_MAPPING: u8 = 0;
const KIND_TOMBSTONE: u8 = 1;
/// The bytes of an encoded [`RunRef`].
pub const RUN_REF_LEN: usize = 60;

/// Whether the store's slots can hold blocks: a power of two in 512..=65536.
pub fn valid_slot_size(slot_size: usize) -> bool {
    slot_size.is_power_of_two() && (512..=65536).contains(&slot_size)
}

/// The length of an inner block, and of every leaf but one too large for it.
pub fn block_len(slot_size: usize) -> usize {
    slot_size
}

/// The length of a leaf that uses `used` bytes.
pub(crate) fn leaf_len(used: usize, slot_size: usize) -> usize {
    block_len(slot_size).max(used.div_ceil(slot_size) * slot_size)
}

/// The longest a leaf can be: one entry with the most overlay a page can have.
pub(crate) fn max_leaf_len(slot_size: usize) -> usize {
    leaf_len(
        HEADER_LEN + ENTRY_LEN + MAX_RANGES * RANGE_HEADER_LEN + slot_size,
        slot_size,
    )
}

/// Children an inner block holds.
pub(crate) fn inner_capacity(slot_size: usize) -> usize {
    (block_len(slot_size) - HEADER_LEN) / CHILD_LEN
}

/// The heap bytes an entry's overlay takes.
pub(crate) fn heap_len(value: &Value) -> usize {
    match value {
        Value::Mapped(m) => m.overlay.iter().map(|(_, b)| RANGE_HEADER_LEN + b.len()).sum(),
        Value::Dropped { .. } => 0,
    }
}

/// Whether an overlay can be stored: at most 255 ranges, each 1..=65535 bytes inside the page,
/// sorted, disjoint and not adjacent. Says what is wrong otherwise.
pub(crate) fn check_overlay(overlay: &[(u32, Arc<[u8]>)], slot_size: usize) -> Result<(), String> {
    if overlay.len() > MAX_RANGES {
        return Err(format!("{} overlay ranges, at most {MAX_RANGES}", overlay.len()));
    }
    let mut end = None;
    for (offset, bytes) in overlay {
        let start = u64::from(*offset);
        let range_end = start + bytes.len() as u64;
        if bytes.is_empty() || bytes.len() > usize::from(u16::MAX) {
            return Err(format!("an overlay range of {} bytes", bytes.len()));
        }
        if range_end > slot_size as u64 {
            return Err(format!(
                "overlay bytes {start}..{range_end} pass the page's {slot_size}"
            ));
        }
        if end.is_some_and(|end| start <= end) {
            return Err(format!(
                "overlay range at {start} is not past the one before (sorted, disjoint, not adjacent)"
            ));
        }
        end = Some(range_end);
    }
    Ok(())
}

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([bytes[at], bytes[at + 1]])
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut b = [0; 4];
    b.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(b)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(b)
}

fn key_at(bytes: &[u8], at: usize) -> Key {
    Key::new(u32_at(bytes, at), u64_at(bytes, at + 4))
}

fn read_key(r: &mut Reader<'_>) -> Result<Key, DecodeError> {
    Ok(Key::new(r.u32()?, r.u64()?))
}

fn expect_zero(r: &Reader<'_>, value: u64, field: &str) -> Result<(), DecodeError> {
    if value != 0 {
        return Err(r.invalid(format!("{field} is {value}, not 0")));
    }
    Ok(())
}

/// Takes the rest of the block, which must be zeros (one encoding per value).
fn expect_zero_tail(r: &mut Reader<'_>) -> Result<(), DecodeError> {
    let at = r.position();
    let tail = r.take(r.remaining())?;
    match tail.iter().position(|&b| b != 0) {
        None => Ok(()),
        Some(i) => Err(r.invalid(format!("byte {} is not zero, past what the block uses", at + i))),
    }
}

/// The kind and level a block's header says it is, if its magic is a mapping block's.
pub(crate) fn block_level(bytes: &[u8]) -> Option<u8> {
    if bytes.len() < HEADER_LEN {
        return None;
    }
    match u32_at(bytes, 0) {
        LEAF_MAGIC => Some(0),
        INNER_MAGIC => Some(bytes[4]),
        _ => None,
    }
}

/// A leaf block's bytes, checked once by [`LeafView::parse`]; then read in place.
#[derive(Clone, Copy)]
pub(crate) struct LeafView<'a> {
    bytes: &'a [u8],
}

impl<'a> LeafView<'a> {
    /// Checks every field of a whole leaf block (`bytes` is all of it).
    pub(crate) fn parse(bytes: &'a [u8], slot_size: usize) -> Result<LeafView<'a>, DecodeError> {
        let mut r = Reader::new(Leaf::NAME, bytes);
        r.magic(&LEAF_MAGIC.to_le_bytes())?;
        let level = r.u8()?;
        if level != 0 {
            return Err(r.invalid(format!("level {level} in a leaf")));
        }
        let reserved = r.u8()?;
        expect_zero(&r, reserved.into(), "reserved byte 5")?;
        let count = usize::from(r.u16()?);
        if count == 0 {
            return Err(r.invalid("a leaf with no entries"));
        }
        let used = r.u32()? as usize;
        let reserved = r.u32()?;
        expect_zero(&r, reserved.into(), "reserved bytes 12..16")?;
        let heap_start = HEADER_LEN + count * ENTRY_LEN;
        if used < heap_start || used > bytes.len() {
            return Err(r.invalid(format!(
                "{used} bytes used by {count} entries in a block of {}",
                bytes.len()
            )));
        }
        if bytes.len() != leaf_len(used, slot_size) {
            return Err(r.invalid(format!(
                "a leaf of {} bytes that uses {used} (it would be {})",
                bytes.len(),
                leaf_len(used, slot_size)
            )));
        }
        if bytes.len() > block_len(slot_size) && count != 1 {
            return Err(r.invalid(format!("{count} entries in a leaf longer than a block")));
        }
        // The heap is read through its own reader, bounded by `used`.
        let mut heap = Reader::new(Leaf::NAME, &bytes[..used]);
        heap.skip(heap_start)?;
        let mut previous: Option<Key> = None;
        for _ in 0..count {
            let key = read_key(&mut r)?;
            if let Some(p) = previous.filter(|p| *p >= key) {
                return Err(r.invalid(format!("key {key} does not follow {p}")));
            }
            previous = Some(key);
            let slot = r.u64()?;
            let crc = r.u32()?;
            r.skip(8)?; // seq: any value
            let kind = r.u8()?;
            let ranges = usize::from(r.u8()?);
            let reserved = r.u16()?;
            expect_zero(&r, reserved.into(), "an entry's reserved bytes")?;
            let heap_offset = r.u32()? as usize;
            match kind {
                KIND_TOMBSTONE => {
                    let fields = slot | u64::from(crc) | ranges as u64 | heap_offset as u64;
                    expect_zero(&r, fields, "a tombstone's slot, CRC, range count and heap offset")?;
                }
                KIND_MAPPING => {
                    if heap_offset != heap.position() {
                        return Err(
                            r.invalid(format!("heap offset {heap_offset}, expected {}", heap.position()))
                        );
                    }
                    let mut end: Option<u64> = None;
                    for _ in 0..ranges {
                        let offset = u64::from(heap.u32()?);
                        let len = u64::from(heap.u16()?);
                        if len == 0 || offset + len > slot_size as u64 {
                            return Err(heap.invalid(format!("overlay range {offset}+{len}")));
                        }
                        if end.is_some_and(|end| offset <= end) {
                            return Err(heap.invalid(format!("overlay range at {offset} is out of order")));
                        }
                        end = Some(offset + len);
                        heap.skip(len as usize)?;
                    }
                }
                other => return Err(r.invalid(format!("entry kind {other}"))),
            }
        }
        if heap.position() != used {
            return Err(heap.invalid(format!("the heap ends at {}, used says {used}", heap.position())));
        }
        let mut tail = Reader::new(Leaf::NAME, bytes);
        tail.skip(used)?;
        expect_zero_tail(&mut tail)?;
        Ok(LeafView { bytes })
    }

    /// A view of bytes [`LeafView::parse`] accepted before (a cached block).
    pub(crate) fn of_checked(bytes: &'a [u8]) -> LeafView<'a> {
        LeafView { bytes }
    }

    pub(crate) fn len(&self) -> usize {
        usize::from(u16_at(self.bytes, 6))
    }

    pub(crate) fn key(&self, i: usize) -> Key {
        key_at(self.bytes, HEADER_LEN + i * ENTRY_LEN)
    }

    /// The index of `key`, or where it would go.
    pub(crate) fn search(&self, key: Key) -> Result<usize, usize> {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.key(mid).cmp(&key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }

    /// Entry `i`'s value, built from its 40 bytes and its heap ranges.
    pub(crate) fn value(&self, i: usize) -> Value {
        let at = HEADER_LEN + i * ENTRY_LEN;
        let seq = u64_at(self.bytes, at + 24);
        if self.bytes[at + 32] == KIND_TOMBSTONE {
            return Value::Dropped { seq };
        }
        let ranges = usize::from(self.bytes[at + 33]);
        let mut cursor = u32_at(self.bytes, at + 36) as usize;
        let mut overlay = Vec::with_capacity(ranges);
        for _ in 0..ranges {
            let offset = u32_at(self.bytes, cursor);
            let len = usize::from(u16_at(self.bytes, cursor + 4));
            let start = cursor + RANGE_HEADER_LEN;
            overlay.push((offset, Arc::from(&self.bytes[start..start + len])));
            cursor = start + len;
        }
        Value::Mapped(Mapped::new(
            u64_at(self.bytes, at + 12),
            u32_at(self.bytes, at + 20),
            seq,
            overlay,
        ))
    }
}

/// An inner block's bytes, checked once by [`InnerView::parse`]; then read in place.
#[derive(Clone, Copy)]
pub(crate) struct InnerView<'a> {
    bytes: &'a [u8],
}

impl<'a> InnerView<'a> {
    /// Checks every field of a whole inner block (`bytes` is all of it).
    pub(crate) fn parse(bytes: &'a [u8], slot_size: usize) -> Result<InnerView<'a>, DecodeError> {
        let mut r = Reader::new(Inner::NAME, bytes);
        if bytes.len() != block_len(slot_size) {
            return Err(r.invalid(format!("an inner block of {} bytes", bytes.len())));
        }
        r.magic(&INNER_MAGIC.to_le_bytes())?;
        let level = r.u8()?;
        if level == 0 || level >= MAX_HEIGHT {
            return Err(r.invalid(format!("level {level} in an inner block")));
        }
        let reserved = r.u8()?;
        expect_zero(&r, reserved.into(), "reserved byte 5")?;
        let count = usize::from(r.u16()?);
        if count == 0 || count > inner_capacity(slot_size) {
            return Err(r.invalid(format!("{count} children in an inner block")));
        }
        let reserved = r.u64()?;
        expect_zero(&r, reserved, "reserved bytes 8..16")?;
        let block_slots = (block_len(slot_size) / slot_size) as u32;
        let leaf_slots = block_slots..=(max_leaf_len(slot_size) / slot_size) as u32;
        let mut previous: Option<Key> = None;
        for _ in 0..count {
            let first = read_key(&mut r)?;
            if previous.is_some_and(|p| p >= first) {
                return Err(r.invalid(format!("child key {first} does not follow the one before")));
            }
            previous = Some(first);
            r.skip(8)?;
            let slots = r.u32()?;
            let fits = if level == 1 {
                leaf_slots.contains(&slots)
            } else {
                slots == block_slots
            };
            if !fits {
                return Err(r.invalid(format!("a level-{} child of {slots} slots", level - 1)));
            }
            r.skip(4)?;
        }
        expect_zero_tail(&mut r)?;
        Ok(InnerView { bytes })
    }

    /// A view of bytes [`InnerView::parse`] accepted before (a cached block).
    pub(crate) fn of_checked(bytes: &'a [u8]) -> InnerView<'a> {
        InnerView { bytes }
    }

    pub(crate) fn level(&self) -> u8 {
        self.bytes[4]
    }

    pub(crate) fn len(&self) -> usize {
        usize::from(u16_at(self.bytes, 6))
    }

    pub(crate) fn child(&self, i: usize) -> Child {
        let at = HEADER_LEN + i * CHILD_LEN;
        Child {
            first: key_at(self.bytes, at),
            block: BlockRef {
                slot: u64_at(self.bytes, at + 12),
                slots: u32_at(self.bytes, at + 20),
                crc: u32_at(self.bytes, at + 24),
            },
        }
    }

    /// The child whose keys may include `key`: the last whose first key is at most `key`
    /// (the first child when `key` precedes them all).
    pub(crate) fn child_for(&self, key: Key) -> usize {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.child(mid).first <= key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo.saturating_sub(1)
    }
}

/// Encodes a leaf of `entries` (sorted, overlays checked) padded to its length.
pub(crate) fn encode_leaf(entries: &[(Key, Value)], slot_size: usize, w: &mut Writer) {
    let start = w.len();
    let heap_start = HEADER_LEN + entries.len() * ENTRY_LEN;
    let used = heap_start + entries.iter().map(|(_, v)| heap_len(v)).sum::<usize>();
    w.u32(LEAF_MAGIC)
        .u8(0)
        .u8(0)
        .u16(entries.len() as u16)
        .u32(used as u32)
        .u32(0);
    let mut heap_at = heap_start;
    for (key, value) in entries {
        w.u32(key.file).u64(key.page);
        match value {
            Value::Mapped(m) => {
                w.u64(m.slot)
                    .u32(m.crc)
                    .u64(m.seq)
                    .u8(KIND_MAPPING)
                    .u8(m.overlay.len() as u8)
                    .u16(0)
                    .u32(heap_at as u32);
                heap_at += heap_len(value);
            }
            Value::Dropped { seq } => {
                w.u64(0).u32(0).u64(*seq).u8(KIND_TOMBSTONE).u8(0).u16(0).u32(0);
            }
        }
    }
    for (_, value) in entries {
        if let Value::Mapped(m) = value {
            for (offset, bytes) in &m.overlay {
                w.u32(*offset).u16(bytes.len() as u16).bytes(bytes);
            }
        }
    }
    w.pad_to(start + leaf_len(used, slot_size));
}

/// Encodes an inner block at `level` over `children` (at most [`inner_capacity`]).
pub(crate) fn encode_inner(level: u8, children: &[Child], slot_size: usize, w: &mut Writer) {
    let start = w.len();
    w.u32(INNER_MAGIC)
        .u8(level)
        .u8(0)
        .u16(children.len() as u16)
        .u64(0);
    for c in children {
        w.u32(c.first.file)
            .u64(c.first.page)
            .u64(c.block.slot)
            .u32(c.block.slots)
            .u32(c.block.crc);
    }
    w.pad_to(start + block_len(slot_size));
}

/// A leaf block, decoded whole (the read path searches it in place instead).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leaf {
    pub entries: Vec<(Key, Value)>,
}

/// One child of an inner block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Child {
    /// The child block's first key.
    pub first: Key,
    pub block: BlockRef,
}

/// An inner block, decoded whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inner {
    pub level: u8,
    pub children: Vec<Child>,
}

impl OnDisk for Leaf {
    const NAME: &'static str = "mapping leaf block";
    /// The slot size.
    type Context = usize;

    fn encode(&self, slot_size: &usize, w: &mut Writer) {
        encode_leaf(&self.entries, *slot_size, w);
    }

    fn decode(slot_size: &usize, r: &mut Reader<'_>) -> Result<Leaf, DecodeError> {
        // The block's length follows from its `used` field; a clone reads the header so
        // that the block is taken whole.
        let header = r.clone().take(HEADER_LEN)?;
        let used = u32_at(header, 8) as usize;
        let at = r.position();
        let bytes = r.take(leaf_len(used, *slot_size))?;
        let view = LeafView::parse(bytes, *slot_size).map_err(|e| shifted(e, at))?;
        let entries = (0..view.len()).map(|i| (view.key(i), view.value(i))).collect();
        Ok(Leaf { entries })
    }
}

impl OnDisk for Inner {
    const NAME: &'static str = "mapping inner block";
    /// The slot size.
    type Context = usize;

    fn encode(&self, slot_size: &usize, w: &mut Writer) {
        encode_inner(self.level, &self.children, *slot_size, w);
    }

    fn decode(slot_size: &usize, r: &mut Reader<'_>) -> Result<Inner, DecodeError> {
        let at = r.position();
        let bytes = r.take(block_len(*slot_size))?;
        let view = InnerView::parse(bytes, *slot_size).map_err(|e| shifted(e, at))?;
        Ok(Inner {
            level: view.level(),
            children: (0..view.len()).map(|i| view.child(i)).collect(),
        })
    }
}

/// An error found in a block that starts `at` bytes into what was being decoded.
fn shifted(mut e: DecodeError, at: usize) -> DecodeError {
    e.offset += at;
    e
}

impl OnDisk for RunRef {
    const NAME: &'static str = "mapping run ref";
    type Context = ();

    fn encode(&self, _: &(), w: &mut Writer) {
        w.u64(self.root.slot)
            .u32(self.root.slots)
            .u32(self.root.crc)
            .u8(self.height)
            .bytes(&[0; 3])
            .u64(self.entries)
            .u64(self.slots)
            .u32(self.first.file)
            .u64(self.first.page)
            .u32(self.last.file)
            .u64(self.last.page);
    }

    fn decode(_: &(), r: &mut Reader<'_>) -> Result<RunRef, DecodeError> {
        let root = BlockRef {
            slot: r.u64()?,
            slots: r.u32()?,
            crc: r.u32()?,
        };
        if root.slots == 0 {
            return Err(r.invalid("a root block of 0 slots"));
        }
        let height = r.u8()?;
        if height == 0 || height > MAX_HEIGHT {
            return Err(r.invalid(format!("height {height}")));
        }
        let reserved = r.array::<3>()?;
        expect_zero(
            r,
            reserved.iter().map(|&b| u64::from(b)).sum(),
            "reserved bytes 17..20",
        )?;
        let entries = r.u64()?;
        if entries == 0 {
            return Err(r.invalid("a run of no entries"));
        }
        let slots = r.u64()?;
        let first = read_key(r)?;
        let last = read_key(r)?;
        if first > last {
            return Err(r.invalid(format!("first key {first} after last key {last}")));
        }
        Ok(RunRef {
            root,
            height,
            entries,
            slots,
            first,
            last,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::SimSlots;
    use crate::{RunBuilder, NO_SLOT};
    use onesync_codec::fuzz::check_decoder;

    /// Decoder fuzz iterations per structure.
    const FUZZ_INPUTS: usize = 4000;

    fn mapped(slot: u64, crc: u32, seq: u64, overlay: &[(u32, &[u8])]) -> Value {
        let overlay = overlay.iter().map(|(o, b)| (*o, Arc::from(*b))).collect();
        Value::Mapped(Mapped::new(slot, crc, seq, overlay))
    }

    #[test]
    fn leaf_fields_sit_at_the_documented_offsets() {
        let entries = vec![
            (
                Key::new(0x0102_0304, 0x1112_1314_1516_1718),
                mapped(
                    0x2122_2324_2526_2728,
                    0x3132_3334,
                    0x4142_4344_4546_4748,
                    &[(0x10, &[0xaa, 0xbb, 0xcc]), (0x20, &[0xdd])],
                ),
            ),
            (
                Key::new(0x0102_0304, 0x1112_1314_1516_1719),
                Value::Dropped {
                    seq: 0x5152_5354_5556_5758,
                },
            ),
        ];
        let leaf = Leaf { entries };
        let buf = leaf.to_bytes(&512);
        assert_eq!(buf.len(), 512, "a block is one slot");
        assert_eq!(&buf[0..4], b"OSML");
        assert_eq!((buf[4], buf[5]), (0, 0), "level, reserved");
        assert_eq!(u16_at(&buf, 6), 2, "count");
        assert_eq!(u32_at(&buf, 8), 112, "used: 16 + 40 * 2 + (6 + 3) + (6 + 1)");
        assert_eq!(u32_at(&buf, 12), 0);
        // Entry 0 at 16.
        assert_eq!(u32_at(&buf, 16), 0x0102_0304, "file");
        assert_eq!(u64_at(&buf, 20), 0x1112_1314_1516_1718, "page");
        assert_eq!(u64_at(&buf, 28), 0x2122_2324_2526_2728, "slot");
        assert_eq!(u32_at(&buf, 36), 0x3132_3334, "CRC");
        assert_eq!(u64_at(&buf, 40), 0x4142_4344_4546_4748, "seq");
        assert_eq!(
            (buf[48], buf[49], u16_at(&buf, 50)),
            (0, 2, 0),
            "kind, range count, reserved"
        );
        assert_eq!(u32_at(&buf, 52), 96, "heap offset: 16 + 40n");
        // Entry 1 at 56: a tombstone, all but its key and seq zero save its kind.
        assert_eq!(u32_at(&buf, 56), 0x0102_0304);
        assert_eq!(u64_at(&buf, 60), 0x1112_1314_1516_1719);
        assert_eq!((u64_at(&buf, 68), u32_at(&buf, 76)), (0, 0), "slot, CRC");
        assert_eq!(u64_at(&buf, 80), 0x5152_5354_5556_5758, "a tombstone's seq");
        assert_eq!(
            (buf[88], buf[89], u16_at(&buf, 90), u32_at(&buf, 92)),
            (1, 0, 0, 0)
        );
        // The heap at 96: offset u32, length u16, bytes.
        assert_eq!((u32_at(&buf, 96), u16_at(&buf, 100)), (0x10, 3));
        assert_eq!(&buf[102..105], &[0xaa, 0xbb, 0xcc]);
        assert_eq!((u32_at(&buf, 105), u16_at(&buf, 109), buf[111]), (0x20, 1, 0xdd));
        assert!(buf[112..].iter().all(|&b| b == 0), "zeros past `used`");
        assert_eq!(Leaf::from_bytes(&512, &buf).unwrap(), leaf);
        let view = LeafView::parse(&buf, 512).unwrap();
        assert_eq!(view.search(Key::new(0x0102_0304, 0x1112_1314_1516_1719)), Ok(1));
        assert_eq!(view.value(0), leaf.entries[0].1);
        assert_eq!(view.value(1), leaf.entries[1].1);
    }

    #[test]
    fn inner_fields_sit_at_the_documented_offsets() {
        let child = |page, slot, crc| Child {
            first: Key::new(0x0102_0304, page),
            block: BlockRef { slot, slots: 1, crc },
        };
        let inner = Inner {
            level: 2,
            children: vec![
                child(0x1112_1314_1516_1718, 0x2122_2324_2526_2728, 0x3132_3334),
                child(0x1112_1314_1516_1719, 7, 9),
            ],
        };
        let buf = inner.to_bytes(&512);
        assert_eq!(buf.len(), 512);
        assert_eq!(&buf[0..4], b"OSMI");
        assert_eq!(
            (buf[4], buf[5], u16_at(&buf, 6)),
            (2, 0, 2),
            "level, reserved, count"
        );
        assert_eq!(u64_at(&buf, 8), 0);
        // Child 0 at 16.
        assert_eq!(u32_at(&buf, 16), 0x0102_0304, "first file");
        assert_eq!(u64_at(&buf, 20), 0x1112_1314_1516_1718, "first page");
        assert_eq!(u64_at(&buf, 28), 0x2122_2324_2526_2728, "slot");
        assert_eq!(u32_at(&buf, 36), 1, "slots");
        assert_eq!(u32_at(&buf, 40), 0x3132_3334, "CRC");
        // Child 1 at 16 + 28.
        assert_eq!(u64_at(&buf, 48), 0x1112_1314_1516_1719);
        assert_eq!((u64_at(&buf, 56), u32_at(&buf, 64), u32_at(&buf, 68)), (7, 1, 9));
        assert!(buf[72..].iter().all(|&b| b == 0));
        assert_eq!(Inner::from_bytes(&512, &buf).unwrap(), inner);
    }

    #[test]
    fn run_ref_fields_sit_at_the_documented_offsets() {
        let run = RunRef {
            root: BlockRef {
                slot: 0x0102_0304_0506_0708,
                slots: 0x1112_1314,
                crc: 0x2122_2324,
            },
            height: 3,
            entries: 0x3132_3334_3536_3738,
            slots: 0x4142_4344_4546_4748,
            first: Key::new(0x5152_5354, 0x6162_6364_6566_6768),
            last: Key::new(0x7172_7374, 0x8182_8384_8586_8788),
        };
        let buf = run.to_bytes(&());
        assert_eq!(buf.len(), RUN_REF_LEN);
        assert_eq!(u64_at(&buf, 0), 0x0102_0304_0506_0708, "root slot");
        assert_eq!(u32_at(&buf, 8), 0x1112_1314, "root slots");
        assert_eq!(u32_at(&buf, 12), 0x2122_2324, "root CRC");
        assert_eq!(&buf[16..20], &[3, 0, 0, 0], "height, reserved");
        assert_eq!(u64_at(&buf, 20), 0x3132_3334_3536_3738, "entries");
        assert_eq!(u64_at(&buf, 28), 0x4142_4344_4546_4748, "slots");
        assert_eq!(
            (u32_at(&buf, 36), u64_at(&buf, 40)),
            (0x5152_5354, 0x6162_6364_6566_6768)
        );
        assert_eq!(
            (u32_at(&buf, 48), u64_at(&buf, 52)),
            (0x7172_7374, 0x8182_8384_8586_8788)
        );
        assert_eq!(RunRef::from_bytes(&(), &buf).unwrap(), run);
    }

    /// A run as the builder writes it, of `entries` entries with overlays, tombstones and
    /// `NO_SLOT`s, and its blocks' bytes: (leaves, inner blocks).
    fn real_blocks(
        slot_size: usize,
        entries: u64,
        overlay_len: usize,
    ) -> (Vec<Vec<u8>>, Vec<Vec<u8>>, RunRef) {
        let slots = SimSlots::new(slot_size);
        let mut sink = slots.sink();
        let mut builder = RunBuilder::new(slot_size);
        let bytes: Vec<u8> = (0..overlay_len).map(|i| i as u8).collect();
        for i in 0..entries {
            // Versions with bits in every byte, tombstones' too (their seq need not be 0).
            let seq = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let value = match i % 5 {
                0 => Value::Dropped { seq },
                1 if overlay_len == 0 => mapped(NO_SLOT, 0, seq, &[(3, b"x")]),
                1 => mapped(NO_SLOT, 0, seq, &[(3, b"x"), (9, &bytes)]),
                _ => mapped(i * 3, i as u32, seq, &[]),
            };
            builder
                .push(Key::new((i / 300) as u32, i % 300), value, &mut sink)
                .unwrap();
        }
        let run = builder.finish(&mut sink).unwrap().unwrap();
        let blocks = run.blocks(&slots, None).unwrap();
        let (mut leaves, mut inner) = (Vec::new(), Vec::new());
        for block in blocks {
            let bytes = slots.block_bytes(block);
            match block_level(&bytes) {
                Some(0) => leaves.push(bytes),
                _ => inner.push(bytes),
            }
        }
        (leaves, inner, run)
    }

    #[test]
    fn the_leaf_decoder_survives_fuzzing_from_real_leaves() {
        let (leaves, _, _) = real_blocks(512, 600, 40);
        let report = check_decoder::<Leaf>(&512, &leaves, FUZZ_INPUTS);
        assert!(report.decoded > leaves.len() && report.rejected > 0, "{report:?}");
    }

    /// With 4 KiB slots an entry with a large overlay gets a leaf longer than a block.
    #[test]
    fn the_leaf_decoder_survives_fuzzing_from_leaves_longer_than_a_block() {
        let (leaves, _, _) = real_blocks(4096, 12, 4080);
        assert!(
            leaves.iter().any(|l| l.len() > 4096),
            "no oversized leaf among the seeds"
        );
        let report = check_decoder::<Leaf>(&4096, &leaves, FUZZ_INPUTS / 4);
        assert!(report.decoded > leaves.len() && report.rejected > 0, "{report:?}");
    }

    #[test]
    fn the_inner_decoder_survives_fuzzing_from_real_inner_blocks() {
        let (_, inner, run) = real_blocks(512, 40_000, 0);
        assert_eq!(run.height, 4);
        let report = check_decoder::<Inner>(&512, &inner, FUZZ_INPUTS);
        assert!(report.decoded > inner.len() && report.rejected > 0, "{report:?}");
    }

    #[test]
    fn the_run_ref_decoder_survives_fuzzing_from_a_real_run_ref() {
        let (_, _, run) = real_blocks(512, 1000, 8);
        let seeds = vec![run.to_bytes(&())];
        let report = check_decoder::<RunRef>(&(), &seeds, FUZZ_INPUTS);
        assert!(report.decoded > seeds.len() && report.rejected > 0, "{report:?}");
    }

    #[test]
    fn a_leaf_is_rejected_for_unsorted_keys_a_bad_heap_offset_or_a_byte_past_its_end() {
        let leaf = Leaf {
            entries: vec![
                (Key::new(1, 1), mapped(5, 6, 10, &[(0, b"ab")])),
                (Key::new(1, 2), mapped(7, 8, 11, &[])),
            ],
        };
        let good = leaf.to_bytes(&512);
        let problem = |edit: &dyn Fn(&mut Vec<u8>)| {
            let mut bytes = good.clone();
            edit(&mut bytes);
            Leaf::from_bytes(&512, &bytes).unwrap_err().to_string()
        };
        let unsorted = problem(&|b| b[20..28].copy_from_slice(&9u64.to_le_bytes()));
        assert!(unsorted.contains("does not follow"), "{unsorted}");
        // Entry 1's heap offset, at 16 + 40 + 36; it should be 104 (16 + 40 * 2 + 6 + 2).
        let heap = problem(&|b| b[92..96].copy_from_slice(&90u32.to_le_bytes()));
        assert!(heap.contains("heap offset 90, expected 104"), "{heap}");
        // Entry 1's seq, at 16 + 40 + 24: any value decodes, and is the value.
        let mut reseq = good.clone();
        reseq[80..88].copy_from_slice(&u64::MAX.to_le_bytes());
        let decoded = Leaf::from_bytes(&512, &reseq).unwrap();
        assert_eq!(decoded.entries[1].1, mapped(7, 8, u64::MAX, &[]));
        // A tombstone's slot must be 0; its seq need not be.
        let tombstone = Leaf {
            entries: vec![(Key::new(1, 1), Value::Dropped { seq: 9 })],
        };
        let mut with_slot = tombstone.to_bytes(&512);
        with_slot[28] = 1;
        let slot = Leaf::from_bytes(&512, &with_slot).unwrap_err().to_string();
        assert!(slot.contains("a tombstone's slot"), "{slot}");
        let tail = problem(&|b| b[500] = 1);
        assert!(tail.contains("byte 500 is not zero"), "{tail}");
        let adjacent = Leaf {
            entries: vec![(Key::new(1, 1), mapped(5, 6, 7, &[(0, b"ab"), (2, b"c")]))],
        };
        let bytes = adjacent.to_bytes(&512);
        assert!(
            Leaf::from_bytes(&512, &bytes).is_err(),
            "adjacent ranges have one encoding: joined"
        );
    }
}
