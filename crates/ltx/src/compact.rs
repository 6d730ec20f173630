//! Compaction and retention as stock Litestream 0.5.18 runs them by default (its
//! `DefaultCompactionLevels`, `Compactor`, `Store.CompactDB`, `DB.EnforceL0RetentionByTime`,
//! `DB.EnforceSnapshotRetention`), for a caller to run periodically ([`compact`]).
//! Snapshots (level 9) are the caller's to write.
//!
//! - **Levels**: level N (1..=the last) merges the level N-1 files after its own newest into
//!   one file, once per interval (default 30 s, 5 min, 1 h for levels 1–3): not while level
//!   N's newest file was created after the start of the current interval window
//!   (`now` truncated to the interval), nor when level N-1 has nothing newer.
//! - **A merged file** (superfly/ltx's `Compactor`, flagged no-checksum as Litestream's
//!   compactor flags it): the sources must be contiguous and of one page size; each page as
//!   the newest source has it, none past the last source's commit; the header's min TXID is
//!   the first source's, its max TXID, commit and timestamp the last's; no checksums (the
//!   flag forbids them).
//! - **Level 0 retention** (default 5 min): once level 1 covers them, level-0 files created
//!   more than the retention ago are deleted, oldest first, stopping at the first newer one;
//!   the newest level-0 file stays.
//! - **Snapshot retention** (default 24 h): snapshots created more than the retention ago
//!   are deleted but the newest; then, in levels 1 and up, files ending before the newest
//!   deleted snapshot's TXID, all but each level's last.
//!
//! Times are each file's `timestamp_ms` as [`ReplicaClient::list`] gives it (Litestream's
//! `CreatedAt` without metadata).

use crate::client::{FileInfo, ReplicaClient, SNAPSHOT_LEVEL};
use crate::error::Error;
use crate::format::{Header, LtxFile, Page, HEADER_FLAG_NO_CHECKSUM};
use std::collections::BTreeMap;

/// How often each level compacts and how long files are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactionPolicy {
    /// The interval of level 1, 2, … in milliseconds (at most 8 levels).
    pub level_intervals_ms: Vec<i64>,
    /// How long level-0 files stay once level 1 covers them.
    pub l0_retention_ms: i64,
    /// How long snapshots (and what only they need) are kept; the newest always stays.
    pub snapshot_retention_ms: i64,
}

impl Default for CompactionPolicy {
    /// Litestream 0.5.18's defaults.
    fn default() -> Self {
        CompactionPolicy {
            level_intervals_ms: vec![30_000, 5 * 60_000, 60 * 60_000],
            l0_retention_ms: 5 * 60_000,
            snapshot_retention_ms: 24 * 60 * 60_000,
        }
    }
}

impl CompactionPolicy {
    fn check(&self) -> Result<(), Error> {
        if self.level_intervals_ms.len() >= SNAPSHOT_LEVEL as usize {
            return Err(Error::Config(format!(
                "{} compaction levels: at most {}",
                self.level_intervals_ms.len(),
                SNAPSHOT_LEVEL - 1
            )));
        }
        if let Some(i) = self.level_intervals_ms.iter().position(|&ms| ms <= 0) {
            return Err(Error::Config(format!(
                "level {} needs a positive interval",
                i + 1
            )));
        }
        Ok(())
    }
}

/// What one [`compact`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompactionReport {
    /// Merged files written, lowest level first.
    pub written: Vec<FileInfo>,
    /// Files deleted by retention.
    pub deleted: Vec<FileInfo>,
}

/// One round: each level compacted if its interval allows, then level-0 and snapshot
/// retention. An error leaves the replica restorable (a merged file is written before
/// anything it covers is deleted); the next round starts over.
pub fn compact(
    client: &dyn ReplicaClient,
    policy: &CompactionPolicy,
    now_ms: i64,
) -> Result<CompactionReport, Error> {
    policy.check()?;
    let mut report = CompactionReport::default();
    for (i, &interval) in policy.level_intervals_ms.iter().enumerate() {
        let level = i as u32 + 1;
        if let Some(written) = compact_level(client, level, interval, now_ms)? {
            report.written.push(written);
        }
    }
    report
        .deleted
        .extend(enforce_l0_retention(client, policy.l0_retention_ms, now_ms)?);
    report.deleted.extend(enforce_snapshot_retention(
        client,
        policy.level_intervals_ms.len() as u32,
        policy.snapshot_retention_ms,
        now_ms,
    )?);
    Ok(report)
}

/// Litestream's `MaxLTXFileInfo`: the file with the greatest max TXID.
fn newest(files: &[FileInfo]) -> Option<&FileInfo> {
    files.iter().fold(None, |best: Option<&FileInfo>, f| match best {
        Some(b) if f.max_txid <= b.max_txid => Some(b),
        _ => Some(f),
    })
}

