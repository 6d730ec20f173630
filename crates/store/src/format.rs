//! The on-disk format, version 1.
//!
//! Every structure is a packed byte stream: integers are little-endian, fields follow each
//! other with no padding or alignment, and variable-length parts are a length field followed
//! by that many bytes. Every CRC is CRC-32C (Castagnoli). Offsets in the tables below are
//! in bytes from the start of the structure the table describes.
//!
//! # File layout
//!
//! ```text
//! offset 0                     header copy 0  (HEADER_BLOCK = 4096 bytes, HEADER_LEN = 1024 used)
//! offset 4096                  header copy 1
//! offset 8192 + n * page_size  slot n, page_size bytes  (SLOT_BASE = 2 * HEADER_BLOCK = 8192)
//! ```
//!
//! Every slot holds a data page, a piece of the mapping checkpoint, (part of) a commit
//! record, or is free or reserved for the records to come. The header says where the
//! checkpoint is and where the chain of records after it starts. Since `page_size` is a
//! power of two of at least 512, every slot starts at a multiple of `RECORD_ALIGN`.
//!
//! * **Header**, two copies. A checkpoint writes the copy at `Header::copy_offset`
//!   (`generation % 2`) and flushes, then duplicates it into the other copy and flushes
//!   again; of the valid copies the one with the higher generation wins.
//! * **Checkpoint**: the whole mapping (files, sizes, page -> slot + CRC + small overlays)
//!   as of one sequence number. Mapping metadata only: no data page is ever copied.
//! * **Commit record**: starts at a slot. A commit writes its record and its pages as one
//!   contiguous run `[record | pages]` with one `pwrite`, so a commit is one write request
//!   plus one flush. Records form a chain through the slots: the header names the first,
//!   each names the next. The CRC chain (`prev_crc`), the session nonce and the epoch
//!   reject stale records of an earlier session or checkpoint. A `Page` operation carries
//!   the CRC of the page it maps, so recovery rejects a record whose pages did not all
//!   reach the disk.
//!
//! # Header copy
//!
//! `HEADER_LEN` (1024) bytes at the start of its `HEADER_BLOCK`; the other 3072 bytes of the
//! block are zeroed at creation and ignored after that.
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 16 | magic | `MAGIC`, `b"onesync store\0\r\n"` |
//! | 16 | 4 | version | u32, `FORMAT_VERSION` (1); 0 is invalid |
//! | 20 | 4 | header length | u32, `HEADER_LEN` (1024) |
//! | 24 | 4 | page size | u32, a power of two in `MIN_PAGE_SIZE..=MAX_PAGE_SIZE` |
//! | 28 | 4 | flags | u32, written 0, ignored on read (none defined) |
//! | 32 | 8 | store id | u64, random at creation; both valid copies must agree |
//! | 40 | 8 | generation | u64, 1 at creation, +1 per checkpoint |
//! | 48 | 8 | checkpoint first slot | u64, equal to the first slot of extent 0 |
//! | 56 | 8 | checkpoint length | u64, bytes of the checkpoint |
//! | 64 | 8 | checkpoint seq | u64, the last commit it includes; equals its own `seq` |
//! | 72 | 4 | checkpoint CRC | u32, CRC-32C of the checkpoint's `length` bytes |
//! | 76 | 8 | log first slot | u64, where the first record after the checkpoint goes |
//! | 84 | 8 | log window end | u64, end (exclusive) of the run reserved for it; > first slot |
//! | 92 | 4 | log seed | u32, the `prev_crc` that first record carries |
//! | 96 | 4 | extent count | u32, `1..=MAX_CHECKPOINT_EXTENTS` (56) |
//! | 100 | 16 × count | extents | then, per extent: the 16-byte entry below |
//! | 100 + 16 × count | 920 − 16 × count | padding | zeros (56 extents, the most, end at 996) |
//! | 1020 | 4 | CRC | u32, CRC-32C of bytes `0..1020`, padding included |
//!
//! Checkpoint extent, one run of slots; the checkpoint is the concatenation of its runs in
//! order, cut at `length` (the rest of the last slot is not written and not covered):
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 8 | first slot | u64 |
//! | 8 | 8 | slot count | u64, > 0; all counts × page size must hold `length` |
//!
//! `Header::decode` checks the magic (else `NotAStore`), then the version (else
//! `UnsupportedVersion`: before the CRC, because a newer format may place it elsewhere),
//! then the CRC, then the fields.
//!
//! # Mapping checkpoint
//!
//! `length` bytes, no CRC of its own (the header holds it, covering all `length` bytes),
//! decoded to the last byte: trailing bytes are corruption.
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 4 | magic | u32 `0x4b43_534f`, the bytes `"OSCK"` |
//! | 4 | 4 | version | u32, `FORMAT_VERSION`, exactly |
//! | 8 | 8 | seq | u64, the last commit included (equals the header's checkpoint seq) |
//! | 16 | 4 | next file id | u32, lower bound for the next file id |
//! | 20 | 4 | file count | u32 |
//! | 24 | var | files | then, per file: a file entry |
//!
//! File entry (`n` = name length); files are written in ascending id order:
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 4 | id | u32, file id, unique |
//! | 4 | 2 | name length | u16, `n` (names are at most `MAX_NAME_LEN` bytes) |
//! | 6 | n | name | UTF-8, no terminator |
//! | 6 + n | 8 | size | u64, logical size in bytes |
//! | 14 + n | 8 | page count | u64, number of page entries that follow |
//! | 22 + n | var | pages | then, per page: a page entry |
//!
//! Page entry, at least 22 bytes; pages are written in ascending order, and a page that
//! reads as zeros without an overlay is left out:
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 8 | page | u64, page number, below `ceil(size / page_size)`, unique in its file |
//! | 8 | 8 | slot | u64, the slot holding the page, or `NO_SLOT` (zeros) |
//! | 16 | 4 | CRC | u32, CRC-32C of the slot's `page_size` bytes; unused for `NO_SLOT` |
//! | 20 | 2 | overlay count | u16 |
//! | 22 | var | overlays | then, per overlay: an overlay range |
//!
//! Overlay range (`m` = length), applied in order over the slot's content on read:
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 4 | offset | u32, byte offset in the page; offset + `m` ≤ page size |
//! | 4 | 2 | length | u16, `m` |
//! | 6 | m | bytes | replace the page's bytes at `offset` |
//!
//! # Commit record
//!
//! Starts at a slot (so it is `RECORD_ALIGN`-aligned) and occupies
//! `ceil(total length / page_size)` slots. The fixed part is `RECORD_FIXED_LEN` (64) bytes:
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 4 | magic | u32 `0x5243_534f`, the bytes `"OSCR"` |
//! | 4 | 2 | kind | u16, a record kind (below) |
//! | 6 | 2 | reserved | u16, written 0; covered by the CRC, not checked |
//! | 8 | 4 | total length | u32, whole record with CRC and padding; a nonzero multiple of 512 |
//! | 12 | 4 | payload length | u32, `p` = 64 + bytes of operations = offset of the CRC |
//! | 16 | 8 | seq | u64, the commit's sequence number (jump: of the commit it leads to) |
//! | 24 | 8 | session | u64, random per open |
//! | 32 | 8 | epoch | u64, generation of the header the record follows |
//! | 40 | 4 | prev CRC | u32, CRC of the previous record, or the header's log seed |
//! | 44 | 8 | next slot | u64, where the next record goes |
//! | 52 | 8 | window end | u64, end (exclusive) of the run reserved for it |
//! | 60 | 4 | op count | u32 |
//! | 64 | var | operations | then, per operation: one of the operations below |
//! | p | 4 | CRC | u32, CRC-32C of bytes `0..p`; the chain value the next `prev CRC` holds |
//! | p + 4 | var | padding | zeros up to the total length, not covered by the CRC |
//!
//! Total length = `ceil((p + 4) / RECORD_ALIGN) * RECORD_ALIGN`. Recovery reads the first 512
//! bytes, takes magic and total length from them, reads the rest, then requires
//! `64 <= p`, `p + 4 <= total length`, the CRC, a known kind, and that the operations end
//! exactly at `p`.
//!
//! Record kinds (`RecordKind`):
//!
//! | value | kind | meaning |
//! |---:|---|---|
//! | 1 | commit | its operations take effect |
//! | 2 | jump | no operations; says where the chain continues (the commit did not fit) |
//!
//! Operations, each starting with a one-byte tag; `file` is a u32 file id throughout.
//!
//! Create, tag 1, `7 + n` bytes:
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 1 | tag | 1 |
//! | 1 | 4 | file | id of the new file |
//! | 5 | 2 | name length | u16, `n` |
//! | 7 | n | name | UTF-8, no terminator |
//!
//! Delete, tag 2, 5 bytes:
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 1 | tag | 2 |
//! | 1 | 4 | file | |
//!
//! Size, tag 3, 13 bytes:
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 1 | tag | 3 |
//! | 1 | 4 | file | |
//! | 5 | 8 | bytes | u64, the new logical size |
//!
//! Page, tag 4, 25 bytes:
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 1 | tag | 4 |
//! | 1 | 4 | file | |
//! | 5 | 8 | page | u64, page number |
//! | 13 | 8 | slot | u64, the slot now holding it, or `NO_SLOT` (zeros) |
//! | 21 | 4 | CRC | u32, CRC-32C of the slot's `page_size` bytes; unused for `NO_SLOT` |
//!
//! Patch, tag 5, `19 + m` bytes:
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 1 | tag | 5 |
//! | 1 | 4 | file | |
//! | 5 | 8 | page | u64, page number |
//! | 13 | 4 | offset | u32, byte offset in the page |
//! | 17 | 2 | length | u16, `m` |
//! | 19 | m | bytes | overlaid at `offset` |

