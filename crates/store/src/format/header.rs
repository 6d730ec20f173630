//! The header, versions 1 and 2 (the same layout): two copies at the start of the file.
//!
//! # Header copy
//!
//! `HEADER_LEN` (1024) bytes at the start of its `HEADER_BLOCK`; the other 3072 bytes of the
//! block are zeroed at creation and ignored after that.
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 16 | magic | `MAGIC`, `b"onesync store\0\r\n"` |
//! | 16 | 4 | version | u32, 1 or 2 (`FORMAT_VERSION`); 0 is invalid. 1: the checkpoint is the whole mapping (`checkpoint.rs`); 2: it is a manifest (`manifest.rs`) |
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

use super::constants::{
    valid_page_size, FORMAT_VERSION, HEADER_BLOCK, HEADER_LEN, MAGIC, MAX_CHECKPOINT_EXTENTS,
};
use crate::error::{Error, Result};
use onesync_codec::{DecodeError, OnDisk, Reader, Writer};

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
    /// 1: the checkpoint is a whole mapping; 2: a manifest.
    pub version: u32,
    pub page_size: u32,
    pub store_id: u64,
    pub generation: u64,
    pub checkpoint: CheckpointRef,
    pub log: LogRef,
}

/// Offset of the CRC in a header copy (it covers every byte before it).
const CRC_AT: usize = HEADER_LEN - 4;

impl Header {
    /// Byte offset of the copy a header of this generation is written to first. Copies
    /// alternate, so the other one still holds the previous generation, durably.
    pub fn copy_offset(generation: u64) -> u64 {
        (generation % 2) * HEADER_BLOCK
    }

    /// One header copy, `HEADER_LEN` bytes.
    pub fn encode(&self) -> Vec<u8> {
        self.to_bytes(&())
    }

    /// Decode one header copy (the first `HEADER_LEN` bytes of `buf`). `NotAStore` if the
    /// magic is absent, `UnsupportedVersion` for a newer format, `Corrupt` if the checksum
    /// or a field is wrong.
    pub fn decode(buf: &[u8]) -> Result<Header> {
        if buf.len() < HEADER_LEN || buf[..16] != MAGIC {
            return Err(Error::NotAStore(
                "the file does not begin with the onesync store magic".into(),
            ));
        }
        // Before the CRC: a newer format may place it elsewhere.
        let version = u32::from_le_bytes(buf[16..20].try_into().expect("4 bytes"));
        if version > FORMAT_VERSION {
            return Err(Error::UnsupportedVersion {
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let mut r = Reader::new(<Header as OnDisk>::NAME, buf);
        Ok(<Header as OnDisk>::decode(&(), &mut r)?)
    }

    /// Recompute the CRC of a header copy in `buf` (for fuzzing past the checksum).
    #[cfg(test)]
    pub fn reseal(buf: &mut [u8]) {
        if buf.len() >= HEADER_LEN {
            let crc = crc32c::crc32c(&buf[..CRC_AT]);
            buf[CRC_AT..HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
        }
    }
}

impl OnDisk for Header {
    const NAME: &'static str = "store header";
    type Context = ();

    fn encode(&self, _: &(), w: &mut Writer) {
        let start = w.len();
        w.bytes(&MAGIC)
            .u32(self.version)
            .u32(HEADER_LEN as u32)
            .u32(self.page_size)
            .u32(0) // flags, none defined
            .u64(self.store_id)
            .u64(self.generation)
            .u64(self.checkpoint.first_slot)
            .u64(self.checkpoint.len)
            .u64(self.checkpoint.seq)
            .u32(self.checkpoint.crc)
            .u64(self.log.first_slot)
            .u64(self.log.window_end)
            .u32(self.log.seed)
            .u32(self.checkpoint.extent_count);
        for &(first, n) in self.checkpoint.extents() {
            w.u64(first).u64(n);
        }
        w.pad_to(start + CRC_AT);
        let crc = crc32c::crc32c(&w.as_bytes()[start..]);
        w.u32(crc);
    }

    fn decode(_: &(), r: &mut Reader<'_>) -> Result<Header, DecodeError> {
        let copy = r.take(HEADER_LEN)?;
        let mut r = Reader::new(Self::NAME, copy);
        r.magic(&MAGIC)?;
        let version = r.u32()?;
        if version == 0 || version > FORMAT_VERSION {
            return Err(r.invalid(format!("unsupported version {version}")));
        }
        let computed = crc32c::crc32c(&copy[..CRC_AT]);
        let stored = u32::from_le_bytes(copy[CRC_AT..].try_into().expect("4 bytes"));
        let mut at_crc = Reader::new(Self::NAME, copy);
        at_crc.skip(CRC_AT)?;
        at_crc.check_sum(stored, computed)?;
        if r.u32()? != HEADER_LEN as u32 {
            return Err(r.invalid("header length field is invalid"));
        }
        let page_size = r.u32()?;
        let _flags = r.u32()?;
        let store_id = r.u64()?;
        let generation = r.u64()?;
        let (first_slot, len, seq, crc) = (r.u64()?, r.u64()?, r.u64()?, r.u32()?);
        let log = LogRef {
            first_slot: r.u64()?,
            window_end: r.u64()?,
            seed: r.u32()?,
        };
        let extent_count = r.u32()?;
        if extent_count == 0 || extent_count as usize > MAX_CHECKPOINT_EXTENTS {
            return Err(r.invalid(format!("header lists {extent_count} checkpoint extents")));
        }
        let mut extents = Vec::with_capacity(extent_count as usize);
        for _ in 0..extent_count {
            extents.push((r.u64()?, r.u64()?));
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
            return Err(r.invalid("header's checkpoint extents are inconsistent"));
        }
        if !valid_page_size(page_size) {
            return Err(r.invalid(format!("header names an impossible page size {page_size}")));
        }
        if log.first_slot >= log.window_end {
            return Err(r.invalid("header names an empty log window"));
        }
        Ok(Header {
            version,
            page_size,
            store_id,
            generation,
            checkpoint: CheckpointRef::new(&extents, len, crc, seq),
            log,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{seeds, u32_at, u64_at, FUZZ_INPUTS};
    use super::*;
    use onesync_codec::fuzz::check_decoder_resealed;

    #[test]
    fn header_round_trips_and_classifies_damage() {
        let h = Header {
            version: FORMAT_VERSION,
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
        newer[16..20].copy_from_slice(&3u32.to_le_bytes());
        assert!(matches!(
            Header::decode(&newer),
            Err(Error::UnsupportedVersion { found: 3, .. })
        ));
        // A version-1 header (a whole-mapping checkpoint) still decodes, as version 1.
        let v1 = Header { version: 1, ..h };
        assert_eq!(Header::decode(&v1.encode()).unwrap().version, 1);
        assert!(matches!(Header::decode(&[0u8; 128]), Err(Error::NotAStore(_))));
    }

    #[test]
    fn header_fields_sit_at_the_documented_offsets() {
        let extents = [(0x0a0b_0c0d_0e0f_1011, 3), (0x2122_2324_2526_2728, 0x31)];
        let h = Header {
            version: FORMAT_VERSION,
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
            version: FORMAT_VERSION,
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
    fn the_header_decoder_survives_fuzzing_from_real_headers() {
        let seeds = seeds().headers;
        let report = check_decoder_resealed::<Header>(&(), &seeds, FUZZ_INPUTS, |b| Header::reseal(b));
        assert!(report.decoded > seeds.len() && report.rejected > 0, "{report:?}");
    }
}
