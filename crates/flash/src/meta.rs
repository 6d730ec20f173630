//! The on-flash format of metadata pages (checkpoint pages and mapping-log pages).
//!
//! A metadata page fills a NAND page: a 72-byte header, little-endian, then its entries,
//! then zeros. [`MetaPage`] is its [`OnDisk`] encoding (context: the page size).
//!
//! | offset | field | meaning |
//! | ---: | --- | --- |
//! | 0 | magic `u32` | `0x4c54_4658` ("XFTL") |
//! | 4 | version `u8` | 1 |
//! | 5 | kind `u8` | 1 checkpoint, 2 delta record, 3 commit record |
//! | 6 | reserved `u16` | 0 |
//! | 8 | idx `u32` | this page's index within its checkpoint or record |
//! | 12 | npages `u32` | pages in the checkpoint or record (`idx = npages - 1`: the final marker) |
//! | 16 | count `u32` | entries in this page |
//! | 20 | log_block `u32` | checkpoint: log block where the log after it starts |
//! | 24 | log_page `u32` | checkpoint: page in that block |
//! | 28 | crc `u32` | CRC-32C of the page with this field skipped |
//! | 32 | seq `u64` | metadata sequence number (consecutive along the log) |
//! | 40 | gen `u64` | checkpoint generation (log pages: the checkpoint they follow) |
//! | 48 | tx `u64` | commit record: the transaction |
//! | 56 | aux `u64` | checkpoint: `seq` of the first log page after it; record: `seq` of its first page |
//! | 64 | data_seq `u64` | the data sequence counter when written |
//!
//! Then the entries: a checkpoint page holds physical page numbers (`u32`, `u32::MAX` =
//! unmapped) for logical pages `idx * per_page ..`; a record page holds `(lpn u32, ppn u32)`
//! pairs, applied in order. A page whose `idx >= npages`, or whose entries would not fit, is
//! rejected like a bad CRC.

use onesync_codec::{DecodeError, OnDisk, Reader, Writer};

pub(crate) const HDR: usize = 72;
pub(crate) const LOG_ENTRY: usize = 8;
pub(crate) const CKPT_ENTRY: usize = 4;
const MAGIC: u32 = 0x4c54_4658;
const VERSION: u8 = 1;
const CRC_AT: usize = 28;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Checkpoint = 1,
    Delta = 2,
    Commit = 3,
}

/// A metadata page's header (its entry count is the length of [`MetaPage::entries`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub kind: Kind,
    pub idx: u32,
    pub npages: u32,
    pub log_block: u32,
    pub log_page: u32,
    pub seq: u64,
    pub gen: u64,
    pub tx: u64,
    pub aux: u64,
    pub data_seq: u64,
}

/// What follows the header: a checkpoint page's physical page numbers, or a record page's
/// (lpn, ppn) pairs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Entries {
    Checkpoint(Vec<u32>),
    Log(Vec<(u32, u32)>),
}

impl Entries {
    pub fn len(&self) -> usize {
        match self {
            Entries::Checkpoint(e) => e.len(),
            Entries::Log(e) => e.len(),
        }
    }
}

/// One metadata page: a checkpoint page or a mapping-log page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MetaPage {
    pub header: Header,
    pub entries: Entries,
}

/// CRC-32C of a page with its CRC field skipped.
fn page_crc(page: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&page[..CRC_AT]), &page[CRC_AT + 4..])
}

/// The CRC a sealed page stores (the NAND spare area repeats it).
pub(crate) fn stored_crc(page: &[u8]) -> u32 {
    u32::from_le_bytes(page[CRC_AT..CRC_AT + 4].try_into().expect("4 bytes"))
}