use crate::error::{Error, Result};

pub const MAGIC: [u8; 16] = *b"onesync store\0\r\n";
pub const FORMAT_VERSION: u32 = 1;
pub const HEADER_BLOCK: u64 = 4096;
/// Bytes of a header copy covered by its CRC (fixed fields, checkpoint extents, CRC).
pub const HEADER_LEN: usize = 1024;
/// Runs of slots a checkpoint may occupy (so that a fragmented store can still write one).
pub const MAX_CHECKPOINT_EXTENTS: usize = 56;
/// Byte offset of slot 0.
pub const SLOT_BASE: u64 = 2 * HEADER_BLOCK;
/// Commit records are aligned to, and padded to a multiple of, this many bytes.
pub const RECORD_ALIGN: u64 = 512;
/// `slot` value of a page that reads as zeros (plus any overlay) and occupies no slot.
pub const NO_SLOT: u64 = u64::MAX;
pub const MIN_PAGE_SIZE: u32 = 512;
pub const MAX_PAGE_SIZE: u32 = 65536;
/// Longest logical file name.
pub const MAX_NAME_LEN: usize = 1024;

const RECORD_MAGIC: u32 = 0x5243_534f; // "OSCR"
/// magic, kind, reserved, total and payload lengths, seq, session, epoch, prev_crc, next_slot,
/// window_end, op count.
const RECORD_FIXED_LEN: usize = 4 + 2 + 2 + 4 + 4 + 8 + 8 + 8 + 4 + 8 + 8 + 4;
const CHECKPOINT_MAGIC: u32 = 0x4b43_534f; // "OSCK"

