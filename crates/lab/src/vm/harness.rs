//! The machinery of `onesync vm`: what a boot needs (packages, Debian's kernel, a statically
//! linked `onesync`, an initramfs), fresh disk images, and one boot of qemu in software
//! emulation (TCG) that runs one command on the mounted image and reports what it printed.
//!
//! The guest's /init (a busybox script) mounts the image on /mnt, prints a start marker, runs
//! the command with stdout on the serial console and stderr into a file, then prints the exit
//! status and the stderr between markers, unmounts and powers off. The host reads the console
//! line by line, separates the command's lines from boot noise by the markers, and can cut
//! the power (SIGKILL qemu) at a chosen moment: qemu writes the image through the host's page
//! cache (`cache=writeback`), so every write the guest completed is in the image file, and
//! nothing else is. (Writeback rather than directsync: the guest then sees a disk with a
//! volatile write cache and sends flushes, which is what its block statistics must count.)
//!
//! The command's argv reaches the guest as a generated shell file in a second, tiny cpio
//! archive appended to the cached initramfs (Linux unpacks concatenated archives), so no
//! argument passes through the kernel command line.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::fs::{self, File};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::{self, BufRead, BufReader, BufWriter, IsTerminal, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;

use crate::loopfs::{find_program, last_lines, run, running_as_root};
use crate::progress::phase_spinner;

/// The workspace root, where the static binary is built and the initramfs cached.
const WORKSPACE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
/// The environment variable naming a ready static `onesync` for the guest.
const BINARY_ENV: &str = "ONESYNC_VM_BINARY";
/// The target the guest binary is built for (static glibc).
const GUEST_TARGET: &str = "x86_64-unknown-linux-gnu";
/// ELF `e_machine` of x86-64, the only guest architecture.
const EM_X86_64: u16 = 62;
/// Guest memory, MiB.
const GUEST_MEMORY_MIB: u32 = 1024;
/// Console lines kept for error messages.
const TAIL_LINES: usize = 40;
/// Modules the guest loads (with their dependencies from modules.dep, skipping built-ins):
/// the virtio disk, both filesystems, and the CRC drivers that F2FS ("Cannot load crc32
/// driver") and ext4/jbd2 (crc32c) look up by name at mount, which modules.dep cannot know.
const GUEST_MODULES: &[&str] = &[
    "virtio_pci",
    "virtio_blk",
    "crc32_generic",
    "crc32c_generic",
    "f2fs",
    "ext4",
];
/// Bumped whenever the initramfs layout changes, so that cached ones are rebuilt.
const INITRAMFS_FORMAT: u32 = 2;
/// The generated file in the per-boot archive that sets the command's argv.
const ARGS_FILE: &str = "onesync-args.sh";

// Console markers printed by /init. Each is searched for anywhere in a line, so that a
// command whose output does not end in a newline still has its last line and its marker.
const MARK_START: &str = "@@onesync-vm:start@@";
const MARK_EXIT: &str = "@@onesync-vm:exit=";
const MARK_END: &str = "@@";
const MARK_STDERR_BEGIN: &str = "@@onesync-vm:stderr-begin@@";
const MARK_STDERR_END: &str = "@@onesync-vm:stderr-end@@";
const MARK_PROBLEM: &str = "@@onesync-vm:problem ";

/// The guest's /init; `@MODULES@` becomes the module files to insmod, in order.
const INIT_SCRIPT: &str = r#"#!/bin/busybox sh
# /init of the onesync VM harness (crates/lab/src/vm/harness.rs).
/bin/busybox --install -s /bin
export PATH=/bin TERM=dumb HOME=/
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
# Bytes as the command wrote them: no "\n" -> "\r\n" on the console.
stty -F /dev/console -opost 2>/dev/null
for module in @MODULES@; do
    insmod "/lib/modules/$module" || echo "@@onesync-vm:problem insmod $module failed@@"
done
fs=
for word in $(cat /proc/cmdline); do
    case "$word" in onesync.fs=*) fs="${word#onesync.fs=}" ;; esac
done
tries=0
while [ ! -b /dev/vda ] && [ "$tries" -lt 100 ]; do usleep 50000; tries=$((tries + 1)); done
if mount -t "$fs" /dev/vda /mnt; then
    cd /mnt
    . "/@ARGS@"
    echo "@@onesync-vm:start@@"
    "$@" </dev/null 2>/tmp/stderr
    code=$?
    echo "@@onesync-vm:exit=$code@@"
    echo "@@onesync-vm:stderr-begin@@"
    cat /tmp/stderr
    echo "@@onesync-vm:stderr-end@@"
    cd /
    kill -9 -1 2>/dev/null
    sync
    umount /mnt || echo "@@onesync-vm:problem umount /mnt failed@@"
else
    echo "@@onesync-vm:problem mount -t $fs /dev/vda /mnt failed@@"
    dmesg | tail -n 20
fi
poweroff -f
"#;

/// The filesystems a guest image can have.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
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

    /// Quiet and overwriting. ext4 also initializes its inode tables and journal now, as
    /// `loopfs` does: otherwise a guest kernel thread zeroes them during the first run.
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

/// One boot: which image, which command, and when to give up or cut the power.
pub struct GuestRun<'a> {
    pub image: &'a Path,
    pub fs: GuestFs,
    /// argv of the command run in the guest, with cwd = the mounted image (/mnt) and the
    /// static `onesync` on PATH. Any text survives (it travels in a generated shell file).
    pub argv: Vec<String>,
    /// Give up (kill qemu, return an error) after this long.
    pub timeout: Duration,
    /// A power cut: kill qemu `delay` after the first command stdout line that starts with
    /// `after_line_prefix`, unless the command has exited by then.
    pub power_cut: Option<PowerCut>,
    /// Throttle the guest's disk to this many read/write requests per second (qemu's
    /// `throttling.iops-total`): a slow device, so that a power cut often lands while a
    /// commit's writes are in flight.
    pub disk_iops: Option<u32>,
}

/// When to cut the power (SIGKILL qemu) during a boot.
pub struct PowerCut {
    pub after_line_prefix: String,
    pub delay: Duration,
}

