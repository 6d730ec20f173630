//! SQL semantics, compared. Every statement runs twice: on the stock VFS (a
//! plain file through SQLite's `unix` VFS, `journal_mode=DELETE`) and on
//! onesync (static registration into the same bundled SQLite; the database is
//! a store). The outcome of each statement -- its rows, or its error code and
//! message, plus whether a transaction is open afterwards -- must be identical
//! on both, and so must the whole contents after closing and reopening.
//! `PRAGMA integrity_check` must say `ok` on both after each scenario.
//!
//! The growth past 1 GiB runs only with `ONESYNC_BIG_TESTS=1`.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use onesync_vfs::{api_table_from_sys, register_static, VFS_NAME};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};

fn big_tests() -> bool {
    std::env::var("ONESYNC_BIG_TESTS").is_ok_and(|v| v == "1")
}

/// One of the two ways to open the database.
struct Side {
    label: &'static str,
    onesync: bool,
    path: PathBuf,
}

impl Side {
    fn open(&self) -> Connection {
        let conn = if self.onesync {
            register_static(&api_table_from_sys!(rusqlite::ffi)).expect("register onesync");
            Connection::open_with_flags_and_vfs(&self.path, OpenFlags::default(), VFS_NAME)
        } else {
            Connection::open(&self.path)
        }
        .unwrap_or_else(|e| panic!("{}: open {}: {e}", self.label, self.path.display()));
        if !self.onesync {
            let mode: String = conn
                .query_row("PRAGMA journal_mode = DELETE", [], |r| r.get(0))
                .unwrap();
            assert_eq!(mode, "delete");
        }
        conn
    }

    /// What to ATTACH as database `name`: a second plain file for the stock
    /// VFS, logical file `name` of the same store for onesync.
    fn attach_target(&self, name: &str) -> String {
        if self.onesync {
            format!("file:{}?vfs={VFS_NAME}&db={name}", self.path.display())
        } else {
            self.path
                .with_file_name(format!("stock-{name}.db"))
                .display()
                .to_string()
        }
    }
}

/// A stock and a onesync database, driven in lockstep.
struct Pair {
    dir: tempfile::TempDir,
    sides: [Side; 2],
    conns: Option<[Connection; 2]>,
    /// Statements run so far (for failure messages).
    steps: usize,
}

