//! Host programs: finding them, running them to completion, and deadlines.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// Lines of a failed command's output an error quotes (the end, where the reason is).
const FAILED_OUTPUT_LINES: usize = 40;

/// `program` on $PATH or in the sbin directories (a non-login root shell may lack them).
pub(crate) fn find_program(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

pub(crate) fn running_as_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Runs `command` with no input until it exits; on failure the error carries the command
/// line and the end of its output.
pub(crate) fn run_to_completion(command: &mut Command) -> Result<()> {
    let shown = format!("{command:?}").replace('"', "");
    let output = command
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("could not start `{shown}`"))?;
    if output.status.success() {
        return Ok(());
    }
    let combined = [output.stdout, output.stderr].concat();
    bail!(
        "`{shown}` failed ({}):\n{}",
        output.status,
        last_lines(&String::from_utf8_lossy(&combined), FAILED_OUTPUT_LINES)
    )
}

/// The last `count` lines of `text`.
pub(crate) fn last_lines(text: &str, count: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(count)..].join("\n")
}

/// Now plus `wait`, or a year from now for an absurd `wait` (no overflow panic).
pub(crate) fn later(wait: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(wait)
        .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
}
