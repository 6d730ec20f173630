//! The LTX file: header, page frames, page index, trailer (the byte tables are in the
//! crate's docs, `lib.rs`), as an [`OnDisk`] structure.
//!
//! [`LtxFile::new`] checks a file's contents the way superfly/ltx's encoder does before it
//! writes one; decoding checks the same rules, every checksum the format has, and that the
//! page index describes the frames exactly, so whatever decodes re-encodes.

use crate::checksum::{database_checksum, lock_pgno, Hasher, CHECKSUM_FLAG};
use crate::error::Error;
use crate::lz4;
use onesync_codec::{DecodeError, OnDisk, Reader, Writer};

/// The first 4 bytes of every LTX file.
pub const MAGIC: &[u8; 4] = b"LTX1";
/// The format version the magic stands for (superfly/ltx's `Version`).
pub const VERSION: u32 = 3;
/// Bytes of the header.
pub const HEADER_SIZE: usize = 100;
/// Bytes of a page header (page number, flags).
pub const PAGE_HEADER_SIZE: usize = 6;
/// Bytes of the trailer (post-apply checksum, file checksum).
pub const TRAILER_SIZE: usize = 16;
/// Header flag: the file tracks no database checksums (pre- and post-apply are zero).
pub const HEADER_FLAG_NO_CHECKSUM: u32 = 1 << 1;
/// Page header flag: a 4-byte size follows the page header and the data is one LZ4 block.
pub const PAGE_FLAG_SIZE: u16 = 1 << 0;

/// The header frame of an LTX file (bytes 80..100 are reserved, written as zeros).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Header {
    pub flags: u32,
    /// Page size in bytes: a power of two from 512 to 65536.
    pub page_size: u32,
    /// The database's size in pages after this file is applied.
    pub commit: u32,
    pub min_txid: u64,
    pub max_txid: u64,
    /// Milliseconds since the Unix epoch.
    pub timestamp: i64,
    /// The database checksum before this file applies; zero on snapshots.
    pub pre_apply_checksum: u64,
    pub wal_offset: i64,
    pub wal_size: i64,
    pub wal_salt1: u32,
    pub wal_salt2: u32,
    pub node_id: u64,
}

impl Header {
    /// Whether the file is a snapshot: it starts at TXID 1 and holds every page.
    pub fn is_snapshot(&self) -> bool {
        self.min_txid == 1
    }

    /// Whether the file tracks no database checksums.
    pub fn no_checksum(&self) -> bool {
        self.flags & HEADER_FLAG_NO_CHECKSUM != 0
    }

    /// superfly/ltx's `Header.Validate`: why the header is not a valid one, if it is not.
    pub fn problem(&self) -> Option<String> {
        let flagged = |c: u64| c & CHECKSUM_FLAG != 0;
        Some(if self.flags & !HEADER_FLAG_NO_CHECKSUM != 0 {
            format!("invalid flags: {:#010x}", self.flags)
        } else if !is_valid_page_size(self.page_size) {
            format!("invalid page size: {}", self.page_size)
        } else if self.min_txid == 0 {
            "minimum transaction id required".into()
        } else if self.max_txid == 0 {
            "maximum transaction id required".into()
        } else if self.min_txid > self.max_txid {
            format!(
                "transaction ids out of order: ({},{})",
                self.min_txid, self.max_txid
            )
        } else if self.wal_offset < 0 {
            format!("wal offset cannot be negative: {}", self.wal_offset)
        } else if self.wal_size < 0 {
            format!("wal size cannot be negative: {}", self.wal_size)
        } else if (self.wal_salt1 != 0 || self.wal_salt2 != 0) && self.wal_offset == 0 {
            "wal offset required if salt exists".into()
        } else if self.wal_offset == 0 && self.wal_size != 0 {
            "wal offset required if wal size exists".into()
        } else if self.is_snapshot() && self.pre_apply_checksum != 0 {
            "pre-apply checksum must be zero on snapshots".into()
        } else if !self.is_snapshot() && self.no_checksum() && self.pre_apply_checksum != 0 {
            "pre-apply checksum not allowed".into()
        } else if !self.is_snapshot() && !self.no_checksum() && self.pre_apply_checksum == 0 {
            "pre-apply checksum required on non-snapshot files".into()
        } else if !self.is_snapshot() && !self.no_checksum() && !flagged(self.pre_apply_checksum) {
            "invalid pre-apply checksum format".into()
        } else {
            return None;
        })
    }

