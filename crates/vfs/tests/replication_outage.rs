//! An S3 outage while replicating (issue 43's "the S3 server stopped and restarted"): with
//! the server (a real one, Versity's gateway) stopped, COMMITs keep succeeding at their pace,
//! `PRAGMA onesync_replicate` reports the lag growing and `last_error`, and `sqlite3_log`
//! says replication is failing; started again, the lag drains to 0, the log says it
//! recovered, and the replica restores to what the store holds. The replica as the outage
//! left it lacks the commits made during it (the outage was real). One test in this binary:
//! SQLite's log is configured once, before SQLite starts. Without Go it SKIPs (fails on CI).

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use onesync_ltx::restore::{restore_to_file, Target};
use onesync_ltx::testing::{self, S3Server};
use onesync_vfs::{api_table_from_sys, register_static};
use rusqlite::{Connection, OpenFlags};

static LOGGED: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn remember(_code: i32, msg: &str) {
    LOGGED.lock().unwrap().push(msg.to_owned());
}

fn status(conn: &Connection) -> serde_json::Value {
    let json: String = conn
        .query_row("PRAGMA onesync_replicate", [], |r| r.get(0))
        .unwrap();
    serde_json::from_str(&json).unwrap()
}

fn n(v: &serde_json::Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} in {v}"))
}

/// `count` one-row commits; the median time of one.
fn commit_rows(conn: &Connection, from: u64, count: u64) -> Duration {
    let mut times: Vec<Duration> = (from..from + count)
        .map(|i| {
            let began = Instant::now();
            conn.execute(
                "INSERT INTO t(k, v) VALUES (?1, hex(randomblob(100)))",
                [i as i64],
            )
            .unwrap();
            let took = began.elapsed();
            std::thread::sleep(Duration::from_millis(5));
            took
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

/// Waits until `done` holds for the status, or panics after `limit`.
fn wait_for(conn: &Connection, limit: Duration, what: &str, done: impl Fn(&serde_json::Value) -> bool) {
    let began = Instant::now();
    loop {
        let s = status(conn);
        if done(&s) {
            return;
        }
        assert!(began.elapsed() < limit, "{what} within {limit:?}: {s}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn rows(conn: &Connection) -> Vec<(i64, String)> {
    conn.prepare("SELECT k, v FROM t ORDER BY k")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn an_s3_outage_lets_commits_go_on_reports_the_lag_and_catches_up() {
    // SAFETY: SQLite has not been used in this process yet (the only test of this binary),
    // and `remember` calls no SQLite routine.
    unsafe { rusqlite::trace::config_log(Some(remember)) }.unwrap();
    register_static(&api_table_from_sys!(rusqlite::ffi)).unwrap();
    let go_bin = testing::go_bin_dir(Path::new(env!("CARGO_TARGET_TMPDIR")));
    let mut server = match S3Server::start(&go_bin) {
        Ok(s) => s,
        Err(why) => return testing::skip_or_fail("replication_outage", &why),
    };
    server.create_bucket("bkt");
    for (key, value) in server.env() {
        // The only test of this binary, before any thread reads the environment.
        std::env::set_var(key, value);
    }
    let dir = tempfile::tempdir().unwrap();
    let url = server.url("bkt", "app");
    let escaped = url.replace('%', "%25").replace('?', "%3F").replace('&', "%26");
    let uri = format!(
        "file:{}?vfs=onesync&onesync_replicate={escaped}&onesync_replicate_interval_ms=50",
        dir.path().join("app.onesync").display()
    );
    let flags =
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(&uri, flags).unwrap();
    conn.execute_batch("PRAGMA synchronous=FULL; CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT)")
        .unwrap();

    let before = commit_rows(&conn, 0, 60);
    wait_for(&conn, Duration::from_secs(10), "shipped", |s| {
        s["shipping"] == true && n(s, "lag_commits") == 0 && s["last_error"].is_null()
    });
    let shipped_before = n(&status(&conn), "shipped_seq");

    server.stop();
    let during = commit_rows(&conn, 1000, 60);
    // The S3 client gives up on an unreachable server within about 10 s.
    wait_for(&conn, Duration::from_secs(30), "last_error set", |s| {
        s["last_error"].is_string()
    });
    let down = status(&conn);
    assert!(
        n(&down, "lag_commits") >= 60,
        "the lag counts the commits made during the outage: {down}"
    );
    assert_eq!(n(&down, "shipped_seq"), shipped_before, "{down}");
    assert!(!down["last_error"].as_str().unwrap().is_empty(), "{down}");
    // Its pace: a commit never waits for the replica (generous for a busy machine).
    assert!(
        during <= before * 4 + Duration::from_millis(5),
        "commits slowed during the outage: median {during:?} against {before:?}"
    );
    let logged = LOGGED.lock().unwrap().clone();
    assert!(
        logged
            .iter()
            .any(|m| m.contains("replication of main") && m.contains("is failing")),
        "sqlite3_log did not say replication is failing: {logged:?}"
    );
    // The replica as the outage left it (read from the server's files, as a restore after
    // a lost server would): none of the outage's commits.
    let outage_copy = dir.path().join("outage-copy");
    copy_as_directory_replica(&server.bucket_dir("bkt").join("app"), &outage_copy);

    server.start_again().unwrap();
    commit_rows(&conn, 2000, 10);
    wait_for(&conn, Duration::from_secs(30), "caught up", |s| {
        n(s, "lag_commits") == 0 && s["last_error"].is_null()
    });
    assert!(n(&status(&conn), "shipped_seq") > shipped_before);
    let logged = LOGGED.lock().unwrap().clone();
    assert!(
        logged.iter().any(|m| m.contains("recovered")),
        "no recovery in sqlite3_log: {logged:?}"
    );

    let restored = dir.path().join("restored.db");
    restore_to_file(&server.client("bkt", "app").unwrap(), Target::Latest, &restored).unwrap();
    let plain = Connection::open_with_flags(&restored, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    assert_eq!(rows(&plain), rows(&conn), "the replica after the outage");
    assert_eq!(rows(&plain).len(), 130);

    // The control: the copy taken during the outage restores without the outage's commits.
    let copy = onesync_ltx::client::file::FileClient::new(&outage_copy);
    let old = dir.path().join("old.db");
    restore_to_file(&copy, Target::Latest, &old).unwrap();
    let old = Connection::open_with_flags(&old, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    assert_eq!(rows(&old).len(), 60, "the replica during the outage");
    drop(conn);
    server.stop();
}

/// The S3 replica's objects (`<prefix>/<level %04x>/NAME`, files of the server's POSIX
/// backend) copied into a directory replica's layout (`ltx/<level>/NAME`).
fn copy_as_directory_replica(prefix: &Path, to: &Path) {
    for level in 0..=9u32 {
        let Ok(entries) = std::fs::read_dir(prefix.join(format!("{level:04x}"))) else {
            continue;
        };
        let dir = to.join("ltx").join(level.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        for entry in entries {
            let entry = entry.unwrap();
            if entry.file_name().to_string_lossy().ends_with(".ltx") {
                std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
            }
        }
    }
}
