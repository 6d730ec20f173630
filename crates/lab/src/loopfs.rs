//! A throwaway filesystem on a loop device of its own (and how much room a filesystem has).
//!
//! The point is the device counters: `/sys/block/loopN/stat` counts every request the
//! filesystem sends down, its journal and metadata included, so a benchmark sees what a
//! commit really costs the device and not just what the program asked for.

use std::fmt;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use onesync_device::{DeviceCounters, DeviceModel, EmulatedDevice, Preset};
use tempfile::TempDir;

const MIB: u64 = 1024 * 1024;

/// The filesystems the lab knows how to make on a loop device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FsKind {
    Ext4,
    Xfs,
    Btrfs,
}

impl FsKind {
    pub fn name(self) -> &'static str {
        match self {
            FsKind::Ext4 => "ext4",
            FsKind::Xfs => "xfs",
            FsKind::Btrfs => "btrfs",
        }
    }

    fn mkfs_program(self) -> &'static str {
        match self {
            FsKind::Ext4 => "mkfs.ext4",
            FsKind::Xfs => "mkfs.xfs",
            FsKind::Btrfs => "mkfs.btrfs",
        }
    }

    /// The filesystem's checker, and the arguments that make it change nothing.
    pub fn checker(self) -> (&'static str, &'static [&'static str]) {
        match self {
            FsKind::Ext4 => ("e2fsck", &["-n", "-f"]),
            FsKind::Xfs => ("xfs_repair", &["-n"]),
            FsKind::Btrfs => ("btrfs", &["check", "--readonly"]),
        }
    }

    /// Quiet, and overwrite whatever signature an earlier run left on a reused device.
    /// ext4 also initializes its inode tables and journal now: by default a kernel thread
    /// zeroes them after mount, and those writes would be billed to the first measurements.
    fn mkfs_flags(self) -> &'static [&'static str] {
        match self {
            FsKind::Ext4 => &["-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0"],
            FsKind::Xfs | FsKind::Btrfs => &["-q", "-f"],
        }
    }

    /// The Debian package that ships the mkfs program (and the checker).
    pub fn package(self) -> &'static str {
        match self {
            FsKind::Ext4 => "e2fsprogs",
            FsKind::Xfs => "xfsprogs",
            FsKind::Btrfs => "btrfs-progs",
        }
    }

    /// The smallest image each mkfs accepts (xfs refuses under 300 MiB, btrfs under ~114 MiB).
    pub fn min_size_bytes(self) -> u64 {
        match self {
            FsKind::Ext4 => 16 * MIB,
            FsKind::Xfs => 300 * MIB,
            FsKind::Btrfs => 128 * MIB,
        }
    }
}

impl fmt::Display for FsKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The counters of block device `device` (e.g. `vda`) after syncing the filesystem that holds
/// `dir`, so that what was written before is billed before (as [`LoopFs::counters`]).
pub fn synced_counters(device: &str, dir: &Path) -> Result<DevCounters> {
    let handle = File::open(dir).with_context(|| format!("opening {}", dir.display()))?;
    nix::unistd::syncfs(&handle)
        .map_err(std::io::Error::from)
        .with_context(|| format!("syncfs {}", dir.display()))?;
    DevCounters::read(device)
}

/// The kind of filesystem `dir` is on, for the ones the lab reports by name.
pub fn fs_name_of(dir: &Path) -> Option<&'static str> {
    use nix::sys::statfs::{
        statfs, BTRFS_SUPER_MAGIC, EXT4_SUPER_MAGIC, F2FS_SUPER_MAGIC, TMPFS_MAGIC, XFS_SUPER_MAGIC,
    };
    let kind = statfs(dir).ok()?.filesystem_type();
    Some(match kind {
        k if k == EXT4_SUPER_MAGIC => "ext4",
        k if k == XFS_SUPER_MAGIC => "xfs",
        k if k == BTRFS_SUPER_MAGIC => "btrfs",
        k if k == TMPFS_MAGIC => "tmpfs",
        k if k == F2FS_SUPER_MAGIC => "f2fs",
        _ => return None,
    })
}

/// Counters of one block device, from `/sys/block/NAME/stat`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DevCounters {
    /// Write requests completed (field 4).
    pub write_ios: u64,
    /// 512-byte sectors written (field 6), whatever the device's real sector size.
    pub sectors_written: u64,
    /// Flush requests completed (field 15).
    pub flushes: u64,
}

