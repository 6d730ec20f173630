//! The lease (`crates/store/src/lease.rs`): a process alone with a store takes its
//! per-transaction locks in memory, and a second process opening the store must still wait
//! for them. The first process is the stock `sqlite3` CLI loading `libonesync.so`; it holds
//! a write transaction open, its lock held in memory. The second, opening the store
//! meanwhile, is this test binary (the worker test, with the VFS registered statically, so
//! that the negative control's build runs the sabotaged store): it is refused the write
//! lock (`SQLITE_BUSY`) until the first commits, which ends the lease; then it writes, and
//! both see every row.
//!
//! The negative control (`cargo test --release -p onesync-vfs --features test-hooks --test
//! lease`) runs the same test with `ONESYNC_SABOTAGE=lease-ignored` (the second process
//! takes the lock for real without reading the first's notes): it must fail.
//! Skipped, saying so, without the sqlite3 CLI.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command};

use onesync_vfs::{api_table_from_sys, register_static, VFS_NAME};
use rusqlite::{Connection, OpenFlags};

mod common;

fn have_cli() -> bool {
    common::have_sqlite3_cli()
}

fn preamble(db: &Path) -> String {
    common::cli_open_store(db)
}

/// A CLI process fed one batch of statements at a time.
struct Cli {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    batches: usize,
}

impl Cli {
    fn open(db: &Path) -> Cli {
        let mut child = common::spawn_sqlite3_cli(false);
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut cli = Cli {
            child,
            stdin,
            stdout,
            batches: 0,
        };
        cli.run(&preamble(db));
        cli
    }

    /// Runs `sql` and returns what it printed (errors go to stderr).
    fn run(&mut self, sql: &str) -> Vec<String> {
        self.batches += 1;
        let mark = format!("done-{}", self.batches);
        writeln!(self.stdin, "{sql}\nSELECT '{mark}';").unwrap();
        self.stdin.flush().unwrap();
        let mut lines = Vec::new();
        loop {
            let mut line = String::new();
            assert!(self.stdout.read_line(&mut line).unwrap() > 0, "sqlite3 exited");
            let line = line.trim_end().to_string();
            if line == mark {
                return lines;
            }
            lines.push(line);
        }
    }

    fn holds_lease(&mut self) -> bool {
        let out = self.run("PRAGMA onesync_stats;").join("\n");
        assert!(out.contains("\"holds_lease\""), "{out}");
        out.contains("\"holds_lease\":true")
    }

    fn close(mut self) {
        writeln!(self.stdin, ".quit").unwrap();
        drop(self.stdin);
        assert!(self.child.wait().unwrap().success());
    }
}

