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

/// The rows of `t` in the store, read through the VFS.
fn store_rows(db: &Path) -> Vec<(i64, String)> {
    let out = common::sqlite3_script(&format!(
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
    let out = common::sqlite3_script(&script);
    let status: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(status["shipping"], true, "{status}");
    assert_eq!(status["last_error"], serde_json::Value::Null, "{status}");
    assert!(status["url"].as_str().unwrap().starts_with("file://"), "{status}");
    // Closed: the last commits shipped at close.
    let last = assert_contiguous(&replica);
    let restored = dir.path().join("restored.db");
    let r = restore_to_file(&FileClient::new(&replica), Target::Latest, &restored).unwrap();
    assert_eq!(r.txid, last);
    let (rows, check) = common::plain_table_t(&restored);
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
    common::sqlite3_script(&format!(
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
    let (rows, check) = common::plain_table_t(&restored);
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

/// A script's CLI lines opening `db` replicated to `replica` (never shipping on its own
/// within the test: a one-hour interval) with `extra` URI parameters.
fn open_with(db: &Path, replica: &Path, extra: &str) -> String {
    format!(
        ".load {}\n.open 'file:{}?vfs=onesync&onesync_replicate=file://{}&onesync_replicate_interval_ms=3600000{extra}'\n",
        common::cdylib().with_extension("").display(),
        db.display(),
        replica.display()
    )
}

/// Rows of `t` a copy of the replica restores to (none if it does not restore).
fn rows_in_copy(dir: &Path, copy: &Path) -> usize {
    let out = dir.join(format!("{}.db", copy.file_name().unwrap().to_string_lossy()));
    match restore_to_file(&FileClient::new(copy), Target::Latest, &out) {
        Ok(_) => common::plain_table_t(&out).0.len(),
        Err(_) => 0,
    }
}

#[test]
fn synchronous_replication_returns_from_commit_once_the_replica_holds_it() {
    if !common::have_sqlite3_cli() {
        return;
    }
    for sync in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let (db, replica) = (dir.path().join("app.onesync"), dir.path().join("replica"));
        let copy = dir.path().join("copy");
        // The copy is taken while the process still has the database open (its close ships
        // everything), right after the last COMMIT returned.
        let extra = if sync { "&onesync_replicate_sync=1" } else { "" };
        let mut script = open_with(&db, &replica, extra);
        script.push_str("CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT);\n");
        for i in 0..10 {
            script.push_str(&format!("INSERT INTO t(v) VALUES ('row {i}');\n"));
        }
        script.push_str(&format!(
            ".shell cp -r {r} {c} 2>/dev/null || mkdir {c}\n",
            r = replica.display(),
            c = copy.display()
        ));
        common::sqlite3_script(&script);
        let rows = rows_in_copy(dir.path(), &copy);
        if sync {
            assert_eq!(rows, 10, "every COMMIT that returned is in the replica");
        } else {
            // Negative control: without it, the commits wait for the interval.
            assert!(rows < 10, "asynchronous: {rows} rows shipped before the interval");
        }
    }
}

#[test]
fn synchronous_replication_past_its_timeout_keeps_the_commit_and_refuses_the_next() {
    if !common::have_sqlite3_cli() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (db, replica) = (dir.path().join("app.onesync"), dir.path().join("replica"));
    let away = dir.path().join("away");
    let mut script = open_with(
        &db,
        &replica,
        "&onesync_replicate_sync=1&onesync_replicate_sync_timeout_ms=300",
    );
    script.push_str("CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT);\nINSERT INTO t(v) VALUES ('before');\n");
    // The replica unreachable: its directory replaced by a file.
    script.push_str(&format!(
        ".shell mv {r} {a} && touch {r}\nINSERT INTO t(v) VALUES ('kept locally');\nINSERT INTO t(v) VALUES ('refused');\nSELECT 'after refusal';\n",
        r = replica.display(),
        a = away.display()
    ));
    // Back: the next COMMIT first waits for the one not acknowledged, then commits.
    script.push_str(&format!(
        ".shell rm {r} && mv {a} {r}\nINSERT INTO t(v) VALUES ('after');\nSELECT group_concat(v, ',') FROM t;\n",
        r = replica.display(),
        a = away.display()
    ));
    let mut child = common::spawn_sqlite3_cli(true);
    child.stdin.take().unwrap().write_all(script.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("COMMIT refused: synchronous replication"),
        "{stderr}"
    );
    assert_eq!(
        stdout.lines().last(),
        Some("before,kept locally,after"),
        "stdout {stdout}\nstderr {stderr}"
    );
    let restored = dir.path().join("restored.db");
    restore_to_file(&FileClient::new(&replica), Target::Latest, &restored).unwrap();
    assert_eq!(common::plain_table_t(&restored).0.len(), 3);
}
