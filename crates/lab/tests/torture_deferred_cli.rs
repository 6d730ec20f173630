//! `onesync-lab torture` at onesync's `synchronous=NORMAL` and `OFF`: simulated power cuts keep a
//! prefix of the acknowledged transfers holding every one reported durable, the loss window
//! is measured, kills lose nothing; and the negative control (flushes that skip the device
//! flush yet report durable) is caught and exits non-zero.
//! Run as `onesync-lab-hooked` (`common::hooked`: the store's test hooks and invariant
//! checks); the plain `onesync-lab` refuses a negative control.

mod common;

use common::n;

use serde_json::Value;

fn torture(args: &[&str]) -> (std::process::Output, Value) {
    let mut all = vec!["torture", "--seed", "17", "--json", "-"];
    all.extend(args);
    let out = common::hooked(&all);
    let summary = common::json(&out);
    (out, summary)
}

fn ms(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("{key} in {v}"))
}

#[test]
fn normal_keeps_a_durable_prefix_and_its_loss_window_is_bounded() {
    // The slack is wide here: test binaries run side by side on shared machines, and the
    // bound is on the flusher thread's wake-up. The recorded long runs use the default.
    let (out, s) = torture(&[
        "--mode",
        "onesync-normal",
        "--power-cuts",
        "300",
        "--kills",
        "5",
        "--loss-window-slack-ms",
        "60",
    ]);
    assert!(out.status.success(), "{}", common::said(&out));
    assert_eq!(n(&s, "power_cuts"), 300, "{s}");
    assert_eq!(n(&s, "power_cut_failures"), 0, "{s}");
    assert_eq!(n(&s, "kills"), 5, "{s}");
    assert_eq!(n(&s, "kill_failures"), 0, "{s}");
    let window = &s["loss_window"];
    assert_eq!(ms(window, "flush_interval_ms"), 20.0, "{s}");
    assert_eq!(ms(window, "bound_ms"), 80.0, "{s}");
    assert_eq!(n(window, "cuts_over_bound"), 0, "{s}");
    // Cuts both took back undurable commits and kept durable ones: both halves were tested.
    assert!(n(window, "cuts_with_loss") > 30, "{s}");
    assert!(n(window, "transfers_durable") > 100, "{s}");
    assert!(
        ms(window, "max_ms") > 0.0 && ms(window, "p50_ms") <= ms(window, "max_ms"),
        "{s}"
    );
}

#[test]
fn off_keeps_a_durable_prefix() {
    let (out, s) = torture(&["--mode", "onesync-off", "--power-cuts", "200", "--kills", "3"]);
    assert!(out.status.success(), "{}", common::said(&out));
    assert_eq!(n(&s, "power_cuts"), 200, "{s}");
    assert_eq!(n(&s, "power_cut_failures"), 0, "{s}");
    assert_eq!(n(&s, "kills"), 3, "{s}");
    assert_eq!(n(&s, "kill_failures"), 0, "{s}");
    let window = &s["loss_window"];
    // No timer at OFF: no bound; PRAGMA onesync_flush made some transfers durable.
    assert!(window["bound_ms"].is_null(), "{s}");
    assert!(n(window, "transfers_durable") > 100, "{s}");
    assert!(n(window, "cuts_with_loss") > 10, "{s}");
}

#[test]
fn negative_control_skipped_flush_is_caught() {
    for mode in ["onesync-normal", "onesync-off"] {
        let (out, s) = torture(&[
            "--mode",
            mode,
            "--power-cuts",
            "300",
            "--negative-control",
            "skipped-flush",
        ]);
        assert!(!out.status.success(), "{mode}: the harness missed the loss: {s}");
        assert_eq!(n(&s, "power_cut_failures"), 1, "{mode}: {s}");
        assert_eq!(s["negative_control"], "skipped-flush", "{mode}: {s}");
        let first = s["first_power_cut_failure"].as_str().unwrap_or_default();
        assert!(first.contains("reported durable"), "{mode}: {s}");
    }
}

#[test]
fn full_modes_keep_their_json() {
    // The FULL contract's summary has no loss window.
    let (out, s) = torture(&["--mode", "onesync", "--power-cuts", "20"]);
    assert!(out.status.success(), "{}", common::said(&out));
    assert!(s.get("loss_window").is_none(), "{s}");
    // Exactly the fields it had before NORMAL and OFF came (no seconds, no negative control).
    let mut keys: Vec<&str> = s
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "first_power_cut_failure",
            "kill_failures",
            "kills",
            "mode",
            "power_cut_failures",
            "power_cuts",
            "seed",
            "transfers_acknowledged"
        ],
        "{s}"
    );
}

/// A negative control needs the store's test hooks: the plain `onesync-lab` (the workspace
/// build) refuses it, naming the build that has them, rather than run a control that cannot
/// fail.
#[test]
fn the_plain_lab_refuses_a_negative_control() {
    let out = common::onesync(&[
        "torture",
        "--mode",
        "onesync-normal",
        "--negative-control",
        "skipped-flush",
        "--power-cuts",
        "1",
    ]);
    let said = common::said(&out);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("--features onesync-lab/test-hooks --bin onesync-lab-hooked"),
        "{said}"
    );
}
