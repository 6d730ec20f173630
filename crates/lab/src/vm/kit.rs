//! What the lab puts in the guest: a statically linked `onesync-lab` (this very command), the
//! dynamically linked `libonesync.so` and Debian's `sqlite3` to load it, built or found here
//! and handed to `onesync_vm`, which caches the initramfs in target/vm.

use std::cell::RefCell;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use indicatif::ProgressBar;
use onesync_vm::apt::Need;
use onesync_vm::cargo::{cargo_build, find_cargo, CargoBuild};
use onesync_vm::{check_static_x86_64, GuestFiles, KitRecipe, Progress, VmKit};

use crate::progress::phase_spinner;

/// The workspace root, where guest programs are built and the initramfs cached.
const WORKSPACE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
/// The environment variable naming a ready static `onesync-lab` for the guest.
const BINARY_ENV: &str = "ONESYNC_VM_BINARY";
/// The target the guest binary is built for (static glibc).
const GUEST_TARGET: &str = "x86_64-unknown-linux-gnu";
/// Where the guest finds the loadable extension (for Debian's `sqlite3` CLI there).
pub const GUEST_EXTENSION: &str = "opt/onesync/libonesync.so";
/// Names a prebuilt `libonesync.so` for the guest instead of a build into target/vm.
const EXTENSION_ENV: &str = "ONESYNC_VM_EXTENSION";
/// Debian's own SQLite shell, copied into the guest with its libraries.
const HOST_SQLITE_CLI: &str = "/usr/bin/sqlite3";

const LAB_NEEDS: &[Need] = &[Need {
    package: "sqlite3",
    present: || Path::new(HOST_SQLITE_CLI).is_file(),
}];

/// Installs what is missing (as root, with apt-get), finds the kernel, gets a static
/// `onesync-lab` (ONESYNC_VM_BINARY, this executable if it is static, else a build into
/// target/vm) and builds the initramfs unless a cached one is current.
pub fn prepare() -> Result<VmKit> {
    let cache_dir = cache_dir();
    let recipe = KitRecipe {
        extra_needs: LAB_NEEDS,
        cache_dir: &cache_dir,
        progress: &Spinner::default(),
    };
    VmKit::prepare(&recipe, guest_files)
}

fn guest_files() -> Result<GuestFiles> {
    let mut files = GuestFiles {
        programs: vec![("onesync-lab".to_owned(), static_lab()?)],
        dynamic: Vec::new(),
    };
    let extension = guest_extension()?;
    if Path::new(HOST_SQLITE_CLI).is_file() {
        files.dynamic.push((
            HOST_SQLITE_CLI.trim_start_matches('/').to_owned(),
            PathBuf::from(HOST_SQLITE_CLI),
        ));
    }
    if let Some(extension) = extension {
        files.dynamic.push((GUEST_EXTENSION.to_owned(), extension));
    }
    Ok(files)
}

/// The lab's phase spinner for the kit's long steps.
#[derive(Default)]
struct Spinner(RefCell<Option<ProgressBar>>);

impl Progress for Spinner {
    fn begin(&self, step: &'static str) {
        self.0.replace(Some(phase_spinner("vm", step)));
    }

    fn end(&self) {
        if let Some(spinner) = self.0.take() {
            spinner.finish_and_clear();
        }
    }
}

fn static_lab() -> Result<PathBuf> {
    if let Some(named) = std::env::var_os(BINARY_ENV) {
        let path = PathBuf::from(&named);
        if !path.is_file() {
            bail!("{BINARY_ENV}={} is not a file", path.display());
        }
        check_static_x86_64(&path).with_context(|| format!("{BINARY_ENV}={}", path.display()))?;
        return Ok(path);
    }
    // Ourselves, if static; a test binary (deps/onesync_lab-HASH) is not the command.
    if let Ok(own) = fs::read_link("/proc/self/exe") {
        let is_lab = own.file_name().is_some_and(|name| name == "onesync-lab");
        if is_lab && check_static_x86_64(&own).is_ok() {
            return Ok(own);
        }
    }
    build_static_lab()
}

/// Builds `onesync-lab` with static glibc into target/vm.
fn build_static_lab() -> Result<PathBuf> {
    let workspace = workspace_dir().ok_or_else(|| {
        anyhow!(
            "no static onesync-lab for the guest: this executable is dynamically linked and its \
             workspace ({WORKSPACE_DIR}) is gone; set {BINARY_ENV} to a static build"
        )
    })?;
    let target_dir = workspace.join("target/vm");
    eprintln!(
        "onesync-lab: the guest's static onesync-lab: cargo build --target {GUEST_TARGET} into {}",
        target_dir.display()
    );
    cargo_build(&CargoBuild {
        cargo: &cargo()?,
        workspace: &workspace,
        target_dir: &target_dir,
        args: &["-p", "onesync-lab", "--target", GUEST_TARGET],
        static_glibc: true,
    })
    .context("building the static onesync-lab for the guest")?;
    let binary = target_dir.join(GUEST_TARGET).join("release/onesync-lab");
    check_static_x86_64(&binary).with_context(|| format!("the build's output {}", binary.display()))?;
    Ok(binary)
}

/// `libonesync.so` (dynamically linked, as a stock SQLite loads it): ONESYNC_VM_EXTENSION, or
/// a build into target/vm; None without either (no workspace).
fn guest_extension() -> Result<Option<PathBuf>> {
    if let Some(named) = std::env::var_os(EXTENSION_ENV) {
        let path = PathBuf::from(&named);
        if !path.is_file() {
            bail!("{EXTENSION_ENV}={} is not a file", path.display());
        }
        return Ok(Some(path));
    }
    let Some(workspace) = workspace_dir() else {
        return Ok(None);
    };
    let target_dir = workspace.join("target/vm");
    cargo_build(&CargoBuild {
        cargo: &cargo()?,
        workspace: &workspace,
        target_dir: &target_dir,
        args: &["-p", "onesync-extension"],
        static_glibc: false,
    })
    .context("building libonesync.so for the guest")?;
    Ok(Some(target_dir.join("release/libonesync.so")))
}

fn cargo() -> Result<PathBuf> {
    find_cargo().ok_or_else(|| {
        anyhow!(
            "cargo not found: it is needed to build a static onesync-lab for the guest (or set \
             {BINARY_ENV} to one)"
        )
    })
}

fn workspace_dir() -> Option<PathBuf> {
    let dir = Path::new(WORKSPACE_DIR);
    dir.join("Cargo.toml")
        .is_file()
        .then(|| dir.canonicalize().ok())
        .flatten()
}

/// target/vm in the workspace if it is still there, else a directory in $TMPDIR.
fn cache_dir() -> PathBuf {
    match workspace_dir() {
        Some(workspace) => workspace.join("target/vm"),
        None => std::env::temp_dir().join("onesync-vm"),
    }
}