/// Runs `sql` in a CLI process of its own; returns (stdout, stderr).
fn run_once(db: &Path, sql: &str) -> (String, String) {
    let mut child = common::spawn_sqlite3_cli(true);
    let script = format!("{}{sql}\n", preamble(db));
    child.stdin.take().unwrap().write_all(script.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const JOINER: &str = "worker_joins_and_tries_the_write_lock";
const JOINER_DB: &str = "ONESYNC_TEST_LEASE_DB";
const JOINER_TIMEOUT: &str = "ONESYNC_TEST_LEASE_TIMEOUT_MS";

/// The second process: this binary's worker test on `db`, waiting up to `timeout_ms` for
/// the write lock; returns what it printed (`locked`, or `committed N` with the row count).
fn join(db: &Path, timeout_ms: u64) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", JOINER, "--test-threads", "1", "--nocapture"])
        .env(JOINER_DB, db)
        .env(JOINER_TIMEOUT, timeout_ms.to_string())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the joining process failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The harness prints the test's name on the line the worker's output starts.
    stdout
        .lines()
        .find_map(|l| l.split_once("joiner: ").map(|(_, said)| said.to_string()))
        .unwrap_or_default()
}

/// Run by `join` in a process of its own (passes at once otherwise).
#[test]
fn worker_joins_and_tries_the_write_lock() {
    let (Some(db), Some(timeout)) = (std::env::var_os(JOINER_DB), std::env::var_os(JOINER_TIMEOUT)) else {
        return;
    };
    let timeout: u64 = timeout.to_str().unwrap().parse().unwrap();
    register_static(&api_table_from_sys!(rusqlite::ffi)).expect("register onesync");
    let uri = format!("file:{}?vfs={VFS_NAME}", Path::new(&db).display());
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(uri, flags).unwrap();
    conn.busy_timeout(std::time::Duration::from_millis(timeout))
        .unwrap();
    match conn.execute_batch("BEGIN IMMEDIATE; INSERT INTO t VALUES ('b', 1); COMMIT;") {
        Ok(()) => {
            let n: i64 = conn
                .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
                .unwrap();
            println!("joiner: committed {n}");
        }
        Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) => {
            println!("joiner: locked")
        }
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn a_process_joining_waits_for_the_locks_the_process_alone_holds_in_memory() {
    if !have_cli() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("lease.db");
    let mut a = Cli::open(&db);
    a.run("CREATE TABLE t(who TEXT, n INTEGER); INSERT INTO t VALUES ('a', 0);");
    assert!(
        a.holds_lease(),
        "the only process with the store open holds no lease"
    );
    // A write transaction: SQLite's RESERVED, the store's user lock, held in memory.
    a.run("BEGIN IMMEDIATE; INSERT INTO t VALUES ('a', 1);");

    // A second process opens the store meanwhile: the lock is still A's.
    let joiner = join(&db, 200);
    assert_eq!(
        joiner, "locked",
        "a second process took the write lock while the first held it in memory"
    );
    assert!(
        a.holds_lease(),
        "reading ended the lease (only taking a lock should)"
    );

    // A's COMMIT takes the store's write lock: it sees the joiner and ends its lease.
    a.run("COMMIT;");
    assert!(!a.holds_lease(), "the lease outlived another process's open");
    assert_eq!(join(&db, 5000), "committed 3");
    // Now with real locks on both sides: A waits for B as for any process.
    a.run("INSERT INTO t VALUES ('a', 2);");
    assert_eq!(a.run("SELECT count(*) FROM t;"), vec!["4"]);
    a.close();
}

/// A process opening a store nobody else has open holds the lease again, and a read-only
/// process opening beside it ends it too (it may not write the side file: the join word is
/// in a file of its own).
#[test]
fn a_read_only_process_ends_the_lease_too() {
    if !have_cli() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("lease.db");
    let (_, err) = run_once(&db, "CREATE TABLE t(n INTEGER); INSERT INTO t VALUES (1);");
    assert!(err.is_empty(), "{err}");
    let mut a = Cli::open(&db);
    assert_eq!(a.run("SELECT count(*) FROM t;"), vec!["1"]);
    assert!(a.holds_lease());
    let ro = format!(
        ".load {}\n.open --readonly 'file:{}?vfs=onesync'\nSELECT count(*) FROM t;\n",
        common::cdylib().with_extension("").display(),
        db.display()
    );
    let mut reader = common::spawn_sqlite3_cli(true);
    reader.stdin.take().unwrap().write_all(ro.as_bytes()).unwrap();
    let out = reader.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1", "{out:?}");
    a.run("INSERT INTO t VALUES (2);");
    assert!(
        !a.holds_lease(),
        "a read-only process's open did not end the lease"
    );
    a.close();
}

#[cfg(feature = "test-hooks")] // a negative control: the store reads ONESYNC_SABOTAGE only then
#[test]
fn negative_control_a_joiner_ignoring_the_notes_takes_a_lock_held_in_memory() {
    if !have_cli() || std::env::var_os("ONESYNC_SABOTAGE").is_some() {
        return;
    }
    let test = "a_process_joining_waits_for_the_locks_the_process_alone_holds_in_memory";
    // The joiner is this binary (its store reads ONESYNC_SABOTAGE); the CLI's is not.
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--test-threads", "1", "--nocapture"])
        .env("ONESYNC_SABOTAGE", "lease-ignored")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the sabotaged run passed:\n{text}");
    assert!(
        text.contains("a second process took the write lock while the first held it in memory"),
        "{text}"
    );
}
