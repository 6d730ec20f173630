//! The mapping checkpoint, version 1.
//!
//! # Mapping checkpoint
//!
//! `length` bytes, no CRC of its own (the header holds it, covering all `length` bytes),
//! decoded to the last byte: trailing bytes are corruption.
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 4 | magic | u32 `0x4b43_534f`, the bytes `"OSCK"` |
//! | 4 | 4 | version | u32, 1, exactly |
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

use crate::error::Result;
use onesync_codec::{DecodeError, OnDisk, Reader, Writer};

const CHECKPOINT_MAGIC: u32 = 0x4b43_534f; // "OSCK"
/// The format version of the whole-mapping checkpoint, the only one it is written in.
pub const CHECKPOINT_VERSION: u32 = 1;
/// The fewest bytes a page entry takes (no overlay ranges).
const PAGE_ENTRY_MIN_LEN: usize = 22;

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

/// (Tests only: a checkpoint is written as a manifest now, and the version-1 form only
/// read.) Streams a checkpoint out without building it in memory first (the same bytes as
/// [`Checkpoint`]'s [`OnDisk::encode`]).
#[cfg(test)]
pub struct CheckpointEncoder {
    w: Writer,
}

#[cfg(test)]
impl CheckpointEncoder {
    pub fn new(seq: u64, next_file_id: u32, file_count: u32) -> CheckpointEncoder {
        let mut w = Writer::new();
        encode_start(&mut w, seq, next_file_id, file_count);
        CheckpointEncoder { w }
    }

    pub fn file(&mut self, id: u32, name: &str, size: u64, page_count: u64) {
        encode_file(&mut self.w, id, name, size, page_count);
    }

    pub fn page<B: AsRef<[u8]>>(&mut self, page: u64, slot: u64, crc: u32, overlay: &[(u32, B)]) {
        encode_page(&mut self.w, page, slot, crc, overlay);
    }

    /// The encoded bytes and their CRC-32C.
    pub fn finish(self) -> (Vec<u8>, u32) {
        let buf = self.w.into_bytes();
        let crc = crc32c::crc32c(&buf);
        (buf, crc)
    }
}

fn encode_start(w: &mut Writer, seq: u64, next_file_id: u32, file_count: u32) {
    w.u32(CHECKPOINT_MAGIC)
        .u32(CHECKPOINT_VERSION)
        .u64(seq)
        .u32(next_file_id)
        .u32(file_count);
}

fn encode_file(w: &mut Writer, id: u32, name: &str, size: u64, page_count: u64) {
    w.u32(id)
        .u16(name.len() as u16)
        .bytes(name.as_bytes())
        .u64(size)
        .u64(page_count);
}

fn encode_page<B: AsRef<[u8]>>(w: &mut Writer, page: u64, slot: u64, crc: u32, overlay: &[(u32, B)]) {
    w.u64(page).u64(slot).u32(crc).u16(overlay.len() as u16);
    for (offset, bytes) in overlay {
        let bytes = bytes.as_ref();
        w.u32(*offset).u16(bytes.len() as u16).bytes(bytes);
    }
}

impl Checkpoint {
    /// Decode a whole checkpoint (trailing bytes are corruption).
    pub fn decode(buf: &[u8]) -> Result<Checkpoint> {
        Ok(Checkpoint::from_bytes(&(), buf)?)
    }
}

impl OnDisk for Checkpoint {
    const NAME: &'static str = "mapping checkpoint";
    type Context = ();

    fn encode(&self, _: &(), w: &mut Writer) {
        encode_start(w, self.seq, self.next_file_id, self.files.len() as u32);
        for f in &self.files {
            encode_file(w, f.id, &f.name, f.size, f.pages.len() as u64);
            for p in &f.pages {
                encode_page(w, p.page, p.slot, p.crc, &p.overlay);
            }
        }
    }

    fn decode(_: &(), r: &mut Reader<'_>) -> Result<Checkpoint, DecodeError> {
        r.magic(&CHECKPOINT_MAGIC.to_le_bytes())?;
        let version = r.u32()?;
        if version != CHECKPOINT_VERSION {
            return Err(r.invalid(format!("checkpoint version {version}")));
        }
        let seq = r.u64()?;
        let next_file_id = r.u32()?;
        let file_count = r.u32()?;
        let mut files = Vec::new();
        for _ in 0..file_count {
            let id = r.u32()?;
            let name_len = r.u16()? as usize;
            let name = String::from_utf8(r.take(name_len)?.to_vec())
                .map_err(|_| r.invalid("file name is not UTF-8"))?;
            let size = r.u64()?;
            let page_count = r.u64()?;
            // Refuse counts the bytes cannot hold before reserving memory for them.
            if page_count > (r.remaining() / PAGE_ENTRY_MIN_LEN) as u64 {
                return Err(r.invalid(format!("{page_count} pages do not fit the checkpoint")));
            }
            let mut pages = Vec::with_capacity(page_count as usize);
            for _ in 0..page_count {
                let page = r.u64()?;
                let slot = r.u64()?;
                let crc = r.u32()?;
                let ranges = r.u16()?;
                let mut overlay = Vec::new();
                for _ in 0..ranges {
                    let offset = r.u32()?;
                    let len = r.u16()? as usize;
                    overlay.push((offset, r.take(len)?.to_vec()));
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
        Ok(Checkpoint {
            seq,
            next_file_id,
            files,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{seeds, u16_at, u32_at, u64_at, FUZZ_INPUTS};
    use super::*;
    use onesync_codec::fuzz::check_decoder;

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
        assert_eq!(u32_at(&buf, 4), CHECKPOINT_VERSION);
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

    /// The checkpoint has no checksum of its own (the header holds it), so every mutation
    /// reaches the field checks without resealing.
    #[test]
    fn the_checkpoint_decoder_survives_fuzzing_from_a_real_checkpoint() {
        let seeds = seeds().checkpoints;
        let report = check_decoder::<Checkpoint>(&(), &seeds, FUZZ_INPUTS);
        assert!(report.decoded > seeds.len() && report.rejected > 0, "{report:?}");
    }

    #[test]
    fn the_streaming_encoder_writes_what_on_disk_encode_writes() {
        let seed = seeds().checkpoints.remove(0);
        let checkpoint = Checkpoint::decode(&seed).unwrap();
        assert_eq!(checkpoint.to_bytes(&()), seed);
    }
}
