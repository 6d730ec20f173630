//! The `mvbt` virtual table through rusqlite's bundled SQLite: a randomized
//! differential test against an ordinary table, as-of reads, statement
//! atomicity, two connections, bad arguments, foreign files, and the plans.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

mod common;

use rusqlite::types::Value;
use rusqlite::{Connection, ErrorCode};

fn open(path: &Path) -> Connection {
    let conn = Connection::open(path).unwrap();
    register(&conn);
    conn
}

fn register(conn: &Connection) {
    let api = onesync_vfs::api_table_from_sys!(rusqlite::ffi);
    // SAFETY: the connection's own handle, of the SQLite the table was built from.
    unsafe { onesync_mvbt_vtab::register_mvbt_module(conn.handle().cast(), &api) }.unwrap();
}

type Rows = Vec<(i64, Value)>;

fn rows(conn: &Connection, sql: &str) -> rusqlite::Result<Rows> {
    let mut stmt = conn.prepare(sql)?;
    let out = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<Rows>>();
    out
}

fn error_code(e: &rusqlite::Error) -> Option<ErrorCode> {
    match e {
        rusqlite::Error::SqliteFailure(f, _) => Some(f.code),
        _ => None,
    }
}

/// splitmix64: deterministic, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn key(&mut self) -> i64 {
        self.below(60) as i64 - 10
    }
    fn value_sql(&mut self) -> String {
        match self.below(6) {
            0 => "NULL".into(),
            1 => format!("{}", self.next() as i64),
            2 => format!("{}.25", self.below(1000)),
            3 => format!("'t{}'", self.below(1000)),
            4 => format!("x'{:08x}'", self.below(1 << 32)),
            _ => "''".into(),
        }
    }
}

/// Runs `sql` (with `{T}` for the table) on kv and on ref; both must succeed
/// or both fail.
fn both(conn: &Connection, sql: &str) {
    let a = conn.execute_batch(&sql.replace("{T}", "kv"));
    let b = conn.execute_batch(&sql.replace("{T}", "ref"));
    assert_eq!(a.is_ok(), b.is_ok(), "{sql}: mvbt {a:?} vs ordinary {b:?}");
}

fn compare(conn: &Connection, sql: &str) {
    let a = rows(conn, &sql.replace("{T}", "kv")).unwrap_or_else(|e| panic!("{sql}: {e}"));
    let b = rows(conn, &sql.replace("{T}", "ref")).unwrap();
    if a != b {
        let history = LAST.with(|l| l.borrow().clone());
        let _ = std::fs::write(std::env::temp_dir().join("mvbt_history.txt"), &history);
    }
    assert_eq!(a, b, "{sql} (statements so far: $TMPDIR/mvbt_history.txt)");
}

