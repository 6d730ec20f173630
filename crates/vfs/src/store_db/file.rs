//! One SQLite handle on one logical file of a store: the main database file's methods
//! (`DbBackend`: reads, writes, sizes, file controls, close).

use std::ffi::c_int;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use onesync_store::{FileId, Snapshot, Transaction};

use crate::backend::{DbBackend, FileControl, FileControlCall, IoResult, LockLevel};
use crate::ffi::{
    SQLITE_ERROR, SQLITE_IOCAP_BATCH_ATOMIC, SQLITE_IOCAP_POWERSAFE_OVERWRITE, SQLITE_IOCAP_SAFE_APPEND,
    SQLITE_IOERR, SQLITE_IOERR_LOCK, SQLITE_IOERR_READ, SQLITE_IOERR_SHORT_READ, SQLITE_IOERR_TRUNCATE,
    SQLITE_IOERR_WRITE, SQLITE_NOTFOUND, SQLITE_OK,
};
use crate::names::{self};

use super::connections::leave_connection;
use super::handle::{commit_err, read_bytes, store_err, MovedWatch, StoreDb};
use super::locking::process_lock_key;
use super::registry::{lock, registry_release, Member};

impl StoreDb {
    /// Whether the store's file no longer has the name it was opened by (renamed or
    /// deleted): SQLite then refuses writes (`SQLITE_READONLY_DBMOVED`), as the unix VFS
    /// makes it do for a plain file, since commits would go to a file nobody opens by that
    /// name. A store on a host's medium (no inode) never moves.
    fn has_moved(&mut self) -> bool {
        use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
        let names::StoreKey::Inode { dev, ino } = self.store.key.0.clone() else {
            return false;
        };
        let path = Path::new(std::ffi::OsStr::from_bytes(self.name.bytes())).to_owned();
        let look = || std::fs::metadata(&path).map_or(true, |m| m.dev() != dev || m.ino() != ino);
        match &mut self.moved {
            Some(known) => {
                let changed = match &known.watch {
                    // Err: no event (EAGAIN); anything else, look.
                    Some(watch) => watch
                        .read_events()
                        .map_or_else(|e| e != nix::errno::Errno::EAGAIN, |events| !events.is_empty()),
                    None => true,
                };
                if changed {
                    known.moved = look();
                }
                known.moved
            }
            None => {
                // Watched before looking, so that no change after the look is missed.
                let watch = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
                    .ok()
                    .filter(|watch| {
                        let events = AddWatchFlags::IN_MOVE_SELF
                            | AddWatchFlags::IN_DELETE_SELF
                            | AddWatchFlags::IN_ATTRIB;
                        watch.add_watch(&path, events).is_ok()
                    });
                let moved = look();
                self.moved = Some(MovedWatch { watch, moved });
                moved
            }
        }
    }

    /// With `nolock=1` (no xUnlock from SQLite), lets go of the write transaction the first
    /// write took, once it has committed; otherwise nothing. A transaction rolled back keeps
    /// it until the next commit or the close (SQLite sends no PHASETWO for a rollback).
    fn end_nolock_transaction(&mut self) -> c_int {
        if !self.nolock {
            return SQLITE_OK;
        }
        match self.unlock_to(LockLevel::None) {
            Ok(()) => SQLITE_OK,
            Err(code) => code,
        }
    }

    pub(super) fn file_in_snapshot(&self) -> Option<(&Snapshot, Option<FileId>)> {
        self.snapshot.as_ref().map(|s| (s, s.file(&self.logical)))
    }

    /// The connection's transaction, with this handle's file in it (created
    /// on first use).
    pub(super) fn with_txn<T>(
        &self,
        f: impl FnOnce(&mut Transaction, &mut Member) -> IoResult<T>,
    ) -> IoResult<T> {
        let mut coord = lock(&self.store.coord);
        let conn = coord.conns.get_mut(&self.connection.id).ok_or(SQLITE_IOERR)?;
        let member = conn.members.get_mut(&self.handle).ok_or(SQLITE_IOERR)?;
        if conn.txn.is_none() {
            // A write after the commit was sequenced (never expected from
            // SQLite) starts a new transaction rather than being lost.
            conn.txn = Some(self.store.store.begin());
        }
        let txn = conn.txn.as_mut().ok_or(SQLITE_IOERR)?;
        f(txn, member)
    }

