//! One SQLite handle on one logical file of a store: the main database file's methods
//! (`DbBackend`: reads, writes, sizes, file controls, close).

use std::collections::{BTreeSet, HashSet};
use std::ffi::c_int;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use onesync_store::{CommitError, Error as StoreError, FileId, Snapshot, Transaction};

use crate::backend::{DbBackend, FileControl, FileControlCall, IoResult, LockLevel, Pragma, SqliteName};
use crate::ffi::{
    SQLITE_ERROR, SQLITE_IOCAP_BATCH_ATOMIC, SQLITE_IOCAP_POWERSAFE_OVERWRITE, SQLITE_IOCAP_SAFE_APPEND,
    SQLITE_IOERR, SQLITE_IOERR_FSYNC, SQLITE_IOERR_LOCK, SQLITE_IOERR_READ, SQLITE_IOERR_SHORT_READ,
    SQLITE_IOERR_TRUNCATE, SQLITE_IOERR_WRITE, SQLITE_NOTFOUND, SQLITE_NOTICE, SQLITE_OK,
};
use crate::names::{self, NameClaim, Owner};
use crate::sys::api::ApiTable;

use super::concurrent::ConcurrentWrite;
use super::connections::{
    leave_connection, note_locking_mode, note_synchronous, note_unlocked, parse_switch, parse_sync_interval,
};
use super::locking::{process_lock_key, RETRYING_WRITER};
use super::registry::{lock, next_handle, registry_acquire, registry_release, Member, OpenStore, Want};
use super::StoreOpener;

/// What a store handle needs to know at open.
pub(crate) struct StoreOpen<'a> {
    pub api: ApiTable,
    pub opener: Option<&'a StoreOpener>,
    pub path: &'a Path,
    /// SQLite's name for the file (for journal routing and SQLITE_FCNTL_PDB).
    pub name: SqliteName,
    pub logical: String,
    pub want: Want,
    pub nolock: bool,
    /// `concurrent=1`.
    pub concurrent: bool,
}

/// One SQLite handle on one logical file.
pub(crate) struct StoreDb {
    pub(super) store: Arc<OpenStore>,
    pub(super) logical: String,
    pub(super) handle: u64,
    /// The SQLite connection (its `sqlite3*`), grouping handles into one
    /// write transaction.
    pub(super) conn: usize,
    /// Known from SQLITE_FCNTL_PDB, and registered with the connection.
    pub(super) joined: bool,
    pub(super) level: LockLevel,
    /// What this handle reads while it holds SHARED and is not the writer.
    pub(super) snapshot: Option<Snapshot>,
    pub(super) api: ApiTable,
    /// Inside SQLITE_FCNTL_BEGIN/COMMIT_ATOMIC_WRITE.
    pub(super) batch: bool,
    pub(super) read_only: bool,
    pub(super) nolock: bool,
    /// SQLite's name for the file (compared with `sqlite3_db_filename`).
    pub(super) name: SqliteName,
    pub(super) _claim: NameClaim,
    /// `concurrent=1` or `PRAGMA onesync_concurrent=1`: write transactions run concurrently
    /// with other connections' (see `concurrent.rs`).
    pub(super) concurrent: bool,
    /// In concurrent mode, the store pages read under SHARED: the read set a write
    /// transaction starts with.
    pub(super) shared_reads: BTreeSet<u64>,
    /// The concurrent write transaction, from RESERVED to the unlock.
    pub(super) concurrent_write: Option<ConcurrentWrite>,
    /// In concurrent mode, the store state SQLite's page cache is known to agree with (a
    /// snapshot it read from, or this handle's own commit of exactly its pages); `None`
    /// when unknown. See `concurrent.rs`, invariant 2.
    pub(super) cache_state: Option<u64>,
    /// In concurrent mode, the store pages SQLite may hold in its cache: every page read or
    /// written through this handle since SQLite last emptied its cache. A hash set: every
    /// xRead and xWrite inserts into it (up to `CACHE_PAGES_KEPT_MAX` pages), and as an
    /// ordered set those inserts were most of what a lone concurrent writer spent beyond a
    /// serial one (`perf record`); order matters nowhere (a conflict names any page that
    /// conflicts). Measure: `onesync-lab bench writers --workload own-rows --threads 1 --fs
    /// ext4 --rounds 40 --mode onesync,onesync-concurrent`.
    pub(super) cache_pages: HashSet<u64>,
    /// SQLite kept its cache for this read transaction: every page of `cache_pages` counts
    /// as read by it (invariant 2), without being copied into `shared_reads`.
    pub(super) cache_pages_read: bool,
    /// This connection asked for `journal_mode=WAL` and was answered `wal`, and has asked
    /// for no other mode since: `PRAGMA journal_mode` answers `wal` (crates/vfs/README.md,
    /// "journal_mode").
    pub(super) answers_wal: bool,
    /// Whether the store's name still leads to it (`SQLITE_FCNTL_HAS_MOVED`), kept up to
    /// date by watching the file; `None` before the first question.
    pub(super) moved: Option<MovedWatch>,
}