/// What the guest command printed, and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestOutcome {
    /// The command's stdout, line by line (trailing '\r' stripped), everything received; for
    /// a power cut, everything the guest had printed when it was killed.
    pub stdout: Vec<String>,
    /// The command's stderr (empty after a power cut).
    pub stderr: String,
    /// The command's exit status (128+N if a signal N ended it); None after a power cut.
    pub exit_code: Option<i32>,
    pub power_cut: bool,
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
    /// Installs what is missing (as root, with apt-get), finds the newest /boot/vmlinuz-*,
    /// gets a static `onesync` (ONESYNC_VM_BINARY, this executable if it is static, else a
    /// build into target/vm) and builds the initramfs unless a cached one is current.
    pub fn prepare() -> Result<VmKit> {
        install_missing_packages()?;
        let qemu = find_program("qemu-system-x86_64")
            .ok_or_else(|| anyhow!("qemu-system-x86_64 not found after installing qemu-system-x86"))?;
        let (kernel, kernel_version) = newest_kernel()?;
        File::open(&kernel).with_context(|| {
            format!(
                "cannot read the kernel {} (booting it needs read access; run as root)",
                kernel.display()
            )
        })?;
        let binary = static_onesync()?;
        let extension = guest_extension()?;
        let extras = host_extras(extension.as_deref())?;
        let spinner = phase_spinner("vm", "building the initramfs");
        let cached = cached_initramfs(&kernel_version, &binary, &extras)?;
        spinner.finish_and_clear();
        // A hard link of our own: a later run with another binary deletes the cached file as
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
        write_boot_initrd(&self.initramfs, &run.argv, &initrd)?;
        let mut qemu = Qemu::spawn(self.qemu_command(run, &initrd)?)?;
        let mut console = Console::default();
        let deadline = later(run.timeout);
        let mut cut_at: Option<Instant> = None;
        let end = loop {
            let now = Instant::now();
            if now >= deadline {
                break BootEnd::TimedOut;
            }
            if cut_at.is_some_and(|at| now >= at) {
                break BootEnd::PowerCut;
            }
            let wake = cut_at.map_or(deadline, |at| at.min(deadline));
            match qemu.lines.recv_timeout(wake - now) {
                Ok(line) => {
                    if let Some(command_line) = console.feed(&line) {
                        on_line(command_line);
                        let cut_here = run.power_cut.as_ref().filter(|cut| {
                            cut_at.is_none() && command_line.starts_with(&cut.after_line_prefix)
                        });
                        if let Some(cut) = cut_here {
                            cut_at = Some(later(cut.delay));
                        }
                    }
                    if console.command_exited() {
                        // Too late to cut: the command has ended, let the guest unmount.
                        cut_at = None;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break BootEnd::ConsoleClosed,
            }
        };

        match end {
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

    fn qemu_command(&self, run: &GuestRun, initrd: &Path) -> Result<Command> {
        if run.argv.is_empty() {
            bail!("no command to run in the guest");
        }
        let image_meta = fs::metadata(run.image)
            .with_context(|| format!("the guest image {} is not there", run.image.display()))?;
        if !image_meta.is_file() {
            bail!("the guest image {} is not a regular file", run.image.display());
        }
        let image = run
            .image
            .to_str()
            .ok_or_else(|| anyhow!("the image path {} is not UTF-8", run.image.display()))?;
        let mut command = Command::new(&self.qemu);
        command
            .args(["-accel", "tcg", "-m", &GUEST_MEMORY_MIB.to_string(), "-smp", "1"])
            .args(["-nographic", "-no-reboot", "-nic", "none"])
            .arg("-kernel")
            .arg(&self.kernel)
            .arg("-initrd")
            .arg(initrd)
            .arg("-append")
            .arg(format!(
                "console=ttyS0 quiet loglevel=0 panic=-1 onesync.fs={}",
                run.fs.name()
            ))
            .arg("-drive")
            // qemu's option syntax: a comma inside a value is written twice.
            .arg(format!(
                "file={},format=raw,if=virtio,cache=writeback{}",
                image.replace(',', ",,"),
                run.disk_iops
                    .map(|iops| format!(",throttling.iops-total={iops}"))
                    .unwrap_or_default()
            ));
        Ok(command)
    }
}

/// Now plus `wait`, or a year from now for an absurd `wait` (no overflow panic).
fn later(wait: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(wait)
        .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
}

/// Makes a fresh sparse image file of `size_mib` MiB at `path` (replacing any file there) and
/// formats it with `fs`.
pub fn make_image(path: &Path, fs: GuestFs, size_mib: u64) -> Result<()> {
    let size = size_mib
        .checked_mul(1 << 20)
        .ok_or_else(|| anyhow!("an image of {size_mib} MiB is too large"))?;
    let mkfs = find_program(fs.mkfs_program()).ok_or_else(|| {
        anyhow!(
            "{} not found: apt-get install {}",
            fs.mkfs_program(),
            fs_package(fs)
        )
    })?;
    // Truncating to 0 first drops the old blocks, so the image is sparse again.
    File::create(path)
        .and_then(|image| image.set_len(size))
        .with_context(|| format!("making sparse image {}", path.display()))?;
    run(Command::new(mkfs).args(fs.mkfs_flags()).arg(path))?;
    Ok(())
}

fn fs_package(fs: GuestFs) -> &'static str {
    match fs {
        GuestFs::F2fs => "f2fs-tools",
        GuestFs::Ext4 => "e2fsprogs",
    }
}

// ---------------------------------------------------------------------------------------
// Packages, kernel, programs

/// A Debian package and how to tell that it is installed.
struct Need {
    package: &'static str,
    present: fn() -> bool,
}

const NEEDS: &[Need] = &[
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
        package: "sqlite3",
        present: || Path::new(HOST_SQLITE_CLI).is_file(),
    },
    Need {
        package: "e2fsprogs",
        present: || find_program("mkfs.ext4").is_some(),
    },
];

fn install_missing_packages() -> Result<()> {
    let missing: Vec<&str> = NEEDS
        .iter()
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
    let spinner = phase_spinner("vm", "installing packages (apt-get)");
    run(Command::new(&apt_get)
        .arg("update")
        .env("DEBIAN_FRONTEND", "noninteractive"))
    .context("apt-get update (before installing the VM's packages)")?;
    run(Command::new(&apt_get)
        .args(["install", "-y", "--no-install-recommends"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive"))
    .with_context(|| format!("installing the VM's packages: {install_line}"))?;
    spinner.finish_and_clear();
    if let Some(need) = NEEDS.iter().find(|need| !(need.present)()) {
        bail!("{} was installed but is still not usable", need.package);
    }
    Ok(())
}

/// The newest /boot/vmlinuz-VERSION that has /lib/modules/VERSION/modules.dep.
fn newest_kernel() -> Result<(PathBuf, String)> {
    let entries = fs::read_dir("/boot").context("listing /boot")?;
    let mut versions: Vec<String> = entries
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            Some(name.strip_prefix("vmlinuz-")?.to_owned())
        })
        .filter(|version| module_dir(version).join("modules.dep").is_file())
        .collect();
    versions.sort_by(|a, b| compare_versions(a, b));
    let version = versions.pop().ok_or_else(|| {
        anyhow!("no /boot/vmlinuz-* with modules in /lib/modules: apt-get install linux-image-amd64")
    })?;
    Ok((PathBuf::from(format!("/boot/vmlinuz-{version}")), version))
}

fn module_dir(version: &str) -> PathBuf {
    Path::new("/lib/modules").join(version)
}

/// Orders version strings by their runs of digits as numbers, the rest as text:
/// 6.1.0-9 < 6.1.0-56 < 6.10.0-1.
fn compare_versions(a: &str, b: &str) -> std::cmp::Ordering {
    fn chunks(version: &str) -> Vec<(bool, &str)> {
        let mut out = Vec::new();
        let mut start = 0;
        let bytes = version.as_bytes();
        for index in 1..=bytes.len() {
            let boundary =
                index == bytes.len() || bytes[index].is_ascii_digit() != bytes[index - 1].is_ascii_digit();
            if boundary {
                out.push((bytes[start].is_ascii_digit(), &version[start..index]));
                start = index;
            }
        }
        out
    }
    let key = |chunk: &(bool, &str)| -> (u8, u128, String) {
        match chunk {
            (true, digits) => (1, digits.parse().unwrap_or(u128::MAX), String::new()),
            (false, text) => (0, 0, (*text).to_owned()),
        }
    };
    let (a, b) = (chunks(a), chunks(b));
    a.iter().map(key).cmp(b.iter().map(key))
}

/// A statically linked busybox (busybox-static installs one as /bin/busybox).
fn static_busybox() -> Option<PathBuf> {
    ["/bin/busybox", "/usr/bin/busybox"]
        .into_iter()
        .map(PathBuf::from)
        .find(|path| read_elf_info(path).is_ok_and(|info| !info.has_interp))
}

// ---------------------------------------------------------------------------------------
// The static onesync

fn static_onesync() -> Result<PathBuf> {
    if let Some(named) = std::env::var_os(BINARY_ENV) {
        let path = PathBuf::from(&named);
        if !path.is_file() {
            bail!("{BINARY_ENV}={} is not a file", path.display());
        }
        check_static_guest_binary(&path).with_context(|| format!("{BINARY_ENV}={}", path.display()))?;
        return Ok(path);
    }
    // Ourselves, if static; a test binary (deps/onesync_lab-HASH) is not the command.
    if let Ok(own) = fs::read_link("/proc/self/exe") {
        let is_onesync = own.file_name().is_some_and(|name| name == "onesync");
        if is_onesync && check_static_guest_binary(&own).is_ok() {
            return Ok(own);
        }
    }
    build_static_onesync()
}

/// Builds `onesync` with static glibc into target/vm (a target directory of its own: this
/// may run inside `cargo test`, which holds the main one's lock).
fn build_static_onesync() -> Result<PathBuf> {
    let workspace = workspace_dir().ok_or_else(|| {
        anyhow!(
            "no static onesync for the guest: this executable is dynamically linked and its \
             workspace ({WORKSPACE_DIR}) is gone; set {BINARY_ENV} to a static build"
        )
    })?;
    let cargo = find_cargo()?;
    let target_dir = workspace.join("target/vm");
    eprintln!(
        "onesync: the guest's static onesync: cargo build --target {GUEST_TARGET} into {}",
        target_dir.display()
    );
    cargo_build(
        &cargo,
        &workspace,
        &target_dir,
        &["-p", "onesync-lab", "--target", GUEST_TARGET],
        true,
    )
    .context("building the static onesync for the guest")?;
    let binary = target_dir.join(GUEST_TARGET).join("release/onesync");
    check_static_guest_binary(&binary).with_context(|| format!("the build's output {}", binary.display()))?;
    Ok(binary)
}

fn find_cargo() -> Result<PathBuf> {
    std::env::var_os("CARGO")
        .map(PathBuf::from)
        .filter(|cargo| cargo.is_file())
        .or_else(|| find_program("cargo"))
        .or_else(|| {
            let home = std::env::var_os("HOME")?;
            Some(Path::new(&home).join(".cargo/bin/cargo")).filter(|cargo| cargo.is_file())
        })
        .ok_or_else(|| {
            anyhow!(
                "cargo not found: it is needed to build a static onesync for the guest (or set \
                 {BINARY_ENV} to one)"
            )
        })
}

/// `cargo build --release ARGS` in `workspace` into `target_dir`, with static glibc if
/// `static_glibc`; cargo's output goes to our stderr (our stdout may be the guest's).
fn cargo_build(
    cargo: &Path,
    workspace: &Path,
    target_dir: &Path,
    args: &[&str],
    static_glibc: bool,
) -> Result<()> {
    let stderr = io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .context("duplicating stderr for cargo")?;
    let color = if io::stderr().is_terminal() {
        "always"
    } else {
        "never"
    };
    let mut command = Command::new(cargo);
    command
        .current_dir(workspace)
        .args(["build", "--release"])
        .args(args)
        .args(["--color", color])
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env("CARGO_TARGET_DIR", target_dir)
        // The guest needs no debug info, and smaller files are a smaller initramfs.
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_STRIP", "debuginfo")
        .stdin(Stdio::null())
        .stdout(Stdio::from(stderr))
        .stderr(Stdio::piped());
    if static_glibc {
        command.env("RUSTFLAGS", "-C target-feature=+crt-static");
    } else {
        command.env_remove("RUSTFLAGS");
    }
    let mut child = command
        .spawn()
        .with_context(|| format!("could not start {}", cargo.display()))?;
    if let Some(cargo_stderr) = child.stderr.take() {
        forward_cargo_messages(cargo_stderr);
    }
    let status = child.wait().context("waiting for cargo")?;
    if !status.success() {
        bail!(
            "cargo build {} failed ({status}); cargo's messages are above",
            args.join(" ")
        );
    }
    Ok(())
}

/// Where the guest finds the loadable extension (for Debian's `sqlite3` CLI there).
pub const GUEST_EXTENSION: &str = "opt/onesync/libonesync.so";
/// Names a prebuilt `libonesync.so` for the guest instead of a build into target/vm.
const EXTENSION_ENV: &str = "ONESYNC_VM_EXTENSION";
/// Debian's own SQLite shell, copied into the guest with its libraries.
const HOST_SQLITE_CLI: &str = "/usr/bin/sqlite3";

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
    cargo_build(
        &find_cargo()?,
        &workspace,
        &target_dir,
        &["-p", "onesync-vfs"],
        false,
    )
    .context("building libonesync.so for the guest")?;
    Ok(Some(target_dir.join("release/libonesync.so")))
}

/// Host files the guest gets too, as (path in the guest, path on the host): Debian's
/// `sqlite3` at its own path, `libonesync.so` at [`GUEST_EXTENSION`], and every shared
/// library they load (as `ldd` finds them), so a stock SQLite can load the extension there.
fn host_extras(extension: Option<&Path>) -> Result<Vec<(String, PathBuf)>> {
    let mut extras = Vec::new();
    let mut roots = Vec::new();
    if Path::new(HOST_SQLITE_CLI).is_file() {
        extras.push((
            HOST_SQLITE_CLI.trim_start_matches('/').to_owned(),
            PathBuf::from(HOST_SQLITE_CLI),
        ));
        roots.push(PathBuf::from(HOST_SQLITE_CLI));
    }
    if let Some(extension) = extension {
        extras.push((GUEST_EXTENSION.to_owned(), extension.to_owned()));
        roots.push(extension.to_owned());
    }
    let mut seen = HashSet::new();
    for root in roots {
        let out = Command::new("ldd")
            .arg(&root)
            .output()
            .with_context(|| format!("running ldd {}", root.display()))?;
        for library in parse_ldd(&String::from_utf8_lossy(&out.stdout)) {
            if seen.insert(library.clone()) {
                extras.push((
                    library.trim_start_matches('/').to_owned(),
                    PathBuf::from(&library),
                ));
            }
        }
    }
    Ok(extras)
}

/// The absolute paths in `ldd` output ("libz.so.1 => /lib/.../libz.so.1 (0x...)" and
/// "/lib64/ld-linux-x86-64.so.2 (0x...)").
fn parse_ldd(output: &str) -> Vec<String> {
    output
        .lines()
        .filter_map(|line| {
            let line = line.trim();
            let path = match line.split_once("=>") {
                Some((_, right)) => right.split_whitespace().next()?,
                None => line.split_whitespace().next()?,
            };
            path.starts_with('/').then(|| path.to_owned())
        })
        .collect()
}

/// Copies cargo's messages to our stderr as they come, except the one warning every static
/// build gives (the vfs crate's cdylib cannot be built with crt-static, and is not needed).
fn forward_cargo_messages(messages: impl Read) {
    let mut skip_blank = false;
    for line in BufReader::new(messages).split(b'\n') {
        let Ok(line) = line else { break };
        let text = String::from_utf8_lossy(&line);
        let plain = strip_ansi(&text);
        if plain.contains("dropping unsupported crate type `cdylib`") {
            skip_blank = true;
            continue;
        }
        if plain.contains("`onesync-vfs` (lib) generated 1 warning")
            || (skip_blank && plain.trim().is_empty())
        {
            skip_blank = false;
            continue;
        }
        skip_blank = false;
        let mut err = io::stderr().lock();
        let _ = err.write_all(&line).and_then(|()| err.write_all(b"\n"));
    }
}

/// `text` without ANSI escape sequences (cargo's colours).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // CSI: ESC '[' parameters, ended by a letter.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn workspace_dir() -> Option<PathBuf> {
    let dir = Path::new(WORKSPACE_DIR);
    dir.join("Cargo.toml")
        .is_file()
        .then(|| dir.canonicalize().ok())
        .flatten()
}

