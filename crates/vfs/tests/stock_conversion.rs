//! Converting between plain SQLite files and stores with the stock `sqlite3` CLI alone (the
//! README's commands): `.backup`, `VACUUM INTO` and `.restore` with a `vfs=onesync` URI
//! make stores; the same from a store to a plain name make plain files stock SQLite reads.

use std::path::Path;
use std::process::Command;

mod common;

use common::{cdylib, have};

const STORE_MAGIC: &[u8] = b"onesync store\0\r\n";
const SQLITE_MAGIC: &[u8] = b"SQLite format 3\0";

/// `sqlite3 DB [-cmd C]... SQL...`; asserts success with an empty stderr; returns stdout.
fn sqlite3(db: &str, cmds: &[String], args: &[&str]) -> String {
    let mut c = Command::new("sqlite3");
    c.arg(db);
    for cmd in cmds {
        c.arg("-cmd").arg(cmd);
    }
    let out = c.args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stderr.is_empty(), "{args:?}: {stderr}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn head(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()[..16].to_vec()
}

#[test]
fn stock_cli_converts_both_ways() {
    if !have("sqlite3", &["--version"]) {
        eprintln!("SKIPPED: no sqlite3 CLI on PATH (apt-get install sqlite3)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name);
    let s = |name: &str| p(name).display().to_string();
    let load = format!(".load {}", cdylib().with_extension("").display());
    let open_store = |name: &str| vec![load.clone(), format!(".open 'file:{}?vfs=onesync'", s(name))];
    sqlite3(
        &s("plain.db"),
        &[],
        &["CREATE TABLE t(a); INSERT INTO t VALUES (1), (2), (3);"],
    );
    // Plain -> store, three ways.
    sqlite3(
        &s("plain.db"),
        std::slice::from_ref(&load),
        &[&format!(".backup 'file:{}?vfs=onesync'", s("b.onesync"))],
    );
    sqlite3(
        &s("plain.db"),
        std::slice::from_ref(&load),
        &[&format!("VACUUM INTO 'file:{}?vfs=onesync'", s("v.onesync"))],
    );
    sqlite3(
        ":memory:",
        &open_store("r.onesync"),
        &[&format!(".restore {}", s("plain.db"))],
    );
    for store in ["b.onesync", "v.onesync", "r.onesync"] {
        assert_eq!(head(&p(store)), STORE_MAGIC, "{store}");
        let out = sqlite3(
            ":memory:",
            &open_store(store),
            &["PRAGMA integrity_check; SELECT sum(a) FROM t;"],
        );
        assert_eq!(out, "ok\n6\n", "{store}");
    }
    // Store -> plain, two ways; stock SQLite reads them without the extension.
    sqlite3(
        ":memory:",
        &open_store("b.onesync"),
        &[
            &format!(".backup {}", s("back.db")),
            &format!("VACUUM INTO '{}'", s("vacuumed.db")),
        ],
    );
    for plain in ["back.db", "vacuumed.db"] {
        assert_eq!(head(&p(plain)), SQLITE_MAGIC, "{plain}");
        let out = sqlite3(&s(plain), &[], &["PRAGMA integrity_check; SELECT sum(a) FROM t;"]);
        assert_eq!(out, "ok\n6\n", "{plain}");
    }
}
