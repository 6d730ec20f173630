//! The `onesync-f2fs` VFS off F2FS (this host has none; the VM tests it on F2FS: `onesync-lab vm
//! test`): it refuses with a clear error, creates nothing and leaves existing files as they were.

use onesync_vfs::{api_table_from_sys, f2fs_atomic_write_support, register_static, F2FS_VFS_NAME};
use rusqlite::{Connection, OpenFlags};

fn open_f2fs(path: &std::path::Path) -> rusqlite::Result<Connection> {
    register_static(&api_table_from_sys!(rusqlite::ffi)).expect("register onesync");
    Connection::open_with_flags_and_vfs(path, OpenFlags::default(), F2FS_VFS_NAME)
}

#[test]
fn a_new_database_off_f2fs_is_refused_and_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("new.db");
    let refused = open_f2fs(&db).and_then(|c| c.execute_batch("CREATE TABLE t(x)"));
    assert!(refused.is_err(), "opened a database off F2FS");
    assert!(!db.exists(), "the refused open created {}", db.display());
    let why = f2fs_atomic_write_support(dir.path()).unwrap_err();
    assert!(why.contains("not on F2FS"), "{why}");
}

#[test]
fn an_existing_database_off_f2fs_is_refused_and_left_intact() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("old.db");
    {
        let plain = Connection::open(&db).unwrap();
        plain
            .execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (42);")
            .unwrap();
    }
    let before = std::fs::read(&db).unwrap();
    let refused = open_f2fs(&db).and_then(|c| c.query_row("SELECT x FROM t", [], |r| r.get::<_, i64>(0)));
    assert!(refused.is_err(), "read a database off F2FS through onesync-f2fs");
    assert_eq!(
        std::fs::read(&db).unwrap(),
        before,
        "the refused open changed the file"
    );
}
