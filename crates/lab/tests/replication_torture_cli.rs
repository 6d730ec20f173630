//! `onesync-lab replication-torture` (issue 43's faults), small enough for CI: writers
//! (FULL, NORMAL, concurrent and sync) replicating one database, SIGKILLed at random (the
//! shipping one often), the replica checked after every kill (no gap or duplicate TXID,
//! restore succeeds, a consistent prefix holding every commit reported shipped and every
//! one a sync writer acknowledged) and stock Litestream's restore compared with ours at the
//! end; with `--s3`, outages of a real S3 server too (sync COMMITs refused with SQLITE_IOERR
//! meanwhile); with `--power-cuts`, the store's power cut through the kernel (an emulated
//! device under a loop filesystem: root, FUSE and loop devices, else SKIP) and simulated
//! from its write log. Its negative controls (onesync-replica's sabotage, in
//! `onesync-lab-hooked`) must fail. The S3 run and stock Litestream need Go: without it
//! they SKIP, or fail when CI is set.

mod common;

use std::path::Path;

use common::{hooked, hooked_exe, json, n, onesync, said};
use onesync_ltx::testing;

fn go_bin() -> std::path::PathBuf {
    testing::go_bin_dir(Path::new(env!("CARGO_TARGET_TMPDIR")))
}

/// Stock Litestream agreed, or it could not be built here (SKIP, or fail on CI).
fn stock_litestream_agreed(report: &serde_json::Value) {
    let stock = report["stock_litestream"].as_str().unwrap_or_default();
    if stock != "equal to ours" {
        assert!(stock.starts_with("not run"), "{report}");
        testing::skip_or_fail("replication_torture_cli (stock litestream)", stock);
    }
}

#[test]
fn kills_of_writers_and_shippers_leave_a_restorable_replica() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let go = go_bin();
    let args = [
        "replication-torture",
        "--kills",
        "25",
        "--seed",
        "11",
        "--json",
        "-",
        "--dir",
        d,
    ];
    let output = onesync(&[&args[..], &["--go-bin", go.to_str().unwrap()]].concat());
    assert!(output.status.success(), "{}", said(&output));
    let report = json(&output);
    assert_eq!(n(&report, "failures"), 0, "{report}");
    assert_eq!(n(&report, "kills"), 25, "{report}");
    assert!(
        n(&report, "shipper_kills") >= 3,
        "the shipping writer killed too rarely: {report}"
    );
    assert!(n(&report, "restores_checked") >= 26, "{report}");
    assert!(n(&report, "commits") >= 100, "{report}");
    assert!(n(&report, "newest_txid") >= 20, "{report}");
    // The sync writer's acknowledged commits were required in every restore after them.
    assert!(n(&report, "sync_acked") >= 10, "{report}");
    stock_litestream_agreed(&report);
}

/// Negative controls: each sabotage must be caught (`sync-ack-before-upload`: a sync COMMIT
/// returns before its upload, and the next restore lacks it). The first two run without a
/// sync writer, whose waits make the shipper tick so often that a position saved ahead
/// skips little, and rarely anything a later batch does not ship again.
#[test]
fn negative_controls_two_shippers_a_position_saved_ahead_and_early_acks_are_caught() {
    let without_sync = ["--writers", "3", "--kinds", "full,normal,concurrent"];
    for (control, kinds) in [
        ("replication-lease-ignored", &without_sync[..]),
        ("position-saved-ahead", &without_sync[..]),
        ("sync-ack-before-upload", &[][..]),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let output = std::process::Command::new(hooked_exe())
            .args([
                "replication-torture",
                "--kills",
                "60",
                "--seed",
                "5",
                "--json",
                "-",
            ])
            .args([
                "--negative-control",
                control,
                "--dir",
                dir.path().to_str().unwrap(),
            ])
            .args(kinds)
            .output()
            .unwrap();
        assert!(
            !output.status.success(),
            "{control} went unnoticed: {}",
            said(&output)
        );
        let report = json(&output);
        assert_eq!(n(&report, "failures"), 1, "{control}: {report}");
        let failure = report["first_failure"].as_str().unwrap_or_default();
        if control == "sync-ack-before-upload" {
            assert!(failure.contains("acknowledged by a sync writer"), "{report}");
        }
    }
}

