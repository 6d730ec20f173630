//! The `onesync` command run as a user would, on real files: every subcommand, its
//! refusals (missing file, wrong kind, existing destination), `--help`, and a reader that
//! stops early (a broken pipe).

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use rusqlite::Connection;

/// Runs the `onesync` binary of this build.
fn onesync(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_onesync"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the onesync binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Succeeded, said nothing on stderr; returns stdout.
fn succeeds(output: &Output) -> String {
    assert!(
        output.status.success() && output.stderr.is_empty(),
        "{}\n{}\n{}",
        output.status,
        text(&output.stdout),
        text(&output.stderr)
    );
    text(&output.stdout)
}

/// Exited 1 with one line `onesync: error: ...` that mentions `needle`, and did not panic.
fn fails_saying(output: &Output, needle: &str) {
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "should have failed: {stderr}");
    assert!(stderr.starts_with("onesync: error: "), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "not one line: {stderr}");
    assert!(stderr.contains(needle), "expected {needle:?} in: {stderr}");
}

fn s(path: &Path) -> &str {
    path.to_str().expect("temporary paths are UTF-8")
}

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// A plain SQLite database with a table, an index and rows over several pages.
fn make_plain_db(path: &Path, page_size: u32, wal: bool) {
    let conn = Connection::open(path).unwrap();
    conn.execute_batch(&format!(
        "PRAGMA page_size = {page_size};
         CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT);
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000)
         INSERT INTO t SELECT i, hex(randomblob(40)) FROM n;
         CREATE INDEX t_b ON t(b);"
    ))
    .unwrap();
    if wal {
        conn.execute_batch("PRAGMA journal_mode = WAL; INSERT INTO t(b) VALUES ('in wal');")
            .unwrap();
    }
    drop(conn);
    for suffix in ["-wal", "-shm", "-journal"] {
        assert!(!sibling(path, suffix).exists(), "SQLite left {suffix} behind");
    }
}

/// The rows of `t` and the page size of a plain SQLite file.
fn contents(plain: &Path) -> (Vec<(i64, String)>, i64) {
    let conn = Connection::open(plain).unwrap();
    let rows = conn
        .prepare("SELECT a, b FROM t ORDER BY a")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<Vec<_>>>()
        .unwrap();
    let page_size = conn.query_row("PRAGMA page_size", [], |r| r.get(0)).unwrap();
    (rows, page_size)
}

fn magic(path: &Path) -> Vec<u8> {
    fs::read(path).unwrap()[..16].to_vec()
}

#[test]
fn import_check_info_export_keep_every_row_for_several_page_sizes() {
    let dir = tempfile::tempdir().unwrap();
    for page_size in [512, 4096, 65536] {
        let plain = dir.path().join(format!("plain {page_size} #?.db"));
        let store = dir.path().join(format!("store {page_size} #?.onesync"));
        let back = dir.path().join(format!("back-{page_size}.db"));
        make_plain_db(&plain, page_size, false);
        let said = succeeds(&onesync(&["import", s(&plain), s(&store)]));
        assert!(said.contains("integrity_check ok"), "{said}");
        assert_eq!(magic(&store), b"onesync store\0\r\n");

        let said = succeeds(&onesync(&["check", s(&store)]));
        assert!(said.starts_with("integrity_check: ok\n"), "{said}");
        assert!(said.contains("\"last_seq\""), "{said}");
        let said = succeeds(&onesync(&["info", s(&store)]));
        assert!(said.contains("kind: onesync store"), "{said}");
        assert!(
            said.contains(&format!("SQLite page size: {page_size} bytes")),
            "{said}"
        );
        assert!(said.contains("tables: 1\n  t: 3000 rows\n"), "{said}");
        let said = succeeds(&onesync(&["info", s(&plain)]));
        assert!(said.contains("kind: plain SQLite database"), "{said}");
        assert!(said.contains("  t: 3000 rows\n"), "{said}");

        let said = succeeds(&onesync(&["export", s(&store), s(&back)]));
        assert!(said.contains("integrity_check ok"), "{said}");
        assert_eq!(magic(&back), b"SQLite format 3\0");
        assert!(
            contents(&back) == contents(&plain),
            "page size {page_size}: the round trip changed the rows or the page size"
        );
    }
}

