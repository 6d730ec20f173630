//! The on-flash format of metadata pages (checkpoint pages and mapping-log pages).
//!
//! Every metadata page starts with a 72-byte header, little-endian:
//!
//! | offset | field | meaning |
//! | --- | --- | --- |
//! | 0 | magic `u32` | `0x4c54_4658` ("XFTL") |
//! | 4 | version `u8` | 1 |
//! | 5 | kind `u8` | 1 checkpoint, 2 delta record, 3 commit record |
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
//! pairs, applied in order.

pub(crate) const HDR: usize = 72;
pub(crate) const LOG_ENTRY: usize = 8;
pub(crate) const CKPT_ENTRY: usize = 4;
const MAGIC: u32 = 0x4c54_4658;
const VERSION: u8 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Checkpoint = 1,
    Delta = 2,
    Commit = 3,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub kind: Kind,
    pub idx: u32,
    pub npages: u32,
    pub count: u32,
    pub log_block: u32,
    pub log_page: u32,
    pub seq: u64,
    pub gen: u64,
    pub tx: u64,
    pub aux: u64,
    pub data_seq: u64,
}

fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

pub(crate) fn get32(b: &[u8], at: usize) -> u32 {
    let mut x = [0u8; 4];
    x.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(x)
}

fn get64(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

fn crc(page: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&page[..28]), &page[32..])
}

/// Writes `h` into the first [`HDR`] bytes of `page` (whose entries are already in place) and
/// seals the page with its CRC.
pub(crate) fn seal(page: &mut [u8], h: &Header) {
    put32(page, 0, MAGIC);
    page[4] = VERSION;
    page[5] = h.kind as u8;
    page[6] = 0;
    page[7] = 0;
    put32(page, 8, h.idx);
    put32(page, 12, h.npages);
    put32(page, 16, h.count);
    put32(page, 20, h.log_block);
    put32(page, 24, h.log_page);
    put64(page, 32, h.seq);
    put64(page, 40, h.gen);
    put64(page, 48, h.tx);
    put64(page, 56, h.aux);
    put64(page, 64, h.data_seq);
    let c = crc(page);
    put32(page, 28, c);
}

/// The header of a sealed metadata page, or `None` if it is not one (wrong magic, version or
/// CRC, or fields that do not add up).
pub(crate) fn open(page: &[u8]) -> Option<Header> {
    if page.len() < HDR || get32(page, 0) != MAGIC || page[4] != VERSION || get32(page, 28) != crc(page) {
        return None;
    }
    let kind = match page[5] {
        1 => Kind::Checkpoint,
        2 => Kind::Delta,
        3 => Kind::Commit,
        _ => return None,
    };
    let h = Header {
        kind,
        idx: get32(page, 8),
        npages: get32(page, 12),
        count: get32(page, 16),
        log_block: get32(page, 20),
        log_page: get32(page, 24),
        seq: get64(page, 32),
        gen: get64(page, 40),
        tx: get64(page, 48),
        aux: get64(page, 56),
        data_seq: get64(page, 64),
    };
    let per = if kind == Kind::Checkpoint {
        CKPT_ENTRY
    } else {
        LOG_ENTRY
    };
    if h.idx >= h.npages || h.count as usize > (page.len() - HDR) / per {
        return None;
    }
    Some(h)
}

/// Entry `i` of a record page.
pub(crate) fn log_entry(page: &[u8], i: usize) -> (u32, u32) {
    let at = HDR + i * LOG_ENTRY;
    (get32(page, at), get32(page, at + 4))
}

pub(crate) fn put_log_entry(page: &mut [u8], i: usize, lpn: u32, ppn: u32) {
    let at = HDR + i * LOG_ENTRY;
    put32(page, at, lpn);
    put32(page, at + 4, ppn);
}

pub(crate) fn ckpt_entry(page: &[u8], i: usize) -> u32 {
    get32(page, HDR + i * CKPT_ENTRY)
}

pub(crate) fn put_ckpt_entry(page: &mut [u8], i: usize, ppn: u32) {
    put32(page, HDR + i * CKPT_ENTRY, ppn);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let mut page = vec![0u8; 256];
        put_log_entry(&mut page, 0, 5, 77);
        let h = Header {
            kind: Kind::Commit,
            idx: 1,
            npages: 2,
            count: 1,
            log_block: 0,
            log_page: 0,
            seq: 9,
            gen: 3,
            tx: 42,
            aux: 8,
            data_seq: 100,
        };
        seal(&mut page, &h);
        assert_eq!(open(&page), Some(h));
        assert_eq!(log_entry(&page, 0), (5, 77));
        for at in [0, 5, 30, 40, 100, 255] {
            let mut bad = page.clone();
            bad[at] ^= 1;
            assert_eq!(open(&bad), None, "flip at {at}");
        }
        assert_eq!(open(&vec![0xff; 256]), None);
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
        let mut commit = vec![0u8; 256];
        for (i, (l, p)) in [(5u32, 77u32), (6, u32::MAX), (1 << 20, 3)]
            .into_iter()
            .enumerate()
        {
            put_log_entry(&mut commit, i, l, p);
        }
        let h = Header {
            kind: Kind::Commit,
            idx: 1,
            npages: 2,
            count: 3,
            log_block: 4,
            log_page: 5,
            seq: 9,
            gen: 3,
            tx: 42,
            aux: 8,
            data_seq: 100,
        };
        seal(&mut commit, &h);
        let mut ckpt = vec![0u8; 512];
        for (i, p) in [7u32, u32::MAX, 0, 123_456].into_iter().enumerate() {
            put_ckpt_entry(&mut ckpt, i, p);
        }
        let c = Header {
            kind: Kind::Checkpoint,
            idx: 0,
            npages: 8,
            count: 4,
            log_block: 1,
            log_page: 17,
            seq: 1 << 40,
            gen: 77,
            tx: 0,
            aux: (1 << 40) + 8,
            data_seq: 5,
        };
        seal(&mut ckpt, &c);
        assert_eq!(
            [fingerprint(&commit), fingerprint(&ckpt)],
            [(256, 1475992302), (512, 440669656)],
            "{:02x?}",
            &commit[..HDR]
        );
    }
}
