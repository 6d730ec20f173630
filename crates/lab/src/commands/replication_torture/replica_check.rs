//! The checks `replication-torture` makes of the replica after kills:
//! - **no gap, no duplicate**: in every level 0–8, the files continue each other's TXIDs
//!   exactly (sorted by min TXID, each starts right after the one before: an overlap is a
//!   TXID twice, a hole a gap); every snapshot (level 9) starts at TXID 1; a file once seen
//!   never changes (its bytes are hashed when first seen, its size compared at each check,
//!   its bytes again at the end): a TXID written twice shows;
//! - **restore succeeds**: onesync's `restore` of the latest state;
//! - **a consistent prefix**: the restored `log`, replayed in commit order, gives the
//!   restored `t`; its rows are in the order each writer made them; and it is a prefix of
//!   the store's final `log` (checked at the end, from a fingerprint of each restore);
//! - **every commit reported shipped is there**: each commit a writer printed with its seq
//!   at or below a `shipped_seq` read before the restore began;
//! - **every commit a sync writer acknowledged is there**: each `acked W N SEQ` printed
//!   before the restore began, whatever its seq (its COMMIT returned once the replica held
//!   it), and no COMMIT a sync writer reported refused (nothing of it was written).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use onesync_ltx::client::{FileInfo, ReplicaClient};
use onesync_ltx::restore::{restore, Target};
use rusqlite::{Connection, OpenFlags};

use super::ledger::Expect;
use super::writer::effect;

/// A `log` row: (id, w, n).
pub type LogRow = (u64, u64, u64);

/// What the checks remember between kills.
#[derive(Default, Clone)]
pub struct ReplicaChecker {
    /// Each file seen: its size and the hash of its bytes when first read.
    seen: HashMap<(u32, u64, u64), (u64, u64)>,
    /// Each restore's log length and fingerprint, for the prefix check at the end.
    prefixes: Vec<(usize, u64)>,
    pub restores: u64,
    pub files_hashed: u64,
    /// The newest TXID a restore reached.
    pub newest_txid: u64,
    /// Listings and restores that failed once and passed when done again (the shipper's
    /// retention deleted a file while it was listed or read).
    pub retried: u64,
}

/// How often a listing or restore that fails is done again before the failure counts: a
/// directory read or an object listing while retention deletes the oldest files can miss
/// one in the middle, and a restore can plan a file retention deletes before it is read.
/// A real gap or a lost commit fails every time.
const ATTEMPTS: u32 = 3;

