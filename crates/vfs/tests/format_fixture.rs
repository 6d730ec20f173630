//! Users' stores outlive the code that wrote them: every store file checked in under
//! `tests/fixtures/` (one per format version, `store-format-vN.onesync`) must still open
//! through the `onesync` VFS, pass `integrity_check`, hold exactly what its script wrote, and
//! take new commits. A format change that cannot read an old file fails here.
//!
//! Each fixture is a SQLite database (a main and an ATTACHed logical database) written by
//! [`SCRIPT`] into a small store that checkpoints every few commits, copied while its
//! connection was still open: what a crash leaves, with commit records after the last
//! checkpoint for recovery to replay. A fixture for the current [`FORMAT_VERSION`] must
//! exist; when the version changes, write the new one (keep the old ones) with
//!
//! ```sh
//! ONESYNC_WRITE_FIXTURE=1 cargo test -p onesync-vfs --test format_fixture
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;

use onesync_store::{Error as StoreError, Options, Store, FORMAT_VERSION};
use onesync_vfs::{
    api_table_from_sys, register_static, register_with, RegisterOptions, StoreFactory, StoreOpener, VFS_NAME,
};
use rusqlite::{Connection, OpenFlags};

/// The fixture's contents, statement by statement (each its own transaction unless it says
/// BEGIN): a table with an index and rows of varied sizes, small updates (changes that ride
/// in the commit record), deletes, and transactions across both logical databases. Never
/// edit it: the checked-in fixtures were written by it.
const SCRIPT: &[&str] = &[
    "CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT NOT NULL, payload BLOB)",
    "CREATE INDEX t_name ON t(name)",
    "CREATE TABLE aux.a(k TEXT PRIMARY KEY, v INTEGER) WITHOUT ROWID",
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 150)
     INSERT INTO t SELECT i, printf('row-%05d', i), printf('%.*c', 100 + i % 300, char(65 + i % 26)) FROM n",
    "WITH RECURSIVE n(i) AS (SELECT 151 UNION ALL SELECT i + 1 FROM n WHERE i < 300)
     INSERT INTO t SELECT i, printf('row-%05d', i), printf('%.*c', 100 + i % 300, char(97 + i % 26)) FROM n",
    "UPDATE t SET name = name || '!' WHERE id % 7 = 0",
    "DELETE FROM t WHERE id % 11 = 0",
    "BEGIN; INSERT INTO aux.a SELECT name, id FROM t WHERE id <= 40; UPDATE t SET payload = NULL WHERE id <= 40; COMMIT",
    "UPDATE aux.a SET v = v * 2 WHERE v % 3 = 0",
    "INSERT INTO t VALUES (1000, 'last', x'00ff00ff')",
    "UPDATE t SET name = 'last!' WHERE id = 1000",
];

/// Commits between checkpoints in the store the fixture is written to.
const FIXTURE_CHECKPOINT_INTERVAL: u64 = 4;
/// The VFS that writes fixtures: `onesync` with a small store.
const FIXTURE_VFS: &str = "onesync-fixture";

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn fixture_path(version: u32) -> PathBuf {
    fixtures_dir().join(format!("store-format-v{version}.onesync"))
}

/// Every checked-in fixture with the version its header names.
fn fixtures() -> Vec<(u32, PathBuf)> {
    let mut all: Vec<(u32, PathBuf)> = std::fs::read_dir(fixtures_dir())
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "onesync"))
                .map(|p| {
                    let bytes = std::fs::read(&p).unwrap();
                    let version = u32::from_le_bytes(bytes[16..20].try_into().unwrap());
                    (version, p)
                })
                .collect()
        })
        .unwrap_or_default();
    all.sort();
    all
}

/// What [`SCRIPT`] leaves, per table, as stock SQLite computes it on in-memory databases.
fn expected() -> Vec<String> {
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch("ATTACH ':memory:' AS aux").unwrap();
    for sql in SCRIPT {
        conn.execute_batch(sql).unwrap();
    }
    contents(&conn)
}

/// Every row of both tables, one string each.
fn contents(conn: &Connection) -> Vec<String> {
    let mut rows = Vec::new();
    for sql in [
        "SELECT id, name, quote(payload) FROM main.t ORDER BY id",
        "SELECT k, v, NULL FROM aux.a ORDER BY k",
    ] {
        let mut stmt = conn.prepare(sql).unwrap();
        let mut q = stmt.query([]).unwrap();
        while let Some(r) = q.next().unwrap() {
            let cols: Vec<String> = (0..3).map(|i| format!("{:?}", r.get_ref(i).unwrap())).collect();
            rows.push(cols.join("|"));
        }
    }
    rows
}

fn check_integrity(conn: &Connection) {
    for schema in ["main", "aux"] {
        let verdict: String = conn
            .query_row(&format!("PRAGMA {schema}.integrity_check"), [], |r| r.get(0))
            .unwrap();
        assert_eq!(verdict, "ok", "{schema}");
    }
}

fn stat(conn: &Connection, name: &str) -> u64 {
    let json: String = conn.query_row("PRAGMA onesync_stats", [], |r| r.get(0)).unwrap();
    let stats: serde_json::Value = serde_json::from_str(&json).unwrap();
    stats[name].as_u64().unwrap_or_else(|| panic!("{name} in {json}"))
}