/// A WAL-mode file with no -wal beside it is read as it is (`immutable`: no -shm made) and
/// becomes a store in rollback-journal mode.
#[test]
fn a_wal_mode_file_is_imported_in_rollback_mode() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("wal.db");
    let store = dir.path().join("wal.onesync");
    let back = dir.path().join("back.db");
    make_plain_db(&plain, 4096, true);
    assert_eq!(fs::read(&plain).unwrap()[18..20], [2, 2], "not in WAL mode");
    succeeds(&onesync(&["import", s(&plain), s(&store)]));
    assert!(!sibling(&plain, "-shm").exists(), "import made a -shm");
    assert!(!sibling(&plain, "-wal").exists(), "import made a -wal");
    succeeds(&onesync(&["info", s(&plain)]));
    assert!(!sibling(&plain, "-shm").exists(), "info made a -shm");
    succeeds(&onesync(&["export", s(&store), s(&back)]));
    assert_eq!(fs::read(&back).unwrap()[18..20], [1, 1]);
    assert!(contents(&back) == contents(&plain), "the rows changed");
}

/// `salvage` copies every logical file of a readable store into a new store. (A store whose
/// chain has a read error is salvaged up to it: the store's own test,
/// `a_read_error_in_the_chain_fails_safe_and_can_be_salvaged`, covers the cut-off.)
#[test]
fn salvage_copies_a_readable_store_and_never_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain.db");
    let store = dir.path().join("store.onesync");
    let copy = dir.path().join("copy.onesync");
    let back = dir.path().join("back.db");
    let back_copy = dir.path().join("back-copy.db");
    make_plain_db(&plain, 4096, false);
    succeeds(&onesync(&["import", s(&plain), s(&store)]));
    let said = succeeds(&onesync(&["salvage", s(&store), s(&copy)]));
    assert!(said.contains("salvaged 1 logical file(s)"), "{said}");
    assert!(said.contains("nothing was lost"), "{said}");
    succeeds(&onesync(&["export", s(&store), s(&back)]));
    succeeds(&onesync(&["export", s(&copy), s(&back_copy)]));
    let (original, copied) = (fs::read(&back).unwrap(), fs::read(&back_copy).unwrap());
    // The backup API bumps the file change counter (bytes 24..28) of what it writes.
    assert!(
        original[..24] == copied[..24] && original[28..] == copied[28..],
        "the salvaged copy holds other bytes"
    );
    fails_saying(&onesync(&["salvage", s(&store), s(&copy)]), "already exists");
    fails_saying(
        &onesync(&["salvage", s(&plain), s(&sibling(&copy, "2"))]),
        "is a plain SQLite database; onesync salvage needs a onesync store",
    );
}

#[test]
fn refusals_say_why_in_one_line_and_create_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain.db");
    let store = dir.path().join("store.onesync");
    make_plain_db(&plain, 4096, false);
    succeeds(&onesync(&["import", s(&plain), s(&store)]));
    let plain_before = fs::read(&plain).unwrap();
    let store_before = fs::read(&store).unwrap();
    let new = dir.path().join("new");

    // Never overwrite, a dangling symlink included.
    fails_saying(&onesync(&["import", s(&plain), s(&store)]), "already exists");
    fails_saying(&onesync(&["export", s(&store), s(&plain)]), "never overwrites");
    let dangling = dir.path().join("dangling");
    std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
    fails_saying(&onesync(&["export", s(&store), s(&dangling)]), "already exists");
    assert!(!dir.path().join("nowhere").exists());
    // Wrong kinds of file.
    let text_file = dir.path().join("notes.txt");
    fs::write(&text_file, "SQLite format 2 and then some words").unwrap();
    let empty = dir.path().join("empty");
    fs::write(&empty, b"").unwrap();
    fails_saying(
        &onesync(&["import", s(&text_file), s(&new)]),
        "is neither a SQLite database nor a onesync store; onesync import needs a plain SQLite database",
    );
    fails_saying(
        &onesync(&["import", s(&store), s(&new)]),
        "is a onesync store; onesync import needs a plain SQLite database",
    );
    fails_saying(
        &onesync(&["export", s(&plain), s(&new)]),
        "is a plain SQLite database; onesync export needs a onesync store",
    );
    fails_saying(
        &onesync(&["check", s(&plain)]),
        "onesync check needs a onesync store",
    );
    fails_saying(&onesync(&["export", s(&empty), s(&new)]), "is an empty file");
    // Missing files.
    for args in [
        vec!["import", "missing.db", s(&new)],
        vec!["export", "missing.onesync", s(&new)],
        vec!["check", "missing.onesync"],
        vec!["info", "missing.db"],
        vec!["salvage", "missing.onesync", s(&new)],
    ] {
        let mut args = args.clone();
        let missing = dir.path().join(args[1]);
        args[1] = s(&missing);
        fails_saying(&onesync(&args), "does not exist");
    }
    // A journal SQLite has not dealt with.
    for suffix in ["-journal", "-wal"] {
        let journal = sibling(&plain, suffix);
        fs::write(&journal, b"").unwrap();
        fails_saying(
            &onesync(&["import", s(&plain), s(&new)]),
            "open it once with sqlite3",
        );
        fs::remove_file(&journal).unwrap();
    }
    assert!(!new.exists(), "a refused command left {} behind", new.display());
    assert!(
        fs::read(&plain).unwrap() == plain_before,
        "a refusal changed plain.db"
    );
    assert!(
        fs::read(&store).unwrap() == store_before,
        "a refusal changed the store"
    );
}