#[test]
fn s3_outages_and_kills_leave_a_restorable_replica() {
    if let Err(why) = testing::versitygw_command(&go_bin()) {
        return testing::skip_or_fail("replication_torture_cli (S3)", &why);
    }
    let dir = tempfile::tempdir().unwrap();
    let go = go_bin();
    let output = onesync(&[
        "replication-torture",
        "--s3",
        "--kills",
        "20",
        "--outage-one-in",
        "4",
        "--seed",
        "3",
        "--json",
        "-",
        "--dir",
        dir.path().to_str().unwrap(),
        "--go-bin",
        go.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", said(&output));
    let report = json(&output);
    assert_eq!(n(&report, "failures"), 0, "{report}");
    assert!(n(&report, "outages") >= 1, "{report}");
    assert!(
        n(&report, "outages_error_reported") >= 1,
        "no writer said the replica was failing: {report}"
    );
    assert!(
        n(&report, "commits_during_outages") > 0,
        "commits stopped during an outage: {report}"
    );
    assert!(n(&report, "restores_checked") >= 5, "{report}");
    // The sync writer's COMMITs while the replica is down: past the timeout one returns
    // unacknowledged, the next are refused, with the contract's code only.
    assert!(n(&report, "sync_refused") >= 1, "{report}");
    assert_eq!(report["sync_refusal_codes"], serde_json::json!([10]), "{report}");
    stock_litestream_agreed(&report);
}

/// NORMAL writers flushing only every 200 ms: a cut takes back their newest commits, which
/// the replica must never hold (the negative control ships them).
const NORMAL_WRITERS: [&str; 4] = ["--kinds", "normal", "--sync-interval-ms", "200"];

/// A power-cut run's summary, after the checks every passing one must meet.
fn passing_cut_run(output: &std::process::Output, cuts: u64) -> serde_json::Value {
    assert!(output.status.success(), "{}", said(output));
    let report = json(output);
    assert_eq!(n(&report, "failures"), 0, "{report}");
    let c = &report["power_cuts"];
    assert_eq!(n(c, "power_cuts"), cuts, "{report}");
    assert_eq!(n(c, "fsck_complaints"), 0, "{report}");
    assert!(n(c, "cuts_after_upload") >= 1, "{report}");
    assert!(n(&report, "restores_checked") > cuts, "{report}");
    report
}

/// The negative control `ships-undurable` under power cuts: the replica ran ahead.
fn caught_running_ahead(output: &std::process::Output) {
    assert!(
        !output.status.success(),
        "ships-undurable went unnoticed: {}",
        said(output)
    );
    let report = json(output);
    assert_eq!(n(&report, "failures"), 1, "{report}");
    let failure = report["first_failure"].as_str().unwrap_or_default();
    assert!(failure.contains("runs ahead of the store"), "{report}");
}

/// `replication-torture --power-cuts CUTS` in a fresh directory, with `extra`.
fn cut_args(cuts: &str, dir: &Path, go: &Path, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "replication-torture",
        "--power-cuts",
        cuts,
        "--seed",
        "5",
        "--json",
        "-",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    args.extend(["--dir".to_owned(), dir.display().to_string()]);
    args.extend(["--go-bin".to_owned(), go.display().to_string()]);
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

fn run_plain(args: &[String]) -> std::process::Output {
    onesync(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

fn run_hooked(args: &[String]) -> std::process::Output {
    hooked(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

const SHIPS_UNDURABLE: [&str; 2] = ["--negative-control", "ships-undurable"];

#[test]
fn power_cuts_through_the_kernel_leave_the_replica_a_prefix_of_the_store() {
    if let Some(why) = common::kernel_path_unavailable() {
        println!("note: skipping the replication torture's kernel power cuts: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let go = go_bin();
    // Every kind of writer: durable commits and sync acknowledgements survive.
    let report = passing_cut_run(&run_plain(&cut_args("4", dir.path(), &go, &[])), 4);
    let c = &report["power_cuts"];
    assert!(n(c, "durable_commits_checked") >= 10, "{report}");
    assert!(n(c, "sync_acks_checked") >= 1, "{report}");
    stock_litestream_agreed(&report);
    // NORMAL writers: commits lost locally are never in the replica.
    let report = passing_cut_run(&run_plain(&cut_args("4", dir.path(), &go, &NORMAL_WRITERS)), 4);
    assert!(n(&report["power_cuts"], "normal_commits_lost") >= 1, "{report}");
    let control = [&NORMAL_WRITERS[..], &SHIPS_UNDURABLE].concat();
    caught_running_ahead(&run_hooked(&cut_args("20", dir.path(), &go, &control)));
}

#[test]
fn simulated_power_cuts_leave_the_replica_a_prefix_of_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let go = go_bin();
    let normal = [&["--simulated"][..], &NORMAL_WRITERS].concat();
    let report = passing_cut_run(&run_hooked(&cut_args("6", dir.path(), &go, &normal)), 6);
    assert!(n(&report["power_cuts"], "normal_commits_lost") >= 1, "{report}");
    let control = [&normal[..], &SHIPS_UNDURABLE].concat();
    caught_running_ahead(&run_hooked(&cut_args("20", dir.path(), &go, &control)));
}