/// Byte offset of slot `slot` for pages of `page_size` bytes.
pub fn slot_offset(slot: u64, page_size: u64) -> u64 {
    SLOT_BASE + slot * page_size
}

/// Where the mapping checkpoint lives: `len` bytes in up to `MAX_CHECKPOINT_EXTENTS` runs
/// of slots, read in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointRef {
    /// First slot of the first run (also in `extents`; kept at a fixed offset).
    pub first_slot: u64,
    pub len: u64,
    pub crc: u32,
    pub seq: u64,
    pub extent_count: u32,
    /// (first slot, slot count) of each run.
    pub extents: [(u64, u64); MAX_CHECKPOINT_EXTENTS],
}

impl CheckpointRef {
    pub fn new(extents: &[(u64, u64)], len: u64, crc: u32, seq: u64) -> CheckpointRef {
        let mut all = [(0, 0); MAX_CHECKPOINT_EXTENTS];
        all[..extents.len()].copy_from_slice(extents);
        CheckpointRef {
            first_slot: extents.first().map_or(0, |e| e.0),
            len,
            crc,
            seq,
            extent_count: extents.len() as u32,
            extents: all,
        }
    }

    pub fn extents(&self) -> &[(u64, u64)] {
        &self.extents[..(self.extent_count as usize).min(MAX_CHECKPOINT_EXTENTS)]
    }

    /// Every slot the checkpoint occupies, in order.
    pub fn slots(&self) -> impl Iterator<Item = u64> + '_ {
        self.extents()
            .iter()
            .flat_map(|&(first, n)| first..first.saturating_add(n))
    }
}

/// Where the chain of commit records continues after the checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogRef {
    /// The slot the first record after the checkpoint goes to.
    pub first_slot: u64,
    /// End of the run of slots reserved for the records and pages that follow.
    pub window_end: u64,
    /// `prev_crc` of the first record after the checkpoint.
    pub seed: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub page_size: u32,
    pub store_id: u64,
    pub generation: u64,
    pub checkpoint: CheckpointRef,
    pub log: LogRef,
}

impl Header {
    /// Byte offset of the copy a header of this generation is written to first. Copies
    /// alternate, so the other one still holds the previous generation, durably.
    pub fn copy_offset(generation: u64) -> u64 {
        (generation % 2) * HEADER_BLOCK
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut e = Encoder::default();
        e.bytes(&MAGIC);
        e.u32(FORMAT_VERSION);
        e.u32(HEADER_LEN as u32);
        e.u32(self.page_size);
        e.u32(0); // flags, none defined
        e.u64(self.store_id);
        e.u64(self.generation);
        e.u64(self.checkpoint.first_slot);
        e.u64(self.checkpoint.len);
        e.u64(self.checkpoint.seq);
        e.u32(self.checkpoint.crc);
        e.u64(self.log.first_slot);
        e.u64(self.log.window_end);
        e.u32(self.log.seed);
        e.u32(self.checkpoint.extent_count);
        for &(first, n) in self.checkpoint.extents() {
            e.u64(first);
            e.u64(n);
        }
        let mut buf = e.finish();
        buf.resize(HEADER_LEN - 4, 0);
        let crc = crc32c::crc32c(&buf);
        buf.extend_from_slice(&crc.to_le_bytes());
        buf
    }

    /// Decode one header copy. `NotAStore` if the magic is absent, `UnsupportedVersion`
    /// for a newer format, `Corrupt` if the checksum or a field is wrong.
    pub fn decode(buf: &[u8]) -> Result<Header> {
        if buf.len() < HEADER_LEN || buf[..16] != MAGIC {
            return Err(Error::NotAStore(
                "the file does not begin with the onesync store magic".into(),
            ));
        }
        let mut d = Decoder::new(&buf[16..HEADER_LEN]);
        let version = d.u32()?;
        if version > FORMAT_VERSION {
            return Err(Error::UnsupportedVersion {
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let stored_crc = u32::from_le_bytes(buf[HEADER_LEN - 4..HEADER_LEN].try_into().expect("4 bytes"));
        if crc32c::crc32c(&buf[..HEADER_LEN - 4]) != stored_crc {
            return Err(Error::Corrupt("header checksum mismatch".into()));
        }
        if version == 0 || d.u32()? != HEADER_LEN as u32 {
            return Err(Error::Corrupt("header version or length field is invalid".into()));
        }
        let page_size = d.u32()?;
        let _flags = d.u32()?;
        let store_id = d.u64()?;
        let generation = d.u64()?;
        let (first_slot, len, seq, crc) = (d.u64()?, d.u64()?, d.u64()?, d.u32()?);
        let log = LogRef {
            first_slot: d.u64()?,
            window_end: d.u64()?,
            seed: d.u32()?,
        };
        let extent_count = d.u32()?;
        if extent_count == 0 || extent_count as usize > MAX_CHECKPOINT_EXTENTS {
            return Err(Error::Corrupt(format!(
                "header lists {extent_count} checkpoint extents"
            )));
        }
        let mut extents = Vec::with_capacity(extent_count as usize);
        for _ in 0..extent_count {
            extents.push((d.u64()?, d.u64()?));
        }
        let slots = extents.iter().try_fold(0u64, |sum, &(first, n)| {
            first
                .checked_add(n)
                .filter(|_| n > 0)
                .and_then(|_| sum.checked_add(n))
        });
        let fits = slots
            .and_then(|s| s.checked_mul(page_size as u64))
            .is_some_and(|bytes| bytes >= len);
        if extents[0].0 != first_slot || !fits {
            return Err(Error::Corrupt(
                "header's checkpoint extents are inconsistent".into(),
            ));
        }
        let header = Header {
            page_size,
            store_id,
            generation,
            checkpoint: CheckpointRef::new(&extents, len, crc, seq),
            log,
        };
        if !valid_page_size(page_size) {
            return Err(Error::Corrupt(format!(
                "header names an impossible page size {page_size}"
            )));
        }
        if header.log.first_slot >= header.log.window_end {
            return Err(Error::Corrupt("header names an empty log window".into()));
        }
        Ok(header)
    }
}

pub fn valid_page_size(page_size: u32) -> bool {
    (MIN_PAGE_SIZE..=MAX_PAGE_SIZE).contains(&page_size) && page_size.is_power_of_two()
}

/// One change in a commit record, applied in order at commit and at recovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Create {
        file: u32,
        name: String,
    },
    Delete {
        file: u32,
    },
    /// Set the logical size in bytes: pages past the end are dropped, new pages read as zeros.
    Size {
        file: u32,
        bytes: u64,
    },
    /// Map a page to a slot holding content with this CRC-32C (`NO_SLOT`: zeros).
    Page {
        file: u32,
        page: u64,
        slot: u64,
        crc: u32,
    },
    /// Overlay bytes on a page without writing it (small, header-only changes).
    Patch {
        file: u32,
        page: u64,
        offset: u32,
        bytes: Vec<u8>,
    },
}

const OP_CREATE: u8 = 1;
const OP_DELETE: u8 = 2;
const OP_SIZE: u8 = 3;
const OP_PAGE: u8 = 4;
const OP_PATCH: u8 = 5;

/// What a record in the chain is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    /// A commit: its operations take effect.
    Commit = 1,
    /// Carries no operations; says only where the chain continues (the commit that
    /// follows did not fit in the reserved window).
    Jump = 2,
}

