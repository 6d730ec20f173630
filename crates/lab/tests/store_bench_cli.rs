//! Runs the `onesync` binary the way a person or a script would, on small workloads.

use std::path::Path;
use std::process::Output;

use serde_json::Value;

/// Small enough to finish in a second or two on any filesystem.
const SMALL_RUN: &[&str] = &[
    "store-bench",
    "--commits",
    "40",
    "--recovery-pages",
    "256",
    "--recovery-records",
    "40",
];

mod common;

use common::onesync;

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn number(report: &Value, pointer: &str) -> f64 {
    report
        .pointer(pointer)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("{pointer} missing or not a number in {report}"))
}

/// Checks the keys every run must report, and returns the parsed object.
fn parse_report(output: &Output) -> Value {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout.clone()).unwrap();
    assert_eq!(stdout.lines().count(), 1, "exactly one JSON line: {stdout}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(number(&report, "/page_size"), 4096.0);
    for positive in [
        "/single/commits_per_sec",
        "/single/flushes_per_commit",
        "/single/bytes_per_commit",
        "/threads4/commits_per_sec",
        "/threads4/flushes_per_commit",
        "/raw_fdatasync_per_sec",
        "/recovery_ms",
    ] {
        assert!(number(&report, positive) > 0.0, "{positive} in {report}");
    }
    report
}

#[test]
fn json_to_stdout_is_one_object_without_device_key() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = SMALL_RUN.to_vec();
    args.extend(["--dir", dir.path().to_str().unwrap(), "--json", "-"]);
    let report = parse_report(&onesync(&args));
    assert!(report.get("device").is_none(), "{report}");
    // The benchmark cleans up after itself.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn json_to_a_file_leaves_the_table_on_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let json_path = dir.path().join("report.json");
    let mut args = SMALL_RUN.to_vec();
    args.extend(["--json", json_path.to_str().unwrap()]);
    let output = onesync(&args);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let table = String::from_utf8(output.stdout).unwrap();
    assert!(table.contains("commits/s"), "{table}");
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    assert!(written.get("single").is_some(), "{written}");
}

/// Recovery replays every record written after the checkpoint, on a store past
/// `Options::max_growth_step` (64 MiB), where the store checkpoints to reuse superseded slots
/// before it grows: with the default bound that took a checkpoint among the records.
#[test]
fn recovery_replays_every_record_written() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "store-bench",
        "--commits",
        "10",
        "--recovery-pages",
        "16384",
        "--recovery-records",
        "3000",
        "--dir",
        dir.path().to_str().unwrap(),
        "--json",
        "-",
    ];
    let output = onesync(&args);
    let report = parse_report(&output);
    assert_eq!(
        number(&report, "/recovery_records_replayed"),
        3000.0,
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn missing_dir_is_a_clear_error() {
    let mut args = SMALL_RUN.to_vec();
    args.extend(["--dir", "/nonexistent/onesync-bench"]);
    let output = onesync(&args);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("/nonexistent/onesync-bench is not a directory"),
        "{stderr}"
    );
}

#[test]
fn ext4_run_reports_device_counters() {
    if !is_root() || !Path::new("/sys/block").exists() {
        println!("note: skipping the --fs ext4 run: needs root and loop devices");
        return;
    }
    let mut args = SMALL_RUN.to_vec();
    args.extend(["--fs", "ext4", "--fs-size-mib", "256", "--json", "-"]);
    let report = parse_report(&onesync(&args));
    assert_eq!(report.pointer("/device/fs").and_then(Value::as_str), Some("ext4"));
    // A durable commit sends at least its page down, and something must make it stick.
    assert!(
        number(&report, "/device/write_requests_per_commit") >= 1.0,
        "{report}"
    );
    assert!(number(&report, "/device/kb_per_commit") >= 4.0, "{report}");
    assert!(number(&report, "/device/flushes_per_commit") > 0.0, "{report}");
    assert!(
        number(&report, "/device/raw_baseline/flushes_per_fdatasync") >= 1.0,
        "{report}"
    );
}
