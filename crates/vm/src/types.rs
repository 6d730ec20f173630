//! The data the crate's calls take and give: where progress is shown, what the initramfs
//! holds, one boot's request and its outcome.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::image::GuestFs;

/// Where long steps of `VmKit::prepare` are shown (a spinner, a log line, or nothing).
pub trait Progress {
    /// A step starts (installing packages, building the initramfs).
    fn begin(&self, step: &'static str);
    /// The step begun last has ended.
    fn end(&self);
}

/// Shows nothing.
impl Progress for () {
    fn begin(&self, _step: &'static str) {}
    fn end(&self) {}
}

/// What the initramfs holds besides busybox, /init and the kernel modules.
#[derive(Debug, Clone, Default)]
pub struct GuestFiles {
    /// Statically linked x86-64 programs, on the guest's PATH as /bin/NAME: (NAME, host path).
    pub programs: Vec<(String, PathBuf)>,
    /// Dynamically linked host files at a path of their own in the guest (relative to /),
    /// each with every shared library it loads, at the library's host path.
    pub dynamic: Vec<(String, PathBuf)>,
}

/// One boot: which image, which command, and when to give up or cut the power.
pub struct GuestRun<'a> {
    pub image: &'a Path,
    pub fs: GuestFs,
    /// argv of the command run in the guest, with cwd = the mounted image (/mnt) and the
    /// kit's programs on PATH. Any text survives (it travels in a generated shell file).
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