/// Formats one column value; long text and blobs are summarised by length
/// and hash so that outputs stay readable.
fn value(v: ValueRef<'_>) -> String {
    fn long(kind: &str, bytes: &[u8]) -> String {
        let mut h = DefaultHasher::new();
        bytes.hash(&mut h);
        format!("{kind}[{}:{:016x}]", bytes.len(), h.finish())
    }
    match v {
        ValueRef::Null => "NULL".into(),
        ValueRef::Integer(i) => i.to_string(),
        ValueRef::Real(f) => format!("{f:?}"),
        ValueRef::Text(t) if t.len() <= 64 => format!("'{}'", String::from_utf8_lossy(t)),
        ValueRef::Text(t) => long("text", t),
        ValueRef::Blob(b) if b.len() <= 16 => format!("x'{}'", hex(b)),
        ValueRef::Blob(b) => long("blob", b),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Runs one SQL statement; returns its rows (or its error) and whether a
/// transaction is open afterwards.
fn outcome(conn: &Connection, sql: &str) -> String {
    let result = (|| -> rusqlite::Result<Vec<String>> {
        let mut stmt = conn.prepare(sql)?;
        let columns = stmt.column_count();
        let mut rows = stmt.query([])?;
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            let cells: Vec<String> = (0..columns)
                .map(|i| row.get_ref(i).map(value))
                .collect::<Result<_, _>>()?;
            out.push(cells.join("|"));
        }
        Ok(out)
    })();
    let txn = if conn.is_autocommit() { "" } else { " [in txn]" };
    match result {
        Ok(rows) => format!("[{}]{txn}", rows.join(", ")),
        Err(rusqlite::Error::SqliteFailure(e, msg)) => format!(
            "ERROR {} ({:?}): {}{txn}",
            e.extended_code,
            e.code,
            msg.unwrap_or_default()
        ),
        Err(e) => format!("ERROR {e}{txn}"),
    }
}

/// The contents of one schema: every schema row, and every table's rows
/// (small tables in full, larger ones as count and hash).
fn dump(conn: &Connection, schema: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut tables = Vec::new();
    {
        let mut stmt = conn
            .prepare(&format!(
                "SELECT type, name, tbl_name, sql FROM \"{schema}\".sqlite_schema ORDER BY type, name"
            ))
            .unwrap();
        let mut rows = stmt.query([]).unwrap();
        while let Some(r) = rows.next().unwrap() {
            let (kind, name): (String, String) = (r.get(0).unwrap(), r.get(1).unwrap());
            let sql: Option<String> = r.get(3).unwrap();
            out.push(format!("{schema}: {kind} {name}: {}", sql.unwrap_or_default()));
            if kind == "table" && !name.starts_with("sqlite_") {
                tables.push(name);
            }
        }
    }
    for t in tables {
        let mut stmt = conn
            .prepare(&format!("SELECT * FROM \"{schema}\".\"{t}\""))
            .unwrap();
        let columns = stmt.column_count();
        let mut rows = stmt.query([]).unwrap();
        let mut n = 0u64;
        let mut h = DefaultHasher::new();
        let mut listed = Vec::new();
        while let Some(r) = rows.next().unwrap() {
            let line: Vec<String> = (0..columns).map(|i| value(r.get_ref(i).unwrap())).collect();
            let line = line.join("|");
            line.hash(&mut h);
            if n < 20 {
                listed.push(line);
            }
            n += 1;
        }
        if n <= 20 {
            out.push(format!("{schema}.{t}: {}", listed.join(", ")));
        } else {
            out.push(format!("{schema}.{t}: {n} rows, hash {:016x}", h.finish()));
        }
    }
    out
}

impl Pair {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let sides = [
            Side {
                label: "stock",
                onesync: false,
                path: dir.path().join("stock.db"),
            },
            Side {
                label: "onesync",
                onesync: true,
                path: dir.path().join("onesync.db"),
            },
        ];
        let conns = [sides[0].open(), sides[1].open()];
        Pair {
            dir,
            sides,
            conns: Some(conns),
            steps: 0,
        }
    }

    fn conns(&self) -> &[Connection; 2] {
        self.conns.as_ref().expect("connections are open")
    }

    fn onesync(&self) -> &Connection {
        &self.conns()[1]
    }

    /// Runs `sql` on both; their outcomes must be equal. Returns it.
    fn both(&mut self, sql: &str) -> String {
        self.both_with(|_| sql.to_owned())
    }

    /// Runs the statement `make(side)` on both (for the few statements that
    /// must name a side's own files).
    fn both_with(&mut self, make: impl Fn(&Side) -> String) -> String {
        self.steps += 1;
        let [a, b] = [0, 1].map(|i| {
            let sql = make(&self.sides[i]);
            (outcome(&self.conns()[i], &sql), sql)
        });
        assert_eq!(
            a.0, b.0,
            "step {}: the outcomes differ\n  stock:   {}\n    -> {}\n  onesync: {}\n    -> {}",
            self.steps, a.1, a.0, b.1, b.0
        );
        a.0
    }

    /// Runs each statement of `sqls` on both, expecting the same outcomes.
    fn all(&mut self, sqls: &[&str]) {
        for sql in sqls {
            self.both(sql);
        }
    }

    /// Runs `sql` on both and checks the outcome is `want`.
    fn expect(&mut self, sql: &str, want: &str) {
        let got = self.both(sql);
        assert_eq!(got, want, "step {}: {sql}", self.steps);
    }

    /// `PRAGMA integrity_check` over every attached database: ok on both.
    fn integrity(&mut self) {
        for schema in self.schemas() {
            self.expect(&format!("PRAGMA \"{schema}\".integrity_check"), "['ok']");
        }
    }

    fn schemas(&self) -> Vec<String> {
        let conn = &self.conns()[0];
        let mut stmt = conn.prepare("PRAGMA database_list").unwrap();
        let names: Vec<String> = stmt
            .query_map([], |r| r.get::<_, String>(1))
            .unwrap()
            .map(Result::unwrap)
            .filter(|n| n != "temp")
            .collect();
        names
    }

    /// Identical contents on both, for every attached database.
    fn same_contents(&self) {
        for schema in self.schemas() {
            let [a, b] = [0, 1].map(|i| dump(&self.conns()[i], &schema));
            assert_eq!(a, b, "contents of {schema} differ (left stock, right onesync)");
        }
    }

    /// Checks, closes both connections, opens them again (re-attaching
    /// `attach`), and checks again that contents are equal and intact.
    fn reopen(&mut self, attach: &[&str]) {
        self.integrity();
        self.same_contents();
        let [a, b] = self.conns.take().unwrap();
        for c in [a, b] {
            c.close().map_err(|(_, e)| e).expect("close");
        }
        self.conns = Some([self.sides[0].open(), self.sides[1].open()]);
        for name in attach {
            self.both_with(|s| format!("ATTACH '{}' AS \"{name}\"", s.attach_target(name)));
        }
        self.integrity();
        self.same_contents();
    }

    /// Files in the test directory.
    fn files(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    fn count(&self, side: usize, sql: &str) -> i64 {
        self.conns()[side].query_row(sql, [], |r| r.get(0)).unwrap()
    }
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// The standard workload: ROLLBACK, nested savepoints, statement rollback
/// (UNIQUE halfway through a multi-row INSERT, OR FAIL / OR IGNORE / OR
/// REPLACE / OR ROLLBACK), a deferred foreign key failing COMMIT, and a
/// rollback of a transaction that spilled pages to the database file.
fn transactions_workload(p: &mut Pair) {
    p.all(&[
        "CREATE TABLE t(a INTEGER UNIQUE, b TEXT)",
        "INSERT INTO t VALUES (1, 'one'), (2, 'two')",
        // ROLLBACK of inserts, an update and a delete.
        "BEGIN",
        "INSERT INTO t VALUES (3, 'three')",
        "UPDATE t SET b = 'changed' WHERE a = 1",
        "DELETE FROM t WHERE a = 2",
        "SELECT * FROM t ORDER BY a",
        "ROLLBACK",
    ]);
    p.expect("SELECT * FROM t ORDER BY a", "[1|'one', 2|'two']");

    // Nested savepoints, outside BEGIN (the outermost SAVEPOINT is the transaction).
    p.all(&[
        "SAVEPOINT a",
        "INSERT INTO t VALUES (10, 'a')",
        "SAVEPOINT b",
        "INSERT INTO t VALUES (11, 'b')",
        "SAVEPOINT c",
        "UPDATE t SET b = 'c-update'",
        "SELECT count(*) FROM t WHERE b = 'c-update'",
        "ROLLBACK TO b",
        "SELECT * FROM t ORDER BY a",
        "INSERT INTO t VALUES (12, 'after rollback to b')",
        "RELEASE b",
        "SAVEPOINT d",
        "DELETE FROM t",
        "ROLLBACK TO d",
        "RELEASE d",
        "ROLLBACK TO a",
        "SELECT * FROM t ORDER BY a",
        "INSERT INTO t VALUES (13, 'kept')",
        "RELEASE a",
    ]);
    p.expect("SELECT * FROM t ORDER BY a", "[1|'one', 2|'two', 13|'kept']");
    // Savepoints inside BEGIN; releasing one does not commit.
    p.all(&[
        "BEGIN",
        "SAVEPOINT s1",
        "INSERT INTO t VALUES (14, 's1')",
        "RELEASE s1",
        "SAVEPOINT s2",
        "INSERT INTO t VALUES (15, 's2')",
        "ROLLBACK TO s2",
        "ROLLBACK TO s2",
        "RELEASE s2",
        "ROLLBACK",
        "RELEASE nosuch",
    ]);
    p.expect("SELECT count(*) FROM t", "[3]");

    // Statement rollback: a multi-row INSERT hits the UNIQUE constraint on
    // its third row. That statement is undone, the transaction goes on.
    p.all(&["BEGIN", "INSERT INTO t VALUES (20, 'before')"]);
    let err = p.both("INSERT INTO t VALUES (21, 'p'), (22, 'q'), (1, 'dup'), (23, 'r')");
    assert!(
        err.starts_with("ERROR 2067") && err.contains("UNIQUE") && err.ends_with("[in txn]"),
        "{err}"
    );
    p.expect("SELECT a FROM t WHERE a >= 20 ORDER BY a", "[20] [in txn]");
    // Same with an UPDATE that fails halfway, and OR FAIL (keeps the rows
    // before the failure), OR IGNORE, OR REPLACE.
    p.all(&[
        "UPDATE t SET a = a + 1 WHERE a IN (1, 2)",
        "SELECT * FROM t ORDER BY a",
        "INSERT OR FAIL INTO t VALUES (30, 'x'), (31, 'y'), (2, 'dup'), (32, 'z')",
        "INSERT OR IGNORE INTO t VALUES (40, 'x'), (13, 'dup'), (41, 'y')",
        "INSERT OR REPLACE INTO t VALUES (42, 'x'), (13, 'replaced')",
        "SELECT * FROM t ORDER BY a",
        "COMMIT",
    ]);
    p.expect(
        "SELECT group_concat(a) FROM (SELECT a FROM t ORDER BY a)",
        "['1,2,13,20,30,31,40,41,42']",
    );
    // OR ROLLBACK ends the whole transaction.
    p.all(&[
        "BEGIN",
        "INSERT INTO t VALUES (50, 'gone')",
        "INSERT OR ROLLBACK INTO t VALUES (51, 'x'), (1, 'dup')",
        "SELECT count(*) FROM t WHERE a >= 50",
        "COMMIT",
    ]);
    // A big statement spills the statement journal (> 64 KiB) and the cache
    // (cache_size = 20 pages) before failing on its last row.
    p.all(&[
        "PRAGMA cache_size = 20",
        "CREATE TABLE u(id INTEGER PRIMARY KEY, b BLOB)",
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000)
         INSERT INTO u SELECT i, zeroblob(600) FROM n",
        "BEGIN",
        "INSERT INTO u VALUES (5000, 'in txn')",
        "UPDATE u SET b = CAST(printf('%.600c', char(65 + id % 26)) AS BLOB),
                      id = CASE WHEN id = 2000 THEN 1 ELSE id END",
        "SELECT count(*), sum(length(b)), sum(b = zeroblob(600)) FROM u",
        "UPDATE u SET b = CAST(printf('%.600c', char(65 + id % 26)) AS BLOB) WHERE id % 2 = 0",
        "COMMIT",
        "SELECT count(*), sum(b = zeroblob(600)) FROM u",
    ]);
    // Rolling back a transaction whose pages were spilled to the database
    // file mid-transaction.
    p.all(&[
        "BEGIN",
        "WITH RECURSIVE n(i) AS (SELECT 10000 UNION ALL SELECT i + 1 FROM n WHERE i < 14000)
         INSERT INTO u SELECT i, CAST(printf('%.900c', 'w') AS BLOB) FROM n",
        "DELETE FROM u WHERE id < 1000",
        "SELECT count(*) FROM u",
        "ROLLBACK",
        "SELECT count(*), max(id) FROM u",
        "PRAGMA cache_size = -2000",
    ]);
    // A deferred foreign key makes COMMIT fail; the transaction stays open.
    p.all(&[
        "PRAGMA foreign_keys = ON",
        "CREATE TABLE parent(id INTEGER PRIMARY KEY)",
        "CREATE TABLE child(pid REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED)",
        "BEGIN",
        "INSERT INTO child VALUES (7)",
    ]);
    let err = p.both("COMMIT");
    assert!(err.contains("FOREIGN KEY") && err.ends_with("[in txn]"), "{err}");
    p.all(&["INSERT INTO parent VALUES (7)", "COMMIT", "SELECT * FROM child"]);
}

#[test]
fn rollback_savepoints_and_statement_rollback() {
    let mut p = Pair::new();
    transactions_workload(&mut p);
    p.reopen(&[]);
}

#[test]
fn journal_modes_delete_truncate_persist_memory_behave_the_same() {
    for mode in ["delete", "truncate", "persist", "memory"] {
        let mut p = Pair::new();
        p.expect(&format!("PRAGMA journal_mode = {mode}"), &format!("['{mode}']"));
        transactions_workload(&mut p);
        p.expect("PRAGMA journal_mode", &format!("['{mode}']"));
        p.integrity();
        // onesync never puts a journal on disk (stock TRUNCATE and PERSIST
        // leave one behind); its side file lives in /dev/shm, bound to the inode.
        let files = p.files();
        assert!(
            files.contains(&"onesync.db".to_owned()) && files.iter().all(|f| !f.starts_with("onesync.db-")),
            "{mode}: {files:?}"
        );
        p.reopen(&[]);
        eprintln!("journal_mode={mode}: same on both; files {files:?}");
    }
}

#[test]
fn drop_and_create_tables_and_indexes() {
    let mut p = Pair::new();
    p.all(&[
        "CREATE TABLE a(x INTEGER PRIMARY KEY, y TEXT, z)",
        "CREATE INDEX a_y ON a(y)",
        "CREATE UNIQUE INDEX a_z ON a(z)",
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000)
         INSERT INTO a SELECT i, printf('name-%05d', i % 700), i * 3 FROM n",
        "CREATE TABLE b(k TEXT PRIMARY KEY, v) WITHOUT ROWID",
        "INSERT INTO b SELECT y, count(*) FROM a GROUP BY y",
        "PRAGMA page_count",
        "PRAGMA freelist_count",
        "DROP INDEX a_y",
        "PRAGMA freelist_count",
        "SELECT count(*) FROM a WHERE y = 'name-00042'",
        "INSERT INTO a VALUES (5000, 'dup z', 9)",
        // DROP rolled back.
        "BEGIN",
        "DROP TABLE a",
        "SELECT count(*) FROM sqlite_schema",
        "ROLLBACK",
        "SELECT count(*) FROM a",
        // DROP, then CREATE again under the same name, in one transaction.
        "BEGIN",
        "DROP TABLE b",
        "CREATE TABLE b(k, v, w)",
        "CREATE INDEX b_kv ON b(k, v)",
        "INSERT INTO b SELECT x, y, z FROM a WHERE x % 10 = 0",
        "COMMIT",
        "SELECT count(*), sum(k) FROM b",
        "CREATE INDEX a_y ON a(y DESC)",
        "ALTER TABLE a ADD COLUMN extra DEFAULT 'e'",
        "ALTER TABLE b RENAME TO b2",
        "ALTER TABLE b2 RENAME COLUMN w TO w2",
        "DROP TABLE a",
        "PRAGMA page_count",
        "PRAGMA freelist_count",
        "CREATE TABLE a(only_one)",
        "INSERT INTO a VALUES ('new a')",
        "REINDEX",
        "ANALYZE",
        "SELECT tbl, idx FROM sqlite_stat1 ORDER BY tbl, idx",
    ]);
    p.reopen(&[]);
}

