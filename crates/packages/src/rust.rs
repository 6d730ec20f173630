//! The publishable Rust crates: `cargo package` of the library crates a user needs, the
//! `.crate` files copied out.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::workspace::Workspace;

/// The crates a user of onesync from Rust needs, each after those it depends on.
pub const CRATES: &[&str] = &[
    "onesync-codec",
    "onesync-mapping",
    "onesync-store",
    "onesync-ltx",
    "onesync-replica",
    "onesync-follow",
    "onesync-vfs",
    "onesync",
];

/// The target directory of the cargo runs below: not the workspace's own `target/`, whose
/// lock an outer `cargo test --workspace` holds while the tests that run this binary run.
/// Kept between runs, so repeated builds are quick.
pub fn build_dir(ws: &Workspace) -> PathBuf {
    ws.root.join("target/packages-build")
}

/// `cargo` in the workspace, building into [`build_dir`].
pub fn cargo(ws: &Workspace) -> Command {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(&ws.root).env("CARGO_TARGET_DIR", build_dir(ws));
    cmd
}

/// Packages the crates into `out`; returns the `.crate` files.
///
/// One `cargo package` of all of them: cargo resolves the unpublished ones through a
/// temporary local registry. The working tree is packaged as it is (`--allow-dirty`).
///
/// `--no-verify`: cargo's verification builds each `.crate` alone in a debug build (the
/// eight crates and all their dependencies, minutes on two cores, most of what building the
/// packages took). crates/packages/tests/rust.rs builds the packaged crates in a fresh
/// project outside the workspace instead (and installs the `onesync` command from its
/// `.crate`), which is the same check made the way a user gets them.
pub fn build(ws: &Workspace, out: &Path) -> Result<Vec<PathBuf>> {
    let packaged = build_dir(ws).join("package");
    // Drop earlier versions' files, so that each crate's file below is this run's.
    if let Ok(entries) = std::fs::read_dir(&packaged) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".crate") && CRATES.iter().any(|c| crate_file_of(&name, c)) {
                std::fs::remove_file(entry.path()).with_context(|| format!("removing {name}"))?;
            }
        }
    }
    forget_earlier_packagings()?;
    let mut cmd = cargo(ws);
    cmd.args(["package", "--allow-dirty", "--no-verify"]);
    for c in CRATES {
        cmd.args(["-p", c]);
    }
    let status = cmd.status().context("running cargo package")?;
    if !status.success() {
        bail!("cargo package failed ({status})");
    }
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let files: Vec<String> = std::fs::read_dir(&packaged)
        .with_context(|| format!("reading {}", packaged.display()))?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let mut copied = Vec::new();
    for c in CRATES {
        let Some(name) = files.iter().find(|n| crate_file_of(n, c)) else {
            bail!(
                "cargo package wrote no .crate file for {c} in {}",
                packaged.display()
            );
        };
        let to = out.join(name);
        std::fs::copy(packaged.join(name), &to).with_context(|| format!("copying {name}"))?;
        copied.push(to);
    }
    Ok(copied)
}

/// Whether `file` is a `.crate` file of crate `name` (`NAME-VERSION.crate`; `onesync-vfs-…`
/// is not one of `onesync`'s).
fn crate_file_of(file: &str, name: &str) -> bool {
    file.strip_suffix(".crate")
        .is_some_and(|stem| versioned_name_of(stem, name))
}

/// Whether `stem` is `NAME-VERSION` of crate `name`.
fn versioned_name_of(stem: &str, name: &str) -> bool {
    stem.strip_prefix(name)
        .and_then(|f| f.strip_prefix('-'))
        .is_some_and(|version| version.starts_with(|c: char| c.is_ascii_digit()))
}

/// `cargo package` resolves the crates that depend on each other through a local registry,
/// and cargo takes a registry crate of one name and version never to change: it unpacks or
/// caches it under `CARGO_HOME/registry/{src,cache}/-HASH/` once. A later run with changed
/// sources of the same version would see the first run's copy (CI found `onesync-vfs`
/// verified against an old `onesync-store`). Forget the unpacked copies and cached `.crate`
/// files of local registries (named `-HASH`: they have no host) before packaging.
fn forget_earlier_packagings() -> Result<()> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    let Some(home) = home else {
        return Ok(());
    };
    for area in ["src", "cache"] {
        let Ok(registries) = std::fs::read_dir(home.join("registry").join(area)) else {
            continue;
        };
        let local = registries
            .flatten()
            .filter(|r| r.file_name().to_string_lossy().starts_with('-'));
        for registry in local {
            for entry in std::fs::read_dir(registry.path())?.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let stem = name.strip_suffix(".crate").unwrap_or(&name);
                if !CRATES.iter().any(|c| versioned_name_of(stem, c)) {
                    continue;
                }
                let path = entry.path();
                let removed = if path.is_dir() {
                    std::fs::remove_dir_all(&path)
                } else {
                    std::fs::remove_file(&path)
                };
                removed.with_context(|| format!("removing {}", path.display()))?;
            }
        }
    }
    Ok(())
}
