//! LTX's checksums: CRC-64 with Go's `crc64.ISO` table (CRC-64/GO-ISO: polynomial 0x1b,
//! reflected, initial value and final XOR all ones), and the rolling database checksum.
//!
//! Every stored checksum has its top bit set ([`CHECKSUM_FLAG`]) so that it is never zero.
//! A page's checksum is the CRC of its number (u32 big-endian) followed by its bytes; the
//! database checksum is the XOR of every page's checksum but the lock page's, with the flag
//! set: an empty database's checksum is the flag alone. Because it is a XOR, a transaction
//! updates it from the checksums of the pages it replaces ([`PageChecksums`]).

use crc::{Crc, Digest, CRC_64_GO_ISO};

/// The top bit every LTX checksum carries, so that none is zero.
pub const CHECKSUM_FLAG: u64 = 1 << 63;

/// SQLite's pending byte: the page holding it (the lock page) is never stored.
pub const PENDING_BYTE: u64 = 0x4000_0000;

pub(crate) const CRC64: Crc<u64> = Crc::<u64>::new(&CRC_64_GO_ISO);

/// A running CRC-64 (the file checksum).
pub(crate) struct Hasher(Digest<'static, u64>);

impl Hasher {
    pub(crate) fn new() -> Hasher {
        Hasher(CRC64.digest())
    }
    pub(crate) fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
    /// The flagged checksum of everything so far.
    pub(crate) fn finish(self) -> u64 {
        CHECKSUM_FLAG | self.0.finalize()
    }
}

/// The lock page's number for a page size: the page that holds SQLite's pending byte.
pub fn lock_pgno(page_size: u32) -> u32 {
    (PENDING_BYTE / u64::from(page_size)) as u32 + 1
}

/// A page's checksum: CRC-64 of its number (big-endian) and its bytes, flagged.
pub fn page_checksum(pgno: u32, data: &[u8]) -> u64 {
    let mut d = CRC64.digest();
    d.update(&pgno.to_be_bytes());
    d.update(data);
    CHECKSUM_FLAG | d.finalize()
}

/// The database checksum of a whole database image (`db.len()` a multiple of `page_size`).
pub fn database_checksum(db: &[u8], page_size: u32) -> u64 {
    let lock = lock_pgno(page_size);
    let mut sum = CHECKSUM_FLAG;
    for (i, page) in db.chunks(page_size as usize).enumerate() {
        let pgno = i as u32 + 1;
        if pgno != lock {
            sum = CHECKSUM_FLAG | (sum ^ page_checksum(pgno, page));
        }
    }
    sum
}

/// Every page's checksum of a database, kept so that a transaction's new database checksum
/// follows from the pages it changes alone (8 bytes a page).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageChecksums {
    page_size: u32,
    /// Index `pgno - 1`; the lock page's entry is 0.
    pages: Vec<u64>,
    sum: u64,
}

impl PageChecksums {
    /// The checksums of a whole database image.
    pub fn of_database(db: &[u8], page_size: u32) -> PageChecksums {
        let mut c = PageChecksums {
            page_size,
            pages: Vec::new(),
            sum: CHECKSUM_FLAG,
        };
        for (i, page) in db.chunks(page_size as usize).enumerate() {
            c.set(i as u32 + 1, page);
        }
        c
    }

    /// The database checksum.
    pub fn database(&self) -> u64 {
        self.sum
    }

    /// Pages in the database.
    pub fn page_count(&self) -> u32 {
        self.pages.len() as u32
    }

    /// Records page `pgno`'s new bytes (growing the database if it is past the end).
    pub fn set(&mut self, pgno: u32, data: &[u8]) {
        let i = pgno as usize - 1;
        if self.pages.len() <= i {
            self.pages.resize(i + 1, 0);
        }
        let new = if pgno == lock_pgno(self.page_size) {
            0
        } else {
            page_checksum(pgno, data)
        };
        self.sum = CHECKSUM_FLAG | (self.sum ^ self.pages[i] ^ new);
        self.pages[i] = new;
    }

    /// Cuts the database to `commit` pages.
    pub fn truncate(&mut self, commit: u32) {
        while self.pages.len() > commit as usize {
            let old = self.pages.pop().unwrap_or(0);
            self.sum = CHECKSUM_FLAG | (self.sum ^ old);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc64_is_gos_iso() {
        // Go: crc64.Checksum([]byte("123456789"), crc64.MakeTable(crc64.ISO)).
        assert_eq!(CRC64.checksum(b"123456789"), 0xb909_56c7_75a4_1001);
        assert_eq!(lock_pgno(4096), 262_145);
        assert_eq!(lock_pgno(65536), 16_385);
    }

    #[test]
    fn the_incremental_checksum_equals_the_whole_one() {
        let mut db = vec![0u8; 4096 * 5];
        db.iter_mut().enumerate().for_each(|(i, b)| *b = (i * 7) as u8);
        let mut c = PageChecksums::of_database(&db, 4096);
        assert_eq!(c.database(), database_checksum(&db, 4096));
        db[4096 * 2] ^= 1;
        c.set(3, &db[4096 * 2..4096 * 3]);
        db.extend_from_slice(&[9u8; 4096]);
        c.set(6, &db[4096 * 5..]);
        assert_eq!(c.database(), database_checksum(&db, 4096));
        db.truncate(4096 * 2);
        c.truncate(2);
        assert_eq!(c.database(), database_checksum(&db, 4096));
        assert_eq!(PageChecksums::of_database(&[], 4096).database(), CHECKSUM_FLAG);
    }
}