/// The answer to `SQLITE_FCNTL_HAS_MOVED`, and an inotify watch on the store file that says
/// when to look again (a rename, an unlink, a change of links), so that the question SQLite
/// asks at every write transaction costs one non-blocking read, not a `stat` of the path.
/// Without a watch (inotify unavailable, or its per-user limit reached) every question
/// looks at the path.
pub(crate) struct MovedWatch {
    watch: Option<nix::sys::inotify::Inotify>,
    moved: bool,
}

impl StoreDb {
    /// Opens (or creates) the store and this handle on it; returns it and whether it is
    /// read-only. Errors carry the message for the user.
    pub(crate) fn open(o: StoreOpen<'_>) -> Result<(Self, bool), (c_int, String)> {
        let (store, read_only) = registry_acquire(o.path, o.want, o.opener)?;
        let name = o.name.bytes().to_vec();
        let claim = names::claim(&name, Owner::Store(store.key.0.clone()));
        let handle = next_handle();
        Ok((
            StoreDb {
                store,
                logical: o.logical,
                handle,
                // Until SQLite tells us its connection (SQLITE_FCNTL_PDB), the
                // handle is its own group.
                conn: usize::MAX - handle as usize,
                joined: false,
                level: LockLevel::None,
                snapshot: None,
                api: o.api,
                batch: false,
                read_only,
                nolock: o.nolock,
                name: o.name,
                _claim: claim,
                concurrent: o.concurrent,
                shared_reads: BTreeSet::new(),
                concurrent_write: None,
                cache_state: None,
                cache_pages: HashSet::new(),
                cache_pages_read: false,
                answers_wal: false,
                moved: None,
            },
            read_only,
        ))
    }
}

/// Maps a store error to SQLite's `code` (`SQLITE_FULL` for a full disk) and tells
/// SQLite's error log (`sqlite3_log`) what failed and why, with the OS error where there is
/// one: SQLite's own message for an I/O error is only "disk I/O error".
pub(super) fn store_err<'a>(
    api: &'a ApiTable,
    code: c_int,
    what: &'a str,
) -> impl Fn(StoreError) -> c_int + 'a {
    move |e| {
        let code = match e {
            StoreError::NoSpace => crate::ffi::SQLITE_FULL,
            _ => code,
        };
        api.log(code, &format!("onesync: {what}: {e}"));
        code
    }
}

/// For a commit that failed or whose flush failed: `SQLITE_FULL` when the store could not
/// grow for it (the medium is full; the commit was refused before it was given a place in
/// the chain, so nothing of it is written and every earlier commit stands, as stock SQLite's
/// "database or disk is full"), else `SQLITE_IOERR_FSYNC`, with the reason logged.
pub(super) fn commit_err<'a>(api: &'a ApiTable, what: &'a str) -> impl Fn(CommitError) -> c_int + 'a {
    move |e| {
        let code = match (&e.error, e.seq) {
            (StoreError::NoSpace, None) => crate::ffi::SQLITE_FULL,
            _ => SQLITE_IOERR_FSYNC,
        };
        api.log(code, &format!("onesync: {what}: {}", e.error));
        code
    }
}