thread_local! {
    /// The statements run so far in this thread's test (for failure messages).
    static LAST: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

fn compare_scalar(conn: &Connection, sql: &str) {
    let q = |t: &str| {
        conn.query_row(&sql.replace("{T}", t), [], |r| r.get::<_, Value>(0))
            .unwrap()
    };
    assert_eq!(q("kv"), q("ref"), "{sql}");
}

fn snapshot(conn: &Connection) -> Rows {
    rows(conn, "SELECT key, value FROM ref ORDER BY key").unwrap()
}

fn latest(path: &Path) -> u64 {
    onesync_mvbt_vtab::mvbt_latest_version(path).expect("table open")
}

#[test]
fn random_statements_match_an_ordinary_table() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("d.db");
    let tree_file = dir.path().join("d.db-kv.mvbt");
    let mut conn = open(&db);
    conn.execute_batch(
        "CREATE VIRTUAL TABLE kv USING mvbt(keep_versions=100000, node_size=512);
         CREATE TABLE ref(key INTEGER PRIMARY KEY, value);",
    )
    .unwrap();
    assert!(tree_file.exists());

    let seed = std::env::var("ONESYNC_MVBT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(42);
    let mut rng = Rng(seed);
    let mut versions: BTreeMap<u64, Rows> = BTreeMap::new();
    versions.insert(latest(&tree_file), Vec::new());
    let mut savepoints: Vec<String> = Vec::new();
    let mut in_txn = false;
    let ops = ["=", "<", "<=", ">", ">="];
    let steps = if std::env::var("ONESYNC_BIG_TESTS").is_ok_and(|v| v == "1") {
        20_000
    } else {
        2_500
    };
    for step in 0..steps {
        let (k, k2) = (rng.key(), rng.key());
        let v = rng.value_sql();
        let sql = match rng.below(20) {
            0..=3 => format!("INSERT INTO {{T}}(key, value) VALUES ({k}, {v})"),
            4 => format!("INSERT INTO {{T}}(value) VALUES ({v})"),
            5 => format!("INSERT OR REPLACE INTO {{T}}(key, value) VALUES ({k}, {v})"),
            6 => format!("INSERT OR IGNORE INTO {{T}}(key, value) VALUES ({k}, {v}), ({k2}, {v})"),
            7 => format!(
                "INSERT INTO {{T}}(key, value) VALUES ({k}, {v}), ({k2}, 'm'), ({}, 1)",
                rng.key()
            ),
            8 => format!("UPDATE {{T}} SET value = {v} WHERE key = {k}"),
            9 => format!(
                "UPDATE {{T}} SET value = {v} WHERE key BETWEEN {} AND {}",
                k.min(k2),
                k.max(k2)
            ),
            10 => format!("UPDATE {{T}} SET key = {k2} WHERE key = {k}"),
            11 => format!("UPDATE OR REPLACE {{T}} SET key = {k2} WHERE key = {k}"),
            12 => format!("DELETE FROM {{T}} WHERE key = {k}"),
            13 => format!(
                "DELETE FROM {{T}} WHERE key > {} AND key <= {}",
                k.min(k2),
                k.min(k2) + 3
            ),
            14 if !in_txn => "BEGIN".into(),
            15 if in_txn => "COMMIT".into(),
            16 if in_txn && rng.below(3) == 0 => "ROLLBACK".into(),
            17 => format!("SAVEPOINT s{}", savepoints.len()),
            18 if !savepoints.is_empty() => {
                let i = rng.below(savepoints.len() as u64) as usize;
                format!("RELEASE {}", savepoints[i])
            }
            19 if !savepoints.is_empty() => {
                let i = rng.below(savepoints.len() as u64) as usize;
                format!("ROLLBACK TO {}", savepoints[i])
            }
            _ => format!("UPDATE {{T}} SET value = {v} WHERE key >= {k}"),
        };
        LAST.with(|l| {
            let mut l = l.borrow_mut();
            l.push_str(&format!("\n{step}: {sql}"));
        });
        if sql.contains("{T}") {
            both(&conn, &sql);
        } else {
            conn.execute_batch(&sql)
                .unwrap_or_else(|e| panic!("step {step}: {sql}: {e}"));
            match sql.split(' ').next().unwrap() {
                "BEGIN" => in_txn = true,
                "COMMIT" | "ROLLBACK" if !sql.contains(" TO ") => {
                    in_txn = false;
                    savepoints.clear();
                }
                "SAVEPOINT" => {
                    // A SAVEPOINT outside BEGIN opens the transaction.
                    in_txn = true;
                    savepoints.push(sql[10..].to_owned());
                }
                "RELEASE" => {
                    let i = savepoints.iter().position(|s| sql.ends_with(s.as_str())).unwrap();
                    savepoints.truncate(i);
                    if i == 0 && conn.is_autocommit() {
                        in_txn = false;
                    }
                }
                _ => {
                    let i = savepoints.iter().position(|s| sql.ends_with(s.as_str())).unwrap();
                    savepoints.truncate(i + 1);
                }
            }
        }
        assert_eq!(in_txn, !conn.is_autocommit(), "step {step}: {sql}");

        // Contents, and a few random queries with every operator.
        compare(&conn, "SELECT key, value FROM {T} ORDER BY key");
        compare_scalar(&conn, "SELECT count(*) FROM {T}");
        let (a, b) = (rng.key(), rng.key());
        compare(&conn, &format!("SELECT key, value FROM {{T}} WHERE key = {a}"));
        compare(&conn, &format!("SELECT key, value FROM {{T}} WHERE rowid = {a}"));
        let (op1, op2) = (ops[rng.below(5) as usize], ops[rng.below(5) as usize]);
        let order =
            ["", " ORDER BY key", " ORDER BY key DESC", " ORDER BY value, key"][rng.below(4) as usize];
        let rhs = [
            format!("{b}"),
            format!("{b}.5"),
            format!("'{b}'"),
            "'x'".into(),
            "NULL".into(),
        ][rng.below(5) as usize]
            .clone();
        let q = format!("SELECT key, value FROM {{T}} WHERE key {op1} {a} AND key {op2} {rhs}{order}");
        if order.is_empty() {
            let sorted = |t: &str| {
                let mut r = rows(&conn, &q.replace("{T}", t)).unwrap();
                r.sort_by_key(|x| x.0);
                r
            };
            assert_eq!(sorted("kv"), sorted("ref"), "{q}");
        } else {
            compare(&conn, &q);
        }
        compare_scalar(
            &conn,
            &format!("SELECT count(*) FROM {{T}} WHERE key {op1} {rhs}"),
        );
        compare_scalar(&conn, &format!("SELECT max(key) FROM {{T}} WHERE key {op2} {a}"));

        if !in_txn {
            // Each committed state is remembered under its version.
            let v = latest(&tree_file);
            let now = snapshot(&conn);
            if let Some(seen) = versions.get(&v) {
                assert_eq!(
                    seen, &now,
                    "step {step}: version {v} changed without a new version"
                );
            }
            versions.insert(v, now);
            if let Ok(shown) = conn.query_row("SELECT as_of FROM kv LIMIT 1", [], |r| r.get::<_, i64>(0)) {
                assert_eq!(shown as u64, v);
            }
        } else if let Ok(shown) = conn.query_row("SELECT as_of FROM kv LIMIT 1", [], |r| r.get::<_, i64>(0)) {
            // The transaction's version once it wrote kv, the latest before.
            let v = latest(&tree_file);
            assert!(
                shown as u64 == v + 1 || shown as u64 == v,
                "{shown} inside a transaction, latest {v}"
            );
        }

        // As-of reads of a random remembered version.
        if step % 10 == 0 {
            let i = rng.below(versions.len() as u64) as usize;
            let (&v, expect) = versions.iter().nth(i).unwrap();
            let got = rows(
                &conn,
                &format!("SELECT key, value FROM kv WHERE as_of = {v} ORDER BY key"),
            )
            .unwrap();
            assert_eq!(&got, expect, "as of version {v}");
            let got = rows(
                &conn,
                &format!("SELECT key, value FROM kv WHERE as_of = {v} AND key >= {a} AND key < {b}"),
            )
            .unwrap();
            let want: Rows = expect.iter().filter(|r| r.0 >= a && r.0 < b).cloned().collect();
            assert_eq!(got, want, "as of version {v}, {a} <= key < {b}");
        }

        // Reopen the connection (fresh registry state) now and then.
        if !in_txn && step % 700 == 699 {
            drop(conn);
            assert_eq!(
                onesync_mvbt_vtab::mvbt_latest_version(&tree_file),
                None,
                "closed with its last table"
            );
            conn = open(&db);
            compare(&conn, "SELECT key, value FROM {T} ORDER BY key");
            // The engine keeps no history across opens: only the latest version
            // stays readable, older ones are refused.
            let v = latest(&tree_file);
            let first = *versions.keys().next().unwrap();
            if first < v {
                let e = rows(&conn, &format!("SELECT key, value FROM kv WHERE as_of = {first}")).unwrap_err();
                assert!(e.to_string().contains("no longer kept"), "{e}");
            }
            versions.retain(|&k, _| k >= v);
        }
    }
    if in_txn {
        conn.execute_batch("COMMIT").unwrap();
    }
    println!("{} versions checked", versions.len());
    assert!(versions.len() > 20);
}

#[test]
fn a_failing_statement_leaves_no_partial_rows() {
    let dir = tempfile::tempdir().unwrap();
    let conn = open(&dir.path().join("d.db"));
    conn.execute_batch(
        "CREATE VIRTUAL TABLE kv USING mvbt;
         INSERT INTO kv(key, value) VALUES (5, 'five');",
    )
    .unwrap();
    let insert = "INSERT INTO kv(key, value) SELECT column1, 'new' FROM (VALUES (1), (2), (5), (6))";
    // Autocommit: the statement's implicit transaction is rolled back.
    let e = conn.execute_batch(insert).unwrap_err();
    assert_eq!(error_code(&e), Some(ErrorCode::ConstraintViolation), "{e}");
    assert!(e.to_string().contains("UNIQUE constraint failed: kv.key"), "{e}");
    let keys = || rows(&conn, "SELECT key, value FROM kv ORDER BY key").unwrap();
    assert_eq!(keys(), vec![(5, Value::Text("five".into()))]);
    // Inside a transaction: the statement is rolled back to its savepoint, the
    // transaction goes on.
    conn.execute_batch("BEGIN; INSERT INTO kv(key, value) VALUES (3, 'three');")
        .unwrap();
    conn.execute_batch(insert).unwrap_err();
    conn.execute_batch("INSERT INTO kv(key, value) VALUES (4, 'four'); COMMIT")
        .unwrap();
    assert_eq!(
        keys(),
        vec![
            (3, Value::Text("three".into())),
            (4, Value::Text("four".into())),
            (5, Value::Text("five".into()))
        ]
    );
    // OR IGNORE skips the duplicate, OR REPLACE overwrites it, INSERT without a key appends.
    conn.execute_batch("INSERT OR IGNORE INTO kv(key, value) VALUES (5, 'x'), (6, 'six')")
        .unwrap();
    conn.execute_batch("INSERT OR REPLACE INTO kv(key, value) VALUES (3, 3.5)")
        .unwrap();
    conn.execute("INSERT INTO kv(value) VALUES (?1)", [vec![0u8, 1]])
        .unwrap();
    assert_eq!(conn.last_insert_rowid(), 7);
    assert_eq!(
        keys(),
        vec![
            (3, Value::Real(3.5)),
            (4, Value::Text("four".into())),
            (5, Value::Text("five".into())),
            (6, Value::Text("six".into())),
            (7, Value::Blob(vec![0, 1])),
        ]
    );
}

#[test]
fn as_of_reads_and_kept_versions() {
    let dir = tempfile::tempdir().unwrap();
    let conn = open(&dir.path().join("d.db"));
    conn.execute_batch("CREATE VIRTUAL TABLE kv USING mvbt(file='t.mvbt', keep_versions=3)")
        .unwrap();
    let file = dir.path().join("t.mvbt");
    assert!(file.exists(), "file= is relative to the database's directory");
    for i in 1..=10 {
        conn.execute("INSERT INTO kv(key, value) VALUES (?1, ?1)", [i])
            .unwrap();
    }
    let v = latest(&file);
    assert_eq!(v, 10);
    let count_at = |v: i64| {
        conn.query_row("SELECT count(*) FROM kv WHERE as_of = ?1", [v], |r| {
            r.get::<_, i64>(0)
        })
    };
    assert_eq!(count_at(10).unwrap(), 10);
    assert_eq!(count_at(7).unwrap(), 7);
    let e = count_at(2).unwrap_err();
    assert!(e.to_string().contains("no longer kept"), "{e}");
    let e = count_at(11).unwrap_err();
    assert!(e.to_string().contains("not committed"), "{e}");
    let e = count_at(-1).unwrap_err();
    assert!(e.to_string().contains("as_of"), "{e}");
    let as_of: i64 = conn
        .query_row("SELECT as_of FROM kv WHERE key = 3", [], |r| r.get(0))
        .unwrap();
    assert_eq!(as_of, 10);
    let value: i64 = conn
        .query_row("SELECT value FROM kv WHERE key = 9 AND as_of = 9", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(value, 9);
    let gone: Option<i64> = conn
        .query_row("SELECT value FROM kv WHERE key = 10 AND as_of = 9", [], |r| {
            r.get(0)
        })
        .ok();
    assert_eq!(gone, None);
}

#[test]
fn two_connections_one_writer() {
    let dir = tempfile::tempdir().unwrap();
    // Two databases naming one tree file: SQLite's own database locks don't
    // serialize them, the module does.
    let shared = dir.path().join("shared.mvbt");
    let create = format!("CREATE VIRTUAL TABLE kv USING mvbt(file='{}')", shared.display());
    let a = open(&dir.path().join("a.db"));
    a.execute_batch(&create).unwrap();
    a.execute_batch("INSERT INTO kv(key, value) VALUES (1, 'a')")
        .unwrap();
    let b = open(&dir.path().join("b.db"));
    b.execute_batch(&create).unwrap();
    a.execute_batch("BEGIN; INSERT INTO kv(key, value) VALUES (2, 'b')")
        .unwrap();
    let e = b
        .execute_batch("INSERT INTO kv(key, value) VALUES (3, 'c')")
        .unwrap_err();
    assert_eq!(error_code(&e), Some(ErrorCode::DatabaseBusy), "{e}");
    assert!(
        e.to_string().contains("being written by another connection"),
        "{e}"
    );
    let count = |c: &Connection| {
        c.query_row("SELECT count(*) FROM kv", [], |r| r.get::<_, i64>(0))
            .unwrap()
    };
    assert_eq!(
        count(&b),
        1,
        "the other connection reads the latest committed version"
    );
    assert_eq!(count(&a), 2, "the writer reads its own writes");
    a.execute_batch("COMMIT").unwrap();
    assert_eq!(count(&b), 2);
    b.execute_batch("INSERT INTO kv(key, value) VALUES (3, 'c')")
        .unwrap();
    assert_eq!(count(&a), 3);

    // Two connections of one database: SQLite's write lock on the database
    // file comes first (an mvbt write is a write transaction there too).
    let c = open(&dir.path().join("a.db"));
    c.busy_timeout(std::time::Duration::ZERO).unwrap();
    a.execute_batch("BEGIN; INSERT INTO kv(key, value) VALUES (4, 'd')")
        .unwrap();
    let e = c
        .execute_batch("INSERT INTO kv(key, value) VALUES (5, 'e')")
        .unwrap_err();
    assert_eq!(error_code(&e), Some(ErrorCode::DatabaseBusy), "{e}");
    assert_eq!(count(&c), 3);
    a.execute_batch("COMMIT").unwrap();
    assert_eq!(count(&c), 4);
}

#[test]
fn bad_arguments_and_foreign_files_are_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let conn = open(&dir.path().join("d.db"));
    let err = |sql: &str| conn.execute_batch(sql).unwrap_err();
    let e = err("CREATE VIRTUAL TABLE a USING mvbt(node_size=100)");
    assert!(
        e.to_string().contains("node_size must be a multiple of 512"),
        "{e}"
    );
    let e = err("CREATE VIRTUAL TABLE a USING mvbt(variant='b-tree')");
    assert!(e.to_string().contains("unknown variant 'b-tree'"), "{e}");
    let e = err("CREATE VIRTUAL TABLE a USING mvbt(colour=red)");
    assert!(e.to_string().contains("unknown argument"), "{e}");
    for variant in ["ls-mvbt", "mvbt", "mvbt+embedding", "mvbt+lazy-split"] {
        conn.execute_batch(&format!(
            "CREATE VIRTUAL TABLE \"{variant}\" USING mvbt(variant='{variant}', redistribution=1, node_size=1024);
             INSERT INTO \"{variant}\"(value) VALUES ('x');
             DROP TABLE \"{variant}\";"
        ))
        .unwrap();
    }

    let mem = Connection::open_in_memory().unwrap();
    register(&mem);
    let e = mem
        .execute_batch("CREATE VIRTUAL TABLE kv USING mvbt")
        .unwrap_err();
    assert!(e.to_string().contains("needs file="), "{e}");
    let file = dir.path().join("mem.mvbt");
    mem.execute_batch(&format!(
        "CREATE VIRTUAL TABLE kv USING mvbt(file='{}')",
        file.display()
    ))
    .unwrap();
    mem.execute_batch("INSERT INTO kv VALUES (1, 2)").unwrap();

    let foreign = dir.path().join("foreign.bin");
    let bytes: Vec<u8> = (0..9000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&foreign, &bytes).unwrap();
    let e = err("CREATE VIRTUAL TABLE f USING mvbt(file='foreign.bin')");
    assert_eq!(error_code(&e), Some(ErrorCode::DatabaseCorrupt), "{e}");
    assert!(e.to_string().contains("mvbt"), "{e}");
    assert_eq!(
        std::fs::read(&foreign).unwrap(),
        bytes,
        "the foreign file is untouched"
    );

    // A file another process holds (its flock; a second open file description
    // in this process conflicts the same way).
    let held_path = dir.path().join("held.mvbt");
    let held = onesync_mvbt::Tree::open_or_create(&held_path, onesync_mvbt::Config::default()).unwrap();
    let e = err("CREATE VIRTUAL TABLE h USING mvbt(file='held.mvbt')");
    assert_eq!(error_code(&e), Some(ErrorCode::DatabaseBusy), "{e}");
    assert!(e.to_string().contains("mvbt: cannot open"), "{e}");
    drop(held);

    // A value too big for a cell.
    conn.execute_batch("CREATE VIRTUAL TABLE small USING mvbt(node_size=512)")
        .unwrap();
    let e = err("INSERT INTO small VALUES (1, zeroblob(4000))");
    assert!(e.to_string().starts_with("mvbt: "), "{e}");
    conn.execute_batch("DROP TABLE small").unwrap();

    // A file renamed after the table can't follow a RENAME; an explicit one can.
    conn.execute_batch("CREATE VIRTUAL TABLE r USING mvbt").unwrap();
    let e = err("ALTER TABLE r RENAME TO r2");
    assert!(e.to_string().contains("named after the table"), "{e}");
    conn.execute_batch("DROP TABLE r").unwrap();
    assert!(
        !dir.path().join("d.db-r.mvbt").exists(),
        "DROP TABLE deletes the file"
    );
}

#[test]
fn plans_use_the_key_constraints() {
    let dir = tempfile::tempdir().unwrap();
    let conn = open(&dir.path().join("d.db"));
    conn.execute_batch("CREATE VIRTUAL TABLE kv USING mvbt(durable=0)")
        .unwrap();
    let file: PathBuf = dir.path().join("d.db-kv.mvbt");
    conn.execute_batch(
        "BEGIN;
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10000)
         INSERT INTO kv(key, value) SELECT i, 'v' || i FROM n;
         COMMIT;",
    )
    .unwrap();
    let stats = || onesync_mvbt_vtab::mvbt_scan_stats(&file).unwrap();
    let fetched = |sql: &str| {
        let before = stats().rows_fetched;
        let n: i64 = conn.query_row(sql, [], |r| r.get(0)).unwrap();
        (n, stats().rows_fetched - before, stats().last_idx_num as i32)
    };
    assert_eq!(
        fetched("SELECT count(*) FROM kv WHERE key = 5000"),
        (1, 1, onesync_mvbt_vtab::IDX_KEY_EQ)
    );
    assert_eq!(
        fetched("SELECT count(*) FROM kv WHERE key BETWEEN 100 AND 199"),
        (
            100,
            100,
            onesync_mvbt_vtab::IDX_KEY_LOW | onesync_mvbt_vtab::IDX_KEY_HIGH
        )
    );
    assert_eq!(
        fetched("SELECT count(*) FROM kv WHERE rowid > 9990"),
        (10, 10, onesync_mvbt_vtab::IDX_KEY_LOW)
    );
    assert_eq!(fetched("SELECT count(*) FROM kv"), (10000, 10000, 0));
    assert_eq!(
        fetched("SELECT sum(key) FROM kv WHERE key > 10"),
        (50005000 - 55, 9990, onesync_mvbt_vtab::IDX_KEY_LOW)
    );
    let plan = |sql: &str| -> String {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let lines: Vec<String> = stmt
            .query_map([], |r| r.get::<_, String>(3))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        lines.join("\n")
    };
    let p = plan("SELECT value FROM kv WHERE key = 7");
    assert!(p.contains("VIRTUAL TABLE INDEX 1:e"), "{p}");
    let p = plan("SELECT value FROM kv WHERE key > 7 AND key <= 9 AND as_of = 1 ORDER BY key");
    assert!(p.contains("INDEX 14:gLv") && !p.contains("ORDER BY"), "{p}");
    let p = plan("SELECT value FROM kv ORDER BY key DESC");
    assert!(p.contains("USE TEMP B-TREE FOR ORDER BY"), "{p}");
    let counters = onesync_mvbt_vtab::mvbt_counters(&file).unwrap();
    assert!(counters.commits >= 1, "{counters:?}");
}

