//! `onesync-lab torture --fs ext4 --emulate nvme`: power cuts through the real kernel (an emulated
//! device with a volatile write cache under a loop device). The crash-safe modes survive a few
//! dozen cuts each (onesync at NORMAL and OFF keeping a prefix holding every commit reported
//! durable); the negative controls `off` (no journal), `memory` (journal in memory) and the
//! store's `skipped-flush` and `flush-coverage-read-late` are caught and exit non-zero.
//! Needs root, /dev/fuse, losetup, mkfs.ext4 and e2fsck; says why and does nothing otherwise.
//! Run as `onesync-lab-hooked` (`common::hooked`: the store's test hooks and invariant checks).

mod common;

use common::n;

use std::time::Instant;

use serde_json::Value;

const CUTS: &str = "30";

/// Whether the kernel torture can run here; if not, says so (the test then passes, skipped).
fn runs_here(what: &str) -> bool {
    match common::kernel_path_unavailable() {
        Some(reason) => {
            println!("note: skipping {what}: {reason}");
            false
        }
        None => true,
    }
}

fn torture(mode: &str, extra: &[&str]) -> (std::process::Output, Value) {
    torture_seeded(mode, "16", extra)
}

fn torture_seeded(mode: &str, seed: &str, extra: &[&str]) -> (std::process::Output, Value) {
    let mut args = vec![
        "torture",
        "--fs",
        "ext4",
        "--emulate",
        "nvme",
        "--mode",
        mode,
        "--power-cuts",
        CUTS,
        "--seed",
        seed,
        "--json",
        "-",
    ];
    args.extend(extra);
    let out = common::hooked(&args);
    let summary = common::json(&out);
    (out, summary)
}

/// A negative control whose loss depends on where cuts fall against the kernel's writeback
/// (no seed fixes that): runs it with seeds 16, 17, 18 until one fails, which must happen
/// with exactly one failure; returns that run's summary.
fn failing_run_of_three(mode: &str, extra: &[&str]) -> Value {
    let mut runs = Vec::new();
    let (out, s) = loop {
        let seed = (16 + runs.len()).to_string();
        let (out, s) = torture_seeded(mode, &seed, extra);
        if !out.status.success() || runs.len() == 2 {
            break (out, s);
        }
        runs.push(s);
    };
    assert!(
        !out.status.success(),
        "the harness missed the loss in three runs: {s}; earlier: {runs:?}"
    );
    assert_eq!(n(&s, "failures"), 1, "{s}");
    s
}

#[test]
fn power_cuts_through_the_kernel_keep_every_acknowledged_transfer() {
    if !runs_here("the kernel torture") {
        return;
    }
    let started = Instant::now();
    // DELETE needs synchronous=EXTRA: at FULL SQLite does not sync the directory after
    // deleting the journal (its commit point), and a cut can roll the last commit back.
    for (mode, extra) in [
        ("onesync", &[][..]),
        ("wal", &[][..]),
        ("delete", &["--synchronous", "extra"][..]),
    ] {
        let (out, s) = torture(mode, extra);
        assert!(out.status.success(), "{mode}: {}", common::said(&out));
        assert_eq!(n(&s, "power_cuts"), 30, "{mode}: {s}");
        assert_eq!(n(&s, "failures"), 0, "{mode}: {s}");
        assert_eq!(n(&s, "fsck_complaints"), 0, "{mode}: {s}");
        assert!(n(&s, "random_cuts") >= 14, "{mode}: {s}");
        assert!(n(&s, "flush_boundary_cuts") >= 10, "{mode}: {s}");
        assert!(n(&s, "transfers_acknowledged") > 30, "{mode}: {s}");
        let cached = &s["cached_writes"];
        assert!(n(cached, "cached") > 0, "{mode}: no write was ever at risk: {s}");
    }
    println!("crash-safe modes: {:.1} s", started.elapsed().as_secs_f64());
}

#[test]
fn the_negative_control_loses_or_corrupts_under_kernel_power_cuts() {
    if !runs_here("the kernel torture's negative control") {
        return;
    }
    for mode in ["off", "memory"] {
        let (out, s) = torture(mode, &[]);
        assert!(
            !out.status.success(),
            "{mode}: the harness missed the damage: {s}"
        );
        assert_eq!(n(&s, "failures"), 1, "{mode}: {s}");
        assert!(s["first_failure"].as_str().is_some(), "{mode}: {s}");
    }
}

