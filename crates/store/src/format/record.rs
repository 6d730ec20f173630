//! The commit record, version 1, and its operations.
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

use super::constants::RECORD_ALIGN;
use onesync_codec::{DecodeError, OnDisk, Reader, Writer};
use std::sync::Arc;

const RECORD_MAGIC: u32 = 0x5243_534f; // "OSCR"
/// magic, kind, reserved, total and payload lengths, seq, session, epoch, prev_crc, next_slot,
/// window_end, op count.
pub(super) const RECORD_FIXED_LEN: usize = 4 + 2 + 2 + 4 + 4 + 8 + 8 + 8 + 4 + 8 + 8 + 4;
/// Offsets of the total and payload lengths, patched once the operations are written.
const TOTAL_LEN_AT: usize = 8;
const PAYLOAD_LEN_AT: usize = 12;

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
    /// Overlay bytes on a page without writing it (small, header-only changes). Shared
    /// bytes: laid over a page's overlay, a patch that replaces a range whole becomes that
    /// range without a copy.
    Patch {
        file: u32,
        page: u64,
        offset: u32,
        bytes: Arc<[u8]>,
    },
}

const OP_CREATE: u8 = 1;
const OP_DELETE: u8 = 2;
const OP_SIZE: u8 = 3;
const OP_PAGE: u8 = 4;
const OP_PATCH: u8 = 5;

impl Op {
    /// Encoded length in bytes.
    fn encoded_len(&self) -> usize {
        match self {
            Op::Create { name, .. } => 1 + 4 + 2 + name.len(),
            Op::Delete { .. } => 1 + 4,
            Op::Size { .. } => 1 + 4 + 8,
            Op::Page { .. } => 1 + 4 + 8 + 8 + 4,
            Op::Patch { bytes, .. } => 1 + 4 + 8 + 4 + 2 + bytes.len(),
        }
    }
}

impl OnDisk for Op {
    const NAME: &'static str = "commit record operation";
    type Context = ();

    fn encode(&self, _: &(), w: &mut Writer) {
        match self {
            Op::Create { file, name } => {
                w.u8(OP_CREATE)
                    .u32(*file)
                    .u16(name.len() as u16)
                    .bytes(name.as_bytes());
            }
            Op::Delete { file } => {
                w.u8(OP_DELETE).u32(*file);
            }
            Op::Size { file, bytes } => {
                w.u8(OP_SIZE).u32(*file).u64(*bytes);
            }
            Op::Page {
                file,
                page,
                slot,
                crc,
            } => {
                w.u8(OP_PAGE).u32(*file).u64(*page).u64(*slot).u32(*crc);
            }
            Op::Patch {
                file,
                page,
                offset,
                bytes,
            } => {
                w.u8(OP_PATCH)
                    .u32(*file)
                    .u64(*page)
                    .u32(*offset)
                    .u16(bytes.len() as u16)
                    .bytes(bytes);
            }
        }
    }

    fn decode(_: &(), r: &mut Reader<'_>) -> Result<Op, DecodeError> {
        Ok(match r.u8()? {
            OP_CREATE => {
                let file = r.u32()?;
                let len = r.u16()? as usize;
                let name = String::from_utf8(r.take(len)?.to_vec())
                    .map_err(|_| r.invalid("file name is not UTF-8"))?;
                Op::Create { file, name }
            }
            OP_DELETE => Op::Delete { file: r.u32()? },
            OP_SIZE => Op::Size {
                file: r.u32()?,
                bytes: r.u64()?,
            },
            OP_PAGE => Op::Page {
                file: r.u32()?,
                page: r.u64()?,
                slot: r.u64()?,
                crc: r.u32()?,
            },
            OP_PATCH => {
                let file = r.u32()?;
                let page = r.u64()?;
                let offset = r.u32()?;
                let len = r.u16()? as usize;
                Op::Patch {
                    file,
                    page,
                    offset,
                    bytes: Arc::from(r.take(len)?),
                }
            }
            other => return Err(r.invalid(format!("unknown operation tag {other}"))),
        })
    }
}

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
        let ops: usize = ops.iter().map(Op::encoded_len).sum();
        (RECORD_FIXED_LEN as u64 + ops as u64 + 4).div_ceil(RECORD_ALIGN) * RECORD_ALIGN
    }

    /// Encode, padded to a multiple of `RECORD_ALIGN`; also returns the record's CRC.
    pub fn encode(&self) -> (Vec<u8>, u32) {
        let buf = self.to_bytes(&());
        let payload_len = u32::from_le_bytes(
            buf[PAYLOAD_LEN_AT..PAYLOAD_LEN_AT + 4]
                .try_into()
                .expect("4 bytes"),
        );
        let at = payload_len as usize;
        let crc = u32::from_le_bytes(buf[at..at + 4].try_into().expect("4 bytes"));
        (buf, crc)
    }

    /// The total length a record claims, from its first bytes, if they look like a record.
    pub fn peek_len(first: &[u8]) -> Option<u64> {
        if first.len() < RECORD_FIXED_LEN {
            return None;
        }
        let mut r = Reader::new(<Record as OnDisk>::NAME, first);
        let magic = r.u32().ok()?;
        r.skip(4).ok()?;
        let total = r.u32().ok()? as u64;
        if magic != RECORD_MAGIC || total == 0 || !total.is_multiple_of(RECORD_ALIGN) {
            return None;
        }
        Some(total)
    }

    /// Decode a whole record and check its CRC; `None` for anything that is not an intact
    /// record (a torn or never-written position is not an error: the chain ends there).
    pub fn decode(buf: &[u8]) -> Option<(Record, u32)> {
        let mut r = Reader::new(<Record as OnDisk>::NAME, buf);
        let record = <Record as OnDisk>::decode(&(), &mut r).ok()?;
        let payload_len =
            u32::from_le_bytes(buf[PAYLOAD_LEN_AT..PAYLOAD_LEN_AT + 4].try_into().ok()?) as usize;
        let crc = u32::from_le_bytes(buf[payload_len..payload_len + 4].try_into().ok()?);
        Some((record, crc))
    }

    /// Recompute the CRC of a record in `buf` where its payload length allows (for fuzzing
    /// past the checksum).
    #[cfg(test)]
    pub fn reseal(buf: &mut [u8]) {
        let Some(len) = buf.get(PAYLOAD_LEN_AT..PAYLOAD_LEN_AT + 4) else {
            return;
        };
        let p = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
        if p.checked_add(4).is_some_and(|end| end <= buf.len()) {
            let crc = crc32c::crc32c(&buf[..p]);
            buf[p..p + 4].copy_from_slice(&crc.to_le_bytes());
        }
    }
}