fn check_static_guest_binary(path: &Path) -> Result<()> {
    let info = read_elf_info(path)?;
    if info.machine != EM_X86_64 {
        bail!("not an x86-64 program (ELF machine {})", info.machine);
    }
    if info.has_interp {
        bail!("dynamically linked (it has a PT_INTERP program header); the guest has no libc");
    }
    Ok(())
}

/// What the harness needs to know of an ELF file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ElfInfo {
    machine: u16,
    /// A PT_INTERP program header: the program needs a dynamic loader.
    has_interp: bool,
}

const PT_INTERP: u32 = 3;
/// Program header tables larger than this are not real.
const MAX_PHDR_BYTES: u64 = 1 << 20;

fn read_elf_info(path: &Path) -> Result<ElfInfo> {
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut header = vec![0u8; 64];
    let read = read_prefix(&file, &mut header).with_context(|| format!("reading {}", path.display()))?;
    header.truncate(read);
    let end =
        elf_phdr_end(&header).with_context(|| format!("{} is not a usable ELF file", path.display()))?;
    let mut prefix = vec![0u8; end as usize];
    let read = read_prefix(&file, &mut prefix).with_context(|| format!("reading {}", path.display()))?;
    prefix.truncate(read);
    elf_info(&prefix).with_context(|| format!("{} is not a usable ELF file", path.display()))
}

