//! The static path: a host that links its own SQLite (here rusqlite's bundled
//! one) fills the API table from it and registers the VFS, no extension
//! loading involved.

use std::path::Path;

use onesync_vfs::{api_table_from_sys, register_static, stats, ApiTable, Registered, Stats, VFS_NAME};
use rusqlite::{Connection, OpenFlags};

fn api() -> ApiTable {
    api_table_from_sys!(rusqlite::ffi)
}

/// Registers once per process (tests run in parallel and share the VFS).
fn registered() -> ApiTable {
    let api = api();
    let outcome = register_static(&api).expect("register onesync");
    assert!(matches!(outcome, Registered::New | Registered::AlreadyRegistered));
    api
}

fn now(api: &ApiTable) -> Stats {
    stats(api, VFS_NAME).expect("onesync is registered by this crate")
}

fn open(path: &Path) -> Connection {
    Connection::open_with_flags_and_vfs(path, OpenFlags::default(), VFS_NAME).expect("open via onesync")
}

/// The pass-through main-db backend under its own name: the journal
/// behaviour these tests check is the VFS's, whatever serves the database.
const PASSTHROUGH: &str = "onesync-passthrough";

fn passthrough() -> ApiTable {
    let api = registered();
    let opts = onesync_vfs::RegisterOptions {
        name: PASSTHROUGH.to_owned(),
        make_default: false,
        main_db: Box::new(onesync_vfs::PassThroughFactory),
        memory_journals: true,
        files: None,
    };
    onesync_vfs::register_with(&api, opts).expect("register pass-through");
    api
}

fn now_pt(api: &ApiTable) -> Stats {
    stats(api, PASSTHROUGH).expect("registered by this crate")
}

fn open_pt(path: &Path) -> Connection {
    Connection::open_with_flags_and_vfs(path, OpenFlags::default(), PASSTHROUGH)
        .expect("open via pass-through")
}

/// Files in `dir`, leaving out a store's side file (present while the store is open, like
/// WAL's -shm; these tests are about journals).
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with("-onesync-shm"))
        .collect();
    v.sort();
    v
}

#[test]
fn registration_is_idempotent_and_not_default() {
    let api = registered();
    assert_eq!(register_static(&api), Ok(Registered::AlreadyRegistered));
    // The default VFS is still SQLite's own.
    // SAFETY: test-only: asks the bundled SQLite for its default VFS.
    let default = unsafe { rusqlite::ffi::sqlite3_vfs_find(std::ptr::null()) };
    // SAFETY: the default VFS is a live, registered VFS with a NUL-terminated name.
    let name = unsafe { std::ffi::CStr::from_ptr((*default).zName) };
    assert_eq!(name.to_str().unwrap(), "unix");
}

#[test]
fn rollback_journal_is_in_memory_and_rollback_works() {
    let api = passthrough();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.db");
    let conn = open_pt(&path);
    conn.execute_batch("CREATE TABLE t(a)").unwrap();
    let before = now_pt(&api);

    conn.execute_batch("BEGIN; INSERT INTO t VALUES (1), (2), (3);")
        .unwrap();
    let during = names(dir.path());
    let mid = now_pt(&api);
    conn.execute_batch("ROLLBACK").unwrap();
    let n: i64 = conn
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 0, "rollback restored the table");
    assert_eq!(during, ["x.db"], "no journal on disk during the transaction");
    assert!(
        mid.journal_opens > before.journal_opens,
        "journal opened in memory: {mid:?}"
    );

    conn.execute_batch("BEGIN; INSERT INTO t VALUES (42); COMMIT;")
        .unwrap();
    let after = now_pt(&api);
    assert!(
        after.memory_deletes > before.memory_deletes,
        "journal deleted from memory"
    );
    assert_eq!(names(dir.path()), ["x.db"]);

    // Another connection (through the plain default VFS) sees the commit.
    let plain = Connection::open(&path).unwrap();
    let v: i64 = plain.query_row("SELECT a FROM t", [], |r| r.get(0)).unwrap();
    assert_eq!(v, 42);
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
}

