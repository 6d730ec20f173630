//! The on-disk format, version 1. All integers are little-endian.
//!
//! ```text
//! offset 0      header copy 0 (4 KiB block, HEADER_LEN = 1024 bytes used)
//! offset 4096   header copy 1
//! offset 8192   slot 0, slot 1, ... each `page_size` bytes
//! ```
//! Every slot holds a data page, a piece of a mapping checkpoint, a commit record, or is
//! free or reserved for the records to come; the header says where the checkpoint is and
//! where the chain of records after it starts.
//!
//! * **Header** (two copies; a checkpoint writes the copy its generation selects and
//!   flushes, then duplicates it into the other copy and flushes again; the valid copy with
//!   the higher generation wins): magic, format version, page size, store id, generation,
//!   the checkpoint (length, CRC-32C, the commit sequence number it includes, and the runs
//!   of slots it occupies, at most `MAX_CHECKPOINT_EXTENTS`), where the chain starts (first
//!   slot, end of the reserved window) and its seed, then a CRC-32C of the header.
//! * **Checkpoint**: the whole mapping (files, sizes, page -> slot + CRC-32C + small
//!   overlays) as of one sequence number. It holds mapping metadata only: no data page is
//!   ever copied.
//! * **Commit record** (512-byte aligned, at the start of a slot): magic, kind, length,
//!   sequence number, session nonce, epoch (the header generation it follows), the previous
//!   record's CRC, where the next record goes (`next_slot`, and `window_end`, the end of the
//!   run reserved for it), the operations, then a CRC-32C of the record. A commit writes its
//!   record and its pages as one contiguous run `[record | pages]` with one `pwrite`, so a
//!   commit is one write request plus one flush. Records form a chain through the slots:
//!   the header names the first, each names the next. The CRC chain, session nonce and epoch
//!   reject stale records of an earlier session or checkpoint. A `Page` operation carries
//!   the CRC-32C of the page it maps, so recovery rejects a record whose pages did not all
//!   reach the disk.

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
}