    pub(super) fn size_now(&self) -> IoResult<u64> {
        if let Some(cw) = self.writing.concurrent() {
            return Ok(cw.size);
        }
        if self.is_writer() {
            return self.with_txn(|txn, _| {
                Ok(txn
                    .file(&self.logical)
                    .map_or(0, |id| txn.file_size(id).unwrap_or(0)))
            });
        }
        match self.file_in_snapshot() {
            Some((snap, Some(id))) => {
                snap.file_size(id)
                    .map_err(store_err(&self.api, SQLITE_IOERR, "reading the file size"))
            }
            Some((_, None)) => Ok(0),
            // No lock held: SQLite asks for the size only under a lock, but
            // answer from the latest state rather than fail.
            None => {
                let snap = self.store.store.snapshot();
                Ok(snap
                    .file(&self.logical)
                    .map_or(0, |id| snap.file_size(id).unwrap_or(0)))
            }
        }
    }
}

impl DbBackend for StoreDb {
    fn read(&mut self, buf: &mut [u8], offset: u64) -> IoResult<()> {
        self.assert_state("xRead");
        let page_size = self.store.page_size;
        if self.writing.is_concurrent() {
            return self.concurrent_read(buf, offset);
        }
        if self.is_writer() {
            let logical = self.logical.clone();
            return self.with_txn(|txn, _| {
                let Some(id) = txn.file(&logical) else {
                    buf.fill(0);
                    return Err(SQLITE_IOERR_SHORT_READ);
                };
                let err = store_err(&self.api, SQLITE_IOERR_READ, "reading");
                let size = txn.file_size(id).map_err(&err)?;
                read_bytes(size, page_size, buf, offset, |p, page| {
                    txn.read_page(id, p, page).map_err(&err)
                })
            });
        }
        // Not under a lock SQLite reads only to probe; use the latest state.
        let temporary;
        let snap = match self.snapshot.as_ref() {
            Some(s) => s,
            None => {
                temporary = self.store.store.snapshot();
                &temporary
            }
        };
        let Some(id) = snap.file(&self.logical) else {
            buf.fill(0);
            return Err(SQLITE_IOERR_SHORT_READ);
        };
        let api = self.api;
        let err = store_err(&api, SQLITE_IOERR_READ, "reading");
        let size = snap.file_size(id).map_err(&err)?;
        read_bytes(size, page_size, buf, offset, |p, page| {
            snap.read_page(id, p, page).map_err(&err)
        })?;
        if self.snapshot.is_some() && self.concurrent_now() {
            self.note_shared_read(buf, offset);
        } else {
            // A page cached now is not noted: the cache is no longer known (invariant 2).
            self.cache_state = None;
        }
        Ok(())
    }

    fn write(&mut self, buf: &[u8], offset: u64) -> IoResult<()> {
        self.assert_state("xWrite");
        if self.nolock && self.level < LockLevel::Reserved {
            // `nolock=1`: SQLite calls neither xLock nor xUnlock, and writes as if it held
            // the locks; the store writes only inside a write transaction, so the first
            // write takes one (ended at PHASETWO, `end_nolock_transaction`).
            self.lock(LockLevel::Reserved)?;
        }
        if self.writing.is_concurrent() {
            return self.concurrent_write_bytes(buf, offset);
        }
        if !self.is_writer() {
            // SQLite writes the database file only under RESERVED or higher.
            return Err(SQLITE_IOERR_WRITE);
        }
        let page_size = self.store.page_size;
        let logical = self.logical.clone();
        self.with_txn(|txn, member| {
            let err = store_err(&self.api, SQLITE_IOERR_WRITE, "writing");
            let id = match txn.file(&logical) {
                Some(id) => id,
                None => txn.create_file(&logical).map_err(&err)?,
            };
            let old_size = txn.file_size(id).map_err(&err)?;
            let end = offset + buf.len() as u64;
            let mut page = vec![0u8; page_size as usize];
            let mut done = 0usize;
            while done < buf.len() {
                let at = offset + done as u64;
                let index = at / page_size;
                let within = (at % page_size) as usize;
                let n = (page_size as usize - within).min(buf.len() - done);
                if n < page_size as usize {
                    // Read-modify-write: SQLite's page is smaller than the store's.
                    txn.read_page(id, index, &mut page).map_err(&err)?;
                    page[within..within + n].copy_from_slice(&buf[done..done + n]);
                    txn.write_page(id, index, &page).map_err(&err)?;
                } else {
                    txn.write_page(id, index, &buf[done..done + n]).map_err(&err)?;
                }
                done += n;
            }
            // write_page rounds the size up to whole store pages; SQLite
            // derives its page count from the exact size.
            let want = old_size.max(end);
            if txn.file_size(id).map_err(&err)? != want {
                txn.set_file_size(id, want).map_err(&err)?;
            }
            member.dirty = true;
            member.wrote = true;
            Ok(())
        })
    }