/// Recomputes a page's CRC (for the fuzz tests: damage then reaches the field checks).
#[cfg(test)]
fn reseal(page: &mut [u8]) {
    if page.len() >= HDR {
        let crc = page_crc(page);
        page[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    }
}

impl OnDisk for MetaPage {
    const NAME: &'static str = "flash metadata page";
    /// The NAND page size.
    type Context = usize;

    fn encode(&self, page_size: &usize, w: &mut Writer) {
        let h = &self.header;
        debug_assert_eq!(
            h.kind == Kind::Checkpoint,
            matches!(self.entries, Entries::Checkpoint(_))
        );
        let start = w.len();
        w.u32(MAGIC)
            .u8(VERSION)
            .u8(h.kind as u8)
            .u16(0)
            .u32(h.idx)
            .u32(h.npages)
            .u32(self.entries.len() as u32)
            .u32(h.log_block)
            .u32(h.log_page)
            .u32(0) // the CRC, patched below
            .u64(h.seq)
            .u64(h.gen)
            .u64(h.tx)
            .u64(h.aux)
            .u64(h.data_seq);
        match &self.entries {
            Entries::Checkpoint(ppns) => ppns.iter().for_each(|&ppn| {
                w.u32(ppn);
            }),
            Entries::Log(pairs) => pairs.iter().for_each(|&(lpn, ppn)| {
                w.u32(lpn).u32(ppn);
            }),
        }
        w.pad_to(start + page_size);
        let crc = page_crc(&w.as_bytes()[start..]);
        w.patch_u32(start + CRC_AT, crc);
    }

    fn decode(page_size: &usize, r: &mut Reader<'_>) -> Result<MetaPage, DecodeError> {
        let page = r.take(*page_size)?;
        let mut p = Reader::new(Self::NAME, page);
        p.magic(&MAGIC.to_le_bytes())?;
        if p.u8()? != VERSION {
            return Err(p.invalid("unknown version"));
        }
        let kind = p.u8()?;
        p.skip(2)?;
        let (idx, npages, count) = (p.u32()?, p.u32()?, p.u32()? as usize);
        let (log_block, log_page) = (p.u32()?, p.u32()?);
        let stored = p.u32()?;
        p.check_sum(stored, page_crc(page))?;
        let header = Header {
            kind: match kind {
                1 => Kind::Checkpoint,
                2 => Kind::Delta,
                3 => Kind::Commit,
                _ => return Err(p.invalid(format!("unknown kind {kind}"))),
            },
            idx,
            npages,
            log_block,
            log_page,
            seq: p.u64()?,
            gen: p.u64()?,
            tx: p.u64()?,
            aux: p.u64()?,
            data_seq: p.u64()?,
        };
        if idx >= npages {
            return Err(p.invalid(format!("page {idx} of {npages}")));
        }
        let per = if header.kind == Kind::Checkpoint {
            CKPT_ENTRY
        } else {
            LOG_ENTRY
        };
        if count > p.remaining() / per {
            return Err(p.invalid(format!("{count} entries do not fit the page")));
        }
        let entries = if header.kind == Kind::Checkpoint {
            Entries::Checkpoint((0..count).map(|_| p.u32()).collect::<Result<_, _>>()?)
        } else {
            Entries::Log(
                (0..count)
                    .map(|_| Ok((p.u32()?, p.u32()?)))
                    .collect::<Result<_, _>>()?,
            )
        };
        Ok(MetaPage { header, entries })
    }
}

#[cfg(test)]
mod tests {
    use onesync_codec::fuzz::check_decoder_resealed;

    use super::*;

    fn open(page: &[u8]) -> Option<MetaPage> {
        MetaPage::from_bytes(&page.len(), page).ok()
    }

    fn commit_page() -> MetaPage {
        MetaPage {
            header: Header {
                kind: Kind::Commit,
                idx: 1,
                npages: 2,
                log_block: 0,
                log_page: 0,
                seq: 9,
                gen: 3,
                tx: 42,
                aux: 8,
                data_seq: 100,
            },
            entries: Entries::Log(vec![(5, 77)]),
        }
    }

    pub(super) fn checkpoint_page() -> MetaPage {
        MetaPage {
            header: Header {
                kind: Kind::Checkpoint,
                idx: 0,
                npages: 8,
                log_block: 1,
                log_page: 17,
                seq: 1 << 40,
                gen: 77,
                tx: 0,
                aux: (1 << 40) + 8,
                data_seq: 5,
            },
            entries: Entries::Checkpoint(vec![7, u32::MAX, 0, 123_456]),
        }
    }

    #[test]
    fn round_trip_and_damage() {
        let page = commit_page().to_bytes(&256);
        assert_eq!(open(&page), Some(commit_page()));
        for at in [0, 5, 30, 40, 100, 255] {
            let mut bad = page.clone();
            bad[at] ^= 1;
            assert_eq!(open(&bad), None, "flip at {at}");
        }
        assert_eq!(open(&vec![0xff; 256]), None);
    }

    #[test]
    fn fields_sit_at_their_documented_offsets() {
        let page = commit_page().to_bytes(&256);
        let u32_at = |at: usize| u32::from_le_bytes(page[at..at + 4].try_into().unwrap());
        let u64_at = |at: usize| u64::from_le_bytes(page[at..at + 8].try_into().unwrap());
        assert_eq!((u32_at(0), page[4], page[5]), (MAGIC, VERSION, 3));
        assert_eq!((u32_at(8), u32_at(12), u32_at(16)), (1, 2, 1));
        assert_eq!(u32_at(28), stored_crc(&page));
        assert_eq!(
            (u64_at(32), u64_at(40), u64_at(48), u64_at(56), u64_at(64)),
            (9, 3, 42, 8, 100)
        );
        assert_eq!((u32_at(HDR), u32_at(HDR + 4)), (5, 77));
        assert!(page[HDR + LOG_ENTRY..].iter().all(|&b| b == 0));
    }

    #[test]
    fn the_decoder_survives_damaged_pages() {
        let seeds = vec![commit_page().to_bytes(&256), checkpoint_page().to_bytes(&256)];
        let report = check_decoder_resealed::<MetaPage>(&256, &seeds, 4_000, |page| reseal(page));
        assert!(report.decoded > 100 && report.rejected > 100, "{report:?}");
    }
}

#[cfg(test)]
mod golden {
    use super::*;

    /// Pinned before the move onto `onesync_codec`: (length, CRC-32C of the whole page).
    fn fingerprint(page: &[u8]) -> (usize, u32) {
        (page.len(), crc32c::crc32c(page))
    }

    #[test]
    fn metadata_pages_keep_their_bytes() {
        let commit = MetaPage {
            header: Header {
                kind: Kind::Commit,
                idx: 1,
                npages: 2,
                log_block: 4,
                log_page: 5,
                seq: 9,
                gen: 3,
                tx: 42,
                aux: 8,
                data_seq: 100,
            },
            entries: Entries::Log(vec![(5, 77), (6, u32::MAX), (1 << 20, 3)]),
        }
        .to_bytes(&256);
        let ckpt = super::tests::checkpoint_page().to_bytes(&512);
        assert_eq!(
            [fingerprint(&commit), fingerprint(&ckpt)],
            [(256, 1475992302), (512, 440669656)],
            "{:02x?}",
            &commit[..HDR]
        );
    }
}