/// Reads from offset 0 until `buffer` is full or the file ends; returns the bytes read.
fn read_prefix(file: &File, buffer: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buffer.len() {
        match file.read_at(&mut buffer[filled..], filled as u64) {
            Ok(0) => break,
            Ok(count) => filled += count,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(filled)
}

/// An ELF file's header fields, read with its own class (32/64-bit) and byte order.
struct ElfHeader {
    machine: u16,
    phoff: u64,
    phentsize: u64,
    phnum: u64,
    is64: bool,
    little: bool,
}

fn elf_header(bytes: &[u8]) -> Result<ElfHeader> {
    if bytes.len() < 52 || &bytes[..4] != b"\x7fELF" {
        bail!("no ELF header");
    }
    let is64 = match bytes[4] {
        1 => false,
        2 => true,
        other => bail!("unknown ELF class {other}"),
    };
    let little = match bytes[5] {
        1 => true,
        2 => false,
        other => bail!("unknown ELF data encoding {other}"),
    };
    if is64 && bytes.len() < 64 {
        bail!("truncated ELF header");
    }
    let field = |offset: usize, width: usize| read_uint(bytes, offset, width, little);
    let (phoff, phentsize, phnum) = if is64 {
        (field(0x20, 8)?, field(0x36, 2)?, field(0x38, 2)?)
    } else {
        (field(0x1c, 4)?, field(0x2a, 2)?, field(0x2c, 2)?)
    };
    Ok(ElfHeader {
        machine: field(0x12, 2)? as u16,
        phoff,
        phentsize,
        phnum,
        is64,
        little,
    })
}

/// Where the program header table ends (how much of the file `elf_info` needs).
fn elf_phdr_end(bytes: &[u8]) -> Result<u64> {
    let header = elf_header(bytes)?;
    let table = header.phentsize.saturating_mul(header.phnum);
    if table > MAX_PHDR_BYTES {
        bail!("implausible program header table ({table} bytes)");
    }
    Ok(header.phoff.saturating_add(table).max(bytes.len() as u64))
}

fn elf_info(bytes: &[u8]) -> Result<ElfInfo> {
    let header = elf_header(bytes)?;
    let min_entry = if header.is64 { 56 } else { 32 };
    if header.phnum > 0 && header.phentsize < min_entry {
        bail!("program headers of {} bytes are too small", header.phentsize);
    }
    let mut has_interp = false;
    for index in 0..header.phnum {
        let offset = header.phoff + index * header.phentsize;
        let offset = usize::try_from(offset).context("program header offset")?;
        if read_uint(bytes, offset, 4, header.little)? as u32 == PT_INTERP {
            has_interp = true;
        }
    }
    Ok(ElfInfo {
        machine: header.machine,
        has_interp,
    })
}

fn read_uint(bytes: &[u8], offset: usize, width: usize, little: bool) -> Result<u64> {
    let field = offset
        .checked_add(width)
        .and_then(|end| bytes.get(offset..end))
        .ok_or_else(|| anyhow!("truncated at byte {offset}"))?;
    let fold = |value: u64, byte: &u8| (value << 8) | u64::from(*byte);
    Ok(if little {
        field.iter().rev().fold(0, fold)
    } else {
        field.iter().fold(0, fold)
    })
}

// ---------------------------------------------------------------------------------------
// Kernel modules

/// One line of modules.dep: a module's file and the files it needs loaded first.
struct DepEntry {
    path: String,
    deps: Vec<String>,
}

/// A module's name from its file: the base name without ".ko", '-' as '_'.
fn module_name(path: &str) -> String {
    let base = path.rsplit('/').next().unwrap_or(path);
    let stem = base.split(".ko").next().unwrap_or(base);
    stem.replace('-', "_")
}

/// The module files (relative to the module directory) to insmod for `wanted`, each after the
/// modules it depends on, each once; modules built into the kernel are skipped.
fn resolve_modules(modules_dep: &str, modules_builtin: &str, wanted: &[&str]) -> Result<Vec<String>> {
    let mut by_path: HashMap<&str, DepEntry> = HashMap::new();
    let mut by_name: HashMap<String, String> = HashMap::new();
    for line in modules_dep.lines().filter(|line| !line.trim().is_empty()) {
        let (path, deps) = line
            .split_once(':')
            .ok_or_else(|| anyhow!("modules.dep line without ':': {line:?}"))?;
        let path = path.trim();
        by_name.insert(module_name(path), path.to_owned());
        by_path.insert(
            path,
            DepEntry {
                path: path.to_owned(),
                deps: deps.split_whitespace().map(str::to_owned).collect(),
            },
        );
    }
    let builtin: HashSet<String> = modules_builtin
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| module_name(line.trim()))
        .collect();

    fn visit(
        path: &str,
        by_path: &HashMap<&str, DepEntry>,
        visiting: &mut HashSet<String>,
        order: &mut Vec<String>,
    ) -> Result<()> {
        if order.iter().any(|done| done == path) {
            return Ok(());
        }
        if !visiting.insert(path.to_owned()) {
            bail!("modules.dep has a dependency cycle through {path}");
        }
        let entry = by_path
            .get(path)
            .ok_or_else(|| anyhow!("modules.dep names {path} as a dependency but has no line for it"))?;
        for dep in &entry.deps {
            visit(dep, by_path, visiting, order)?;
        }
        order.push(entry.path.clone());
        Ok(())
    }

    let mut order = Vec::new();
    let mut visiting = HashSet::new();
    for name in wanted {
        let name = name.replace('-', "_");
        match by_name.get(&name) {
            Some(path) => visit(path, &by_path, &mut visiting, &mut order)?,
            None if builtin.contains(&name) => {}
            None => bail!("kernel module {name} is neither in modules.dep nor built in"),
        }
    }
    Ok(order)
}

// ---------------------------------------------------------------------------------------
// The initramfs

/// A writer of "newc" cpio archives (what the kernel unpacks as an initramfs).
struct CpioWriter<W: Write> {
    out: W,
    next_ino: u32,
    written: u64,
}

const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;
const S_IFCHR: u32 = 0o020000;

impl<W: Write> CpioWriter<W> {
    fn new(out: W) -> Self {
        CpioWriter {
            out,
            next_ino: 1,
            written: 0,
        }
    }

    fn dir(&mut self, name: &str) -> io::Result<()> {
        self.entry(name, S_IFDIR | 0o755, 0, (0, 0))?;
        Ok(())
    }

    fn file(&mut self, name: &str, mode: u32, data: &[u8]) -> io::Result<()> {
        self.file_from(name, mode, data.len() as u64, &mut &data[..])
    }

    /// A regular file of exactly `len` bytes from `reader`.
    fn file_from(&mut self, name: &str, mode: u32, len: u64, reader: &mut dyn Read) -> io::Result<()> {
        if len > u64::from(u32::MAX) {
            return Err(io::Error::other(format!("{name}: too large for a newc cpio")));
        }
        self.entry(name, S_IFREG | mode, len as u32, (0, 0))?;
        let copied = io::copy(&mut reader.take(len), &mut self.out)?;
        if copied != len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{name}: expected {len} bytes, got {copied}"),
            ));
        }
        self.written += copied;
        self.pad(4)
    }

    fn symlink(&mut self, name: &str, target: &str) -> io::Result<()> {
        self.entry(name, S_IFLNK | 0o777, target.len() as u32, (0, 0))?;
        self.raw(target.as_bytes())?;
        self.pad(4)
    }

    fn char_device(&mut self, name: &str, mode: u32, major: u32, minor: u32) -> io::Result<()> {
        self.entry(name, S_IFCHR | mode, 0, (major, minor))
    }

    /// Writes the trailer and pads the archive to 512 bytes, so that another archive can
    /// follow it; returns the output.
    fn finish(mut self) -> io::Result<W> {
        self.next_ino = 0;
        self.entry("TRAILER!!!", 0, 0, (0, 0))?;
        self.pad(512)?;
        self.out.flush()?;
        Ok(self.out)
    }

    fn entry(&mut self, name: &str, mode: u32, size: u32, rdev: (u32, u32)) -> io::Result<()> {
        let ino = self.next_ino;
        if ino != 0 {
            self.next_ino += 1;
        }
        let nlink = if mode & S_IFDIR == S_IFDIR { 2 } else { 1 };
        let name_size = name.len() as u32 + 1;
        let fields = [
            ino, mode, 0, 0, nlink, 0, size, 0, 0, rdev.0, rdev.1, name_size, 0,
        ];
        let mut header = String::with_capacity(110);
        header.push_str("070701");
        for field in fields {
            header.push_str(&format!("{field:08x}"));
        }
        self.raw(header.as_bytes())?;
        self.raw(name.as_bytes())?;
        self.raw(&[0])?;
        self.pad(4)
    }

    fn raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    fn pad(&mut self, align: u64) -> io::Result<()> {
        let padding = (align - self.written % align) % align;
        self.raw(&vec![0u8; padding as usize])
    }
}