    fn to_bytes(self) -> [u8; HEADER_SIZE] {
        let mut b = [0u8; HEADER_SIZE];
        b[0..4].copy_from_slice(MAGIC);
        b[4..8].copy_from_slice(&self.flags.to_be_bytes());
        b[8..12].copy_from_slice(&self.page_size.to_be_bytes());
        b[12..16].copy_from_slice(&self.commit.to_be_bytes());
        b[16..24].copy_from_slice(&self.min_txid.to_be_bytes());
        b[24..32].copy_from_slice(&self.max_txid.to_be_bytes());
        b[32..40].copy_from_slice(&self.timestamp.to_be_bytes());
        b[40..48].copy_from_slice(&self.pre_apply_checksum.to_be_bytes());
        b[48..56].copy_from_slice(&self.wal_offset.to_be_bytes());
        b[56..64].copy_from_slice(&self.wal_size.to_be_bytes());
        b[64..68].copy_from_slice(&self.wal_salt1.to_be_bytes());
        b[68..72].copy_from_slice(&self.wal_salt2.to_be_bytes());
        b[72..80].copy_from_slice(&self.node_id.to_be_bytes());
        b
    }

    /// Reads a header (magic first); does not validate it.
    pub fn read(r: &mut Reader<'_>) -> Result<Header, DecodeError> {
        r.magic(MAGIC)?;
        let h = Header {
            flags: be_u32(r)?,
            page_size: be_u32(r)?,
            commit: be_u32(r)?,
            min_txid: be_u64(r)?,
            max_txid: be_u64(r)?,
            timestamp: be_u64(r)? as i64,
            pre_apply_checksum: be_u64(r)?,
            wal_offset: be_u64(r)? as i64,
            wal_size: be_u64(r)? as i64,
            wal_salt1: be_u32(r)?,
            wal_salt2: be_u32(r)?,
            node_id: be_u64(r)?,
        };
        r.skip(HEADER_SIZE - 80)?;
        Ok(h)
    }
}

/// Whether `n` is a SQLite page size (a power of two from 512 to 65536).
pub fn is_valid_page_size(n: u32) -> bool {
    (512..=65536).contains(&n) && n.is_power_of_two()
}

fn be_u32(r: &mut Reader<'_>) -> Result<u32, DecodeError> {
    r.array().map(u32::from_be_bytes)
}

fn be_u64(r: &mut Reader<'_>) -> Result<u64, DecodeError> {
    r.array().map(u64::from_be_bytes)
}

/// One page of an LTX file.
#[derive(Clone, PartialEq, Eq)]
pub struct Page {
    pub pgno: u32,
    /// Exactly the header's page size.
    pub data: Vec<u8>,
}

impl std::fmt::Debug for Page {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let crc = crate::checksum::page_checksum(self.pgno, &self.data);
        write!(
            f,
            "Page({}, {} bytes, checksum {crc:016x})",
            self.pgno,
            self.data.len()
        )
    }
}

/// A whole LTX file: its header, its pages in order, and the database checksum after it
/// applies. The file checksum and the page index follow from these and are not kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LtxFile {
    pub header: Header,
    pub pages: Vec<Page>,
    /// Zero when the header's no-checksum flag is set.
    pub post_apply_checksum: u64,
}

/// Why a page cannot come next, by superfly/ltx's encoder's rules; `prev` is the previous
/// page number (0 for the first).
fn page_problem(h: &Header, prev: u32, pgno: u32, len: usize) -> Option<String> {
    let lock = lock_pgno(h.page_size);
    Some(if pgno == 0 {
        "page number required".into()
    } else if pgno > h.commit {
        format!("page number {pgno} out-of-bounds for commit size {}", h.commit)
    } else if len != h.page_size as usize {
        format!("invalid page buffer size: {len}, expecting {}", h.page_size)
    } else if pgno == lock {
        format!("cannot encode lock page: pgno={pgno}")
    } else if h.is_snapshot() && prev == 0 && pgno != 1 {
        "snapshot transaction file must start with page number 1".into()
    } else if h.is_snapshot() && prev != 0 && prev + 1 == lock && pgno != prev + 2 {
        format!("nonsequential page numbers in snapshot transaction (skip lock page): {prev},{pgno}")
    } else if h.is_snapshot() && prev != 0 && prev + 1 != lock && pgno != prev + 1 {
        format!("nonsequential page numbers in snapshot transaction: {prev},{pgno}")
    } else if !h.is_snapshot() && prev >= pgno {
        format!("out-of-order page numbers: {prev},{pgno}")
    } else {
        return None;
    })
}

/// The page a snapshot of `commit` pages must end with (0 for an empty database).
fn last_snapshot_page(h: &Header) -> u32 {
    if h.commit == lock_pgno(h.page_size) {
        h.commit - 1
    } else {
        h.commit
    }
}

/// Why a whole file's contents are not valid, if they are not.
fn file_problem(f: &LtxFile) -> Option<String> {
    let h = &f.header;
    if let Some(p) = h.problem() {
        return Some(p);
    }
    let mut prev = 0;
    for p in &f.pages {
        if let Some(why) = page_problem(h, prev, p.pgno, p.data.len()) {
            return Some(why);
        }
        prev = p.pgno;
    }
    if h.is_snapshot() && prev != last_snapshot_page(h) {
        return Some(format!(
            "snapshot ends at page {prev}, not at its commit size {}",
            h.commit
        ));
    }
    post_apply_problem(h, f.post_apply_checksum)
}