#[test]
fn vacuum_shrinks_the_database() {
    let mut p = Pair::new();
    p.all(&[
        "CREATE TABLE t(id INTEGER PRIMARY KEY, b BLOB)",
        "CREATE INDEX t_b ON t(substr(b, 1, 20))",
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 6000)
         INSERT INTO t SELECT i, CAST(printf('%05d%.1500c', i, char(97 + i % 26)) AS BLOB) FROM n",
    ]);
    let before = p.both("PRAGMA page_count");
    p.all(&["DELETE FROM t WHERE id % 10 != 0", "PRAGMA freelist_count"]);
    assert_eq!(
        p.both("PRAGMA page_count"),
        before,
        "DELETE alone does not shrink"
    );
    p.both("VACUUM");
    let after = p.both("PRAGMA page_count");
    p.expect("PRAGMA freelist_count", "[0]");
    let pages = |s: &str| s.trim_matches(['[', ']']).parse::<u64>().unwrap();
    assert!(
        pages(&after) * 5 < pages(&before),
        "VACUUM shrinks: {before} -> {after} pages"
    );
    // The stock file shrinks with it; onesync's logical file does (page_count
    // above is derived from its size).
    assert_eq!(
        file_len(&p.sides[0].path),
        pages(&after) * 4096,
        "stock file size"
    );
    eprintln!(
        "VACUUM: page_count {before} -> {after}; stock file {} bytes, onesync store file {} bytes",
        file_len(&p.sides[0].path),
        file_len(&p.sides[1].path)
    );
    // VACUUM inside a transaction is refused alike; a rolled-back
    // transaction after VACUUM works.
    p.all(&[
        "BEGIN",
        "VACUUM",
        "ROLLBACK",
        "BEGIN",
        "DELETE FROM t",
        "ROLLBACK",
        "SELECT count(*), sum(length(b)) FROM t",
    ]);
    p.reopen(&[]);
    // auto_vacuum=FULL / INCREMENTAL shrink the file without VACUUM.
    p.all(&[
        "PRAGMA auto_vacuum = INCREMENTAL",
        "VACUUM",
        "PRAGMA auto_vacuum",
        "INSERT INTO t SELECT id + 100000, b FROM t",
        "INSERT INTO t SELECT id + 200000, b FROM t",
        "PRAGMA page_count",
        "DELETE FROM t WHERE id > 100000",
        "PRAGMA freelist_count",
        "PRAGMA incremental_vacuum(50)",
        "PRAGMA freelist_count",
        "PRAGMA page_count",
        "PRAGMA auto_vacuum = FULL",
        "VACUUM",
        "INSERT INTO t SELECT id + 100000, b FROM t",
        "DELETE FROM t WHERE id > 100000",
        "PRAGMA freelist_count",
        "PRAGMA page_count",
    ]);
    p.reopen(&[]);
}

