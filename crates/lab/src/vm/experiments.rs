//! `onesync-lab vm test|bench|torture`: the MAW experiments on a real F2FS kernel in the VM.
//!
//! Under TCG the guest's clock says nothing about a real machine, so `bench` reports what the
//! guest's block device saw per transaction (`/sys/block/vda/stat`: write requests, KiB,
//! flushes), and `torture` cuts the power (kills qemu) at random moments of a TPC-B run.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use serde_json::Value;

use onesync_device::{DeviceModel, EmulatedDevice, Preset};
use onesync_vm::{format_image, make_image, GuestFs, GuestOutcome, GuestRun, PowerCut};

use super::guest::{TpcbState, ACK_PREFIX, RUNNING_LINE, STATE_PREFIX};
use super::kit;
use crate::output::{self, Human};
use crate::progress::phase_bar;
use crate::schemes::Mode;
use crate::workloads::Workload;

/// The paper's Table 3: KB written per 100-byte insert (SQLite files + filesystem).
pub(crate) const PAPER_TABLE_3: [(&str, &str, f64); 5] = [
    ("ext4", "persist", 48.0),
    ("ext4", "wal", 36.0),
    ("f2fs", "persist", 52.0),
    ("f2fs", "wal", 16.0),
    ("f2fs", "maw", 16.0),
];

#[derive(clap::Args, Debug)]
pub struct VmTestArgs {
    /// Size of the F2FS image, in MiB
    #[arg(long, value_name = "MIB", default_value_t = 512)]
    pub size_mib: u64,
    /// Give up on the VM after this long
    #[arg(long, value_name = "S", default_value_t = 900)]
    pub timeout_secs: u64,
}

/// Boots the VM on a fresh F2FS and runs the backend's functional tests there; the exit
/// status is theirs.
pub fn test(args: &VmTestArgs) -> Result<ExitCode> {
    let kit = kit::prepare()?;
    let work = tempfile::tempdir().context("making a temporary directory")?;
    let image = work.path().join("f2fs.img");
    make_image(&image, GuestFs::F2fs, args.size_mib)?;
    let outcome = kit.boot(&GuestRun {
        image: &image,
        fs: GuestFs::F2fs,
        argv: strings(&["onesync-lab", "__vm-selftest", "--dir", "/mnt"]),
        timeout: Duration::from_secs(args.timeout_secs),
        power_cut: None,
        disk_iops: None,
    })?;
    for line in &outcome.stdout {
        println!("{line}");
    }
    let code = outcome.exit_code.unwrap_or(-1);
    if code != 0 {
        eprint!("{}", outcome.stderr);
        eprintln!("onesync-lab vm test: the functional tests failed in the VM (exit status {code})");
        return Ok(ExitCode::FAILURE);
    }
    if !outcome
        .stdout
        .iter()
        .any(|l| l.starts_with("selftest: ") && l.ends_with(" 0 failed"))
    {
        bail!("the VM exited 0 but printed no passing summary");
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args, Debug)]
pub struct VmBenchArgs {
    /// What each transaction does
    #[arg(value_enum)]
    pub workload: Workload,
    /// Modes to run (maw and batch-atomic need F2FS and are skipped on ext4)
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "persist,wal,maw,batch-atomic,onesync"
    )]
    pub mode: Vec<Mode>,
    /// Filesystems to run on, each in its own VM boot on a fresh image
    #[arg(long, value_enum, value_delimiter = ',', default_value = "f2fs,ext4")]
    pub fs: Vec<GuestFs>,
    /// Measured transactions per mode
    #[arg(long, value_name = "N", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub txns: u64,
    /// Size of each image, in MiB
    #[arg(long, value_name = "MIB", default_value_t = 1024)]
    pub size_mib: u64,
    /// Give up on a VM boot after this long
    #[arg(long, value_name = "S", default_value_t = 3600)]
    pub timeout_secs: u64,
    /// Put each image on an emulated device with this preset's flush latency, write latency
    /// and bandwidth (onesync-device; needs root and /dev/fuse): the guest's writes and
    /// flushes become qemu's writes and fdatasync on the device's image file
    #[arg(long, value_enum, value_name = "PRESET")]
    pub emulate: Option<Preset>,
    /// Write {"results":[...]} to FILE, or to stdout with "-"
    #[arg(long, value_name = "FILE|-")]
    pub json: Option<std::path::PathBuf>,
}

