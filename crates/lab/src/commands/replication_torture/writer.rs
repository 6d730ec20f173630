//! A writer process of `replication-torture` (`onesync-lab __replica-writer`): one
//! connection to the store through the onesync VFS (statically registered), opened with
//! `onesync_replicate=URL`, so this process replicates the database too and ships whenever it
//! holds the lease. It runs one-row transactions until killed (or until its stdin closes,
//! then it closes the connection and exits), printing after each COMMIT that returned
//! `committed W N SEQ` (its writer number, the transaction's number, the commit's seq from
//! `PRAGMA onesync_commit`), and after every few `status SHIPPING SHIPPED_SEQ TXID LAG_COMMITS
//! ERROR` from `PRAGMA onesync_replicate` (SHIPPING and ERROR 0 or 1).
//!
//! A `sync` writer (`onesync_replicate_sync=1` with `onesync_replicate_sync_timeout_ms`)
//! prints instead, per transaction, as crates/vfs/README.md's contract tells them apart:
//! - `acked W N SEQ`: COMMIT returned and the replica holds the commit — it returned sooner
//!   than the timeout (so its wait did not time out), or `replicated_seq` covers it;
//! - `unacked W N SEQ`: COMMIT returned past the timeout and `replicated_seq` does not cover
//!   it: durable and kept here, not known replicated (the VFS logs it);
//! - `refused W N CODE`: COMMIT failed with SQLite's extended code CODE (the contract:
//!   `SQLITE_IOERR`, nothing written), because an earlier commit of this connection is still
//!   not in the replica; SQLite rolled the transaction back and the writer goes on with N+1.
//!
//! Each transaction inserts a `log` row `(w, n)` and changes `t` as `(w, n)` decides
//! ([`effect`]), so a restored database is a consistent prefix when replaying its `log` gives
//! its `t` (the check in `replica_check.rs`).

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rusqlite::Connection;
use serde::Deserialize;

use crate::sqlite::{commit_point, extended_code, is_busy, open_onesync_with};

/// Keys of `t` the transactions write.
pub const KEYS: u64 = 48;
/// A writer prints its replication status after every this many commits.
const STATUS_EVERY: u64 = 3;

/// How a writer commits.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WriterKind {
    /// synchronous=FULL
    Full,
    /// synchronous=NORMAL (COMMIT returns before the flush)
    Normal,
    /// synchronous=FULL, opened with concurrent=1 (a conflicting COMMIT is retried)
    Concurrent,
    /// synchronous=FULL with onesync_replicate_sync=1 (COMMIT returns once the replica holds
    /// the commit, or past its timeout)
    Sync,
}

impl WriterKind {
    /// The kinds in the order writers are given them.
    pub const ALL: [WriterKind; 4] = [
        WriterKind::Full,
        WriterKind::Normal,
        WriterKind::Concurrent,
        WriterKind::Sync,
    ];

    pub fn name(self) -> &'static str {
        match self {
            WriterKind::Full => "full",
            WriterKind::Normal => "normal",
            WriterKind::Concurrent => "concurrent",
            WriterKind::Sync => "sync",
        }
    }

    /// Whether a COMMIT that returned is durable (all but NORMAL).
    pub fn durable_at_return(self) -> bool {
        self != WriterKind::Normal
    }
}

/// A sync writer's `onesync_replicate_sync_timeout_ms` unless told otherwise.
pub const SYNC_TIMEOUT_MS: u64 = 500;

#[derive(clap::Args, Debug)]
pub struct WriterArgs {
    /// The store
    pub db: PathBuf,
    /// The replica URL
    #[arg(long)]
    pub url: String,
    /// This writer's number (unique over the run)
    #[arg(long)]
    pub writer: u64,
    #[arg(long, value_enum)]
    pub kind: WriterKind,
    #[arg(long, default_value_t = 50)]
    pub interval_ms: u64,
    /// Longest pause between transactions
    #[arg(long, default_value_t = 20)]
    pub max_pause_ms: u64,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// A sync writer's onesync_replicate_sync_timeout_ms
    #[arg(long, default_value_t = SYNC_TIMEOUT_MS)]
    pub sync_timeout_ms: u64,
    /// A NORMAL writer's onesync_sync_interval_ms [default: the store's]
    #[arg(long)]
    pub sync_interval_ms: Option<u64>,
}

/// What transaction `(w, n)` does to `t`: the key it sets to `"w.n"` and the key it deletes.
pub fn effect(w: u64, n: u64) -> (u64, u64) {
    let h = (w.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ n.wrapping_mul(0xC2B2_AE3D_27D4_EB4F)).rotate_left(29);
    (h % KEYS, (h >> 32) % KEYS)
}

/// The tables, made once by the parent before any writer starts.
pub const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS t(k INTEGER PRIMARY KEY, v TEXT);
     CREATE TABLE IF NOT EXISTS log(id INTEGER PRIMARY KEY, w INTEGER NOT NULL, n INTEGER NOT NULL);";

/// `?`, `&` and `%` of a replica URL, escaped for a SQLite URI's query.
pub fn uri_escape(url: &str) -> String {
    url.replace('%', "%25").replace('?', "%3F").replace('&', "%26")
}

