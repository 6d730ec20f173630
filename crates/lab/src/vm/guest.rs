//! What runs inside the VM (hidden subcommands of the same static binary):
//! - `__vm-selftest`: the functional tests of the onesync-f2fs backend on a real F2FS
//!   (commit, rollback with and without spilled pages, savepoints, a failing multi-row
//!   insert, ATTACH, a process dying mid-transaction, synchronous=OFF, refusals), and of
//!   the bundled SQLite's batch atomic writes;
//! - `__vm-tpcb`: the power-cut workload of `onesync-lab vm torture` (check what survived the
//!   last cut, then run TPC-B transactions printing each acknowledged one until killed).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{anyhow, bail, ensure, Context, Result};
use onesync_vm::guest::{drop_caches, run_cases, Case};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use rusqlite::{Connection, OpenFlags};

use crate::schemes::{open_stock, Mode};
use crate::sqlite::{check_integrity, open_f2fs, open_plain};
use crate::workloads::tpcb;

#[derive(clap::Args, Debug)]
pub struct SelftestArgs {
    /// Directory on the F2FS to test in
    #[arg(long, value_name = "D", default_value = ".")]
    pub dir: PathBuf,
}

#[derive(clap::Args, Debug)]
pub struct SelftestChildArgs {
    /// Database to open through onesync-f2fs
    #[arg(long, value_name = "DB")]
    pub db: PathBuf,
}

/// Rows the spilling transactions insert, and their size: far more than a 5-page cache.
const SPILL_ROWS: i64 = 400;
const SPILL_BYTES: usize = 1000;

pub fn selftest(args: &SelftestArgs) -> Result<ExitCode> {
    let cases: &[(&str, Case)] = &[
        ("f2fs-atomic-write-feature", feature),
        ("commit-is-one-atomic-write", commit),
        ("plain-sqlite-file-format", file_format),
        ("rollback", rollback),
        ("rollback-after-spill", rollback_after_spill),
        ("commit-after-spill", commit_after_spill),
        ("savepoints", savepoints),
        ("failing-multi-row-insert", failing_multi_row_insert),
        ("attach", attach),
        ("process-dies-mid-transaction", process_dies),
        ("synchronous-off-commits-at-unlock", synchronous_off),
        ("refusals", refusals),
        ("batch-atomic-bundled-sqlite", batch_atomic),
        ("debian-sqlite3-cli-loads-libonesync", stock_cli),
    ];
    run_cases("selftest", &args.dir.join("onesync-selftest"), cases)
}

fn count(conn: &Connection, table: &str) -> Result<i64> {
    Ok(conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))?)
}

fn new_table(dir: &Path) -> Result<(PathBuf, Connection)> {
    let db = dir.join("test.db");
    let conn = open_f2fs(&db)?;
    conn.execute_batch("PRAGMA synchronous=FULL; CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)")?;
    Ok((db, conn))
}

fn feature(dir: &Path) -> Result<()> {
    let probe = dir.join("probe");
    fs::write(&probe, b"x")?;
    onesync_vfs::f2fs_atomic_write_support(&probe).map_err(|e| anyhow!(e))
}

fn commit(dir: &Path) -> Result<()> {
    let (db, conn) = new_table(dir)?;
    let before = onesync_vfs::f2fs_stats();
    conn.execute_batch("BEGIN; INSERT INTO t VALUES (1, 'one'); INSERT INTO t VALUES (2, 'two'); COMMIT")?;
    let after = onesync_vfs::f2fs_stats();
    ensure!(
        after.atomic_begins == before.atomic_begins + 1 && after.atomic_commits == before.atomic_commits + 1,
        "one transaction should be one atomic write: {before:?} -> {after:?}"
    );
    ensure!(
        after.plain_syncs == before.plain_syncs,
        "a plain fsync happened: {before:?} -> {after:?}"
    );
    let journal = PathBuf::from(format!("{}-journal", db.display()));
    ensure!(
        !journal.exists(),
        "a rollback journal was written to disk: {}",
        journal.display()
    );
    drop(conn);
    drop_caches()?;
    let conn = open_f2fs(&db)?;
    ensure!(
        count(&conn, "t")? == 2,
        "the committed rows are not all there after a reopen"
    );
    check_integrity(&conn)
}