fn needs_f2fs(mode: Mode) -> bool {
    matches!(mode, Mode::Maw | Mode::BatchAtomic)
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| (*s).to_owned()).collect()
}

#[derive(Serialize)]
struct BenchResults {
    results: Vec<Value>,
}

pub fn bench(args: &VmBenchArgs) -> Result<ExitCode> {
    output::check_json_path(args.json.as_deref())?;
    let results = measure(args)?;
    let workload = workload_name(args)?;
    let text = bench_table(&results, &workload, args.emulate);
    output::emit(
        args.json.as_deref(),
        &BenchResults { results },
        &text,
        Human::Stdout,
    )?;
    Ok(ExitCode::SUCCESS)
}

/// The workload's name as the guest's `onesync-lab bench` takes it.
fn workload_name(args: &VmBenchArgs) -> Result<String> {
    Ok(serde_json::to_value(args.workload)?
        .as_str()
        .unwrap_or_default()
        .to_owned())
}

/// Boots the VM once per filesystem and runs the bench there; the guest's result rows (one
/// per mode and filesystem, `bench --json`'s objects with "device" added under --emulate).
pub(crate) fn measure(args: &VmBenchArgs) -> Result<Vec<Value>> {
    if args.mode.is_empty() || args.fs.is_empty() {
        bail!("--mode and --fs must each name at least one");
    }
    let kit = kit::prepare()?;
    let work = tempfile::tempdir().context("making a temporary directory")?;
    let workload = workload_name(args)?;
    let mut results = Vec::new();
    for &fs in &args.fs {
        let modes: Vec<&str> = args
            .mode
            .iter()
            .filter(|m| fs == GuestFs::F2fs || !needs_f2fs(**m))
            .map(|m| m.name())
            .collect();
        if modes.is_empty() {
            continue;
        }
        // Declared before the boot that uses its image; dropped (unmounted) after it.
        let device = match args.emulate {
            Some(preset) => Some(emulated_image(preset, fs, args.size_mib)?),
            None => None,
        };
        let image = match &device {
            Some(device) => device.image_path(),
            None => {
                let image = work.path().join(format!("{}.img", fs.name()));
                make_image(&image, fs, args.size_mib)?;
                image
            }
        };
        let before = device.as_ref().map(EmulatedDevice::counters);
        let txns = args.txns.to_string();
        let mode_list = modes.join(",");
        eprintln!(
            "vm bench: {workload} on {} ({mode_list}), {txns} transactions per mode",
            fs.name()
        );
        let outcome = kit.boot(&GuestRun {
            image: &image,
            fs,
            argv: strings(&[
                "onesync-lab",
                "bench",
                &workload,
                "--mode",
                &mode_list,
                "--txns",
                &txns,
                "--dir",
                "/mnt",
                "--device",
                "vda",
                "--json",
                "-",
            ]),
            timeout: Duration::from_secs(args.timeout_secs),
            power_cut: None,
            disk_iops: None,
        })?;
        if outcome.exit_code != Some(0) {
            bail!(
                "the bench on {} failed in the VM (exit status {:?}):\n{}\n{}",
                fs.name(),
                outcome.exit_code,
                outcome.stdout.join("\n"),
                outcome.stderr
            );
        }
        let parsed = guest_json(&outcome)?;
        let rows = parsed["results"]
            .as_array()
            .ok_or_else(|| anyhow!("the guest's JSON has no results array"))?;
        if let (Some(device), Some(before), Some(preset)) = (&device, before, args.emulate) {
            // The whole boot (mount, every mode's setup and run, unmount) as the device saw it:
            // evidence that the guest's flushes reached it.
            let after = device.counters();
            eprintln!(
                "vm bench: the emulated {} device under {} saw {} flushes and {:.1} MiB written",
                preset.name(),
                fs.name(),
                after.flushes.saturating_sub(before.flushes),
                after.bytes_written.saturating_sub(before.bytes_written) as f64 / (1u64 << 20) as f64
            );
        }
        results.extend(rows.iter().cloned().map(|mut row| {
            if let Some(preset) = args.emulate {
                row["device"] = Value::from(preset.name());
            }
            row
        }));
    }
    Ok(results)
}

