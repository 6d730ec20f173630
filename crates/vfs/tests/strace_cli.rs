//! The stock `sqlite3` CLI loading `libonesync.so`, measured with `strace`:
//! N transactions of one 100-byte insert each with `synchronous=FULL` make
//! at most 1.02 fsync-family calls and write at most 8.5 KiB (through write
//! syscalls) per transaction, and the database passes `integrity_check`.
//! The control, the same run on a plain file in `journal_mode=DELETE`, makes
//! at least 2 fsync-family calls per transaction. With `synchronous=NORMAL`
//! the same run makes at most 1.05 write calls per transaction (the commit's
//! one `pwrite`; the side file is mapped), at most 0.05 preads and 0.05
//! stat-family calls, and at most one flush per 20 ms
//! interval (plus two per checkpoint of the mapping, and two), and at least
//! one (the background flush runs).
//!
//! The store's growth steps in the window (zeros written and flushed ahead of
//! the commits while a new store grows: once in its life, about a dozen
//! flushes and a few MiB here) are not counted in these figures; they are
//! bounded apart (`common::assert_growth_bounded`), read from `PRAGMA
//! onesync_stats` just before and after the window.
//!
//! N = 1,000, or 10,000 with `ONESYNC_BIG_TESTS=1`. The database and its
//! table are created by an untraced run first; the traced run counts only
//! what happens between two `.print` markers around the inserts (the load,
//! the open, and the close's checkpoint are outside; the figures for the
//! whole traced run are printed too). Skipped, saying so, without `strace`
//! or `sqlite3`.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use common::{cdylib, have, report, strace, transactions, BEGIN_MARK, END_MARK};

/// Runs `script` in `sqlite3 -batch :memory:`; panics unless it succeeds
/// without anything on stderr. Returns stdout.
fn sqlite3(script: &str) -> String {
    let out = Command::new("sqlite3")
        .args(["-batch", ":memory:"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(script.as_bytes())?;
            child.wait_with_output()
        })
        .expect("run sqlite3");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.is_empty(),
        "sqlite3 failed\nscript (first 400 bytes): {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        &script[..script.len().min(400)]
    );
    stdout
}

/// `.load` and `.open` lines for the database at `db`: through onesync when
/// `onesync`, else a plain file in journal_mode=DELETE.
fn open_lines(db: &Path, onesync: bool) -> String {
    if onesync {
        let lib = cdylib();
        format!(
            ".load {}\n.open 'file:{}?vfs=onesync'\n",
            lib.with_extension("").display(),
            db.display()
        )
    } else {
        format!(".open '{}'\nPRAGMA journal_mode = DELETE;\n", db.display())
    }
}

/// Per-transaction figures leave out the store's growth steps (see the module's notes).
struct Run {
    per_txn_fsyncs: f64,
    per_txn_bytes: f64,
    per_txn_writes: f64,
    per_txn_preads: f64,
    per_txn_stats: f64,
    fsyncs: u64,
    seconds: f64,
}

fn measure(label: &str, onesync: bool, n: u64, synchronous: &str) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("bench.db");
    let open = open_lines(&db, onesync);
    // Setup, untraced: the database and its table.
    sqlite3(&format!(
        "{open}CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB NOT NULL);\n"
    ));

    let mut script = format!("{open}PRAGMA synchronous = {synchronous};\n");
    if onesync {
        script.push_str("PRAGMA onesync_stats;\n");
    }
    script.push_str(&format!(".print {BEGIN_MARK}\n"));
    for _ in 0..n {
        script.push_str("INSERT INTO t(v) VALUES (randomblob(100));\n");
    }
    script.push_str(&format!(".print {END_MARK}\n"));
    if onesync {
        script.push_str("PRAGMA onesync_stats;\n");
    }
    let script_path = dir.path().join("script.sql");
    std::fs::write(&script_path, &script).unwrap();
    let mut cmd = Command::new("sqlite3");
    cmd.args(["-batch", ":memory:"]);
    let started = Instant::now();
    let traced = strace(cmd, Some(&script_path), &dir.path().join("trace.txt"));
    let seconds = started.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&traced.output.stderr);
    assert!(
        traced.output.status.success() && stderr.is_empty(),
        "{label}: traced sqlite3 failed\nstderr:\n{stderr}"
    );
    print!("{}", report(label, n, seconds, &traced.window));
    let stdout = String::from_utf8_lossy(&traced.output.stdout);
    let stats: Vec<serde_json::Value> = stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (growths, zeros) = match &stats[..] {
        [before, after] => {
            println!("{label}: onesync_stats at the end: {after}");
            let grew = |key: &str| after[key].as_u64().unwrap() - before[key].as_u64().unwrap();
            (grew("growths"), grew("bytes_preallocated"))
        }
        _ => (0, 0),
    };
    if onesync {
        assert_eq!(
            stats.len(),
            2,
            "{label}: onesync_stats before and after\n{stdout}"
        );
        common::assert_growth_bounded(label, growths, zeros);
        println!(
            "{label}: growth steps left out of the figures below: {growths} flushes, {zeros} \
             bytes of zeros"
        );
    }
    println!(
        "{label}: whole traced run (load, open, close): {} fsync-family calls, {} bytes written",
        traced.total.fsyncs(),
        traced.total.bytes_written
    );

    // Untraced check of the result.
    let check = sqlite3(&format!(
        "{open}PRAGMA integrity_check;\nSELECT count(*), min(length(v)), max(length(v)) FROM t;\n"
    ));
    let check: Vec<&str> = check
        .lines()
        .filter(|l| !l.is_empty() && *l != "delete")
        .collect();
    assert_eq!(check, ["ok", &format!("{n}|100|100")], "{label}: after the run");
    let zero_writes = traced.window.zero_writes;
    if onesync {
        assert!(
            growths == 0 || zero_writes > 0,
            "{label}: {growths} growth steps, but no write of zeros in the trace"
        );
    }
    let fsyncs = traced.window.fsyncs().saturating_sub(growths);
    let run = Run {
        per_txn_fsyncs: fsyncs as f64 / n as f64,
        per_txn_bytes: traced.window.bytes_written.saturating_sub(zeros) as f64 / n as f64,
        per_txn_writes: traced.window.writes().saturating_sub(zero_writes) as f64 / n as f64,
        per_txn_preads: traced.window.preads() as f64 / n as f64,
        per_txn_stats: traced.window.stats() as f64 / n as f64,
        fsyncs,
        seconds,
    };
    if onesync {
        println!(
            "{label}: without them: {:.3} fsync-family calls/txn, {:.2} write calls/txn, {:.0} \
             bytes written/txn",
            run.per_txn_fsyncs, run.per_txn_writes, run.per_txn_bytes
        );
    }
    run
}