impl DevCounters {
    /// The kernel reports sectors in 512-byte units regardless of the device.
    pub const SECTOR_BYTES: u64 = 512;

    /// Parses the contents of a `/sys/block/NAME/stat` file.
    pub fn parse(stat: &str) -> Result<DevCounters> {
        let fields: Vec<&str> = stat.split_whitespace().collect();
        // Flush counters were added in Linux 5.5; without them flushes would read as 0.
        if fields.len() < 17 {
            bail!(
                "block stat has {} fields, need 17 (flush counters need Linux 5.5 or later): {:?}",
                fields.len(),
                stat.trim()
            );
        }
        let field = |index: usize| -> Result<u64> {
            fields[index]
                .parse()
                .with_context(|| format!("block stat field {index} is not a number: {:?}", fields[index]))
        };
        Ok(DevCounters {
            write_ios: field(4)?,
            sectors_written: field(6)?,
            flushes: field(15)?,
        })
    }

    /// Reads the counters of a device by its kernel name, e.g. "loop3".
    pub fn read(device_name: &str) -> Result<DevCounters> {
        let path = Path::new("/sys/block").join(device_name).join("stat");
        let stat = fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        DevCounters::parse(&stat).with_context(|| format!("parsing {}", path.display()))
    }

    /// What happened between `before` and `self`.
    pub fn delta(&self, before: &DevCounters) -> DevCounters {
        DevCounters {
            write_ios: self.write_ios.saturating_sub(before.write_ios),
            sectors_written: self.sectors_written.saturating_sub(before.sectors_written),
            flushes: self.flushes.saturating_sub(before.flushes),
        }
    }

    pub fn bytes_written(&self) -> u64 {
        self.sectors_written * Self::SECTOR_BYTES
    }
}

/// The device under a loop filesystem, when it is emulated (`--emulate`, or the
/// `--flush-us/--write-us/--mbps` figures by hand).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Emulation {
    /// The preset's name, or "custom".
    pub name: String,
    pub model: DeviceModel,
}

impl Emulation {
    pub fn preset(preset: Preset) -> Emulation {
        Emulation {
            name: preset.name().to_owned(),
            model: preset.model(),
        }
    }
}

impl fmt::Display for Emulation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "an emulated {} device ({})", self.name, self.model)
    }
}

/// The command-line options that put `--fs` on an emulated device.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct EmulateArgs {
    /// Make the --fs filesystem on an emulated device with a volatile write cache and this
    /// device's flush latency, write latency and bandwidth (FUSE + a loop device; needs root)
    #[arg(long, value_enum, value_name = "PRESET", requires = "fs")]
    pub emulate: Option<Preset>,

    /// Emulated flush latency in µs (alone: a device with only this cost; with --emulate:
    /// overrides the preset's)
    #[arg(long, value_name = "US", requires = "fs")]
    pub flush_us: Option<u64>,

    /// Emulated latency of each write request in µs
    #[arg(long, value_name = "US", requires = "fs")]
    pub write_us: Option<u64>,

    /// Emulated write bandwidth in MB/s (0: unlimited)
    #[arg(long, value_name = "MBPS", requires = "fs")]
    pub mbps: Option<u64>,
}

impl EmulateArgs {
    /// The emulated device these options ask for, if any.
    pub fn emulation(&self) -> Option<Emulation> {
        let by_hand = self.flush_us.is_some() || self.write_us.is_some() || self.mbps.is_some();
        let mut emulation = match self.emulate {
            Some(preset) => Emulation::preset(preset),
            None if by_hand => Emulation {
                name: "custom".to_owned(),
                model: DeviceModel::FREE,
            },
            None => return None,
        };
        if by_hand && self.emulate.is_some() {
            emulation.name.push('*');
        }
        if let Some(us) = self.flush_us {
            emulation.model.flush_latency = Duration::from_micros(us);
        }
        if let Some(us) = self.write_us {
            emulation.model.write_latency = Duration::from_micros(us);
        }
        if let Some(mbps) = self.mbps {
            emulation.model.bytes_per_second = mbps * 1_000_000;
        }
        Some(emulation)
    }
}

/// What [`LoopFs::recover_after_cut`] found wrong with the filesystem (the message says it).
#[derive(Debug)]
pub enum CutDamage {
    DidNotMount(String),
    CheckerComplained(String),
}

