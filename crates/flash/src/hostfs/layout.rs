//! The on-disk structures and where they live: the superblock and the layout it implies,
//! inodes and their extents, the journal's blocks, and the metadata blocks written only for
//! their cost.
//!
//! A block is one drive page (`block_size` bytes, 8 KiB on the default drive). Integers are
//! little-endian. Every block below except the inode table's ends in a CRC-32C of all its
//! bytes before it ("sealed"); each inode record is sealed the same way on its own.
//!
//! # Where things live
//!
//! | block | what |
//! |---:|---|
//! | 0 | superblock |
//! | 1 | group descriptor |
//! | 2 | inode bitmap |
//! | 3 .. 3 + b | block bitmap (`b` blocks, one bit per drive block) |
//! | 3 + b | directory |
//! | `inode_start` .. + `inode_blocks` | inode table, `block_size / 512` inodes a block |
//! | `journal_start` | journal superblock |
//! | `journal_start + 1` .. + `journal_blocks - 1` | journal log (circular) |
//! | `data_start` .. `total_blocks` | file data |
//!
//! # Superblock ([`Superblock`], block 0)
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 8 | magic | `b"OSFLFS01"` |
//! | 8 | 8 | block size | u64, the drive's page size |
//! | 16 | 8 | total blocks | u64 |
//! | 24 | 8 | block bitmap blocks | u64, must equal what the layout implies |
//! | 32 | 8 | inode blocks | u64 |
//! | 40 | 8 | journal blocks | u64, its superblock included |
//! | 48 | .. | zeros | |
//! | bs − 4 | 4 | CRC | CRC-32C of bytes `0..bs − 4` |
//!
//! # Inode record ([`InodeSlot`], 512 bytes; all zeros = free)
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 1 | in use | 1 (0 with a valid CRC also reads as free) |
//! | 1 | 1 | name length | `n` ≤ `MAX_NAME` (96) |
//! | 2 | n | name | UTF-8 |
//! | 100 | 8 | size | u64, bytes |
//! | 108 | 8 | generation | u64, tells a reused inode apart |
//! | 116 | 2 | extent count | u16, ≤ `MAX_EXTENTS` (48) |
//! | 120 | 8 × count | extents | per extent: start block u32, length u32 |
//! | 508 | 4 | CRC | CRC-32C of bytes `0..508` |
//!
//! # Journal superblock ([`JournalSuperblock`], block `journal_start`)
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 4 | magic | u32 `0x4a53_4231` ("JSB1") |
//! | 4 | 8 | tail | u64, log position replay starts at |
//! | 12 | 8 | sequence | u64, the transaction expected there |
//! | bs − 4 | 4 | CRC | sealed |
//!
//! # Journal descriptor ([`Descriptor`], first block of a transaction)
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 4 | magic | u32 `0x4a44_5343` ("JDSC") |
//! | 4 | 8 | sequence | u64, the transaction's |
//! | 12 | 4 | count | u32, logged blocks that follow the descriptor |
//! | 16 | 8 × count | homes | u64 per logged block: where it goes at checkpoint |
//! | bs − 4 | 4 | CRC | sealed |
//!
//! # Journal commit block ([`CommitBlock`], after the logged blocks)
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 4 | magic | u32 `0x4a43_4d54` ("JCMT") |
//! | 4 | 8 | sequence | u64, the descriptor's |
//! | 12 | 4 | data CRC | u32, CRC-32C over the logged blocks in order |
//! | bs − 4 | 4 | CRC | sealed |
//!
//! # Written for their cost, never read back
//!
//! Mount rebuilds these from the inodes; they exist so that the drive sees ext4's writes.
//! Each is sealed.
//! * Group descriptor: free data blocks u64 at 0, free inodes u64 at 8.
//! * Inode bitmap: bit `i` (byte `i / 8`, bit `i % 8`) set when inode `i` is in use.
//! * Block bitmap block `k`: bit `i` for data block `k × bs × 8 + i`, the first
//!   `bs × 8 − 32` bits only.
//! * Directory: per file, in name order, inode u32, name length u32, name; entries that
//!   would reach the CRC are left out.

