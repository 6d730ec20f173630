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

/// The CLI with `script` on its standard input, after loading the extension with `entry`
/// (none: stock SQLite); returns (stdout, stderr).
fn cli_script(entry: Option<&str>, dir: &Path, script: &str) -> (String, String) {
    let lib = cdylib().with_extension("");
    let mut args = vec![":memory:".to_owned()];
    if let Some(entry) = entry {
        args.push("-cmd".into());
        args.push(format!(".load {} {entry}", lib.display()));
    }
    let mut child = Command::new("sqlite3")
        .args(&args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(script.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What stock SQLite and onesync as the default VFS print for `script`, each in a fresh
/// directory.
fn stock_and_onesync(script: &str) -> [(String, String); 2] {
    [None, Some("sqlite3_onesync_default_init")].map(|entry| {
        let dir = tempfile::tempdir().unwrap();
        cli_script(entry, dir.path(), script)
    })
}

/// A database in a missing directory fails at open, and an ATTACH of one names the file, as
/// stock SQLite says (SQLite's TCL suite: `oserror-1.3.1`, `attach3-11.0`).
#[test]
fn a_missing_directory_fails_as_in_stock_sqlite() {
    if !have("sqlite3", &["--version"]) {
        eprintln!("SKIPPED: no sqlite3 CLI on PATH (apt-get install sqlite3)");
        return;
    }
    let script =
        ".open /onesync-no-such-dir/x.db\n.open main.db\nATTACH '/onesync-no-such-dir/nofile.x' AS a;\n";
    let [stock, onesync] = stock_and_onesync(script);
    assert!(
        stock
            .1
            .contains("unable to open database: /onesync-no-such-dir/nofile.x"),
        "{stock:?}"
    );
    assert_eq!(onesync, stock);
}

/// An empty file another connection has open as a plain database (an ATTACH of a new file
/// creates it empty) stays that plain file when a second connection opens it as its main
/// database: what the second writes, the first reads, and writes in turn (SQLite's TCL
/// suite: `temptrigger-6.2`). It was once made a store by a rename, under the first
/// connection, whose writes then went to a file nobody opened.
#[test]
fn an_empty_file_another_connection_has_open_stays_that_plain_file() {
    if !have("sqlite3", &["--version"]) {
        eprintln!("SKIPPED: no sqlite3 CLI on PATH (apt-get install sqlite3)");
        return;
    }
    let script = "ATTACH 'side.db' AS aux;\n.connection 1\n.open side.db\nCREATE TABLE t1(a, b, c);\n\
                  .connection 0\nSELECT name FROM aux.sqlite_master;\nINSERT INTO aux.t1 VALUES (1, 2, 3);\n\
                  .connection 1\nSELECT * FROM t1;\n";
    let [stock, onesync] = stock_and_onesync(script);
    assert_eq!(stock, ("t1\n1|2|3\n".to_owned(), String::new()));
    assert_eq!(onesync, stock);
}

/// A store renamed while open takes no more writes, as the unix VFS makes SQLite refuse them
/// for a plain file: they would go to a file nobody opens by that name (SQLite's TCL suite:
/// `pager4-1.3`); renamed back, it takes them again.
#[test]
fn a_store_renamed_while_open_takes_no_more_writes() {
    if !have("sqlite3", &["--version"]) {
        eprintln!("SKIPPED: no sqlite3 CLI on PATH (apt-get install sqlite3)");
        return;
    }
    let script = ".open app.db\nCREATE TABLE t(a); INSERT INTO t VALUES (1);\n.shell mv app.db moved.db\n\
                  INSERT INTO t VALUES (2);\nSELECT count(*) FROM t;\n.shell mv moved.db app.db\n\
                  INSERT INTO t VALUES (3);\nSELECT group_concat(a) FROM t;\n";
    let [stock, onesync] = stock_and_onesync(script);
    assert!(
        stock.1.contains("attempt to write a readonly database"),
        "{stock:?}"
    );
    assert_eq!(stock.0, "1\n1,3\n", "renamed back, it takes writes again");
    assert_eq!(onesync, stock);
}

/// `nolock=1` (SQLite calls neither xLock nor xUnlock) on a store: writes commit, and a later
/// connection reads them (SQLite's TCL suite: `nolock-1.2`, once "disk I/O error").
#[test]
fn a_store_opened_with_nolock_takes_writes() {
    if !have("sqlite3", &["--version"]) {
        eprintln!("SKIPPED: no sqlite3 CLI on PATH (apt-get install sqlite3)");
        return;
    }
    let script = ".open file:app.db?nolock=1\nCREATE TABLE t(a); INSERT INTO t VALUES (1);\n\
                  BEGIN; INSERT INTO t VALUES (2); ROLLBACK;\nINSERT INTO t VALUES (3);\n\
                  SELECT group_concat(a) FROM t;\n.open app.db\nSELECT group_concat(a) FROM t;\n";
    let [stock, onesync] = stock_and_onesync(script);
    assert_eq!(stock, ("1,3\n1,3\n".to_owned(), String::new()));
    assert_eq!(onesync, stock);
}
