//! [`Follower`]: a store that follows a Litestream replica, one poll at a time.
//!
//! A poll, in order (each step's crash analysis beside it):
//! 1. Check that nobody else wrote the database since this follower's last commit (the
//!    database and the state are written by the same commits, so the database's last
//!    change is never later than the state's) — a follower's store is for readers only.
//! 2. List the replica, level 0 first and the snapshots last: compaction writes a merged
//!    file before retention deletes what it covers, so a listing in this order never
//!    misses both.
//! 3. Without a state yet: restore the latest state (the newest snapshot and the files that
//!    continue it) and commit it as the store's first transaction, with the state. A crash
//!    before that commit leaves a store with no logical file, which the next run fills.
//! 4. Else, while a file continues the TXID applied (`applied`): pick the next file —
//!    the level-0 file starting at `applied + 1` (the finest step), else the file of levels
//!    1–8 that covers `applied + 1` and reaches furthest (retention removed the level-0
//!    files: a merged file holds the newest version of every page its TXIDs changed, so
//!    applied over any state within its range it gives the state at its end), else the
//!    newest snapshot beyond `applied` (a gap, or a new history). Read and decode it (every
//!    checksum the file has), write its pages and the new state in **one store
//!    transaction**, commit (durable when it returns). A crash before the commit returns
//!    leaves the store at `applied` or at the file's end, and the state saying which: the
//!    next run resumes after it, so no file is applied twice or skipped.
//! 5. A replica whose newest TXID is behind `applied` is not the history this store
//!    follows (deleted, replaced, restored elsewhere): an error, never a silent rewind.
//!
//! One follower per store: it holds a lease on the store (a lock its death lets go).

use std::path::{Path, PathBuf};

use onesync_ltx::client::{FileInfo, ReplicaClient, SNAPSHOT_LEVEL};
use onesync_ltx::replica::{now_ms, sqlite_page_size};
use onesync_ltx::restore::{restore, Target};
use onesync_ltx::LtxFile;
use onesync_store::{Options, Store, Transaction};

use crate::apply::{apply, is_whole, Database};
use crate::error::Error;
use crate::state::{FollowState, DATABASE_FILE, STATE_FILE};

/// The store's page size, as the VFS makes stores.
pub const STORE_PAGE_SIZE: u32 = 4096;

/// One step a poll applied: a file (or, for the first, a whole restore).
#[derive(Debug, Clone)]
pub struct Applied {
    /// The file applied; for the first restore, the last file of its plan.
    pub file: FileInfo,
    /// Files the step applied: 1, or the first restore's plan's length.
    pub files: usize,
    /// SQLite pages written.
    pub pages: usize,
    /// Whether it replaced the whole database (a snapshot, a restore, a new generation).
    pub whole: bool,
    /// The state the store holds after it (`state.txid`, `state.lag_ms`, ...).
    pub state: FollowState,
}

/// What one poll did and found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Poll {
    pub applied: usize,
    /// The newest TXID the replica listed.
    pub replica_txid: u64,
    /// Why nothing more applies although the replica goes further (a gap with no newer
    /// snapshot), or that the replica is still empty.
    pub stalled: Option<String>,
}

/// A store following a replica. See the module's notes for a poll's steps.
pub struct Follower {
    path: PathBuf,
    store: Store,
    client: Box<dyn ReplicaClient>,
    url: String,
    state: Option<FollowState>,
}