/// Opens `path` through the stock `onesync` VFS, with the aux database ATTACHed.
fn open_stock(path: &Path, read_only: bool) -> Connection {
    register_static(&api_table_from_sys!(rusqlite::ffi)).unwrap();
    let flags = if read_only {
        OpenFlags::SQLITE_OPEN_READ_ONLY
    } else {
        OpenFlags::SQLITE_OPEN_READ_WRITE
    };
    let conn = Connection::open_with_flags_and_vfs(path, flags | OpenFlags::SQLITE_OPEN_URI, VFS_NAME)
        .unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
    let aux = format!("file:{}?vfs={VFS_NAME}&db=aux", path.display());
    conn.execute("ATTACH ?1 AS aux", [aux]).unwrap();
    conn
}

#[test]
fn every_checked_in_store_opens_and_holds_what_its_script_wrote() {
    let all = fixtures();
    assert!(
        all.iter().any(|(v, _)| *v == FORMAT_VERSION),
        "no store of format version {FORMAT_VERSION} under {} (write one: see this file's header)",
        fixtures_dir().display()
    );
    let want = expected();
    for (version, fixture) in all {
        assert_eq!(
            fixture,
            fixture_path(version),
            "a fixture's name and header disagree"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("copy.onesync");
        std::fs::copy(&fixture, &path).unwrap();

        let ro = open_stock(&path, true);
        check_integrity(&ro);
        assert_eq!(contents(&ro), want, "v{version} read-only");
        assert!(ro.execute("INSERT INTO t VALUES (2000, 'x', NULL)", []).is_err());
        drop(ro);
        assert_eq!(
            std::fs::read(&path).unwrap(),
            std::fs::read(&fixture).unwrap(),
            "a read-only open wrote"
        );

        let rw = open_stock(&path, false);
        assert!(
            stat(&rw, "records_replayed") > 0,
            "v{version}: nothing after the checkpoint was replayed"
        );
        assert_eq!(contents(&rw), want, "v{version} read-write");
        rw.execute_batch("INSERT INTO t VALUES (2000, 'new', x'01'); INSERT INTO aux.a VALUES ('new', 1)")
            .unwrap();
        drop(rw);
        // The last connection's close checkpoints: a store of an older version is migrated
        // then, both header copies naming the current format.
        let bytes = std::fs::read(&path).unwrap();
        for copy in [0usize, 4096] {
            let found = u32::from_le_bytes(bytes[copy + 16..copy + 20].try_into().unwrap());
            assert_eq!(
                found, FORMAT_VERSION,
                "v{version}: header copy at {copy} after a write and close"
            );
        }

        let again = open_stock(&path, false);
        check_integrity(&again);
        let rows = contents(&again);
        assert_eq!(
            rows.len(),
            want.len() + 2,
            "v{version}: the new commits after a reopen"
        );
    }
}

/// Writes the fixture of the current format version when `ONESYNC_WRITE_FIXTURE=1` and it
/// does not exist yet; otherwise checks that the writer still produces what [`SCRIPT`] says
/// (so a fixture written later is right), in a temporary directory.
#[test]
fn the_fixture_writer_writes_what_the_script_says() {
    let target = fixture_path(FORMAT_VERSION);
    let write = std::env::var("ONESYNC_WRITE_FIXTURE").is_ok_and(|v| v == "1") && !target.exists();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fixture.onesync");
    let conn = open_fixture_writer(&path);
    let aux = format!("file:{}?vfs={FIXTURE_VFS}&db=aux", path.display());
    conn.execute("ATTACH ?1 AS aux", [aux]).unwrap();
    for sql in SCRIPT {
        conn.execute_batch(sql).unwrap();
    }
    assert_eq!(contents(&conn), expected());
    assert!(stat(&conn, "checkpoints") >= 2, "the script crosses checkpoints");
    // Copied while the connection is open: what a crash leaves (every commit durable).
    let image = std::fs::read(&path).unwrap();
    drop(conn);
    if write {
        std::fs::create_dir_all(fixtures_dir()).unwrap();
        std::fs::write(&target, &image).unwrap();
        eprintln!("wrote {} ({} bytes)", target.display(), image.len());
    }
}

fn open_fixture_writer(path: &Path) -> Connection {
    let api = api_table_from_sys!(rusqlite::ffi);
    let opener: StoreOpener = Arc::new(|path: &Path, opts: &Options, create: bool| {
        let opts = Options {
            checkpoint_interval: FIXTURE_CHECKPOINT_INTERVAL,
            initial_capacity: 256 << 10,
            growth_step: 256 << 10,
            window_bytes: 64 << 10,
            ..opts.clone()
        };
        match Store::open(path, &opts) {
            Err(StoreError::NotFound(_)) if create => Store::create(path, &opts),
            other => other,
        }
    });
    // Registering twice (tests in one process) is refused as a duplicate name: fine.
    let _ = register_with(
        &api,
        RegisterOptions {
            name: FIXTURE_VFS.to_owned(),
            make_default: false,
            main_db: Box::new(StoreFactory::with_opener(api, opener)),
            memory_journals: true,
            files: None,
        },
    );
    Connection::open_with_flags_and_vfs(path, OpenFlags::default(), FIXTURE_VFS).unwrap()
}
