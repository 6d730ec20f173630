//! Writing a replica: a whole database as a snapshot, and [`ReplicaWriter`], which ships
//! a database's transactions one LTX file each, TXIDs contiguous, through any
//! [`ReplicaClient`].
//!
//! Snapshots (min TXID 1, every page) are at level 9; each transaction is one file at level
//! 0 whose min and max TXID are its own, carrying the database checksums before and after
//! (stock Litestream writes its files without them; both restore the same way).

use crate::checksum::{lock_pgno, PageChecksums};
use crate::client::{FileInfo, ReplicaClient, SNAPSHOT_LEVEL};
use crate::error::Error;
use crate::format::{is_valid_page_size, Header, LtxFile, Page};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// The page size a SQLite database file's header names (bytes 16–17; 1 means 65536).
pub fn sqlite_page_size(db: &[u8]) -> Result<u32, Error> {
    if db.len() < 100 || &db[..16] != b"SQLite format 3\0" {
        return Err(Error::Invalid("not a SQLite database file (no header)".into()));
    }
    let n = u32::from(u16::from_be_bytes([db[16], db[17]]));
    let n = if n == 1 { 65536 } else { n };
    if !is_valid_page_size(n) || !db.len().is_multiple_of(n as usize) {
        return Err(Error::Invalid(format!(
            "page size {n} does not divide the database's {} bytes",
            db.len()
        )));
    }
    Ok(n)
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Writes a whole plain SQLite database file's pages as the snapshot of TXIDs
/// `1..=max_txid` at level 9.
pub fn write_snapshot(
    client: &dyn ReplicaClient,
    db: &[u8],
    max_txid: u64,
    timestamp: i64,
) -> Result<FileInfo, Error> {
    let page_size = sqlite_page_size(db)?;
    let file = LtxFile::snapshot(db, page_size, max_txid, timestamp)?;
    client.write(SNAPSHOT_LEVEL, &file)
}

/// Ships a database to a replica: a snapshot to start, then one level-0 file per
/// transaction, TXIDs contiguous, each carrying the database checksums before and after.
/// It keeps each page's checksum (8 bytes a page), so a transaction needs only the pages
/// it changed.
pub struct ReplicaWriter {
    client: Arc<dyn ReplicaClient>,
    page_size: u32,
    checksums: PageChecksums,
    txid: u64,
}

impl ReplicaWriter {
    /// Starts a replica of the plain SQLite database `db`: its snapshot at TXID 1.
    pub fn create(client: Arc<dyn ReplicaClient>, db: &[u8], timestamp: i64) -> Result<ReplicaWriter, Error> {
        let page_size = sqlite_page_size(db)?;
        write_snapshot(client.as_ref(), db, 1, timestamp)?;
        Ok(ReplicaWriter {
            client,
            page_size,
            checksums: PageChecksums::of_database(db, page_size),
            txid: 1,
        })
    }

    /// The replica written to.
    pub fn client(&self) -> &Arc<dyn ReplicaClient> {
        &self.client
    }

    /// The last TXID written.
    pub fn txid(&self) -> u64 {
        self.txid
    }

    /// The database checksum after the last TXID.
    pub fn checksum(&self) -> u64 {
        self.checksums.database()
    }

    /// Appends one transaction as the next TXID's file at level 0 (nothing changes if the
    /// write fails, so the same call can be retried): `pages` are the pages it
    /// changed (any order), `commit` the database's size in pages after it. Every page the
    /// database grows by must be among them. Returns the new TXID.
    pub fn append(&mut self, commit: u32, pages: &[(u32, &[u8])], timestamp: i64) -> Result<u64, Error> {
        let mut pages: Vec<Page> = pages
            .iter()
            .map(|&(pgno, data)| Page {
                pgno,
                data: data.to_vec(),
            })
            .collect();
        pages.sort_by_key(|p| p.pgno);
        let old = self.checksums.page_count();
        let lock = lock_pgno(self.page_size);
        let given: std::collections::BTreeSet<u32> = pages.iter().map(|p| p.pgno).collect();
        if let Some(hole) = (old + 1..=commit).find(|&n| n != lock && !given.contains(&n)) {
            return Err(Error::Invalid(format!(
                "the database grows from {old} to {commit} pages but page {hole} is not in the transaction"
            )));
        }
        let txid = self.txid + 1;
        let header = Header {
            page_size: self.page_size,
            commit,
            min_txid: txid,
            max_txid: txid,
            timestamp,
            pre_apply_checksum: self.checksums.database(),
            ..Header::default()
        };
        let mut after = self.checksums.clone();
        after.truncate(commit);
        for p in &pages {
            if p.pgno <= commit && p.data.len() == self.page_size as usize {
                after.set(p.pgno, &p.data);
            }
        }
        let file = LtxFile::new(header, pages, after.database())?;
        self.client.write(0, &file)?;
        self.checksums = after;
        self.txid = txid;
        Ok(txid)
    }

    /// Writes a snapshot of the database at the current TXID at level 9; `db` must be the
    /// database as of that TXID (its checksum is checked against the replica's).
    pub fn snapshot(&self, db: &[u8], timestamp: i64) -> Result<FileInfo, Error> {
        let file = LtxFile::snapshot(db, self.page_size, self.txid, timestamp)?;
        if file.post_apply_checksum != self.checksums.database() {
            return Err(Error::Invalid(format!(
                "the database given is not the replica's at TXID {}",
                self.txid
            )));
        }
        self.client.write(SNAPSHOT_LEVEL, &file)
    }
}

impl std::fmt::Debug for ReplicaWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicaWriter")
            .field("url", &self.client.url())
            .field("page_size", &self.page_size)
            .field("txid", &self.txid)
            .finish_non_exhaustive()
    }
}
