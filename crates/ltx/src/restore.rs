//! Rebuilding a database from a replica through any [`ReplicaClient`]: Litestream's restore
//! plan (`CalcRestorePlan`: latest, up to a TXID, or before a time), then each file read,
//! checked and applied.

use crate::checksum::{lock_pgno, PageChecksums, CHECKSUM_FLAG};
use crate::client::{FileInfo, ReplicaClient, SNAPSHOT_LEVEL};
use crate::error::{io, Error};
use crate::format::LtxFile;
use std::fs;
use std::path::{Path, PathBuf};

/// What to restore.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Everything the replica holds (a gap between files is an error).
    Latest,
    /// The database as of exactly this TXID.
    Txid(u64),
    /// The database as of the newest file created strictly before this time (ms since the
    /// epoch), as `litestream restore -timestamp` picks it: files are judged by their
    /// header timestamps ([`ReplicaClient::list_with_header_timestamps`]).
    Timestamp(i64),
}

/// Litestream's `restoreCandidateBetter`: further, then starting earlier, then from a
/// higher level, then created earlier.
fn better(next: &FileInfo, current: &FileInfo) -> bool {
    (
        next.max_txid,
        std::cmp::Reverse(next.min_txid),
        next.level,
        std::cmp::Reverse(next.timestamp_ms),
    ) > (
        current.max_txid,
        std::cmp::Reverse(current.min_txid),
        current.level,
        std::cmp::Reverse(current.timestamp_ms),
    )
}

/// The files a restore applies, in order (Litestream's `CalcRestorePlan`): the newest
/// snapshot within the target, then, each time, the file of levels 0–8 within the target
/// that continues the TXIDs reached and goes furthest.
pub fn restore_plan(client: &dyn ReplicaClient, target: Target) -> Result<Vec<FileInfo>, Error> {
    let list = |level| match target {
        Target::Timestamp(_) => client.list_with_header_timestamps(level),
        _ => client.list(level),
    };
    let within = |f: &FileInfo| match target {
        Target::Latest => true,
        Target::Txid(t) => f.max_txid <= t,
        Target::Timestamp(ms) => f.timestamp_ms < ms,
    };
    let mut plan: Vec<FileInfo> = list(SNAPSHOT_LEVEL)?
        .into_iter()
        .rfind(within)
        .into_iter()
        .collect();
    let mut reached = plan.last().map_or(0, |f| f.max_txid);
    let done = |reached: u64| matches!(target, Target::Txid(t) if reached >= t);
    let mut candidates = Vec::new();
    if !done(reached) {
        for level in (0..SNAPSHOT_LEVEL).rev() {
            candidates.extend(list(level)?);
        }
    }
    while !done(reached) {
        let next = candidates
            .iter()
            .filter(|f| within(f) && f.min_txid <= reached + 1 && f.max_txid > reached)
            .fold(None::<&FileInfo>, |best, f| match best {
                Some(b) if !better(f, b) => Some(b),
                _ => Some(f),
            });
        let Some(next) = next else { break };
        reached = next.max_txid;
        plan.push(next.clone());
    }
    if target == Target::Latest && !plan.is_empty() {
        if let Some(gap) = candidates.iter().find(|f| f.min_txid > reached + 1) {
            return Err(Error::Restore(format!(
                "non-contiguous ltx files in {}: have up to {reached:016x} but {gap} starts at {:016x}",
                client.url(),
                gap.min_txid
            )));
        }
    }
    match target {
        _ if plan.is_empty() => Err(Error::Restore(format!(
            "no LTX files in {} for {target:?}",
            client.url()
        ))),
        Target::Txid(t) if reached < t => Err(Error::Restore(format!(
            "TXID {t:016x} is not available in {} (up to {reached:016x})",
            client.url()
        ))),
        _ => Ok(plan),
    }
}

/// The newest file across all levels (the greatest max TXID; `None` for an empty replica).
pub fn max_txid(client: &dyn ReplicaClient) -> Result<Option<FileInfo>, Error> {
    let mut newest: Option<FileInfo> = None;
    for level in 0..=SNAPSHOT_LEVEL {
        for f in client.list(level)? {
            if newest.as_ref().is_none_or(|n| f.max_txid > n.max_txid) {
                newest = Some(f);
            }
        }
    }
    Ok(newest)
}

/// A database rebuilt from a replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    /// The plain SQLite database file's bytes.
    pub db: Vec<u8>,
    pub txid: u64,
    /// Its database checksum.
    pub checksum: u64,
    /// The files applied, in order.
    pub plan: Vec<FileInfo>,
}

/// Rebuilds the database as of `target`: the snapshot, then each later file's pages. Every
/// file is decoded and checked (its file checksum always); a file that tracks database
/// checksums must continue the checksum of the pages reached (when it starts right after
/// them) and end at its post-apply checksum. Files flagged no-checksum, as stock Litestream
/// writes every file, are applied on their file checksum alone.
pub fn restore(client: &dyn ReplicaClient, target: Target) -> Result<Restored, Error> {
    let plan = restore_plan(client, target)?;
    let mut db: Vec<u8> = Vec::new();
    let mut sums: Option<PageChecksums> = None;
    let mut reached = 0u64;
    let mut page_size = 0u32;
    for info in &plan {
        let name = format!("{} {info}", client.url());
        let bytes = client.read(info)?;
        let file = LtxFile::decode_bytes(&bytes).map_err(|source| Error::Decode {
            path: name.clone(),
            source,
        })?;
        let h = file.header;
        if (h.min_txid, h.max_txid) != (info.min_txid, info.max_txid) {
            return Err(Error::Restore(format!(
                "{name} holds TXIDs {:016x}-{:016x}",
                h.min_txid, h.max_txid
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
                "{name} is not a snapshot and follows none of its page size"
            )));
        };
        if !h.is_snapshot()
            && h.min_txid == reached + 1
            && !h.no_checksum()
            && h.pre_apply_checksum != sums.database()
        {
            return Err(Error::Restore(format!(
                "{name} does not continue the database: pre-apply checksum {:016x}, the database's is {:016x}",
                h.pre_apply_checksum,
                sums.database()
            )));
        }
        let old_pages = db.len() / ps;
        if h.commit as usize > old_pages + file.pages.len() + 1 {
            return Err(Error::Restore(format!(
                "{name} grows the database from {old_pages} to {} pages with only {} pages",
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
                "{name} grows the database to {} pages without page {}",
                h.commit,
                old_pages + i + 1
            )));
        }
        if !h.no_checksum() && file.post_apply_checksum != sums.database() {
            return Err(Error::Restore(format!(
                "{name}: post-apply checksum {:016x}, the database restored has {:016x}",
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
        plan,
    })
}

/// [`restore`] into a new plain database file at `out` (written to `OUT.tmp`, flushed,
/// renamed); refuses an existing `out`.
pub fn restore_to_file(client: &dyn ReplicaClient, target: Target, out: &Path) -> Result<Restored, Error> {
    if out.exists() {
        return Err(Error::Restore(format!(
            "output path already exists: {}",
            out.display()
        )));
    }
    let r = restore(client, target)?;
    let tmp = PathBuf::from(format!("{}.tmp", out.display()));
    let written = (|| {
        let f = fs::File::create(&tmp)?;
        std::io::Write::write_all(&mut &f, &r.db)?;
        f.sync_all()
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(io(format!("write {}", tmp.display()))(e));
    }
    fs::rename(&tmp, out).map_err(io(format!("rename to {}", out.display())))?;
    Ok(r)
}