/// An emulated device with `preset`'s timing whose image is formatted with `fs` (mkfs runs on
/// a free device: setup, not measurement).
fn emulated_image(preset: Preset, fs: GuestFs, size_mib: u64) -> Result<EmulatedDevice> {
    let size = size_mib
        .checked_mul(1 << 20)
        .ok_or_else(|| anyhow!("an image of {size_mib} MiB is too large"))?;
    let device = EmulatedDevice::start(DeviceModel::FREE, size, 1)
        .context("starting the emulated device for the guest's disk")?;
    format_image(&device.image_path(), fs)?;
    device.set_model(preset.model());
    Ok(device)
}

/// The one JSON object among the guest's stdout lines.
fn guest_json(outcome: &GuestOutcome) -> Result<Value> {
    outcome
        .stdout
        .iter()
        .rev()
        .find_map(|l| {
            serde_json::from_str::<Value>(l.trim())
                .ok()
                .filter(Value::is_object)
        })
        .ok_or_else(|| anyhow!("no JSON in the guest's output:\n{}", outcome.stdout.join("\n")))
}

fn per_txn(row: &Value, key: &str) -> f64 {
    row["per_txn"][key].as_f64().unwrap_or(f64::NAN)
}

/// Device KiB per transaction of `mode` on `fs` in `results`.
fn dev_kb(results: &[Value], fs: &str, mode: &str) -> Option<f64> {
    results
        .iter()
        .find(|r| r["fs"] == fs && r["mode"] == mode)
        .map(|r| per_txn(r, "dev_kb"))
}

fn bench_table(results: &[Value], workload: &str, emulate: Option<Preset>) -> String {
    let mut out = match emulate {
        None => format!(
            "vm bench {workload}: per transaction, as the guest's block device saw it (TCG: no times)\n"
        ),
        Some(preset) => format!(
            "vm bench {workload} on an emulated {} device ({}): per transaction, as the guest's \
             block device saw it; txn/s and p99.9 are the guest's clock under TCG (a slow CPU)\n",
            preset.name(),
            preset.model()
        ),
    };
    let w = Mode::name_width();
    out.push_str(&format!(
        "{:<6} {:<w$} {:>9} {:>9} {:>9} {:>10} {:>10} {:>12}",
        "fs", "mode", "dev KiB", "dev wr", "flushes", "sql KiB", "fsyncs", "paper KB"
    ));
    if emulate.is_some() {
        out.push_str(&format!(" {:>9} {:>11}", "txn/s", "p99.9 us"));
    }
    out.push('\n');
    for r in results {
        let fs = r["fs"].as_str().unwrap_or("?");
        let mode = r["mode"].as_str().unwrap_or("?");
        let paper = PAPER_TABLE_3
            .iter()
            .find(|(f, m, _)| *f == fs && *m == mode)
            .map_or("-".to_owned(), |(_, _, kb)| format!("{kb:.0}"));
        out.push_str(&format!(
            "{:<6} {:<w$} {:>9.2} {:>9.2} {:>9.3} {:>10.2} {:>10.3} {:>12}",
            fs,
            mode,
            per_txn(r, "dev_kb"),
            per_txn(r, "dev_writes"),
            per_txn(r, "dev_flushes"),
            per_txn(r, "bytes_written") / 1024.0,
            per_txn(r, "fsyncs"),
            paper
        ));
        if emulate.is_some() {
            out.push_str(&format!(
                " {:>9.0} {:>11.0}",
                r["tps"].as_f64().unwrap_or(f64::NAN),
                r["latency_us"]["p999"].as_f64().unwrap_or(f64::NAN)
            ));
        }
        out.push('\n');
    }
    if let Some(maw) = dev_kb(results, "f2fs", "maw") {
        for fs in ["f2fs", "ext4"] {
            if let Some(persist) = dev_kb(results, fs, "persist") {
                out.push_str(&format!(
                    "maw / {fs} persist: {:.2} (paper {:.2}; target <= 0.40)\n",
                    maw / persist,
                    16.0 / if fs == "f2fs" { 52.0 } else { 48.0 }
                ));
            }
        }
    }
    out.push_str("(dev: /sys/block/vda/stat in the guest; sql: bytes SQLite wrote and its fsyncs; paper: Table 3 of the MAW paper, total KB)\n");
    out
}