/// Reads `buf.len()` bytes at `offset` of a file of `size` bytes with
/// `read_page` reading whole store pages.
pub(super) fn read_bytes(
    size: u64,
    page_size: u64,
    buf: &mut [u8],
    offset: u64,
    mut read_page: impl FnMut(u64, &mut [u8]) -> IoResult<()>,
) -> IoResult<()> {
    let end = offset.saturating_add(buf.len() as u64);
    let available = end.min(size).saturating_sub(offset) as usize;
    let mut page = vec![0u8; page_size as usize];
    let mut done = 0usize;
    while done < available {
        let at = offset + done as u64;
        let index = at / page_size;
        let within = (at % page_size) as usize;
        let n = (page_size as usize - within).min(available - done);
        read_page(index, &mut page)?;
        buf[done..done + n].copy_from_slice(&page[within..within + n]);
        done += n;
    }
    if available < buf.len() {
        buf[available..].fill(0);
        return Err(SQLITE_IOERR_SHORT_READ);
    }
    Ok(())
}

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
        let conn = coord.conns.get_mut(&self.conn).ok_or(SQLITE_IOERR)?;
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
        if let Some(cw) = &self.concurrent_write {
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

    /// `SQLITE_FCNTL_PRAGMA`: `SQLITE_NOTFOUND` for a pragma left to SQLite.
    pub(super) fn pragma(&mut self, call: &Pragma<'_>) -> c_int {
        let reply = |text: String| call.reply(&self.api, &text);
        let (name, value) = (&call.name, &call.value);
        match (name.as_deref(), value.as_deref()) {
            (Some("journal_mode"), _) => self.journal_mode(call),
            (Some("synchronous"), value) => {
                // Noted, then left to SQLite: NORMAL and OFF commits are shown at once and
                // made durable later (crates/vfs/README.md, "synchronous").
                note_synchronous(self.conn, self.handle, value);
                SQLITE_NOTFOUND
            }
            (Some("locking_mode"), value) => {
                // Noted, then left to SQLite (which applies it).
                note_locking_mode(self.conn, self.handle, value);
                SQLITE_NOTFOUND
            }
            (Some("onesync_sync_interval_ms"), value) => {
                // The store's, so every connection to it in this process (crates/vfs/README.md,
                // "synchronous").
                if let Some(value) = value {
                    match parse_sync_interval(value) {
                        Ok(interval) => self.store.store.set_deferred_flush_interval(interval),
                        Err(msg) => {
                            reply(msg);
                            return SQLITE_ERROR;
                        }
                    }
                }
                reply(self.store.store.deferred_flush_interval().as_millis().to_string());
                SQLITE_OK
            }
            (Some("onesync_concurrent"), value) => {
                if let Some(value) = value {
                    let Some(on) = parse_switch(value) else {
                        reply(format!("onesync: onesync_concurrent is 0 or 1, not {value:?}"));
                        return SQLITE_ERROR;
                    };
                    if on != self.concurrent && self.level != LockLevel::None {
                        reply("onesync: onesync_concurrent cannot change inside a transaction".to_string());
                        return SQLITE_ERROR;
                    }
                    self.concurrent = on;
                }
                reply(u8::from(self.concurrent).to_string());
                SQLITE_OK
            }
            (Some("onesync_stats"), _) => {
                reply(stats_json(&self.store));
                SQLITE_OK
            }
            (Some("onesync_flush"), _) => {
                // "Make it durable now": every commit written so far, shown undurable
                // (synchronous=NORMAL or OFF) included.
                match self.store.store.flush() {
                    Ok(durable) => {
                        reply(serde_json::json!({ "durable_seq": durable }).to_string());
                        SQLITE_OK
                    }
                    Err(e) => {
                        reply(format!("onesync: PRAGMA onesync_flush failed: {e}"));
                        SQLITE_IOERR
                    }
                }
            }
            (Some("onesync_commit"), _) => {
                // This connection's last commit, and how far commits are durable: a COMMIT
                // that has returned must have seq <= durable_seq.
                let seq = lock(&self.store.coord).last_commit.get(&self.conn).copied();
                reply(
                    serde_json::json!({
                        "seq": seq,
                        "durable_seq": self.store.store.durable_seq(),
                    })
                    .to_string(),
                );
                SQLITE_OK
            }
            _ => SQLITE_NOTFOUND,
        }
    }
}