impl fmt::Display for CutDamage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CutDamage::DidNotMount(what) | CutDamage::CheckerComplained(what) => f.write_str(what),
        }
    }
}

/// A fresh filesystem on a sparse image file attached to a loop device, mounted in a
/// temporary directory. Dropping it unmounts, detaches and deletes everything (best effort:
/// failures are reported on stderr, and a still-mounted directory is left in place).
pub struct LoopFs {
    kind: FsKind,
    /// The emulated device the image lives on, if any; dropped after the loop device lets go.
    device: Option<EmulatedDevice>,
    emulation: Option<Emulation>,
    /// Holds the image file and the mount point. `None` once handed back in `Drop`.
    work_dir: Option<TempDir>,
    mount_point: PathBuf,
    /// "/dev/loopN", set once losetup has attached the image.
    device_path: Option<PathBuf>,
    /// "loopN"
    device_name: String,
    mounted: bool,
}

impl LoopFs {
    /// Makes a `size_bytes` sparse image in a temporary directory (under `$TMPDIR`, or /tmp),
    /// attaches it to a free loop device, makes a `kind` filesystem on it and mounts it.
    /// The image is on an emulated device when `emulation` is given.
    /// mkfs and mount run on a free device (they are setup, not measurement); the device's
    /// model applies from the first request after `create_on` returns.
    pub fn create_on(kind: FsKind, size_bytes: u64, emulation: Option<&Emulation>) -> Result<LoopFs> {
        LoopFs::create_seeded(kind, size_bytes, emulation, 1)
    }

    /// [`LoopFs::create_on`], with `device_seed` driving the emulated device's power cuts.
    pub fn create_seeded(
        kind: FsKind,
        size_bytes: u64,
        emulation: Option<&Emulation>,
        device_seed: u64,
    ) -> Result<LoopFs> {
        check_prerequisites(kind)?;
        if size_bytes < kind.min_size_bytes() {
            bail!(
                "{kind} needs an image of at least {} MiB, asked for {} MiB",
                kind.min_size_bytes() / MIB,
                size_bytes / MIB
            );
        }

        let work_dir = tempfile::Builder::new()
            .prefix("onesync-loopfs-")
            .tempdir()
            .context("making a temporary directory for the loop image")?;
        let device = emulation
            .map(|_| EmulatedDevice::start(DeviceModel::FREE, size_bytes, device_seed))
            .transpose()
            .context("starting the emulated device")?;
        let image_path = match &device {
            Some(device) => device.image_path(),
            None => work_dir.path().join("disk.img"),
        };
        let mount_point = work_dir.path().join("mnt");
        fs::create_dir(&mount_point)
            .with_context(|| format!("making mount point {}", mount_point.display()))?;
        if device.is_none() {
            // set_len on a fresh file leaves it sparse: only what the filesystem writes takes space.
            File::create(&image_path)
                .and_then(|image| image.set_len(size_bytes))
                .with_context(|| format!("making sparse image {}", image_path.display()))?;
        }

        // From here on, an early return drops `loop_fs`, which undoes whatever was done.
        let mut loop_fs = LoopFs {
            kind,
            device,
            emulation: emulation.cloned(),
            work_dir: Some(work_dir),
            mount_point,
            device_path: None,
            device_name: String::new(),
            mounted: false,
        };

        let attached = run(Command::new("losetup").arg("-f").arg("--show").arg(&image_path))?;
        let device_path = PathBuf::from(attached.trim());
        let device_name = device_path
            .file_name()
            .and_then(|name| name.to_str())
            .filter(|name| name.starts_with("loop"))
            .ok_or_else(|| anyhow!("losetup printed {attached:?}, expected /dev/loopN"))?
            .to_owned();
        loop_fs.device_path = Some(device_path.clone());
        loop_fs.device_name = device_name;

        run(Command::new(kind.mkfs_program())
            .args(kind.mkfs_flags())
            .arg(&device_path))?;
        loop_fs.mount()?;
        if let (Some(device), Some(emulation)) = (&loop_fs.device, emulation) {
            // What mkfs and mount left in the cache is written before the clock starts.
            synced_counters(&loop_fs.device_name, &loop_fs.mount_point)?;
            device.set_model(emulation.model);
        }
        Ok(loop_fs)
    }

