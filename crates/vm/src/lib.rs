//! `onesync-vm`: boot a real Linux kernel (Debian's, from /boot) in qemu under software
//! emulation (TCG) on a given filesystem image, with an initramfs holding given programs, run
//! one command in the guest, stream its console, and optionally cut the power.
//!
//! The guest's /init (`guest/init.sh`, a busybox script) mounts the image on /mnt, prints a
//! start marker, runs the command with stdout on the serial console and stderr into a file,
//! then prints the exit status and the stderr between markers, unmounts and powers off. The
//! host reads the console line by line, separates the command's lines from boot noise by the
//! markers, and can cut the power (SIGKILL qemu) at a chosen moment: qemu writes the image
//! through the host's page cache (`cache=writeback`), so every write the guest completed is
//! in the image file, and nothing else is. (Writeback rather than directsync: the guest then
//! sees a disk with a volatile write cache and sends flushes, which is what its block
//! statistics must count.)
//!
//! The modules by job: `apt` installs what is missing, `kernel` finds the kernel and the
//! modules to load, `elf` and `libs` tell static programs from dynamic ones and find the
//! latter's libraries, `cargo` builds guest programs, `initramfs` writes the archive, `image`
//! formats the disk, `qemu` starts the machine, `console` reads it, `guest` holds helpers
//! for programs that run inside; `types` holds the data the calls take and give.
#![forbid(unsafe_code)]

pub mod apt;
pub mod cargo;
mod console;
mod elf;
pub mod guest;
mod image;
mod initramfs;
mod kernel;
mod libs;
mod process;
mod qemu;
mod types;

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};

pub use elf::check_static_x86_64;
pub use image::{format_image, make_image, GuestFs};
pub use types::{GuestFiles, GuestOutcome, GuestRun, PowerCut, Progress};

use console::{BootEnd, Console};
use process::find_program;
use qemu::Qemu;

/// How to prepare a [`VmKit`].
pub struct KitRecipe<'a> {
    /// Packages the guest's files need beyond what every boot needs.
    pub extra_needs: &'a [apt::Need],
    /// Where initramfs builds are kept between runs (one at a time).
    pub cache_dir: &'a Path,
    pub progress: &'a dyn Progress,
}

/// Everything needed to boot: the kernel, the cached initramfs and qemu.
#[derive(Debug, Clone)]
pub struct VmKit {
    qemu: PathBuf,
    kernel: PathBuf,
    kernel_version: String,
    initramfs: PathBuf,
    /// Holds `initramfs` (removed with the last clone of the kit).
    _kit_dir: Arc<tempfile::TempDir>,
}

impl VmKit {
    /// Installs what is missing (as root, with apt-get), finds qemu and the newest
    /// /boot/vmlinuz-*, then takes the guest's files from `guest_files` and builds the
    /// initramfs unless a cached one is current.
    pub fn prepare(recipe: &KitRecipe, guest_files: impl FnOnce() -> Result<GuestFiles>) -> Result<VmKit> {
        apt::install_missing(recipe.extra_needs, recipe.progress)?;
        let qemu = find_program("qemu-system-x86_64")
            .ok_or_else(|| anyhow!("qemu-system-x86_64 not found after installing qemu-system-x86"))?;
        let (kernel, kernel_version) = kernel::newest_kernel()?;
        File::open(&kernel).with_context(|| {
            format!(
                "cannot read the kernel {} (booting it needs read access; run as root)",
                kernel.display()
            )
        })?;
        let mut files = guest_files()?;
        for (name, program) in &files.programs {
            check_static_x86_64(program)
                .with_context(|| format!("the guest's {name} ({})", program.display()))?;
        }
        let roots: Vec<&Path> = files.dynamic.iter().map(|(_, host)| host.as_path()).collect();
        let libraries = libs::shared_libraries(&roots)?;
        files.dynamic.extend(libraries);
        recipe.progress.begin("building the initramfs");
        let cached = initramfs::cached_initramfs(&kernel_version, &files, recipe.cache_dir)?;
        recipe.progress.end();
        // A hard link of our own: a later run with other files deletes the cached one as
        // stale, and a long run (torture) must keep booting what it started with.
        let kit_dir = Arc::new(
            tempfile::Builder::new()
                .prefix("onesync-vm-kit-")
                .tempdir()
                .context("making a temporary directory for the initramfs")?,
        );
        let initramfs = kit_dir.path().join("initramfs.cpio");
        if fs::hard_link(&cached, &initramfs).is_err() {
            fs::copy(&cached, &initramfs)
                .with_context(|| format!("copying {} to {}", cached.display(), initramfs.display()))?;
        }
        Ok(VmKit {
            qemu,
            kernel,
            kernel_version,
            initramfs,
            _kit_dir: kit_dir,
        })
    }

    /// The guest kernel's version, e.g. "6.1.0-56-amd64".
    pub fn kernel_version(&self) -> &str {
        &self.kernel_version
    }

    /// Boots qemu once on `run.image`, runs `run.argv` in the guest and returns what it
    /// printed.
    pub fn boot(&self, run: &GuestRun) -> Result<GuestOutcome> {
        self.boot_with(run, &mut |_| {})
    }

    /// As `boot`, and calls `on_line` with each of the command's stdout lines as it arrives
    /// (to stream them).
    pub fn boot_with(&self, run: &GuestRun, on_line: &mut dyn FnMut(&str)) -> Result<GuestOutcome> {
        let work = tempfile::Builder::new()
            .prefix("onesync-vm-boot-")
            .tempdir()
            .context("making a temporary directory for the boot")?;
        let initrd = work.path().join("initrd.cpio");
        initramfs::write_boot_initrd(&self.initramfs, &run.argv, &initrd)?;
        let mut qemu = Qemu::spawn(qemu::qemu_command(&self.qemu, &self.kernel, run, &initrd)?)?;
        let mut console = Console::default();
        match console::follow(&qemu, run, &mut console, on_line) {
            BootEnd::PowerCut => {
                qemu.kill()?;
                // Lines still in the pipe were printed before the kill.
                for line in qemu.lines.iter() {
                    if let Some(command_line) = console.feed(&line) {
                        on_line(command_line);
                    }
                }
                Ok(GuestOutcome {
                    stdout: console.stdout,
                    stderr: String::new(),
                    exit_code: None,
                    power_cut: true,
                })
            }
            BootEnd::TimedOut => {
                qemu.kill()?;
                let qemu_stderr = qemu.stderr_text();
                bail!(
                    "the guest did not finish within {:?}; qemu killed.{}",
                    run.timeout,
                    console.describe(&qemu_stderr)
                )
            }
            BootEnd::ConsoleClosed => {
                let status = qemu.wait_briefly()?;
                let qemu_stderr = qemu.stderr_text();
                if !console.finished() {
                    bail!(
                        "the guest stopped (qemu {status}) before the command's exit status and \
                         stderr were printed.{}",
                        console.describe(&qemu_stderr)
                    );
                }
                if !status.success() {
                    bail!("qemu failed ({status}).{}", console.describe(&qemu_stderr));
                }
                for problem in &console.problems {
                    eprintln!("onesync: warning: in the guest: {problem}");
                }
                Ok(GuestOutcome {
                    stdout: console.stdout,
                    stderr: console.stderr,
                    exit_code: console.exit_code,
                    power_cut: false,
                })
            }
        }
    }
}
