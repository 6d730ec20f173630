//! A Litestream 0.5 *file replica*: the directory `litestream restore -o OUT file:///DIR`
//! reads (Litestream v0.5.18's `file.ReplicaClient`), written and restored.
//!
//! The layout is `DIR/ltx/<level>/<minTXID>-<maxTXID>.ltx`, TXIDs as 16 lowercase hex
//! digits. Snapshots (min TXID 1, every page) are at level 9; each transaction is one file
//! at level 0 whose min and max TXID are its own. Levels 1–8 hold compactions (not written
//! here; [`restore`] reads them). Nothing else is needed: Litestream lists the level
//! directories and parses the names. A file's modification time is its header's timestamp
//! (Litestream's file client sets it, and `-timestamp` restores read it). Each file is
//! written to `NAME.tmp`, flushed, renamed, and its directory flushed, as Litestream does.

use crate::checksum::{lock_pgno, PageChecksums, CHECKSUM_FLAG};
use crate::error::{io, Error};
use crate::format::{is_valid_page_size, Header, LtxFile, Page};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The level Litestream keeps full snapshots at.
pub const SNAPSHOT_LEVEL: u32 = 9;

/// `<min>-<max>.ltx`, 16 hex digits each.
pub fn file_name(min_txid: u64, max_txid: u64) -> String {
    format!("{min_txid:016x}-{max_txid:016x}.ltx")
}

/// The TXIDs of a file name `file_name` makes; `None` for any other name.
pub fn parse_file_name(name: &str) -> Option<(u64, u64)> {
    let stem = name.strip_suffix(".ltx")?;
    let (a, b) = stem.split_once('-')?;
    let hex16 = |s: &str| {
        (s.len() == 16 && s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')))
            .then(|| u64::from_str_radix(s, 16).ok())
            .flatten()
    };
    Some((hex16(a)?, hex16(b)?))
}

/// `DIR/ltx/<level>`.
pub fn level_dir(root: &Path, level: u32) -> PathBuf {
    root.join("ltx").join(level.to_string())
}

/// `DIR/ltx/<level>/<min>-<max>.ltx`.
pub fn file_path(root: &Path, level: u32, min_txid: u64, max_txid: u64) -> PathBuf {
    level_dir(root, level).join(file_name(min_txid, max_txid))
}

/// One LTX file of a replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileInfo {
    pub level: u32,
    pub min_txid: u64,
    pub max_txid: u64,
    pub path: PathBuf,
}

/// The LTX files of one level, by min then max TXID (none if the level has no directory).
pub fn list(root: &Path, level: u32) -> Result<Vec<FileInfo>, Error> {
    let dir = level_dir(root, level);
    let entries = match fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(format!("list {}", dir.display()))(e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io(format!("list {}", dir.display())))?;
        let name = entry.file_name();
        if let Some((min_txid, max_txid)) = name.to_str().and_then(parse_file_name) {
            out.push(FileInfo {
                level,
                min_txid,
                max_txid,
                path: entry.path(),
            });
        }
    }
    out.sort_by_key(|f| (f.min_txid, f.max_txid));
    Ok(out)
}

/// Writes `file` at `level` as Litestream's file client does; returns its path.
pub fn write_file(root: &Path, level: u32, file: &LtxFile) -> Result<PathBuf, Error> {
    let h = &file.header;
    let path = file_path(root, level, h.min_txid, h.max_txid);
    let dir = level_dir(root, level);
    fs::create_dir_all(&dir).map_err(io(format!("create {}", dir.display())))?;
    let tmp = path.with_extension("ltx.tmp");
    let bytes = file.encode_bytes();
    {
        let f = fs::File::create(&tmp).map_err(io(format!("create {}", tmp.display())))?;
        std::io::Write::write_all(&mut &f, &bytes).map_err(io(format!("write {}", tmp.display())))?;
        f.sync_all().map_err(io(format!("flush {}", tmp.display())))?;
    }
    fs::rename(&tmp, &path).map_err(io(format!("rename to {}", path.display())))?;
    fs::File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(io(format!("flush {}", dir.display())))?;
    let when = UNIX_EPOCH + Duration::from_millis(h.timestamp.max(0) as u64);
    fs::File::options()
        .write(true)
        .open(&path)
        .and_then(|f| f.set_modified(when))
        .map_err(io(format!("set the time of {}", path.display())))?;
    Ok(path)
}

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
/// `1..=max_txid` at level 9; returns its path.
pub fn write_snapshot(root: &Path, db: &[u8], max_txid: u64, timestamp: i64) -> Result<PathBuf, Error> {
    let page_size = sqlite_page_size(db)?;
    let file = LtxFile::snapshot(db, page_size, max_txid, timestamp)?;
    write_file(root, SNAPSHOT_LEVEL, &file)
}