    /// The emulated device under the filesystem, if any (to cut its power).
    pub fn device(&self) -> Option<&EmulatedDevice> {
        self.device.as_ref()
    }

    /// Mounts the filesystem (again) on its mount point: after a power cut, this is where
    /// the kernel replays the filesystem's log.
    pub fn mount(&mut self) -> Result<()> {
        let device_path = self.attached_path()?.to_owned();
        run(Command::new("mount")
            .arg("-t")
            .arg(self.kind.name())
            .arg(&device_path)
            .arg(&self.mount_point))?;
        self.mounted = true;
        Ok(())
    }

    /// Unmounts a filesystem whose processes have all gone.
    pub fn unmount_now(&mut self) -> Result<()> {
        self.unmount_retrying(5, Duration::from_millis(200))
            .map(|_lazy| ())
    }

    /// Unmounts the filesystem of a device whose power is cut, and returns once the kernel
    /// has let go of the block device, with nothing of the old mount cached in memory: until
    /// then the kernel may still write the dead filesystem's buffers back, and if the power
    /// were already back they would land on the image the cut left. So call this with the
    /// power still off. Whether it took a lazy unmount.
    pub fn unmount_after_cut(&mut self) -> Result<bool> {
        // Short pauses: the dead filesystem's processes are gone, only the kernel lingers.
        let lazy = self
            .unmount_retrying(20, Duration::from_millis(25))
            .context("unmounting the filesystem after the power cut")?;
        let device_path = self.attached_path()?.to_owned();
        // A lazy unmount returns before the filesystem is gone; it lets go of the block
        // device (which it holds exclusively) only when it is. An exclusive open succeeds
        // from then on, and its close, the last, drops the device's page cache.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            match open_exclusive(&device_path) {
                Ok(()) => break,
                Err(_) if std::time::Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
                Err(error) => {
                    return Err(error).context(format!(
                        "{} is still held 30 s after unmounting its filesystem",
                        device_path.display()
                    ))
                }
            }
        }
        // Whatever the kernel still caches of the device goes now, while writes still fail.
        run(Command::new("blockdev").arg("--flushbufs").arg(&device_path))?;
        Ok(lazy)
    }

    /// After a power cut, once the processes using the filesystem are gone: unmounts it with
    /// the power still off ([`LoopFs::unmount_after_cut`]), then brings the power back, on a
    /// device that costs nothing from then on (the recovery is not what is measured).
    /// Whether it took a lazy unmount.
    pub fn power_back_after_cut(&mut self) -> Result<bool> {
        let lazy = self.unmount_after_cut()?;
        let device = self
            .device()
            .ok_or_else(|| anyhow!("the filesystem is not on an emulated device"))?;
        device.set_model(DeviceModel::FREE);
        device.power_on();
        Ok(lazy)
    }

    /// After [`LoopFs::power_back_after_cut`]: a mount replays the filesystem's log and an
    /// unmount leaves it clean (the checker, run before the replay, would report a committed
    /// but unreplayed log as damage); the checker runs read-only; the filesystem is mounted
    /// again. `Ok(Err(damage))`: it did not mount, or the checker complained.
    pub fn recover_after_cut(&mut self) -> Result<std::result::Result<(), CutDamage>> {
        if let Err(error) = self.mount() {
            return Ok(Err(CutDamage::DidNotMount(format!(
                "{} did not mount after the cut: {error:#}",
                self.kind
            ))));
        }
        self.unmount_now()?;
        if let Some(complaint) = self.check_read_only()? {
            return Ok(Err(CutDamage::CheckerComplained(format!(
                "the {} checker complained: {complaint}",
                self.kind
            ))));
        }
        if let Err(error) = self.mount() {
            return Ok(Err(CutDamage::DidNotMount(format!(
                "{} did not mount after the check: {error:#}",
                self.kind
            ))));
        }
        Ok(Ok(()))
    }

    /// Runs the filesystem's own checker without letting it change anything (`e2fsck -n -f`,
    /// `xfs_repair -n`, `btrfs check --readonly`) on the unmounted filesystem: `None` if it
    /// found nothing, else what it said.
    pub fn check_read_only(&self) -> Result<Option<String>> {
        if self.mounted {
            bail!("checking {}: it is still mounted", self.mount_point.display());
        }
        let (program, args) = self.kind.checker();
        let (command_line, output) = output_of(Command::new(program).args(args).arg(self.attached_path()?))?;
        Ok((!output.status.success()).then(|| failure_text(&command_line, &output)))
    }

    /// "/dev/loopN".
    fn attached_path(&self) -> Result<&Path> {
        self.device_path
            .as_deref()
            .ok_or_else(|| anyhow!("the image is not attached to a loop device"))
    }

    pub fn emulation(&self) -> Option<&Emulation> {
        self.emulation.as_ref()
    }

    /// The emulated device's own counters, if any. No sync of its own: read it right after
    /// [`LoopFs::counters`], so that both count the same requests (a second sync in between
    /// could add a flush to one and not the other).
    pub fn device_counters(&self) -> Option<DeviceCounters> {
        self.device.as_ref().map(EmulatedDevice::counters)
    }

    /// "ext4 on loop3" or "ext4 on loop3, an emulated nvme device (...)".
    pub fn describe(&self) -> String {
        match &self.emulation {
            Some(emulation) => format!("{} on {}, {emulation}", self.kind, self.device_name),
            None => format!("{} on {}", self.kind, self.device_name),
        }
    }

    pub fn kind(&self) -> FsKind {
        self.kind
    }

    pub fn mount_point(&self) -> &Path {
        &self.mount_point
    }

    /// The kernel's name for the device, e.g. "loop3".
    pub fn device_name(&self) -> &str {
        &self.device_name
    }

    /// Writes back the filesystem's dirty data first, so that what a program wrote before
    /// this call is billed before it and not to whatever is measured next. The sync's own
    /// flush (about one per call) lands in the counters read after it.
    pub fn counters(&self) -> Result<DevCounters> {
        synced_counters(&self.device_name, &self.mount_point)
    }

    /// Unmounts, retrying `attempts` times `pause` apart (a just-closed file can keep the
    /// mount busy for a moment), then lazily: detached from the tree anyway, so the temporary
    /// directory can be removed, the kernel finishing when the last user lets go. Whether it
    /// took the lazy unmount; nothing to do if not mounted.
    fn unmount_retrying(&mut self, attempts: u32, pause: Duration) -> Result<bool> {
        if !self.mounted {
            return Ok(false);
        }
        let mut last_error = None;
        for attempt in 0..attempts {
            if attempt > 0 {
                thread::sleep(pause);
            }
            match run(Command::new("umount").arg(&self.mount_point)) {
                Ok(_) => {
                    self.mounted = false;
                    return Ok(false);
                }
                Err(error) => last_error = Some(error),
            }
        }
        run(Command::new("umount").arg("-l").arg(&self.mount_point))
            .map(|_| self.mounted = false)
            .map_err(|lazy_error| {
                anyhow!(
                    "{:#}; lazy unmount failed too: {lazy_error:#}",
                    last_error.unwrap_or_else(|| anyhow!("umount failed"))
                )
            })?;
        Ok(true)
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        if self.mounted {
            if let Err(error) = self.unmount_now() {
                eprintln!(
                    "onesync-lab: warning: could not unmount {}: {error:#}",
                    self.mount_point.display()
                );
            }
        }
        if let Some(device_path) = self.device_path.take() {
            if let Err(error) = run(Command::new("losetup").arg("-d").arg(&device_path)) {
                eprintln!(
                    "onesync-lab: warning: could not detach {}: {error:#}",
                    device_path.display()
                );
            } else if self.device.is_some() {
                // The emulated device can only be unmounted once the loop device has let go
                // of its image, which the kernel finishes after losetup returns.
                wait_for_detach(&self.device_name);
            }
        }
        drop(self.device.take());
        if let Some(work_dir) = self.work_dir.take() {
            if self.mounted {
                // Deleting would walk into the still-mounted filesystem: leave it for a human.
                let kept = work_dir.keep();
                eprintln!(
                    "onesync-lab: warning: left {} in place (still mounted)",
                    kept.display()
                );
            } else if let Err(error) = work_dir.close() {
                eprintln!("onesync-lab: warning: could not remove the loop image directory: {error}");
            }
        }
    }
}