#[test]
fn delete_at_synchronous_full_can_lose_its_last_commit() {
    if !runs_here("the kernel torture of delete at FULL") {
        return;
    }
    // Not a promise of the harness but a documented property of SQLite, checked so that the
    // README's statement stays true: FULL does not sync the journal's deletion.
    let (out, s) = torture("delete", &[]);
    assert!(!out.status.success(), "delete at FULL survived {CUTS} cuts: {s}");
    assert_eq!(n(&s, "failures"), 1, "{s}");
    let first = s["first_failure"].as_str().unwrap_or_default();
    assert!(
        first.contains("reported committed but is not in the ledger"),
        "{s}"
    );
}

#[test]
fn onesync_normal_and_off_keep_a_durable_prefix_through_the_kernel() {
    if !runs_here("the kernel torture of onesync-normal and -off") {
        return;
    }
    for mode in ["onesync-normal", "onesync-off"] {
        let (out, s) = torture(mode, &[]);
        assert!(out.status.success(), "{mode}: {}", common::said(&out));
        assert_eq!(n(&s, "power_cuts"), 30, "{mode}: {s}");
        assert_eq!(n(&s, "failures"), 0, "{mode}: {s}");
        assert_eq!(n(&s, "fsck_complaints"), 0, "{mode}: {s}");
        let window = &s["loss_window"];
        assert!(window["bound_ms"].is_null(), "{mode}: {s}");
        assert!(
            n(window, "transfers_durable") > 0,
            "{mode}: nothing was durable: {s}"
        );
    }
}

#[test]
fn the_skipped_flush_negative_control_loses_durable_commits_under_kernel_power_cuts() {
    if !runs_here("the kernel torture's skipped-flush control") {
        return;
    }
    // Whether a cut finds a commit reported durable still only in a cache depends on where
    // the cut falls against the kernel's own writeback, which no seed fixes: one run in CI
    // missed it (seed 16, 30 cuts). A loss in any of three runs is what the control asks.
    let s = failing_run_of_three("onesync-normal", &["--negative-control", "skipped-flush"]);
    let first = s["first_failure"].as_str().unwrap_or_default();
    assert!(first.contains("reported durable"), "{s}");
}

/// Concurrent writers in four processes (`concurrent=1`), sharing flushes between processes:
/// every acknowledged transfer survives. This found a concurrent COMMIT that SQLite's
/// fallback from a failed batch atomic write (an I/O error at the cut) reported done.
#[test]
fn concurrent_writers_in_several_processes_keep_every_acknowledged_transfer() {
    if !runs_here("the kernel torture of concurrent writers") {
        return;
    }
    let (out, s) = torture("onesync", &["--processes", "4", "--concurrent"]);
    assert!(out.status.success(), "{}", common::said(&out));
    assert_eq!(n(&s, "power_cuts"), 30, "{s}");
    assert_eq!(n(&s, "failures"), 0, "{s}");
    assert!(s["concurrent"].as_bool().unwrap_or(false), "{s}");
    assert!(n(&s, "transfers_acknowledged") > 30, "{s}");
}

/// The negative control of the shared flush: a flushing process that reads how far the
/// others have written only after its flush acknowledges their commits unflushed.
#[test]
fn the_late_coverage_negative_control_loses_acknowledged_transfers() {
    if !runs_here("the kernel torture's flush-coverage-read-late control") {
        return;
    }
    let s = failing_run_of_three(
        "onesync",
        &[
            "--processes",
            "4",
            "--concurrent",
            "--negative-control",
            "flush-coverage-read-late",
        ],
    );
    let first = s["first_failure"].as_str().unwrap_or_default();
    assert!(
        first.contains("reported committed but is not in the ledger"),
        "{s}"
    );
}

#[test]
fn bad_combinations_are_refused_with_a_reason() {
    let refusals: [(&[&str], &str); 3] = [
        // --fs without --emulate: the simulated torture takes no filesystem.
        (&["--fs", "ext4", "--mode", "onesync"], "--emulate"),
        // maw needs F2FS, which only the VM has.
        (&["--fs", "ext4", "--emulate", "nvme", "--mode", "maw"], "F2FS"),
        // Concurrent writers are the onesync VFS's.
        (
            &[
                "--fs",
                "ext4",
                "--emulate",
                "nvme",
                "--mode",
                "wal",
                "--concurrent",
            ],
            "--concurrent needs a onesync child",
        ),
    ];
    for (args, reason) in refusals {
        let mut command = vec!["torture"];
        command.extend_from_slice(args);
        command.extend_from_slice(&["--power-cuts", "1"]);
        let out = common::hooked(&command);
        assert!(!out.status.success(), "{command:?} ran");
        assert!(
            common::said(&out).contains(reason),
            "{command:?}: {}",
            common::said(&out)
        );
    }
}