#[test]
fn statement_journal_spills_into_memory() {
    let api = registered();
    let dir = tempfile::tempdir().unwrap();
    let conn = open(&dir.path().join("s.db"));
    // The bundled SQLite keeps temp files in memory by default; FILE makes a
    // statement journal spill to the VFS past 64 KiB, which is the case to test.
    conn.execute_batch(
        "PRAGMA temp_store = FILE;
         CREATE TABLE u(id INTEGER PRIMARY KEY, b);
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 500)
         INSERT INTO u SELECT i, randomblob(1000) FROM n;",
    )
    .unwrap();
    let digest = |c: &Connection| -> String {
        c.query_row("SELECT group_concat(hex(b)) FROM u", [], |r| r.get(0))
            .unwrap()
    };
    let before = now(&api);
    // Journal every page first: a statement journal only holds pages that were
    // already in the rollback journal when the statement began.
    conn.execute_batch("BEGIN; UPDATE u SET b = b || x'';").unwrap();
    let original = digest(&conn);
    // Rewrites ~500 KB of already-journaled pages, then conflicts on the last
    // row: only the statement journal can undo this statement alone.
    let err = conn
        .execute_batch("UPDATE u SET b = randomblob(1000), id = CASE WHEN id = 500 THEN 1 ELSE id END")
        .unwrap_err();
    assert!(err.to_string().contains("UNIQUE"), "{err}");
    assert_eq!(digest(&conn), original, "statement rollback restored every row");
    conn.execute_batch("COMMIT").unwrap();
    let after = now(&api);
    assert!(
        after.statement_journal_opens > before.statement_journal_opens,
        "statement journal went through the VFS into memory: {before:?} -> {after:?}"
    );
    assert_eq!(names(dir.path()), ["s.db"]);
}

#[test]
fn multi_database_commit_uses_an_in_memory_super_journal() {
    let api = registered();
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.db");
    let conn = open(&a);
    // A second logical file of the same store: the two commit as one store commit, so the
    // super-journal stays in memory. (Two different stores commit with one on disk, see
    // tests/multi_file_commit.rs.)
    conn.execute(
        "ATTACH ?1 AS b",
        [format!("file:{}?vfs={VFS_NAME}&db=b", a.display())],
    )
    .unwrap();
    conn.execute_batch("CREATE TABLE main.t(a); CREATE TABLE b.t(a);")
        .unwrap();
    let before = now(&api);
    conn.execute_batch("BEGIN; INSERT INTO main.t VALUES (1); INSERT INTO b.t VALUES (2);")
        .unwrap();
    assert_eq!(names(dir.path()), ["a.db"]);
    conn.execute_batch("COMMIT").unwrap();
    let after = now(&api);
    assert!(
        after.super_journal_opens > before.super_journal_opens,
        "{before:?} -> {after:?}"
    );
    assert_eq!(names(dir.path()), ["a.db"]);
    let sum: i64 = conn
        .query_row("SELECT (SELECT a FROM main.t) + (SELECT a FROM b.t)", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(sum, 3);
}

#[test]
fn wal_mode_passes_through() {
    let api = passthrough();
    let dir = tempfile::tempdir().unwrap();
    let conn = open_pt(&dir.path().join("w.db"));
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let before = now_pt(&api);
    conn.execute_batch("CREATE TABLE t(a); INSERT INTO t VALUES (1);")
        .unwrap();
    assert!(names(dir.path()).contains(&"w.db-wal".to_owned()));
    let other = open_pt(&dir.path().join("w.db"));
    let n: i64 = other
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1);
    assert!(now_pt(&api).main_db_opens > before.main_db_opens);
}

#[test]
fn reports_host_sqlite_build() {
    let api = registered();
    let conn = Connection::open_in_memory().unwrap();
    let opts: Vec<String> = conn
        .prepare("PRAGMA compile_options")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    println!(
        "host SQLite {} batch-atomic-write compiled in: {}",
        api.libversion_number(),
        opts.iter().any(|o| o == "ENABLE_BATCH_ATOMIC_WRITE")
    );
    assert!(api.libversion_number() >= onesync_vfs::MIN_SQLITE_VERSION);
}