    fn truncate(&mut self, size: u64) -> IoResult<()> {
        self.assert_state("xTruncate");
        if self.writing.is_concurrent() {
            return self.concurrent_truncate(size);
        }
        if !self.is_writer() {
            return Err(SQLITE_IOERR_TRUNCATE);
        }
        let logical = self.logical.clone();
        self.with_txn(|txn, member| {
            let err = store_err(&self.api, SQLITE_IOERR_TRUNCATE, "truncating");
            let id = match txn.file(&logical) {
                Some(id) => id,
                None => txn.create_file(&logical).map_err(&err)?,
            };
            txn.set_file_size(id, size).map_err(&err)?;
            member.dirty = true;
            member.wrote = true;
            Ok(())
        })
    }

    fn sync(&mut self, _flags: c_int) -> IoResult<()> {
        self.assert_state("xSync");
        if self.is_writer() || self.writing.is_concurrent() {
            self.refuse_while_unreplicated()?;
        }
        if self.writing.is_concurrent() && !self.batch {
            return self.commit_concurrent();
        }
        if !self.is_writer() {
            return Ok(());
        }
        let mut coord = lock(&self.store.coord);
        let Some(ct) = coord.conns.get_mut(&self.connection.id) else {
            return Ok(());
        };
        if let Some(m) = ct.members.get_mut(&self.handle) {
            m.dirty = false;
        }
        // One database: its sync is the commit. Several (an attached database
        // of the same store): SQLite syncs each in turn, so the commit waits
        // for the first unlock, after every database's phase one. With a super-journal on
        // disk (plain files or other stores too) this store's phase one is its commit, and
        // the super-journal's deletion the transaction's (`store_journal.rs`).
        let disk_super = ct
            .super_journal
            .as_ref()
            .is_some_and(|s| !names::is_memory_super_journal(s.name()));
        if (disk_super || ct.members.len() == 1 && ct.super_journal.is_none())
            && !self.batch
            && ct.members.values().any(|m| m.wrote)
        {
            // While the journal is on disk, durable before xSync returns, at any level.
            let journal_on_disk = names::is_store_journal_open_on_disk(&self.journal_name())
                && !matches!(
                    self.store.store.sabotage(),
                    Some(onesync_store::Sabotage::MultiFileCommitDeferred)
                );
            Self::sequence_locked(&self.api, &mut coord, &self.connection, journal_on_disk)?;
            if journal_on_disk {
                let pending = coord
                    .conns
                    .get_mut(&self.connection.id)
                    .and_then(|ct| ct.pending.take());
                drop(coord);
                if let Some(pending) = pending {
                    pending
                        .wait()
                        .map_err(commit_err(&self.api, "making a commit durable"))?;
                }
            }
        }
        Ok(())
    }

    fn size(&mut self) -> IoResult<u64> {
        self.assert_state("xFileSize");
        self.size_now()
    }

