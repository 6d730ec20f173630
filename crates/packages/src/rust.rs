//! The publishable Rust crates.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

use crate::workspace::Workspace;

/// Packages the crates into `out`; returns the `.crate` files.
pub fn build(_ws: &Workspace, _out: &Path) -> Result<Vec<PathBuf>> {
    bail!("the Rust crates are not packaged yet")
}
