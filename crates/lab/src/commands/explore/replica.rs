//! The checks of the replicating scenarios (`Scenario::replicated`): the replica in the
//! run's `replica/` (remote: a power cut leaves it as it was at that instant) and the store's
//! replication position `bank.onesync-replica-main` (local, saved without a flush: a power
//! cut may lose it), after a process crash and after each power cut:
//! 1. the replica's files continue each other's TXIDs in every level, every snapshot starts
//!    at TXID 1, and a file written before the crash point holds the same bytes after it
//!    (a TXID written twice shows); its restore succeeds (or it holds no file yet);
//! 2. the restored database passes the bank's checks and is a prefix of the store's state
//!    after the crash: its ledger is the store's first rows, each the same;
//! 3. it holds every transfer a process in synchronous replication acknowledged;
//! 4. a fresh connection replicating the store, closed, ships what the replica lacks:
//!    then its restore is the store's database, byte for byte, and the files before stay as
//!    they were. With the position as the crash left it, and (after the first power cut of
//!    each crash point) lost.
//!
//! Each check starts from the files as the run left them (kept aside by [`Replicated::take`]),
//! the store rewritten in place (its inode is the position's identity of the store).

use std::cell::Cell;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use onesync_ltx::client::file::FileClient;
use onesync_ltx::restore::{restore, Target};
use onesync_store::{Options, Store};
use rusqlite::{Connection, OpenFlags};

use super::check::{violation, Clause, Violation};
use super::scenario::{Replica, Scenario};
use super::store::{
    explore_options, open_replicated, open_store, remove_side_files, replica_url, REPLICA_DIR,
};
use crate::commands::replication_torture::replica_check::ReplicaChecker;
use crate::workloads::bank;

/// Where a run's replica and position are kept as they were at its crash point ...
const AT_CUT: &str = "replica-at-cut";
/// ... and as the run left them.
const AT_END: &str = "replica-at-end";
/// The restored database, for SQLite to open.
const RESTORED: &str = "replica-restored.db";

/// A ledger row: rowid, transfer id, from, to, amount.
type Row = (i64, String, i64, i64, i64);

/// Copies the replica and the position files of `dir` into `dir/to` (afresh).
fn copy_state(dir: &Path, to: &Path) -> Result<()> {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to)?;
    copy_tree(&dir.join(REPLICA_DIR), &to.join(REPLICA_DIR))?;
    for (from, name) in positions(dir)? {
        std::fs::copy(from, to.join(name))?;
    }
    Ok(())
}

/// The position files in `dir` (`bank.onesync-replica-<logical>`, its `.tmp` too).
fn positions(dir: &Path) -> Result<Vec<(PathBuf, std::ffi::OsString)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_string_lossy().starts_with("bank") && name.to_string_lossy().contains("-replica-") {
            out.push((entry.path(), name));
        }
    }
    Ok(out)
}

/// Copies a directory tree, keeping each file's modification time (a file replica's
/// files are dated by it). A missing `from` copies nothing.
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    let entries = match std::fs::read_dir(from) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("listing {}", from.display())),
    };
    std::fs::create_dir_all(to)?;
    for entry in entries {
        let entry = entry?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if entry.file_type()?.is_dir() {
            copy_tree(&src, &dst)?;
        } else {
            std::fs::copy(&src, &dst)?;
            let modified = entry.metadata()?.modified()?;
            std::fs::File::options()
                .write(true)
                .open(&dst)?
                .set_modified(modified)?;
        }
    }
    Ok(())
}

/// At a crash point (the stopped process not killed yet, the others waiting): keeps the
/// replica and the position as a power cut at that instant would leave them.
pub fn keep_at_cut(dir: &Path) -> Result<()> {
    copy_state(dir, &dir.join(AT_CUT))
}

/// A replicating run's files, kept for its checks.
pub struct Replicated {
    dir: PathBuf,
    store: PathBuf,
    /// The store file as the run left it.
    store_bytes: Vec<u8>,
    /// The run was stopped at a crash point, and its replica kept there.
    at_cut: bool,
    /// The processes in synchronous replication.
    sync_names: Vec<char>,
    /// The position lost was checked after a power cut (once a crash point is enough: the
    /// store's image hardly changes what a new generation ships).
    lost_checked: Cell<bool>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum PositionFile {
    Kept,
    Lost,
}

impl Replicated {
    /// Keeps the run's files in `dir` (the store at `store`) as it left them.
    pub fn take(dir: &Path, store: &Path, scenario: &Scenario) -> Result<Replicated> {
        copy_state(dir, &dir.join(AT_END))?;
        Ok(Replicated {
            dir: dir.to_owned(),
            store: store.to_owned(),
            store_bytes: std::fs::read(store).with_context(|| format!("reading {}", store.display()))?,
            at_cut: dir.join(AT_CUT).is_dir(),
            sync_names: scenario
                .procs
                .iter()
                .filter(|p| p.replica == Replica::Sync)
                .map(|p| p.name)
                .collect(),
            lost_checked: Cell::new(false),
        })
    }

