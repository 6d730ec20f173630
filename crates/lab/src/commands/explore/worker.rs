//! The explorer's worker process (`onesync-lab __explore-worker`): one SQLite connection driven
//! by one-line commands on stdin (see [`Cmd`](super::scenario::Cmd)), answering each with
//! `ok` or `err MESSAGE`. On the way it prints `ack ID` after each transfer's COMMIT
//! returned, `saw ID` for each ledger row a read showed for the first time, and `torn ...`
//! if a read saw money not conserved. Each `ack`/`saw` is first written as a note into the
//! shared write log (`ONESYNC_IO_LOG`), so that it has its place among the writes and
//! flushes there (what a power cut at a given point must keep). A concurrent writer
//! (`--concurrent`) prints `retry ID CODE` when a COMMIT of transfer ID failed with SQLite's
//! extended code CODE (SQLITE_BUSY_SNAPSHOT: a conflict) and the transfer runs again.
//!
//! Single-threaded on purpose: strace counts a call number per thread.

use std::collections::HashSet;
use std::io::BufRead;
use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};
#[cfg(feature = "test-hooks")]
use onesync_store::io::IoLog;
use onesync_store::{Options, Store};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rusqlite::{Connection, OpenFlags};

use super::scenario::{Backend, Locking, Sync};
use crate::commands::vfs_kill_torture::print_line;
use crate::workloads::bank;

/// Bytes of each row `begin-grow` appends: more than a 4 KiB page holds, so each row adds
/// a leaf cell and an overflow page (pointers the relocation must rewrite).
const GROW_ROW: usize = 6000;
/// Rows of `GROW_ROW` bytes `shrink` adds before it deletes them all and VACUUMs: about
/// 900 KiB, several of the explorer's 256 KiB growth steps, so that the delete supersedes
/// most of the store and the store gives the space back.
const SHRINK_ROWS: usize = 150;

#[derive(clap::Args, Debug)]
pub struct WorkerArgs {
    /// The store (or plain database) this process opens
    #[arg(long)]
    pub db: PathBuf,
    /// One letter: transfer ids start with it
    #[arg(long)]
    pub name: char,
    #[arg(long, value_enum)]
    pub backend: Backend,
    #[arg(long, value_enum)]
    pub locking: Locking,
    #[arg(long, value_enum)]
    pub sync: Sync,
    /// ATTACH the store's second database `aux`; every transfer is made in both
    #[arg(long)]
    pub attach: bool,
    /// With --attach: the attached database is the plain SQLite file beside the store
    #[arg(long)]
    pub plain_aux: bool,
    /// Run write transactions concurrently with other writers' (`PRAGMA onesync_concurrent
    /// = 1` after each open; onesync only)
    #[arg(long)]
    pub concurrent: bool,
    /// Replicate the store to this URL (`onesync_replicate`; onesync only) ...
    #[arg(long, value_name = "URL")]
    pub replicate: Option<String>,
    /// ... synchronously: each COMMIT returns once the replica holds it
    #[arg(long, requires = "replicate")]
    pub replicate_sync: bool,
    #[arg(long)]
    pub seed: u64,
}

/// Attempts of a transfer whose COMMIT conflicted, the failed COMMIT not counted. Steps run
/// one at a time, so the first rerun commits; more tries only cover the unexpected.
const RERUNS: u32 = 5;

/// A transfer: its id, and (from, to, amount).
struct Transfer {
    id: String,
    moves: (i64, i64, i64),
}

impl WorkerArgs {
    /// A onesync store at NORMAL or OFF: its commits wait for a flush the worker makes itself
    /// (see `Worker::open`).
    fn flushes_by_hand(&self) -> bool {
        self.backend == Backend::Onesync && self.sync != Sync::Full
    }
}

