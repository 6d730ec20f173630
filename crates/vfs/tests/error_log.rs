//! A store error reaches the application as SQLite's error code, and its reason (what
//! failed, where, the OS error) reaches SQLite's error log (`sqlite3_log`): SQLite's own
//! message for an I/O error is only "disk I/O error". One test in this binary: SQLite's log
//! is configured once, before SQLite starts.

use std::sync::Mutex;

use onesync_vfs::{api_table_from_sys, register_static, VFS_NAME};
use rusqlite::{Connection, ErrorCode, OpenFlags};

static LOGGED: Mutex<Vec<(i32, String)>> = Mutex::new(Vec::new());

fn remember(code: i32, msg: &str) {
    LOGGED.lock().unwrap().push((code, msg.to_owned()));
}

const MARKER: &[u8] = b"onesync-error-log-marker-";

#[test]
fn a_damaged_page_fails_the_read_and_the_log_says_why() {
    // SAFETY: SQLite has not been used in this process yet (the only test of this binary,
    // before any connection), and `remember` calls no SQLite routine.
    unsafe { rusqlite::trace::config_log(Some(remember)) }.unwrap();
    register_static(&api_table_from_sys!(rusqlite::ffi)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let open = || Connection::open_with_flags_and_vfs(&path, OpenFlags::default(), VFS_NAME).unwrap();

    let conn = open();
    let blob = MARKER.repeat(120); // 3,000 bytes: one table leaf page holds it
    conn.execute_batch("CREATE TABLE t(v BLOB)").unwrap();
    conn.execute("INSERT INTO t VALUES (?1)", [&blob]).unwrap();
    drop(conn);

    // Damage every copy of the page that holds the row (out-of-place writes leave one or
    // a few; the mapping names the newest, with its checksum).
    let mut image = std::fs::read(&path).unwrap();
    let hits: Vec<usize> = image
        .windows(MARKER.len())
        .enumerate()
        .filter(|(_, w)| *w == MARKER)
        .map(|(at, _)| at)
        .collect();
    assert!(!hits.is_empty(), "the row is not in the store file");
    for at in hits {
        image[at] ^= 0xff;
    }
    std::fs::write(&path, &image).unwrap();

    LOGGED.lock().unwrap().clear();
    let conn = open();
    let err = conn
        .query_row("SELECT length(v) FROM t", [], |r| r.get::<_, i64>(0))
        .expect_err("a damaged page was read");
    assert_eq!(err.sqlite_error_code(), Some(ErrorCode::SystemIoFailure), "{err}");
    let logged = LOGGED.lock().unwrap().clone();
    assert!(
        logged.iter().any(|(code, msg)| code & 0xff == 10
            && msg.starts_with("onesync: reading")
            && msg.contains("fails its checksum")),
        "no log line says why: {logged:?}"
    );
}
