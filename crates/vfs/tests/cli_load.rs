//! The extension path: loads the `libonesync.so` built for this test run into
//! SQLites this crate was not compiled against: the system `sqlite3` CLI and,
//! when installed, apsw's bundled SQLite (scripts/apsw_check.py).
//! Each part is skipped, saying so, when its program is not installed.

use std::process::Command;

mod common;

use common::{cdylib, have};

#[test]
fn loads_into_the_system_sqlite3_cli() {
    if !have("sqlite3", &["--version"]) {
        eprintln!("SKIPPED: no sqlite3 CLI on PATH (apt-get install sqlite3)");
        return;
    }
    let lib = cdylib();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("x.db");
    // `.load` with the path minus ".so": SQLite appends the suffix and derives
    // the entry point sqlite3_onesync_init from the file name.
    let lib_arg = lib.with_extension("");
    let script = format!(
        ".load {lib}\n\
         .open 'file:{db}?vfs=onesync'\n\
         CREATE TABLE t(a);\n\
         BEGIN;\n\
         INSERT INTO t VALUES (1), (2), (3);\n\
         .shell ls {dir}\n\
         ROLLBACK;\n\
         SELECT 'rows', count(*) FROM t;\n\
         BEGIN; INSERT INTO t VALUES (42); COMMIT;\n\
         SELECT 'value', a FROM t;\n\
         PRAGMA integrity_check;\n",
        lib = lib_arg.display(),
        db = db.display(),
        dir = dir.path().display(),
    );
    let stdout = common::sqlite3_script(&script);
    let lines: Vec<&str> = stdout.lines().collect();
    // Mid-transaction: the store and no journal (the store's side file, reader pins for
    // other processes like WAL's -shm, is bound to the file's inode in /dev/shm).
    assert_eq!(lines, ["x.db", "rows|0", "value|42", "ok"], "stdout:\n{stdout}");
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["x.db"]);
}

/// A store made by stock SQLite through the VFS for two rows is at most 1 MiB on disk (its
/// length and its allocated blocks): the store starts small and grows in steps (issue 18).
#[test]
fn a_new_store_of_two_rows_takes_at_most_a_mebibyte() {
    use std::os::unix::fs::MetadataExt;
    if !have("sqlite3", &["--version"]) {
        eprintln!("SKIPPED: no sqlite3 CLI on PATH (apt-get install sqlite3)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("x.onesync");
    let script = format!(
        ".load {lib}\n\
         .open 'file:{db}?vfs=onesync'\n\
         CREATE TABLE t(x);\n\
         INSERT INTO t VALUES (1), (2);\n",
        lib = cdylib().with_extension("").display(),
        db = db.display(),
    );
    common::sqlite3_script(&script);
    let meta = std::fs::metadata(&db).unwrap();
    let on_disk = meta.len().max(meta.blocks() * 512);
    assert!(
        on_disk <= 1 << 20,
        "{} bytes long, {} bytes allocated",
        meta.len(),
        meta.blocks() * 512
    );
}

#[test]
fn loads_into_apsw_bundled_sqlite() {
    if !have("python3", &["-c", "import apsw"]) {
        eprintln!("SKIPPED: python3 with apsw not installed (pip install apsw)");
        return;
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/apsw_check.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(cdylib())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("apsw: OK"),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
