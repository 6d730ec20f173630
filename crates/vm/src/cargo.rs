//! Building guest programs with cargo (release, optionally with static glibc) into a target
//! directory of their own, with cargo's messages on our stderr.

use std::io::{self, BufRead, BufReader, IsTerminal, Read, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::process::find_program;

/// One `cargo build --release`.
pub struct CargoBuild<'a> {
    pub cargo: &'a Path,
    /// Where it runs (the workspace to build from).
    pub workspace: &'a Path,
    /// A target directory of its own: this may run inside `cargo test`, which holds the
    /// workspace's main one's lock.
    pub target_dir: &'a Path,
    /// The rest of the command line (`-p PACKAGE`, `--target TRIPLE`, ...).
    pub args: &'a [&'a str],
    /// Link glibc statically (`-C target-feature=+crt-static`), for a guest without libc.
    pub static_glibc: bool,
}

/// $CARGO (set when run by cargo), cargo on $PATH, or ~/.cargo/bin/cargo.
pub fn find_cargo() -> Option<PathBuf> {
    std::env::var_os("CARGO")
        .map(PathBuf::from)
        .filter(|cargo| cargo.is_file())
        .or_else(|| find_program("cargo"))
        .or_else(|| {
            let home = std::env::var_os("HOME")?;
            Some(Path::new(&home).join(".cargo/bin/cargo")).filter(|cargo| cargo.is_file())
        })
}

/// Runs the build; cargo's output goes to our stderr (our stdout may be the guest's).
pub fn cargo_build(build: &CargoBuild) -> Result<()> {
    let stderr = io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .context("duplicating stderr for cargo")?;
    let color = if io::stderr().is_terminal() {
        "always"
    } else {
        "never"
    };
    let mut command = Command::new(build.cargo);
    command
        .current_dir(build.workspace)
        .args(["build", "--release"])
        .args(build.args)
        .args(["--color", color])
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env("CARGO_TARGET_DIR", build.target_dir)
        // The guest needs no debug info, and smaller files are a smaller initramfs.
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_STRIP", "debuginfo")
        .stdin(Stdio::null())
        .stdout(Stdio::from(stderr))
        .stderr(Stdio::piped());
    if build.static_glibc {
        command.env("RUSTFLAGS", "-C target-feature=+crt-static");
    } else {
        command.env_remove("RUSTFLAGS");
    }
    let mut child = command
        .spawn()
        .with_context(|| format!("could not start {}", build.cargo.display()))?;
    if let Some(cargo_stderr) = child.stderr.take() {
        forward_cargo_messages(cargo_stderr);
    }
    let status = child.wait().context("waiting for cargo")?;
    if !status.success() {
        bail!(
            "cargo build {} failed ({status}); cargo's messages are above",
            build.args.join(" ")
        );
    }
    Ok(())
}

/// Copies cargo's messages to our stderr as they come, except the one warning every static
/// build of a workspace with a cdylib gives (a cdylib cannot be built with crt-static, and
/// the guest does not need it) and its "generated 1 warning" summary.
fn forward_cargo_messages(messages: impl Read) {
    let mut skip_blank = false;
    let mut dropped_cdylib_warnings = 0;
    for line in BufReader::new(messages).split(b'\n') {
        let Ok(line) = line else { break };
        let text = String::from_utf8_lossy(&line);
        let plain = strip_ansi(&text);
        if plain.contains("dropping unsupported crate type `cdylib`") {
            dropped_cdylib_warnings += 1;
            skip_blank = true;
            continue;
        }
        let summary_of_dropped =
            dropped_cdylib_warnings > 0 && plain.trim_end().ends_with("(lib) generated 1 warning");
        if summary_of_dropped || (skip_blank && plain.trim().is_empty()) {
            if summary_of_dropped {
                dropped_cdylib_warnings -= 1;
            }
            skip_blank = false;
            continue;
        }
        skip_blank = false;
        let mut err = io::stderr().lock();
        let _ = err.write_all(&line).and_then(|()| err.write_all(b"\n"));
    }
}

/// `text` without ANSI escape sequences (cargo's colours).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // CSI: ESC '[' parameters, ended by a letter.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cargo_colours_are_stripped_for_matching() {
        let coloured =
            "\x1b[1m\x1b[33mwarning\x1b[0m\x1b[1m:\x1b[0m dropping unsupported crate type `cdylib`";
        assert_eq!(
            strip_ansi(coloured),
            "warning: dropping unsupported crate type `cdylib`"
        );
        assert_eq!(strip_ansi("plain"), "plain");
    }
}