/// FNV-1a over bytes.
fn fnv(bytes: &[u8], mut h: u64) -> u64 {
    for b in bytes {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    h
}
const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

fn fingerprint(log: &[LogRow]) -> u64 {
    log.iter().fold(FNV_START, |h, (id, w, n)| {
        fnv(&[id.to_le_bytes(), w.to_le_bytes(), n.to_le_bytes()].concat(), h)
    })
}

/// What a restore held.
pub struct Restored {
    pub txid: u64,
    pub log: Vec<LogRow>,
    pub t: BTreeMap<u64, String>,
    pub bytes: Vec<u8>,
}

impl ReplicaChecker {
    /// Lists every level and checks TXIDs (gap, duplicate, a file changed since seen).
    pub fn check_files(&mut self, client: &dyn ReplicaClient) -> Result<usize> {
        let mut count = 0;
        for level in 0..=9u32 {
            let files = self.again_on_failure(|| {
                let files = client
                    .list(level)
                    .with_context(|| format!("listing level {level}"))?;
                check_level(level, &files)?;
                Ok(files)
            })?;
            count += files.len();
            for f in &files {
                self.note(client, f)?;
            }
        }
        Ok(count)
    }

    /// `attempt`, done again (after a pause) while it fails, [`ATTEMPTS`] times at most.
    fn again_on_failure<T>(&mut self, mut attempt: impl FnMut() -> Result<T>) -> Result<T> {
        let mut tries = 1;
        loop {
            match attempt() {
                Err(e) if tries >= ATTEMPTS => return Err(e),
                Err(_) => {
                    tries += 1;
                    self.retried += 1;
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                ok => return ok,
            }
        }
    }

    /// Hashes a file the first time it is seen; a later size other than the first is a
    /// TXID written twice.
    fn note(&mut self, client: &dyn ReplicaClient, f: &FileInfo) -> Result<()> {
        let key = (f.level, f.min_txid, f.max_txid);
        match self.seen.get(&key) {
            Some(&(size, _)) if size != f.size => {
                bail!(
                    "{f} was written twice: {size} bytes when first seen, {} now",
                    f.size
                )
            }
            Some(_) => Ok(()),
            None => {
                // Deleted (compaction's retention) between the listing and the read: fine.
                let Ok(bytes) = client.read(f) else { return Ok(()) };
                self.files_hashed += 1;
                self.seen
                    .insert(key, (bytes.len() as u64, fnv(&bytes, FNV_START)));
                Ok(())
            }
        }
    }

    /// Reads every file still there again: each must hold the bytes it held when first seen.
    pub fn recheck_contents(&self, client: &dyn ReplicaClient) -> Result<usize> {
        let mut checked = 0;
        for level in 0..=9u32 {
            for f in client.list(level)? {
                let Some(&(_, hash)) = self.seen.get(&(f.level, f.min_txid, f.max_txid)) else {
                    continue;
                };
                let bytes = client.read(&f)?;
                if fnv(&bytes, FNV_START) != hash {
                    bail!("{f} was written twice: its bytes changed since first seen");
                }
                checked += 1;
            }
        }
        Ok(checked)
    }

    /// Restores the latest state and checks it: a consistent prefix holding what `expect`
    /// (made before this call) says it must, and no refused COMMIT.
    pub fn check_restore(
        &mut self,
        client: &dyn ReplicaClient,
        scratch: &Path,
        expect: &Expect,
    ) -> Result<Restored> {
        let restored = self.again_on_failure(|| {
            restore(client, Target::Latest).map_err(|e| anyhow!("restore failed ({ATTEMPTS} times): {e}"))
        })?;
        std::fs::write(scratch, &restored.db).with_context(|| format!("writing {}", scratch.display()))?;
        let (t, log) = read_plain(scratch)?;
        check_consistent(&t, &log).with_context(|| format!("the restore at TXID {}", restored.txid))?;
        let have: HashSet<(u64, u64)> = log.iter().map(|&(_, w, n)| (w, n)).collect();
        if let Some(what) = expect.broken_by(&have) {
            bail!(
                "{what} the restore at TXID {} lacks it ({} log rows)",
                restored.txid,
                log.len()
            );
        }
        if let Some((w, n)) = expect.refused_in(&have) {
            bail!(
                "a sync writer's COMMIT of {w}.{n} was refused (nothing written) but the restore \
                 at TXID {} holds it",
                restored.txid
            );
        }
        self.restores += 1;
        self.newest_txid = self.newest_txid.max(restored.txid);
        self.prefixes.push((log.len(), fingerprint(&log)));
        Ok(Restored {
            txid: restored.txid,
            log,
            t,
            bytes: restored.db,
        })
    }

    /// Every restore's log was a prefix of `final_log` (the store's, at the end).
    pub fn check_prefixes(&self, final_log: &[LogRow]) -> Result<()> {
        let mut at: BTreeMap<usize, u64> = BTreeMap::new();
        for &(len, _) in &self.prefixes {
            if len > final_log.len() {
                bail!(
                    "a restore held {len} log rows, more than the store's {}",
                    final_log.len()
                );
            }
            at.insert(len, 0);
        }
        let mut h = FNV_START;
        if let Some(v) = at.get_mut(&0) {
            *v = h;
        }
        for (i, (id, w, n)) in final_log.iter().enumerate() {
            h = fnv(&[id.to_le_bytes(), w.to_le_bytes(), n.to_le_bytes()].concat(), h);
            if let Some(v) = at.get_mut(&(i + 1)) {
                *v = h;
            }
        }
        for (k, &(len, print)) in self.prefixes.iter().enumerate() {
            if at[&len] != print {
                bail!(
                    "restore {} ({len} log rows) is not a prefix of the store's log",
                    k + 1
                );
            }
        }
        Ok(())
    }
}

/// A restore's `log` (at TXID `txid`) is a prefix of `store`'s: the replica holds nothing
/// the store lacks, in the store's order.
pub fn check_is_prefix(restored: &[LogRow], txid: u64, store: &[LogRow]) -> Result<()> {
    let at = restored.iter().zip(store).position(|(r, s)| r != s);
    let row = match at {
        Some(i) => i,
        None if restored.len() <= store.len() => return Ok(()),
        None => store.len(),
    };
    let (id, w, n) = restored[row];
    bail!(
        "the replica runs ahead of the store: the restore at TXID {txid} ({} log rows) holds \
         {w}.{n} as log row {id}, where the store ({} log rows) has {}",
        restored.len(),
        store.len(),
        store
            .get(row)
            .map_or("nothing".to_owned(), |&(_, w, n)| format!("{w}.{n}"))
    )
}

/// One level's files (sorted by TXIDs) continue each other: no overlap (a TXID twice), no
/// gap; a snapshot starts at TXID 1.
fn check_level(level: u32, files: &[FileInfo]) -> Result<()> {
    if level == 9 {
        if let Some(f) = files.iter().find(|f| f.min_txid != 1) {
            bail!("a snapshot that does not start at TXID 1: {f}");
        }
        return Ok(());
    }
    for pair in files.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        if b.min_txid <= a.max_txid {
            bail!(
                "duplicate TXIDs at level {level}: {} overlaps {}",
                b.name(),
                a.name()
            );
        }
        if b.min_txid != a.max_txid + 1 {
            bail!("a gap at level {level}: {} then {}", a.name(), b.name());
        }
    }
    Ok(())
}

/// `t` (values up to their `:`) and `log` in commit order, of a plain SQLite file, after
/// its integrity check.
pub fn read_plain(path: &Path) -> Result<(BTreeMap<u64, String>, Vec<LogRow>)> {
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .with_context(|| format!("opening {}", path.display()))?;
    read_tables(&conn)
}

/// [`read_plain`] on an open connection.
pub fn read_tables(conn: &Connection) -> Result<(BTreeMap<u64, String>, Vec<LogRow>)> {
    crate::sqlite::check_integrity(conn)?;
    let t = conn
        .prepare("SELECT k, v FROM t ORDER BY k")?
        .query_map([], |r| {
            let v: String = r.get(1)?;
            Ok((
                r.get::<_, i64>(0)? as u64,
                v.split(':').next().unwrap_or_default().to_owned(),
            ))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let log = conn
        .prepare("SELECT id, w, n FROM log ORDER BY id")?
        .query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)? as u64,
                r.get::<_, i64>(1)? as u64,
                r.get::<_, i64>(2)? as u64,
            ))
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok((t, log))
}

