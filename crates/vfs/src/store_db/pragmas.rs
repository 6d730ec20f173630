//! The pragmas a store handle answers (`journal_mode`, the `onesync_*` ones) or notes before
//! SQLite applies them (`synchronous`, `locking_mode`), from `SQLITE_FCNTL_PRAGMA`.

use std::ffi::c_int;

use crate::backend::{LockLevel, Pragma};
use crate::ffi::{
    SQLITE_ERROR, SQLITE_FULL, SQLITE_IOERR, SQLITE_NOTFOUND, SQLITE_NOTICE, SQLITE_OK, SQLITE_READONLY,
};
use onesync_store::Error as StoreError;

use super::connections::{parse_switch, parse_sync_interval};
use super::handle::StoreDb;
use super::registry::lock;
use super::replication::{is_off, status_json};
use super::stats::stats_json;

impl StoreDb {
    /// `SQLITE_FCNTL_PRAGMA`: `SQLITE_NOTFOUND` for a pragma left to SQLite.
    pub(super) fn pragma(&mut self, call: &Pragma<'_>) -> c_int {
        let reply = |text: String| call.reply(&self.api, &text);
        let (name, value) = (&call.name, &call.value);
        match (name.as_deref(), value.as_deref()) {
            (Some("journal_mode"), _) => self.journal_mode(call),
            (Some("synchronous"), value) => {
                // Noted, then left to SQLite: NORMAL and OFF commits are shown at once and
                // made durable later (crates/vfs/README.md, "synchronous").
                self.connection.note_synchronous(self.handle, value);
                SQLITE_NOTFOUND
            }
            (Some("locking_mode"), value) => {
                // Noted, then left to SQLite (which applies it).
                self.connection.note_locking_mode(self.handle, value);
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
            (Some("onesync_replicate"), value) => {
                // This database's replica (crates/vfs/README.md, "Replication").
                if let Some(value) = value {
                    if is_off(value) {
                        self.store.stop_replicating(&self.logical);
                    } else if self.read_only {
                        reply("onesync: PRAGMA onesync_replicate needs a read-write connection".to_string());
                        return SQLITE_READONLY;
                    } else if let Err(msg) = self.store.replicate(
                        self.api,
                        &self.store.path,
                        &self.logical,
                        value.trim(),
                        None,
                        &|_| {},
                    ) {
                        reply(msg);
                        return SQLITE_ERROR;
                    }
                }
                reply(status_json(self.store.replication_status(&self.logical)));
                SQLITE_OK
            }
            (Some("onesync_replicate_sync"), value) => {
                // This connection's synchronous replication (crates/vfs/README.md, "Replication").
                if let Some(value) = value {
                    let Some(on) = parse_switch(value) else {
                        reply(format!(
                            "onesync: onesync_replicate_sync is 0 or 1, not {value:?}"
                        ));
                        return SQLITE_ERROR;
                    };
                    if on && self.store.shipper(&self.logical).is_none() {
                        reply(
                            "onesync: onesync_replicate_sync=1 needs onesync_replicate=URL first".to_string(),
                        );
                        return SQLITE_ERROR;
                    }
                    self.replicate_sync = on;
                }
                reply(u8::from(self.replicate_sync).to_string());
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
            (Some("onesync_checkpoint"), _) => {
                // A mapping checkpoint now (also makes every commit written so far durable):
                // what the store otherwise does by its own policy and at close.
                if self.read_only {
                    reply("onesync: PRAGMA onesync_checkpoint on a read-only connection".to_string());
                    return SQLITE_READONLY;
                }
                match self.store.store.checkpoint() {
                    Ok(()) => {
                        let durable = self.store.store.durable_seq();
                        reply(serde_json::json!({ "durable_seq": durable }).to_string());
                        SQLITE_OK
                    }
                    Err(e) => {
                        reply(format!("onesync: PRAGMA onesync_checkpoint failed: {e}"));
                        match e {
                            StoreError::ReadOnly => SQLITE_READONLY,
                            StoreError::NoSpace => SQLITE_FULL,
                            _ => SQLITE_IOERR,
                        }
                    }
                }
            }
            (Some("onesync_commit"), _) => {
                // This connection's last commit, and how far commits are durable: a COMMIT
                // that has returned must have seq <= durable_seq.
                let seq = lock(&self.store.coord)
                    .last_commit
                    .get(&self.connection.id)
                    .copied();
                reply(
                    serde_json::json!({
                        "seq": seq,
                        "durable_seq": self.store.store.durable_seq(),
                        // Up to where the replica holds this database (when replicated).
                        "replicated_seq": self.store.replication_status(&self.logical).map(|s| s.shipped_seq),
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