use onesync_codec::{DecodeError, OnDisk, Problem, Reader, Writer};

use super::types::MAX_NAME;
use super::{FsError, FsResult};
use crate::Lpn;

/// Bytes per inode record.
pub const INODE_SIZE: usize = 512;
/// Extents an inode holds (ext4 keeps 4 in the inode and grows a tree; a fixed list keeps
/// the format simple and allocation in chunks keeps files to a few extents).
pub(super) const MAX_EXTENTS: usize = 48;
const SUPER_MAGIC: &[u8; 8] = b"OSFLFS01";
const JSB_MAGIC: u32 = 0x4a53_4231; // "JSB1"
const DESC_MAGIC: u32 = 0x4a44_5343; // "JDSC"
const COMMIT_MAGIC: u32 = 0x4a43_4d54; // "JCMT"
const INODE_SIZE_OFFSET: usize = 100;
const INODE_EXTENTS_OFFSET: usize = 120;
const DESCRIPTOR_HOMES_OFFSET: usize = 16;
const CRC_LEN: usize = 4;

/// The block size every sealed block structure is encoded to and decoded from.
pub(crate) type BlockSize = usize;

/// Where each kind of block lives, as the superblock's numbers imply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Layout {
    pub(super) block_size: usize,
    pub(super) total_blocks: u64,
    pub(super) group_desc: Lpn,
    pub(super) inode_bitmap: Lpn,
    pub(super) block_bitmap_start: Lpn,
    pub(super) block_bitmap_blocks: u64,
    pub(super) directory: Lpn,
    pub(super) inode_start: Lpn,
    pub(super) inode_blocks: u64,
    pub(super) journal_start: Lpn,
    pub(super) journal_blocks: u64,
    pub(super) data_start: Lpn,
}

impl Layout {
    pub(super) fn new(
        block_size: usize,
        total_blocks: u64,
        inode_blocks: u64,
        journal_blocks: u64,
    ) -> FsResult<Layout> {
        let bits_per_block = (block_size * 8) as u64;
        let block_bitmap_blocks = total_blocks.div_ceil(bits_per_block).max(1);
        let block_bitmap_start = 3;
        let directory = block_bitmap_start + block_bitmap_blocks;
        let inode_start = directory + 1;
        let journal_start = inode_start + inode_blocks;
        let data_start = journal_start + journal_blocks;
        if journal_blocks < 16 || inode_blocks == 0 || data_start + 16 > total_blocks {
            return Err(FsError::TooSmall(total_blocks));
        }
        Ok(Layout {
            block_size,
            total_blocks,
            group_desc: 1,
            inode_bitmap: 2,
            block_bitmap_start,
            block_bitmap_blocks,
            directory,
            inode_start,
            inode_blocks,
            journal_start,
            journal_blocks,
            data_start,
        })
    }

    pub(super) fn inodes_per_block(&self) -> usize {
        self.block_size / INODE_SIZE
    }

    pub(super) fn inode_count(&self) -> usize {
        self.inodes_per_block() * self.inode_blocks as usize
    }

    pub(super) fn inode_block(&self, ino: u32) -> Lpn {
        self.inode_start + ino as u64 / self.inodes_per_block() as u64
    }

    /// Log blocks of the journal (after its superblock).
    pub(super) fn log_len(&self) -> u64 {
        self.journal_blocks - 1
    }

    pub(super) fn log_block(&self, pos: u64) -> Lpn {
        self.journal_start + 1 + pos
    }

