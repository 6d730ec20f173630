//! Several processes on one database: stock `sqlite3` CLI processes, each loading
//! `libonesync.so`, write concurrently (every row of every process is there, integrity ok),
//! and a reader process is never blocked by another process's open write transaction, and
//! sees only committed state. Skipped, saying so, without the sqlite3 CLI.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

mod common;

fn have_cli() -> bool {
    common::have_sqlite3_cli()
}

fn preamble(db: &Path) -> String {
    format!(".bail on\n{}", common::cli_open_store(db))
}

fn spawn_cli() -> Child {
    common::spawn_sqlite3_cli(true)
}

/// Runs a whole script in one CLI process; returns its stdout, failing on any error.
fn run_script(script: &str) -> String {
    let mut child = spawn_cli();
    child.stdin.take().unwrap().write_all(script.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.is_empty(),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    stdout
}

#[test]
fn processes_write_one_database_concurrently() {
    if !have_cli() {
        return;
    }
    const PROCESSES: usize = 3;
    const TXNS: usize = 150;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shared.db");
    run_script(&format!(
        "{}CREATE TABLE t(id INTEGER PRIMARY KEY, proc INTEGER, n INTEGER, pad BLOB);\n",
        preamble(&db)
    ));
    let children: Vec<Child> = (0..PROCESSES)
        .map(|p| {
            let mut script = preamble(&db);
            script.push_str("PRAGMA busy_timeout = 20000;\nPRAGMA synchronous = FULL;\n");
            for n in 0..TXNS {
                script.push_str(&format!(
                    "BEGIN IMMEDIATE; INSERT INTO t(proc, n, pad) VALUES ({p}, {n}, randomblob(100)); COMMIT;\n"
                ));
                if n % 10 == 0 {
                    // Reads interleave with other processes' commits.
                    script.push_str("SELECT count(*) >= 0 FROM t;\n");
                }
            }
            let mut child = spawn_cli();
            let mut stdin = child.stdin.take().unwrap();
            std::thread::spawn(move || stdin.write_all(script.as_bytes()));
            child
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stderr.is_empty(),
            "a writer failed: {stderr}"
        );
    }
    let out = run_script(&format!(
        "{}SELECT proc, count(*), count(DISTINCT n) FROM t GROUP BY proc ORDER BY proc;\nPRAGMA integrity_check;\n",
        preamble(&db)
    ));
    let want: Vec<String> = (0..PROCESSES)
        .map(|p| format!("{p}|{TXNS}|{TXNS}"))
        .chain(["ok".to_owned()])
        .collect();
    assert_eq!(out.lines().collect::<Vec<_>>(), want, "{out}");
}

/// A CLI process fed line by line, reading each answer.
struct Session {
    child: Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
}

impl Session {
    fn new(db: &Path) -> Session {
        let mut child = spawn_cli();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut s = Session { child, stdin, stdout };
        s.send(&preamble(db).replace(".bail on\n", ""));
        s
    }

    fn send(&mut self, sql: &str) {
        self.stdin.write_all(sql.as_bytes()).unwrap();
        self.stdin.flush().unwrap();
    }

    /// Runs `sql` then a marker query; returns the lines before the marker, and how long
    /// it took.
    fn ask(&mut self, sql: &str) -> (Vec<String>, Duration) {
        let started = Instant::now();
        self.send(&format!("{sql}\nSELECT 'done-marker';\n"));
        let mut lines = Vec::new();
        loop {
            let mut line = String::new();
            assert!(self.stdout.read_line(&mut line).unwrap() > 0, "sqlite3 exited");
            let line = line.trim_end().to_owned();
            if line == "done-marker" {
                return (lines, started.elapsed());
            }
            lines.push(line);
        }
    }

    /// Ends the session; returns what it wrote to stderr (the CLI exits non-zero after
    /// any error, so the status says no more than that).
    fn finish(mut self) -> String {
        drop(self.stdin);
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut self.stdout, &mut rest).unwrap();
        let out = self.child.wait_with_output().unwrap();
        String::from_utf8_lossy(&out.stderr).into_owned()
    }
}