    fn lock(&mut self, level: LockLevel) -> IoResult<()> {
        self.assert_state("xLock");
        if level <= self.level {
            return Ok(());
        }
        if self.level == LockLevel::None {
            let retrying_writer = self.connection.take_retrying_writer();
            if retrying_writer {
                self.wait_for_other_writer();
            }
            // A reader sees the latest durable commit of any process sharing the store, so a
            // power cut never takes back a row it was shown. A writer retrying after a stale
            // snapshot builds on the latest written one (its commit comes later in the chain
            // and is durable only with it).
            let snapshot = if retrying_writer {
                self.store.store.try_latest_snapshot()
            } else {
                self.store.store.try_snapshot()
            }
            .map_err(|_| SQLITE_IOERR_LOCK)?;
            let mut coord = lock(&self.store.coord);
            coord.files.entry(self.logical.clone()).or_default().shared += 1;
            drop(coord);
            self.snapshot = Some(snapshot);
            self.shared_reads.clear();
            self.cache_pages_read = false;
            self.level = LockLevel::Shared;
        }
        if level >= LockLevel::Reserved && self.level < LockLevel::Reserved {
            if self.concurrent_now() && !self.connection_writes_store() {
                self.become_concurrent_writer()?;
            } else {
                // A serial write leaves SQLite's cache as this transaction makes it.
                self.cache_state = None;
                self.become_writer()?;
            }
        }
        self.level = level;
        Ok(())
    }

    fn unlock(&mut self, level: LockLevel) -> IoResult<()> {
        self.assert_state("xUnlock");
        if level < self.level {
            self.connection.note_unlocked(self.handle);
        }
        self.unlock_to(level)
    }

    fn check_reserved_lock(&mut self) -> IoResult<bool> {
        self.assert_state("xCheckReservedLock");
        let coord = lock(&self.store.coord);
        if coord
            .files
            .get(&self.logical)
            .is_some_and(|f| f.writer.is_some() || f.concurrent_writers > 0)
        {
            return Ok(true);
        }
        drop(coord);
        let elsewhere = self
            .store
            .store
            .locked_by_other_process(process_lock_key(&self.logical))
            .map_err(|_| SQLITE_IOERR_LOCK)?;
        if elsewhere {
            self.store.note_contention();
        }
        Ok(elsewhere)
    }

    fn file_control(&mut self, call: &FileControlCall<'_>) -> c_int {
        self.assert_state("xFileControl");
        match call.control {
            FileControl::Pdb(db) => {
                if let Some(db) = db {
                    self.join(db);
                }
                SQLITE_OK
            }
            FileControl::Sync { super_journal } => match self.super_journal_named(super_journal) {
                // Not handled: SQLite goes on to xSync.
                Ok(()) => SQLITE_NOTFOUND,
                Err(why) => {
                    self.api.log_and_print(SQLITE_ERROR, &why);
                    SQLITE_ERROR
                }
            },
            FileControl::CommitPhaseTwo if self.writing.is_concurrent() => {
                self.connection.note_phasetwo();
                // synchronous=OFF commits here (SQLite never calls xSync); a FULL commit's
                // flush is waited for before COMMIT returns.
                if let Err(code) = self.commit_concurrent() {
                    return code;
                }
                let pending = self.writing.concurrent_mut().and_then(|cw| cw.pending.take());
                let seq = pending.as_ref().map(|p| p.seq());
                match pending.map(|p| p.wait()) {
                    Some(Err(e)) => commit_err(&self.api, "making a commit durable")(e),
                    _ => {
                        if let Some(seq) = seq {
                            self.wait_replicated(seq);
                        }
                        self.end_nolock_transaction()
                    }
                }
            }
            FileControl::CommitPhaseTwo => match self.commit_phase_two() {
                Ok(()) => self.end_nolock_transaction(),
                Err(code) => code,
            },
            FileControl::Pragma(ref pragma) => self.pragma(pragma),
            FileControl::BeginAtomic if self.writing.is_concurrent() => {
                if self.writing.concurrent().is_some_and(|cw| cw.wrote) {
                    return SQLITE_IOERR;
                }
                self.batch = true;
                SQLITE_OK
            }
            FileControl::CommitAtomic if self.writing.is_concurrent() => {
                self.batch = false;
                if let Err(code) = self.refuse_while_unreplicated() {
                    return code;
                }
                match self.commit_concurrent() {
                    Ok(()) => SQLITE_OK,
                    Err(code) => code,
                }
            }
            FileControl::RollbackAtomic if self.writing.is_concurrent() => {
                self.batch = false;
                self.concurrent_batch_undone();
                SQLITE_OK
            }
            FileControl::BeginAtomic => {
                // The batch can be undone only if it is the whole store
                // transaction; otherwise SQLite falls back to its journal.
                let clean = !self.is_writer()
                    || lock(&self.store.coord)
                        .conns
                        .get(&self.connection.id)
                        .is_none_or(|c| c.members.values().all(|m| !m.wrote));
                if !clean {
                    return SQLITE_IOERR;
                }
                self.batch = true;
                SQLITE_OK
            }
            FileControl::CommitAtomic => {
                self.batch = false;
                if let Err(code) = self.refuse_while_unreplicated() {
                    return code;
                }
                let mut coord = lock(&self.store.coord);
                match Self::sequence_locked(&self.api, &mut coord, &self.connection, false) {
                    Ok(()) => SQLITE_OK,
                    Err(code) => code,
                }
            }
            FileControl::RollbackAtomic => {
                self.batch = false;
                let mut coord = lock(&self.store.coord);
                if let Some(ct) = coord.conns.get_mut(&self.connection.id) {
                    if let Some(txn) = ct.txn.take() {
                        txn.abort();
                    }
                    for m in ct.members.values_mut() {
                        m.dirty = false;
                        m.wrote = false;
                    }
                }
                SQLITE_OK
            }
            FileControl::HasMoved => {
                call.answer(c_int::from(self.has_moved()));
                SQLITE_OK
            }
            FileControl::TempFilename => {
                call.answer_text(&self.api, &temp_file_name());
                SQLITE_OK
            }
            FileControl::LastErrno => {
                // The store's system calls report their errors (with errno) to sqlite3_log
                // where they fail; none is kept per handle.
                call.answer(0);
                SQLITE_OK
            }
            FileControl::LockState => {
                call.answer(self.level.raw());
                SQLITE_OK
            }
            FileControl::Other(_) => SQLITE_NOTFOUND,
        }
    }

