//! `onesync-lab torture` (run as `onesync-lab-hooked`, with the store's invariant checks):
//! simulated power cuts (and kills) on the crash-safe modes pass, and the
//! negative controls (journal_mode OFF and MEMORY) are caught and exit non-zero.

mod common;

use common::n;

use std::process::Output;

use serde_json::Value;

fn torture(args: &[&str]) -> (Output, Value) {
    let mut all = vec!["torture", "--seed", "11", "--json", "-"];
    all.extend(args);
    let out = common::hooked(&all);
    let summary = common::json(&out);
    (out, summary)
}

#[test]
fn crash_safe_modes_survive_power_cuts() {
    for mode in ["delete", "truncate", "persist", "wal", "onesync"] {
        let (out, s) = torture(&["--mode", mode, "--power-cuts", "150"]);
        assert!(out.status.success(), "{mode}: {s}");
        assert_eq!(n(&s, "power_cuts"), 150, "{mode}");
        assert_eq!(n(&s, "power_cut_failures"), 0, "{mode}: {s}");
        assert!(n(&s, "transfers_acknowledged") > 150, "{mode}: {s}");
    }
}

#[test]
fn negative_controls_fail_under_power_cuts() {
    for mode in ["off", "memory"] {
        let (out, s) = torture(&["--mode", mode, "--power-cuts", "200"]);
        assert!(
            !out.status.success(),
            "{mode}: the harness missed the damage: {s}"
        );
        assert_eq!(n(&s, "power_cut_failures"), 1, "{mode}");
        assert!(s["first_power_cut_failure"].as_str().is_some(), "{mode}");
    }
}

#[test]
fn kills_run_too() {
    let (out, s) = torture(&["--mode", "wal", "--power-cuts", "20", "--kills", "10"]);
    assert!(out.status.success(), "{s}");
    assert_eq!(n(&s, "kills"), 10);
    assert_eq!(n(&s, "kill_failures"), 0);
}
