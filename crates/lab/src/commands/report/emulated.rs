//! `onesync-lab report --emulate nvme-plp,nvme,emmc`: the comparison across devices. For each
//! preset, `bench insert` on the crash-safe modes (FULL, then NORMAL and OFF) and `bench
//! dbbench` (4 threads, WAL and onesync at FULL and NORMAL), each mode on a fresh ext4 on an
//! emulated device with that preset's flush latency, write latency and bandwidth
//! (`onesync-device`); then tables per preset in report.md and, in report.html, each
//! scheme's transactions per second and p99.9 commit latency against the device's flush
//! latency.

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use onesync_device::Preset;

use super::charts::sweep_chart;
use super::comparison::{self, html_tables, markdown_tables};
use crate::commands::bench::{self, ModeResult};
use crate::loopfs::{EmulateArgs, FsKind};
use crate::schemes::{Durability, Mode};
use crate::workloads::Workload;

/// Each mode's ext4: small, because the workloads are, and mkfs of every extra MiB is time.
const FS_SIZE_MIB: u64 = 256;

/// One preset's results.
struct Run {
    preset: Preset,
    insert: Vec<ModeResult>,
    dbbench: Vec<ModeResult>,
}

/// The crash-safe modes of the standard report: durable at COMMIT, then at NORMAL and OFF
/// (wal-normal their baseline, and the reference the others pay their flushes against).
fn insert_modes() -> Vec<Mode> {
    comparison::INSERT_MODES
        .into_iter()
        .filter(|m| m.scheme().durability() != Durability::None)
        .collect()
}

/// WAL and onesync at FULL and NORMAL (OFF left out: it differs from NORMAL only in its
/// background flushes, which insert shows).
const DBBENCH_MODES: [Mode; 4] = [Mode::Wal, Mode::Onesync, Mode::WalNormal, Mode::OnesyncNormal];

