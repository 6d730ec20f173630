//! `register` and `open` with rusqlite's bundled SQLite.

use rusqlite::Connection;

#[test]
fn open_commit_reopen_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a #1 ?.onesync");
    {
        let db = onesync::open(&path).unwrap();
        db.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES ('kept');")
            .unwrap();
    }
    let db = onesync::open(&path).unwrap();
    let x: String = db.query_row("SELECT x FROM t", [], |r| r.get(0)).unwrap();
    assert_eq!(x, "kept");
    // A store, not a plain SQLite file: opening it without the VFS says so.
    let err = Connection::open(&path)
        .and_then(|c| c.query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0)))
        .unwrap_err();
    assert!(err.to_string().contains("onesync store"), "{err}");
}

#[test]
fn register_gives_later_connections_the_refusal_reason_and_no_virtual_table() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain.db");
    let conn = Connection::open(&plain).unwrap();
    conn.execute_batch("CREATE TABLE t(x)").unwrap();
    onesync::register(&conn).unwrap();
    onesync::register(&conn).unwrap();
    // A plain SQLite file opened as a store: refused, and the message says why.
    let uri = format!("file:{}?vfs=onesync", plain.display());
    let err = Connection::open(uri)
        .and_then(|c| c.query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0)))
        .unwrap_err();
    assert!(err.to_string().contains("plain SQLite database"), "{err}");
    // The library is the store and the VFS: no `mvbt` module (crate onesync-mvbt-vtab has it).
    let later = onesync::open(dir.path().join("s.onesync")).unwrap();
    let err = later
        .execute_batch("CREATE VIRTUAL TABLE kv USING mvbt")
        .unwrap_err();
    assert!(err.to_string().contains("no such module: mvbt"), "{err}");
}
