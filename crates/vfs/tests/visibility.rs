//! A commit at `synchronous=NORMAL` or `OFF` is visible to every new read transaction of
//! every process once its COMMIT has returned, with several processes writing at once
//! (`concurrent=1`). Three processes in lockstep, each a child of this test binary: two
//! writers commit a row each at once, and as each COMMIT returns the parent has a third
//! process begin a new read transaction, which must find that row. (The two writers' commits
//! overlap, so one may publish its commit in the side file while the other publishes its
//! own: a publication that lowered what the other had shown hid a returned commit from the
//! reader until the next flush.)

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use onesync_vfs::{api_table_from_sys, register_static, VFS_NAME};
use rusqlite::{Connection, ErrorCode, OpenFlags};

/// The child's role (`writer` or `reader`) and its database, set by the parent.
const ROLE: &str = "ONESYNC_VISIBILITY_ROLE";
const DB: &str = "ONESYNC_VISIBILITY_DB";
const SYNCHRONOUS: &str = "ONESYNC_VISIBILITY_SYNCHRONOUS";
/// The prefix of every line a child answers with (the test harness prints lines too).
const ANSWER: &str = "@visibility ";
/// Rounds of the lockstep: two commits and two probes each.
const ROUNDS: u64 = 1000;

fn open(path: &str) -> Connection {
    register_static(&api_table_from_sys!(rusqlite::ffi)).expect("register onesync");
    let uri = format!("file:{path}?vfs={VFS_NAME}&concurrent=1");
    let conn = Connection::open_with_flags(uri, OpenFlags::default() | OpenFlags::SQLITE_OPEN_URI).unwrap();
    conn.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
    conn
}

/// In a child, the role's loop: one line in (a table and a key), one line out, until stdin
/// ends. In the parent's own run, nothing.
#[test]
fn child_process_role() {
    let (Ok(role), Ok(db)) = (std::env::var(ROLE), std::env::var(DB)) else {
        return;
    };
    let conn = open(&db);
    if role == "writer" {
        let level = std::env::var(SYNCHRONOUS).unwrap();
        conn.execute_batch(&format!("PRAGMA synchronous={level}"))
            .unwrap();
    }
    let stdout = std::io::stdout();
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let (table, key) = line.split_once(' ').unwrap();
        let key: i64 = key.parse().unwrap();
        let answer = if role == "writer" {
            insert_retrying(&conn, table, key);
            "committed".to_string()
        } else {
            // A new read transaction (autocommit).
            let found: i64 = conn
                .query_row(
                    &format!("SELECT count(*) FROM {table} WHERE k = ?1"),
                    [key],
                    |r| r.get(0),
                )
                .unwrap();
            found.to_string()
        };
        let mut out = stdout.lock();
        writeln!(out, "{ANSWER}{answer}").unwrap();
        out.flush().unwrap();
    }
}

/// Commits one row, again after every SQLITE_BUSY / BUSY_SNAPSHOT.
fn insert_retrying(conn: &Connection, table: &str, key: i64) {
    for tries in 1.. {
        let result = conn
            .execute_batch("BEGIN")
            .and_then(|()| conn.execute(&format!("INSERT INTO {table}(k) VALUES (?1)"), [key]))
            .and_then(|_| conn.execute_batch("COMMIT"));
        match result {
            Ok(()) => return,
            Err(rusqlite::Error::SqliteFailure(f, _))
                if f.code == ErrorCode::DatabaseBusy && tries < 10_000 =>
            {
                let _ = conn.execute_batch("ROLLBACK");
            }
            Err(e) => panic!("committing {key} to {table}: {e}"),
        }
    }
}

/// A child of this binary in `role`, answering one line per line asked.
struct Role {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl Role {
    fn spawn(role: &str, db: &Path, synchronous: &str) -> Role {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "child_process_role",
                "--test-threads",
                "1",
                "--nocapture",
                "--quiet",
            ])
            .env(ROLE, role)
            .env(DB, db)
            .env(SYNCHRONOUS, synchronous)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let input = child.stdin.take().unwrap();
        let output = BufReader::new(child.stdout.take().unwrap());
        Role { child, input, output }
    }

    fn send(&mut self, table: &str, key: u64) {
        writeln!(self.input, "{table} {key}").unwrap();
        self.input.flush().unwrap();
    }

    fn answer(&mut self) -> String {
        loop {
            let mut line = String::new();
            assert!(
                self.output.read_line(&mut line).unwrap() > 0,
                "a child ended early"
            );
            if let Some(answer) = line.trim_end().strip_prefix(ANSWER) {
                return answer.to_string();
            }
        }
    }

    fn finish(self) {
        drop(self.input);
        let status = self.child.wait_with_output().unwrap().status;
        assert!(status.success(), "a child failed: {status}");
    }
}

/// Runs the lockstep at `synchronous`; returns the probes and the misses (a returned commit
/// a new read transaction did not find).
fn lockstep(synchronous: &str) -> (u64, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("visibility.db");
    let setup = open(db.to_str().unwrap());
    // One table per writer: the two commits of a round never conflict, so they overlap.
    setup
        .execute_batch("CREATE TABLE a(k INTEGER PRIMARY KEY); CREATE TABLE b(k INTEGER PRIMARY KEY);")
        .unwrap();
    let mut writers = [
        ("a", Role::spawn("writer", &db, synchronous)),
        ("b", Role::spawn("writer", &db, synchronous)),
    ];
    let mut reader = Role::spawn("reader", &db, synchronous);
    let (mut probes, mut misses) = (0, Vec::new());
    for key in 0..ROUNDS {
        for (table, writer) in writers.iter_mut() {
            writer.send(table, key);
        }
        // Each as its COMMIT returns (the first to answer is read first: the other may
        // still be committing, as in the race this looks for).
        for (table, writer) in writers.iter_mut() {
            assert_eq!(writer.answer(), "committed");
            reader.send(table, key);
            probes += 1;
            if reader.answer() != "1" {
                misses.push(format!("{table} {key}"));
            }
        }
    }
    for (_, writer) in writers {
        writer.finish();
    }
    reader.finish();
    let count: i64 = setup
        .query_row(
            "SELECT (SELECT count(*) FROM a) + (SELECT count(*) FROM b)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(count as u64, 2 * ROUNDS);
    let integrity: String = setup
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");
    (probes, misses)
}

fn assert_every_commit_visible(synchronous: &str) {
    if std::env::var_os(ROLE).is_some() {
        return;
    }
    let (probes, misses) = lockstep(synchronous);
    println!(
        "{synchronous}: {} of {probes} probes missed a returned commit",
        misses.len()
    );
    assert!(
        misses.is_empty(),
        "at {synchronous}, {} of {probes} new read transactions in a third process missed a commit whose COMMIT had returned (the first: {:?})",
        misses.len(),
        &misses[..misses.len().min(5)]
    );
}

#[test]
fn a_normal_commit_is_visible_to_every_new_reader_of_every_process() {
    assert_every_commit_visible("NORMAL");
}

#[test]
fn an_off_commit_is_visible_to_every_new_reader_of_every_process() {
    assert_every_commit_visible("OFF");
}