    /// The layout a superblock describes, if it adds up.
    pub(super) fn from_superblock(sb: &Superblock) -> FsResult<Layout> {
        let layout = Layout::new(
            sb.block_size as usize,
            sb.total_blocks,
            sb.inode_blocks,
            sb.journal_blocks,
        )?;
        if layout.block_bitmap_blocks != sb.block_bitmap_blocks {
            return Err(FsError::Corrupt("the superblock's layout does not add up".into()));
        }
        Ok(layout)
    }

    pub(super) fn superblock(&self) -> Superblock {
        Superblock {
            block_size: self.block_size as u64,
            total_blocks: self.total_blocks,
            block_bitmap_blocks: self.block_bitmap_blocks,
            inode_blocks: self.inode_blocks,
            journal_blocks: self.journal_blocks,
        }
    }
}

/// Zero-fills a block begun at `start` up to its CRC and appends the CRC.
fn seal(w: &mut Writer, start: usize, len: usize) {
    w.pad_to(start + len - CRC_LEN);
    let crc = crc32c::crc32c(&w.as_bytes()[start..]);
    w.u32(crc);
}

/// Requires `block`'s last four bytes to be the CRC-32C of the rest.
fn check_seal(r: &Reader<'_>, block: &[u8]) -> Result<(), DecodeError> {
    let Some(body_len) = block.len().checked_sub(CRC_LEN) else {
        return Err(r.invalid("shorter than its CRC"));
    };
    let (body, stored) = block.split_at(body_len);
    let stored = u32::from_le_bytes(stored.try_into().expect("4 bytes"));
    r.check_sum(stored, crc32c::crc32c(body))
}

/// Takes one `len`-byte block from `r` and a reader over it (offsets in errors are the
/// block's).
fn take_block<'a>(
    name: &'static str,
    len: usize,
    r: &mut Reader<'a>,
) -> Result<(&'a [u8], Reader<'a>), DecodeError> {
    let block = r.take(len)?;
    Ok((block, Reader::new(name, block)))
}

/// Recomputes the CRC at the end of a sealed block or inode record (for the fuzz tests).
#[cfg(test)]
pub(super) fn reseal(bytes: &mut [u8]) {
    if let Some(body_len) = bytes.len().checked_sub(CRC_LEN) {
        let crc = crc32c::crc32c(&bytes[..body_len]);
        bytes[body_len..].copy_from_slice(&crc.to_le_bytes());
    }
}

/// Block 0: the numbers the rest of the layout follows from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Superblock {
    pub(super) block_size: u64,
    pub(super) total_blocks: u64,
    pub(super) block_bitmap_blocks: u64,
    pub(super) inode_blocks: u64,
    pub(super) journal_blocks: u64,
}

impl OnDisk for Superblock {
    const NAME: &'static str = "flash fs superblock";
    type Context = BlockSize;

    fn encode(&self, bs: &BlockSize, w: &mut Writer) {
        let start = w.len();
        w.bytes(SUPER_MAGIC)
            .u64(self.block_size)
            .u64(self.total_blocks)
            .u64(self.block_bitmap_blocks)
            .u64(self.inode_blocks)
            .u64(self.journal_blocks);
        seal(w, start, *bs);
    }

    fn decode(bs: &BlockSize, r: &mut Reader<'_>) -> Result<Superblock, DecodeError> {
        let (block, mut b) = take_block(Self::NAME, *bs, r)?;
        b.magic(SUPER_MAGIC)?;
        check_seal(&b, block)?;
        let sb = Superblock {
            block_size: b.u64()?,
            total_blocks: b.u64()?,
            block_bitmap_blocks: b.u64()?,
            inode_blocks: b.u64()?,
            journal_blocks: b.u64()?,
        };
        if sb.block_size != *bs as u64 {
            return Err(b.invalid("the block size is not the drive's"));
        }
        Ok(sb)
    }
}

/// A file's data blocks: (first block, length) runs in file order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Extents(pub(super) Vec<(Lpn, u64)>);

impl Extents {
    pub(super) fn blocks(&self) -> u64 {
        self.0.iter().map(|e| e.1).sum()
    }