/// The state is one the transactions reach in commit order: each writer's rows in its own
/// order, and replaying the log gives `t`.
pub fn check_consistent(t: &BTreeMap<u64, String>, log: &[LogRow]) -> Result<()> {
    let mut expect: BTreeMap<u64, String> = BTreeMap::new();
    let mut last_n: HashMap<u64, u64> = HashMap::new();
    for &(_, w, n) in log {
        if let Some(prev) = last_n.insert(w, n) {
            if prev >= n {
                bail!("writer {w}'s transaction {n} comes after its {prev} in the log");
            }
        }
        let (put, del) = effect(w, n);
        expect.insert(put, format!("{w}.{n}"));
        if del != put {
            expect.remove(&del);
        }
    }
    if &expect != t {
        let differ = expect
            .iter()
            .find(|(k, v)| t.get(k) != Some(v))
            .map(|(k, v)| format!("key {k}: the log gives {v:?}, t holds {:?}", t.get(k)))
            .or_else(|| {
                t.keys()
                    .find(|k| !expect.contains_key(k))
                    .map(|k| format!("key {k} should be gone"))
            })
            .unwrap_or_default();
        bail!(
            "not a consistent prefix: t is not what its {} log rows give ({differ})",
            log.len()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checks can fail: a skipped transaction, rows out of order and a changed value
    /// are each caught.
    #[test]
    fn an_inconsistent_state_is_caught() {
        let log: Vec<LogRow> = (0..30).map(|i| (i + 1, i % 3, i / 3)).collect();
        let mut t = BTreeMap::new();
        for &(_, w, n) in &log {
            let (put, del) = effect(w, n);
            t.insert(put, format!("{w}.{n}"));
            if del != put {
                t.remove(&del);
            }
        }
        check_consistent(&t, &log).unwrap();
        let mut skipped = log.clone();
        skipped.remove(29);
        assert!(check_consistent(&t, &skipped).is_err());
        let mut swapped = log.clone();
        swapped.swap(0, 3);
        assert!(check_consistent(&t, &swapped).is_err());
        let mut other = t.clone();
        other.insert(KEY_NOT_WRITTEN, "9.9".into());
        assert!(check_consistent(&other, &log).is_err());
        let mut checker = ReplicaChecker::default();
        checker.prefixes.push((10, fingerprint(&log[..10])));
        checker.check_prefixes(&log).unwrap();
        checker.prefixes.push((5, fingerprint(&swapped[..5])));
        assert!(checker.check_prefixes(&log).is_err());
    }

    const KEY_NOT_WRITTEN: u64 = 1_000;
}
