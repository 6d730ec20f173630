//! `onesync_mapping_cache`, the URI parameter bounding a process's cache of the store's
//! mapping blocks: it takes effect (no cache: every lookup reads its blocks; the default:
//! a second reader's lookups are served from memory) and a bad value fails the open with
//! what is allowed, creating nothing.

use std::path::Path;

use onesync_vfs::{api_table_from_sys, register_open_refusal_hook, register_static, VFS_NAME};
use rusqlite::{Connection, OpenFlags};

fn open_uri(path: &Path, params: &str) -> rusqlite::Result<Connection> {
    let api = api_table_from_sys!(rusqlite::ffi);
    register_static(&api).expect("register onesync");
    // The per-connection entry point tells a refused open's reason (`sqlite3_errmsg`).
    register_open_refusal_hook(&api).expect("register the refusal hook");
    let uri = format!("file:{}?vfs={VFS_NAME}{params}", path.display());
    Connection::open_with_flags(uri, OpenFlags::default() | OpenFlags::SQLITE_OPEN_URI)
}

fn stats(conn: &Connection) -> serde_json::Value {
    let json: String = conn.query_row("PRAGMA onesync_stats", [], |r| r.get(0)).unwrap();
    serde_json::from_str(&json).unwrap()
}

/// Build a store of a few thousand pages, checkpointed (so its mapping is in runs on disk)
/// and closed, then open it with `params` and read it all twice, each time from a new
/// connection (SQLite's page cache is per connection; the store's is per process).
/// Returns the counters after each read.
fn read_twice(path: &Path, params: &str) -> (serde_json::Value, serde_json::Value) {
    {
        let conn = open_uri(path, "").unwrap();
        conn.execute_batch(
            "CREATE TABLE t(x); WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n \
             WHERE i < 3000) INSERT INTO t SELECT randomblob(1000) FROM n; PRAGMA onesync_checkpoint;",
        )
        .unwrap();
    }
    let holder = open_uri(path, params).unwrap();
    let sum = |conn: &Connection| -> i64 {
        conn.query_row("SELECT sum(length(x)) FROM t", [], |r| r.get(0))
            .unwrap()
    };
    assert_eq!(sum(&holder), 3_000_000);
    let first = stats(&holder);
    let second_reader = open_uri(path, params).unwrap();
    assert_eq!(sum(&second_reader), 3_000_000);
    (first, stats(&holder))
}

fn counter(v: &serde_json::Value, name: &str) -> u64 {
    v[name]
        .as_u64()
        .unwrap_or_else(|| panic!("{name} missing from {v}"))
}

#[test]
fn no_cache_reads_every_lookup_s_blocks_and_the_default_serves_a_second_reader() {
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = read_twice(&dir.path().join("none.db"), "&onesync_mapping_cache=0");
    assert!(counter(&first, "mapping_cache_misses") > 0, "{first}");
    assert_eq!(counter(&second, "mapping_cache_bytes"), 0, "{second}");
    let missed_again = counter(&second, "mapping_cache_misses") - counter(&first, "mapping_cache_misses");
    assert!(
        missed_again >= counter(&first, "mapping_cache_misses") / 2,
        "a second reader read few blocks again with no cache: {first} then {second}"
    );

    let (first, second) = read_twice(&dir.path().join("default.db"), "");
    assert!(counter(&second, "mapping_cache_bytes") > 0, "{second}");
    assert_eq!(
        counter(&second, "mapping_cache_misses"),
        counter(&first, "mapping_cache_misses"),
        "a second reader read blocks the cache holds: {first} then {second}"
    );
    assert!(counter(&second, "mapping_cache_hits") > counter(&first, "mapping_cache_hits"));
}

#[test]
fn a_bad_value_fails_the_open_with_what_is_allowed() {
    let dir = tempfile::tempdir().unwrap();
    for bad in ["x", "-1", "65g", "12q", "99999999999999999999"] {
        let path = dir.path().join("bad.db");
        let err = open_uri(&path, &format!("&onesync_mapping_cache={bad}"))
            .and_then(|conn| conn.execute_batch("CREATE TABLE t(x)"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("onesync_mapping_cache must be"), "{bad}: {err}");
        assert!(!path.exists(), "a refused open created the file");
    }
    for good in ["0", "4096", "512k", "64M", "1g"] {
        let path = dir.path().join(format!("good-{good}.db"));
        let conn = open_uri(&path, &format!("&onesync_mapping_cache={good}")).unwrap();
        conn.execute_batch("CREATE TABLE t(x)").unwrap();
    }
}
