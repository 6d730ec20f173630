//! `onesync::open` refuses what the URI form `file:PATH?vfs=onesync` refuses, with the same
//! reason SQLite gives for it, opens what it opens (an empty file becomes a store, as SQLite
//! treats an empty file as a new database), and takes a URI as SQLite does.

use std::path::Path;

use rusqlite::{Connection, ErrorCode};

const STORE_MAGIC: &[u8; 16] = b"onesync store\0\r\n";

fn open_error(path: impl AsRef<Path>) -> rusqlite::Error {
    match onesync::open(path.as_ref()) {
        Ok(_) => panic!("{} opened", path.as_ref().display()),
        Err(onesync::Error::Sqlite(e)) => e,
        Err(e) => panic!("not SQLite's error: {e}"),
    }
}

/// The error of the URI form, through rusqlite's own open (the VFS registered first).
fn uri_error(path: &Path) -> rusqlite::Error {
    let _ = onesync::open(tempfile::tempdir().unwrap().path().join("registers.onesync"));
    match Connection::open(format!("file:{}?vfs=onesync", path.display())) {
        Ok(_) => panic!("{} opened", path.display()),
        Err(e) => e,
    }
}

fn code(e: &rusqlite::Error) -> ErrorCode {
    e.sqlite_error_code().expect("a SQLite error")
}

/// The two errors agree on the code and the reason.
fn assert_same_refusal(path: &Path, reason: &str) {
    let (opened, uri) = (open_error(path), uri_error(path));
    assert!(opened.to_string().contains(reason), "{opened}");
    assert_eq!(opened.to_string(), uri.to_string());
    assert_eq!(code(&opened), code(&uri));
    assert_eq!(code(&opened), ErrorCode::CannotOpen);
}

#[test]
fn a_directory_is_refused_with_the_uri_forms_reason() {
    let dir = tempfile::tempdir().unwrap();
    assert_same_refusal(
        dir.path(),
        &format!("onesync: {} is a directory", dir.path().display()),
    );
}

#[test]
fn a_missing_directory_is_refused_with_the_uri_forms_reason() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nodir").join("x.onesync");
    assert_same_refusal(
        &path,
        &format!(
            "onesync: cannot create {}: the directory {} does not exist",
            path.display(),
            dir.path().join("nodir").display()
        ),
    );
    assert!(!dir.path().join("nodir").exists());
}

#[test]
fn a_plain_sqlite_file_is_refused_with_the_uri_forms_reason() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain.db");
    Connection::open(&plain)
        .unwrap()
        .execute_batch("CREATE TABLE t(x)")
        .unwrap();
    let (opened, uri) = (open_error(&plain), uri_error(&plain));
    assert!(opened.to_string().contains("plain SQLite database"), "{opened}");
    assert_eq!(opened.to_string(), uri.to_string());
    assert_eq!(code(&opened), ErrorCode::NotADatabase);
}

#[test]
fn an_empty_file_becomes_a_store_as_through_the_uri() {
    let dir = tempfile::tempdir().unwrap();
    for (name, through_uri) in [("by-open.db", false), ("by-uri.db", true)] {
        let path = dir.path().join(name);
        std::fs::write(&path, b"").unwrap();
        let db = if through_uri {
            let _ = onesync::open(dir.path().join("registers.onesync"));
            Connection::open(format!("file:{}?vfs=onesync", path.display())).unwrap()
        } else {
            onesync::open(&path).unwrap()
        };
        db.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1)")
            .unwrap();
        drop(db);
        assert_eq!(&std::fs::read(&path).unwrap()[..16], STORE_MAGIC, "{name}");
    }
}

#[test]
fn a_uri_is_opened_as_a_uri() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a b#1.onesync");
    let encoded = dir.path().join("a%20b%231.onesync");
    // Naming the VFS, naming none (it is added), with a parameter of onesync's.
    for uri in [
        format!("file:{}?vfs=onesync", encoded.display()),
        format!("file:{}", encoded.display()),
        format!("file:{}?onesync_sync_interval_ms=5", encoded.display()),
    ] {
        let db = onesync::open(&uri).unwrap();
        db.execute_batch("CREATE TABLE IF NOT EXISTS t(x); INSERT INTO t VALUES (1)")
            .unwrap();
        drop(db);
        assert_eq!(&std::fs::read(&path).unwrap()[..16], STORE_MAGIC, "{uri}");
    }
    let interval: String = onesync::open(format!("file:{}?onesync_sync_interval_ms=5", encoded.display()))
        .unwrap()
        .query_row("PRAGMA onesync_sync_interval_ms", [], |r| r.get(0))
        .unwrap();
    assert_eq!(interval, "5");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "nothing else created"
    );
    // A bad parameter gets the URI form's reason.
    let bad = open_error(format!("file:{}?onesync_sync_interval_ms=x", encoded.display()));
    assert!(bad.to_string().contains("onesync_sync_interval_ms"), "{bad}");
    // Another VFS: refused, nothing created.
    let other = dir.path().join("other.db");
    let refused = open_error(format!("file:{}?vfs=unix", other.display()));
    assert_eq!(code(&refused), ErrorCode::CannotOpen);
    assert!(
        refused.to_string().contains("names the VFS \"unix\""),
        "{refused}"
    );
    assert!(!other.exists());
}

#[test]
fn a_path_needing_escapes_is_one_file_of_that_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x %41?y=1#z&vfs=unix.onesync");
    onesync::open(&path)
        .unwrap()
        .execute_batch("CREATE TABLE t(x)")
        .unwrap();
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, [path.file_name().unwrap()]);
    assert_eq!(&std::fs::read(&path).unwrap()[..16], STORE_MAGIC);
}
