//! onesync chosen as SQLite's default VFS (`sqlite3_onesync_default_init`), in the system
//! `sqlite3` CLI, for applications and drivers that cannot name a VFS: a new database is a
//! store, a store opens as one, and a plain SQLite file (and an ATTACHed new one) stays a
//! plain file that stock SQLite reads, WAL mode included. Refused opens say why in the
//! error message and write nothing else to stderr.

use std::path::Path;
use std::process::{Command, Stdio};

mod common;

use common::{cdylib, have};

const STORE_MAGIC: &[u8] = b"onesync store\0\r\n";
const SQLITE_MAGIC: &[u8] = b"SQLite format 3\0";

/// Runs `sql` in the CLI on `:memory:` after loading the extension with `entry` and opening
/// `db`; returns (success, stdout, stderr).
fn cli(entry: Option<&str>, db: &str, sql: &str) -> (bool, String, String) {
    let lib = cdylib().with_extension("");
    let mut args = vec!["-bail".to_owned(), ":memory:".to_owned()];
    if let Some(entry) = entry {
        args.push("-cmd".into());
        args.push(format!(".load {} {entry}", lib.display()));
    }
    args.push("-cmd".into());
    args.push(format!(".open '{db}'"));
    args.push(sql.into());
    let out = Command::new("sqlite3")
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn head(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()[..16].to_vec()
}

#[test]
fn as_the_default_new_databases_are_stores_and_plain_files_stay_plain() {
    if !have("sqlite3", &["--version"]) {
        eprintln!("SKIPPED: no sqlite3 CLI on PATH (apt-get install sqlite3)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let default = Some("sqlite3_onesync_default_init");
    let new = dir.path().join("app.db");
    let plain = dir.path().join("old.db");
    let attached = dir.path().join("side.db");
    let (ok, _, err) = cli(
        None,
        plain.to_str().unwrap(),
        "CREATE TABLE t(a); INSERT INTO t VALUES ('old');",
    );
    assert!(ok, "{err}");
    let plain_before = std::fs::read(&plain).unwrap();

    // No URI, no VFS name: a new database becomes a store.
    let (ok, out, err) = cli(
        default,
        new.to_str().unwrap(),
        &format!(
            "CREATE TABLE t(a); INSERT INTO t VALUES ('new'); \
             ATTACH '{}' AS side; CREATE TABLE side.s(b); INSERT INTO s VALUES (7); \
             SELECT a FROM t; SELECT b FROM s;",
            attached.display()
        ),
    );
    assert!(ok && err.is_empty(), "{err}");
    assert_eq!(out, "new\n7\n");
    assert_eq!(head(&new), STORE_MAGIC, "the new main database is a store");
    assert_eq!(head(&attached), SQLITE_MAGIC, "an ATTACHed new file is plain");
    // Reopened by name alone, it is the store again.
    let (ok, out, err) = cli(default, new.to_str().unwrap(), "SELECT a FROM t;");
    assert!(ok, "{err}");
    assert_eq!(out, "new\n");

    // An existing plain file is passed through, untouched by reads.
    let (ok, out, err) = cli(default, plain.to_str().unwrap(), "SELECT a FROM t;");
    assert!(ok && err.is_empty(), "{err}");
    assert_eq!(out, "old\n");
    assert_eq!(std::fs::read(&plain).unwrap(), plain_before);
    // ... and written as stock SQLite writes it, WAL mode included.
    let (ok, out, err) = cli(
        default,
        plain.to_str().unwrap(),
        "PRAGMA journal_mode=WAL; INSERT INTO t VALUES ('wal'); SELECT count(*) FROM t;",
    );
    assert!(ok && err.is_empty(), "{err}");
    assert_eq!(out, "wal\n2\n");
    assert_eq!(head(&plain), SQLITE_MAGIC);
    // Stock SQLite, no extension, reads both plain files.
    let (ok, out, err) = cli(
        None,
        plain.to_str().unwrap(),
        &format!(
            "PRAGMA integrity_check; SELECT count(*) FROM t; ATTACH '{}' AS side; SELECT b FROM s;",
            attached.display()
        ),
    );
    assert!(ok, "{err}");
    assert_eq!(out, "ok\n2\n7\n");
    // A URI naming the VFS still means a store: the plain file is refused, saying why.
    // (The CLI goes on after a failed `.open`: its error line is what tells.)
    let (_, _, err) = cli(
        default,
        &format!("file:{}?vfs=onesync", plain.display()),
        "SELECT 1;",
    );
    assert!(err.contains("plain SQLite database"), "{err}");
}

#[test]
fn refused_opens_write_only_the_applications_error_to_stderr() {
    if !have("sqlite3", &["--version"]) {
        eprintln!("SKIPPED: no sqlite3 CLI on PATH (apt-get install sqlite3)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.db");
    std::fs::write(&junk, "not a database, ".repeat(16)).unwrap();
    let plain = dir.path().join("plain.db");
    let (ok, _, err) = cli(None, plain.to_str().unwrap(), "CREATE TABLE t(a);");
    assert!(ok, "{err}");
    let init = Some("sqlite3_onesync_init");
    for (db, says) in [
        (&junk, "file is not a database"),
        (&plain, "plain SQLite database"),
        (&dir.path().join("no/such.db"), "does not exist"),
    ] {
        let (ok, _, err) = cli(
            init,
            &format!("file:{}?vfs=onesync", db.display()),
            "SELECT * FROM t;",
        );
        assert!(!ok, "{db:?}");
        let lines: Vec<&str> = err.lines().collect();
        // The CLI prints the application's error (sqlite3_errmsg); nothing else is written.
        assert!(
            lines.iter().all(|l| l.starts_with("Error:")),
            "{db:?}: only the CLI's own error lines:\n{err}"
        );
        assert!(err.contains(says), "{db:?}:\n{err}");
    }
}

#[test]
fn a_uri_passed_as_a_file_name_is_refused_not_created() {
    if !have("python3", &["-c", "import apsw"]) {
        eprintln!("SKIPPED: python3 with apsw not installed (pip install apsw)");
        return;
    }
    // apsw opens without SQLITE_OPEN_URI unless asked: the URI arrives as a file name.
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        r#"
import apsw, os
os.chdir({dir:?})
c = apsw.Connection(":memory:"); c.enable_load_extension(True)
c.load_extension({lib:?}, "sqlite3_onesync_default_init")
try:
    apsw.Connection("file:x.onesync?vfs=onesync").execute("SELECT 1").fetchall()
    print("opened")
except apsw.CantOpenError as e:
    print("refused:", e)
print(sorted(os.listdir(".")))
"#,
        dir = dir.path().display().to_string(),
        lib = cdylib().display().to_string(),
    );
    let out = Command::new("python3").arg("-c").arg(script).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("refused:") && stdout.contains("looks like a URI"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.trim_end().ends_with("[]"), "nothing created: {stdout}");
}