struct Worker<'a> {
    args: &'a WorkerArgs,
    conn: Option<Connection>,
    #[cfg(feature = "test-hooks")]
    log: Option<IoLog>,
    rng: SmallRng,
    transfers: u64,
    seen: HashSet<String>,
    /// The transfer of a write transaction held open (`begin`), until `commit`.
    held: Option<Transfer>,
}

pub fn run(args: &WorkerArgs) -> Result<()> {
    let mut worker = Worker {
        args,
        conn: None,
        #[cfg(feature = "test-hooks")]
        log: IoLog::from_env().context("opening the write log")?,
        rng: SmallRng::seed_from_u64(args.seed ^ u64::from(args.name)),
        transfers: 0,
        seen: HashSet::new(),
        held: None,
    };
    print_line(&format!("pid {}", std::process::id()))?;
    let stdin = std::io::stdin();
    let mut line = String::new();
    loop {
        line.clear();
        if stdin.lock().read_line(&mut line)? == 0 {
            // The explorer is gone: leave without closing anything.
            return Ok(());
        }
        let command = line.trim();
        if command == "quit" {
            drop(worker.conn.take());
            return Ok(());
        }
        match worker.step(command) {
            Ok(()) => print_line("ok")?,
            Err(e) => print_line(&format!("err {}", format!("{e:#}").replace('\n', " ")))?,
        }
    }
}