/// A decoded record of the commit chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub kind: RecordKind,
    /// The commit's sequence number (for a jump: that of the commit it leads to).
    pub seq: u64,
    /// Random per open: records of an earlier session never chain to this one's.
    pub session: u64,
    /// Generation of the header (checkpoint) the record follows.
    pub epoch: u64,
    pub prev_crc: u32,
    /// The slot where the next record goes.
    pub next_slot: u64,
    /// End of the run reserved for it.
    pub window_end: u64,
    pub ops: Vec<Op>,
}

impl Record {
    /// Encoded length, padded to a multiple of `RECORD_ALIGN`.
    pub fn encoded_len(&self) -> u64 {
        Record::encoded_len_of(&self.ops)
    }

    /// Encoded length of a record carrying `ops`.
    pub fn encoded_len_of(ops: &[Op]) -> u64 {
        let ops: usize = ops.iter().map(op_len).sum();
        (RECORD_FIXED_LEN as u64 + ops as u64 + 4).div_ceil(RECORD_ALIGN) * RECORD_ALIGN
    }

    /// Encode, padded to a multiple of `RECORD_ALIGN`; also returns the record's CRC.
    pub fn encode(&self) -> (Vec<u8>, u32) {
        let mut e = Encoder::default();
        e.u32(RECORD_MAGIC);
        e.u16(self.kind as u16);
        e.u16(0);
        e.u32(0); // total length, patched below
        e.u32(0); // payload length, patched below
        e.u64(self.seq);
        e.u64(self.session);
        e.u64(self.epoch);
        e.u32(self.prev_crc);
        e.u64(self.next_slot);
        e.u64(self.window_end);
        e.u32(self.ops.len() as u32);
        for op in &self.ops {
            encode_op(&mut e, op);
        }
        let mut buf = e.finish();
        let payload_len = buf.len();
        let total = (payload_len as u64 + 4).div_ceil(RECORD_ALIGN) * RECORD_ALIGN;
        debug_assert_eq!(total, self.encoded_len());
        buf[8..12].copy_from_slice(&(total as u32).to_le_bytes());
        buf[12..16].copy_from_slice(&(payload_len as u32).to_le_bytes());
        let crc = crc32c::crc32c(&buf);
        buf.extend_from_slice(&crc.to_le_bytes());
        buf.resize(total as usize, 0);
        (buf, crc)
    }

    /// The total length a record claims, from its first bytes, if they look like a record.
    pub fn peek_len(first: &[u8]) -> Option<u64> {
        if first.len() < RECORD_FIXED_LEN {
            return None;
        }
        let magic = u32::from_le_bytes(first[0..4].try_into().ok()?);
        let total = u32::from_le_bytes(first[8..12].try_into().ok()?) as u64;
        if magic != RECORD_MAGIC || total == 0 || !total.is_multiple_of(RECORD_ALIGN) {
            return None;
        }
        Some(total)
    }