/// `Store.CompactDB` then `Compactor.Compact` for one level; `None` if it is too early or
/// there is nothing new.
pub fn compact_level(
    client: &dyn ReplicaClient,
    level: u32,
    interval_ms: i64,
    now_ms: i64,
) -> Result<Option<FileInfo>, Error> {
    if level == 0 || level >= SNAPSHOT_LEVEL || interval_ms <= 0 {
        return Err(Error::Config(format!(
            "level {level} with interval {interval_ms} ms cannot be compacted into"
        )));
    }
    let window_start = now_ms - now_ms.rem_euclid(interval_ms);
    let dst = client.list(level)?;
    let dst_newest = newest(&dst);
    if dst_newest.is_some_and(|f| f.timestamp_ms > window_start) {
        return Ok(None);
    }
    let dst_max = dst_newest.map_or(0, |f| f.max_txid);
    let src = client.list(level - 1)?;
    if newest(&src).is_none_or(|f| f.max_txid <= dst_max) {
        return Ok(None);
    }
    let sources: Vec<&FileInfo> = src.iter().filter(|f| f.min_txid > dst_max).collect();
    if sources.is_empty() {
        return Ok(None);
    }
    let mut files = Vec::with_capacity(sources.len());
    for info in &sources {
        let bytes = client.read(info)?;
        let file = LtxFile::decode_bytes(&bytes).map_err(|source| Error::Decode {
            path: format!("{} {info}", client.url()),
            source,
        })?;
        files.push(file);
    }
    let merged = merge(&files)?;
    client.write(level, &merged).map(Some)
}

/// superfly/ltx's `Compactor` with `HeaderFlagNoChecksum`: the files' pages merged, newest
/// wins.
pub fn merge(files: &[LtxFile]) -> Result<LtxFile, Error> {
    let (Some(first), Some(last)) = (files.first(), files.last()) else {
        return Err(Error::Invalid("at least one input file required".into()));
    };
    for pair in files.windows(2) {
        let (prev, next) = (&pair[0].header, &pair[1].header);
        if prev.page_size != next.page_size {
            return Err(Error::Invalid(format!(
                "input files have mismatched page sizes: {} != {}",
                prev.page_size, next.page_size
            )));
        }
        if !(next.min_txid <= prev.max_txid + 1 && next.max_txid > prev.max_txid) {
            return Err(Error::Invalid(format!(
                "non-contiguous transaction ids in input files: ({:016x},{:016x}) -> ({:016x},{:016x})",
                prev.min_txid, prev.max_txid, next.min_txid, next.max_txid
            )));
        }
    }
    let commit = last.header.commit;
    let mut pages: BTreeMap<u32, &[u8]> = BTreeMap::new();
    for f in files {
        for p in &f.pages {
            pages.insert(p.pgno, &p.data);
        }
    }
    let pages: Vec<Page> = pages
        .into_iter()
        .filter(|&(pgno, _)| pgno <= commit)
        .map(|(pgno, data)| Page {
            pgno,
            data: data.to_vec(),
        })
        .collect();
    let header = Header {
        flags: HEADER_FLAG_NO_CHECKSUM,
        page_size: first.header.page_size,
        commit,
        min_txid: first.header.min_txid,
        max_txid: last.header.max_txid,
        timestamp: last.header.timestamp,
        ..Header::default()
    };
    LtxFile::new(header, pages, 0)
}

/// `DB.EnforceL0RetentionByTime`.
pub fn enforce_l0_retention(
    client: &dyn ReplicaClient,
    retention_ms: i64,
    now_ms: i64,
) -> Result<Vec<FileInfo>, Error> {
    if retention_ms <= 0 {
        return Ok(Vec::new());
    }
    let Some(max_l1) = newest(&client.list(1)?).map(|f| f.max_txid) else {
        return Ok(Vec::new());
    };
    let threshold = now_ms - retention_ms;
    let l0 = client.list(0)?;
    let mut deleted = Vec::new();
    let mut processed_all = true;
    for f in &l0 {
        if f.timestamp_ms > threshold {
            processed_all = false;
            break;
        }
        if f.max_txid <= max_l1 {
            deleted.push(f.clone());
        }
    }
    if processed_all && deleted.last().is_some() && deleted.last() == l0.last() {
        deleted.pop();
    }
    client.delete(&deleted)?;
    Ok(deleted)
}

/// `Store.EnforceSnapshotRetention`: old snapshots but the newest, then in levels
/// `1..=max_level` what ends before the last deleted snapshot, each level's last file kept.
pub fn enforce_snapshot_retention(
    client: &dyn ReplicaClient,
    max_level: u32,
    retention_ms: i64,
    now_ms: i64,
) -> Result<Vec<FileInfo>, Error> {
    let threshold = now_ms - retention_ms;
    let snapshots = client.list(SNAPSHOT_LEVEL)?;
    let mut deleted: Vec<FileInfo> = snapshots
        .iter()
        .filter(|f| f.timestamp_ms < threshold)
        .cloned()
        .collect();
    if deleted.last().is_some() && deleted.last() == snapshots.last() {
        deleted.pop();
    }
    // The snapshot before the first one kept: files an in-flight restore from it may need
    // stay (Litestream's conservative floor).
    let floor = snapshots
        .iter()
        .position(|s| !deleted.contains(s))
        .filter(|&i| i > 0)
        .map_or(0, |i| snapshots[i - 1].max_txid);
    client.delete(&deleted)?;
    for level in 1..=max_level {
        let files = client.list(level)?;
        let mut old: Vec<FileInfo> = files.iter().filter(|f| f.max_txid < floor).cloned().collect();
        if old.last().is_some() && old.last() == files.last() {
            old.pop();
        }
        client.delete(&old)?;
        deleted.extend(old);
    }
    Ok(deleted)
}
