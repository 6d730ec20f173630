//! What an application sees when an open through `vfs=onesync` cannot give it a store: the
//! code and its timing as stock SQLite gives them for the same kind of file, and the reason
//! in `sqlite3_errmsg` (told by the per-connection entry point, registered here as a host
//! does with `register_open_refusal_hook`). Each case is compared with what stock
//! SQLite (the default VFS, same bundled SQLite) does with the same file.

use std::path::Path;

use onesync_vfs::{api_table_from_sys, register_open_refusal_hook, register_static};
use rusqlite::{Connection, ErrorCode, OpenFlags};

fn registered() {
    let api = api_table_from_sys!(rusqlite::ffi);
    register_static(&api).unwrap();
    register_open_refusal_hook(&api).unwrap();
}

/// `path` as a URI path (what the extension's own helper does, written out independently).
fn uri(path: &Path, vfs: Option<&str>) -> String {
    let mut out = String::from("file:");
    for &b in path.as_os_str().as_encoded_bytes() {
        if b.is_ascii_graphic() && !matches!(b, b'%' | b'?' | b'#') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    if let Some(vfs) = vfs {
        out.push_str("?vfs=");
        out.push_str(vfs);
    }
    out
}

fn open(path: &Path, vfs: Option<&str>) -> rusqlite::Result<Connection> {
    Connection::open_with_flags(uri(path, vfs), OpenFlags::default() | OpenFlags::SQLITE_OPEN_URI)
}

fn first_query(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))
}

/// The primary code and message of an error.
fn code_and_message(err: &rusqlite::Error) -> (ErrorCode, String) {
    match err {
        rusqlite::Error::SqliteFailure(e, msg) => (e.code, msg.clone().unwrap_or_default()),
        other => panic!("not a SQLite error: {other}"),
    }
}

/// When and how an open then a first query failed.
#[derive(Debug, PartialEq)]
enum Outcome {
    FailsAtOpen(ErrorCode),
    FailsAtFirstQuery(ErrorCode),
    Works,
}

fn outcome(path: &Path, vfs: Option<&str>) -> (Outcome, String) {
    match open(path, vfs) {
        Err(e) => {
            let (code, msg) = code_and_message(&e);
            (Outcome::FailsAtOpen(code), msg)
        }
        Ok(conn) => match first_query(&conn) {
            Err(e) => {
                let (code, msg) = code_and_message(&e);
                (Outcome::FailsAtFirstQuery(code), msg)
            }
            Ok(_) => (Outcome::Works, String::new()),
        },
    }
}

#[test]
fn a_file_that_is_no_database_fails_at_the_first_query_as_in_stock_sqlite() {
    registered();
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("notes.db");
    let text = "meeting notes, not a database: ".repeat(20);
    std::fs::write(&junk, &text).unwrap();
    let stock = outcome(&junk, None);
    assert_eq!(stock.0, Outcome::FailsAtFirstQuery(ErrorCode::NotADatabase));
    let ours = outcome(&junk, Some("onesync"));
    assert_eq!(ours, stock, "same code, same moment, same message");
    assert_eq!(std::fs::read_to_string(&junk).unwrap(), text, "left as it was");
    // ATTACH reads the schema at once: stock and onesync fail there alike.
    let conn = Connection::open_in_memory().unwrap();
    for vfs in [None, Some("onesync")] {
        let err = conn
            .execute(&format!("ATTACH '{}' AS j", uri(&junk, vfs)), [])
            .unwrap_err();
        assert_eq!(
            code_and_message(&err).0,
            ErrorCode::NotADatabase,
            "{vfs:?}: {err}"
        );
    }
}

