//! The guest's disk: a fresh sparse image file formatted with F2FS or ext4 on the host.

use std::fmt;
use std::fs::File;
use std::path::Path;
use std::process::Command;

use anyhow::{anyhow, Context, Result};

use crate::process::{find_program, run_to_completion};

/// The filesystems a guest image can have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum GuestFs {
    F2fs,
    Ext4,
}

impl GuestFs {
    pub fn name(self) -> &'static str {
        match self {
            GuestFs::F2fs => "f2fs",
            GuestFs::Ext4 => "ext4",
        }
    }

    fn mkfs_program(self) -> &'static str {
        match self {
            GuestFs::F2fs => "mkfs.f2fs",
            GuestFs::Ext4 => "mkfs.ext4",
        }
    }

    /// The Debian package of `mkfs_program`.
    fn package(self) -> &'static str {
        match self {
            GuestFs::F2fs => "f2fs-tools",
            GuestFs::Ext4 => "e2fsprogs",
        }
    }

    /// Quiet and overwriting. ext4 also initializes its inode tables and journal now:
    /// otherwise a guest kernel thread zeroes them during the first run.
    fn mkfs_flags(self) -> &'static [&'static str] {
        match self {
            GuestFs::F2fs => &["-q", "-f"],
            GuestFs::Ext4 => &["-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0"],
        }
    }
}

impl fmt::Display for GuestFs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Makes a fresh sparse image file of `size_mib` MiB at `path` (replacing any file there) and
/// formats it with `fs`.
pub fn make_image(path: &Path, fs: GuestFs, size_mib: u64) -> Result<()> {
    let size = size_mib
        .checked_mul(1 << 20)
        .ok_or_else(|| anyhow!("an image of {size_mib} MiB is too large"))?;
    // Before the file is replaced: a missing mkfs leaves an existing image alone.
    let mkfs = mkfs_program(fs)?;
    // Truncating to 0 first drops the old blocks, so the image is sparse again.
    File::create(path)
        .and_then(|image| image.set_len(size))
        .with_context(|| format!("making sparse image {}", path.display()))?;
    run_to_completion(Command::new(mkfs).args(fs.mkfs_flags()).arg(path))
}

/// Formats the existing file at `path` with `fs`, keeping its size: for an image that cannot
/// be truncated or resized, such as an emulated device's (`onesync-device`).
pub fn format_image(path: &Path, fs: GuestFs) -> Result<()> {
    let mkfs = mkfs_program(fs)?;
    run_to_completion(Command::new(mkfs).args(fs.mkfs_flags()).arg(path))
}

/// Where `fs`'s mkfs is, or what to install.
fn mkfs_program(fs: GuestFs) -> Result<std::path::PathBuf> {
    find_program(fs.mkfs_program()).ok_or_else(|| {
        anyhow!(
            "{} not found: apt-get install {}",
            fs.mkfs_program(),
            fs.package()
        )
    })
}