#[test]
fn info_tells_empty_and_other_files_apart() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    fs::write(&empty, b"").unwrap();
    let other = dir.path().join("notes.txt");
    fs::write(&other, "hello").unwrap();
    let said = succeeds(&onesync(&["info", s(&empty)]));
    assert!(
        said.contains("size: 0 bytes") && said.ends_with("kind: empty file\n"),
        "{said}"
    );
    let said = succeeds(&onesync(&["info", s(&other)]));
    assert!(
        said.ends_with("kind: not a SQLite database nor a onesync store\n"),
        "{said}"
    );
}

#[test]
fn help_is_plain_text_naming_every_subcommand() {
    let help = succeeds(&onesync(&["--help"]));
    print!("{help}");
    assert!(
        help.starts_with("Convert between plain SQLite files and onesync stores"),
        "{help}"
    );
    assert!(help.contains("Usage: onesync <COMMAND>"), "{help}");
    for command in ["import", "export", "check", "info", "salvage"] {
        assert!(help.contains(&format!("\n  {command} ")), "{command} in {help}");
        let sub = succeeds(&onesync(&[command, "--help"]));
        assert!(sub.contains(&format!("Usage: onesync {command} ")), "{sub}");
    }
    assert!(!help.contains('\x1b'), "escape codes in {help:?}");
    // Usage errors are clap's: status 2, the usage on stderr.
    let out = onesync(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("Usage: onesync"),
        "{}",
        text(&out.stderr)
    );
}

/// `onesync info x.db | head -1`: the reader leaves after one line; the command ends quietly
/// (status 141, as a program killed by SIGPIPE) instead of panicking. Its output (5000
/// tables, a line each) is more than a pipe holds, so it is still writing when the reader
/// leaves, whenever that is.
#[test]
fn a_reader_that_stops_early_ends_the_command_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("many tables.db");
    let conn = Connection::open(&plain).unwrap();
    let mut sql = String::from("BEGIN;");
    for i in 0..5000 {
        sql.push_str(&format!("CREATE TABLE table_with_a_long_name_{i:05}(x);"));
    }
    sql.push_str("COMMIT;");
    conn.execute_batch(&sql).unwrap();
    drop(conn);

    let mut child = Command::new(env!("CARGO_BIN_EXE_onesync"))
        .args(["info", s(&plain)])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("file: "), "{first}");
    // The reader is dropped here: the pipe's read end is closed.
    let out = child.wait_with_output().unwrap();
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(141), "{}", out.status);
}

/// The libonesync.so of this build, next to the onesync binary.
fn extension_path() -> Option<PathBuf> {
    let so = Path::new(env!("CARGO_BIN_EXE_onesync")).with_file_name("libonesync.so");
    so.exists().then_some(so)
}

fn sqlite3_cli(args: &[&str]) -> Option<Output> {
    Command::new("sqlite3").args(args).output().ok()
}

#[test]
fn the_stock_sqlite3_cli_reads_and_writes_an_imported_store() {
    let Some(so) = extension_path() else {
        eprintln!("SKIP: no libonesync.so next to the onesync binary (cargo build --release)");
        return;
    };
    if sqlite3_cli(&["-version"]).is_none() {
        eprintln!("SKIP: no sqlite3 command (apt-get install sqlite3)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain.db");
    let store = dir.path().join("store.onesync");
    let back = dir.path().join("back.db");
    make_plain_db(&plain, 4096, false);
    succeeds(&onesync(&["import", s(&plain), s(&store)]));
    let load = format!(".load {}", s(&so.with_extension("")));
    let open = format!(".open 'file:{}?vfs=onesync'", s(&store));
    let output = sqlite3_cli(&[
        ":memory:",
        "-cmd",
        &load,
        "-cmd",
        &open,
        "PRAGMA integrity_check; INSERT INTO t(b) VALUES ('from the cli'); SELECT count(*) FROM t;",
    ])
    .unwrap();
    assert_eq!(succeeds(&output), "ok\n3001\n");
    succeeds(&onesync(&["export", s(&store), s(&back)]));
    let output = sqlite3_cli(&[
        s(&back),
        "PRAGMA integrity_check; SELECT b FROM t WHERE a = 3001;",
    ])
    .unwrap();
    assert_eq!(succeeds(&output), "ok\nfrom the cli\n");
    let (mut exported, _) = contents(&back);
    exported.pop();
    assert!(
        exported == contents(&plain).0,
        "the rows the CLI did not touch changed"
    );
}