#[derive(clap::Args, Debug)]
pub struct VmTortureArgs {
    /// The commit scheme (off: the negative control, must lose money)
    #[arg(long, value_enum, default_value = "maw")]
    pub mode: Mode,
    /// Power cuts to perform (one VM boot each, plus a last boot that only checks)
    #[arg(long, value_name = "N", default_value_t = 100,
          value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub power_cuts: u64,
    /// Filesystem of the image
    #[arg(long, value_enum, default_value = "f2fs")]
    pub fs: GuestFs,
    /// Seed of the cut times and transactions [default: random, printed]
    #[arg(long, value_name = "S")]
    pub seed: Option<u64>,
    /// Shortest time from the start of the transactions to the cut, in ms
    #[arg(long, value_name = "MS", default_value_t = 200)]
    pub min_delay_ms: u64,
    /// Longest time from the start of the transactions to the cut, in ms
    #[arg(long, value_name = "MS", default_value_t = 4000)]
    pub max_delay_ms: u64,
    /// Size of the image, in MiB
    #[arg(long, value_name = "MIB", default_value_t = 512)]
    pub size_mib: u64,
    /// Throttle the guest's disk to this many requests per second (0: not at all): a slow
    /// device, so that cuts often land while a commit's writes are in flight
    #[arg(long, value_name = "IOPS", default_value_t = 250)]
    pub disk_iops: u32,
    /// Give up on a VM boot after this long
    #[arg(long, value_name = "S", default_value_t = 600)]
    pub timeout_secs: u64,
    /// Write the summary as JSON to FILE, or to stdout with "-"
    #[arg(long, value_name = "FILE|-")]
    pub json: Option<std::path::PathBuf>,
}

#[derive(Serialize, Default)]
struct TortureSummary {
    mode: String,
    fs: String,
    seed: u64,
    disk_iops: u32,
    power_cuts: u64,
    /// Cuts whose aftermath was checked (every cut: the next boot checks it first).
    checked: u64,
    transactions_acknowledged: u64,
    /// Cuts after which the database was broken or an acknowledged transaction was missing.
    failures: u64,
    first_failure: Option<String>,
}