fn post_apply_problem(h: &Header, post: u64) -> Option<String> {
    Some(if h.no_checksum() && post != 0 {
        "post-apply checksum not allowed".into()
    } else if !h.no_checksum() && post == 0 {
        "post-apply checksum required".into()
    } else if !h.no_checksum() && post & CHECKSUM_FLAG == 0 {
        "invalid post-apply checksum format".into()
    } else if h.commit == 0 && !h.no_checksum() && post != CHECKSUM_FLAG {
        "post-apply checksum must be empty for zero-length database".into()
    } else {
        return None;
    })
}

impl LtxFile {
    /// A file of these pages, checked as superfly/ltx's encoder checks them (and, for a
    /// snapshot, that the post-apply checksum is the pages' database checksum).
    pub fn new(header: Header, pages: Vec<Page>, post_apply_checksum: u64) -> Result<LtxFile, Error> {
        let f = LtxFile {
            header,
            pages,
            post_apply_checksum,
        };
        if let Some(why) = file_problem(&f) {
            return Err(Error::Invalid(why));
        }
        if f.header.is_snapshot() && !f.header.no_checksum() {
            let computed = f.snapshot_checksum();
            if computed != post_apply_checksum {
                return Err(Error::Invalid(format!(
                    "snapshot post-apply checksum {post_apply_checksum:016x} is not its pages' {computed:016x}"
                )));
            }
        }
        Ok(f)
    }

    /// The database checksum of a snapshot's pages.
    fn snapshot_checksum(&self) -> u64 {
        let mut sum = CHECKSUM_FLAG;
        for p in &self.pages {
            sum = CHECKSUM_FLAG | (sum ^ crate::checksum::page_checksum(p.pgno, &p.data));
        }
        sum
    }

    /// The snapshot of a whole database image: TXIDs `1..=max_txid`, every page but the
    /// lock page, the post-apply checksum computed.
    pub fn snapshot(db: &[u8], page_size: u32, max_txid: u64, timestamp: i64) -> Result<LtxFile, Error> {
        if !is_valid_page_size(page_size) || !db.len().is_multiple_of(page_size as usize) {
            return Err(Error::Invalid(format!(
                "a database of {} bytes is not whole pages of {page_size}",
                db.len()
            )));
        }
        let commit = u32::try_from(db.len() / page_size as usize)
            .map_err(|_| Error::Invalid("database too large".into()))?;
        let lock = lock_pgno(page_size);
        let pages = db
            .chunks(page_size as usize)
            .enumerate()
            .map(|(i, d)| Page {
                pgno: i as u32 + 1,
                data: d.to_vec(),
            })
            .filter(|p| p.pgno != lock)
            .collect();
        let header = Header {
            page_size,
            commit,
            min_txid: 1,
            max_txid,
            timestamp,
            ..Header::default()
        };
        LtxFile::new(header, pages, database_checksum(db, page_size))
    }

    /// The file's bytes.
    pub fn encode_bytes(&self) -> Vec<u8> {
        self.to_bytes(&())
    }

    /// Decodes and checks a whole file.
    pub fn decode_bytes(bytes: &[u8]) -> Result<LtxFile, DecodeError> {
        LtxFile::from_bytes(&(), bytes)
    }
}

fn push_uvarint(w: &mut Writer, mut v: u64) {
    while v >= 0x80 {
        w.u8(v as u8 | 0x80);
        v >>= 7;
    }
    w.u8(v as u8);
}

fn read_uvarint(r: &mut Reader<'_>) -> Result<u64, DecodeError> {
    let mut v = 0u64;
    for i in 0..10 {
        let b = r.u8()?;
        if i == 9 && b > 1 {
            return Err(r.invalid("page index varint overflows 64 bits"));
        }
        v |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Ok(v);
        }
    }
    Err(r.invalid("page index varint overflows 64 bits"))
}

impl OnDisk for LtxFile {
    const NAME: &'static str = "ltx file";
    type Context = ();