fn tools_present() -> bool {
    if !have("strace", &["-V"]) {
        eprintln!("SKIPPED: strace not installed (apt-get install strace)");
        return false;
    }
    if !have("sqlite3", &["--version"]) {
        eprintln!("SKIPPED: no sqlite3 CLI on PATH (apt-get install sqlite3)");
        return false;
    }
    // strace may be installed yet unable to trace (no ptrace in a container).
    if !have("strace", &["-f", "-qq", "-o", "/dev/null", "true"]) {
        eprintln!("SKIPPED: strace cannot trace here (ptrace not permitted?)");
        return false;
    }
    true
}

#[test]
fn cli_one_flush_per_transaction_through_onesync() {
    if !tools_present() {
        return;
    }
    let n = transactions();
    let run = measure("sqlite3 CLI + libonesync (synchronous=FULL)", true, n, "FULL");
    assert!(
        run.per_txn_fsyncs <= 1.02,
        "onesync: {:.3} fsync-family calls per transaction, want <= 1.02",
        run.per_txn_fsyncs
    );
    assert!(
        run.per_txn_fsyncs >= 0.5,
        "onesync: {:.3} fsync-family calls per transaction: are commits durable at all?",
        run.per_txn_fsyncs
    );
    assert!(
        run.per_txn_bytes <= 8.5 * 1024.0,
        "onesync: {:.0} bytes written per transaction, want <= 8704 (8.5 KiB)",
        run.per_txn_bytes
    );
}

#[test]
fn cli_stock_delete_mode_control() {
    if !tools_present() {
        return;
    }
    let n = transactions();
    let run = measure(
        "sqlite3 CLI, stock unix VFS, DELETE (synchronous=FULL)",
        false,
        n,
        "FULL",
    );
    assert!(
        run.per_txn_fsyncs >= 2.0,
        "stock DELETE mode: {:.3} fsync-family calls per transaction, expected >= 2 \
         (is strace counting?)",
        run.per_txn_fsyncs
    );
}

#[test]
fn cli_normal_one_write_per_transaction_and_a_flush_per_interval() {
    if !tools_present() {
        return;
    }
    let n = transactions();
    let run = measure("sqlite3 CLI + libonesync (synchronous=NORMAL)", true, n, "NORMAL");
    assert!(
        run.per_txn_writes <= 1.05,
        "onesync NORMAL: {:.3} write calls per transaction, want <= 1.05",
        run.per_txn_writes
    );
    // Nothing else on the commit path: the page a transaction rewrites is not read back
    // (the store keeps recently committed pages), and SQLite's look for a WAL file before
    // each read transaction is answered without a stat (a store never has one).
    assert!(
        run.per_txn_preads <= 0.05,
        "onesync NORMAL: {:.3} pread calls per transaction, want <= 0.05",
        run.per_txn_preads
    );
    assert!(
        run.per_txn_stats <= 0.05,
        "onesync NORMAL: {:.3} stat-family calls per transaction, want <= 0.05",
        run.per_txn_stats
    );
    // The default interval is 20 ms: at most one background flush per interval the run
    // lasted, plus the two flushes of each mapping checkpoint (one per 1,000 commits).
    let intervals = (run.seconds / 0.020).ceil() as u64;
    let checkpoints = n.div_ceil(1000);
    assert!(
        (1..=intervals + 2 * checkpoints + 2).contains(&run.fsyncs),
        "onesync NORMAL: {} flushes in {:.2} s ({intervals} intervals of 20 ms, {checkpoints} \
         checkpoints)",
        run.fsyncs,
        run.seconds
    );
}
