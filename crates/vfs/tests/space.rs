//! Space comes back (issue 40), through the real SQLite (rusqlite's bundled build, onesync
//! registered statically): a store of 10,000 rows, all deleted, then VACUUM is under 1 MiB
//! while the connection is open and after reopening, with `page_count` and
//! `integrity_check` as stock answers them; a commit rewriting the database gives space back
//! in the session also after many small updates grew the file; `VACUUM INTO` a store of a plain database stays
//! within 1.15 times the plain file plus the fixed overhead the store's README states; and a full filesystem (a small tmpfs) gives `SQLITE_FULL` at the
//! COMMIT that cannot grow the store, with every acknowledged row there after reopening and
//! small deletes still committing.

use std::path::Path;
use std::process::Command;

use onesync_vfs::{api_table_from_sys, register_static, VFS_NAME};
use rusqlite::{Connection, ErrorCode, OpenFlags};

const MIB: u64 = 1 << 20;

fn open_store(path: &Path) -> Connection {
    register_static(&api_table_from_sys!(rusqlite::ffi)).expect("register onesync");
    Connection::open_with_flags_and_vfs(path, OpenFlags::default(), VFS_NAME).expect("open a store")
}

fn len(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

fn fill(conn: &Connection, rows: u32) {
    conn.execute_batch("create table t(x)").unwrap();
    conn.execute(
        "with recursive c(i) as (select 1 union all select i + 1 from c where i < ?1)
         insert into t select randomblob(500) from c",
        [rows],
    )
    .unwrap();
}

#[test]
fn vacuum_after_deleting_every_row_gives_the_space_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.onesync");
    {
        let conn = open_store(&path);
        fill(&conn, 10_000);
    }
    let full = len(&path);
    assert!(full > 5 * MIB, "10,000 rows of 500 bytes take only {full} bytes");
    let conn = open_store(&path);
    conn.execute_batch("delete from t; vacuum").unwrap();
    let open_len = len(&path);
    let pages: i64 = conn.query_row("pragma page_count", [], |r| r.get(0)).unwrap();
    assert_eq!(pages, 2, "page_count after VACUUM of an empty table");
    drop(conn);
    let closed_len = len(&path);
    let conn = open_store(&path);
    let rows = rows_after_integrity_check(&conn);
    assert_eq!(rows, 0);
    eprintln!("10,000 rows: {full} bytes; deleted and vacuumed: {open_len} bytes open, {closed_len} closed");
    assert!(open_len < MIB, "{open_len} bytes after VACUUM, connection open");
    assert!(closed_len < MIB, "{closed_len} bytes after VACUUM, closed");
    // It still takes commits.
    conn.execute("insert into t values (1)", []).unwrap();
}

/// A commit that rewrites the whole database gives space back while the connection is
/// open also when earlier commits made the file several times the database (many small
/// updates whose superseded slots wait for a checkpoint, as building and optimizing an FTS
/// index leave it): that commit supersedes half the database, but not a quarter of the file.
#[test]
fn a_large_commit_after_many_small_updates_gives_the_space_back_in_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.onesync");
    let conn = open_store(&path);
    fill(&conn, 3_000);
    let rows: i64 = conn
        .query_row("select count(*) from t", [], |r| r.get(0))
        .unwrap();
    for first in (1..=rows).step_by(15).cycle().take(400) {
        conn.execute(
            "update t set x = randomblob(500) where rowid between ?1 and ?1 + 14",
            [first],
        )
        .unwrap();
    }
    let pages: i64 = conn.query_row("pragma page_count", [], |r| r.get(0)).unwrap();
    let database = pages as u64 * 4096;
    let grown = len(&path);
    assert!(
        grown > 4 * database,
        "the updates grew the store to only {grown} bytes"
    );
    conn.execute_batch("update t set x = randomblob(500)").unwrap();
    let open_len = len(&path);
    eprintln!("database {database} bytes; store {grown} bytes before the large commit, {open_len} after");
    assert!(
        open_len < 2 * database + 2 * MIB,
        "{open_len} bytes after a commit rewriting the database, connection open, for a \
         database of {database} bytes"
    );
    assert_eq!(rows_after_integrity_check(&conn), rows);
}

/// `VACUUM INTO` a store from a plain database: at most 1.15 times the plain file, plus
/// the fixed overhead the store's README states (the headers, a growth step's room, the
/// chain's window and the reserve's fixed part: about half a MiB).
#[test]
fn vacuum_into_a_store_stays_near_the_plain_size() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain.db");
    {
        let conn = Connection::open(&plain).unwrap();
        fill(&conn, 8_000);
    }
    let store = dir.path().join("copy.onesync");
    register_static(&api_table_from_sys!(rusqlite::ffi)).unwrap();
    let conn =
        Connection::open_with_flags(&plain, OpenFlags::default() | OpenFlags::SQLITE_OPEN_URI).unwrap();
    conn.execute(
        "vacuum into ?1",
        [format!("file:{}?vfs={VFS_NAME}", store.display())],
    )
    .unwrap();
    drop(conn);
    let (p, s) = (len(&plain), len(&store));
    eprintln!(
        "plain {p} bytes, VACUUM INTO a store {s} bytes ({:.3}x)",
        s as f64 / p as f64
    );
    assert!(
        s as f64 <= 1.15 * p as f64 + MIB as f64,
        "a store of {s} bytes from a plain file of {p}"
    );
}

fn mount_tmpfs(dir: &Path, size: &str) -> bool {
    Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(dir)
        .status()
        .is_ok_and(|s| s.success())
}

struct Unmount<'a>(&'a Path);
impl Drop for Unmount<'_> {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0).status();
    }
}

#[test]
fn a_full_filesystem_gives_sqlite_full_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    if !mount_tmpfs(dir.path(), "3m") {
        eprintln!("skipped: cannot mount a tmpfs (needs root)");
        return;
    }
    let _unmount = Unmount(dir.path());
    let path = dir.path().join("f.onesync");
    let conn = open_store(&path);
    conn.execute_batch("create table t(x)").unwrap();
    let mut acknowledged = 0i64;
    let mut full = None;
    for _ in 0..1000 {
        match conn.execute(
            "insert into t select randomblob(1000) from (with recursive c(i) as
             (select 1 union all select i + 1 from c where i < 10) select i from c)",
            [],
        ) {
            Ok(n) => acknowledged += n as i64,
            Err(e) => {
                full = Some(e);
                break;
            }
        }
    }
    let e = full.expect("3 MiB filled without an error");
    assert_eq!(e.sqlite_error_code(), Some(ErrorCode::DiskFull), "{e}");
    assert!(e.to_string().contains("database or disk is full"), "{e}");
    drop(conn);
    let conn = open_store(&path);
    let rows = rows_after_integrity_check(&conn);
    assert_eq!(rows, acknowledged, "every acknowledged row is there");
    let deleted = conn.execute("delete from t where rowid <= 9", []).unwrap();
    assert_eq!(deleted, 9, "a small delete commits on the full filesystem");
    eprintln!("{acknowledged} rows acknowledged before SQLITE_FULL; a small delete committed");
}

/// The rows of table `t`, once `PRAGMA integrity_check` has answered ok.
fn rows_after_integrity_check(conn: &Connection) -> i64 {
    let check: String = conn
        .query_row("pragma integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    conn.query_row("select count(*) from t", [], |r| r.get(0))
        .unwrap()
}