/// The store lease a follower holds (FNV-1a of the state file's name, in the store's
/// replication lease range: a shipper's key names its logical file, `main`).
fn lease_key() -> u64 {
    STATE_FILE.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn store_options() -> Options {
    Options {
        page_size: STORE_PAGE_SIZE,
        // As the VFS opens stores: growth steps that a commit's flush never queues long behind.
        max_growth_step: 8 << 20,
        ..Options::default()
    }
}

impl Follower {
    /// Follows `url` (`file:///DIR`, `s3://BUCKET/PREFIX?...`) into the store at `path`:
    /// created if missing; an existing one must be this replica's follower (it resumes).
    pub fn open(path: &Path, url: &str) -> Result<Follower, Error> {
        Follower::with_client(path, onesync_ltx::client::open(url)?)
    }

    /// [`Follower::open`] with a client of the caller's.
    pub fn with_client(path: &Path, client: Box<dyn ReplicaClient>) -> Result<Follower, Error> {
        let url = client.url();
        let store = if std::fs::symlink_metadata(path).is_ok() {
            Store::open(path, &store_options())?
        } else {
            Store::create(path, &store_options())?
        };
        if !store.try_lock_replication(lease_key())? {
            return Err(Error::Usage(format!(
                "another process follows a replica into {} already",
                path.display()
            )));
        }
        let snap = store.try_latest_snapshot()?;
        let state = FollowState::read(&snap)?;
        match &state {
            Some(s) if s.url != url => {
                return Err(Error::Usage(format!(
                    "{} follows {}, not {url}",
                    path.display(),
                    s.url
                )))
            }
            None if !snap.files().is_empty() => {
                return Err(Error::Usage(format!(
                    "{} is a store that follows no replica (it has no {STATE_FILE} file)",
                    path.display()
                )))
            }
            _ => {}
        }
        drop(snap);
        Ok(Follower {
            path: path.to_owned(),
            store,
            client,
            url,
            state,
        })
    }

    /// What the store holds (`None` until the first restore).
    pub fn state(&self) -> Option<&FollowState> {
        self.state.as_ref()
    }

    /// The replica's URL as its client names it.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Applies what the replica holds beyond the store, in TXID order, each file one
    /// transaction; `on_applied` is told of each once it is durable. On an error the store
    /// holds every step reported so far and nothing of the failed one
    /// ([`Error::is_transient`]: try again at the next poll).
    pub fn poll(&mut self, on_applied: &mut dyn FnMut(&Applied)) -> Result<Poll, Error> {
        self.check_unchanged()?;
        let mut listing = Vec::new();
        for level in 0..=SNAPSHOT_LEVEL {
            listing.extend(self.client.list(level)?);
        }
        let newest = listing.iter().map(|f| f.max_txid).max().unwrap_or(0);
        let mut poll = Poll {
            replica_txid: newest,
            ..Poll::default()
        };
        let Some(mut applied) = self.state.as_ref().map(|s| s.txid) else {
            if listing.is_empty() {
                poll.stalled = Some(format!("{} holds no LTX files yet", self.url));
            } else {
                // Its own listing may be newer than ours: the next poll lists again.
                on_applied(&self.restore_first()?);
                poll.applied = 1;
            }
            return Ok(poll);
        };
        if newest < applied {
            return Err(Error::Diverged(format!(
                "{} lists TXIDs up to {newest:016x}, behind the {applied:016x} that {} holds: it is \
                 not the history this store follows (a replica deleted or replaced); restore anew",
                self.url,
                self.path.display()
            )));
        }
        loop {
            match next_file(&listing, applied) {
                Next::File(info) => {
                    let step = self.apply_file(&info)?;
                    applied = step.state.txid;
                    on_applied(&step);
                    poll.applied += 1;
                }
                Next::CaughtUp => break,
                Next::Stalled(why) => {
                    poll.stalled = Some(why);
                    break;
                }
            }
        }
        Ok(poll)
    }

    /// Step 1: refuses a store whose database changed after this follower's last commit.
    fn check_unchanged(&self) -> Result<(), Error> {
        let snap = self.store.try_latest_snapshot()?;
        if let (Some(db), Some(state)) = (
            snap.file_changed_at(DATABASE_FILE),
            snap.file_changed_at(STATE_FILE),
        ) {
            if db > state {
                return Err(Error::Diverged(format!(
                    "the database in {} was changed by another writer (commit {db}) after this \
                     follower's last (commit {state}); a follower's store is for readers (mode=ro)",
                    self.path.display()
                )));
            }
        }
        let held = FollowState::read(&snap)?;
        if held.as_ref().map(|s| s.txid) != self.state.as_ref().map(|s| s.txid) {
            return Err(Error::Diverged(format!(
                "{}'s follow state changed under this follower",
                self.path.display()
            )));
        }
        Ok(())
    }

    /// Step 3: the latest state restored, as the store's first transaction.
    fn restore_first(&mut self) -> Result<Applied, Error> {
        let r = restore(self.client.as_ref(), Target::Latest)?;
        let last = r.plan.last().cloned().ok_or_else(|| {
            Error::Replica(onesync_ltx::Error::Restore(format!(
                "no LTX files in {}",
                self.url
            )))
        })?;
        let page_size = sqlite_page_size(&r.db)?;
        let sps = STORE_PAGE_SIZE as usize;
        let mut txn = self.store.begin();
        let main = match txn.file(DATABASE_FILE) {
            Some(f) => f,
            None => txn.create_file(DATABASE_FILE)?,
        };
        txn.set_file_size(main, 0)?;
        for (i, chunk) in r.db.chunks(sps).enumerate() {
            let mut page = vec![0u8; sps];
            page[..chunk.len()].copy_from_slice(chunk);
            txn.write_page(main, i as u64, &page)?;
        }
        txn.set_file_size(main, r.db.len() as u64)?;
        let state = self.next_state(
            &last,
            r.txid,
            page_size,
            last.timestamp_ms,
            r.plan.len() as u64,
            true,
        );
        self.commit(txn, &state)?;
        Ok(Applied {
            files: r.plan.len(),
            pages: r.db.len() / page_size as usize,
            whole: true,
            file: last,
            state,
        })
    }

    /// Step 4: one file, one transaction.
    fn apply_file(&mut self, info: &FileInfo) -> Result<Applied, Error> {
        let name = format!("{} {info}", self.url);
        let bytes = self.client.read(info)?;
        let file = LtxFile::decode_bytes(&bytes).map_err(|source| onesync_ltx::Error::Decode {
            path: name.clone(),
            source,
        })?;
        let h = file.header;
        if (h.min_txid, h.max_txid) != (info.min_txid, info.max_txid) {
            return Err(Error::Diverged(format!(
                "{name} holds TXIDs {:016x}-{:016x}",
                h.min_txid, h.max_txid
            )));
        }
        let mut txn = self.store.begin();
        let main = match txn.file(DATABASE_FILE) {
            Some(f) => f,
            None => txn.create_file(DATABASE_FILE)?,
        };
        let current = match &self.state {
            Some(s) => Some(Database {
                page_size: s.page_size,
                pages: txn.file_size(main)? / u64::from(s.page_size),
            }),
            None => None,
        };
        apply(&mut txn, main, u64::from(STORE_PAGE_SIZE), current, &file, &name)?;
        let whole = is_whole(&file);
        let state = self.next_state(info, h.max_txid, h.page_size, h.timestamp, 1, whole);
        self.commit(txn, &state)?;
        Ok(Applied {
            file: info.clone(),
            files: 1,
            pages: file.pages.len(),
            whole,
            state,
        })
    }

    fn next_state(
        &self,
        file: &FileInfo,
        txid: u64,
        page_size: u32,
        timestamp: i64,
        files: u64,
        whole: bool,
    ) -> FollowState {
        let now = now_ms();
        let before = self.state.as_ref();
        FollowState {
            url: self.url.clone(),
            txid,
            page_size,
            level: file.level,
            min_txid: file.min_txid,
            file_timestamp_ms: timestamp,
            applied_at_ms: now,
            lag_ms: now - timestamp,
            files_applied: before.map_or(0, |s| s.files_applied) + files,
            images_applied: before.map_or(0, |s| s.images_applied) + u64::from(whole),
        }
    }

    /// Writes the state into `txn` and commits it (durable when this returns); only then is
    /// the state this follower's.
    fn commit(&mut self, mut txn: Transaction, state: &FollowState) -> Result<(), Error> {
        state.write(&mut txn, STORE_PAGE_SIZE as usize)?;
        txn.commit().map_err(onesync_store::Error::from)?;
        self.state = Some(state.clone());
        Ok(())
    }

    /// Closes the store (a checkpoint when no other process has it open read-write).
    pub fn close(self) -> Result<(), Error> {
        self.store.unlock_replication(lease_key());
        self.store.close()?;
        Ok(())
    }
}

enum Next {
    File(FileInfo),
    CaughtUp,
    Stalled(String),
}

/// Step 4's choice of the file after TXID `applied`.
fn next_file(listing: &[FileInfo], applied: u64) -> Next {
    let continues =
        |f: &&FileInfo| f.level < SNAPSHOT_LEVEL && f.min_txid <= applied + 1 && f.max_txid > applied;
    let exact = listing
        .iter()
        .filter(continues)
        .filter(|f| f.min_txid == applied + 1)
        .min_by_key(|f| (f.level, std::cmp::Reverse(f.max_txid)));
    let covering = || {
        listing
            .iter()
            .filter(continues)
            .max_by_key(|f| (f.max_txid, f.level))
    };
    let snapshot = || {
        listing
            .iter()
            .filter(|f| f.level == SNAPSHOT_LEVEL && f.max_txid > applied)
            .max_by_key(|f| f.max_txid)
    };
    if let Some(f) = exact.or_else(covering).or_else(snapshot) {
        return Next::File(f.clone());
    }
    match listing
        .iter()
        .filter(|f| f.min_txid > applied + 1)
        .min_by_key(|f| f.min_txid)
    {
        Some(gap) => Next::Stalled(format!(
            "no file continues TXID {applied:016x} (the next, {gap}, starts at {:016x}) and no \
             snapshot is newer: waiting for one",
            gap.min_txid
        )),
        None => Next::CaughtUp,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(level: u32, min: u64, max: u64) -> FileInfo {
        FileInfo {
            level,
            min_txid: min,
            max_txid: max,
            size: 0,
            timestamp_ms: 0,
        }
    }

    fn pick(listing: &[FileInfo], applied: u64) -> Option<(u32, u64, u64)> {
        match next_file(listing, applied) {
            Next::File(f) => Some((f.level, f.min_txid, f.max_txid)),
            _ => None,
        }
    }

    #[test]
    fn the_next_file_is_the_finest_that_continues_else_a_covering_one_else_a_snapshot() {
        let l = [f(0, 5, 5), f(0, 6, 6), f(1, 3, 6), f(9, 1, 4)];
        assert_eq!(pick(&l, 4), Some((0, 5, 5)), "level 0 first");
        assert_eq!(
            pick(&l, 2),
            Some((1, 3, 6)),
            "level 0 gone: the merged file covering 3"
        );
        assert_eq!(pick(&l, 3), Some((1, 3, 6)));
        assert_eq!(pick(&l, 6), None, "caught up");
        let gap = [f(0, 8, 8), f(9, 1, 4)];
        assert!(
            matches!(next_file(&gap, 5), Next::Stalled(_)),
            "a gap and no newer snapshot"
        );
        let gap = [f(0, 8, 8), f(9, 1, 7)];
        assert_eq!(pick(&gap, 5), Some((9, 1, 7)), "a gap: the newer snapshot");
        assert_eq!(pick(&gap, 7), Some((0, 8, 8)));
    }
}