#[test]
fn a_plain_sqlite_database_named_as_a_store_is_refused_at_open_saying_why() {
    registered();
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain.db");
    Connection::open(&plain)
        .unwrap()
        .execute_batch("CREATE TABLE t(a); INSERT INTO t VALUES (1);")
        .unwrap();
    let before = std::fs::read(&plain).unwrap();
    let (outcome, msg) = outcome(&plain, Some("onesync"));
    assert_eq!(outcome, Outcome::FailsAtOpen(ErrorCode::NotADatabase));
    assert!(msg.contains("plain SQLite database"), "{msg}");
    assert!(msg.contains("without vfs=onesync"), "{msg}");
    assert_eq!(std::fs::read(&plain).unwrap(), before, "byte-identical");
    let conn = Connection::open_in_memory().unwrap();
    let err = conn
        .execute(&format!("ATTACH '{}' AS p", uri(&plain, Some("onesync"))), [])
        .unwrap_err();
    assert_eq!(code_and_message(&err).0, ErrorCode::NotADatabase, "{err}");
    assert_eq!(std::fs::read(&plain).unwrap(), before, "byte-identical");
}

#[test]
fn a_directory_and_a_missing_directory_fail_at_open_with_cantopen_as_in_stock_sqlite() {
    registered();
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (dir.path().join("adir"), "is a directory"),
        (dir.path().join("missing/x.onesync"), "does not exist"),
    ];
    std::fs::create_dir(&cases[0].0).unwrap();
    for (path, why) in &cases {
        let stock = outcome(path, None);
        assert_eq!(stock.0, Outcome::FailsAtOpen(ErrorCode::CannotOpen), "{path:?}");
        let (ours, msg) = outcome(path, Some("onesync"));
        assert_eq!(ours, stock.0, "{path:?}");
        assert!(msg.contains(why), "{path:?}: {msg}");
    }
    assert!(!dir.path().join("missing").exists(), "nothing created");
}

/// The F2FS backend's refusals reach the application as the store backend's do: here (no
/// F2FS on this machine's temporary directory) a new database is refused saying why.
#[test]
fn the_f2fs_backend_off_f2fs_is_refused_at_open_saying_why() {
    registered();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plain.db");
    let (ours, msg) = outcome(&path, Some("onesync-f2fs"));
    assert_eq!(ours, Outcome::FailsAtOpen(ErrorCode::CannotOpen));
    assert!(msg.contains("not on F2FS"), "{msg}");
    assert!(!path.exists(), "nothing created");
}

#[test]
fn a_store_opened_without_the_vfs_is_named_as_one() {
    registered();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s.onesync");
    open(&store, Some("onesync"))
        .unwrap()
        .execute_batch("CREATE TABLE t(a); INSERT INTO t VALUES (1);")
        .unwrap();
    let (outcome, msg) = outcome(&store, None);
    assert_eq!(outcome, Outcome::FailsAtOpen(ErrorCode::NotADatabase));
    assert!(msg.contains("is a onesync store"), "{msg}");
    assert!(msg.contains("vfs=onesync"), "{msg}");
    // And it is still a store with its row.
    let conn = open(&store, Some("onesync")).unwrap();
    let n: i64 = conn
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1);
}

#[test]
fn paths_with_hash_question_mark_and_spaces_work() {
    registered();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("my data #1? yes.onesync");
    {
        let conn = open(&store, Some("onesync")).unwrap();
        conn.execute_batch("CREATE TABLE t(a); INSERT INTO t VALUES ('kept');")
            .unwrap();
    }
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(
        names,
        ["my data #1? yes.onesync"],
        "the whole name, nothing truncated"
    );
    let conn = open(&store, Some("onesync")).unwrap();
    let a: String = conn.query_row("SELECT a FROM t", [], |r| r.get(0)).unwrap();
    assert_eq!(a, "kept");
    // The same file named without a URI (the VFS as the open call's argument).
    let conn = Connection::open_with_flags_and_vfs(&store, OpenFlags::default(), "onesync").unwrap();
    let a: String = conn.query_row("SELECT a FROM t", [], |r| r.get(0)).unwrap();
    assert_eq!(a, "kept");
}