    /// Puts the store file back as the run left it (in place: the same inode).
    pub fn restore_store(&self) -> Result<()> {
        std::fs::write(&self.store, &self.store_bytes)?;
        remove_side_files(&self.dir);
        Ok(())
    }

    /// After a power cut at the crash point: the store is `image`, the replica as it was at
    /// that instant, the position kept (and, at the first power cut, lost). `acks`: the
    /// transfers acknowledged before.
    pub fn check_power_cut(&self, image: &[u8], acks: &[String]) -> Option<Violation> {
        let kept = if self.at_cut { AT_CUT } else { AT_END };
        let variants = match self.lost_checked.replace(true) {
            false => &[PositionFile::Kept, PositionFile::Lost][..],
            true => &[PositionFile::Kept],
        };
        self.check(image, kept, acks, variants)
    }

    /// After the process crash: every file as the run left it. `acks`: every transfer
    /// acknowledged in the run.
    pub fn check_process_crash(&self, acks: &[String]) -> Option<Violation> {
        let found = self.check(&self.store_bytes, AT_END, acks, &[PositionFile::Kept]);
        // As the run left it, for a run kept to look at.
        let restored = self.restore_store().err();
        found.or_else(|| restored.map(|e| violation(Clause::Open, format!("{e:#}"))))
    }

    fn check(
        &self,
        image: &[u8],
        kept: &str,
        acks: &[String],
        variants: &[PositionFile],
    ) -> Option<Violation> {
        let run = || -> Result<Option<Violation>> {
            self.put(image, kept, PositionFile::Kept)?;
            let client = FileClient::new(self.dir.join(REPLICA_DIR));
            let mut checker = ReplicaChecker::default();
            if let Some(v) = self.check_replica(&mut checker, &client, kept, acks)? {
                return Ok(Some(v));
            }
            for &variant in variants {
                self.put(image, kept, variant)?;
                // Each resumes from the same files: what one wrote, the next may write anew.
                if let Some(v) = self.resume(&mut checker.clone(), &client)? {
                    let lost = if variant == PositionFile::Lost {
                        " (the position file lost)"
                    } else {
                        ""
                    };
                    return Ok(Some(Violation {
                        detail: format!("{}{lost}", v.detail),
                        ..v
                    }));
                }
            }
            Ok(None)
        };
        run().unwrap_or_else(|e| Some(violation(Clause::Open, format!("checking the replica: {e:#}"))))
    }

    /// The store as `image` (in place), the replica and the position as kept in `kept`
    /// (the position only if `position` says so).
    fn put(&self, image: &[u8], kept: &str, position: PositionFile) -> Result<()> {
        std::fs::write(&self.store, image)?;
        remove_side_files(&self.dir);
        let replica = self.dir.join(REPLICA_DIR);
        let _ = std::fs::remove_dir_all(&replica);
        copy_tree(&self.dir.join(kept).join(REPLICA_DIR), &replica)?;
        for (path, _) in positions(&self.dir)? {
            std::fs::remove_file(path)?;
        }
        if position == PositionFile::Kept {
            for (path, name) in positions(&self.dir.join(kept))? {
                std::fs::copy(path, self.dir.join(name))?;
            }
        }
        Ok(())
    }

    /// Checks 1 to 3 of the module's.
    fn check_replica(
        &self,
        checker: &mut ReplicaChecker,
        client: &FileClient,
        kept: &str,
        acks: &[String],
    ) -> Result<Option<Violation>> {
        // The files at the crash point first: each must be unchanged at the end.
        let mut listed = Ok(0);
        if kept == AT_END && self.at_cut {
            listed = checker.check_files(&FileClient::new(self.dir.join(AT_CUT).join(REPLICA_DIR)));
        }
        let listed = listed
            .and_then(|_| checker.check_files(client))
            .and_then(|_| checker.recheck_contents(client));
        if let Err(e) = listed {
            return Ok(Some(violation(Clause::ReplicaRestore, format!("{e:#}"))));
        }
        let store_rows = ledger(&open_store(&self.store, false)?)?;
        let restored = match self.restored(client) {
            Ok(r) => r,
            Err(e) => return Ok(Some(violation(Clause::ReplicaRestore, format!("{e:#}")))),
        };
        let rows = match restored {
            None => Vec::new(),
            Some((txid, _)) => {
                let conn =
                    crate::sqlite::open_plain(&self.dir.join(RESTORED), OpenFlags::SQLITE_OPEN_READ_ONLY)?;
                if let Err(e) = bank::audit(&conn, true, &[]) {
                    return Ok(Some(violation(
                        Clause::ReplicaState,
                        format!("TXID {txid}: {e:#}"),
                    )));
                }
                let rows = ledger(&conn)?;
                if let Some(detail) = not_a_prefix(&rows, &store_rows) {
                    return Ok(Some(violation(
                        Clause::ReplicaState,
                        format!("the restore at TXID {txid} is not a prefix of the store: {detail}"),
                    )));
                }
                rows
            }
        };
        let sync_acks = acks
            .iter()
            .filter(|id| id.chars().next().is_some_and(|c| self.sync_names.contains(&c)));
        for id in sync_acks {
            if !rows.iter().any(|r| &r.1 == id) {
                return Ok(Some(violation(
                    Clause::ReplicaAcknowledged,
                    format!(
                        "transfer {id} was acknowledged in synchronous replication but the replica \
                         lacks it ({} ledger rows)",
                        rows.len()
                    ),
                )));
            }
        }
        Ok(None)
    }