#[test]
fn page_sizes_set_before_the_first_write() {
    for page_size in [1024, 8192, 65536] {
        let mut p = Pair::new();
        p.all(&[
            &format!("PRAGMA page_size = {page_size}"),
            "PRAGMA page_size",
            "CREATE TABLE t(id INTEGER PRIMARY KEY, b BLOB)",
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000)
             INSERT INTO t SELECT i, CAST(printf('%.300c', char(65 + i % 26)) AS BLOB) FROM n",
            "PRAGMA page_count",
            "BEGIN",
            "UPDATE t SET b = x'00' WHERE id % 2 = 0",
            "ROLLBACK",
            "SAVEPOINT x",
            "DELETE FROM t WHERE id % 3 = 0",
            "RELEASE x",
            "PRAGMA page_size",
            "VACUUM",
            "PRAGMA page_count",
            "SELECT count(*), sum(length(b)) FROM t",
        ]);
        p.expect("PRAGMA page_size", &format!("[{page_size}]"));
        p.reopen(&[]);
        p.expect("PRAGMA page_size", &format!("[{page_size}]"));
        // Changing the page size of a database with content: VACUUM rebuilds it.
        let other = if page_size == 8192 { 2048 } else { 8192 };
        p.all(&[
            &format!("PRAGMA page_size = {other}"),
            "VACUUM",
            "PRAGMA page_size",
            "PRAGMA page_count",
        ]);
        p.reopen(&[]);
        p.expect("PRAGMA page_size", &format!("[{other}]"));
    }
}

