//! `onesync-lab vm ...`: commands run in a qemu VM (software emulation, no KVM) that boots
//! Debian's own kernel on a fresh F2FS or ext4 disk image, so that the lab can reach
//! filesystems and kernel features the host lacks (F2FS's atomic writes) and cut the power
//! for real: killing qemu loses the guest's page cache, and every write the guest completed
//! is in the image (see the `onesync-vm` crate, which does the work: packages, kernel, the
//! initramfs, one boot).
//!
//! `kit` says what the lab puts in the guest, `experiments` what it runs there, `guest` is
//! the guest's side of them (hidden subcommands of the same static binary); the subcommands
//! here drive them. The guest is slow (TCG): use it for correctness and for counting what
//! reaches the disk, not for timing.

pub(crate) mod experiments;
pub mod guest;
mod kit;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use onesync_vm::{make_image, GuestFs, GuestRun, PowerCut};

#[derive(clap::Args, Debug)]
pub struct VmArgs {
    #[command(subcommand)]
    pub command: VmCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum VmCommand {
    /// Boot once and run CMD in the guest, in the mounted image (/mnt), with the static
    /// onesync and busybox on PATH; its stdout streams to ours, its stderr follows at the
    /// end, and its exit code is ours
    Run(RunArgs),
    /// Run the functional tests of the onesync-f2fs backend (commit, rollback, savepoints, a
    /// failing multi-row insert, ATTACH, a process dying mid-transaction, ...) on a fresh
    /// F2FS in the VM; exits 0 only if they all pass
    Test(experiments::VmTestArgs),
    /// A workload on several modes in the VM, on F2FS and on ext4 (one boot each): write
    /// requests, KiB and flushes per transaction as the guest's block device saw them
    Bench(experiments::VmBenchArgs),
    /// TPC-B under power cuts (qemu killed at random moments): after each cut the next boot
    /// checks integrity, conservation of money and every acknowledged transaction
    Torture(experiments::VmTortureArgs),
}

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// The image's filesystem (of a fresh image; with --image, what the image holds)
    #[arg(long, value_enum, default_value_t = GuestFs::F2fs)]
    pub fs: GuestFs,

    /// Size of the fresh image
    #[arg(long, value_name = "MIB", default_value_t = 256, conflicts_with = "image")]
    pub size_mib: u64,

    /// Boot on this existing image (kept afterwards) instead of a fresh temporary one
    #[arg(long, value_name = "PATH")]
    pub image: Option<PathBuf>,

    /// Kill qemu and fail if the guest has not powered off after this long
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    pub timeout_secs: u64,

    /// Cut the power (SIGKILL qemu) once the command prints a line starting with TEXT
    /// (after --cut-delay-ms), unless it has exited by then
    #[arg(long, value_name = "TEXT")]
    pub cut_after: Option<String>,

    /// How long after the --cut-after line to cut the power
    #[arg(long, value_name = "MS", default_value_t = 0, requires = "cut_after")]
    pub cut_delay_ms: u64,

    /// Throttle the guest's disk to this many requests per second
    #[arg(long, value_name = "IOPS")]
    pub disk_iops: Option<u32>,
    /// The command and its arguments (after --)
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub command: Vec<String>,
}

pub fn run(args: &VmArgs) -> Result<ExitCode> {
    match &args.command {
        VmCommand::Run(run_args) => run_command(run_args),
        VmCommand::Test(test_args) => experiments::test(test_args),
        VmCommand::Bench(bench_args) => experiments::bench(bench_args),
        VmCommand::Torture(torture_args) => experiments::torture(torture_args),
    }
}

fn run_command(args: &RunArgs) -> Result<ExitCode> {
    if args.timeout_secs == 0 {
        bail!("--timeout-secs must be at least 1");
    }
    let kit = kit::prepare()?;
    // Declared before the image path that may point into it: removed after the boot.
    let fresh_dir;
    let image = match &args.image {
        Some(image) => image.clone(),
        None => {
            fresh_dir = tempfile::Builder::new()
                .prefix("onesync-vm-image-")
                .tempdir()
                .context("making a temporary directory for the image")?;
            let image = fresh_dir.path().join(format!("{}.img", args.fs));
            make_image(&image, args.fs, args.size_mib)?;
            image
        }
    };
    let run = GuestRun {
        image: &image,
        fs: args.fs,
        argv: args.command.clone(),
        timeout: Duration::from_secs(args.timeout_secs),
        power_cut: args.cut_after.as_ref().map(|prefix| PowerCut {
            after_line_prefix: prefix.clone(),
            delay: Duration::from_millis(args.cut_delay_ms),
        }),
        disk_iops: args.disk_iops,
    };
    let mut stdout = std::io::stdout();
    let outcome = kit.boot_with(&run, &mut |line| {
        // A closed stdout (a pipe to `head`) must not stop the guest half way.
        let _ = writeln!(stdout, "{line}").and_then(|()| stdout.flush());
    })?;
    eprint!("{}", outcome.stderr);
    if outcome.power_cut {
        eprintln!(
            "onesync-lab: power cut (qemu killed) after {} lines of output (kernel {})",
            outcome.stdout.len(),
            kit.kernel_version()
        );
        return Ok(ExitCode::SUCCESS);
    }
    Ok(match outcome.exit_code.map(u8::try_from) {
        Some(Ok(code)) => ExitCode::from(code),
        _ => ExitCode::FAILURE,
    })
}