    pub(super) fn lpn_of(&self, fblock: u64) -> Option<Lpn> {
        let mut base = 0;
        for &(start, len) in &self.0 {
            if fblock < base + len {
                return Some(start + (fblock - base));
            }
            base += len;
        }
        None
    }

    pub(super) fn end(&self) -> Option<Lpn> {
        self.0.last().map(|&(start, len)| start + len)
    }

    pub(super) fn push(&mut self, start: Lpn, len: u64) {
        if let Some(last) = self.0.last_mut() {
            if last.0 + last.1 == start {
                last.1 += len;
                return;
            }
        }
        self.0.push((start, len));
    }

    /// Keeps the first `keep` blocks; returns the rest as extents.
    pub(super) fn cut(&mut self, keep: u64) -> Vec<(Lpn, u64)> {
        let mut freed = Vec::new();
        let mut kept = Vec::new();
        let mut base = 0;
        for &(start, len) in &self.0 {
            if base + len <= keep {
                kept.push((start, len));
            } else if base >= keep {
                freed.push((start, len));
            } else {
                let k = keep - base;
                kept.push((start, k));
                freed.push((start + k, len - k));
            }
            base += len;
        }
        self.0 = kept;
        freed
    }
}

/// A file's metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Inode {
    pub(super) name: String,
    pub(super) generation: u64,
    pub(super) size: u64,
    pub(super) extents: Extents,
}

/// One record of the inode table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum InodeSlot {
    Free,
    Used(Inode),
}

impl OnDisk for InodeSlot {
    const NAME: &'static str = "flash fs inode";
    type Context = ();

    fn encode(&self, _: &(), w: &mut Writer) {
        let start = w.len();
        let InodeSlot::Used(inode) = self else {
            w.pad_to(start + INODE_SIZE);
            return;
        };
        debug_assert!(inode.name.len() <= MAX_NAME && inode.extents.0.len() <= MAX_EXTENTS);
        w.u8(1).u8(inode.name.len() as u8).bytes(inode.name.as_bytes());
        w.pad_to(start + INODE_SIZE_OFFSET)
            .u64(inode.size)
            .u64(inode.generation)
            .u16(inode.extents.0.len() as u16);
        w.pad_to(start + INODE_EXTENTS_OFFSET);
        for &(first, len) in &inode.extents.0 {
            w.u32(first as u32).u32(len as u32);
        }
        seal(w, start, INODE_SIZE);
    }

    fn decode(_: &(), r: &mut Reader<'_>) -> Result<InodeSlot, DecodeError> {
        let (record, mut b) = take_block(Self::NAME, INODE_SIZE, r)?;
        if record.iter().all(|&x| x == 0) {
            return Ok(InodeSlot::Free);
        }
        check_seal(&b, record)?;
        if b.u8()? == 0 {
            return Ok(InodeSlot::Free);
        }
        let out_of_range = "an inode's name or extent count is out of range";
        let name_len = b.u8()? as usize;
        if name_len > MAX_NAME {
            return Err(b.invalid(out_of_range));
        }
        let name = b.take(name_len)?;
        b.skip(INODE_SIZE_OFFSET - b.position())?;
        let size = b.u64()?;
        let generation = b.u64()?;
        let count = b.u16()? as usize;
        if count > MAX_EXTENTS {
            return Err(b.invalid(out_of_range));
        }
        let name = String::from_utf8(name.to_vec()).map_err(|_| b.invalid("an inode's name is not UTF-8"))?;
        b.skip(INODE_EXTENTS_OFFSET - b.position())?;
        let mut extents = Vec::with_capacity(count);
        for _ in 0..count {
            extents.push((b.u32()? as u64, b.u32()? as u64));
        }
        Ok(InodeSlot::Used(Inode {
            name,
            generation,
            size,
            extents: Extents(extents),
        }))
    }
}

