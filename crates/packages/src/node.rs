//! The node package.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

use crate::workspace::Workspace;

/// Builds the package into `out`; returns its path.
pub fn build(_ws: &Workspace, _out: &Path) -> Result<PathBuf> {
    bail!("the node package is not built yet")
}
