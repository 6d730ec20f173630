//! A transaction over a store and plain SQLite files, or two stores, commits atomically by
//! SQLite's super-journal protocol, the store's journal on disk while it takes part
//! (`src/store_journal.rs`).
//!
//! The crash test stops a process committing one bank transfer between two databases at
//! each of its write, flush, truncate and unlink calls in turn (strace fault injection:
//! SIGKILL at the k-th call), then recovers the two databases in both orders — the plain
//! file first through Debian's stock `sqlite3` without onesync, or the store first — and
//! requires that the transfer is in both databases or in neither, money is conserved, and
//! both pass `integrity_check`. The process is this test binary itself (a worker test), so
//! that the negative control's build (`--features test-hooks`) runs the sabotaged VFS.
//!
//! Tests that need `sqlite3` or `strace` skip, saying so.

use std::path::{Path, PathBuf};
use std::process::Command;

use onesync_vfs::{api_table_from_sys, register_static, VFS_NAME};
use rusqlite::{Connection, OpenFlags};

const WORKER: &str = "worker_commits_one_transfer";
/// Where the worker works, and how (set by the test that starts it).
const DIR_ENV: &str = "ONESYNC_TEST_MULTI_FILE_DIR";
const SETUP_ENV: &str = "ONESYNC_TEST_MULTI_FILE_SETUP";
const ROWS: i64 = 50;
const START_BALANCE: i64 = 100;

mod common;

fn have(program: &str) -> bool {
    let found = common::have(program, &["--version"]);
    if !found {
        eprintln!("skipped: {program} not found");
    }
    found
}

fn registered() {
    register_static(&api_table_from_sys!(rusqlite::ffi)).expect("register onesync");
}

fn store_uri(path: &Path) -> String {
    format!("file:{}?vfs={VFS_NAME}", path.display())
}

/// The two databases' roles in one setup.
#[derive(Clone, Copy, Debug)]
enum Setup {
    /// A store opened with onesync, a plain file attached (its journal and the
    /// super-journal through onesync).
    StoreMainPlainAttached,
    /// A plain file opened with the unix VFS, a store attached (the super-journal is the
    /// unix VFS's).
    PlainMainStoreAttached,
    /// Two stores.
    TwoStores,
}

impl Setup {
    const ALL: [Setup; 3] = [
        Setup::StoreMainPlainAttached,
        Setup::PlainMainStoreAttached,
        Setup::TwoStores,
    ];

    fn name(self) -> &'static str {
        match self {
            Setup::StoreMainPlainAttached => "store-main-plain-attached",
            Setup::PlainMainStoreAttached => "plain-main-store-attached",
            Setup::TwoStores => "two-stores",
        }
    }

    fn parse(name: &str) -> Setup {
        Setup::ALL
            .into_iter()
            .find(|s| s.name() == name)
            .unwrap_or_else(|| panic!("no setup {name}"))
    }

    /// The databases, `a` and `b`; which of them are stores.
    fn paths(self, dir: &Path) -> [(PathBuf, bool); 2] {
        let (a_store, b_store) = match self {
            Setup::StoreMainPlainAttached => (true, false),
            Setup::PlainMainStoreAttached => (false, true),
            Setup::TwoStores => (true, true),
        };
        [(dir.join("a.db"), a_store), (dir.join("b.db"), b_store)]
    }
}

/// A connection with `a` as main and `b` attached, each through the VFS its setup says.
fn connect(setup: Setup, dir: &Path, synchronous: &str) -> Connection {
    registered();
    let [(a, a_store), (b, b_store)] = setup.paths(dir);
    let flags = OpenFlags::default() | OpenFlags::SQLITE_OPEN_URI;
    let conn = if a_store {
        Connection::open_with_flags(store_uri(&a), flags).unwrap()
    } else {
        Connection::open_with_flags(format!("file:{}?vfs=unix", a.display()), flags).unwrap()
    };
    let attach = if b_store {
        store_uri(&b)
    } else {
        b.display().to_string()
    };
    conn.execute("ATTACH ?1 AS b", [attach]).unwrap();
    conn.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
    conn.execute_batch(&format!(
        "PRAGMA main.synchronous={synchronous}; PRAGMA b.synchronous={synchronous};"
    ))
    .unwrap();
    conn
}