    /// Decode a whole record and check its CRC; `None` for anything that is not an intact
    /// record (a torn or never-written position is not an error: the chain ends there).
    pub fn decode(buf: &[u8]) -> Option<(Record, u32)> {
        let total = Record::peek_len(buf)? as usize;
        if buf.len() < total {
            return None;
        }
        let payload_len = u32::from_le_bytes(buf[12..16].try_into().ok()?) as usize;
        if payload_len < RECORD_FIXED_LEN || payload_len + 4 > total {
            return None;
        }
        let stored = u32::from_le_bytes(buf[payload_len..payload_len + 4].try_into().ok()?);
        let crc = crc32c::crc32c(&buf[..payload_len]);
        if crc != stored {
            return None;
        }
        let kind = match u16::from_le_bytes(buf[4..6].try_into().ok()?) {
            1 => RecordKind::Commit,
            2 => RecordKind::Jump,
            _ => return None,
        };
        let mut d = Decoder::new(&buf[16..payload_len]);
        let decoded = (|| -> Result<Record> {
            let seq = d.u64()?;
            let session = d.u64()?;
            let epoch = d.u64()?;
            let prev_crc = d.u32()?;
            let next_slot = d.u64()?;
            let window_end = d.u64()?;
            let count = d.u32()? as usize;
            let mut ops = Vec::with_capacity(count.min(1 << 16));
            for _ in 0..count {
                ops.push(decode_op(&mut d)?);
            }
            d.expect_end()?;
            Ok(Record {
                kind,
                seq,
                session,
                epoch,
                prev_crc,
                next_slot,
                window_end,
                ops,
            })
        })();
        decoded.ok().map(|r| (r, crc))
    }
}

fn op_len(op: &Op) -> usize {
    match op {
        Op::Create { name, .. } => 1 + 4 + 2 + name.len(),
        Op::Delete { .. } => 1 + 4,
        Op::Size { .. } => 1 + 4 + 8,
        Op::Page { .. } => 1 + 4 + 8 + 8 + 4,
        Op::Patch { bytes, .. } => 1 + 4 + 8 + 4 + 2 + bytes.len(),
    }
}

fn encode_op(e: &mut Encoder, op: &Op) {
    match op {
        Op::Create { file, name } => {
            e.u8(OP_CREATE);
            e.u32(*file);
            e.u16(name.len() as u16);
            e.bytes(name.as_bytes());
        }
        Op::Delete { file } => {
            e.u8(OP_DELETE);
            e.u32(*file);
        }
        Op::Size { file, bytes } => {
            e.u8(OP_SIZE);
            e.u32(*file);
            e.u64(*bytes);
        }
        Op::Page {
            file,
            page,
            slot,
            crc,
        } => {
            e.u8(OP_PAGE);
            e.u32(*file);
            e.u64(*page);
            e.u64(*slot);
            e.u32(*crc);
        }
        Op::Patch {
            file,
            page,
            offset,
            bytes,
        } => {
            e.u8(OP_PATCH);
            e.u32(*file);
            e.u64(*page);
            e.u32(*offset);
            e.u16(bytes.len() as u16);
            e.bytes(bytes);
        }
    }
}

fn decode_op(d: &mut Decoder) -> Result<Op> {
    Ok(match d.u8()? {
        OP_CREATE => {
            let file = d.u32()?;
            let len = d.u16()? as usize;
            let name =
                String::from_utf8(d.take(len)?.to_vec()).map_err(|_| corrupt("file name is not UTF-8"))?;
            Op::Create { file, name }
        }
        OP_DELETE => Op::Delete { file: d.u32()? },
        OP_SIZE => Op::Size {
            file: d.u32()?,
            bytes: d.u64()?,
        },
        OP_PAGE => Op::Page {
            file: d.u32()?,
            page: d.u64()?,
            slot: d.u64()?,
            crc: d.u32()?,
        },
        OP_PATCH => {
            let file = d.u32()?;
            let page = d.u64()?;
            let offset = d.u32()?;
            let len = d.u16()? as usize;
            Op::Patch {
                file,
                page,
                offset,
                bytes: d.take(len)?.to_vec(),
            }
        }
        other => return Err(corrupt(&format!("unknown operation tag {other}"))),
    })
}

/// One page of the mapping as stored in a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointPage {
    pub page: u64,
    pub slot: u64,
    pub crc: u32,
    pub overlay: Vec<(u32, Vec<u8>)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointFile {
    pub id: u32,
    pub name: String,
    pub size: u64,
    pub pages: Vec<CheckpointPage>,
}

/// The decoded mapping checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub seq: u64,
    pub next_file_id: u32,
    pub files: Vec<CheckpointFile>,
}

/// Streams a checkpoint out without building it in memory first.
pub struct CheckpointEncoder {
    e: Encoder,
}

impl CheckpointEncoder {
    pub fn new(seq: u64, next_file_id: u32, file_count: u32) -> CheckpointEncoder {
        let mut e = Encoder::default();
        e.u32(CHECKPOINT_MAGIC);
        e.u32(FORMAT_VERSION);
        e.u64(seq);
        e.u32(next_file_id);
        e.u32(file_count);
        CheckpointEncoder { e }
    }

    pub fn file(&mut self, id: u32, name: &str, size: u64, page_count: u64) {
        self.e.u32(id);
        self.e.u16(name.len() as u16);
        self.e.bytes(name.as_bytes());
        self.e.u64(size);
        self.e.u64(page_count);
    }

    pub fn page(&mut self, page: u64, slot: u64, crc: u32, overlay: &[(u32, Vec<u8>)]) {
        self.e.u64(page);
        self.e.u64(slot);
        self.e.u32(crc);
        self.e.u16(overlay.len() as u16);
        for (offset, bytes) in overlay {
            self.e.u32(*offset);
            self.e.u16(bytes.len() as u16);
            self.e.bytes(bytes);
        }
    }

    /// The encoded bytes and their CRC-32C.
    pub fn finish(self) -> (Vec<u8>, u32) {
        let buf = self.e.finish();
        let crc = crc32c::crc32c(&buf);
        (buf, crc)
    }
}