/// The initramfs for this kernel and binary, from the cache if it is current.
fn cached_initramfs(kernel_version: &str, binary: &Path, extras: &[(String, PathBuf)]) -> Result<PathBuf> {
    let busybox = static_busybox()
        .ok_or_else(|| anyhow!("no static busybox in /bin: apt-get install busybox-static"))?;
    let modules_dir = module_dir(kernel_version);
    let read = |name: &str| {
        let path = modules_dir.join(name);
        fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
    };
    let modules = resolve_modules(
        &read("modules.dep")?,
        &read("modules.builtin").unwrap_or_default(),
        GUEST_MODULES,
    )
    .with_context(|| format!("resolving the guest's modules in {}", modules_dir.display()))?;
    if let Some(compressed) = modules.iter().find(|module| !module.ends_with(".ko")) {
        bail!("compressed kernel modules ({compressed}) are not supported: busybox insmod loads plain .ko files");
    }
    let module_files: Vec<String> = modules.iter().map(|module| module_name(module) + ".ko").collect();
    let init = INIT_SCRIPT
        .replace("@MODULES@", &module_files.join(" "))
        .replace("@ARGS@", ARGS_FILE);

    let mut key = DefaultHasher::new();
    INITRAMFS_FORMAT.hash(&mut key);
    init.hash(&mut key);
    kernel_version.hash(&mut key);
    let extra_paths = extras.iter().map(|(_, host)| host.as_path());
    for path in [binary, busybox.as_path(), &modules_dir.join("modules.dep")]
        .into_iter()
        .chain(extra_paths)
    {
        let meta = fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
        (path, meta.len(), meta.mtime(), meta.mtime_nsec(), meta.ino()).hash(&mut key);
    }
    for (guest, _) in extras {
        guest.hash(&mut key);
    }
    let cache_dir = cache_dir()?;
    let name = format!("initramfs-{:016x}.cpio", key.finish());
    let cached = cache_dir.join(&name);
    if cached.is_file() {
        return Ok(cached);
    }

    // Written beside its final name and renamed, so a concurrent boot never sees half of it.
    let partial = tempfile::Builder::new()
        .prefix(".initramfs-")
        .tempfile_in(&cache_dir)
        .with_context(|| format!("making a file in {}", cache_dir.display()))?;
    let writing = || -> Result<()> {
        let mut cpio = CpioWriter::new(BufWriter::new(partial.as_file()));
        for dir in ["bin", "dev", "proc", "sys", "mnt", "tmp", "lib", "lib/modules"] {
            cpio.dir(dir)?;
        }
        // The kernel opens /dev/console for /init's stdio before anything is mounted.
        cpio.char_device("dev/console", 0o600, 5, 1)?;
        cpio.symlink("bin/sh", "busybox")?;
        add_file(&mut cpio, "bin/busybox", 0o755, &busybox)?;
        add_file(&mut cpio, "bin/onesync", 0o755, binary)?;
        for (module, file) in modules.iter().zip(&module_files) {
            add_file(
                &mut cpio,
                &format!("lib/modules/{file}"),
                0o644,
                &modules_dir.join(module),
            )?;
        }
        let mut dirs: HashSet<String> = ["bin", "dev", "proc", "sys", "mnt", "tmp", "lib", "lib/modules"]
            .into_iter()
            .map(str::to_owned)
            .collect();
        for (guest, host) in extras {
            let mut parent = String::new();
            for part in Path::new(guest).parent().into_iter().flat_map(Path::iter) {
                if !parent.is_empty() {
                    parent.push('/');
                }
                parent.push_str(&part.to_string_lossy());
                if dirs.insert(parent.clone()) {
                    cpio.dir(&parent)?;
                }
            }
            add_file(&mut cpio, guest, 0o755, host)?;
        }
        cpio.file("init", 0o755, init.as_bytes())?;
        cpio.finish()?.into_inner().map_err(|error| error.into_error())?;
        Ok(())
    };
    writing().with_context(|| format!("writing the initramfs in {}", cache_dir.display()))?;
    // tempfile makes it private; it is no secret.
    fs::set_permissions(partial.path(), fs::Permissions::from_mode(0o644))
        .with_context(|| format!("chmod {}", partial.path().display()))?;
    partial
        .persist(&cached)
        .with_context(|| format!("saving {}", cached.display()))?;
    remove_stale_initramfs(&cache_dir, &name);
    Ok(cached)
}

fn add_file<W: Write>(cpio: &mut CpioWriter<W>, name: &str, mode: u32, source: &Path) -> Result<()> {
    let mut file = File::open(source).with_context(|| format!("opening {}", source.display()))?;
    let len = file.metadata()?.len();
    cpio.file_from(name, mode, len, &mut file)
        .with_context(|| format!("adding {} as {name}", source.display()))
}

