//! `onesync_sync_interval_ms`, the background flush interval of `synchronous=NORMAL`: as a
//! PRAGMA (read, set, a bad value refused with its reason in `sqlite3_errmsg` and the old
//! value kept) and as a URI parameter (set at open; a bad value fails the open), and a
//! shortened interval really flushing a NORMAL commit waiting for a long one.

use std::path::Path;
use std::time::{Duration, Instant};

use onesync_vfs::{api_table_from_sys, register_static, VFS_NAME};
use rusqlite::{Connection, OpenFlags};

fn open_uri(path: &Path, params: &str) -> rusqlite::Result<Connection> {
    register_static(&api_table_from_sys!(rusqlite::ffi)).expect("register onesync");
    let uri = format!("file:{}?vfs={VFS_NAME}{params}", path.display());
    Connection::open_with_flags(uri, OpenFlags::default() | OpenFlags::SQLITE_OPEN_URI)
}

fn interval(conn: &Connection, set: &str) -> rusqlite::Result<String> {
    conn.query_row(&format!("PRAGMA onesync_sync_interval_ms{set}"), [], |r| r.get(0))
}

/// This connection's last commit and the store's durable point (`PRAGMA onesync_commit`).
fn commit_state(conn: &Connection) -> (u64, u64) {
    let json: String = conn.query_row("PRAGMA onesync_commit", [], |r| r.get(0)).unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    (v["seq"].as_u64().unwrap(), v["durable_seq"].as_u64().unwrap())
}

#[test]
fn the_pragma_reads_sets_and_refuses_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let conn = open_uri(&dir.path().join("p.db"), "").unwrap();
    conn.execute_batch("CREATE TABLE t(x)").unwrap();
    assert_eq!(interval(&conn, "").unwrap(), "20", "the documented default");
    assert_eq!(interval(&conn, "=5").unwrap(), "5");
    for bad in ["-3", "abc", "3600001"] {
        let err = interval(&conn, &format!("={bad}")).unwrap_err().to_string();
        assert!(
            err.contains("onesync_sync_interval_ms must be a whole number of milliseconds"),
            "{bad}: {err}"
        );
        assert_eq!(interval(&conn, "").unwrap(), "5", "{bad} changed the interval");
    }
}

#[test]
fn the_uri_parameter_sets_it_and_a_bad_one_fails_the_open() {
    let dir = tempfile::tempdir().unwrap();
    let conn = open_uri(&dir.path().join("u.db"), "&onesync_sync_interval_ms=250").unwrap();
    conn.execute_batch("CREATE TABLE t(x)").unwrap();
    assert_eq!(interval(&conn, "").unwrap(), "250");
    assert!(open_uri(&dir.path().join("bad.db"), "&onesync_sync_interval_ms=x").is_err());
    assert!(
        !dir.path().join("bad.db").exists(),
        "a refused open created the file"
    );
}

#[test]
fn shortening_the_interval_flushes_a_normal_commit_waiting_for_a_long_one() {
    let dir = tempfile::tempdir().unwrap();
    let conn = open_uri(&dir.path().join("n.db"), "&onesync_sync_interval_ms=3600000").unwrap();
    conn.execute_batch("PRAGMA synchronous=NORMAL; CREATE TABLE t(x); PRAGMA onesync_flush;")
        .unwrap();
    conn.execute("INSERT INTO t VALUES (1)", []).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let (seq, durable) = commit_state(&conn);
    assert!(
        durable < seq,
        "an hour's interval flushed within 50 ms ({durable} >= {seq})"
    );
    interval(&conn, "=1").unwrap();
    let started = Instant::now();
    while commit_state(&conn).1 < seq {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the shortened interval never flushed"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}