impl Checkpoint {
    pub fn decode(buf: &[u8]) -> Result<Checkpoint> {
        let mut d = Decoder::new(buf);
        if d.u32()? != CHECKPOINT_MAGIC {
            return Err(corrupt("checkpoint magic missing"));
        }
        if d.u32()? != FORMAT_VERSION {
            return Err(corrupt("checkpoint version mismatch"));
        }
        let seq = d.u64()?;
        let next_file_id = d.u32()?;
        let file_count = d.u32()?;
        let mut files = Vec::new();
        for _ in 0..file_count {
            let id = d.u32()?;
            let name_len = d.u16()? as usize;
            let name = String::from_utf8(d.take(name_len)?.to_vec())
                .map_err(|_| corrupt("file name is not UTF-8"))?;
            let size = d.u64()?;
            let page_count = d.u64()?;
            // Each page takes at least 22 bytes: refuse counts the buffer cannot hold before
            // reserving memory for them.
            if page_count > (d.remaining() / 22) as u64 {
                return Err(corrupt("checkpoint page count exceeds its length"));
            }
            let mut pages = Vec::with_capacity(page_count as usize);
            for _ in 0..page_count {
                let page = d.u64()?;
                let slot = d.u64()?;
                let crc = d.u32()?;
                let ranges = d.u16()?;
                let mut overlay = Vec::new();
                for _ in 0..ranges {
                    let offset = d.u32()?;
                    let len = d.u16()? as usize;
                    overlay.push((offset, d.take(len)?.to_vec()));
                }
                pages.push(CheckpointPage {
                    page,
                    slot,
                    crc,
                    overlay,
                });
            }
            files.push(CheckpointFile {
                id,
                name,
                size,
                pages,
            });
        }
        d.expect_end()?;
        Ok(Checkpoint {
            seq,
            next_file_id,
            files,
        })
    }
}

fn corrupt(what: &str) -> Error {
    Error::Corrupt(what.to_string())
}

#[derive(Default)]
pub(crate) struct Encoder {
    buf: Vec<u8>,
}

impl Encoder {
    fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, v: &[u8]) {
        self.buf.extend_from_slice(v);
    }
    fn finish(self) -> Vec<u8> {
        self.buf
    }
}