#[test]
fn a_reader_process_is_not_blocked_by_a_writer_process() {
    if !have_cli() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("readers.db");
    run_script(&format!(
        "{}CREATE TABLE t(v);\nINSERT INTO t VALUES (1), (2);\n",
        preamble(&db)
    ));
    let mut writer = Session::new(&db);
    let mut reader = Session::new(&db);
    let mut second_writer = Session::new(&db);
    // The writer holds its write lock, with a change made, and does not commit yet.
    let (lines, _) = writer.ask("BEGIN IMMEDIATE; INSERT INTO t VALUES (3); SELECT count(*) FROM t;");
    assert_eq!(lines, ["3"]);
    // Another process reads at once (no busy timeout: blocked would be an error), and sees
    // the committed state only.
    let (lines, took) = reader.ask(".timeout 0\nSELECT count(*), sum(v) FROM t;");
    assert_eq!(lines, ["2|3"], "the reader saw uncommitted rows or was refused");
    assert!(took < Duration::from_secs(2), "the reader waited {took:?}");
    // A second writer is refused while the first holds the write lock.
    let (lines, _) = second_writer.ask(".timeout 0\nBEGIN IMMEDIATE;");
    assert!(lines.is_empty(), "{lines:?}");
    second_writer.send("ROLLBACK;\n");
    // A read transaction opened now keeps its snapshot across the commit.
    let (lines, _) = reader.ask("BEGIN; SELECT count(*) FROM t;");
    assert_eq!(lines, ["2"]);
    let (lines, _) = writer.ask("COMMIT; SELECT count(*) FROM t;");
    assert_eq!(lines, ["3"]);
    let (lines, _) = reader.ask("SELECT count(*) FROM t; COMMIT; SELECT count(*) FROM t;");
    assert_eq!(
        lines,
        ["2", "3"],
        "one snapshot per read transaction, then the new state"
    );
    // Now the second writer gets through, and everyone sees its commit.
    let (lines, _) = second_writer.ask("BEGIN IMMEDIATE; INSERT INTO t VALUES (4); COMMIT;");
    assert!(lines.is_empty(), "{lines:?}");
    let (lines, _) = writer.ask("SELECT count(*), sum(v) FROM t; PRAGMA integrity_check;");
    assert_eq!(lines, ["4|10", "ok"]);
    let errors = second_writer.finish();
    assert!(
        errors.contains("database is locked"),
        "the second writer was not refused: {errors}"
    );
    assert_eq!(reader.finish(), "");
    assert_eq!(writer.finish(), "");
}

/// With `synchronous=NORMAL` a commit is shown at once to readers in other processes too,
/// before it is durable (as WAL at NORMAL does), and `PRAGMA onesync_flush` makes it
/// durable. The interval is an hour, so no background flush happens meanwhile.
#[test]
fn a_commit_at_normal_is_shown_to_other_processes_before_it_is_durable() {
    if !have_cli() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("normal.db");
    run_script(&format!("{}CREATE TABLE t(v);\n", preamble(&db)));
    let mut writer = Session::new(&db);
    let mut reader = Session::new(&db);
    let (lines, _) = writer.ask(
        "PRAGMA synchronous=NORMAL; PRAGMA onesync_sync_interval_ms=3600000; \
         INSERT INTO t VALUES (7); PRAGMA onesync_commit;",
    );
    let commit: serde_json::Value = serde_json::from_str(lines.last().unwrap()).unwrap();
    let (seq, durable) = (
        commit["seq"].as_u64().unwrap(),
        commit["durable_seq"].as_u64().unwrap(),
    );
    assert!(durable < seq, "the commit was flushed at once: {commit}");
    let (lines, _) = reader.ask("SELECT sum(v) FROM t;");
    assert_eq!(lines, ["7"], "another process does not show the NORMAL commit");
    let (lines, _) = writer.ask("PRAGMA onesync_flush;");
    let flushed: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    assert!(flushed["durable_seq"].as_u64().unwrap() >= seq, "{flushed}");
    assert_eq!(reader.finish(), "");
    assert_eq!(writer.finish(), "");
}
