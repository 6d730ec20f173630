//! The extension path: loads the `libonesync.so` built for this test run into
//! SQLites this crate was not compiled against: the system `sqlite3` CLI and,
//! when installed, apsw's bundled SQLite (scripts/apsw_check.py).
//! Each part is skipped, saying so, when its program is not installed.

use std::process::Command;

mod common;

use common::{cdylib, have};

/// Whether the stock `sqlite3` CLI is missing (the test then skips, saying so).
fn no_sqlite3_cli() -> bool {
    let missing = !have("sqlite3", &["--version"]);
    if missing {
        eprintln!("SKIPPED: no sqlite3 CLI on PATH (apt-get install sqlite3)");
    }
    missing
}

/// Runs `commands` in the stock CLI after it loads the extension and opens `db` as a store
/// (stopping at the first error); returns what it printed.
fn on_a_store_in_the_stock_cli(db: &std::path::Path, commands: &str) -> String {
    common::sqlite3_script(&format!(
        ".bail on\n.load {}\n.open 'file:{}?vfs=onesync'\n{commands}",
        cdylib().with_extension("").display(),
        db.display()
    ))
}

#[test]
fn loads_into_the_system_sqlite3_cli() {
    if no_sqlite3_cli() {
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
    if no_sqlite3_cli() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("x.onesync");
    on_a_store_in_the_stock_cli(&db, "CREATE TABLE t(x);\nINSERT INTO t VALUES (1), (2);\n");
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

/// A refused open writes nothing to the host's stderr; with `ONESYNC_LOG_STDERR=1` the
/// reason (also in `sqlite3_errmsg` and `sqlite3_log`) goes there too. Debian's python3,
/// whose sqlite3 loads extensions, is the host.
#[test]
fn a_refusal_reaches_stderr_only_when_asked() {
    let python = "/usr/bin/python3";
    let loads = "import sqlite3; sqlite3.Connection.enable_load_extension";
    if !have(python, &["-c", loads]) {
        eprintln!("SKIPPED: no {python} whose sqlite3 loads extensions");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain.db");
    let script = "import sqlite3, sys\n\
        c = sqlite3.connect(':memory:'); c.enable_load_extension(True); c.load_extension(sys.argv[1])\n\
        sqlite3.connect(sys.argv[2]).execute('CREATE TABLE t(x)').connection.commit()\n\
        try:\n    sqlite3.connect('file:' + sys.argv[2] + '?vfs=onesync', uri=True).execute('SELECT 1')\n\
        except sqlite3.DatabaseError as e:\n    print('refused:', e)\n";
    let run = |env: Option<&str>| {
        let _ = std::fs::remove_file(&plain);
        let mut cmd = Command::new(python);
        cmd.args(["-c", script]).arg(cdylib()).arg(&plain);
        cmd.env_remove("ONESYNC_LOG_STDERR");
        if let Some(v) = env {
            cmd.env("ONESYNC_LOG_STDERR", v);
        }
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success() && stdout.contains("refused:"), "{stdout}");
        assert!(
            stdout.contains("plain SQLite"),
            "the reason is in the error message: {stdout}"
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert_eq!(run(None), "", "nothing on stderr unless asked");
    assert!(
        run(Some("1")).contains("plain SQLite"),
        "asked, the reason is on stderr"
    );
}

/// The stock CLI's `PRAGMA journal_mode=WAL` on a store, as ORMs run it at start-up: answered
/// `wal`, no error, and the connection keeps answering `wal` (crates/vfs/README.md,
/// "journal_mode").
#[test]
fn journal_mode_wal_on_a_store_answers_wal_in_the_stock_cli() {
    if no_sqlite3_cli() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("x.onesync");
    let stdout = on_a_store_in_the_stock_cli(
        &db,
        "PRAGMA journal_mode=WAL;\n\
         CREATE TABLE t(a);\n\
         INSERT INTO t VALUES (1);\n\
         PRAGMA journal_mode;\n\
         PRAGMA journal_mode=OFF;\n\
         BEGIN; INSERT INTO t VALUES (2); ROLLBACK;\n\
         SELECT count(*) FROM t;\n\
         PRAGMA journal_mode=DELETE;\n\
         PRAGMA journal_mode=off;\n",
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        ["wal", "wal", "wal", "1", "delete", "delete"],
        "stdout:\n{stdout}"
    );
}