#[test]
fn attached_database_and_a_two_database_transaction() {
    let mut p = Pair::new();
    p.both_with(|s| format!("ATTACH '{}' AS aux", s.attach_target("aux")));
    p.all(&[
        "SELECT seq, name FROM pragma_database_list",
        "CREATE TABLE main.acct(id INTEGER PRIMARY KEY, bal INTEGER NOT NULL CHECK (bal >= 0))",
        "CREATE TABLE aux.acct(id INTEGER PRIMARY KEY, bal INTEGER NOT NULL CHECK (bal >= 0))",
        "CREATE INDEX aux.acct_bal ON acct(bal)",
        "INSERT INTO main.acct VALUES (1, 100), (2, 50)",
        "INSERT INTO aux.acct VALUES (1, 0), (2, 0)",
        // Committed across both.
        "BEGIN",
        "UPDATE main.acct SET bal = bal - 30 WHERE id = 1",
        "UPDATE aux.acct SET bal = bal + 30 WHERE id = 1",
        "COMMIT",
        // Rolled back across both.
        "BEGIN",
        "UPDATE main.acct SET bal = 0",
        "UPDATE aux.acct SET bal = 999",
        "SELECT sum(bal) FROM main.acct",
        "ROLLBACK",
        "SELECT (SELECT sum(bal) FROM main.acct), (SELECT sum(bal) FROM aux.acct)",
        // Savepoint across both, partly rolled back, then committed.
        "SAVEPOINT tx",
        "UPDATE main.acct SET bal = bal - 10 WHERE id = 2",
        "UPDATE aux.acct SET bal = bal + 10 WHERE id = 2",
        "SAVEPOINT inner_sp",
        "UPDATE main.acct SET bal = bal - 40 WHERE id = 2",
        "UPDATE aux.acct SET bal = bal + 40 WHERE id = 2",
        "ROLLBACK TO inner_sp",
        "RELEASE tx",
        // A statement failing on the CHECK in aux, mid-transaction.
        "BEGIN",
        "UPDATE main.acct SET bal = bal + 1",
        "UPDATE aux.acct SET bal = bal - 20",
        "UPDATE aux.acct SET bal = bal + 1",
        "COMMIT",
        "SELECT 'main', * FROM main.acct UNION ALL SELECT 'aux', * FROM aux.acct",
        // Only aux written, only main written.
        "INSERT INTO aux.acct VALUES (3, 3)",
        "INSERT INTO main.acct VALUES (3, 3)",
        // A bigger two-database transaction, rolled back, then committed.
        "CREATE TABLE aux.log(id INTEGER PRIMARY KEY, note BLOB)",
        "BEGIN",
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000)
         INSERT INTO aux.log SELECT i, CAST(printf('%.400c', 'n') AS BLOB) FROM n",
        "UPDATE main.acct SET bal = bal + 1000",
        "ROLLBACK",
        "BEGIN",
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000)
         INSERT INTO aux.log SELECT i, CAST(printf('%.400c', 'm') AS BLOB) FROM n",
        "UPDATE main.acct SET bal = bal + 1000",
        "COMMIT",
        "SELECT count(*) FROM aux.log",
        "SELECT sum(bal) FROM main.acct",
    ]);
    p.reopen(&["aux"]);
    p.all(&[
        "SELECT 'main', * FROM main.acct UNION ALL SELECT 'aux', * FROM aux.acct",
        "DETACH aux",
        "SELECT seq, name FROM pragma_database_list",
    ]);
    // The onesync side is one file, the store (its side file is in /dev/shm).
    let files = p.files();
    assert!(
        files.contains(&"onesync.db".to_owned())
            && files.iter().filter(|f| f.starts_with("onesync")).count() == 1,
        "{files:?}"
    );
}