pub fn torture(args: &VmTortureArgs) -> Result<ExitCode> {
    output::check_json_path(args.json.as_deref())?;
    if args.min_delay_ms > args.max_delay_ms {
        bail!("--min-delay-ms is larger than --max-delay-ms");
    }
    if needs_f2fs(args.mode) && args.fs != GuestFs::F2fs {
        bail!("mode {} needs --fs f2fs", args.mode.name());
    }
    let seed = args.seed.unwrap_or_else(rand::random);
    let mut rng = SmallRng::seed_from_u64(seed);
    let kit = kit::prepare()?;
    let work = tempfile::tempdir().context("making a temporary directory")?;
    let image = work.path().join("torture.img");
    make_image(&image, args.fs, args.size_mib)?;
    let mut summary = TortureSummary {
        mode: args.mode.name().to_owned(),
        fs: args.fs.name().to_owned(),
        seed,
        disk_iops: args.disk_iops,
        ..TortureSummary::default()
    };
    // The largest transaction number acknowledged since the image was made (-1: none).
    let mut acked_max: i64 = -1;
    // Whether the image has been through a cut its next boot must check.
    let mut cut_to_check = false;
    let bar = phase_bar("power cuts", args.power_cuts);
    for boot in 0u64.. {
        let last = summary.power_cuts == args.power_cuts;
        let delay = Duration::from_millis(rng.random_range(args.min_delay_ms..=args.max_delay_ms));
        let mut argv = strings(&[
            "onesync-lab",
            "__vm-tpcb",
            "--mode",
            args.mode.name(),
            "--dir",
            "/mnt",
        ]);
        argv.extend(["--seed".to_owned(), (seed ^ boot).to_string()]);
        if last {
            argv.push("--check-only".to_owned());
        }
        let outcome = kit.boot(&GuestRun {
            image: &image,
            fs: args.fs,
            argv,
            timeout: Duration::from_secs(args.timeout_secs),
            power_cut: (!last).then(|| PowerCut {
                after_line_prefix: RUNNING_LINE.to_owned(),
                delay,
            }),
            disk_iops: (args.disk_iops > 0).then_some(args.disk_iops),
        })?;
        let state = outcome
            .stdout
            .iter()
            .find_map(|l| l.strip_prefix(STATE_PREFIX))
            .map(serde_json::from_str::<TpcbState>)
            .transpose()
            .context("parsing the guest's state line")?;
        if cut_to_check {
            summary.checked += 1;
            let verdict = match &state {
                None => Some(format!(
                    "the guest could not check the database (exit {:?}): {}",
                    outcome.exit_code,
                    outcome.stderr.trim()
                )),
                Some(TpcbState { problem: Some(p), .. }) => Some(p.clone()),
                Some(s) if s.max_seq < acked_max => Some(format!(
                    "transaction {acked_max} was acknowledged but the history ends at {}",
                    s.max_seq
                )),
                Some(_) => None,
            };
            if let Some(problem) = verdict {
                summary.failures += 1;
                let line = format!("after power cut {}: {problem}", summary.power_cuts);
                bar.println(format!("FAILED {line}"));
                summary.first_failure.get_or_insert(line);
                // Start over on a fresh image: the broken one proves nothing more. The guest
                // stopped at its check, so this boot had no cut.
                make_image(&image, args.fs, args.size_mib)?;
                acked_max = -1;
                cut_to_check = false;
                if last {
                    break;
                }
                continue;
            }
        }
        if last {
            break;
        }
        if !outcome.power_cut {
            bail!(
                "the guest workload stopped by itself (exit {:?}):\n{}\n{}",
                outcome.exit_code,
                outcome.stdout.join("\n"),
                outcome.stderr
            );
        }
        let last_line = outcome.stdout.len().saturating_sub(1);
        for (at, ack) in outcome
            .stdout
            .iter()
            .enumerate()
            .filter_map(|(at, l)| l.strip_prefix(ACK_PREFIX).map(|a| (at, a)))
        {
            // The cut can fall while the guest prints its last line: a number the host never
            // received whole was never acknowledged to it.
            let seq: i64 = match ack.trim().parse() {
                Ok(seq) => seq,
                Err(_) if at == last_line => continue,
                Err(e) => return Err(e).with_context(|| format!("bad ack line {ack:?}")),
            };
            acked_max = acked_max.max(seq);
            summary.transactions_acknowledged += 1;
        }
        summary.power_cuts += 1;
        cut_to_check = true;
        bar.inc(1);
    }
    bar.finish_and_clear();
    let failed = summary.failures > 0;
    let line = format!(
        "vm torture {} on {} (seed {seed}): {} power cuts, {} checked, {} transactions acknowledged, \
         {} failure(s){}",
        summary.mode,
        summary.fs,
        summary.power_cuts,
        summary.checked,
        summary.transactions_acknowledged,
        summary.failures,
        summary
            .first_failure
            .as_deref()
            .map(|f| format!(" (first: {f})"))
            .unwrap_or_default()
    );
    output::emit(args.json.as_deref(), &summary, &line, Human::Stdout)?;
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
