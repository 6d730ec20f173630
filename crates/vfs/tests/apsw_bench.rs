//! The same single-insert run from a second language binding: Python's apsw,
//! with its own bundled SQLite, loading `libonesync.so`
//! (scripts/apsw_bench.py). N = 1,000 transactions (10,000 with
//! `ONESYNC_BIG_TESTS=1`) of one 100-byte insert, `synchronous=FULL`;
//! integrity_check and the row count are checked by the script. Under
//! `strace -f` (when it can trace) it also asserts <= 1.02 fsync-family calls
//! and <= 8.5 KiB written per transaction, not counting the store's growth
//! steps (zeros written and flushed ahead of the commits as the new store
//! grows: once in its life, a few MiB and about a dozen flushes here), which
//! are bounded apart (`common::assert_growth_bounded`). Skipped, saying so,
//! when python3 or apsw is missing (`python3 -m pip install apsw`).

mod common;

use std::process::Command;
use std::time::Instant;

use common::{cdylib, have, report, strace, transactions};

#[test]
fn apsw_single_insert_transactions_through_onesync() {
    if !have("python3", &["-c", "import apsw"]) {
        eprintln!("SKIPPED: python3 with apsw not installed (python3 -m pip install apsw)");
        return;
    }
    let n = transactions();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/apsw_bench.py");
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new("python3");
    cmd.arg(script)
        .arg("-n")
        .arg(n.to_string())
        .arg("--db")
        .arg(dir.path().join("bench.db"))
        .arg(cdylib());

    let traceable = have("strace", &["-f", "-qq", "-o", "/dev/null", "true"]);
    if !traceable {
        eprintln!("NOTE: strace missing or unable to trace: running apsw_bench.py untraced");
    }
    let started = Instant::now();
    let (output, window) = if traceable {
        let t = strace(cmd, None, &dir.path().join("trace.txt"));
        (t.output, Some(t.window))
    } else {
        (cmd.output().expect("run python3"), None)
    };
    let seconds = started.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "apsw_bench.py failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let json = stdout
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON line from apsw_bench.py\nstdout:\n{stdout}"));
    println!("apsw_bench.py: {json}");
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(v["integrity_check"], "ok", "{json}");
    assert_eq!(v["rows"].as_u64(), Some(n), "{json}");
    assert_eq!(v["rows_after_reopen"].as_u64(), Some(n), "{json}");

    if let Some(w) = window {
        print!(
            "{}",
            report("apsw + libonesync (synchronous=FULL)", n, seconds, &w)
        );
        let growth = &v["growth_in_window"];
        let (growths, zeros) = (
            growth["growths"].as_u64().unwrap(),
            growth["bytes_preallocated"].as_u64().unwrap(),
        );
        common::assert_growth_bounded("apsw", growths, zeros);
        let fsyncs = w.fsyncs().saturating_sub(growths) as f64 / n as f64;
        let bytes = w.bytes_written.saturating_sub(zeros) as f64 / n as f64;
        println!(
            "apsw: growth steps excluded: {growths} flushes, {zeros} bytes of zeros; \
             {fsyncs:.3} fsync-family calls and {bytes:.0} bytes per transaction without them"
        );
        assert!(
            (0.5..=1.02).contains(&fsyncs),
            "apsw: {fsyncs:.3} fsync-family calls per transaction, want <= 1.02 (and > 0.5)"
        );
        assert!(
            bytes <= 8.5 * 1024.0,
            "apsw: {bytes:.0} bytes written per transaction, want <= 8704 (8.5 KiB)"
        );
    }
}