/// `PRAGMA journal_mode` never fails on a store (crates/vfs/README.md, "journal_mode"): WAL
/// is answered `wal` and remembered; OFF gets the mode in effect; other modes and unknown
/// names are SQLite's, as stock.
#[test]
fn journal_mode_wal_is_answered_wal_and_off_the_mode_in_effect() {
    let mut p = Pair::new();
    p.all(&["CREATE TABLE t(a UNIQUE)", "INSERT INTO t VALUES (1)"]);
    // Names stock does not know are a query, on both; so is OFF on a store.
    p.expect("PRAGMA journal_mode = wal2", "['delete']");
    let conn = p.onesync();
    let rollbacks_work = |after: &str| {
        conn.execute_batch("BEGIN; INSERT INTO t VALUES (2); ROLLBACK;")
            .unwrap();
        // One statement, failing at its third row: its first two are undone too.
        let got = outcome(conn, "INSERT INTO t VALUES (3), (4), (1)");
        assert!(got.starts_with("ERROR 2067 "), "after {after}: {got}");
        assert_eq!(outcome(conn, "SELECT count(*) FROM t"), "[1]", "after {after}");
    };
    for (pragma, answer) in [
        ("PRAGMA journal_mode = OFF", "delete"),
        ("PRAGMA journal_mode = WAL", "wal"),
        ("PRAGMA journal_mode", "wal"),
        ("PRAGMA main.journal_mode", "wal"),
        ("PRAGMA journal_mode = off", "wal"),
        ("PRAGMA journal_mode = wal2", "wal"),
        ("PRAGMA journal_mode = delete", "delete"),
        ("PRAGMA journal_mode", "delete"),
        ("PRAGMA main.journal_mode = 'Wal'", "wal"),
        ("PRAGMA journal_mode = memory", "memory"),
        ("PRAGMA journal_mode = Off", "memory"),
        ("PRAGMA journal_mode", "memory"),
        ("PRAGMA journal_mode = w", "wal"),
        ("PRAGMA journal_mode = persist", "persist"),
        ("PRAGMA journal_mode = o", "persist"),
        ("PRAGMA journal_mode = DELETE", "delete"),
    ] {
        assert_eq!(outcome(conn, pragma), format!("['{answer}']"), "{pragma}");
        rollbacks_work(pragma);
    }
    // After WAL, a second connection reads while this one writes, and the write commits.
    assert_eq!(outcome(conn, "PRAGMA journal_mode = WAL"), "['wal']");
    let reader = p.sides[1].open();
    assert_eq!(outcome(&reader, "PRAGMA journal_mode = WAL"), "['wal']");
    reader.execute_batch("BEGIN; SELECT count(*) FROM t;").unwrap();
    conn.execute_batch("BEGIN; INSERT INTO t VALUES (5); INSERT INTO t VALUES (6); COMMIT;")
        .unwrap();
    assert_eq!(outcome(&reader, "SELECT count(*) FROM t"), "[1] [in txn]");
    reader.execute_batch("COMMIT").unwrap();
    assert_eq!(outcome(&reader, "SELECT count(*) FROM t"), "[3]");
    drop(reader);
    // A fresh, empty store answers the same, before its first write.
    let dir = tempfile::tempdir().unwrap();
    let fresh = Side {
        label: "onesync (fresh)",
        onesync: true,
        path: dir.path().join("fresh.db"),
    }
    .open();
    assert_eq!(outcome(&fresh, "PRAGMA journal_mode = OFF"), "['delete']");
    assert_eq!(outcome(&fresh, "PRAGMA journal_mode = WAL"), "['wal']");
    assert_eq!(outcome(&fresh, "PRAGMA journal_mode"), "['wal']");
    // WAL stays the answer for every later connection, as stock keeps WAL in the file,
    // until one asks for another mode.
    let fresh_side = Side {
        label: "onesync (fresh, later)",
        onesync: true,
        path: dir.path().join("fresh.db"),
    };
    drop(fresh);
    let later = fresh_side.open();
    assert_eq!(outcome(&later, "PRAGMA journal_mode"), "['wal']");
    assert_eq!(outcome(&later, "PRAGMA journal_mode = delete"), "['delete']");
    drop(later);
    assert_eq!(outcome(&fresh_side.open(), "PRAGMA journal_mode"), "['delete']");
    // The stock VFS takes WAL and OFF (the difference is on purpose).
    assert_eq!(outcome(&p.conns()[0], "PRAGMA journal_mode = WAL"), "['wal']");
    assert_eq!(outcome(&p.conns()[0], "PRAGMA journal_mode = OFF"), "['off']");
    assert_eq!(
        outcome(&p.conns()[0], "PRAGMA journal_mode = DELETE"),
        "['delete']"
    );
    p.integrity();
}

