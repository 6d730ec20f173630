//! Shared by the lab's CLI tests: running the `onesync-lab` binary and reading its JSON.
#![allow(dead_code)] // each test binary uses its own part of this module

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::Value;

/// Runs the `onesync-lab` binary built for this test run.
pub fn onesync(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_onesync-lab"))
        .args(args)
        .output()
        .expect("the onesync-lab binary runs")
}

/// The `onesync-lab-hooked` binary, next to `onesync-lab`: the lab built with the store's
/// test hooks (sabotage, the `ONESYNC_IO_LOG` write log) and invariant checks, which the
/// explorer, the tortures and the negative controls need. Built here (once per test binary,
/// with the command `onesync_lab::TEST_HOOKS_BUILD` names; a no-op when CI built it already),
/// so that it is never missing or older than the code; a failed build fails the test.
pub fn hooked_exe() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let plain = Path::new(env!("CARGO_BIN_EXE_onesync-lab"));
        let hooked = plain.with_file_name("onesync-lab-hooked");
        let release = plain
            .parent()
            .and_then(Path::file_name)
            .is_some_and(|d| d == "release");
        // `--workspace` (building only the one binary) resolves third-party features as the
        // workspace build does, so only the store, the VFS and the lab compile again.
        let mut args = vec![
            "build",
            "--workspace",
            "--features",
            "onesync-lab/test-hooks",
            "--bin",
            "onesync-lab-hooked",
        ];
        if release {
            args.insert(1, "--release");
        }
        let command = format!("cargo {}", args.join(" "));
        // The workspace root: cargo reads a relative CARGO_TARGET_DIR from where it runs.
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .ancestors()
            .nth(2)
            .expect("the workspace root");
        let status = Command::new(env!("CARGO"))
            .args(&args)
            .current_dir(root)
            .status()
            .unwrap_or_else(|e| panic!("running `{command}`: {e}"));
        assert!(
            status.success(),
            "`{command}` failed: the crash tests need {}",
            hooked.display()
        );
        assert!(hooked.is_file(), "`{command}` left no {}", hooked.display());
        hooked
    })
}

/// Runs `onesync-lab-hooked` ([`hooked_exe`]).
pub fn hooked(args: &[&str]) -> Output {
    Command::new(hooked_exe())
        .args(args)
        .output()
        .expect("the onesync-lab-hooked binary runs")
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

/// Why this machine cannot cut an emulated device's power under a loop filesystem (the
/// kernel-path tortures), if it cannot: FUSE, root, the programs, loop devices.
pub fn kernel_path_unavailable() -> Option<String> {
    if let Some(reason) = onesync_device::unavailable_reason() {
        return Some(reason);
    }
    let sbin = |program: &str| {
        ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
            .iter()
            .any(|dir| Path::new(dir).join(program).exists())
    };
    for program in ["losetup", "mkfs.ext4", "e2fsck", "blockdev"] {
        if !sbin(program) {
            return Some(format!("{program} is not installed"));
        }
    }
    if !Path::new("/dev/loop-control").exists() {
        return Some("no loop devices (/dev/loop-control is missing)".to_owned());
    }
    None
}