impl Worker<'_> {
    fn step(&mut self, command: &str) -> Result<()> {
        let (verb, arg) = command.split_once(' ').unwrap_or((command, ""));
        match verb {
            "open" => self.open(),
            "reopen" => {
                drop(self.conn.take());
                self.open()
            }
            "close" => {
                drop(self.conn.take());
                Ok(())
            }
            "xfer" => {
                let n: u32 = arg.parse().with_context(|| format!("xfer {arg:?}"))?;
                (0..n).try_for_each(|_| self.transfer())
            }
            "read" => self.read(),
            "spill" => self.spill(match arg {
                "commit" => true,
                "rollback" => false,
                _ => bail!("spill {arg:?}"),
            }),
            "hold" => {
                let conn = self.conn()?;
                conn.execute_batch("BEGIN")?;
                conn.query_row("SELECT count(*) FROM ledger", [], |r| r.get::<_, i64>(0))?;
                Ok(())
            }
            "release" => Ok(self.conn()?.execute_batch("COMMIT")?),
            "begin" => self.begin(),
            "commit" => self.commit(),
            "begin-grow" => Ok(self.conn()?.execute_batch(&self.grow_statements())?),
            "commit-grow" => self.commit_grow(),
            "shrink" => {
                // A process stopped at a crash point may hold a lock: then there is nothing
                // to shrink in this run (the grow rows are not acknowledged transfers).
                let conn = self.conn()?;
                let table = format!("grow_{}", self.args.name);
                let fill = format!(
                    "CREATE TABLE IF NOT EXISTS {table}(pad BLOB NOT NULL);
                     INSERT INTO {table} SELECT randomblob({GROW_ROW}) FROM
                       (WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < {SHRINK_ROWS})
                        SELECT i FROM c);"
                );
                let shrunk = conn
                    .execute_batch(&fill)
                    .and_then(|()| conn.execute_batch(&format!("DELETE FROM {table}; VACUUM;")));
                match shrunk {
                    Err(e) if crate::sqlite::is_busy(&e) => {
                        if !conn.is_autocommit() {
                            conn.execute_batch("ROLLBACK")?;
                        }
                        print_line("shrink busy")
                    }
                    done => Ok(done?),
                }
            }
            "checkpoint" => {
                let base = Options {
                    #[cfg(feature = "test-hooks")]
                    sabotage: onesync_store::Sabotage::from_env(),
                    ..Options::default()
                };
                let store = Store::open(&self.args.db, &super::explore_options(&base))?;
                store.checkpoint()?;
                Ok(store.close()?)
            }
            _ => bail!("unknown command {command:?}"),
        }
    }

    fn conn(&self) -> Result<&Connection> {
        self.conn.as_ref().ok_or_else(|| anyhow!("not open"))
    }

    fn open(&mut self) -> Result<()> {
        let args = self.args;
        let conn = match (args.backend, &args.replicate) {
            (Backend::Onesync, Some(url)) => super::open_replicated(&args.db, url, args.replicate_sync)?,
            (Backend::Onesync, None) => super::open_store(&args.db, false)?,
            (Backend::StockJournalOff, _) => {
                let conn = crate::sqlite::open_plain(&args.db, OpenFlags::default())?;
                conn.execute_batch("PRAGMA journal_mode = OFF")?;
                conn
            }
        };
        conn.busy_timeout(super::WORKER_BUSY_TIMEOUT)?;
        conn.execute_batch(&format!(
            "PRAGMA locking_mode = {}; PRAGMA synchronous = {};",
            args.locking.pragma(),
            args.sync.pragma()
        ))?;
        if args.flushes_by_hand() {
            // No background flush: its thread's timing would change the calls from one run
            // to the next, and every crash point must be reached where the reference run had
            // it. Flushes come from `PRAGMA onesync_flush` instead (see `transfer`), through
            // the same code; `onesync-lab torture` covers the background flusher's timing.
            conn.execute_batch("PRAGMA onesync_sync_interval_ms = 3600000")?;
        }
        if args.concurrent {
            if args.backend != Backend::Onesync {
                bail!("--concurrent needs the onesync backend");
            }
            crate::sqlite::set_concurrent(&conn)?;
        }
        if args.attach && args.plain_aux {
            // Through SQLite's unix VFS: the explorer's VFS takes every file for a store.
            let plain = format!("file:{}?vfs=unix", super::plain_aux_path(&args.db).display());
            conn.execute("ATTACH ?1 AS aux", [plain])?;
            conn.execute_batch(&format!("PRAGMA aux.synchronous = {}", args.sync.pragma()))?;
        } else if args.attach {
            conn.execute("ATTACH ?1 AS aux", [super::aux_uri(&args.db)])?;
        }
        self.held = None;
        self.conn = Some(conn);
        Ok(())
    }

    /// Writes `line` into the write log's order, then to the explorer.
    fn report(&self, line: &str) -> Result<()> {
        #[cfg(feature = "test-hooks")]
        if let Some(log) = &self.log {
            log.note(line).context("noting in the write log")?;
        }
        print_line(line)
    }

    /// The next transfer: its id and (from, to, amount), drawn from the seed.
    fn next_transfer(&mut self) -> Transfer {
        self.transfers += 1;
        let id = format!("{}{}", self.args.name, self.transfers);
        let from = self.rng.random_range(1..=bank::ACCOUNTS);
        let to = (from + self.rng.random_range(1..bank::ACCOUNTS) - 1) % bank::ACCOUNTS + 1;
        let amount = self.rng.random_range(1..=100);
        Transfer {
            id,
            moves: (from, to, amount),
        }
    }

    fn transfer(&mut self) -> Result<()> {
        let t = self.next_transfer();
        let (from, to, amount) = t.moves;
        let conn = self.conn()?;
        let done = if self.args.attach {
            bank::transfer_in_schemas(conn, &["main", "aux"], &t.id, from, to, amount)
        } else {
            bank::transfer_atomically(conn, &t.id, from, to, amount)
        };
        match done {
            // A concurrent writer's transfer that conflicted: it was rolled back; again.
            Err(e) if self.args.concurrent && !self.args.attach && crate::sqlite::is_busy(&e) => {
                self.rerun(&t, &e)?
            }
            other => other.with_context(|| format!("transfer {}", t.id))?,
        }
        self.acknowledge(&t.id)
    }

    /// `begin`: BEGIN and a transfer's statements; the transaction stays open.
    fn begin(&mut self) -> Result<()> {
        if self.args.attach {
            bail!("begin: not with ATTACH");
        }
        if self.held.is_some() {
            bail!("begin: a transaction is already held");
        }
        let t = self.next_transfer();
        let (from, to, amount) = t.moves;
        let conn = self.conn()?;
        conn.execute_batch("BEGIN")
            .with_context(|| format!("BEGIN of transfer {}", t.id))?;
        if let Err(e) = bank::move_money(conn, &t.id, from, to, amount) {
            let _ = conn.execute_batch("ROLLBACK");
            return Err(e).with_context(|| format!("transfer {} (begin)", t.id));
        }
        self.held = Some(t);
        Ok(())
    }

    /// `begin-grow`'s statements: BEGIN, this process's table made if missing, two
    /// overflowing rows appended.
    fn grow_statements(&self) -> String {
        let table = format!("grow_{}", self.args.name);
        format!(
            "BEGIN; CREATE TABLE IF NOT EXISTS {table}(pad BLOB NOT NULL);
             INSERT INTO {table} SELECT randomblob({GROW_ROW}) FROM (SELECT 1 UNION ALL SELECT 2);"
        )
    }

    /// `commit-grow`: COMMIT of the rows `begin-grow` appended. Beside another writer's rows
    /// it goes through, their new pages moved; it conflicts only where the other's commit
    /// changed the schema meanwhile (its first, or one a stop left to recovery): then it is
    /// rolled back and runs again whole, as a transfer does.
    fn commit_grow(&mut self) -> Result<()> {
        let conn = self.conn()?;
        let mut result = conn.execute_batch("COMMIT");
        for _ in 1..RERUNS {
            match result {
                Err(e) if crate::sqlite::is_busy(&e) => {
                    if !conn.is_autocommit() {
                        conn.execute_batch("ROLLBACK")?;
                    }
                    print_line(&format!(
                        "retry grow {}",
                        crate::sqlite::extended_code(&e).unwrap_or(0)
                    ))?;
                    result = conn
                        .execute_batch(&self.grow_statements())
                        .and_then(|()| conn.execute_batch("COMMIT"));
                }
                _ => break,
            }
        }
        if result.is_err() && !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        result.context("COMMIT of rows appended beside another writer's")
    }

    /// `commit`: COMMIT of the held transaction, acknowledged; a COMMIT refused as busy (a
    /// conflict: SQLITE_BUSY_SNAPSHOT) reruns the transfer whole.
    fn commit(&mut self) -> Result<()> {
        let t = self
            .held
            .take()
            .ok_or_else(|| anyhow!("commit: no transaction held"))?;
        let conn = self.conn()?;
        match conn.execute_batch("COMMIT") {
            Ok(()) => {}
            Err(e) if crate::sqlite::is_busy(&e) => {
                // SQLite has rolled back after SQLITE_BUSY_SNAPSHOT, not after SQLITE_BUSY.
                if !conn.is_autocommit() {
                    conn.execute_batch("ROLLBACK")
                        .with_context(|| format!("ROLLBACK of transfer {} after {e}", t.id))?;
                }
                self.rerun(&t, &e)?;
            }
            Err(e) => {
                if !conn.is_autocommit() {
                    let _ = conn.execute_batch("ROLLBACK");
                }
                return Err(e).with_context(|| format!("COMMIT of transfer {}", t.id));
            }
        }
        self.acknowledge(&t.id)
    }

    /// Transfer `t` again as a whole transaction after its COMMIT failed with `failed` (a
    /// busy code), noting the failure as `retry ID CODE`.
    fn rerun(&self, t: &Transfer, failed: &rusqlite::Error) -> Result<()> {
        let code = crate::sqlite::extended_code(failed).unwrap_or(0);
        print_line(&format!("retry {} {code}", t.id))?;
        let conn = self.conn()?;
        let retries = bank::transfer_retrying(conn, &t.id, t.moves, RERUNS, std::time::Duration::ZERO)
            .with_context(|| format!("transfer {} (rerun after {failed}, extended code {code})", t.id))?;
        for _ in 0..retries.busy_snapshot {
            print_line(&format!("retry {} {}", t.id, rusqlite::ffi::SQLITE_BUSY_SNAPSHOT))?;
        }
        for _ in 0..retries.busy {
            print_line(&format!("retry {} {}", t.id, rusqlite::ffi::SQLITE_BUSY))?;
        }
        Ok(())
    }

    /// `ack ID` (COMMIT returned), and a flush now and then at NORMAL and OFF.
    fn acknowledge(&mut self, id: &str) -> Result<()> {
        self.report(&format!("ack {id}"))?;
        if self.args.flushes_by_hand() && self.transfers.is_multiple_of(2) {
            // What the background flush would do now and then (see `open`).
            self.conn()?
                .query_row("PRAGMA onesync_flush", [], |_| Ok(()))
                .context("PRAGMA onesync_flush")?;
        }
        Ok(())
    }

    /// A transfer and [`SPILL_ROWS`](super::SPILL_ROWS) filler rows in one transaction with
    /// a two-page cache (SQLite writes pages to the database before it ends), then COMMIT
    /// (acknowledged; the transfer id carries [`SPILL_MARK`](super::SPILL_MARK)) or ROLLBACK
    /// (it carries [`ROLLED_BACK_MARK`](super::ROLLED_BACK_MARK)).
    fn spill(&mut self, commit: bool) -> Result<()> {
        self.transfers += 1;
        let mark = if commit {
            super::SPILL_MARK
        } else {
            super::ROLLED_BACK_MARK
        };
        let id = format!("{}{mark}{}", self.args.name, self.transfers);
        let from = self.rng.random_range(1..=bank::ACCOUNTS);
        let to = from % bank::ACCOUNTS + 1;
        let conn = self.conn()?;
        let cache_size: i64 = conn.query_row("PRAGMA cache_size", [], |r| r.get(0))?;
        conn.execute_batch("PRAGMA cache_size = 2; BEGIN")?;
        let work = (|| -> rusqlite::Result<()> {
            bank::move_money(conn, &id, from, to, 1)?;
            conn.execute_batch(&format!(
                "CREATE TABLE IF NOT EXISTS filler(transfer_id TEXT NOT NULL, pad BLOB NOT NULL);
                 WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {rows})
                 INSERT INTO filler SELECT '{id}', randomblob(400) FROM n;",
                rows = super::SPILL_ROWS
            ))
        })();
        let end = if commit && work.is_ok() {
            "COMMIT"
        } else {
            "ROLLBACK"
        };
        let ended = conn.execute_batch(end);
        conn.execute_batch(&format!("PRAGMA cache_size = {cache_size}"))?;
        work.and(ended)
            .with_context(|| format!("spilling transfer {id}"))?;
        if commit {
            self.report(&format!("ack {id}"))?;
        }
        Ok(())
    }

    fn read(&mut self) -> Result<()> {
        let conn = self.conn()?;
        let in_txn = !conn.is_autocommit();
        if !in_txn {
            conn.execute_batch("BEGIN")?;
        }
        let read = (|| -> rusqlite::Result<(Option<i64>, Vec<String>)> {
            let total = conn.query_row("SELECT sum(balance) FROM account", [], |r| r.get(0))?;
            let mut stmt = conn.prepare("SELECT transfer_id FROM ledger ORDER BY rowid")?;
            let ids = stmt
                .query_map([], |r| r.get(0))?
                .collect::<rusqlite::Result<Vec<String>>>()?;
            Ok((total, ids))
        })();
        if !in_txn {
            conn.execute_batch("COMMIT")?;
        }
        let (total, ids) = read?;
        if total != Some(bank::TOTAL_MONEY) {
            print_line(&format!(
                "torn a read saw {total:?} in the accounts, not {}",
                bank::TOTAL_MONEY
            ))?;
        }
        for id in ids {
            if self.seen.insert(id.clone()) {
                self.report(&format!("saw {id}"))?;
            }
        }
        Ok(())
    }
}