/// An ATTACHed store: SQLite sends a pragma's file control to one file (the named schema's,
/// else main's), so each store answers for itself.
#[test]
fn journal_mode_on_attached_stores_and_plain_files() {
    let mut p = Pair::new();
    p.all(&["CREATE TABLE t(a)"]);
    let aux = p.sides[1].attach_target("aux");
    let conn = p.onesync();
    conn.execute("ATTACH ?1 AS aux", [&aux]).unwrap();
    conn.execute_batch("CREATE TABLE aux.t(a)").unwrap();
    // Without a schema name: main's store answers; aux keeps its mode (stock switches both).
    assert_eq!(outcome(conn, "PRAGMA journal_mode = WAL"), "['wal']");
    assert_eq!(outcome(conn, "PRAGMA aux.journal_mode"), "['delete']");
    assert_eq!(outcome(conn, "PRAGMA aux.journal_mode = WAL"), "['wal']");
    assert_eq!(outcome(conn, "PRAGMA aux.journal_mode = OFF"), "['wal']");
    assert_eq!(outcome(conn, "PRAGMA aux.journal_mode = MEMORY"), "['memory']");
    assert_eq!(outcome(conn, "PRAGMA aux.journal_mode = OFF"), "['memory']");
    assert_eq!(outcome(conn, "PRAGMA main.journal_mode"), "['wal']");
    conn.execute_batch("BEGIN; INSERT INTO t VALUES (1); INSERT INTO aux.t VALUES (1); COMMIT;")
        .unwrap();
    conn.execute_batch("BEGIN; INSERT INTO t VALUES (2); INSERT INTO aux.t VALUES (2); ROLLBACK;")
        .unwrap();
    assert_eq!(outcome(conn, "SELECT count(*) FROM t"), "[1]");
    assert_eq!(outcome(conn, "SELECT count(*) FROM aux.t"), "[1]");

    // A plain main file with a store attached: the pragma without a schema name is main's
    // (SQLite runs it on every database); naming the store gets the store's answer.
    let plain = Connection::open(p.dir.path().join("plain.db")).unwrap();
    plain.execute("ATTACH ?1 AS s", [&aux]).unwrap();
    for (pragma, answer) in [
        ("PRAGMA s.journal_mode = WAL", "wal"),
        ("PRAGMA s.journal_mode = OFF", "wal"),
        ("PRAGMA s.journal_mode", "wal"),
        ("PRAGMA s.journal_mode = DELETE", "delete"),
        ("PRAGMA s.journal_mode = OFF", "delete"),
    ] {
        assert_eq!(outcome(&plain, pragma), format!("['{answer}']"), "{pragma}");
    }
    // SQLite runs these itself, on every database: the store, whose pager cannot take WAL,
    // stays as it is, and takes OFF as stock does (its commits stay atomic).
    for (pragma, answer) in [
        ("PRAGMA journal_mode = WAL", "wal"),
        ("PRAGMA s.journal_mode", "delete"),
        ("PRAGMA journal_mode = OFF", "off"),
        ("PRAGMA s.journal_mode", "off"),
        ("PRAGMA journal_mode = DELETE", "delete"),
        ("PRAGMA s.journal_mode", "delete"),
    ] {
        assert_eq!(
            outcome(&plain, pragma),
            format!("['{answer}']"),
            "plain main: {pragma}"
        );
    }
    drop(plain);
    p.integrity();
}

