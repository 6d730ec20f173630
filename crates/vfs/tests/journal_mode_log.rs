//! `PRAGMA journal_mode=WAL` and `=OFF` on a store say in SQLite's error log (`sqlite3_log`)
//! what they were answered and why, once per request. One test in this binary: SQLite's log
//! is configured once, before SQLite starts.

use std::sync::Mutex;

use onesync_vfs::{api_table_from_sys, register_static, VFS_NAME};
use rusqlite::{Connection, OpenFlags};

static LOGGED: Mutex<Vec<(i32, String)>> = Mutex::new(Vec::new());

fn remember(code: i32, msg: &str) {
    LOGGED.lock().unwrap().push((code, msg.to_owned()));
}

/// The messages logged since the last call, with their codes.
fn take_logged() -> Vec<(i32, String)> {
    std::mem::take(&mut *LOGGED.lock().unwrap())
}

#[test]
fn wal_and_off_requests_are_logged_once_each() {
    // SAFETY: SQLite has not been used in this process yet (the only test of this binary,
    // before any connection), and `remember` calls no SQLite routine.
    unsafe { rusqlite::trace::config_log(Some(remember)) }.unwrap();
    register_static(&api_table_from_sys!(rusqlite::ffi)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let conn = Connection::open_with_flags_and_vfs(&path, OpenFlags::default(), VFS_NAME).unwrap();
    conn.execute_batch("CREATE TABLE t(a)").unwrap();
    let answer = |sql: &str| conn.query_row(sql, [], |r| r.get::<_, String>(0)).unwrap();
    take_logged();

    assert_eq!(answer("PRAGMA journal_mode=WAL"), "wal");
    let logged = take_logged();
    assert_eq!(logged.len(), 1, "{logged:?}");
    let (code, msg) = &logged[0];
    assert_eq!(*code, rusqlite::ffi::SQLITE_NOTICE, "{msg}");
    assert!(
        msg.starts_with("onesync: journal_mode=WAL answered as wal: the store gives WAL's promises")
            && msg.contains("readers never block the writer")
            && msg.contains("rollback journal stays in memory"),
        "{msg}"
    );

    // A query is not a request: nothing logged.
    assert_eq!(answer("PRAGMA journal_mode"), "wal");
    assert_eq!(take_logged(), []);

    assert_eq!(answer("PRAGMA journal_mode=DELETE"), "delete");
    assert_eq!(take_logged(), []);
    assert_eq!(answer("PRAGMA journal_mode=OFF"), "delete");
    let logged = take_logged();
    assert_eq!(logged.len(), 1, "{logged:?}");
    let (code, msg) = &logged[0];
    assert_eq!(*code, rusqlite::ffi::SQLITE_NOTICE, "{msg}");
    assert!(
        msg.starts_with("onesync: journal_mode=OFF answered with the mode in effect")
            && msg.contains("commits atomically"),
        "{msg}"
    );
}
