//! After `sqlite3_shutdown()` and `sqlite3_initialize()` (SQLite's own test harness does
//! this, as do some applications), SQLite has forgotten its automatic extensions, among them
//! onesync's per-connection entry point; an open that onesync refuses must still fail at
//! open, with its code and reason, as stock SQLite fails it (found by SQLite's TCL suite:
//! `oserror-1.3.1`, `capi3-3.3`). One test in its own binary: shutting SQLite down is
//! allowed only with no connection open anywhere in the process.

use onesync_vfs::{api_table_from_sys, register_open_refusal_hook, register_static};
use rusqlite::{Connection, ErrorCode, OpenFlags};

#[test]
fn a_refused_open_fails_at_open_after_sqlite_is_shut_down_and_initialized_again() {
    let api = api_table_from_sys!(rusqlite::ffi);
    register_static(&api).unwrap();
    register_open_refusal_hook(&api).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-dir").join("x.db");
    let uri = format!("file:{}?vfs=onesync", missing.display());
    let flags = OpenFlags::default() | OpenFlags::SQLITE_OPEN_URI;
    let before = Connection::open_with_flags(&uri, flags).map(|_| ()).unwrap_err();

    // SAFETY: no connection is open in this process (the one above failed and is closed).
    unsafe {
        assert_eq!(rusqlite::ffi::sqlite3_shutdown(), rusqlite::ffi::SQLITE_OK);
        assert_eq!(rusqlite::ffi::sqlite3_initialize(), rusqlite::ffi::SQLITE_OK);
    }
    let after = Connection::open_with_flags(&uri, flags).map(|_| ()).unwrap_err();
    for err in [&before, &after] {
        let rusqlite::Error::SqliteFailure(e, msg) = err else {
            panic!("not a SQLite error: {err}");
        };
        assert_eq!(e.code, ErrorCode::CannotOpen, "{err}");
        let msg = msg.clone().unwrap_or_default();
        assert!(msg.contains("does not exist"), "{msg}");
    }
}