    /// The replica's latest state written to [`RESTORED`], with its TXID and bytes; `None`
    /// while it holds no file.
    fn restored(&self, client: &FileClient) -> Result<Option<(u64, Vec<u8>)>> {
        if onesync_ltx::restore::max_txid(client)?.is_none() {
            return Ok(None);
        }
        let restored = restore(client, Target::Latest).map_err(|e| anyhow!("restore: {e}"))?;
        std::fs::write(self.dir.join(RESTORED), &restored.db)?;
        Ok(Some((restored.txid, restored.db)))
    }

    /// Check 4 of the module's: a connection replicating the store, closed, leaves the
    /// replica equal to the store.
    fn resume(&self, checker: &mut ReplicaChecker, client: &FileClient) -> Result<Option<Violation>> {
        {
            let conn = open_replicated(&self.store, &replica_url(&self.dir), false)?;
            conn.query_row("SELECT count(*) FROM ledger", [], |r| r.get::<_, i64>(0))?;
        }
        let store = database_bytes(&self.store)?;
        let files = checker
            .check_files(client)
            .and_then(|_| checker.recheck_contents(client));
        if let Err(e) = files {
            return Ok(Some(violation(
                Clause::ReplicaResume,
                format!("after shipping resumed: {e:#}"),
            )));
        }
        let (txid, db) = match self.restored(client) {
            Ok(Some(r)) => r,
            Ok(None) => return Ok(Some(violation(Clause::ReplicaResume, "nothing was shipped"))),
            Err(e) => {
                return Ok(Some(violation(
                    Clause::ReplicaResume,
                    format!("after shipping resumed: {e:#}"),
                )))
            }
        };
        if db != store {
            let page = db
                .iter()
                .zip(&store)
                .position(|(a, b)| a != b)
                .map(|at| at / 4096 + 1);
            return Ok(Some(violation(
                Clause::ReplicaResume,
                format!(
                    "after shipping resumed the replica (TXID {txid}) restores {} bytes, the store \
                     holds {}{}",
                    db.len(),
                    store.len(),
                    page.map_or(String::new(), |p| format!("; they differ from page {p} on"))
                ),
            )));
        }
        Ok(None)
    }
}

/// The first row of `restored` that is not the store's row at its place, if any.
fn not_a_prefix(restored: &[Row], store: &[Row]) -> Option<String> {
    if restored.len() > store.len() {
        return Some(format!(
            "{} ledger rows, the store has {}",
            restored.len(),
            store.len()
        ));
    }
    restored
        .iter()
        .zip(store)
        .find(|(r, s)| r != s)
        .map(|(r, s)| format!("its ledger row {r:?} is {s:?} in the store"))
}

fn ledger(conn: &Connection) -> Result<Vec<Row>> {
    let mut stmt = conn
        .prepare("SELECT rowid, transfer_id, from_account, to_account, amount FROM ledger ORDER BY rowid")?;
    let rows = stmt
        .query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })?
        .collect::<rusqlite::Result<Vec<Row>>>()?;
    Ok(rows)
}

/// The bytes of the store's database `main` (its latest durable state).
fn database_bytes(path: &Path) -> Result<Vec<u8>> {
    let store = Store::open(path, &explore_options(&Options::default()))?;
    let snap = store.try_snapshot()?;
    let file = snap
        .file(onesync_vfs::DEFAULT_LOGICAL_DB)
        .ok_or_else(|| anyhow!("the store has no database main"))?;
    let size = snap.file_size(file)?;
    let page = snap.page_size();
    let mut out = vec![0u8; size.div_ceil(page) as usize * page as usize];
    for (n, chunk) in out.chunks_mut(page as usize).enumerate() {
        snap.read_page(file, n as u64, chunk)?;
    }
    out.truncate(size as usize);
    drop(snap);
    store.close()?;
    if out.is_empty() {
        bail!("the store's database main is empty");
    }
    Ok(out)
}