/// The journal's first block: where replay starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct JournalSuperblock {
    /// Log position of the first transaction not yet checkpointed.
    pub(super) tail: u64,
    /// That transaction's sequence number.
    pub(super) seq: u64,
}

impl OnDisk for JournalSuperblock {
    const NAME: &'static str = "flash fs journal superblock";
    type Context = BlockSize;

    fn encode(&self, bs: &BlockSize, w: &mut Writer) {
        let start = w.len();
        w.u32(JSB_MAGIC).u64(self.tail).u64(self.seq);
        seal(w, start, *bs);
    }

    fn decode(bs: &BlockSize, r: &mut Reader<'_>) -> Result<JournalSuperblock, DecodeError> {
        let (block, mut b) = take_block(Self::NAME, *bs, r)?;
        b.magic(&JSB_MAGIC.to_le_bytes())?;
        check_seal(&b, block)?;
        Ok(JournalSuperblock {
            tail: b.u64()?,
            seq: b.u64()?,
        })
    }
}

/// A journal transaction's first block: its sequence number and the homes of its logged
/// blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Descriptor {
    pub(super) seq: u64,
    pub(super) homes: Vec<Lpn>,
}

impl Descriptor {
    /// The most logged blocks one descriptor can name.
    pub(super) fn capacity(bs: BlockSize) -> usize {
        bs.saturating_sub(DESCRIPTOR_HOMES_OFFSET + CRC_LEN) / 8
    }
}

impl OnDisk for Descriptor {
    const NAME: &'static str = "flash fs journal descriptor";
    type Context = BlockSize;

    fn encode(&self, bs: &BlockSize, w: &mut Writer) {
        debug_assert!(self.homes.len() <= Descriptor::capacity(*bs));
        let start = w.len();
        w.u32(DESC_MAGIC).u64(self.seq).u32(self.homes.len() as u32);
        for &home in &self.homes {
            w.u64(home);
        }
        seal(w, start, *bs);
    }

    fn decode(bs: &BlockSize, r: &mut Reader<'_>) -> Result<Descriptor, DecodeError> {
        let (block, mut b) = take_block(Self::NAME, *bs, r)?;
        b.magic(&DESC_MAGIC.to_le_bytes())?;
        check_seal(&b, block)?;
        let seq = b.u64()?;
        let count = b.u32()? as usize;
        if count > Descriptor::capacity(*bs) {
            return Err(b.invalid(format!("{count} logged blocks do not fit a descriptor")));
        }
        let homes = (0..count).map(|_| b.u64()).collect::<Result<_, _>>()?;
        Ok(Descriptor { seq, homes })
    }
}

/// A journal transaction's last block: present and matching, the transaction is complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CommitBlock {
    pub(super) seq: u64,
    /// CRC-32C over the logged blocks, in order.
    pub(super) data_crc: u32,
}

impl OnDisk for CommitBlock {
    const NAME: &'static str = "flash fs journal commit block";
    type Context = BlockSize;

    fn encode(&self, bs: &BlockSize, w: &mut Writer) {
        let start = w.len();
        w.u32(COMMIT_MAGIC).u64(self.seq).u32(self.data_crc);
        seal(w, start, *bs);
    }

    fn decode(bs: &BlockSize, r: &mut Reader<'_>) -> Result<CommitBlock, DecodeError> {
        let (block, mut b) = take_block(Self::NAME, *bs, r)?;
        b.magic(&COMMIT_MAGIC.to_le_bytes())?;
        check_seal(&b, block)?;
        Ok(CommitBlock {
            seq: b.u64()?,
            data_crc: b.u32()?,
        })
    }
}

/// The group descriptor (written for its cost only).
pub(super) fn group_descriptor_block(bs: BlockSize, free_blocks: u64, free_inodes: u64) -> Vec<u8> {
    let mut w = Writer::with_capacity(bs);
    w.u64(free_blocks).u64(free_inodes);
    seal(&mut w, 0, bs);
    w.into_bytes()
}