/// Ships a database to a file replica: a snapshot to start, then one level-0 file per
/// transaction, TXIDs contiguous, each carrying the database checksums before and after.
/// It keeps each page's checksum (8 bytes a page), so a transaction needs only the pages
/// it changed.
#[derive(Debug)]
pub struct ReplicaWriter {
    root: PathBuf,
    page_size: u32,
    checksums: PageChecksums,
    txid: u64,
}

impl ReplicaWriter {
    /// Starts a replica of the plain SQLite database `db` in `root`: its snapshot at TXID 1.
    pub fn create(root: &Path, db: &[u8], timestamp: i64) -> Result<ReplicaWriter, Error> {
        let page_size = sqlite_page_size(db)?;
        write_snapshot(root, db, 1, timestamp)?;
        Ok(ReplicaWriter {
            root: root.to_path_buf(),
            page_size,
            checksums: PageChecksums::of_database(db, page_size),
            txid: 1,
        })
    }

    /// The last TXID written.
    pub fn txid(&self) -> u64 {
        self.txid
    }

    /// The database checksum after the last TXID.
    pub fn checksum(&self) -> u64 {
        self.checksums.database()
    }

    /// Appends one transaction as the next TXID's file at level 0: `pages` are the pages it
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
        write_file(&self.root, 0, &file)?;
        self.checksums = after;
        self.txid = txid;
        Ok(txid)
    }

    /// Writes a snapshot of the database at the current TXID at level 9; `db` must be the
    /// database as of that TXID (its checksum is checked against the replica's).
    pub fn snapshot(&self, db: &[u8], timestamp: i64) -> Result<PathBuf, Error> {
        let file = LtxFile::snapshot(db, self.page_size, self.txid, timestamp)?;
        if file.post_apply_checksum != self.checksums.database() {
            return Err(Error::Invalid(format!(
                "the database given is not the replica's at TXID {}",
                self.txid
            )));
        }
        write_file(&self.root, SNAPSHOT_LEVEL, &file)
    }
}

/// The files a restore applies, in order (Litestream's `CalcRestorePlan`): the newest
/// snapshot at or before `target`, then, from levels 8 down to 0, each time the file that
/// continues the TXIDs reached and goes furthest (up to `target`).
pub fn restore_plan(root: &Path, target: Option<u64>) -> Result<Vec<FileInfo>, Error> {
    let within = |f: &FileInfo| target.is_none_or(|t| f.max_txid <= t);
    let mut plan: Vec<FileInfo> = list(root, SNAPSHOT_LEVEL)?
        .into_iter()
        .rfind(within)
        .into_iter()
        .collect();
    let mut reached = plan.last().map_or(0, |f| f.max_txid);
    let mut candidates = Vec::new();
    for level in (0..SNAPSHOT_LEVEL).rev() {
        candidates.extend(list(root, level)?.into_iter().filter(within));
    }
    while target.is_none_or(|t| reached < t) {
        let next = candidates
            .iter()
            .filter(|f| f.min_txid <= reached + 1 && f.max_txid > reached)
            .max_by(|a, b| {
                (a.max_txid, std::cmp::Reverse(a.min_txid), a.level).cmp(&(
                    b.max_txid,
                    std::cmp::Reverse(b.min_txid),
                    b.level,
                ))
            });
        let Some(next) = next else { break };
        reached = next.max_txid;
        plan.push(next.clone());
    }
    if target.is_none() {
        if let Some(gap) = candidates.iter().find(|f| f.min_txid > reached + 1) {
            return Err(Error::Restore(format!(
                "non-contiguous ltx files: have up to {reached:016x} but {} starts at {:016x}",
                gap.path.display(),
                gap.min_txid
            )));
        }
    }
    match target {
        _ if plan.is_empty() => Err(Error::Restore(format!("no LTX files in {}", root.display()))),
        Some(t) if reached < t => Err(Error::Restore(format!(
            "TXID {t:016x} is not available (up to {reached:016x})"
        ))),
        _ => Ok(plan),
    }
}

/// A database rebuilt from a replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    /// The plain SQLite database file's bytes.
    pub db: Vec<u8>,
    pub txid: u64,
    /// Its database checksum (the last file's post-apply checksum).
    pub checksum: u64,
}

