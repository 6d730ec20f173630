//! `onesync-lab replication-torture` (issue 43's faults), small enough for CI: writers
//! replicating one database, SIGKILLed at random (the shipping one often), the replica
//! checked after every kill (no gap or duplicate TXID, restore succeeds, a consistent prefix
//! holding every commit reported shipped) and stock Litestream's restore compared with ours
//! at the end; with `--s3`, outages of a real S3 server too. Its negative controls
//! (onesync-replica's sabotage, in `onesync-lab-hooked`) must fail. The S3 run and stock
//! Litestream need Go: without it they SKIP, or fail when CI is set.

mod common;

use std::path::Path;

use common::{hooked_exe, json, n, onesync, said};
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
    stock_litestream_agreed(&report);
}

/// Negative controls: each sabotage must be caught.
#[test]
fn negative_controls_two_shippers_and_a_position_saved_ahead_are_caught() {
    for control in ["replication-lease-ignored", "position-saved-ahead"] {
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
            .output()
            .unwrap();
        assert!(
            !output.status.success(),
            "{control} went unnoticed: {}",
            said(&output)
        );
        let report = json(&output);
        assert_eq!(n(&report, "failures"), 1, "{control}: {report}");
        assert!(report["first_failure"].is_string(), "{control}: {report}");
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
    stock_litestream_agreed(&report);
}
