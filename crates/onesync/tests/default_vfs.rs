//! `register_default`: connections that name no VFS get stores, plain files stay plain.
//! (Its own test binary: the default VFS is process-wide.)

use rusqlite::Connection;

#[test]
fn new_databases_are_stores_and_plain_files_pass_through() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain.db");
    Connection::open(&plain)
        .unwrap()
        .execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);")
        .unwrap();

    onesync::register_default(&Connection::open_in_memory().unwrap()).unwrap();

    let store = dir.path().join("new.db");
    Connection::open(&store)
        .unwrap()
        .execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (2);")
        .unwrap();
    let magic = std::fs::read(&store).unwrap();
    assert!(magic.starts_with(b"onesync store"), "a new database is a store");
    let conn = Connection::open(&plain).unwrap();
    conn.execute("INSERT INTO t VALUES (3)", []).unwrap();
    let n: i64 = conn.query_row("SELECT sum(x) FROM t", [], |r| r.get(0)).unwrap();
    assert_eq!(n, 4);
    assert!(std::fs::read(&plain).unwrap().starts_with(b"SQLite format 3\0"));
}
