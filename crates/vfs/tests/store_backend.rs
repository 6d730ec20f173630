//! The store backend through rusqlite's bundled SQLite (static registration):
//! SQL semantics, ATTACH in one store, refused pragmas, page sizes, bad input,
//! several connections, stats.

use std::path::Path;

use onesync_vfs::{api_table_from_sys, register_static, VFS_NAME};
use rusqlite::{Connection, OpenFlags};

mod common;

fn open(path: &Path) -> Connection {
    register_static(&api_table_from_sys!(rusqlite::ffi)).expect("register onesync");
    let conn =
        Connection::open_with_flags_and_vfs(path, OpenFlags::default(), VFS_NAME).expect("open via onesync");
    conn.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
    conn
}

fn count(conn: &Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

fn integrity(conn: &Connection) {
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
}

#[test]
fn rollback_savepoints_statement_rollback_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    {
        let conn = open(&path);
        conn.execute_batch("CREATE TABLE t(a INTEGER UNIQUE, b); INSERT INTO t VALUES (1, 'x'), (2, 'y');")
            .unwrap();
        common::exercise_rollbacks(&conn);
        integrity(&conn);
    }
    let mut header = [0u8; 8];
    std::io::Read::read_exact(&mut std::fs::File::open(&path).unwrap(), &mut header).unwrap();
    assert_ne!(
        &header[..6],
        b"SQLite",
        "the file is a store, not a plain SQLite database"
    );
    let conn = open(&path);
    assert_eq!(
        count(&conn, "SELECT count(*) FROM t"),
        3,
        "data present after reopen"
    );
    integrity(&conn);
}

#[test]
fn attached_database_in_the_same_store_commits_together() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.db");
    let conn = open(&path);
    let aux = format!("file:{}?vfs={VFS_NAME}&db=aux", path.display());
    conn.execute("ATTACH ?1 AS aux", [&aux]).unwrap();
    conn.execute_batch(
        "CREATE TABLE main.acct(id INTEGER PRIMARY KEY, bal); CREATE TABLE aux.acct(id INTEGER PRIMARY KEY, bal);
         INSERT INTO main.acct VALUES (1, 100); INSERT INTO aux.acct VALUES (1, 0);",
    )
    .unwrap();
    conn.execute_batch(
        "BEGIN; UPDATE main.acct SET bal = bal - 30; UPDATE aux.acct SET bal = bal + 30; COMMIT;",
    )
    .unwrap();
    conn.execute_batch("BEGIN; UPDATE main.acct SET bal = 0; UPDATE aux.acct SET bal = 0; ROLLBACK;")
        .unwrap();
    drop(conn);
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "one file: the store"
    );
    let conn = open(&path);
    conn.execute("ATTACH ?1 AS aux", [&aux]).unwrap();
    assert_eq!(count(&conn, "SELECT bal FROM main.acct"), 70);
    assert_eq!(count(&conn, "SELECT bal FROM aux.acct"), 30);
    let check: String = conn
        .query_row("PRAGMA aux.integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    integrity(&conn);
}

#[test]
fn wal_is_answered_wal_off_the_mode_in_effect_others_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let conn = open(&dir.path().join("w.db"));
    conn.execute_batch("CREATE TABLE t(a)").unwrap();
    let answer = |pragma: &str| -> String { conn.query_row(pragma, [], |r| r.get(0)).unwrap() };
    assert_eq!(answer("PRAGMA journal_mode = OFF"), "delete");
    assert_eq!(answer("PRAGMA journal_mode = WAL"), "wal");
    assert_eq!(answer("PRAGMA journal_mode = OFF"), "wal");
    conn.execute("INSERT INTO t VALUES ('wal')", []).unwrap();
    assert!(!dir.path().join("w.db-wal").exists(), "a store has no WAL file");
    for mode in ["truncate", "persist", "memory", "delete"] {
        assert_eq!(answer(&format!("PRAGMA journal_mode = {mode}")), mode);
        conn.execute("INSERT INTO t VALUES (?1)", [mode]).unwrap();
    }
    assert_eq!(count(&conn, "SELECT count(*) FROM t"), 5);
}

#[test]
fn sqlite_page_sizes_other_than_the_store_page_size() {
    for page_size in [1024, 8192, 65536] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.db");
        {
            let conn = open(&path);
            conn.execute_batch(&format!(
                "PRAGMA page_size = {page_size}; CREATE TABLE t(a, b);
                 WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000)
                 INSERT INTO t SELECT i, randomblob(300) FROM n;
                 DELETE FROM t WHERE a % 3 = 0; VACUUM;"
            ))
            .unwrap();
            integrity(&conn);
        }
        let conn = open(&path);
        assert_eq!(count(&conn, "PRAGMA page_size"), page_size);
        assert_eq!(count(&conn, "SELECT count(*) FROM t"), 2000 - 666);
        integrity(&conn);
    }
}