    /// The bytes superfly/ltx's encoder writes for the same header and pages.
    fn encode(&self, _: &(), w: &mut Writer) {
        let start = w.len();
        let mut hash = Hasher::new();
        let header = self.header.to_bytes();
        hash.update(&header);
        w.bytes(&header);
        let mut index = Vec::with_capacity(self.pages.len());
        for p in &self.pages {
            let offset = w.len() - start;
            let block = lz4::compress(&p.data);
            let mut frame = [0u8; PAGE_HEADER_SIZE + 4];
            frame[0..4].copy_from_slice(&p.pgno.to_be_bytes());
            frame[4..6].copy_from_slice(&PAGE_FLAG_SIZE.to_be_bytes());
            frame[6..10].copy_from_slice(&(block.len() as u32).to_be_bytes());
            // The checksum covers the frame's header and size, and the page uncompressed.
            hash.update(&frame);
            hash.update(&p.data);
            w.bytes(&frame).bytes(&block);
            index.push((p.pgno, offset, w.len() - start - offset));
        }
        let tail_start = w.len();
        w.bytes(&[0u8; PAGE_HEADER_SIZE]);
        let index_start = w.len();
        for (pgno, offset, size) in index {
            push_uvarint(w, u64::from(pgno));
            push_uvarint(w, offset as u64);
            push_uvarint(w, size as u64);
        }
        push_uvarint(w, 0);
        let index_size = (w.len() - index_start) as u64;
        w.bytes(&index_size.to_be_bytes());
        w.bytes(&self.post_apply_checksum.to_be_bytes());
        hash.update(&w.as_bytes()[tail_start..]);
        w.bytes(&hash.finish().to_be_bytes());
    }

    fn decode(_: &(), r: &mut Reader<'_>) -> Result<LtxFile, DecodeError> {
        let start = r.position();
        let header = Header::read(r)?;
        if let Some(why) = header.problem() {
            return Err(r.invalid(why));
        }
        let mut hash = Hasher::new();
        hash.update(&r.all()[start..start + HEADER_SIZE]);
        let mut pages = Vec::new();
        let mut index = Vec::new();
        let mut prev = 0;
        loop {
            let offset = r.position() - start;
            let frame = r.take(PAGE_HEADER_SIZE)?;
            hash.update(frame);
            let pgno = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
            let flags = u16::from_be_bytes([frame[4], frame[5]]);
            if pgno == 0 && flags == 0 {
                break;
            }
            if flags != PAGE_FLAG_SIZE {
                return Err(r.invalid(format!(
                    "page {pgno}: flags {flags:#06x} (only LZ4 blocks with a size, flag 0x0001, are read)"
                )));
            }
            if let Some(why) = page_problem(&header, prev, pgno, header.page_size as usize) {
                return Err(r.invalid(why));
            }
            let size_bytes = r.take(4)?;
            hash.update(size_bytes);
            let size = u32::from_be_bytes([size_bytes[0], size_bytes[1], size_bytes[2], size_bytes[3]]);
            let block = r.take(size as usize)?;
            let mut data = vec![0u8; header.page_size as usize];
            if lz4::decompress_exact(block, &mut data).is_none() {
                return Err(r.invalid(format!(
                    "page {pgno}: its {size}-byte LZ4 block does not decompress to one {}-byte page",
                    header.page_size
                )));
            }
            hash.update(&data);
            index.push((pgno, offset as u64, (r.position() - start - offset) as u64));
            pages.push(Page { pgno, data });
            prev = pgno;
        }
        if header.is_snapshot() && prev != last_snapshot_page(&header) {
            return Err(r.invalid(format!(
                "snapshot ends at page {prev}, not at its commit size {}",
                header.commit
            )));
        }
        let index_start = r.position();
        for &(pgno, offset, size) in &index {
            let at = r.position();
            let got = (read_uvarint(r)?, read_uvarint(r)?, read_uvarint(r)?);
            if got != (u64::from(pgno), offset, size) {
                return Err(r.invalid(format!(
                    "page index entry at byte {at} is {got:?}, the frames say ({pgno}, {offset}, {size})"
                )));
            }
        }
        if read_uvarint(r)? != 0 {
            return Err(r.invalid("page index names a page the file does not hold"));
        }
        let index_size = (r.position() - index_start) as u64;
        let stored_size = be_u64(r)?;
        if stored_size != index_size {
            return Err(r.invalid(format!(
                "page index size {stored_size}, the index is {index_size} bytes"
            )));
        }
        let post_apply_checksum = be_u64(r)?;
        hash.update(&r.all()[index_start..r.position()]);
        let stored = be_u64(r)?;
        let computed = hash.finish();
        if stored != computed {
            return Err(r.invalid(format!(
                "file checksum mismatch (stored {stored:016x}, computed {computed:016x})"
            )));
        }
        if let Some(why) = post_apply_problem(&header, post_apply_checksum) {
            return Err(r.invalid(why));
        }
        let file = LtxFile {
            header,
            pages,
            post_apply_checksum,
        };
        if header.is_snapshot() && !header.no_checksum() {
            let computed = file.snapshot_checksum();
            if computed != post_apply_checksum {
                return Err(r.invalid(format!(
                    "post-apply checksum in trailer ({post_apply_checksum:016x}) does not match calculated checksum ({computed:016x})"
                )));
            }
        }
        Ok(file)
    }
}
