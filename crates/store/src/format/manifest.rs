//! The manifest, format version 2: what a checkpoint names instead of the whole mapping.
//!
//! A version-2 header names the manifest exactly as a version-1 header names the mapping
//! checkpoint (extents, length, CRC, seq). The manifest holds the files, the runs of the
//! page mapping (`onesync_mapping`, read on demand) and the free slots, so its size follows
//! the files, runs and free extents, not the pages.
//!
//! # Manifest
//!
//! `length` bytes, no CRC of its own (the header holds it, covering all `length` bytes),
//! decoded to the last byte: trailing bytes are corruption.
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 4 | magic | u32 `0x464d_534f`, the bytes `"OSMF"` |
//! | 4 | 4 | version | u32, 2, exactly |
//! | 8 | 8 | seq | u64, the last commit included (equals the header's checkpoint seq) |
//! | 16 | 4 | next file id | u32, above every file id below |
//! | 20 | 8 | slot total | u64, the file's slots when the manifest was written |
//! | 28 | 4 | file count | u32 |
//! | 32 | 4 | run count | u32 |
//! | 36 | 8 | free extent count | u64 |
//! | 44 | var | files | per file, ascending id: a file entry |
//! | … | 60 × runs | runs | per run, newest first: `onesync_mapping::RunRef` (60 bytes, its table in `onesync_mapping::format`) |
//! | … | 16 × free | free extents | per extent, ascending: a free extent |
//!
//! File entry (`n` = name length), at least 22 bytes:
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 4 | id | u32, file id, strictly ascending, below next file id |
//! | 4 | 2 | name length | u16, `n`, at most `MAX_NAME_LEN` |
//! | 6 | n | name | UTF-8, no terminator |
//! | 6 + n | 8 | size | u64, logical size in bytes |
//! | 14 + n | 8 | mapped | u64, the file's pages the runs map (not zeros without an overlay) |
//!
//! Free extent, one run of free slots:
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 8 | first slot | u64 |
//! | 8 | 8 | slot count | u64, > 0; `first + count ≤ slot total` |
//!
//! Extents are sorted, disjoint and not adjacent (one extent per maximal run of free
//! slots). The free slots are every slot below `slot total` that is none of: a page the
//! mapping names, a block of a run, a slot of the manifest itself, the log window
//! `[log first slot, log window end)` the header names.

use super::constants::MAX_NAME_LEN;
use crate::error::Result;
use onesync_codec::{DecodeError, OnDisk, Reader, Writer};
use onesync_mapping::RunRef;

const MANIFEST_MAGIC: u32 = 0x464d_534f; // "OSMF"
/// The format version that introduced the manifest; the only one it is written in.
pub const MANIFEST_VERSION: u32 = 2;
/// The fewest bytes a file entry takes (an empty name).
const FILE_ENTRY_MIN_LEN: usize = 22;
/// Bytes of an encoded `RunRef`.
const RUN_REF_LEN: usize = 60;
const FREE_EXTENT_LEN: usize = 16;

/// One file as the manifest names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestFile {
    pub id: u32,
    pub name: String,
    pub size: u64,
    /// Pages of the file the runs map.
    pub mapped: u64,
}

/// The decoded manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    pub seq: u64,
    pub next_file_id: u32,
    pub slot_total: u64,
    pub files: Vec<ManifestFile>,
    /// The mapping's runs, newest first.
    pub runs: Vec<RunRef>,
    /// (first slot, slot count), ascending, disjoint, not adjacent, below `slot_total`.
    pub free: Vec<(u64, u64)>,
}

impl Manifest {
    /// Decode a whole manifest (trailing bytes are corruption).
    pub fn decode(buf: &[u8]) -> Result<Manifest> {
        Ok(Manifest::from_bytes(&(), buf)?)
    }

    /// The encoded bytes and their CRC-32C (what the header names).
    pub fn encode_with_crc(&self) -> (Vec<u8>, u32) {
        let buf = self.to_bytes(&());
        let crc = crc32c::crc32c(&buf);
        (buf, crc)
    }

    /// Slots the free extents hold.
    pub fn free_slots(&self) -> u64 {
        self.free.iter().map(|&(_, n)| n).sum()
    }
}