/// Opens the store replicated to `url` as a `kind` writer (`sync_timeout_ms`: a sync
/// writer's timeout; `sync_interval_ms`: a NORMAL writer's flush interval, if not the
/// store's).
pub fn open_replicated(
    db: &Path,
    url: &str,
    interval_ms: u64,
    kind: WriterKind,
    sync_timeout_ms: u64,
    sync_interval_ms: Option<u64>,
) -> Result<Connection> {
    let mut parameters = format!(
        "onesync_replicate={}&onesync_replicate_interval_ms={interval_ms}",
        uri_escape(url)
    );
    match kind {
        WriterKind::Concurrent => parameters.push_str("&concurrent=1"),
        WriterKind::Sync => parameters.push_str(&format!(
            "&onesync_replicate_sync=1&onesync_replicate_sync_timeout_ms={sync_timeout_ms}"
        )),
        WriterKind::Normal => {
            if let Some(ms) = sync_interval_ms {
                parameters.push_str(&format!("&onesync_sync_interval_ms={ms}"));
            }
        }
        WriterKind::Full => {}
    }
    let conn = open_onesync_with(db, false, &parameters)?;
    let level = if kind == WriterKind::Normal {
        "NORMAL"
    } else {
        "FULL"
    };
    conn.execute_batch(&format!("PRAGMA synchronous={level}"))?;
    Ok(conn)
}

/// `PRAGMA onesync_replicate`'s answer (the fields the torture reads).
#[derive(Deserialize, Debug, Clone)]
pub struct ReplicateStatus {
    pub shipping: bool,
    pub txid: u64,
    pub shipped_seq: u64,
    pub lag_commits: u64,
    pub last_error: Option<String>,
}

pub fn replicate_status(conn: &Connection) -> Result<ReplicateStatus> {
    let json: String = conn
        .query_row("PRAGMA onesync_replicate", [], |r| r.get(0))
        .context("PRAGMA onesync_replicate")?;
    serde_json::from_str(&json).with_context(|| format!("parsing PRAGMA onesync_replicate: {json}"))
}

fn print_line(line: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .context("writing to stdout (the parent has gone?)")
}

/// How a transaction ended.
enum Outcome {
    /// COMMIT returned, after this long.
    Committed(Duration),
    /// COMMIT failed with this extended code (a sync writer's refused COMMIT); SQLite rolled
    /// the transaction back.
    Refused(i32),
}

/// One transaction, retried whole while SQLite says busy (a concurrent writer's refused
/// COMMIT too: SQLite rolled it back). With `refusable`, a COMMIT failing with an I/O error
/// is a refusal (a sync writer's), not an error of the writer.
fn transact(conn: &Connection, w: u64, n: u64, rng: &mut SmallRng, refusable: bool) -> Result<Outcome> {
    let (put, del) = effect(w, n);
    let pad = rng.random_range(0..200u32);
    loop {
        let mut at_commit = None;
        let attempt = (|| -> rusqlite::Result<()> {
            conn.execute_batch("BEGIN")?;
            conn.execute("INSERT INTO log(w, n) VALUES (?1, ?2)", (w as i64, n as i64))?;
            conn.execute(
                "INSERT OR REPLACE INTO t(k, v) VALUES (?1, ?2 || ':' || hex(randomblob(?3)))",
                (put as i64, format!("{w}.{n}"), pad),
            )?;
            if del != put {
                conn.execute("DELETE FROM t WHERE k = ?1", [del as i64])?;
            }
            at_commit = Some(Instant::now());
            conn.execute_batch("COMMIT")
        })();
        match attempt {
            Ok(()) => {
                return Ok(Outcome::Committed(
                    at_commit.map_or(Duration::ZERO, |t| t.elapsed()),
                ))
            }
            Err(e) => {
                if !conn.is_autocommit() {
                    let _ = conn.execute_batch("ROLLBACK");
                }
                if is_busy(&e) {
                    std::thread::sleep(Duration::from_micros(300));
                    continue;
                }
                let code = extended_code(&e).unwrap_or(-1);
                if refusable && at_commit.is_some() && code & 0xff == rusqlite::ffi::SQLITE_IOERR {
                    return Ok(Outcome::Refused(code));
                }
                return Err(anyhow!("transaction {w}.{n}: {e}"));
            }
        }
    }
}

/// The writer process.
pub fn run(args: &WriterArgs) -> Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    {
        // The parent closes our stdin to ask for a clean exit.
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            while std::io::stdin().lock().read_line(&mut line).unwrap_or(0) > 0 {
                line.clear();
            }
            stop.store(true, Ordering::SeqCst);
        });
    }
    let sync = args.kind == WriterKind::Sync;
    let timeout = Duration::from_millis(args.sync_timeout_ms);
    let conn = open_replicated(
        &args.db,
        &args.url,
        args.interval_ms,
        args.kind,
        args.sync_timeout_ms,
        args.sync_interval_ms,
    )?;
    print_line("ready")?;
    let mut rng = SmallRng::seed_from_u64(args.seed);
    let mut n = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let w = args.writer;
        match transact(&conn, w, n, &mut rng, sync)? {
            Outcome::Refused(code) => print_line(&format!("refused {w} {n} {code}"))?,
            Outcome::Committed(took) => {
                let point = commit_point(&conn)?;
                let seq = point
                    .seq
                    .ok_or_else(|| anyhow!("PRAGMA onesync_commit names no commit after {w}.{n}"))?;
                let word = if !sync {
                    "committed"
                } else if took < timeout || point.replicated_seq.is_some_and(|r| r >= seq) {
                    // Sooner than the timeout, its wait for the replica cannot have timed out.
                    "acked"
                } else {
                    "unacked"
                };
                print_line(&format!("{word} {w} {n} {seq}"))?;
            }
        }
        if n.is_multiple_of(STATUS_EVERY) {
            let s = replicate_status(&conn)?;
            print_line(&format!(
                "status {} {} {} {} {}",
                u8::from(s.shipping),
                s.shipped_seq,
                s.txid,
                s.lag_commits,
                u8::from(s.last_error.is_some())
            ))?;
        }
        n += 1;
        if args.max_pause_ms > 0 {
            std::thread::sleep(Duration::from_millis(rng.random_range(0..=args.max_pause_ms)));
        }
    }
    drop(conn);
    Ok(())
}