impl OnDisk for Record {
    const NAME: &'static str = "commit record";
    type Context = ();

    fn encode(&self, _: &(), w: &mut Writer) {
        let start = w.len();
        w.u32(RECORD_MAGIC)
            .u16(self.kind as u16)
            .u16(0) // reserved
            .u32(0) // total length, patched below
            .u32(0) // payload length, patched below
            .u64(self.seq)
            .u64(self.session)
            .u64(self.epoch)
            .u32(self.prev_crc)
            .u64(self.next_slot)
            .u64(self.window_end)
            .u32(self.ops.len() as u32);
        for op in &self.ops {
            op.encode(&(), w);
        }
        let payload_len = w.len() - start;
        let total = (payload_len as u64 + 4).div_ceil(RECORD_ALIGN) * RECORD_ALIGN;
        debug_assert_eq!(total, self.encoded_len());
        w.patch_u32(start + TOTAL_LEN_AT, total as u32);
        w.patch_u32(start + PAYLOAD_LEN_AT, payload_len as u32);
        let crc = crc32c::crc32c(&w.as_bytes()[start..]);
        w.u32(crc);
        w.pad_to(start + total as usize);
    }

    fn decode(_: &(), r: &mut Reader<'_>) -> Result<Record, DecodeError> {
        let start = r.position();
        r.magic(&RECORD_MAGIC.to_le_bytes())?;
        let kind = r.u16()?;
        let _reserved = r.u16()?;
        let total = r.u32()? as usize;
        let payload_len = r.u32()? as usize;
        if total == 0 || !total.is_multiple_of(RECORD_ALIGN as usize) {
            return Err(r.invalid(format!(
                "total length {total} is not a multiple of {RECORD_ALIGN}"
            )));
        }
        if payload_len < RECORD_FIXED_LEN || payload_len + 4 > total {
            return Err(r.invalid(format!("payload length {payload_len} does not fit {total} bytes")));
        }
        // The rest of the record; the whole of it from its first byte.
        r.skip(total - (r.position() - start))?;
        let whole = &r.all()[start..start + total];
        let stored = u32::from_le_bytes(whole[payload_len..payload_len + 4].try_into().expect("4 bytes"));
        let mut at_crc = Reader::new(Self::NAME, whole);
        at_crc.skip(payload_len)?;
        at_crc.check_sum(stored, crc32c::crc32c(&whole[..payload_len]))?;
        let kind = match kind {
            1 => RecordKind::Commit,
            2 => RecordKind::Jump,
            other => return Err(r.invalid(format!("unknown record kind {other}"))),
        };
        let mut body = Reader::new(Self::NAME, &whole[..payload_len]);
        body.skip(16)?;
        let seq = body.u64()?;
        let session = body.u64()?;
        let epoch = body.u64()?;
        let prev_crc = body.u32()?;
        let next_slot = body.u64()?;
        let window_end = body.u64()?;
        let count = body.u32()? as usize;
        let mut ops = Vec::with_capacity(count.min(1 << 16));
        for _ in 0..count {
            ops.push(Op::decode(&(), &mut body)?);
        }
        body.expect_end()?;
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
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{seeds, u16_at, u32_at, u64_at, FUZZ_INPUTS};
    use super::*;
    use onesync_codec::fuzz::check_decoder_resealed;

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
                    bytes: Arc::from([1, 2, 3, 4]),
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
                bytes: vec![7; 444 - 19 + 1].into(),
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
                bytes: Arc::from([0xee, 0xff]),
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
    fn the_record_decoder_survives_fuzzing_from_real_records() {
        let seeds = seeds().records;
        let report = check_decoder_resealed::<Record>(&(), &seeds, FUZZ_INPUTS, |b| Record::reseal(b));
        assert!(report.decoded > seeds.len() && report.rejected > 0, "{report:?}");
    }
}