/// Refuses a count the remaining bytes cannot hold, before memory is reserved for it.
fn fits(r: &Reader<'_>, count: u64, each: usize, what: &str) -> Result<usize, DecodeError> {
    if count > (r.remaining() / each) as u64 {
        return Err(r.invalid(format!("{count} {what} do not fit the manifest")));
    }
    Ok(count as usize)
}

impl OnDisk for Manifest {
    const NAME: &'static str = "manifest";
    type Context = ();

    fn encode(&self, _: &(), w: &mut Writer) {
        w.u32(MANIFEST_MAGIC)
            .u32(MANIFEST_VERSION)
            .u64(self.seq)
            .u32(self.next_file_id)
            .u64(self.slot_total)
            .u32(self.files.len() as u32)
            .u32(self.runs.len() as u32)
            .u64(self.free.len() as u64);
        for f in &self.files {
            w.u32(f.id)
                .u16(f.name.len() as u16)
                .bytes(f.name.as_bytes())
                .u64(f.size)
                .u64(f.mapped);
        }
        for run in &self.runs {
            run.encode(&(), w);
        }
        for &(first, n) in &self.free {
            w.u64(first).u64(n);
        }
    }

    fn decode(_: &(), r: &mut Reader<'_>) -> Result<Manifest, DecodeError> {
        r.magic(&MANIFEST_MAGIC.to_le_bytes())?;
        let version = r.u32()?;
        if version != MANIFEST_VERSION {
            return Err(r.invalid(format!("manifest version {version}")));
        }
        let seq = r.u64()?;
        let next_file_id = r.u32()?;
        let slot_total = r.u64()?;
        let file_count = r.u32()?;
        let run_count = r.u32()?;
        let free_count = r.u64()?;
        let file_count = fits(r, file_count.into(), FILE_ENTRY_MIN_LEN, "files")?;
        let mut files: Vec<ManifestFile> = Vec::with_capacity(file_count);
        for _ in 0..file_count {
            let id = r.u32()?;
            if id >= next_file_id || files.last().is_some_and(|last| last.id >= id) {
                return Err(r.invalid(format!("file id {id} out of order or not below the next id")));
            }
            let name_len = r.u16()? as usize;
            if name_len > MAX_NAME_LEN {
                return Err(r.invalid(format!("a file name of {name_len} bytes")));
            }
            let name = String::from_utf8(r.take(name_len)?.to_vec())
                .map_err(|_| r.invalid("file name is not UTF-8"))?;
            let size = r.u64()?;
            let mapped = r.u64()?;
            files.push(ManifestFile {
                id,
                name,
                size,
                mapped,
            });
        }
        let run_count = fits(r, run_count.into(), RUN_REF_LEN, "runs")?;
        let mut runs = Vec::with_capacity(run_count);
        for _ in 0..run_count {
            runs.push(RunRef::decode(&(), r)?);
        }
        let free_count = fits(r, free_count, FREE_EXTENT_LEN, "free extents")?;
        let mut free: Vec<(u64, u64)> = Vec::with_capacity(free_count);
        for _ in 0..free_count {
            let first = r.u64()?;
            let n = r.u64()?;
            let end = first.checked_add(n).filter(|&end| n > 0 && end <= slot_total);
            let Some(_) = end else {
                return Err(r.invalid(format!("free extent ({first}, {n}) outside {slot_total} slots")));
            };
            // Strictly past the previous end: sorted, disjoint and not adjacent.
            if free.last().is_some_and(|&(f, c)| first <= f + c) {
                return Err(r.invalid(format!(
                    "free extent at {first} out of order, overlapping or adjacent"
                )));
            }
            free.push((first, n));
        }
        Ok(Manifest {
            seq,
            next_file_id,
            slot_total,
            files,
            runs,
            free,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{seeds, u16_at, u32_at, u64_at, FUZZ_INPUTS};
    use super::*;
    use onesync_codec::fuzz::check_decoder;
    use onesync_mapping::{BlockRef, Key};

    fn run(slot: u64) -> RunRef {
        RunRef {
            root: BlockRef {
                slot,
                slots: 8,
                crc: 0x5152_5354,
            },
            height: 2,
            entries: 900,
            slots: 80,
            first: Key::new(1, 0),
            last: Key::new(3, 77),
        }
    }

    fn sample() -> Manifest {
        Manifest {
            seq: 0x0102_0304_0506_0708,
            next_file_id: 0x1112_1314,
            slot_total: 0x1000,
            files: vec![
                ManifestFile {
                    id: 1,
                    name: "ab".into(),
                    size: 0x8000,
                    mapped: 0x40,
                },
                ManifestFile {
                    id: 3,
                    name: "main-journal".into(),
                    size: 0,
                    mapped: 0,
                },
            ],
            runs: vec![run(0x200), run(0x300)],
            free: vec![(4, 2), (10, 0x100), (0xfff, 1)],
        }
    }

    #[test]
    fn manifest_fields_sit_at_the_documented_offsets() {
        let m = Manifest {
            files: sample().files[..1].to_vec(),
            runs: vec![run(0x200)],
            free: vec![(4, 2)],
            ..sample()
        };
        let (buf, crc) = m.encode_with_crc();
        assert_eq!(&buf[0..4], b"OSMF");
        assert_eq!(u32_at(&buf, 4), 2, "version");
        assert_eq!(u64_at(&buf, 8), 0x0102_0304_0506_0708, "seq");
        assert_eq!(u32_at(&buf, 16), 0x1112_1314, "next file id");
        assert_eq!(u64_at(&buf, 20), 0x1000, "slot total");
        assert_eq!((u32_at(&buf, 28), u32_at(&buf, 32)), (1, 1), "files, runs");
        assert_eq!(u64_at(&buf, 36), 1, "free extents");
        // File entry at 44, n = 2.
        assert_eq!((u32_at(&buf, 44), u16_at(&buf, 48)), (1, 2));
        assert_eq!(&buf[50..52], b"ab");
        assert_eq!(
            (u64_at(&buf, 52), u64_at(&buf, 60)),
            (0x8000, 0x40),
            "size, mapped"
        );
        // Run ref at 44 + 22 + n = 68, 60 bytes, `onesync_mapping`'s codec.
        assert_eq!(&buf[68..128], &run(0x200).to_bytes(&())[..]);
        // Free extent at 128.
        assert_eq!((u64_at(&buf, 128), u64_at(&buf, 136)), (4, 2));
        assert_eq!(buf.len(), 144, "nothing follows the last extent");
        assert_eq!(crc, crc32c::crc32c(&buf));
        assert_eq!(Manifest::decode(&buf).unwrap(), m);
    }

    #[test]
    fn free_extents_must_be_sorted_disjoint_not_adjacent_and_below_the_total() {
        for (free, ok) in [
            (vec![(0, 1), (2, 1)], true),
            (vec![(0, 1), (1, 1)], false),
            (vec![(2, 1), (0, 1)], false),
            (vec![(0, 3), (2, 1)], false),
            (vec![(0, 0)], false),
            (vec![(0xfff, 2)], false),
            (vec![(u64::MAX, 2)], false),
        ] {
            let m = Manifest { free, ..sample() };
            assert_eq!(Manifest::decode(&m.to_bytes(&())).is_ok(), ok, "{:?}", m.free);
        }
    }

    #[test]
    fn file_ids_must_ascend_below_the_next_id() {
        let mut m = sample();
        m.files[1].id = 1;
        assert!(Manifest::decode(&m.to_bytes(&())).is_err());
        let mut m = sample();
        m.next_file_id = 3;
        assert!(Manifest::decode(&m.to_bytes(&())).is_err());
    }

    /// The manifest has no checksum of its own (the header holds it), so every mutation
    /// reaches the field checks without resealing.
    #[test]
    fn the_manifest_decoder_survives_fuzzing_from_a_real_manifest() {
        let mut seeds = seeds().manifests;
        seeds.push(sample().to_bytes(&()));
        seeds.push(
            Manifest {
                runs: vec![],
                free: vec![],
                ..sample()
            }
            .to_bytes(&()),
        );
        let report = check_decoder::<Manifest>(&(), &seeds, FUZZ_INPUTS);
        assert!(report.decoded > seeds.len() && report.rejected > 0, "{report:?}");
    }
}
