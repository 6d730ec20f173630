//! A writer process of `replication-torture` (`onesync-lab __replica-writer`): one
//! connection to the store through the onesync VFS (statically registered), opened with
//! `onesync_replicate=URL`, so this process replicates the database too and ships whenever it
//! holds the lease. It runs one-row transactions until killed (or until its stdin closes,
//! then it closes the connection and exits), printing after each COMMIT returned
//! `committed W N SEQ` (its writer number, the transaction's number, the commit's seq from
//! `PRAGMA onesync_commit`), and after every few `status SHIPPING SHIPPED_SEQ TXID LAG_COMMITS
//! ERROR` from `PRAGMA onesync_replicate` (SHIPPING and ERROR 0 or 1).
//!
//! Each transaction inserts a `log` row `(w, n)` and changes `t` as `(w, n)` decides
//! ([`effect`]), so a restored database is a consistent prefix when replaying its `log` gives
//! its `t` (the check in `replica_check.rs`).

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rusqlite::Connection;
use serde::Deserialize;

use crate::sqlite::{commit_point, is_busy, open_onesync_with};

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
}

impl WriterKind {
    pub const ALL: [WriterKind; 3] = [WriterKind::Full, WriterKind::Normal, WriterKind::Concurrent];

    pub fn name(self) -> &'static str {
        match self {
            WriterKind::Full => "full",
            WriterKind::Normal => "normal",
            WriterKind::Concurrent => "concurrent",
        }
    }
}

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

/// Opens the store replicated to `url` as a `kind` writer.
pub fn open_replicated(db: &Path, url: &str, interval_ms: u64, kind: WriterKind) -> Result<Connection> {
    let mut parameters = format!(
        "onesync_replicate={}&onesync_replicate_interval_ms={interval_ms}",
        uri_escape(url)
    );
    if kind == WriterKind::Concurrent {
        parameters.push_str("&concurrent=1");
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

/// One transaction, retried whole while SQLite says busy (a concurrent writer's refused
/// COMMIT too: SQLite rolled it back).
fn transact(conn: &Connection, w: u64, n: u64, rng: &mut SmallRng) -> Result<()> {
    let (put, del) = effect(w, n);
    let pad = rng.random_range(0..200u32);
    loop {
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
            conn.execute_batch("COMMIT")
        })();
        match attempt {
            Ok(()) => return Ok(()),
            Err(e) => {
                if !conn.is_autocommit() {
                    let _ = conn.execute_batch("ROLLBACK");
                }
                if !is_busy(&e) {
                    return Err(anyhow!("transaction {w}.{n}: {e}"));
                }
                std::thread::sleep(Duration::from_micros(300));
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
    let conn = open_replicated(&args.db, &args.url, args.interval_ms, args.kind)?;
    print_line("ready")?;
    let mut rng = SmallRng::seed_from_u64(args.seed);
    let mut n = 0u64;
    while !stop.load(Ordering::SeqCst) {
        transact(&conn, args.writer, n, &mut rng)?;
        let seq = commit_point(&conn)?
            .seq
            .ok_or_else(|| anyhow!("PRAGMA onesync_commit names no commit after {}.{n}", args.writer))?;
        print_line(&format!("committed {} {n} {seq}", args.writer))?;
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