pub fn run(out: &Path, presets: &[Preset], txns: u64) -> Result<ExitCode> {
    crate::loopfs::check_prerequisites(FsKind::Ext4)
        .context("--emulate puts each mode's ext4 on an emulated device")?;
    if let Some(reason) = onesync_device::unavailable_reason() {
        bail!("--emulate needs an emulated device, and {reason}");
    }
    let load_before = load_average();
    let mut runs = Vec::new();
    for &preset in presets {
        let emulate = EmulateArgs {
            emulate: Some(preset),
            ..EmulateArgs::default()
        };
        let bench_args = |workload: Workload, mode: Vec<Mode>| {
            comparison::report_bench_args(
                workload,
                mode,
                txns,
                Some(FsKind::Ext4),
                FS_SIZE_MIB,
                emulate.clone(),
            )
        };
        eprintln!("onesync-lab report: {} ({})", preset.name(), preset.model());
        let insert = bench::measure(&bench_args(Workload::Insert, insert_modes()))
            .with_context(|| format!("insert on {}", preset.name()))?;
        let dbbench = bench::measure(&bench_args(Workload::Dbbench, DBBENCH_MODES.to_vec()))
            .with_context(|| format!("dbbench on {}", preset.name()))?;
        runs.push(Run {
            preset,
            insert,
            dbbench,
        });
    }
    let load = format!(
        "load average (1 min) {} before and {} after the runs, on {} CPUs",
        load_before,
        load_average(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );

    let md_path = out.join("report.md");
    std::fs::write(&md_path, markdown(&runs, txns, &load))
        .with_context(|| format!("writing {}", md_path.display()))?;
    let html_path = out.join("report.html");
    std::fs::write(&html_path, html(&runs, txns, &load)?)
        .with_context(|| format!("writing {}", html_path.display()))?;
    println!(
        "onesync-lab report: wrote {} and {}",
        html_path.display(),
        md_path.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// /proc/loadavg's first figure: how busy the machine was (other work competes for the CPU;
/// the figures are comparable between schemes within one run, less so between runs).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| text.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "unknown".to_owned())
}

fn place(preset: Preset) -> String {
    format!(
        "a fresh {FS_SIZE_MIB} MiB ext4 per mode on an emulated {} device ({})",
        preset.name(),
        preset.model()
    )
}

const NOTE: &str = "NORMAL and OFF commits (wal-normal, onesync-normal, onesync-off) are not \
                    durable when COMMIT returns: their ratios are against wal-normal, the FULL \
                    modes' against the first. The emulator serves one request at a time \
                    through a loop device and FUSE, which adds a floor of its own (tens of µs) \
                    to every request.";

fn markdown(runs: &[Run], txns: u64, load: &str) -> String {
    let mut md = format!(
        "# onesync-lab report: the schemes across devices\n\n{txns} transactions per mode; {load}.\n\n"
    );
    for run in runs {
        let _ = write!(
            md,
            "## {}\n\nOn {}.\n\n### insert (one 100-byte INSERT per transaction)\n\n{}\
             ### dbbench, 4 threads (inserts, updates, deletes, searches)\n\n{}",
            run.preset.name(),
            place(run.preset),
            markdown_tables(&run.insert, "####"),
            markdown_tables(&run.dbbench, "####")
        );
    }
    let _ = writeln!(md, "{NOTE}");
    md
}

/// One workload's results in a run.
type Pick = fn(&Run) -> &[ModeResult];

/// (mode, flush latency µs, value) for every preset's results of one workload.
fn points(runs: &[Run], results: Pick, value: impl Fn(&ModeResult) -> f64) -> Vec<(&'static str, f64, f64)> {
    runs.iter()
        .flat_map(|run| {
            let flush_us = run.preset.model().flush_latency.as_secs_f64() * 1e6;
            results(run)
                .iter()
                .map(|r| (r.mode, flush_us, value(r)))
                .collect::<Vec<_>>()
        })
        .collect()
}

fn html(runs: &[Run], txns: u64, load: &str) -> Result<String> {
    fn insert(run: &Run) -> &[ModeResult] {
        &run.insert
    }
    fn dbbench(run: &Run) -> &[ModeResult] {
        &run.dbbench
    }
    let tps = |r: &ModeResult| r.tps;
    let p999 = |r: &ModeResult| r.latency_us.p999;
    let presets: Vec<String> = runs
        .iter()
        .map(|run| {
            format!(
                "{} ({} µs)",
                run.preset.name(),
                run.preset.model().flush_latency.as_micros()
            )
        })
        .collect();
    // Each workload's TPS and p99.9 against flush latency.
    let mut charts = Vec::new();
    for (workload, pick) in [("insert", insert as Pick), ("dbbench, 4 threads", dbbench)] {
        charts.push(sweep_chart(
            &format!("{workload}: transactions per second against flush latency"),
            "txn/s (log scale)",
            &points(runs, pick, tps),
        )?);
        charts.push(sweep_chart(
            &format!("{workload}: p99.9 commit latency against flush latency"),
            "p99.9 latency, µs (log scale)",
            &points(runs, pick, p999),
        )?);
    }
    let mut html = format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>onesync-lab report: devices</title>\n\
         <style>body{{font-family:sans-serif;max-width:1000px;margin:2em auto;color:#222}}\
         table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:2px 8px;text-align:right}}\
         th:first-child,td:first-child{{text-align:left}}</style></head><body>\n\
         <h1>onesync-lab report: the schemes across devices</h1>\n<p>Each mode on a fresh ext4 on an \
         emulated device per preset: {}. {txns} transactions per mode; {load}. Higher is better \
         for transactions per second, lower for latency. {NOTE}</p>\n",
        presets.join(", ")
    );
    for chart in &charts {
        let _ = writeln!(html, "<div>{chart}</div>");
    }
    for run in runs {
        let _ = write!(
            html,
            "<h2>{}</h2>\n<p>On {}.</p>\n<h3>insert</h3>\n{}<h3>dbbench, 4 threads</h3>\n{}",
            run.preset.name(),
            place(run.preset),
            html_tables(&run.insert, "h4"),
            html_tables(&run.dbbench, "h4")
        );
    }
    html.push_str("</body></html>\n");
    Ok(html)
}