/// Both databases with `ROWS` accounts of `START_BALANCE` and an empty transfer log.
fn create_banks(setup: Setup, dir: &Path) {
    let conn = connect(setup, dir, "FULL");
    for schema in ["main", "b"] {
        conn.execute_batch(&format!(
            "CREATE TABLE {schema}.acct(id INTEGER PRIMARY KEY, bal, pad);
             WITH RECURSIVE n(v) AS (SELECT 1 UNION ALL SELECT v + 1 FROM n WHERE v < {ROWS})
             INSERT INTO {schema}.acct SELECT v, {START_BALANCE}, randomblob(600) FROM n;
             CREATE TABLE {schema}.log(transfer INTEGER PRIMARY KEY);"
        ))
        .unwrap();
    }
}

/// One transfer from `a` to `b`, logged in both, touching many pages of each (so that a
/// crash can fall between any two of their writes).
fn transfer(conn: &Connection, id: i64) -> rusqlite::Result<()> {
    conn.execute_batch(&format!(
        "BEGIN;
         UPDATE main.acct SET bal = bal - 1, pad = randomblob(600) WHERE id % 3 = {id} % 3;
         UPDATE b.acct SET bal = bal + 1, pad = randomblob(600) WHERE id % 3 = {id} % 3;
         INSERT INTO main.log VALUES ({id});
         INSERT INTO b.log VALUES ({id});
         COMMIT;"
    ))
}

/// The process the crash test stops: commits one transfer (`ONESYNC_TEST_MULTI_FILE_*`).
#[test]
#[ignore = "run by the crash tests, in a process of its own"]
fn worker_commits_one_transfer() {
    let dir = PathBuf::from(std::env::var(DIR_ENV).expect("run by the crash test"));
    let setup_and_sync = std::env::var(SETUP_ENV).unwrap();
    let (setup, synchronous) = setup_and_sync.split_once(':').unwrap();
    let conn = connect(Setup::parse(setup), &dir, synchronous);
    transfer(&conn, 7).unwrap();
}

