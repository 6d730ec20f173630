//! The Go module: `bindings/go` (a cgo package for github.com/mattn/go-sqlite3) with the
//! static library of the VFS it links, `lib/libonesync.a`, and the stripped `onesync`
//! command that its package `cmd/onesync` embeds, `cmd/onesync/bin/onesync`.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::workspace::Workspace;

/// The module directory's name under `--out`.
pub const MODULE_DIR: &str = "onesync-go";
/// Where `cmd/onesync/main.go` embeds the command from (`//go:embed bin/onesync`).
const COMMAND: &str = "cmd/onesync/bin/onesync";

/// Builds the module directory into `out` (replacing an earlier one); returns its path.
pub fn build(ws: &Workspace, out: &Path) -> Result<PathBuf> {
    let archive = static_library(ws)?;
    let module = out.join(MODULE_DIR);
    if module.exists() {
        std::fs::remove_dir_all(&module).with_context(|| format!("removing {}", module.display()))?;
    }
    copy_sources(&ws.root.join("bindings/go"), &module)?;
    let lib = module.join("lib");
    std::fs::create_dir_all(&lib)?;
    let to = lib.join("libonesync.a");
    std::fs::copy(&archive, &to).with_context(|| format!("copying {}", archive.display()))?;
    strip_debug_info(&to);
    let command = module.join(COMMAND);
    std::fs::create_dir_all(command.parent().context("a directory")?)?;
    std::fs::write(&command, ws.stripped_command(out)?.bytes)
        .with_context(|| format!("writing {}", command.display()))?;
    Ok(module)
}

/// `libonesync.a`: the static library crate onesync-extension builds next to `libonesync.so`
/// in the workspace build (same target directory, so after `cargo build --release` nothing
/// compiles again).
fn static_library(ws: &Workspace) -> Result<PathBuf> {
    let archive = ws.release_build()?.join("libonesync.a");
    if !archive.is_file() {
        bail!("the workspace build left no {}", archive.display());
    }
    Ok(archive)
}

/// The module's files: everything in `bindings/go` but what git ignores there (`lib/`,
/// `cmd/onesync/bin/`: written after) and dot files.
fn copy_sources(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    for entry in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') || name == "lib" || name == "bin" {
            continue;
        }
        let path = entry.path();
        if path.is_dir() {
            copy_sources(&path, &to.join(&name))?;
        } else {
            std::fs::copy(&path, to.join(&name)).with_context(|| format!("copying {}", path.display()))?;
        }
    }
    Ok(())
}

/// `strip --strip-debug`: the standard library's objects in the archive carry debug info
/// even when the crate's do not. Without `strip` the archive is only bigger.
fn strip_debug_info(archive: &Path) {
    match std::process::Command::new("strip")
        .arg("--strip-debug")
        .arg(archive)
        .status()
    {
        Ok(s) if s.success() => {}
        Ok(s) => {
            eprintln!("onesync-package: strip --strip-debug failed ({s}); the archive keeps its debug info")
        }
        Err(e) => eprintln!("onesync-package: no strip ({e}); the archive keeps its debug info"),
    }
}
