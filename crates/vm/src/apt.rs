//! Installing the host packages a boot needs (as root, with apt-get) when they are missing.

use std::process::Command;

use anyhow::{anyhow, bail, Context, Result};

use crate::initramfs::static_busybox;
use crate::kernel::newest_kernel;
use crate::process::{find_program, run_to_completion, running_as_root};
use crate::types::Progress;

/// A Debian package and how to tell that it is installed.
pub struct Need {
    pub package: &'static str,
    pub present: fn() -> bool,
}

/// What every boot needs: qemu, a kernel with modules, mkfs for both filesystems, and a
/// static busybox for the guest's /init.
const BOOT_NEEDS: &[Need] = &[
    Need {
        package: "qemu-system-x86",
        present: || find_program("qemu-system-x86_64").is_some(),
    },
    Need {
        package: "linux-image-amd64",
        present: || newest_kernel().is_ok(),
    },
    Need {
        package: "f2fs-tools",
        present: || find_program("mkfs.f2fs").is_some(),
    },
    Need {
        package: "busybox-static",
        present: || static_busybox().is_some(),
    },
    Need {
        package: "e2fsprogs",
        present: || find_program("mkfs.ext4").is_some(),
    },
];

/// Installs whatever of the boot's needs and `extra` is missing (needs root), then checks
/// that each is usable.
pub fn install_missing(extra: &[Need], progress: &dyn Progress) -> Result<()> {
    let needs = || BOOT_NEEDS.iter().chain(extra);
    let missing: Vec<&str> = needs()
        .filter(|need| !(need.present)())
        .map(|need| need.package)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let install_line = format!("apt-get install -y --no-install-recommends {}", missing.join(" "));
    if !running_as_root() {
        bail!(
            "the VM needs {}: run as root, or first: {install_line}",
            missing.join(", ")
        );
    }
    let apt_get = find_program("apt-get")
        .ok_or_else(|| anyhow!("apt-get not found; install by hand: {}", missing.join(" ")))?;
    progress.begin("installing packages (apt-get)");
    run_to_completion(
        Command::new(&apt_get)
            .arg("update")
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
    .context("apt-get update (before installing the VM's packages)")?;
    run_to_completion(
        Command::new(&apt_get)
            .args(["install", "-y", "--no-install-recommends"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
    .with_context(|| format!("installing the VM's packages: {install_line}"))?;
    progress.end();
    if let Some(need) = needs().find(|need| !(need.present)()) {
        bail!("{} was installed but is still not usable", need.package);
    }
    Ok(())
}
