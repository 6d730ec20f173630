//! SQLite's pages out of a store snapshot: the database's page size (its header's), the
//! pages that changed since a commit (from the store pages that did), and LTX files of
//! them. A store page and a SQLite page need not be the same size: a SQLite page is read
//! from the store pages that hold its bytes.

use onesync_ltx::format::HEADER_FLAG_NO_CHECKSUM;
use onesync_ltx::{lock_pgno, Header, LtxFile, Page};
use onesync_store::{FileId, Snapshot};

use crate::error::Error;

/// One logical file of a snapshot seen as a SQLite database.
pub(crate) struct Database<'a> {
    pub snap: &'a Snapshot,
    pub file: FileId,
    pub page_size: u32,
    /// The database's size in pages (LTX's `commit`).
    pub pages: u32,
}

impl<'a> Database<'a> {
    /// The database in `file`, or `None` while it holds no complete header yet (a database
    /// SQLite has not written).
    pub fn read(snap: &'a Snapshot, file: FileId) -> Result<Option<Database<'a>>, Error> {
        let size = snap.file_size(file)?;
        if size < 100 {
            return Ok(None);
        }
        let mut first = vec![0u8; snap.page_size() as usize];
        snap.read_page(file, 0, &mut first)?;
        let page_size = match u16::from_be_bytes([first[16], first[17]]) {
            1 => 65536,
            n if n >= 512 && n.is_power_of_two() => u32::from(n),
            n => {
                return Err(Error::NotADatabase(format!(
                    "page size {n} in the database header is not one SQLite writes"
                )))
            }
        };
        if size % u64::from(page_size) != 0 {
            // Mid-way through a change of page size (VACUUM): ship once it is whole.
            return Ok(None);
        }
        let pages = u32::try_from(size / u64::from(page_size))
            .map_err(|_| Error::NotADatabase(format!("{size} bytes is more pages than SQLite allows")))?;
        Ok(Some(Database {
            snap,
            file,
            page_size,
            pages,
        }))
    }

    /// SQLite page `pgno` (from 1).
    pub fn page(&self, pgno: u32) -> Result<Vec<u8>, Error> {
        let store_ps = self.snap.page_size();
        let start = u64::from(pgno - 1) * u64::from(self.page_size);
        let end = start + u64::from(self.page_size);
        let mut out = Vec::with_capacity(self.page_size as usize);
        let mut buf = vec![0u8; store_ps as usize];
        let mut store_page = start / store_ps;
        while store_page * store_ps < end {
            self.snap.read_page(self.file, store_page, &mut buf)?;
            let from = start.saturating_sub(store_page * store_ps) as usize;
            let to = (end - store_page * store_ps).min(store_ps) as usize;
            out.extend_from_slice(&buf[from..to]);
            store_page += 1;
        }
        Ok(out)
    }

    /// The SQLite pages (ascending, within the database, never the lock page) holding a
    /// byte of the store pages `changed`.
    pub fn pages_holding(&self, changed: &[u64]) -> Vec<u32> {
        let store_ps = self.snap.page_size();
        let ps = u64::from(self.page_size);
        let lock = lock_pgno(self.page_size);
        let mut out: Vec<u32> = Vec::new();
        for &s in changed {
            let first = (s * store_ps) / ps + 1;
            let last = ((s + 1) * store_ps - 1) / ps + 1;
            for pgno in first..=last.min(u64::from(self.pages)) {
                let pgno = pgno as u32;
                if pgno != lock && out.last().is_none_or(|&l| l < pgno) {
                    out.push(pgno);
                }
            }
        }
        out
    }

    /// Every page of the database but the lock page.
    pub fn all_pages(&self) -> Vec<u32> {
        let lock = lock_pgno(self.page_size);
        (1..=self.pages).filter(|&p| p != lock).collect()
    }

    /// An LTX file of `pgnos` as TXIDs `min..=max`, as stock Litestream 0.5 writes its own
    /// (database checksums not tracked: `HEADER_FLAG_NO_CHECKSUM`; the file checksum covers
    /// every byte). `min == 1` makes a snapshot, which must hold every page.
    pub fn ltx(&self, pgnos: &[u32], min_txid: u64, max_txid: u64, timestamp: i64) -> Result<LtxFile, Error> {
        let mut pages = Vec::with_capacity(pgnos.len());
        for &pgno in pgnos {
            pages.push(Page {
                pgno,
                data: self.page(pgno)?,
            });
        }
        Ok(LtxFile {
            header: Header {
                flags: HEADER_FLAG_NO_CHECKSUM,
                page_size: self.page_size,
                commit: self.pages,
                min_txid,
                max_txid,
                timestamp,
                pre_apply_checksum: 0,
                wal_offset: 0,
                wal_size: 0,
                wal_salt1: 0,
                wal_salt2: 0,
                node_id: 0,
            },
            pages,
            post_apply_checksum: 0,
        })
    }
}