/// Grows a database past 1 GiB and shrinks it back with VACUUM, on both.
/// Only with ONESYNC_BIG_TESTS=1 (writes about 2.5 GB per side).
#[test]
fn grows_past_one_gib_and_shrinks_with_vacuum() {
    if !big_tests() {
        eprintln!("SKIPPED: set ONESYNC_BIG_TESTS=1 to grow a database past 1 GiB");
        return;
    }
    let started = std::time::Instant::now();
    let mut p = Pair::new();
    p.all(&["CREATE TABLE big(id INTEGER PRIMARY KEY, b BLOB)"]);
    // 17 transactions of 8,192 rows of 8,000 bytes: 1.11 GB of payload.
    for batch in 0..17i64 {
        p.both(&format!(
            "WITH RECURSIVE n(i) AS (SELECT {lo} UNION ALL SELECT i + 1 FROM n WHERE i < {hi})
             INSERT INTO big SELECT i, CAST(printf('%08d%.7992c', i, char(65 + i % 26)) AS BLOB) FROM n",
            lo = batch * 8192,
            hi = batch * 8192 + 8191
        ));
    }
    let grown = p.both("PRAGMA page_count");
    let pages = |s: &str| s.trim_matches(['[', ']']).parse::<u64>().unwrap();
    assert!(pages(&grown) * 4096 > 1 << 30, "past 1 GiB: {grown} pages");
    let stock_grown = file_len(&p.sides[0].path);
    let store_grown = file_len(&p.sides[1].path);
    p.all(&[
        "SELECT count(*), sum(length(b)) FROM big",
        "BEGIN",
        "DELETE FROM big WHERE id % 100 != 0",
        "SELECT count(*) FROM big",
        "ROLLBACK",
        "SELECT count(*) FROM big",
        "DELETE FROM big WHERE id % 100 != 0",
        "PRAGMA freelist_count",
        "VACUUM",
    ]);
    let shrunk = p.both("PRAGMA page_count");
    assert!(
        pages(&shrunk) * 50 < pages(&grown),
        "VACUUM shrinks: {grown} -> {shrunk}"
    );
    p.expect("PRAGMA freelist_count", "[0]");
    let stats: String = p
        .onesync()
        .query_row("PRAGMA onesync_stats", [], |r| r.get(0))
        .unwrap();
    p.reopen(&[]);
    let reopened: String = p
        .onesync()
        .query_row("PRAGMA onesync_stats", [], |r| r.get(0))
        .unwrap();
    let store_shrunk = file_len(&p.sides[1].path);
    eprintln!(
        "1 GiB: page_count {grown} -> {shrunk}; stock file {stock_grown} -> {} bytes; \
         onesync store file {store_grown} -> {store_shrunk} bytes; onesync_stats after VACUUM \
         {stats}; after reopen {reopened}; {:.1} s",
        file_len(&p.sides[0].path),
        started.elapsed().as_secs_f64()
    );
    // The store file keeps its size (slots are reused, not given back to
    // the filesystem); growing the database again must reuse them.
    for batch in 0..4i64 {
        p.both(&format!(
            "WITH RECURSIVE n(i) AS (SELECT {lo} UNION ALL SELECT i + 1 FROM n WHERE i < {hi})
             INSERT INTO big SELECT i, CAST(printf('%08d%.7992c', i, char(97 + i % 26)) AS BLOB) FROM n",
            lo = 1_000_000 + batch * 8192,
            hi = 1_000_000 + batch * 8192 + 8191
        ));
    }
    p.reopen(&[]);
    let regrown = file_len(&p.sides[1].path);
    eprintln!("1 GiB: after re-inserting 270 MB, onesync store file {regrown} bytes");
    assert!(
        regrown <= store_grown,
        "the store file grew from {store_grown} to {regrown} bytes when the database grew \
         back to a quarter of its former size: freed slots are not reused"
    );
    assert!(p.count(1, "SELECT count(*) FROM big") > 30000);
}