/// Waits (up to 5 s) until loop device `name` has no backing file any more.
pub fn wait_for_detach(name: &str) {
    let backing = Path::new("/sys/block").join(name).join("loop/backing_file");
    for _ in 0..250 {
        match fs::read_to_string(&backing) {
            Ok(file) if !file.trim().is_empty() => thread::sleep(Duration::from_millis(20)),
            _ => return,
        }
    }
}

/// Opens and closes block device `path` exclusively: fails while a filesystem holds it.
fn open_exclusive(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    File::options()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_EXCL.bits())
        .open(path)
        .map(drop)
}

/// Fails early, naming what is missing, instead of letting losetup or mount fail obscurely.
pub fn check_prerequisites(kind: FsKind) -> Result<()> {
    if !running_as_root() {
        bail!("--fs needs root: loop devices and mount (run as root, or use --dir)");
    }
    for (program, package) in [("losetup", "mount"), ("mount", "mount"), ("umount", "mount")] {
        require_program(program, package)?;
    }
    require_program(kind.mkfs_program(), kind.package())
}

pub fn running_as_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Errors with an install hint when `program` is on neither $PATH nor the sbin directories
/// (which a non-login root shell may lack on its PATH).
pub fn require_program(program: &str, package: &str) -> Result<()> {
    if find_program(program).is_some() {
        Ok(())
    } else {
        bail!("{program} not found: apt-get install {package}")
    }
}