impl StoreDb {
    /// `PRAGMA journal_mode`: never an error. The store gives what apps ask WAL for
    /// (readers never block the writer, an atomic commit with one flush) whatever the mode,
    /// so WAL is answered `wal` and remembered, as stock remembers WAL in the database file:
    /// for this connection, and in the store for every later connection of any process
    /// ([`Self::remember_wal`]); OFF, which would give up SQLite's ROLLBACK for nothing here,
    /// is answered as stock answers a change it cannot make: the mode in effect. Other modes
    /// and unknown names are SQLite's (and forget WAL).
    fn journal_mode(&mut self, call: &Pragma<'_>) -> c_int {
        match call.journal_mode_change() {
            Some("wal") => {
                self.answers_wal = true;
                self.remember_wal(true);
                self.api.log(
                    SQLITE_NOTICE,
                    "onesync: journal_mode=WAL answered as wal: the store gives WAL's promises \
                     (readers never block the writer, each commit atomic with one flush); \
                     SQLite's rollback journal stays in memory",
                );
                call.reply(&self.api, "wal");
                SQLITE_OK
            }
            Some("off") => {
                self.api.log(
                    SQLITE_NOTICE,
                    "onesync: journal_mode=OFF answered with the mode in effect: the store \
                     commits atomically with one flush whatever the mode, and without a journal \
                     SQLite could not roll back a statement or a transaction",
                );
                if self.answers_wal || self.wal_remembered() {
                    call.reply(&self.api, "wal");
                    SQLITE_OK
                } else {
                    call.make_sqlite_run_it_as_a_query();
                    SQLITE_NOTFOUND
                }
            }
            Some(_) => {
                self.answers_wal = false;
                self.remember_wal(false);
                SQLITE_NOTFOUND
            }
            // A query, or a name SQLite does not know (which it runs as a query).
            None if self.answers_wal || self.wal_remembered() => {
                call.reply(&self.api, "wal");
                SQLITE_OK
            }
            None => SQLITE_NOTFOUND,
        }
    }

    /// The store's note that this database is in WAL mode: an empty logical file named
    /// after it (`NAME\u{1}journal_mode=wal`: SQLite never opens such a name).
    fn wal_marker(&self) -> String {
        format!("{}\u{1}journal_mode=wal", self.logical)
    }

    fn wal_remembered(&self) -> bool {
        self.store.store.snapshot().file(&self.wal_marker()).is_some()
    }

    /// Notes (or forgets) WAL mode in the store, in a commit of its own, durable before the
    /// PRAGMA returns: not while this connection writes (its transaction keeps the answer
    /// for itself), nor read-only. A failure only loses the note, and is logged.
    fn remember_wal(&self, wal: bool) {
        if self.read_only || self.is_writer() {
            return;
        }
        let marker = self.wal_marker();
        let mut txn = self.store.store.begin();
        let changed = match (wal, txn.file(&marker)) {
            (true, None) => txn.create_file(&marker).map(|_| true),
            (false, Some(id)) => txn.delete_file(id).map(|()| true),
            _ => Ok(false),
        };
        let done = match changed {
            Ok(true) => txn.commit().map(|_| ()).map_err(|e| e.error),
            Ok(false) => {
                txn.abort();
                Ok(())
            }
            Err(e) => {
                txn.abort();
                Err(e)
            }
        };
        if let Err(e) = done {
            self.api.log(
                SQLITE_NOTICE,
                &format!("onesync: journal_mode: could not note the mode in the store ({e})"),
            );
        }
    }
}

pub(super) fn stats_json(open: &OpenStore) -> String {
    let s = open.store.stats();
    let concurrent = &open.concurrent_commits;
    serde_json::json!({
        "page_size": s.page_size,
        "commit_records": s.commit_records,
        "pages_written": s.pages_written,
        "pages_embedded": s.pages_embedded,
        "jumps": s.jumps,
        "bytes_written": s.bytes_written,
        "write_calls": s.write_calls,
        "bytes_preallocated": s.bytes_preallocated,
        "growths": s.growths,
        "bytes_returned": s.bytes_returned,
        "growths_holding_locks": s.growths_holding_locks,
        "flushes": s.flushes,
        "flush_micros": s.flush_micros,
        "group_commit_flushes": s.group_commit_flushes,
        "flushes_by_others": s.flushes_by_others,
        "announced_flush_waits": s.announced_flush_waits,
        "write_lock_waited_micros": s.write_lock_waited_micros,
        "write_lock_held_micros": s.write_lock_held_micros,
        "early_conflicts": s.early_conflicts,
        "catch_ups": s.catch_ups,
        "records_followed": s.records_followed,
        "checkpoints": s.checkpoints,
        "recoveries": s.recoveries,
        "records_replayed": s.records_replayed,
        "conflicts": s.conflicts,
        "last_seq": s.last_seq,
        "durable_seq": s.durable_seq,
        "slots_total": s.slots_total,
        "slots_free": s.slots_free,
        "concurrent_rebased": concurrent.rebased.load(Relaxed),
        "concurrent_relocated": concurrent.relocated.load(Relaxed),
    })
    .to_string()
}