fn file_format(dir: &Path) -> Result<()> {
    let (db, conn) = new_table(dir)?;
    conn.execute("INSERT INTO t VALUES (7, 'seven')", [])?;
    drop(conn);
    // The stock default VFS reads it as an ordinary SQLite database.
    let plain = open_plain(&db, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let v: String = plain.query_row("SELECT v FROM t WHERE id = 7", [], |r| r.get(0))?;
    ensure!(v == "seven", "read {v:?}");
    check_integrity(&plain)?;
    let header = fs::read(&db)?;
    ensure!(
        header.starts_with(b"SQLite format 3\0"),
        "not a SQLite file header"
    );
    Ok(())
}

fn rollback(dir: &Path) -> Result<()> {
    let (_db, conn) = new_table(dir)?;
    conn.execute("INSERT INTO t VALUES (1, 'kept')", [])?;
    conn.execute_batch(
        "BEGIN; INSERT INTO t VALUES (2, 'gone'); UPDATE t SET v = 'changed' WHERE id = 1; ROLLBACK",
    )?;
    ensure!(count(&conn, "t")? == 1, "the rolled-back insert is there");
    let v: String = conn.query_row("SELECT v FROM t WHERE id = 1", [], |r| r.get(0))?;
    ensure!(v == "kept", "the rolled-back update is there: {v:?}");
    check_integrity(&conn)
}

/// A transaction too big for a 5-page cache: SQLite writes pages to the file before COMMIT.
fn spill(conn: &Connection) -> Result<()> {
    conn.execute_batch("PRAGMA cache_size = 5")?;
    conn.execute_batch("BEGIN")?;
    let before = onesync_vfs::f2fs_stats().atomic_begins;
    let mut insert = conn.prepare("INSERT INTO t(v) VALUES (?1)")?;
    for i in 0..SPILL_ROWS {
        insert.execute([vec![(i % 251) as u8; SPILL_BYTES]])?;
    }
    ensure!(
        onesync_vfs::f2fs_stats().atomic_begins > before,
        "the transaction did not spill to the file (no atomic write started before COMMIT)"
    );
    Ok(())
}

fn rollback_after_spill(dir: &Path) -> Result<()> {
    let (db, conn) = new_table(dir)?;
    conn.execute("INSERT INTO t VALUES (1, 'kept')", [])?;
    spill(&conn)?;
    conn.execute_batch("ROLLBACK")?;
    ensure!(
        count(&conn, "t")? == 1,
        "rows of the rolled-back transaction are there"
    );
    check_integrity(&conn)?;
    drop(conn);
    drop_caches()?;
    let plain = open_plain(&db, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    ensure!(
        count(&plain, "t")? == 1,
        "on disk: rows of the rolled-back transaction are there"
    );
    check_integrity(&plain)
}

fn commit_after_spill(dir: &Path) -> Result<()> {
    let (db, conn) = new_table(dir)?;
    let before = onesync_vfs::f2fs_stats();
    spill(&conn)?;
    conn.execute_batch("COMMIT")?;
    let after = onesync_vfs::f2fs_stats();
    ensure!(
        after.atomic_commits == before.atomic_commits + 1,
        "a spilled transaction should still be one atomic write: {before:?} -> {after:?}"
    );
    drop(conn);
    drop_caches()?;
    let plain = open_plain(&db, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    ensure!(
        count(&plain, "t")? == SPILL_ROWS,
        "the spilled transaction is not all there"
    );
    check_integrity(&plain)
}

fn savepoints(dir: &Path) -> Result<()> {
    let (_db, conn) = new_table(dir)?;
    conn.execute_batch(
        "SAVEPOINT a; INSERT INTO t VALUES (1, 'a');
         SAVEPOINT b; INSERT INTO t VALUES (2, 'b');
         ROLLBACK TO b; INSERT INTO t VALUES (3, 'c');
         SAVEPOINT c; INSERT INTO t VALUES (4, 'd'); RELEASE c;
         RELEASE a;",
    )?;
    let ids: Vec<i64> = conn
        .prepare("SELECT id FROM t ORDER BY id")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    ensure!(
        ids == [1, 3, 4],
        "rows after the savepoints: {ids:?}, want [1, 3, 4]"
    );
    check_integrity(&conn)
}

fn failing_multi_row_insert(dir: &Path) -> Result<()> {
    let (_db, conn) = new_table(dir)?;
    conn.execute_batch("BEGIN; INSERT INTO t VALUES (10, 'ten')")?;
    let failed = conn.execute("INSERT INTO t VALUES (11, 'x'), (12, 'y'), (10, 'duplicate')", []);
    ensure!(failed.is_err(), "the duplicate key was accepted");
    conn.execute_batch("COMMIT")?;
    let ids: Vec<i64> = conn
        .prepare("SELECT id FROM t ORDER BY id")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    ensure!(
        ids == [10],
        "rows after the failing statement: {ids:?}, want [10]"
    );
    check_integrity(&conn)
}

fn attach(dir: &Path) -> Result<()> {
    let (_db, conn) = new_table(dir)?;
    let aux = dir.join("aux.db");
    conn.execute(
        "ATTACH ?1 AS aux",
        [format!(
            "file:{}?vfs={}",
            aux.display(),
            onesync_vfs::F2FS_VFS_NAME
        )],
    )?;
    conn.execute_batch("CREATE TABLE aux.u(id INTEGER PRIMARY KEY, v TEXT)")?;
    let before = onesync_vfs::f2fs_stats();
    conn.execute_batch(
        "BEGIN; INSERT INTO t VALUES (1, 'main'); INSERT INTO aux.u VALUES (1, 'aux'); COMMIT",
    )?;
    let after = onesync_vfs::f2fs_stats();
    ensure!(
        after.atomic_commits == before.atomic_commits + 2,
        "a two-database transaction should be one atomic write per file: {before:?} -> {after:?}"
    );
    conn.execute_batch("BEGIN; INSERT INTO t VALUES (2, 'x'); INSERT INTO aux.u VALUES (2, 'y'); ROLLBACK")?;
    ensure!(
        count(&conn, "t")? == 1 && count(&conn, "aux.u")? == 1,
        "rows after commit + rollback"
    );
    check_integrity(&conn)?;
    conn.execute_batch("DETACH aux")?;
    let plain = open_plain(&aux, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    ensure!(count(&plain, "u")? == 1, "the attached file read plainly");
    Ok(())
}

/// A child process starts a transaction, spills pages into an atomic write, and dies
/// (SIGKILL from itself): the kernel drops the atomic write with the process.
fn process_dies(dir: &Path) -> Result<()> {
    let (db, conn) = new_table(dir)?;
    conn.execute("INSERT INTO t VALUES (1, 'kept')", [])?;
    drop(conn);
    let exe = std::env::current_exe().context("finding this program")?;
    let out = Command::new(exe)
        .args(["__vm-selftest-child", "--db"])
        .arg(&db)
        .output()
        .context("running the child")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(
        stdout.contains("spilled"),
        "the child did not get as far as spilling: status {}, stdout {stdout:?}, stderr {:?}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(!out.status.success(), "the child was supposed to die");
    drop_caches()?;
    let plain = open_plain(&db, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    ensure!(
        count(&plain, "t")? == 1,
        "rows of the dead process's transaction are on disk"
    );
    check_integrity(&plain)?;
    drop(plain);
    // And the backend opens and writes it again.
    let conn = open_f2fs(&db)?;
    conn.execute("INSERT INTO t VALUES (2, 'after')", [])?;
    ensure!(count(&conn, "t")? == 2, "writing after the dead process");
    check_integrity(&conn)
}

/// The child of [`process_dies`].
pub fn selftest_child(args: &SelftestChildArgs) -> Result<()> {
    let conn = open_f2fs(&args.db)?;
    spill(&conn)?;
    println!("spilled");
    std::io::stdout().flush()?;
    nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL)?;
    bail!("still alive after SIGKILL")
}

fn synchronous_off(dir: &Path) -> Result<()> {
    let (db, conn) = new_table(dir)?;
    conn.execute_batch("PRAGMA synchronous=OFF")?;
    let before = onesync_vfs::f2fs_stats();
    conn.execute("INSERT INTO t VALUES (1, 'x')", [])?;
    let after = onesync_vfs::f2fs_stats();
    ensure!(
        after.atomic_commits == before.atomic_commits + 1,
        "without xSync the transaction must still commit at its end: {before:?} -> {after:?}"
    );
    drop(conn);
    drop_caches()?;
    let plain = open_plain(&db, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    ensure!(count(&plain, "t")? == 1, "the row is not on disk");
    Ok(())
}

fn refusals(dir: &Path) -> Result<()> {
    let (db, conn) = new_table(dir)?;
    // WAL would bypass the atomic write: answered with the mode in effect, as stock SQLite
    // answers a change it cannot make, and the file stays in rollback mode.
    let wal = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0))?;
    ensure!(
        wal == "delete",
        "journal_mode=WAL was answered {wal:?}, not the mode in effect"
    );
    conn.execute_batch("INSERT INTO t(v) VALUES (x'01')")?;
    let wal_file = PathBuf::from(format!("{}-wal", db.display()));
    ensure!(!wal_file.exists(), "journal_mode=WAL made {}", wal_file.display());
    drop(conn);
    // A hot journal left by a stock SQLite: the backend must not open over it.
    let journal = PathBuf::from(format!("{}-journal", db.display()));
    fs::write(
        &journal,
        [0xd9, 0xd5, 0x05, 0xf9, 0x20, 0xa1, 0x63, 0xd7, 1, 2, 3],
    )?;
    let refused = open_f2fs(&db).and_then(|c| count(&c, "t"));
    ensure!(refused.is_err(), "opened over a hot journal");
    fs::remove_file(&journal)?;
    open_f2fs(&db)?;
    Ok(())
}

/// The bundled SQLite (built with SQLITE_ENABLE_BATCH_ATOMIC_WRITE) on its default VFS: on
/// F2FS a PERSIST-mode commit leaves no journal file. (SQLite journals the first transaction
/// of an empty database on disk as usual; batch atomic writes start with the second.)
fn batch_atomic(dir: &Path) -> Result<()> {
    let db = dir.join("batch.db");
    let journal = PathBuf::from(format!("{}-journal", db.display()));
    {
        let conn = open_stock(Mode::BatchAtomic, &db)?;
        conn.execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")?;
    }
    if journal.exists() {
        fs::remove_file(&journal)?;
    }
    let conn = open_stock(Mode::BatchAtomic, &db)?;
    conn.execute_batch("INSERT INTO t VALUES (1, 'x'); BEGIN; INSERT INTO t VALUES (2, 'y'); COMMIT")?;
    ensure!(
        !journal.exists(),
        "PERSIST left {}: batch atomic writes were not used",
        journal.display()
    );
    ensure!(count(&conn, "t")? == 2, "rows missing");
    check_integrity(&conn)
}

/// Debian's own `sqlite3` (3.40, no batch atomic writes) loads `libonesync.so` and commits
/// through onesync-f2fs: each transaction one atomic write, the file plain SQLite.
fn stock_cli(dir: &Path) -> Result<()> {
    let cli = Path::new("/usr/bin/sqlite3");
    let extension = Path::new("/").join(super::kit::GUEST_EXTENSION);
    ensure!(
        cli.is_file(),
        "no {} in the guest (apt-get install sqlite3 on the host)",
        cli.display()
    );
    ensure!(extension.is_file(), "no {} in the guest", extension.display());
    let db = dir.join("cli.db");
    let out = Command::new(cli)
        .env(
            "LD_LIBRARY_PATH",
            "/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu",
        )
        .args(["-batch", ":memory:", "-cmd"])
        .arg(format!(".load {}", extension.with_extension("").display()))
        .arg("-cmd")
        .arg(format!(
            ".open 'file:{}?vfs={}'",
            db.display(),
            onesync_vfs::F2FS_VFS_NAME
        ))
        .arg(
            "CREATE TABLE t(x); BEGIN; INSERT INTO t VALUES (1); INSERT INTO t VALUES (2); COMMIT; \
             BEGIN; INSERT INTO t VALUES (3); ROLLBACK; \
             SELECT sqlite_version(); SELECT count(*) FROM t; PRAGMA onesync_f2fs_stats;",
        )
        .output()
        .context("running the sqlite3 CLI")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success(),
        "sqlite3 failed ({}): {stdout} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    let [version, rows, stats] = lines[..] else {
        bail!("unexpected output from sqlite3: {stdout:?}");
    };
    ensure!(version.starts_with("3."), "no version: {stdout:?}");
    ensure!(rows == "2", "rows after commit and rollback: {rows}, want 2");
    let stats: onesync_vfs::F2fsStats =
        serde_json::from_str(stats).with_context(|| format!("stats {stats:?}"))?;
    ensure!(
        stats.atomic_commits >= 2 && stats.plain_syncs == 0,
        "the CLI's transactions were not atomic writes: {stats:?}"
    );
    let journal = PathBuf::from(format!("{}-journal", db.display()));
    ensure!(
        !journal.exists(),
        "a journal file was written: {}",
        journal.display()
    );
    drop_caches()?;
    let plain = open_plain(&db, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    ensure!(count(&plain, "t")? == 2, "on disk after the CLI");
    println!("  (Debian's sqlite3 {version}: {stats:?})");
    check_integrity(&plain)
}

#[derive(clap::Args, Debug)]
pub struct TpcbArgs {
    /// The commit scheme
    #[arg(long, value_enum)]
    pub mode: Mode,
    /// Directory of the database
    #[arg(long, value_name = "D", default_value = ".")]
    pub dir: PathBuf,
    /// Seed of the transactions
    #[arg(long, value_name = "S", default_value_t = 1)]
    pub seed: u64,
    /// Only check (the last boot); run no transactions
    #[arg(long)]
    pub check_only: bool,
    /// Stop by itself after this many transactions (0: never)
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub max_txns: u64,
}

/// Prefix of the line that reports the state found at start.
pub const STATE_PREFIX: &str = "@state ";
/// The line after which transactions run (the power cut is timed from it).
pub const RUNNING_LINE: &str = "@running";
/// Prefix of the line printed after each COMMIT returned.
pub const ACK_PREFIX: &str = "@ack ";

/// Accounts of the torture's TPC-B (a tenth of the bench's: setup stays short under TCG).
const TPCB_ACCOUNTS: i64 = 1_000;

/// What a check found: the history's size and largest sequence number (-1: empty), or why
/// the database is broken.
#[derive(Debug, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct TpcbState {
    pub history: i64,
    pub max_seq: i64,
    /// None if integrity, conservation of money and the sequence are all right.
    pub problem: Option<String>,
}

fn open_tpcb(mode: Mode, db: &Path) -> Result<Connection> {
    open_stock(mode, db)
}

fn tpcb_check(conn: &Connection) -> Result<(i64, i64)> {
    check_integrity(conn)?;
    tpcb::money_conserved(conn)?;
    let (rows, max_seq, distinct): (i64, i64, i64) = conn.query_row(
        "SELECT count(*), ifnull(max(mtime), -1), count(DISTINCT mtime) FROM history",
        [],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )?;
    // Transactions are numbered 0, 1, 2, ... in commit order: what survived must be a prefix.
    if rows != max_seq + 1 || distinct != rows {
        bail!("the history is not a prefix of the transactions: {rows} rows, {distinct} distinct, largest {max_seq}");
    }
    Ok((rows, max_seq))
}

pub fn tpcb(args: &TpcbArgs) -> Result<()> {
    let db = args.dir.join("tpcb.db");
    let exists = db.exists();
    let conn = open_tpcb(args.mode, &db)?;
    if !exists {
        crate::sqlite::in_transaction(&conn, || tpcb::set_up(&conn, TPCB_ACCOUNTS))?;
    }
    let state = match tpcb_check(&conn) {
        Ok((history, max_seq)) => TpcbState {
            history,
            max_seq,
            problem: None,
        },
        Err(e) => TpcbState {
            history: -1,
            max_seq: -1,
            problem: Some(format!("{e:#}")),
        },
    };
    println!("{STATE_PREFIX}{}", serde_json::to_string(&state)?);
    std::io::stdout().flush()?;
    if args.check_only || state.problem.is_some() {
        return Ok(());
    }
    println!("{RUNNING_LINE}");
    std::io::stdout().flush()?;
    let mut rng = SmallRng::seed_from_u64(args.seed ^ state.max_seq as u64);
    let mut seq = state.max_seq + 1;
    loop {
        tpcb::transaction(&conn, TPCB_ACCOUNTS, seq, &mut rng)?;
        println!("{ACK_PREFIX}{seq}");
        std::io::stdout().flush()?;
        seq += 1;
        if args.max_txns > 0 && (seq - state.max_seq - 1) as u64 >= args.max_txns {
            return Ok(());
        }
    }
}