#[test]
fn a_plain_sqlite_file_is_refused_and_left_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plain.db");
    Connection::open(&path)
        .unwrap()
        .execute_batch("CREATE TABLE t(a); INSERT INTO t VALUES (1);")
        .unwrap();
    let before = std::fs::read(&path).unwrap();
    register_static(&api_table_from_sys!(rusqlite::ffi)).unwrap();
    let result = Connection::open_with_flags_and_vfs(&path, OpenFlags::default(), VFS_NAME)
        .and_then(|c| c.query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0)));
    let err = result.unwrap_err();
    assert!(err.to_string().contains("not a database"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), before, "byte-identical");
}

#[test]
fn a_reader_keeps_its_snapshot_while_a_writer_commits() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.db");
    let writer = open(&path);
    writer
        .execute_batch("CREATE TABLE t(a); INSERT INTO t VALUES (1);")
        .unwrap();
    let reader = open(&path);
    reader.execute_batch("BEGIN").unwrap();
    assert_eq!(count(&reader, "SELECT count(*) FROM t"), 1);
    writer
        .execute_batch("INSERT INTO t VALUES (2); INSERT INTO t VALUES (3);")
        .unwrap();
    assert_eq!(count(&reader, "SELECT count(*) FROM t"), 1, "old snapshot");
    reader.execute_batch("COMMIT").unwrap();
    assert_eq!(count(&reader, "SELECT count(*) FROM t"), 3, "new snapshot");

    // Threads, one connection each, all committing.
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let path = path.clone();
            std::thread::spawn(move || {
                let conn = open(&path);
                for i in 0..50 {
                    conn.execute("INSERT INTO t VALUES (?1)", [t * 1000 + i]).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(count(&writer, "SELECT count(*) FROM t"), 203);
    integrity(&writer);
}

#[test]
fn onesync_stats_is_json() {
    let dir = tempfile::tempdir().unwrap();
    let conn = open(&dir.path().join("j.db"));
    conn.execute_batch("CREATE TABLE t(a); INSERT INTO t VALUES (1);")
        .unwrap();
    let json: String = conn.query_row("PRAGMA onesync_stats", [], |r| r.get(0)).unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(v["commit_records"].as_u64().unwrap() >= 2, "{json}");
    assert_eq!(v["page_size"].as_u64(), Some(4096));
}

/// `PRAGMA onesync_checkpoint` writes a checkpoint now (its bytes and time counted in
/// `onesync_stats`) and answers the durable point; a read-only connection is refused.
#[test]
fn onesync_checkpoint_checkpoints_and_a_reader_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.db");
    let conn = open(&path);
    conn.execute_batch("CREATE TABLE t(a); INSERT INTO t VALUES (1);")
        .unwrap();
    let stats = |conn: &Connection| -> serde_json::Value {
        let json: String = conn.query_row("PRAGMA onesync_stats", [], |r| r.get(0)).unwrap();
        serde_json::from_str(&json).unwrap()
    };
    let before = stats(&conn);
    let json: String = conn
        .query_row("PRAGMA onesync_checkpoint", [], |r| r.get(0))
        .unwrap();
    let reply: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(reply["durable_seq"], before["last_seq"], "{json}");
    let after = stats(&conn);
    let grew = |key: &str| after[key].as_u64().unwrap() > before[key].as_u64().unwrap();
    for key in ["checkpoints", "checkpoint_bytes", "checkpoint_micros"] {
        assert!(grew(key), "{key}: {before} then {after}");
    }

    let reader = Connection::open_with_flags_and_vfs(&path, OpenFlags::SQLITE_OPEN_READ_ONLY, VFS_NAME)
        .expect("open read-only via onesync");
    let refused = reader
        .query_row("PRAGMA onesync_checkpoint", [], |r| r.get::<_, String>(0))
        .unwrap_err();
    assert_eq!(
        refused.sqlite_error_code(),
        Some(rusqlite::ErrorCode::ReadOnly),
        "{refused}"
    );
    assert!(refused.to_string().contains("read-only"), "{refused}");
}

/// The bundled SQLite is built with SQLITE_ENABLE_BATCH_ATOMIC_WRITE
/// (`.cargo/config.toml` sets LIBSQLITE3_FLAGS for libsqlite3-sys), and onesync
/// advertises SQLITE_IOCAP_BATCH_ATOMIC, so a commit of a non-empty database
/// goes through SQLITE_FCNTL_BEGIN/COMMIT_ATOMIC_WRITE with no rollback
/// journal at all. Observable: SQLite then keeps the journal in its own
/// memory and never opens one through the VFS (`Stats::journal_opens` stays
/// put), while the commit still reaches the store (a new commit record) and
/// survives a reopen. Controls, where SQLite cannot use a batch: the first
/// transaction of an empty database and a two-database commit (super
/// journal) do open a journal through the VFS.
///
/// Uses its own registration (same store backend, another VFS name) so that
/// tests running in parallel in this process don't move its counters.
#[test]
fn batch_atomic_write_is_compiled_in_and_used() {
    const NAME: &str = "onesync-batch-test";
    let api = api_table_from_sys!(rusqlite::ffi);
    register_static(&api).unwrap();
    onesync_vfs::register_with(
        &api,
        onesync_vfs::RegisterOptions {
            name: NAME.to_owned(),
            make_default: false,
            main_db: Box::new(onesync_vfs::StoreFactory::new(api)),
            memory_journals: true,
            files: None,
        },
    )
    .expect("register the batch-test VFS");
    let journals = || onesync_vfs::stats(&api, NAME).expect("registered").journal_opens;
    let commits = |conn: &Connection| -> u64 {
        let json: String = conn.query_row("PRAGMA onesync_stats", [], |r| r.get(0)).unwrap();
        serde_json::from_str::<serde_json::Value>(&json).unwrap()["commit_records"]
            .as_u64()
            .unwrap()
    };

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.db");
    let conn = Connection::open_with_flags_and_vfs(&path, OpenFlags::default(), NAME).unwrap();
    let batch: i64 = conn
        .query_row(
            "SELECT sqlite_compileoption_used('ENABLE_BATCH_ATOMIC_WRITE')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        batch, 1,
        "the bundled SQLite lacks SQLITE_ENABLE_BATCH_ATOMIC_WRITE: is LIBSQLITE3_FLAGS \
         from .cargo/config.toml reaching libsqlite3-sys's build script?"
    );

    // Control: an empty database (dbSize 0) cannot batch; SQLite opens its journal.
    let j0 = journals();
    conn.execute_batch("CREATE TABLE t(a)").unwrap();
    let j1 = journals();
    assert!(
        j1 > j0,
        "the first write to an empty database opens a journal through the VFS"
    );

    // Batch commits: no journal through the VFS, one store commit each.
    let c1 = commits(&conn);
    conn.execute_batch("BEGIN; INSERT INTO t VALUES (1); COMMIT;")
        .unwrap();
    for i in 2..=10 {
        conn.execute("INSERT INTO t VALUES (?1)", [i]).unwrap();
    }
    conn.execute_batch("BEGIN; UPDATE t SET a = a * 10; COMMIT;")
        .unwrap();
    let j2 = journals();
    let c2 = commits(&conn);
    println!("journal opens: {j0} -> {j1} (empty db) -> {j2} (11 batch commits); store commits {c1} -> {c2}");
    assert_eq!(
        j2, j1,
        "commits of a non-empty database opened a rollback journal through the VFS: \
         SQLite did not use BEGIN/COMMIT_ATOMIC_WRITE"
    );
    assert_eq!(c2 - c1, 11, "each batch commit is one store commit");
    // A rolled-back transaction (journal in SQLite's memory) still rolls back.
    conn.execute_batch("BEGIN; DELETE FROM t; ROLLBACK;").unwrap();
    assert_eq!(count(&conn, "SELECT count(*) FROM t"), 10);
    assert_eq!(commits(&conn), c2, "a rollback commits nothing");

    // Control: a two-database commit needs a super-journal; no batch.
    let aux = format!("file:{}?vfs={NAME}&db=aux", path.display());
    conn.execute("ATTACH ?1 AS aux", [&aux]).unwrap();
    conn.execute_batch("CREATE TABLE aux.u(a); INSERT INTO aux.u VALUES (0);")
        .unwrap();
    let j3 = journals();
    conn.execute_batch("BEGIN; INSERT INTO t VALUES (11); INSERT INTO aux.u VALUES (11); COMMIT;")
        .unwrap();
    assert!(
        journals() > j3,
        "a two-database commit opens journals through the VFS"
    );
    integrity(&conn);
    drop(conn);

    let conn = Connection::open_with_flags_and_vfs(&path, OpenFlags::default(), NAME).unwrap();
    assert_eq!(
        count(&conn, "SELECT sum(a) FROM t"),
        561,
        "batch commits are durable"
    );
    integrity(&conn);
}
