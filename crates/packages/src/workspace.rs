//! Where the workspace is, and building what the packages carry.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

pub struct Workspace {
    /// The workspace root (the directory of the top-level Cargo.toml).
    pub root: PathBuf,
}

impl Workspace {
    /// The workspace this binary was built from.
    pub fn find() -> Result<Self> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .ancestors()
            .nth(2)
            .context("crates/packages has no workspace above it")?
            .to_path_buf();
        if !root.join("Cargo.toml").is_file() {
            bail!("no workspace at {}", root.display());
        }
        Ok(Self { root })
    }

    /// The release `libonesync.so`, built if needed (`cargo build --release -p onesync-vfs`).
    pub fn loadable_extension(&self) -> Result<PathBuf> {
        let status = std::process::Command::new(env!("CARGO"))
            .args(["build", "--release", "-p", "onesync-vfs"])
            .current_dir(&self.root)
            .status()
            .context("running cargo build")?;
        if !status.success() {
            bail!("cargo build -p onesync-vfs failed");
        }
        Ok(self.root.join("target/release/libonesync.so"))
    }
}