/// Rebuilds the database as of `target` (the latest if `None`): the level-9 snapshot, then
/// each later file's pages. Every file is decoded and checked; each must continue the
/// database checksum the previous one ended with, and the pages reached must give its
/// post-apply checksum.
pub fn restore(root: &Path, target: Option<u64>) -> Result<Restored, Error> {
    let plan = restore_plan(root, target)?;
    let mut db: Vec<u8> = Vec::new();
    let mut sums: Option<PageChecksums> = None;
    let mut reached = 0u64;
    let mut page_size = 0u32;
    for info in &plan {
        let bytes = fs::read(&info.path).map_err(io(format!("read {}", info.path.display())))?;
        let file = LtxFile::decode_bytes(&bytes).map_err(|source| Error::Decode {
            path: info.path.display().to_string(),
            source,
        })?;
        let h = file.header;
        if (h.min_txid, h.max_txid) != (info.min_txid, info.max_txid) {
            return Err(Error::Restore(format!(
                "{} holds TXIDs {:016x}-{:016x}",
                info.path.display(),
                h.min_txid,
                h.max_txid
            )));
        }
        let ps = h.page_size as usize;
        if h.is_snapshot() {
            db.clear();
            sums = Some(PageChecksums::of_database(&[], h.page_size));
            page_size = h.page_size;
        }
        let Some(sums) = sums.as_mut().filter(|_| h.page_size == page_size) else {
            return Err(Error::Restore(format!(
                "{} is not a snapshot and follows none of its page size",
                info.path.display()
            )));
        };
        if !h.is_snapshot()
            && h.min_txid == reached + 1
            && !h.no_checksum()
            && h.pre_apply_checksum != sums.database()
        {
            return Err(Error::Restore(format!(
                "{} does not continue the database: pre-apply checksum {:016x}, the database's is {:016x}",
                info.path.display(),
                h.pre_apply_checksum,
                sums.database()
            )));
        }
        let old_pages = db.len() / ps;
        if h.commit as usize > old_pages + file.pages.len() + 1 {
            return Err(Error::Restore(format!(
                "{} grows the database from {old_pages} to {} pages with only {} pages",
                info.path.display(),
                h.commit,
                file.pages.len()
            )));
        }
        db.resize(h.commit as usize * ps, 0);
        sums.truncate(h.commit);
        let lock = lock_pgno(h.page_size);
        let mut present = vec![false; (h.commit as usize).saturating_sub(old_pages)];
        for p in &file.pages {
            let at = (p.pgno as usize - 1) * ps;
            db[at..at + ps].copy_from_slice(&p.data);
            sums.set(p.pgno, &p.data);
            if p.pgno as usize > old_pages {
                present[p.pgno as usize - old_pages - 1] = true;
            }
        }
        if lock as usize > old_pages && lock <= h.commit {
            present[lock as usize - old_pages - 1] = true;
            sums.set(lock, &db[(lock as usize - 1) * ps..lock as usize * ps]);
        }
        if let Some(i) = present.iter().position(|p| !p) {
            return Err(Error::Restore(format!(
                "{} grows the database to {} pages without page {}",
                info.path.display(),
                h.commit,
                old_pages + i + 1
            )));
        }
        if !h.no_checksum() && file.post_apply_checksum != sums.database() {
            return Err(Error::Restore(format!(
                "{}: post-apply checksum {:016x}, the database restored has {:016x}",
                info.path.display(),
                file.post_apply_checksum,
                sums.database()
            )));
        }
        reached = h.max_txid;
    }
    let checksum = sums.map_or(CHECKSUM_FLAG, |s| s.database());
    Ok(Restored {
        db,
        txid: reached,
        checksum,
    })
}

/// [`restore`] into a new plain database file at `out` (written to `OUT.tmp`, flushed,
/// renamed); refuses an existing `out`. Returns the TXID restored.
pub fn restore_to_file(root: &Path, target: Option<u64>, out: &Path) -> Result<u64, Error> {
    if out.exists() {
        return Err(Error::Restore(format!(
            "output path already exists: {}",
            out.display()
        )));
    }
    let r = restore(root, target)?;
    let tmp = PathBuf::from(format!("{}.tmp", out.display()));
    {
        let f = fs::File::create(&tmp).map_err(io(format!("create {}", tmp.display())))?;
        std::io::Write::write_all(&mut &f, &r.db).map_err(io(format!("write {}", tmp.display())))?;
        f.sync_all().map_err(io(format!("flush {}", tmp.display())))?;
    }
    fs::rename(&tmp, out).map_err(io(format!("rename to {}", out.display())))?;
    Ok(r.txid)
}