impl DbBackend for StoreDb {
    fn read(&mut self, buf: &mut [u8], offset: u64) -> IoResult<()> {
        let page_size = self.store.page_size;
        if self.concurrent_write.is_some() {
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
        if self.nolock && self.level < LockLevel::Reserved {
            // `nolock=1`: SQLite calls neither xLock nor xUnlock, and writes as if it held
            // the locks; the store writes only inside a write transaction, so the first
            // write takes one (ended at PHASETWO, `end_nolock_transaction`).
            self.lock(LockLevel::Reserved)?;
        }
        if self.concurrent_write.is_some() {
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
        if self.concurrent_write.is_some() {
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
        if self.concurrent_write.is_some() && !self.batch {
            return self.commit_concurrent();
        }
        if !self.is_writer() {
            return Ok(());
        }
        let mut coord = lock(&self.store.coord);
        let Some(ct) = coord.conns.get_mut(&self.conn) else {
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
            Self::sequence_locked(&self.api, &mut coord, self.conn, journal_on_disk)?;
            if journal_on_disk {
                let pending = coord.conns.get_mut(&self.conn).and_then(|ct| ct.pending.take());
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
        self.size_now()
    }

    fn lock(&mut self, level: LockLevel) -> IoResult<()> {
        if level <= self.level {
            return Ok(());
        }
        if self.level == LockLevel::None {
            let retrying_writer = RETRYING_WRITER.with(|r| r.replace(false));
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
        if level < self.level {
            note_unlocked(self.conn, self.handle);
        }
        self.unlock_to(level)
    }

    fn check_reserved_lock(&mut self) -> IoResult<bool> {
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
            FileControl::CommitPhaseTwo if self.concurrent_write.is_some() => {
                super::connections::note_phasetwo(self.conn);
                // synchronous=OFF commits here (SQLite never calls xSync); a FULL commit's
                // flush is waited for before COMMIT returns.
                if let Err(code) = self.commit_concurrent() {
                    return code;
                }
                let pending = self.concurrent_write.as_mut().and_then(|cw| cw.pending.take());
                match pending.map(|p| p.wait()) {
                    Some(Err(e)) => commit_err(&self.api, "making a commit durable")(e),
                    _ => self.end_nolock_transaction(),
                }
            }
            FileControl::CommitPhaseTwo => match self.commit_phase_two() {
                Ok(()) => self.end_nolock_transaction(),
                Err(code) => code,
            },
            FileControl::Pragma(ref pragma) => self.pragma(pragma),
            FileControl::BeginAtomic if self.concurrent_write.is_some() => {
                if self.concurrent_write.as_ref().is_some_and(|cw| cw.wrote) {
                    return SQLITE_IOERR;
                }
                self.batch = true;
                SQLITE_OK
            }
            FileControl::CommitAtomic if self.concurrent_write.is_some() => {
                self.batch = false;
                match self.commit_concurrent() {
                    Ok(()) => SQLITE_OK,
                    Err(code) => code,
                }
            }
            FileControl::RollbackAtomic if self.concurrent_write.is_some() => {
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
                        .get(&self.conn)
                        .is_none_or(|c| c.members.values().all(|m| !m.wrote));
                if !clean {
                    return SQLITE_IOERR;
                }
                self.batch = true;
                SQLITE_OK
            }
            FileControl::CommitAtomic => {
                self.batch = false;
                let mut coord = lock(&self.store.coord);
                match Self::sequence_locked(&self.api, &mut coord, self.conn, false) {
                    Ok(()) => SQLITE_OK,
                    Err(code) => code,
                }
            }
            FileControl::RollbackAtomic => {
                self.batch = false;
                let mut coord = lock(&self.store.coord);
                if let Some(ct) = coord.conns.get_mut(&self.conn) {
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
        let mut result = Ok(());
        if self.level > LockLevel::None {
            result = self.unlock_to(LockLevel::None);
        }
        // A connection closes its databases together; keeping its entry past that would
        // let the map grow with every connection ever opened.
        let mut coord = lock(&self.store.coord);
        coord.last_commit.remove(&self.conn);
        if self.joined {
            if let Some(n) = coord.handles_by_conn.get_mut(&self.conn) {
                *n -= 1;
                if *n == 0 {
                    coord.handles_by_conn.remove(&self.conn);
                }
            }
        }
        drop(coord);
        if self.joined {
            leave_connection(self.conn, self.handle);
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