/// A bounds-checked reader: running off the end is a `Corrupt` error, never a panic.
pub(crate) struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Decoder<'a> {
    fn new(buf: &'a [u8]) -> Decoder<'a> {
        Decoder { buf, pos: 0 }
    }
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(corrupt("structure runs past its end"));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn expect_end(&self) -> Result<()> {
        if self.remaining() != 0 {
            return Err(corrupt("trailing bytes after structure"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trips_and_rejects_any_flipped_bit() {
        let record = Record {
            kind: RecordKind::Commit,
            seq: 7,
            session: 99,
            epoch: 3,
            prev_crc: 5,
            next_slot: 12,
            window_end: 40,
            ops: vec![
                Op::Create {
                    file: 1,
                    name: "main".into(),
                },
                Op::Size { file: 1, bytes: 8192 },
                Op::Page {
                    file: 1,
                    page: 1,
                    slot: 42,
                    crc: 0xdead,
                },
                Op::Patch {
                    file: 1,
                    page: 0,
                    offset: 24,
                    bytes: vec![1, 2, 3, 4],
                },
                Op::Delete { file: 3 },
            ],
        };
        let (buf, crc) = record.encode();
        assert_eq!(buf.len() as u64 % RECORD_ALIGN, 0);
        assert_eq!(Record::decode(&buf), Some((record, crc)));
        for bit in 0..(buf.len() * 8).min(200 * 8) {
            let mut damaged = buf.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            let decoded = Record::decode(&damaged);
            // Padding after the CRC is not covered; everything before it is.
            let payload_len = u32::from_le_bytes(buf[12..16].try_into().unwrap()) as usize;
            if bit / 8 < payload_len + 4 {
                assert!(decoded.is_none(), "flipped bit {bit} was not detected");
            }
        }
    }

    #[test]
    fn a_record_without_operations_round_trips() {
        let jump = Record {
            kind: RecordKind::Jump,
            seq: 2,
            session: 1,
            epoch: 1,
            prev_crc: 9,
            next_slot: 3,
            window_end: 18,
            ops: Vec::new(),
        };
        let (buf, crc) = jump.encode();
        assert_eq!(buf.len() as u64, jump.encoded_len());
        assert_eq!(Record::decode(&buf), Some((jump, crc)));
    }

    #[test]
    fn header_round_trips_and_classifies_damage() {
        let h = Header {
            page_size: 4096,
            store_id: 1,
            generation: 3,
            checkpoint: CheckpointRef::new(&[(10, 1), (20, 2)], 100, 7, 9),
            log: LogRef {
                first_slot: 0,
                window_end: 8,
                seed: 11,
            },
        };
        let buf = h.encode();
        assert_eq!(Header::decode(&buf).unwrap(), h);
        let mut damaged = buf.clone();
        damaged[40] ^= 1;
        assert!(matches!(Header::decode(&damaged), Err(Error::Corrupt(_))));
        let mut newer = buf.clone();
        newer[16..20].copy_from_slice(&2u32.to_le_bytes());
        assert!(matches!(
            Header::decode(&newer),
            Err(Error::UnsupportedVersion { found: 2, .. })
        ));
        assert!(matches!(Header::decode(&[0u8; 128]), Err(Error::NotAStore(_))));
    }

    fn u16_at(buf: &[u8], at: usize) -> u16 {
        u16::from_le_bytes(buf[at..at + 2].try_into().unwrap())
    }
    fn u32_at(buf: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(buf[at..at + 4].try_into().unwrap())
    }
    fn u64_at(buf: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(buf[at..at + 8].try_into().unwrap())
    }

    // The offsets below are the module documentation's tables, written out by hand: if the
    // code moves a field, these tests fail until the tables are corrected too.

    #[test]
    fn header_fields_sit_at_the_documented_offsets() {
        let extents = [(0x0a0b_0c0d_0e0f_1011, 3), (0x2122_2324_2526_2728, 0x31)];
        let h = Header {
            page_size: 8192,
            store_id: 0x0102_0304_0506_0708,
            generation: 0x1112_1314_1516_1718,
            checkpoint: CheckpointRef::new(&extents, 0x0004_1424, 0x5152_5354, 0x6162_6364_6566_6768),
            log: LogRef {
                first_slot: 0x7172_7374_7576_7778,
                window_end: 0x7172_7374_7576_7788,
                seed: 0x8182_8384,
            },
        };
        let buf = h.encode();
        assert_eq!(buf.len(), HEADER_LEN);
        assert_eq!(buf[0..16], MAGIC);
        assert_eq!(u32_at(&buf, 16), FORMAT_VERSION);
        assert_eq!(u32_at(&buf, 20), 1024);
        assert_eq!(u32_at(&buf, 24), 8192);
        assert_eq!(u32_at(&buf, 28), 0, "flags");
        assert_eq!(u64_at(&buf, 32), 0x0102_0304_0506_0708);
        assert_eq!(u64_at(&buf, 40), 0x1112_1314_1516_1718);
        assert_eq!(u64_at(&buf, 48), 0x0a0b_0c0d_0e0f_1011, "checkpoint first slot");
        assert_eq!(u64_at(&buf, 56), 0x0004_1424, "checkpoint length");
        assert_eq!(u64_at(&buf, 64), 0x6162_6364_6566_6768, "checkpoint seq");
        assert_eq!(u32_at(&buf, 72), 0x5152_5354, "checkpoint CRC");
        assert_eq!(u64_at(&buf, 76), 0x7172_7374_7576_7778, "log first slot");
        assert_eq!(u64_at(&buf, 84), 0x7172_7374_7576_7788, "log window end");
        assert_eq!(u32_at(&buf, 92), 0x8182_8384, "log seed");
        assert_eq!(u32_at(&buf, 96), 2, "extent count");
        for (i, &(first, n)) in extents.iter().enumerate() {
            assert_eq!(u64_at(&buf, 100 + 16 * i), first);
            assert_eq!(u64_at(&buf, 100 + 16 * i + 8), n);
        }
        assert!(buf[100 + 16 * 2..1020].iter().all(|&b| b == 0), "padding");
        assert_eq!(u32_at(&buf, 1020), crc32c::crc32c(&buf[..1020]));
        assert_eq!(Header::decode(&buf).unwrap(), h);

        // The most extents a header holds end at 996, before the CRC.
        let most: Vec<(u64, u64)> = (0..MAX_CHECKPOINT_EXTENTS as u64).map(|i| (2 * i, 1)).collect();
        let full = Header {
            checkpoint: CheckpointRef::new(&most, 1, 0, 0),
            ..h
        };
        let buf = full.encode();
        assert_eq!(100 + 16 * MAX_CHECKPOINT_EXTENTS, 996);
        assert_eq!(u64_at(&buf, 980), 2 * (MAX_CHECKPOINT_EXTENTS as u64 - 1));
        assert_eq!(u64_at(&buf, 988), 1);
        assert!(buf[996..1020].iter().all(|&b| b == 0));
        assert_eq!(Header::decode(&buf).unwrap(), full);
    }

    #[test]
    fn commit_record_fixed_fields_sit_at_the_documented_offsets() {
        let record = Record {
            kind: RecordKind::Commit,
            seq: 0x0102_0304_0506_0708,
            session: 0x1112_1314_1516_1718,
            epoch: 0x2122_2324_2526_2728,
            prev_crc: 0x3132_3334,
            next_slot: 0x4142_4344_4546_4748,
            window_end: 0x5152_5354_5556_5758,
            ops: vec![Op::Delete { file: 9 }],
        };
        let (buf, crc) = record.encode();
        assert_eq!(RECORD_FIXED_LEN, 64);
        let p = 64 + 5;
        assert_eq!(buf.len(), 512);
        assert_eq!(u32_at(&buf, 0), 0x5243_534f);
        assert_eq!(&buf[0..4], b"OSCR");
        assert_eq!(u16_at(&buf, 4), 1, "kind");
        assert_eq!(u16_at(&buf, 6), 0, "reserved");
        assert_eq!(u32_at(&buf, 8), 512, "total length");
        assert_eq!(u32_at(&buf, 12), p as u32, "payload length");
        assert_eq!(u64_at(&buf, 16), 0x0102_0304_0506_0708, "seq");
        assert_eq!(u64_at(&buf, 24), 0x1112_1314_1516_1718, "session");
        assert_eq!(u64_at(&buf, 32), 0x2122_2324_2526_2728, "epoch");
        assert_eq!(u32_at(&buf, 40), 0x3132_3334, "prev CRC");
        assert_eq!(u64_at(&buf, 44), 0x4142_4344_4546_4748, "next slot");
        assert_eq!(u64_at(&buf, 52), 0x5152_5354_5556_5758, "window end");
        assert_eq!(u32_at(&buf, 60), 1, "op count");
        assert_eq!(buf[64], 2, "the first operation starts at 64");
        assert_eq!(u32_at(&buf, p), crc32c::crc32c(&buf[..p]));
        assert_eq!(u32_at(&buf, p), crc, "the CRC at p is the chain value");
        assert!(buf[p + 4..].iter().all(|&b| b == 0), "padding");

        // A jump is kind 2; a payload of 64 + 444 bytes plus the CRC needs a second 512 bytes.
        let jump = Record {
            kind: RecordKind::Jump,
            ops: Vec::new(),
            ..record.clone()
        };
        assert_eq!(u16_at(&jump.encode().0, 4), 2);
        let long = Record {
            ops: vec![Op::Patch {
                file: 1,
                page: 0,
                offset: 0,
                bytes: vec![7; 444 - 19 + 1],
            }],
            ..record
        };
        let buf = long.encode().0;
        assert_eq!(
            (buf.len(), u32_at(&buf, 8), u32_at(&buf, 12)),
            (1024, 1024, 64 + 445)
        );
    }

    #[test]
    fn operations_sit_at_the_documented_offsets() {
        let ops = vec![
            Op::Create {
                file: 0x0102_0304,
                name: "abc".into(),
            },
            Op::Delete { file: 0x1112_1314 },
            Op::Size {
                file: 0x2122_2324,
                bytes: 0x2526_2728_292a_2b2c,
            },
            Op::Page {
                file: 0x3132_3334,
                page: 0x3536_3738_393a_3b3c,
                slot: 0x4142_4344_4546_4748,
                crc: 0x4950_5152,
            },
            Op::Patch {
                file: 0x6162_6364,
                page: 0x6566_6768_696a_6b6c,
                offset: 0x7172_7374,
                bytes: vec![0xee, 0xff],
            },
        ];
        let record = Record {
            kind: RecordKind::Commit,
            seq: 1,
            session: 1,
            epoch: 1,
            prev_crc: 0,
            next_slot: 1,
            window_end: 2,
            ops,
        };
        let (buf, _) = record.encode();
        let mut at = 64;
        assert_eq!(
            (buf[at], u32_at(&buf, at + 1), u16_at(&buf, at + 5)),
            (1, 0x0102_0304, 3)
        );
        assert_eq!(&buf[at + 7..at + 10], b"abc");
        at += 7 + 3;
        assert_eq!((buf[at], u32_at(&buf, at + 1)), (2, 0x1112_1314));
        at += 5;
        assert_eq!((buf[at], u32_at(&buf, at + 1)), (3, 0x2122_2324));
        assert_eq!(u64_at(&buf, at + 5), 0x2526_2728_292a_2b2c);
        at += 13;
        assert_eq!((buf[at], u32_at(&buf, at + 1)), (4, 0x3132_3334));
        assert_eq!(u64_at(&buf, at + 5), 0x3536_3738_393a_3b3c);
        assert_eq!(u64_at(&buf, at + 13), 0x4142_4344_4546_4748);
        assert_eq!(u32_at(&buf, at + 21), 0x4950_5152);
        at += 25;
        assert_eq!((buf[at], u32_at(&buf, at + 1)), (5, 0x6162_6364));
        assert_eq!(u64_at(&buf, at + 5), 0x6566_6768_696a_6b6c);
        assert_eq!((u32_at(&buf, at + 13), u16_at(&buf, at + 17)), (0x7172_7374, 2));
        assert_eq!(&buf[at + 19..at + 21], &[0xee, 0xff]);
        at += 19 + 2;
        assert_eq!(
            u32_at(&buf, 12) as usize,
            at,
            "the CRC follows the last operation"
        );
    }

    #[test]
    fn checkpoint_fields_sit_at_the_documented_offsets() {
        let mut enc = CheckpointEncoder::new(0x0102_0304_0506_0708, 0x1112_1314, 1);
        enc.file(0x2122_2324, "ab", 0x8000, 1);
        enc.page(
            3,
            0x3132_3334_3536_3738,
            0x4142_4344,
            &[(0x10, vec![0xaa, 0xbb, 0xcc])],
        );
        let (buf, crc) = enc.finish();
        assert_eq!(&buf[0..4], b"OSCK");
        assert_eq!(u32_at(&buf, 4), FORMAT_VERSION);
        assert_eq!(u64_at(&buf, 8), 0x0102_0304_0506_0708, "seq");
        assert_eq!(u32_at(&buf, 16), 0x1112_1314, "next file id");
        assert_eq!(u32_at(&buf, 20), 1, "file count");
        // File entry at 24, name length n = 2.
        assert_eq!((u32_at(&buf, 24), u16_at(&buf, 28)), (0x2122_2324, 2));
        assert_eq!(&buf[30..32], b"ab");
        assert_eq!(
            (u64_at(&buf, 32), u64_at(&buf, 40)),
            (0x8000, 1),
            "size, page count"
        );
        // Page entry at 24 + 22 + n = 48.
        assert_eq!((u64_at(&buf, 48), u64_at(&buf, 56)), (3, 0x3132_3334_3536_3738));
        assert_eq!(
            (u32_at(&buf, 64), u16_at(&buf, 68)),
            (0x4142_4344, 1),
            "CRC, overlay count"
        );
        // Overlay range at 48 + 22 = 70.
        assert_eq!((u32_at(&buf, 70), u16_at(&buf, 74)), (0x10, 3));
        assert_eq!(&buf[76..79], &[0xaa, 0xbb, 0xcc]);
        assert_eq!(buf.len(), 79, "nothing follows the last entry");
        assert_eq!(crc, crc32c::crc32c(&buf), "the header's CRC covers every byte");
        let decoded = Checkpoint::decode(&buf).unwrap();
        assert_eq!(
            decoded.files[0].pages[0].overlay,
            vec![(0x10, vec![0xaa, 0xbb, 0xcc])]
        );
    }
}
