//! Shared by the tests that run programs: the `libonesync_mvbt_vtab.so` built for this test
//! run, and the system `sqlite3` CLI.

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// target/<profile>/libonesync_mvbt_vtab.so: cargo builds this crate's cdylib alongside the
/// rlib this test links, one directory above the test binary.
pub fn cdylib() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let lib = dir.join("libonesync_mvbt_vtab.so");
    assert!(lib.exists(), "{} not built", lib.display());
    lib
}

/// Whether `program arg` runs and succeeds.
pub fn have(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `script` in the system `sqlite3` CLI (on `:memory:`); asserts that it succeeded with
/// nothing on stderr and returns its stdout.
pub fn sqlite3_script(script: &str) -> String {
    let out = Command::new("sqlite3")
        .arg(":memory:")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(script.as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.is_empty(),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    stdout
}