/// A main-db backend that delegates to the pass-through but panics in `sync`.
struct PanicOnSync(Box<dyn onesync_vfs::DbBackend>);

impl onesync_vfs::DbBackend for PanicOnSync {
    fn read(&mut self, buf: &mut [u8], offset: u64) -> onesync_vfs::IoResult<()> {
        self.0.read(buf, offset)
    }
    fn write(&mut self, buf: &[u8], offset: u64) -> onesync_vfs::IoResult<()> {
        self.0.write(buf, offset)
    }
    fn truncate(&mut self, size: u64) -> onesync_vfs::IoResult<()> {
        self.0.truncate(size)
    }
    fn sync(&mut self, _flags: std::ffi::c_int) -> onesync_vfs::IoResult<()> {
        panic!("deliberate panic inside xSync");
    }
    fn size(&mut self) -> onesync_vfs::IoResult<u64> {
        self.0.size()
    }
    fn lock(&mut self, level: onesync_vfs::LockLevel) -> onesync_vfs::IoResult<()> {
        self.0.lock(level)
    }
    fn unlock(&mut self, level: onesync_vfs::LockLevel) -> onesync_vfs::IoResult<()> {
        self.0.unlock(level)
    }
    fn check_reserved_lock(&mut self) -> onesync_vfs::IoResult<bool> {
        self.0.check_reserved_lock()
    }
    fn close(&mut self) -> onesync_vfs::IoResult<()> {
        self.0.close()
    }
}

struct PanickyFactory;

impl onesync_vfs::MainDbFactory for PanickyFactory {
    fn open(&self, req: &onesync_vfs::OpenRequest) -> onesync_vfs::IoResult<onesync_vfs::Opened> {
        let name = req
            .name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name.ends_with("refuse.db") {
            panic!("deliberate panic inside xOpen");
        }
        let inner = req.open_passthrough()?;
        Ok(onesync_vfs::Opened {
            backend: Box::new(PanicOnSync(inner.backend)),
            out_flags: inner.out_flags,
        })
    }
}

#[test]
fn panics_become_sqlite_errors_not_unwinding_into_c() {
    let api = registered();
    let opts = onesync_vfs::RegisterOptions {
        name: "onesync-panicky".to_owned(),
        make_default: false,
        main_db: Box::new(PanickyFactory),
        memory_journals: true,
        files: None,
    };
    assert!(onesync_vfs::register_with(&api, opts).is_ok());
    let dir = tempfile::tempdir().unwrap();

    let refused = Connection::open_with_flags_and_vfs(
        dir.path().join("refuse.db"),
        OpenFlags::default(),
        "onesync-panicky",
    )
    .and_then(|c| c.execute_batch("CREATE TABLE t(a)"));
    assert!(refused.is_err(), "a panicking xOpen must fail the open");

    let conn =
        Connection::open_with_flags_and_vfs(dir.path().join("p.db"), OpenFlags::default(), "onesync-panicky")
            .unwrap();
    let err = conn.execute_batch("CREATE TABLE t(a)").unwrap_err();
    assert!(err.to_string().contains("disk I/O error"), "{err}");
    // The connection is still usable once syncs are not requested.
    conn.execute_batch("PRAGMA synchronous = OFF; CREATE TABLE t(a); INSERT INTO t VALUES (1);")
        .unwrap();
}

#[test]
fn concurrent_connections_share_one_in_memory_journal_namespace() {
    registered();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.db");
    open(&path).execute_batch("CREATE TABLE t(thread, i)").unwrap();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let path = path.clone();
            std::thread::spawn(move || {
                let conn = open(&path);
                conn.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
                for i in 0..25 {
                    conn.execute_batch("BEGIN IMMEDIATE").unwrap();
                    conn.execute("INSERT INTO t VALUES (?1, ?2)", [t, i]).unwrap();
                    let end = if i % 5 == 4 { "ROLLBACK" } else { "COMMIT" };
                    conn.execute_batch(end).unwrap();
                    let _: i64 = conn
                        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
                        .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let conn = open(&path);
    let n: i64 = conn
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 4 * 20);
    assert_eq!(names(dir.path()), ["c.db"]);
}
