//! Where a subcommand's run happens and where its results go, the same way for every
//! subcommand: an optional fresh loop filesystem, a fresh work directory, and either a
//! human table on stdout or JSON (to a file, or alone on stdout with "-").

use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use tempfile::TempDir;

use crate::loopfs::{Emulation, FsKind, LoopFs};
use crate::progress::phase_spinner;

/// How a run with one fresh place per mode says where: "a fresh ext4 on a loop device [on
/// EMULATION] per mode", or `None` without `--fs`.
pub fn fresh_loop_fs_per_mode(kind: Option<FsKind>, emulation: Option<Emulation>) -> Option<String> {
    let kind = kind?;
    Some(match emulation {
        Some(emulation) => format!("a fresh {} on a loop device on {emulation} per mode", kind.name()),
        None => format!("a fresh {} on a loop device per mode", kind.name()),
    })
}

/// A fresh `kind` filesystem of `size_mib` MiB on a loop device, if `kind` is given, on an
/// emulated device if `emulation` is given. Keep it alive longer than the work directory
/// made in it (declare it first).
pub fn loop_fs(kind: Option<FsKind>, size_mib: u64, emulation: Option<&Emulation>) -> Result<Option<LoopFs>> {
    let Some(kind) = kind else {
        return Ok(None);
    };
    let size = size_mib
        .checked_mul(1 << 20)
        .ok_or_else(|| anyhow!("--fs-size-mib {size_mib} is too large"))?;
    let spinner = phase_spinner("loopfs", "making the filesystem");
    let made = LoopFs::create_on(kind, size, emulation)?;
    spinner.finish_and_clear();
    Ok(Some(made))
}

/// A fresh directory named `prefix...` in the loop filesystem, else in `dir`, else in the
/// system's temporary directory.
pub fn work_dir(prefix: &str, loop_fs: Option<&LoopFs>, dir: Option<&Path>) -> Result<TempDir> {
    let parent = match (loop_fs, dir) {
        (Some(l), _) => l.mount_point().to_owned(),
        (None, Some(d)) => d.to_owned(),
        (None, None) => std::env::temp_dir(),
    };
    if !parent.is_dir() {
        bail!("{} is not a directory", parent.display());
    }
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(&parent)
        .with_context(|| format!("making a work directory in {}", parent.display()))
}

/// Fails early, before a long run, if `--json FILE` could not be written afterwards.
pub fn check_json_path(json: Option<&Path>) -> Result<()> {
    if let Some(path) = json.filter(|p| *p != Path::new("-")) {
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        if let Some(dir) = dir.filter(|d| !d.is_dir()) {
            bail!("--json {}: {} is not a directory", path.display(), dir.display());
        }
    }
    Ok(())
}

/// Where the human-readable text goes when stdout is free for it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Human {
    Stdout,
    /// Another command owns stdout (it embeds this one).
    Stderr,
}

/// `value` as JSON to `json` ("-": stdout, and nothing else goes there); `text` (which ends
/// in a newline or not, as it likes) to stdout otherwise.
pub fn emit<T: Serialize>(json: Option<&Path>, value: &T, text: &str, human: Human) -> Result<()> {
    let line_end = if text.ends_with('\n') { "" } else { "\n" };
    match json {
        Some(path) if path == Path::new("-") => {
            println!("{}", serde_json::to_string(value)?);
            return Ok(());
        }
        Some(path) => std::fs::write(path, serde_json::to_string_pretty(value)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?,
        None => {}
    }
    match human {
        Human::Stdout => print!("{text}{line_end}"),
        Human::Stderr => eprint!("{text}{line_end}"),
    }
    Ok(())
}