/// The built `libonesync_mvbt_vtab.so` in the stock `sqlite3` CLI: `.load` then `.open`
/// (the module reaches the new connection through `sqlite3_auto_extension`).
#[test]
fn works_in_the_system_sqlite3_cli() {
    if !common::have("sqlite3", &["--version"]) {
        eprintln!("SKIPPED: no sqlite3 CLI on PATH (apt-get install sqlite3)");
        return;
    }
    let lib = common::cdylib().with_extension("");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("x.db");
    let script = format!(
        ".load {lib}\n\
         .open '{db}'\n\
         CREATE VIRTUAL TABLE kv USING mvbt;\n\
         INSERT INTO kv(key, value) VALUES (1, 'one'), (2, 'two');\n\
         BEGIN; UPDATE kv SET value = 'TWO' WHERE key = 2; INSERT INTO kv(value) VALUES (3.5); COMMIT;\n\
         SELECT key, value, typeof(value), as_of FROM kv ORDER BY key;\n\
         SELECT 'v1', value FROM kv WHERE key = 2 AND as_of = 1;\n\
         SELECT 'count', count(*) FROM kv WHERE key >= 2;\n\
         .shell ls {dir}\n\
         DROP TABLE kv;\n\
         .shell ls {dir}\n",
        lib = lib.display(),
        db = db.display(),
        dir = dir.path().display(),
    );
    let stdout = common::sqlite3_script(&script);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        [
            "1|one|text|2",
            "2|TWO|text|2",
            "3|3.5|real|2",
            "v1|two",
            "count|2",
            "x.db",
            "x.db-kv.mvbt",
            "x.db",
        ],
        "stdout:\n{stdout}"
    );
}