    fn sector_size(&mut self) -> c_int {
        self.store.page_size as c_int
    }

    fn device_characteristics(&mut self) -> c_int {
        SQLITE_IOCAP_BATCH_ATOMIC | SQLITE_IOCAP_SAFE_APPEND | SQLITE_IOCAP_POWERSAFE_OVERWRITE
    }

    fn close(&mut self) -> IoResult<()> {
        self.assert_state("xClose");
        let mut result = Ok(());
        if self.level > LockLevel::None {
            result = self.unlock_to(LockLevel::None);
        }
        // A connection closes its databases together; keeping its entry past that would
        // let the map grow with every connection ever opened.
        let mut coord = lock(&self.store.coord);
        coord.last_commit.remove(&self.connection.id);
        if self.joined {
            if let Some(n) = coord.handles_by_conn.get_mut(&self.connection.id) {
                *n -= 1;
                if *n == 0 {
                    coord.handles_by_conn.remove(&self.connection.id);
                }
            }
        }
        drop(coord);
        if self.joined {
            leave_connection(&self.connection, self.handle);
        }
        registry_release(&self.store);
        result
    }
}

/// A name for a temporary file, as the unix VFS makes one (`SQLITE_FCNTL_TEMPFILENAME`, which
/// the CLI's `.excel` and `.edit` ask the main database for): `etilqs_` and random hex
/// digits in the first writable directory of `SQLITE_TMPDIR`, `TMPDIR`, `/var/tmp`,
/// `/usr/tmp`, `/tmp`, `.`.
fn temp_file_name() -> String {
    use std::hash::{BuildHasher, Hasher};
    let from_env = ["SQLITE_TMPDIR", "TMPDIR"]
        .into_iter()
        .filter_map(std::env::var_os);
    let fixed = ["/var/tmp", "/usr/tmp", "/tmp", "."].into_iter().map(Into::into);
    let dir = from_env
        .chain(fixed)
        .map(std::path::PathBuf::from)
        .find(|d| d.is_dir() && nix::unistd::access(d.as_path(), nix::unistd::AccessFlags::W_OK).is_ok())
        .unwrap_or_else(|| ".".into());
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    format!("{}/etilqs_{:016x}", dir.display(), hasher.finish())
}
