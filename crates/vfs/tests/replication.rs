//! Replication through the VFS (`onesync_replicate`), with stock `sqlite3` CLI processes
//! loading `libonesync.so`: a database opened with the URI parameter ships its commits to a
//! directory replica, `PRAGMA onesync_replicate` reports it, and the replica restores to a
//! plain SQLite database equal to the store; when the shipping process is killed, another
//! process replicating the database takes over, with contiguous TXIDs and nothing lost.
//! A bad interval or URL fails the open with its reason. Skipped, saying so, without the
//! sqlite3 CLI.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use onesync_ltx::client::file::FileClient;
use onesync_ltx::client::ReplicaClient;
use onesync_ltx::restore::{restore_to_file, Target};

mod common;

fn open_replicated(db: &Path, replica: &Path) -> String {
    format!(
        ".bail on\n.load {}\n.open 'file:{}?vfs=onesync&onesync_replicate=file://{}&onesync_replicate_interval_ms=50'\n",
        common::cdylib().with_extension("").display(),
        db.display(),
        replica.display()
    )
}

fn run_script(script: &str) -> String {
    let mut child = common::spawn_sqlite3_cli(true);
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

/// The rows of `t` in a plain SQLite file, and its integrity check.
fn plain_rows(path: &Path) -> (Vec<(i64, String)>, String) {
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let rows = conn
        .prepare("SELECT k, v FROM t ORDER BY k")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    (rows, check)
}

/// The rows of `t` in the store, read through the VFS.
fn store_rows(db: &Path) -> Vec<(i64, String)> {
    let out = run_script(&format!(
        ".load {}\n.open 'file:{}?vfs=onesync'\n.mode list\n.separator |\nSELECT k, v FROM t ORDER BY k;\n",
        common::cdylib().with_extension("").display(),
        db.display()
    ));
    out.lines()
        .map(|l| {
            let (k, v) = l.split_once('|').unwrap();
            (k.parse().unwrap(), v.to_owned())
        })
        .collect()
}

fn assert_contiguous(replica: &Path) -> u64 {
    let client = FileClient::new(replica);
    let files = client.list(0).unwrap();
    let snapshots = client.list(9).unwrap();
    assert!(!snapshots.is_empty(), "a snapshot at level 9");
    let mut next = snapshots[0].max_txid + 1;
    for f in &files {
        if f.max_txid < next {
            continue;
        }
        assert_eq!(f.min_txid, next, "level 0 continues TXID {next:x}: {files:?}");
        next = f.max_txid + 1;
    }
    next - 1
}

#[test]
fn a_replicated_database_restores_to_what_the_store_holds() {
    if !common::have_sqlite3_cli() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (db, replica) = (dir.path().join("app.onesync"), dir.path().join("replica"));
    let mut script = open_replicated(&db, &replica);
    script.push_str("CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT);\n");
    for i in 0..40 {
        script.push_str(&format!(
            "INSERT INTO t(v) VALUES ('row {i}'); UPDATE t SET v = v || '+' WHERE k % 7 = {};\n",
            i % 7
        ));
        if i % 10 == 9 {
            // Let a batch ship now and then.
            script.push_str("SELECT 1 FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 300000) SELECT count(*) FROM c);\n");
        }
    }
    script.push_str("PRAGMA onesync_replicate;\n");
    let out = run_script(&script);
    let status: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(status["shipping"], true, "{status}");
    assert_eq!(status["last_error"], serde_json::Value::Null, "{status}");
    assert!(status["url"].as_str().unwrap().starts_with("file://"), "{status}");
    // Closed: the last commits shipped at close.
    let last = assert_contiguous(&replica);
    let restored = dir.path().join("restored.db");
    let r = restore_to_file(&FileClient::new(&replica), Target::Latest, &restored).unwrap();
    assert_eq!(r.txid, last);
    let (rows, check) = plain_rows(&restored);
    assert_eq!(check, "ok");
    assert_eq!(rows.len(), 40);
    assert_eq!(rows, store_rows(&db));
}

#[test]
fn another_process_takes_over_when_the_shipper_is_killed() {
    if !common::have_sqlite3_cli() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (db, replica) = (dir.path().join("app.onesync"), dir.path().join("replica"));
    run_script(&format!(
        "{}CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT);\n",
        open_replicated(&db, &replica)
    ));
    // The first process opens, takes the lease (it is the only one) and writes.
    let mut first = common::spawn_sqlite3_cli(true);
    let mut first_in = first.stdin.take().unwrap();
    let mut first_out = BufReader::new(first.stdout.take().unwrap());
    writeln!(
        first_in,
        "{}PRAGMA busy_timeout=10000;",
        open_replicated(&db, &replica)
    )
    .unwrap();
    for i in 0..30 {
        writeln!(first_in, "INSERT INTO t(v) VALUES ('first {i}');").unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        writeln!(first_in, "PRAGMA onesync_replicate;").unwrap();
        let status = json_line(&mut first_out);
        if status["shipping"] == true && status["txid"].as_u64() > Some(1) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the first process never shipped: {status}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The second opens too; it waits for the lease.
    let mut second = common::spawn_sqlite3_cli(true);
    let mut second_in = second.stdin.take().unwrap();
    let mut second_out = BufReader::new(second.stdout.take().unwrap());
    writeln!(
        second_in,
        "{}PRAGMA busy_timeout=10000;",
        open_replicated(&db, &replica)
    )
    .unwrap();
    writeln!(second_in, "SELECT 'open';").unwrap();
    while wait_for_line(&mut second_out) != "open" {}
    // More commits by the first, then it dies without closing.
    for i in 30..60 {
        writeln!(first_in, "INSERT INTO t(v) VALUES ('first {i}');").unwrap();
    }
    writeln!(first_in, "SELECT 'written';").unwrap();
    assert_eq!(wait_for_line(&mut first_out), "written");
    kill(&mut first);
    // The second takes over within its interval and ships everything durable, the first's
    // last commits included.
    for i in 0..20 {
        writeln!(second_in, "INSERT INTO t(v) VALUES ('second {i}');").unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        writeln!(second_in, "PRAGMA onesync_replicate;").unwrap();
        let status = json_line(&mut second_out);
        if status["shipping"] == true && status["lag_commits"] == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the second process never caught up: {status}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let restored = dir.path().join("restored.db");
    restore_to_file(&FileClient::new(&replica), Target::Latest, &restored).unwrap();
    let (rows, check) = plain_rows(&restored);
    assert_eq!(check, "ok");
    assert_eq!(rows.len(), 80, "every commit of both processes");
    assert_contiguous(&replica);
    drop(second_in);
    second.wait().unwrap();
    assert_eq!(rows, store_rows(&db));
}

fn wait_for_line(out: &mut impl BufRead) -> String {
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    line.trim().to_owned()
}

/// The next line that is a JSON object (the busy_timeout pragma prints its value first).
fn json_line(out: &mut impl BufRead) -> serde_json::Value {
    loop {
        let line = wait_for_line(out);
        if line.starts_with('{') {
            return serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
        }
        assert!(!line.is_empty(), "the process ended");
    }
}

fn kill(child: &mut Child) {
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn a_bad_interval_or_url_fails_the_open_with_its_reason() {
    if !common::have_sqlite3_cli() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.onesync");
    for (param, expected) in [
        (
            "onesync_replicate=file:///x&onesync_replicate_interval_ms=0",
            "onesync_replicate_interval_ms",
        ),
        ("onesync_replicate=ftp://host/x", "unsupported replica URL scheme"),
    ] {
        let mut child = common::spawn_sqlite3_cli(true);
        write!(
            child.stdin.take().unwrap(),
            ".load {}\n.open 'file:{}?vfs=onesync&{param}'\nSELECT 1;\n",
            common::cdylib().with_extension("").display(),
            db.display()
        )
        .unwrap();
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(expected), "{param}: {stderr}");
    }
}