/// Runs the worker under strace, killed at the `kill_at`-th traced call (0: not killed);
/// returns how many traced calls it made.
fn run_worker(dir: &Path, setup: Setup, synchronous: &str, kill_at: usize, sabotage: Option<&str>) -> usize {
    let trace = dir.join("strace.out");
    let calls = "pwrite64,write,fsync,fdatasync,ftruncate,unlink";
    let mut cmd = Command::new("strace");
    cmd.args(["-f", "-qq", "-o"])
        .arg(&trace)
        .args(["-e", &format!("trace={calls}")]);
    if kill_at > 0 {
        cmd.args(["-e", &format!("inject={calls}:signal=KILL:when={kill_at}")]);
    }
    cmd.arg(std::env::current_exe().unwrap())
        .args(["--exact", WORKER, "--ignored", "--test-threads", "1", "-q"])
        .env(DIR_ENV, dir)
        .env(SETUP_ENV, format!("{}:{synchronous}", setup.name()));
    match sabotage {
        Some(s) => cmd.env("ONESYNC_SABOTAGE", s),
        None => cmd.env_remove("ONESYNC_SABOTAGE"),
    };
    let out = cmd.output().unwrap();
    if kill_at == 0 {
        assert!(
            out.status.success(),
            "the worker failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = std::fs::read_to_string(&trace).unwrap_or_default();
    std::fs::remove_file(&trace).ok();
    // The worker's own calls: the test harness writes its report to stdout at the end.
    text.lines()
        .filter(|l| !l.contains("+++") && !l.contains("---"))
        .count()
}

/// What a database holds after recovery: (integrity_check, sum of balances, transfers).
fn read_back(path: &Path, store: bool) -> (String, i64, Vec<i64>) {
    let sql = "PRAGMA integrity_check; SELECT sum(bal) FROM acct; SELECT group_concat(transfer) FROM log;";
    let lines: Vec<String> = if store {
        registered();
        let conn =
            Connection::open_with_flags(store_uri(path), OpenFlags::default() | OpenFlags::SQLITE_OPEN_URI)
                .unwrap();
        let check: String = conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        let sum: i64 = conn
            .query_row("SELECT sum(bal) FROM acct", [], |r| r.get(0))
            .unwrap();
        let log: Option<String> = conn
            .query_row("SELECT group_concat(transfer) FROM log", [], |r| r.get(0))
            .unwrap();
        vec![check, sum.to_string(), log.unwrap_or_default()]
    } else {
        // Debian's stock SQLite, no onesync: its own crash recovery of the plain file.
        let out = Command::new("sqlite3").arg(path).arg(sql).output().unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    };
    let check = lines.first().cloned().unwrap_or_default();
    let sum = lines.get(1).and_then(|l| l.parse().ok()).unwrap_or(-1);
    let log = lines
        .get(2)
        .map(|l| l.split(',').filter_map(|t| t.parse().ok()).collect())
        .unwrap_or_default();
    (check, sum, log)
}

/// Recovers the two databases, plain files first (through stock SQLite) or stores first;
/// returns what is wrong, if anything.
fn check_atomic(dir: &Path, setup: Setup, stores_first: bool) -> Option<String> {
    let mut dbs = setup.paths(dir).to_vec();
    dbs.sort_by_key(|(_, store)| *store != stores_first);
    let mut seen = Vec::new();
    for (path, store) in &dbs {
        seen.push((
            path.file_name().unwrap().to_string_lossy().into_owned(),
            read_back(path, *store),
        ));
    }
    let total: i64 = seen.iter().map(|(_, (_, sum, _))| sum).sum();
    let logs: Vec<&Vec<i64>> = seen.iter().map(|(_, (_, _, log))| log).collect();
    let fine = seen.iter().all(|(_, (check, _, _))| check == "ok")
        && total == 2 * ROWS * START_BALANCE
        && logs[0] == logs[1];
    (!fine).then(|| {
        format!(
            "recovered ({}first): {seen:?}",
            if stores_first { "stores " } else { "plain files " }
        )
    })
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

/// A directory with `template/` (both banks set up) and the number of calls the worker
/// makes committing its transfer there (a run without a kill, which must commit it in both).
fn banks_and_calls(
    setup: Setup,
    synchronous: &str,
    sabotage: Option<&str>,
) -> (tempfile::TempDir, PathBuf, usize) {
    let root = tempfile::tempdir().unwrap();
    let template = root.path().join("template");
    std::fs::create_dir(&template).unwrap();
    create_banks(setup, &template);
    let dry = root.path().join("dry");
    copy_dir(&template, &dry);
    let calls = run_worker(&dry, setup, synchronous, 0, sabotage);
    assert!(calls > 10, "{}: only {calls} calls traced", setup.name());
    assert!(check_atomic(&dry, setup, false).is_none());
    (root, template, calls)
}

/// Kills the worker at every traced call in turn; returns the violations found.
fn explore(setup: Setup, synchronous: &str, sabotage: Option<&str>) -> Vec<String> {
    let (root, template, calls) = banks_and_calls(setup, synchronous, sabotage);
    let mut violations = Vec::new();
    for kill_at in 1..=calls {
        // Each order on a run of its own: the journals name the super-journal by its path.
        for stores_first in [false, true] {
            let run = root.path().join(format!("kill-{kill_at}-{stores_first}"));
            copy_dir(&template, &run);
            run_worker(&run, setup, synchronous, kill_at, sabotage);
            if let Some(v) = check_atomic(&run, setup, stores_first) {
                violations.push(format!(
                    "{} {synchronous} killed at call {kill_at}/{calls}: {v}",
                    setup.name()
                ));
            }
            std::fs::remove_dir_all(&run).ok();
        }
    }
    eprintln!(
        "{} synchronous={synchronous}{}: {calls} crash points, 2 recovery orders each, {} violations",
        setup.name(),
        sabotage.map(|s| format!(" sabotage={s}")).unwrap_or_default(),
        violations.len()
    );
    violations
}

#[test]
fn a_store_and_another_database_commit_atomically_across_a_kill_at_every_call() {
    if !have("sqlite3") || !have("strace") || std::env::var_os("ONESYNC_SABOTAGE").is_some() {
        return;
    }
    // The six explorations at once: most of their time is process starts and flushes.
    let violations: Vec<String> = std::thread::scope(|scope| {
        let runs: Vec<_> = Setup::ALL
            .into_iter()
            .flat_map(|setup| ["FULL", "NORMAL"].map(|synchronous| (setup, synchronous)))
            .map(|(setup, synchronous)| scope.spawn(move || explore(setup, synchronous, None)))
            .collect();
        runs.into_iter().flat_map(|run| run.join().unwrap()).collect()
    });
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

/// Another process that has the store open all along (this test's) writes the store after
/// each kill, before anything else opens it: it must find a store journal the killed
/// process left and roll it back first, as stock SQLite checks for a hot journal at every
/// transaction. Else a later recovery plays that journal back over its commit, which is
/// lost (its row in the store's log), even where the killed process never committed.
#[test]
fn a_process_open_beside_rolls_back_what_the_killed_one_left() {
    if !have("sqlite3") || !have("strace") || std::env::var_os("ONESYNC_SABOTAGE").is_some() {
        return;
    }
    let violations: Vec<String> = std::thread::scope(|scope| {
        let runs: Vec<_> = Setup::ALL
            .into_iter()
            .map(|setup| scope.spawn(move || kill_beside_an_open_store(setup)))
            .collect();
        runs.into_iter().flat_map(|run| run.join().unwrap()).collect()
    });
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

/// `setup`'s transfer killed at every traced call while this process keeps the store open;
/// after each kill this process commits a row of its own to the store's log first.
fn kill_beside_an_open_store(setup: Setup) -> Vec<String> {
    const BESIDE: i64 = 1000;
    let (root, template, calls) = banks_and_calls(setup, "FULL", None);
    let mut violations = Vec::new();
    for kill_at in 1..=calls {
        let run = root.path().join(format!("kill-{kill_at}"));
        copy_dir(&template, &run);
        let store = setup.paths(&run).into_iter().find(|(_, s)| *s).unwrap().0;
        registered();
        let flags = OpenFlags::default() | OpenFlags::SQLITE_OPEN_URI;
        let beside = Connection::open_with_flags(store_uri(&store), flags).unwrap();
        beside.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
        let _: i64 = beside
            .query_row("SELECT count(*) FROM log", [], |r| r.get(0))
            .unwrap();
        run_worker(&run, setup, "FULL", kill_at, None);
        let label = format!("{} killed at call {kill_at}/{calls}", setup.name());
        if let Err(e) = beside.execute("INSERT INTO log VALUES (?1)", [BESIDE]) {
            violations.push(format!("{label}: the write beside failed: {e}"));
        }
        drop(beside);
        // The plain file first, through stock SQLite; the transfer (7) in both or in
        // neither, money conserved, and the row committed beside kept.
        let mut dbs = setup.paths(&run).to_vec();
        dbs.sort_by_key(|(_, store)| *store);
        let seen: Vec<_> = dbs
            .iter()
            .map(|(path, store)| (*store, read_back(path, *store)))
            .collect();
        let total: i64 = seen.iter().map(|(_, (_, sum, _))| sum).sum();
        let transferred: Vec<bool> = seen.iter().map(|(_, (_, _, log))| log.contains(&7)).collect();
        let kept_beside = seen
            .iter()
            .any(|(store, (_, _, log))| *store && log.contains(&BESIDE));
        let fine = seen.iter().all(|(_, (check, _, _))| check == "ok")
            && total == 2 * ROWS * START_BALANCE
            && transferred[0] == transferred[1]
            && kept_beside;
        if !fine {
            violations.push(format!("{label}: recovered {seen:?}"));
        }
        std::fs::remove_dir_all(&run).ok();
    }
    violations
}

/// The negative control: with the store's journal kept in memory, a kill between the
/// store's commit and the super-journal's deletion leaves the store committed and the
/// plain file rolled back.
#[cfg(feature = "test-hooks")] // the VFS reads ONESYNC_SABOTAGE only then
#[test]
fn negative_control_store_journal_in_memory_breaks_atomicity() {
    if !have("sqlite3") || !have("strace") {
        return;
    }
    let violations = explore(
        Setup::StoreMainPlainAttached,
        "FULL",
        Some("store-journal-in-memory"),
    );
    assert!(
        !violations.is_empty(),
        "with the store's journal in memory no crash point broke atomicity"
    );
}

/// Without a crash: the transaction commits in both, and a rollback undoes both; two
/// databases of one store with a plain file are still refused, and say why.
#[test]
fn commits_and_rollbacks_span_the_store_and_the_other_database() {
    for setup in Setup::ALL {
        let dir = tempfile::tempdir().unwrap();
        create_banks(setup, dir.path());
        let conn = connect(setup, dir.path(), "NORMAL");
        transfer(&conn, 1).unwrap();
        conn.execute_batch("BEGIN; UPDATE main.acct SET bal = 0; UPDATE b.acct SET bal = 0; ROLLBACK;")
            .unwrap();
        transfer(&conn, 2).unwrap();
        drop(conn);
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains("-journal") || n.contains("-mj"))
            .collect();
        assert!(names.is_empty(), "{}: left {names:?}", setup.name());
        for (path, store) in setup.paths(dir.path()) {
            let (check, _, log) = read_back(&path, store);
            assert_eq!((check.as_str(), log), ("ok", vec![1, 2]), "{}", setup.name());
        }
    }
}

#[test]
fn two_databases_of_one_store_with_a_plain_file_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let conn = connect(Setup::StoreMainPlainAttached, dir.path(), "FULL");
    conn.execute(
        "ATTACH ?1 AS aux",
        [format!("{}&db=aux", store_uri(&dir.path().join("a.db")))],
    )
    .unwrap();
    conn.execute_batch("CREATE TABLE main.t(x); CREATE TABLE aux.t(x); CREATE TABLE b.t(x);")
        .unwrap();
    let err = conn
        .execute_batch(
            "BEGIN; INSERT INTO main.t VALUES (1); INSERT INTO aux.t VALUES (1);
             INSERT INTO b.t VALUES (1); COMMIT;",
        )
        .unwrap_err();
    assert!(err.to_string().contains("logic error"), "{err}");
    conn.execute_batch("ROLLBACK").ok();
    let counts: (i64, i64, i64) = conn
        .query_row(
            "SELECT (SELECT count(*) FROM main.t), (SELECT count(*) FROM aux.t), (SELECT count(*) FROM b.t)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(counts, (0, 0, 0));
    // Two databases of the store alone, and the store with the plain file, commit.
    conn.execute_batch("BEGIN; INSERT INTO main.t VALUES (2); INSERT INTO aux.t VALUES (2); COMMIT;")
        .unwrap();
    conn.execute_batch("BEGIN; INSERT INTO main.t VALUES (3); INSERT INTO b.t VALUES (3); COMMIT;")
        .unwrap();
}

/// Run in a process of its own by the next test (the counters are the process's): two
/// databases of one store in one transaction commit as one store commit, with no journal
/// or super-journal written to disk (the super-journal stays in memory).
#[test]
#[ignore = "run by one_store_alone_writes_no_journal_to_disk, in a process of its own"]
fn worker_commits_two_databases_of_one_store() {
    registered();
    let dir = PathBuf::from(std::env::var(DIR_ENV).expect("run by its test"));
    let path = dir.join("a.db");
    let flags = OpenFlags::default() | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(store_uri(&path), flags).unwrap();
    conn.execute("ATTACH ?1 AS aux", [format!("{}&db=aux", store_uri(&path))])
        .unwrap();
    conn.execute_batch("CREATE TABLE main.t(x); CREATE TABLE aux.t(x);")
        .unwrap();
    let before = onesync_vfs::passthrough_io();
    conn.execute_batch("BEGIN; INSERT INTO main.t VALUES (1); INSERT INTO aux.t VALUES (1); COMMIT;")
        .unwrap();
    let after = onesync_vfs::passthrough_io();
    assert_eq!(
        (after.write_calls, after.syncs),
        (before.write_calls, before.syncs),
        "a transaction over two databases of one store wrote or synced a file beside the store"
    );
}

#[test]
fn one_store_alone_writes_no_journal_to_disk() {
    if std::env::var_os("ONESYNC_SABOTAGE").is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "worker_commits_two_databases_of_one_store",
            "--ignored",
            "-q",
        ])
        .env(DIR_ENV, dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