/// A bitmap block with the bits `set` (written for its cost only).
pub(super) fn bitmap_block(bs: BlockSize, set: impl Iterator<Item = usize>) -> Vec<u8> {
    let mut bits = vec![0u8; bs - CRC_LEN];
    for i in set {
        bits[i / 8] |= 1 << (i % 8);
    }
    let mut w = Writer::with_capacity(bs);
    w.bytes(&bits);
    seal(&mut w, 0, bs);
    w.into_bytes()
}

/// The directory block: `(inode, name)` in the order given, as many as fit (written for its
/// cost only).
pub(super) fn directory_block<'a>(bs: BlockSize, entries: impl Iterator<Item = (u32, &'a str)>) -> Vec<u8> {
    let mut w = Writer::with_capacity(bs);
    for (ino, name) in entries {
        if w.len() + 8 + name.len() > bs - CRC_LEN {
            break;
        }
        w.u32(ino).u32(name.len() as u32).bytes(name.as_bytes());
    }
    seal(&mut w, 0, bs);
    w.into_bytes()
}

/// A decode error as the filesystem reports it: `Corrupt`, with `what` for a bad checksum.
pub(super) fn corrupt(e: DecodeError, what: &str) -> FsError {
    match e.problem {
        Problem::BadChecksum { .. } => FsError::Corrupt(format!("{what} fails its checksum")),
        Problem::Invalid(why) => FsError::Corrupt(why),
        _ => FsError::Corrupt(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use onesync_codec::fuzz::check_decoder_resealed;

    use super::*;

    const BS: usize = 512;

    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
    }

    fn u64_at(b: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
    }

    fn sealed(b: &[u8]) -> bool {
        let n = b.len() - CRC_LEN;
        u32_at(b, n) == crc32c::crc32c(&b[..n])
    }

    fn superblock() -> Superblock {
        Layout::new(BS, 2_000, 4, 64).unwrap().superblock()
    }

    fn inode() -> InodeSlot {
        InodeSlot::Used(Inode {
            name: "alpha.db".into(),
            generation: 7,
            size: 70_001,
            extents: Extents(vec![(300, 16), (400, 3)]),
        })
    }

    fn descriptor() -> Descriptor {
        Descriptor {
            seq: 12,
            homes: vec![1, 5, 300, 301],
        }
    }

    #[test]
    fn fields_sit_at_their_documented_offsets() {
        let sb = superblock().to_bytes(&BS);
        assert_eq!(sb.len(), BS);
        assert_eq!(&sb[..8], SUPER_MAGIC);
        let fields: Vec<u64> = (0..5).map(|i| u64_at(&sb, 8 + 8 * i)).collect();
        assert_eq!(fields, [BS as u64, 2_000, 1, 4, 64]);
        assert!(sealed(&sb));

        let ino = inode().to_bytes(&());
        assert_eq!(ino.len(), INODE_SIZE);
        assert_eq!((ino[0], ino[1], &ino[2..10]), (1, 8, &b"alpha.db"[..]));
        assert_eq!((u64_at(&ino, 100), u64_at(&ino, 108)), (70_001, 7));
        assert_eq!(u16::from_le_bytes([ino[116], ino[117]]), 2);
        assert_eq!(
            [
                u32_at(&ino, 120),
                u32_at(&ino, 124),
                u32_at(&ino, 128),
                u32_at(&ino, 132)
            ],
            [300, 16, 400, 3]
        );
        assert!(sealed(&ino));
        assert_eq!(InodeSlot::Free.to_bytes(&()), vec![0; INODE_SIZE]);

        let jsb = JournalSuperblock { tail: 9, seq: 33 }.to_bytes(&BS);
        assert_eq!(
            (u32_at(&jsb, 0), u64_at(&jsb, 4), u64_at(&jsb, 12)),
            (JSB_MAGIC, 9, 33)
        );
        assert!(sealed(&jsb));

        let desc = descriptor().to_bytes(&BS);
        assert_eq!(
            (u32_at(&desc, 0), u64_at(&desc, 4), u32_at(&desc, 12)),
            (DESC_MAGIC, 12, 4)
        );
        assert_eq!((u64_at(&desc, 16), u64_at(&desc, 40)), (1, 301));
        assert!(sealed(&desc));

        let commit = CommitBlock {
            seq: 12,
            data_crc: 0xdead_beef,
        }
        .to_bytes(&BS);
        assert_eq!(
            (u32_at(&commit, 0), u64_at(&commit, 4), u32_at(&commit, 12)),
            (COMMIT_MAGIC, 12, 0xdead_beef)
        );
        assert!(sealed(&commit));

        let gd = group_descriptor_block(BS, 100, 5);
        assert_eq!((u64_at(&gd, 0), u64_at(&gd, 8)), (100, 5));
        assert!(sealed(&gd));
        let dir = directory_block(BS, [(3, "b"), (0, "a.db")].into_iter());
        assert_eq!((u32_at(&dir, 0), u32_at(&dir, 4), dir[8]), (3, 1, b'b'));
        assert_eq!(
            (u32_at(&dir, 9), u32_at(&dir, 13), &dir[17..21]),
            (0, 4, &b"a.db"[..])
        );
        let bitmap = bitmap_block(BS, [0, 9].into_iter());
        assert_eq!(&bitmap[..2], &[1, 2]);
        assert!(sealed(&dir) && sealed(&bitmap));
    }

    #[test]
    fn structures_round_trip_and_damage_is_an_error() {
        assert_eq!(
            Superblock::from_bytes(&BS, &superblock().to_bytes(&BS)),
            Ok(superblock())
        );
        assert_eq!(InodeSlot::from_bytes(&(), &inode().to_bytes(&())), Ok(inode()));
        assert_eq!(
            Descriptor::from_bytes(&BS, &descriptor().to_bytes(&BS)),
            Ok(descriptor())
        );
        let mut bad = superblock().to_bytes(&BS);
        bad[20] ^= 1;
        assert!(matches!(
            Superblock::from_bytes(&BS, &bad).unwrap_err().problem,
            Problem::BadChecksum { .. }
        ));
        bad[0] ^= 1;
        assert_eq!(
            Superblock::from_bytes(&BS, &bad).unwrap_err().problem,
            Problem::BadMagic
        );
        // Another drive's block size: the layout would not fit.
        assert!(Superblock::from_bytes(&1024, &superblock().to_bytes(&1024)).is_err());
    }

    #[test]
    fn the_decoders_survive_damaged_blocks() {
        fn check<T: OnDisk + PartialEq + std::fmt::Debug>(ctx: &T::Context, seeds: Vec<Vec<u8>>) {
            let report = check_decoder_resealed::<T>(ctx, &seeds, 3_000, |b| reseal(b));
            assert!(
                report.decoded > 50 && report.rejected > 50,
                "{}: {report:?}",
                T::NAME
            );
        }
        check::<Superblock>(&BS, vec![superblock().to_bytes(&BS)]);
        let unicode = InodeSlot::Used(Inode {
            name: "ünïcode-名前".into(),
            generation: 1,
            size: 0,
            extents: Extents::default(),
        });
        check::<InodeSlot>(&(), vec![inode().to_bytes(&()), unicode.to_bytes(&())]);
        check::<JournalSuperblock>(&BS, vec![JournalSuperblock { tail: 3, seq: 1 }.to_bytes(&BS)]);
        let empty = Descriptor {
            seq: 1,
            homes: Vec::new(),
        };
        check::<Descriptor>(&BS, vec![descriptor().to_bytes(&BS), empty.to_bytes(&BS)]);
        check::<CommitBlock>(&BS, vec![CommitBlock { seq: 2, data_crc: 7 }.to_bytes(&BS)]);
    }
}
