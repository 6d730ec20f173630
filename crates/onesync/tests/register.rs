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
fn register_gives_mvbt_to_the_connection_and_later_ones() {
    let dir = tempfile::tempdir().unwrap();
    let conn = Connection::open(dir.path().join("plain.db")).unwrap();
    onesync::register(&conn).unwrap();
    onesync::register(&conn).unwrap();
    conn.execute_batch("CREATE VIRTUAL TABLE kv USING mvbt; INSERT INTO kv VALUES (1, 'a');")
        .unwrap();
    let uri = format!("file:{}?vfs=onesync", dir.path().join("s.onesync").display());
    let later = Connection::open(uri).unwrap();
    later
        .execute_batch("CREATE VIRTUAL TABLE kv USING mvbt; INSERT INTO kv VALUES (2, 'b');")
        .unwrap();
}