/// Deletes earlier initramfs builds (another binary or kernel); best effort.
fn remove_stale_initramfs(cache_dir: &Path, current: &str) {
    let Ok(entries) = fs::read_dir(cache_dir) else {
        return;
    };
    for entry in entries.filter_map(|entry| entry.ok()) {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("initramfs-") && name.ends_with(".cpio") && name != current {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// target/vm in the workspace if it is still there, else a directory in $TMPDIR.
fn cache_dir() -> Result<PathBuf> {
    let dir = match workspace_dir() {
        Some(workspace) => workspace.join("target/vm"),
        None => std::env::temp_dir().join("onesync-vm"),
    };
    fs::create_dir_all(&dir).with_context(|| format!("making {}", dir.display()))?;
    Ok(dir)
}

/// `arg` as one word for sh, whatever it holds.
fn shell_quote(arg: &str) -> String {
    format!("'{}'", arg.replace('\'', r"'\''"))
}

/// The per-boot archive: the shell file that sets the command's argv.
fn args_archive(argv: &[String]) -> Result<Vec<u8>> {
    if let Some(arg) = argv.iter().find(|arg| arg.contains('\0')) {
        bail!("a guest argument contains a NUL byte: {arg:?}");
    }
    let words: Vec<String> = argv.iter().map(|arg| shell_quote(arg)).collect();
    let script = format!("set -- {}\n", words.join(" "));
    let mut cpio = CpioWriter::new(Vec::new());
    cpio.file(ARGS_FILE, 0o644, script.as_bytes())?;
    Ok(cpio.finish()?)
}

/// The cached initramfs followed by this boot's argv archive.
fn write_boot_initrd(initramfs: &Path, argv: &[String], out: &Path) -> Result<()> {
    let args = args_archive(argv)?;
    fs::copy(initramfs, out)
        .with_context(|| format!("copying {} to {}", initramfs.display(), out.display()))?;
    fs::OpenOptions::new()
        .append(true)
        .open(out)
        .and_then(|mut file| file.write_all(&args))
        .with_context(|| format!("appending the command to {}", out.display()))
}

// ---------------------------------------------------------------------------------------
// qemu and its console

enum BootEnd {
    /// qemu closed its stdout: the guest powered off (or qemu failed).
    ConsoleClosed,
    TimedOut,
    PowerCut,
}

/// A running qemu, its console lines arriving on a channel. Dropping it kills and reaps it.
struct Qemu {
    child: Child,
    lines: mpsc::Receiver<String>,
    stderr: Option<JoinHandle<String>>,
    reaped: bool,
}

impl Qemu {
    fn spawn(mut command: Command) -> Result<Qemu> {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("could not start {}", command.get_program().to_string_lossy()))?;
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let (sender, lines) = mpsc::channel();
        // From here on, an early return drops the Qemu, which kills it.
        let mut qemu = Qemu {
            child,
            lines,
            stderr: None,
            reaped: false,
        };
        let (Some(stdout), Some(stderr)) = (stdout, stderr) else {
            bail!("qemu's stdout or stderr was not captured");
        };
        thread::Builder::new()
            .name("qemu-console".into())
            .spawn(move || {
                let mut reader = BufReader::new(stdout);
                let mut line = Vec::new();
                loop {
                    line.clear();
                    match reader.read_until(b'\n', &mut line) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {
                            let text = String::from_utf8_lossy(&line);
                            let text = text.trim_end_matches('\n').trim_end_matches('\r');
                            if sender.send(text.to_owned()).is_err() {
                                break;
                            }
                        }
                    }
                }
            })
            .context("starting the console reader thread")?;
        qemu.stderr = Some(
            thread::Builder::new()
                .name("qemu-stderr".into())
                .spawn(move || {
                    let mut text = Vec::new();
                    let _ = BufReader::new(stderr).read_to_end(&mut text);
                    String::from_utf8_lossy(&text).into_owned()
                })
                .context("starting the qemu stderr reader thread")?,
        );
        Ok(qemu)
    }

    /// SIGKILL: for the guest, a power cut.
    fn kill(&mut self) -> Result<()> {
        if !self.reaped {
            // Fails only if it has exited already, which the wait below sees.
            let _ = self.child.kill();
            self.child.wait().context("waiting for the killed qemu")?;
            self.reaped = true;
        }
        Ok(())
    }

    /// Waits for a qemu that has closed its console (a few seconds at most, then kills it).
    fn wait_briefly(&mut self) -> Result<ExitStatus> {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().context("waiting for qemu")? {
                self.reaped = true;
                return Ok(status);
            }
            if Instant::now() >= until {
                self.kill()?;
                bail!("qemu closed its console but did not exit; killed it");
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Everything qemu wrote on stderr (waits for the pipe to close: call after it exited).
    fn stderr_text(&mut self) -> String {
        self.stderr
            .take()
            .and_then(|reader| reader.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Qemu {
    fn drop(&mut self) {
        if let Err(error) = self.kill() {
            eprintln!("onesync: warning: {error:#}");
        }
    }
}

/// Where /init is, as the console shows it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Phase {
    /// Kernel and /init messages before the start marker.
    #[default]
    Boot,
    /// The command is running: lines are its stdout.
    Command,
    /// The command has exited; its stderr follows.
    Exited,
    Stderr,
    /// Everything has been reported; what follows is the shutdown.
    Done,
}

/// The host's reading of the guest console.
#[derive(Debug, Default)]
struct Console {
    phase: Phase,
    stdout: Vec<String>,
    stderr: String,
    exit_code: Option<i32>,
    /// What /init reported as going wrong (failed insmod, mount, umount).
    problems: Vec<String>,
    /// The last console lines, whatever they were, for error messages.
    tail: VecDeque<String>,
}

impl Console {
    /// Takes one console line; returns it (or its part before a marker) if it is a line of
    /// the command's stdout.
    fn feed<'l>(&mut self, line: &'l str) -> Option<&'l str> {
        if self.tail.len() == TAIL_LINES {
            self.tail.pop_front();
        }
        self.tail.push_back(line.to_owned());
        if let Some(problem) = marked_problem(line) {
            self.problems.push(problem.to_owned());
            return None;
        }
        match self.phase {
            Phase::Boot => {
                if line.contains(MARK_START) {
                    self.phase = Phase::Command;
                }
                None
            }
            Phase::Command => match exit_marker(line) {
                Some((before, code)) => {
                    self.exit_code = Some(code);
                    self.phase = Phase::Exited;
                    // Output that did not end in a newline shares the marker's line.
                    (!before.is_empty()).then(|| self.stdout_line(before))
                }
                None => Some(self.stdout_line(line)),
            },
            Phase::Exited => {
                if line.contains(MARK_STDERR_BEGIN) {
                    self.phase = Phase::Stderr;
                }
                None
            }
            Phase::Stderr => {
                match line.find(MARK_STDERR_END) {
                    Some(at) => {
                        self.stderr.push_str(&line[..at]);
                        self.phase = Phase::Done;
                    }
                    None => {
                        self.stderr.push_str(line);
                        self.stderr.push('\n');
                    }
                }
                None
            }
            Phase::Done => None,
        }
    }

    fn stdout_line<'l>(&mut self, line: &'l str) -> &'l str {
        self.stdout.push(line.to_owned());
        line
    }

    fn command_exited(&self) -> bool {
        self.exit_code.is_some()
    }

    fn finished(&self) -> bool {
        self.phase == Phase::Done
    }

    /// The problems /init reported, the last console lines and qemu's stderr, for an error.
    fn describe(&self, qemu_stderr: &str) -> String {
        let mut text = String::new();
        for problem in &self.problems {
            text.push_str(&format!("\nin the guest: {problem}"));
        }
        text.push_str(&format!("\nlast {} console lines:", self.tail.len()));
        for line in &self.tail {
            text.push_str("\n  | ");
            text.push_str(line);
        }
        if !qemu_stderr.trim().is_empty() {
            text.push_str("\nqemu's stderr:\n");
            text.push_str(&last_lines(qemu_stderr, TAIL_LINES));
        }
        text
    }
}

/// `(what precedes the marker, exit code)` if `line` holds the exit marker.
fn exit_marker(line: &str) -> Option<(&str, i32)> {
    let at = line.rfind(MARK_EXIT)?;
    let code = line[at + MARK_EXIT.len()..].strip_suffix(MARK_END)?;
    if code.is_empty() || !code.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    Some((&line[..at], code.parse().ok()?))
}

fn marked_problem(line: &str) -> Option<&str> {
    let at = line.find(MARK_PROBLEM)?;
    line[at + MARK_PROBLEM.len()..].strip_suffix(MARK_END)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modules_load_after_their_dependencies_each_once_builtins_skipped() {
        // As depmod writes it: each line lists the whole closure, in no useful order.
        let dep = "\
kernel/drivers/virtio/virtio_pci.ko: kernel/drivers/virtio/virtio_pci_legacy_dev.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/virtio/virtio_pci_legacy_dev.ko:
kernel/drivers/virtio/virtio.ko: kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/virtio/virtio_ring.ko:
kernel/drivers/block/virtio_blk.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko

kernel/fs/ext4/ext4.ko: kernel/lib/crc16.ko kernel/fs/mbcache.ko kernel/fs/jbd2/jbd2.ko
kernel/lib/crc16.ko:
kernel/fs/mbcache.ko:
kernel/fs/jbd2/jbd2.ko:
kernel/crypto/crc32-generic.ko:
";
        let builtin = "kernel/lib/crc32.ko\nkernel/crypto/crc32c_generic.ko\n";
        let order = resolve_modules(
            dep,
            builtin,
            &[
                "virtio_pci",
                "virtio_blk",
                "crc32_generic",
                "crc32c_generic",
                "ext4",
            ],
        )
        .unwrap();
        assert_eq!(
            order,
            [
                "kernel/drivers/virtio/virtio_pci_legacy_dev.ko",
                "kernel/drivers/virtio/virtio_ring.ko",
                "kernel/drivers/virtio/virtio.ko",
                "kernel/drivers/virtio/virtio_pci.ko",
                "kernel/drivers/block/virtio_blk.ko",
                "kernel/crypto/crc32-generic.ko",
                "kernel/lib/crc16.ko",
                "kernel/fs/mbcache.ko",
                "kernel/fs/jbd2/jbd2.ko",
                "kernel/fs/ext4/ext4.ko",
            ]
        );
    }

    #[test]
    fn unknown_module_missing_dependency_and_cycle_are_errors() {
        let error = resolve_modules("kernel/a.ko:\n", "", &["f2fs"]).unwrap_err();
        assert!(error.to_string().contains("f2fs is neither"), "{error:#}");
        let error = resolve_modules("kernel/a.ko: kernel/b.ko\n", "", &["a"]).unwrap_err();
        assert!(error.to_string().contains("no line for it"), "{error:#}");
        let error =
            resolve_modules("kernel/a.ko: kernel/b.ko\nkernel/b.ko: kernel/a.ko\n", "", &["a"]).unwrap_err();
        assert!(error.to_string().contains("cycle"), "{error:#}");
        assert!(resolve_modules("no colon here\n", "", &["a"]).is_err());
    }

    #[test]
    fn module_names_from_files() {
        assert_eq!(module_name("kernel/crypto/crc32-generic.ko"), "crc32_generic");
        assert_eq!(module_name("kernel/fs/f2fs/f2fs.ko.xz"), "f2fs");
        assert_eq!(module_name("ext4.ko"), "ext4");
    }

    /// One parsed newc entry: (name, mode, rdev major, rdev minor, data).
    type Entry = (String, u32, u32, u32, Vec<u8>);

    /// A newc reader for checking the writer; stops at the trailer and returns what follows.
    fn parse_newc(mut bytes: &[u8]) -> (Vec<Entry>, &[u8]) {
        let start_len = bytes.len();
        let align = |bytes: &mut &[u8], start_len: usize| {
            let consumed = start_len - bytes.len();
            *bytes = &bytes[(4 - consumed % 4) % 4..];
        };
        let mut entries = Vec::new();
        loop {
            assert_eq!(&bytes[..6], b"070701");
            let field = |index: usize| {
                u32::from_str_radix(
                    std::str::from_utf8(&bytes[6 + 8 * index..14 + 8 * index]).unwrap(),
                    16,
                )
                .unwrap()
            };
            let (mode, size, major, minor, name_size) = (field(1), field(6), field(9), field(10), field(11));
            let name = std::str::from_utf8(&bytes[110..110 + name_size as usize - 1])
                .unwrap()
                .to_owned();
            assert_eq!(bytes[110 + name_size as usize - 1], 0);
            bytes = &bytes[110 + name_size as usize..];
            align(&mut bytes, start_len);
            if name == "TRAILER!!!" {
                return (entries, bytes);
            }
            let data = bytes[..size as usize].to_vec();
            bytes = &bytes[size as usize..];
            align(&mut bytes, start_len);
            entries.push((name, mode, major, minor, data));
        }
    }

    #[test]
    fn cpio_writer_writes_newc_that_reads_back() {
        let mut cpio = CpioWriter::new(Vec::new());
        cpio.dir("bin").unwrap();
        cpio.file("bin/hello", 0o755, b"hello, world\n").unwrap();
        cpio.symlink("bin/sh", "busybox").unwrap();
        cpio.char_device("dev/console", 0o600, 5, 1).unwrap();
        cpio.file("empty", 0o644, b"").unwrap();
        let bytes = cpio.finish().unwrap();
        assert_eq!(bytes.len() % 512, 0);

        let (entries, rest) = parse_newc(&bytes);
        assert!(
            rest.iter().all(|&byte| byte == 0),
            "only padding after the trailer"
        );
        let expect: Vec<Entry> = vec![
            ("bin".into(), S_IFDIR | 0o755, 0, 0, vec![]),
            (
                "bin/hello".into(),
                S_IFREG | 0o755,
                0,
                0,
                b"hello, world\n".to_vec(),
            ),
            ("bin/sh".into(), S_IFLNK | 0o777, 0, 0, b"busybox".to_vec()),
            ("dev/console".into(), S_IFCHR | 0o600, 5, 1, vec![]),
            ("empty".into(), S_IFREG | 0o644, 0, 0, vec![]),
        ];
        assert_eq!(entries, expect);
    }

    #[test]
    fn cpio_archives_concatenate() {
        let mut first = CpioWriter::new(Vec::new());
        first.file("a", 0o644, b"x").unwrap();
        let mut bytes = first.finish().unwrap();
        bytes.extend(args_archive(&["echo".into(), "a b".into()]).unwrap());
        let (entries, rest) = parse_newc(&bytes);
        assert_eq!(entries[0].0, "a");
        // The kernel skips the zeros between archives; the next starts 4-byte aligned.
        let padding = rest.iter().take_while(|&&byte| byte == 0).count();
        assert_eq!((bytes.len() - rest.len() + padding) % 512, 0);
        let (entries, _) = parse_newc(&rest[padding..]);
        assert_eq!(entries[0].0, ARGS_FILE);
        assert_eq!(entries[0].4, b"set -- 'echo' 'a b'\n");
    }

    #[test]
    fn cpio_file_from_a_short_reader_is_an_error() {
        let mut cpio = CpioWriter::new(Vec::new());
        let error = cpio.file_from("f", 0o644, 10, &mut &b"short"[..]).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
    }

    /// A minimal ELF header with program headers of the given types.
    fn elf(is64: bool, little: bool, machine: u16, types: &[u32]) -> Vec<u8> {
        let (header_len, entry_len) = if is64 { (64usize, 56usize) } else { (52, 32) };
        let mut bytes = vec![0u8; header_len + entry_len * types.len()];
        bytes[..4].copy_from_slice(b"\x7fELF");
        bytes[4] = if is64 { 2 } else { 1 };
        bytes[5] = if little { 1 } else { 2 };
        let mut put = |offset: usize, width: usize, value: u64| {
            for index in 0..width {
                let byte = (value >> (8 * index)) as u8;
                let at = if little {
                    offset + index
                } else {
                    offset + width - 1 - index
                };
                bytes[at] = byte;
            }
        };
        put(0x12, 2, u64::from(machine));
        if is64 {
            put(0x20, 8, header_len as u64);
            put(0x36, 2, entry_len as u64);
            put(0x38, 2, types.len() as u64);
        } else {
            put(0x1c, 4, header_len as u64);
            put(0x2a, 2, entry_len as u64);
            put(0x2c, 2, types.len() as u64);
        }
        for (index, &kind) in types.iter().enumerate() {
            put(header_len + index * entry_len, 4, u64::from(kind));
        }
        bytes
    }

    #[test]
    fn elf_pt_interp_detection() {
        const PT_LOAD: u32 = 1;
        const PT_PHDR: u32 = 6;
        let dynamic = elf(true, true, EM_X86_64, &[PT_PHDR, PT_INTERP, PT_LOAD]);
        assert_eq!(
            elf_info(&dynamic).unwrap(),
            ElfInfo {
                machine: EM_X86_64,
                has_interp: true
            }
        );
        let static_pie = elf(true, true, EM_X86_64, &[PT_PHDR, PT_LOAD, PT_LOAD]);
        assert!(!elf_info(&static_pie).unwrap().has_interp);
        assert!(elf_info(&elf(false, true, 3, &[PT_INTERP])).unwrap().has_interp);
        assert!(elf_info(&elf(true, false, 21, &[PT_INTERP])).unwrap().has_interp);
        assert_eq!(elf_info(&elf(true, false, 21, &[PT_LOAD])).unwrap().machine, 21);
        assert_eq!(elf_phdr_end(&dynamic).unwrap(), 64 + 3 * 56);

        assert!(elf_info(b"#!/bin/sh\necho not an ELF file\n").is_err());
        assert!(elf_info(&dynamic[..100]).is_err(), "program headers cut off");
        let mut bogus = dynamic.clone();
        bogus[4] = 7;
        assert!(elf_info(&bogus).is_err());
    }

    #[test]
    fn elf_files_are_read_from_disk() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("prog");
        fs::write(&path, elf(true, true, EM_X86_64, &[1, 1])).unwrap();
        assert!(check_static_guest_binary(&path).is_ok());
        fs::write(&path, elf(true, true, EM_X86_64, &[1, PT_INTERP])).unwrap();
        let error = check_static_guest_binary(&path).unwrap_err();
        assert!(error.to_string().contains("dynamically linked"), "{error:#}");
        fs::write(&path, elf(true, true, 183, &[1])).unwrap();
        assert!(
            check_static_guest_binary(&path).is_err(),
            "aarch64 is not a guest binary"
        );
    }

    fn feed_all(lines: &[&str]) -> (Console, Vec<String>) {
        let mut console = Console::default();
        let mut command_lines = Vec::new();
        for line in lines {
            if let Some(out) = console.feed(line) {
                command_lines.push(out.to_owned());
            }
        }
        (console, command_lines)
    }

    #[test]
    fn console_markers_separate_output_exit_code_and_stderr() {
        let (console, command_lines) = feed_all(&[
            "SeaBIOS noise",
            "@@onesync-vm:problem insmod crc32_generic.ko failed@@",
            "@@onesync-vm:start@@",
            "first",
            "",
            "  a b  c",
            "no newline at the end@@onesync-vm:exit=3@@",
            "@@onesync-vm:stderr-begin@@",
            "warning: one",
            "two without newline@@onesync-vm:stderr-end@@",
            "@@onesync-vm:problem umount /mnt failed@@",
            "reboot: Power down",
        ]);
        assert_eq!(command_lines, ["first", "", "  a b  c", "no newline at the end"]);
        assert_eq!(console.stdout, command_lines);
        assert_eq!(console.exit_code, Some(3));
        assert_eq!(console.stderr, "warning: one\ntwo without newline");
        assert!(console.finished());
        assert_eq!(
            console.problems,
            ["insmod crc32_generic.ko failed", "umount /mnt failed"]
        );
    }

    #[test]
    fn console_without_output_or_end_marker() {
        let (console, lines) = feed_all(&[
            "@@onesync-vm:start@@",
            "@@onesync-vm:exit=0@@",
            "@@onesync-vm:stderr-begin@@",
            "@@onesync-vm:stderr-end@@",
        ]);
        assert!(lines.is_empty());
        assert_eq!((console.exit_code, console.stderr.as_str()), (Some(0), ""));
        assert!(console.finished());

        // Cut off: no exit status, and the error shows the last lines.
        let (console, lines) = feed_all(&["boot", "@@onesync-vm:start@@", "working", "exit=1@@"]);
        assert_eq!(lines, ["working", "exit=1@@"]);
        assert!(!console.command_exited() && !console.finished());
        let described = console.describe("qemu: something");
        assert!(
            described.contains("  | working") && described.contains("qemu: something"),
            "{described}"
        );

        // Before the start marker nothing is the command's.
        let (console, lines) = feed_all(&["@@onesync-vm:exit=0@@", "text"]);
        assert!(lines.is_empty() && console.exit_code.is_none());
    }

    #[test]
    fn exit_marker_needs_digits_and_the_end() {
        assert_eq!(exit_marker("@@onesync-vm:exit=255@@"), Some(("", 255)));
        assert_eq!(exit_marker("x@@onesync-vm:exit=0@@"), Some(("x", 0)));
        assert_eq!(exit_marker("@@onesync-vm:exit=@@"), None);
        assert_eq!(exit_marker("@@onesync-vm:exit=-1@@"), None);
        assert_eq!(exit_marker("@@onesync-vm:exit=1@@ trailing"), None);
    }

    #[test]
    fn console_keeps_only_the_last_lines() {
        let mut console = Console::default();
        for index in 0..100 {
            console.feed(&format!("line {index}"));
        }
        assert_eq!(console.tail.len(), TAIL_LINES);
        assert_eq!(console.tail.front().map(String::as_str), Some("line 60"));
    }

    #[test]
    fn shell_quoting_survives_sh() {
        let argv: Vec<String> = [
            "plain",
            "a b  c",
            "it's",
            "\"dq\" $HOME `x` \\n",
            "",
            "line\nbreak",
            "*",
        ]
        .map(str::to_owned)
        .to_vec();
        let words: Vec<String> = argv.iter().map(|arg| shell_quote(arg)).collect();
        let script = format!("set -- {}; printf '%s\\0' \"$@\"", words.join(" "));
        let output = Command::new("sh").arg("-c").arg(&script).output().unwrap();
        assert!(output.status.success());
        let back: Vec<String> = output
            .stdout
            .split(|&byte| byte == 0)
            .map(|word| String::from_utf8(word.to_vec()).unwrap())
            .collect();
        assert_eq!(&back[..argv.len()], &argv[..]);
        assert!(args_archive(&["a\0b".to_owned()]).is_err());
    }

    #[test]
    fn cargo_colours_are_stripped_for_matching() {
        let coloured =
            "\x1b[1m\x1b[33mwarning\x1b[0m\x1b[1m:\x1b[0m dropping unsupported crate type `cdylib`";
        assert_eq!(
            strip_ansi(coloured),
            "warning: dropping unsupported crate type `cdylib`"
        );
        assert_eq!(strip_ansi("plain"), "plain");
    }

    #[test]
    fn kernel_versions_compare_by_number() {
        let mut versions = vec![
            "6.10.0-1-amd64",
            "6.1.0-56-amd64",
            "6.1.0-9-amd64",
            "5.10.0-30-amd64",
        ];
        versions.sort_by(|a, b| compare_versions(a, b));
        assert_eq!(
            versions,
            [
                "5.10.0-30-amd64",
                "6.1.0-9-amd64",
                "6.1.0-56-amd64",
                "6.10.0-1-amd64"
            ]
        );
    }

    #[test]
    fn ldd_output_gives_the_absolute_paths() {
        let out = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibsqlite3.so.0 => /lib/x86_64-linux-gnu/libsqlite3.so.0 (0x00007f)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n\tlibmissing.so => not found\n";
        assert_eq!(
            parse_ldd(out),
            [
                "/lib/x86_64-linux-gnu/libsqlite3.so.0",
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib64/ld-linux-x86-64.so.2"
            ]
        );
    }
}