/// `program` on $PATH or in the sbin directories (which a non-login root shell may lack).
pub fn find_program(program: &str) -> Option<PathBuf> {
    let path_dirs = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default();
    let sbin_dirs = ["/usr/local/sbin", "/usr/sbin", "/sbin"].map(PathBuf::from);
    path_dirs
        .into_iter()
        .chain(sbin_dirs)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// Lines of a failed command's output an error quotes (the end, where the reason is).
const FAILED_OUTPUT_LINES: usize = 40;

/// Runs a command to completion with no input and returns its stdout; on failure the error
/// carries the command line and the last lines of its output.
pub fn run(command: &mut Command) -> Result<String> {
    let (command_line, output) = output_of(command)?;
    if !output.status.success() {
        bail!("{}", failure_text(&command_line, &output));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Runs a command to completion with no input: its command line (for messages) and output.
fn output_of(command: &mut Command) -> Result<(String, std::process::Output)> {
    let command_line = format!("{command:?}").replace('"', "");
    let output = command
        .stdin(std::process::Stdio::null())
        .output()
        .with_context(|| format!("could not start `{command_line}`"))?;
    Ok((command_line, output))
}

/// "`COMMAND` failed (STATUS):" and the last lines of what a failed command printed.
fn failure_text(command_line: &str, output: &std::process::Output) -> String {
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    format!(
        "`{command_line}` failed ({}):\n{}",
        output.status,
        last_lines(&text, FAILED_OUTPUT_LINES)
    )
}

/// The last `count` lines of `text`.
pub fn last_lines(text: &str, count: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(count)..].join("\n")
}

/// Bytes free for an unprivileged user in the filesystem holding `dir`.
pub fn free_bytes(dir: &Path) -> Result<u64> {
    let stats = nix::sys::statvfs::statvfs(dir)
        .map_err(std::io::Error::from)
        .with_context(|| format!("statvfs {}", dir.display()))?;
    Ok(stats.blocks_available() * stats.fragment_size())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::FileExt;

    // A real /sys/block/loop0/stat line from this kind of machine.
    const SAMPLE_STAT: &str = "     118        0     2268        7       70        0   136016        5        0       12       14        1        0  2097152        0        2        1\n";

    #[test]
    fn parses_write_sector_and_flush_fields() {
        let counters = DevCounters::parse(SAMPLE_STAT).unwrap();
        assert_eq!(
            counters,
            DevCounters {
                write_ios: 70,
                sectors_written: 136016,
                flushes: 2
            }
        );
        assert_eq!(counters.bytes_written(), 136016 * 512);
    }

    #[test]
    fn rejects_stat_without_flush_fields() {
        let old_kernel = "1 2 3 4 5 6 7 8 9 10 11";
        let error = DevCounters::parse(old_kernel).unwrap_err();
        assert!(format!("{error:#}").contains("Linux 5.5"), "{error:#}");
    }

    #[test]
    fn delta_subtracts_and_never_underflows() {
        let before = DevCounters {
            write_ios: 10,
            sectors_written: 100,
            flushes: 3,
        };
        let after = DevCounters {
            write_ios: 15,
            sectors_written: 140,
            flushes: 4,
        };
        assert_eq!(
            after.delta(&before),
            DevCounters {
                write_ios: 5,
                sectors_written: 40,
                flushes: 1
            }
        );
        assert_eq!(before.delta(&after), DevCounters::default());
    }

    #[test]
    fn missing_program_names_the_package() {
        let error = require_program("mkfs.onesync-does-not-exist", "some-progs").unwrap_err();
        assert_eq!(
            error.to_string(),
            "mkfs.onesync-does-not-exist not found: apt-get install some-progs"
        );
    }

    /// Loop devices need root and the mkfs program; say why a test did nothing otherwise.
    fn can_make(kind: FsKind) -> bool {
        if !running_as_root() {
            println!("note: skipping {kind} loop test: not root");
            return false;
        }
        if find_program(kind.mkfs_program()).is_none() {
            println!(
                "note: skipping {kind} loop test: {} not installed",
                kind.mkfs_program()
            );
            return false;
        }
        true
    }

    /// Makes the filesystem, writes and fdatasyncs a file, and checks the device saw it.
    fn write_sync_and_count(kind: FsKind) {
        if !can_make(kind) {
            return;
        }
        let loop_fs = LoopFs::create_on(kind, 512 * MIB, None).unwrap();
        let mount_point = loop_fs.mount_point().to_owned();
        let device_name = loop_fs.device_name().to_owned();
        assert!(device_name.starts_with("loop"), "{device_name}");
        assert!(fs::read_to_string("/proc/mounts")
            .unwrap()
            .contains(&mount_point.display().to_string()));

        let before = loop_fs.counters().unwrap();
        let file = File::create(mount_point.join("data")).unwrap();
        let block = vec![0xA5u8; 4096];
        for index in 0..16u64 {
            file.write_all_at(&block, index * 4096).unwrap();
            file.sync_data().unwrap();
        }
        drop(file);
        let spent = loop_fs.counters().unwrap().delta(&before);
        assert!(spent.write_ios >= 16, "{kind}: {spent:?}");
        assert!(spent.bytes_written() >= 16 * 4096, "{kind}: {spent:?}");
        assert!(spent.flushes >= 16, "{kind}: {spent:?}");

        drop(loop_fs);
        assert!(!mount_point.exists(), "{kind}: mount point left behind");
        // The kernel finishes a detach once the last opener (here the just-unmounted
        // filesystem) lets go, so give it a moment; another test may reuse the device.
        let backing = Path::new("/sys/block")
            .join(&device_name)
            .join("loop/backing_file");
        let our_image = mount_point.parent().unwrap().join("disk.img");
        let still_ours = || {
            fs::read_to_string(&backing)
                .map(|file_name| file_name.starts_with(&our_image.display().to_string()))
                .unwrap_or(false)
        };
        for _ in 0..50 {
            if !still_ours() {
                break;
            }
            thread::sleep(Duration::from_millis(100));
        }
        assert!(!still_ours(), "{kind}: {device_name} still attached to our image");
    }

    #[test]
    fn ext4_counts_writes_and_flushes() {
        write_sync_and_count(FsKind::Ext4);
    }

    #[test]
    fn xfs_counts_writes_and_flushes() {
        write_sync_and_count(FsKind::Xfs);
    }

    #[test]
    fn btrfs_counts_writes_and_flushes() {
        write_sync_and_count(FsKind::Btrfs);
    }

    #[test]
    fn too_small_image_is_refused_with_the_minimum() {
        if !can_make(FsKind::Xfs) {
            return;
        }
        let error = LoopFs::create_on(FsKind::Xfs, 64 * MIB, None).err().unwrap();
        assert!(error.to_string().contains("at least 300 MiB"), "{error:#}");
    }

    #[test]
    fn smallest_ext4_mounts_and_drop_removes_everything() {
        if !can_make(FsKind::Ext4) {
            return;
        }
        let loop_fs = LoopFs::create_on(FsKind::Ext4, 16 * MIB, None).unwrap();
        let mut file = File::create(loop_fs.mount_point().join("x")).unwrap();
        file.write_all(b"hello").unwrap();
        drop(file);
        let work_dir = loop_fs.mount_point().parent().unwrap().to_owned();
        drop(loop_fs);
        assert!(!work_dir.exists());
    }
}
