//! Shared by the lab's CLI tests: running the `onesync-lab` binary and reading its JSON.
#![allow(dead_code)] // each test binary uses its own part of this module

use std::process::{Command, Output};

use serde_json::Value;

/// Runs the `onesync-lab` binary built for this test run.
pub fn onesync(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_onesync-lab"))
        .args(args)
        .output()
        .expect("the onesync-lab binary runs")
}

/// The run's stdout, then its stderr: for assertion messages.
pub fn said(output: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The one JSON object a `--json -` run printed on stdout.
pub fn json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("no JSON on stdout ({e}): {}", said(output)))
}

/// The unsigned integer field `key` of a JSON summary (panics naming it if absent).
pub fn n(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} in {v}"))
}

/// The `results` array of a successful `--json -` run.
pub fn results(output: &Output) -> Vec<Value> {
    assert!(output.status.success(), "failed: {}", said(output));
    json(output)["results"].as_array().expect("results").clone()
}
