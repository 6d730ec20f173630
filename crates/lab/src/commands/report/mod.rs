//! `onesync-lab report --out DIR`: the standard comparison, as pictures and tables.
//!
//! It runs `bench insert` on every mode but wal-delayed, maw and batch-atomic, and `bench
//! dbbench` (4 threads) on WAL and onesync at FULL and at NORMAL (and onesync at OFF), on a
//! fresh loop-mounted ext4 per mode when it can (root and mkfs.ext4), else in a temporary
//! directory, and writes `report.html` (SVG bar charts of transactions per second per
//! durability class, KiB and flushes per transaction, and the commit latency CDF; drawn in
//! `charts.rs`) and `report.md` (the tables, one per durability class, with each mode's ratio
//! to its class's baseline). With `--emulate PRESET,...` it compares the schemes across
//! emulated devices instead (`emulated.rs`).
//!
//! `report --results DIR` writes the stamped headline results instead, and `--update-readme`
//! and `--print-readme-table` render the README's table from them (`results.rs`, `stamp.rs`).

mod baseline;
mod charts;
mod comparison;
mod emulated;
pub(crate) mod results;
mod seeds;
pub(crate) mod stamp;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use charts::{bar_chart, cdf_chart, flash_color, labelled_bars, line_chart, series};

use anyhow::{Context, Result};
use comparison::{
    html_tables, markdown_tables, of_class, report_bench_args, DBBENCH_MODES, INSERT_MODES, NOTE,
};

use crate::commands::bench::{self, headline, ModeResult};
use crate::commands::flash::{self, FlashResult};
use crate::loopfs::{EmulateArgs, FsKind};
use crate::schemes::Durability;
use crate::schemes::Mode;
use crate::workloads::Workload;

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// Directory to write report.html and report.md into (created if missing)
    #[arg(long, value_name = "DIR",
          required_unless_present_any = ["results", "update_readme", "print_readme_table", "baseline", "write_baseline", "seeds"],
          conflicts_with_all = ["results", "update_readme", "print_readme_table", "baseline", "write_baseline", "seeds"])]
    pub out: Option<PathBuf>,

    /// Check for regressions: run issue 41's headline figures in alternating rounds (insert
    /// FULL and NORMAL, p99.9 latency at NORMAL, dbbench with 4 threads, store-bench's
    /// single/raw and recovery) and print each median and 95% interval beside this baseline
    /// file's median and the target, with a verdict (better, same, worse; target met or
    /// missed). With --results also writes DIR/baseline-check-YYYY-MM-DD.md
    #[arg(long, value_name = "FILE", conflicts_with_all = ["update_readme", "print_readme_table", "emulate"])]
    pub baseline: Option<PathBuf>,

    /// Run the same figures and record them (medians, intervals, every round; stamped) as a
    /// baseline file for --baseline
    #[arg(long, value_name = "FILE", conflicts_with_all = ["update_readme", "print_readme_table", "emulate"])]
    pub write_baseline: Option<PathBuf>,

    /// With --baseline: exit with status 1 when a figure is worse than the baseline (by
    /// default the check reports and exits 0)
    #[arg(long, requires = "baseline")]
    pub fail_on_worse: bool,

    /// Single-page commits the check's recovery replays (store-bench's --recovery-records)
    #[arg(long, value_name = "N", default_value_t = 10_000, hide = true)]
    pub recovery_records: u64,

    /// Pages of the store whose recovery the check times (store-bench's --recovery-pages)
    #[arg(long, value_name = "N", default_value_t = 65_536, hide = true,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub recovery_pages: u64,

    /// Run the headline comparison (`bench` with no workload) in alternating rounds and write
    /// DIR/headline-YYYY-MM-DD.md, .json and .svg, stamped with the command, commit, UTC time
    /// and machine. With --update-readme or --print-readme-table: where to read them
    /// [default there: docs/results]
    #[arg(long, value_name = "DIR", conflicts_with_all = ["emulate", "no_fs", "no_flash"])]
    pub results: Option<PathBuf>,

    /// Rounds of the headline for --results, and of --baseline and --write-baseline (each
    /// figure the median of the rounds)
    #[arg(long, value_name = "N", default_value_t = headline::DEFAULT_ROUNDS,
          value_parser = clap::value_parser!(u64).range(1..=1000),
          conflicts_with_all = ["out", "update_readme", "print_readme_table"])]
    pub rounds: u64,

    /// Rewrite the README's results table (between <!-- results:begin --> and
    /// <!-- results:end -->) from the newest results file (by its stamp's time); runs nothing
    #[arg(long, value_name = "README", conflicts_with = "print_readme_table")]
    pub update_readme: Option<PathBuf>,

    /// Print what --update-readme would put between the markers (links relative to the
    /// current directory); runs nothing
    #[arg(long)]
    pub print_readme_table: bool,

    /// Transactions per mode [default: 3000; 1000 with --emulate; with --results 1000 per
    /// mode per round]
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=1_000_000),
          conflicts_with_all = ["update_readme", "print_readme_table"])]
    pub txns: Option<u64>,

    /// Run in a temporary directory even when a loop ext4 could be made
    #[arg(long, conflicts_with = "emulate")]
    pub no_fs: bool,

    /// Instead of the standard comparison, compare the crash-safe modes across these
    /// emulated devices (each mode on a fresh ext4 on the device; needs root and /dev/fuse):
    /// tables per device, and TPS and p99.9 latency against flush latency
    #[arg(long, value_enum, value_delimiter = ',', value_name = "PRESET,...")]
    pub emulate: Vec<onesync_device::Preset>,

    /// Leave out the simulated-flash (X-FTL) experiments
    #[arg(long)]
    pub no_flash: bool,

    /// Run the five seed papers' headline experiments and write DIR/seeds.md and
    /// DIR/seeds.json (DIR: --results, default docs/results): each claim's figure in the
    /// paper beside ours, the bar it must reach, the command that measured it (stamped)
    #[arg(long, conflicts_with_all = ["update_readme", "print_readme_table", "baseline", "write_baseline", "emulate", "txns"])]
    pub seeds: bool,

    /// With --seeds: only these papers' experiments
    #[arg(long, value_enum, value_delimiter = ',', value_name = "PAPER,...", requires = "seeds",
          default_values_t = seeds::Paper::ALL)]
    pub papers: Vec<seeds::Paper>,

    /// With --seeds: a tenth of the transactions (noisier figures; for the tests)
    #[arg(long, requires = "seeds")]
    pub quick: bool,
}

/// Where `--update-readme` and `--print-readme-table` read the results without `--results`.
const RESULTS_DIR: &str = "docs/results";

pub fn run(args: &ReportArgs) -> Result<ExitCode> {
    if args.baseline.is_some() || args.write_baseline.is_some() {
        return baseline::run(&baseline::CheckArgs {
            baseline: args.baseline.as_deref(),
            write_baseline: args.write_baseline.as_deref(),
            results: args.results.as_deref(),
            rounds: args.rounds,
            txns: args.txns.unwrap_or(headline::DEFAULT_TXNS),
            recovery_pages: args.recovery_pages,
            recovery_records: args.recovery_records,
            fail_on_worse: args.fail_on_worse,
        });
    }
    let results_dir = args.results.as_deref().unwrap_or(Path::new(RESULTS_DIR));
    if args.seeds {
        let scale = seeds::Scale { quick: args.quick };
        for path in seeds::write(results_dir, &args.papers, scale)? {
            println!("onesync-lab report: wrote {}", path.display());
        }
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(readme) = &args.update_readme {
        results::update_readme(readme, results_dir)?;
        return Ok(ExitCode::SUCCESS);
    }
    if args.print_readme_table {
        print!("{}", results::readme_block(results_dir, Path::new("."))?);
        return Ok(ExitCode::SUCCESS);
    }
    let Some(out) = &args.out else {
        let txns = args.txns.unwrap_or(headline::DEFAULT_TXNS);
        for path in results::write(results_dir, args.rounds, txns)? {
            println!("onesync-lab report: wrote {}", path.display());
        }
        return Ok(ExitCode::SUCCESS);
    };
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    if !args.emulate.is_empty() {
        return emulated::run(out, &args.emulate, args.txns.unwrap_or(1000));
    }
    let txns = args.txns.unwrap_or(3000);
    let fs =
        (!args.no_fs && crate::loopfs::check_prerequisites(FsKind::Ext4).is_ok()).then_some(FsKind::Ext4);
    let bench_args = |workload: Workload, modes: &[Mode]| {
        report_bench_args(workload, modes.to_vec(), txns, fs, 1024, EmulateArgs::default())
    };
    let insert_args = bench_args(Workload::Insert, &INSERT_MODES);
    let insert = bench::measure(&insert_args)?;
    let dbbench_args = bench_args(Workload::Dbbench, &DBBENCH_MODES);
    let dbbench = bench::measure(&dbbench_args)?;
    let place = match fs {
        Some(kind) => format!("a fresh {} on a loop device per mode", kind.name()),
        None => format!("a temporary directory ({})", std::env::temp_dir().display()),
    };

    let mut md = format!(
        "# onesync-lab report\n\nEvery mode ran the same workload in the same run, on {place}.\n\n\
         ## insert ({txns} transactions per mode: one 100-byte INSERT each)\n\n"
    );
    md.push_str(&markdown_tables(&insert, "###"));
    let _ = write!(
        md,
        "## dbbench, 4 threads ({txns} transactions in all: inserts, updates, deletes, searches)\n\n"
    );
    md.push_str(&markdown_tables(&dbbench, "###"));
    md.push_str(NOTE);
    let md_path = out.join("report.md");
    std::fs::write(&md_path, &md).with_context(|| format!("writing {}", md_path.display()))?;

    let device = insert.iter().all(|r| r.per_txn.dev_kb.is_some());
    let kib = |r: &ModeResult| match r.per_txn.dev_kb {
        Some(kb) => kb,
        None => r.per_txn.bytes_written / 1024.0,
    };
    let flushes = |r: &ModeResult| r.per_txn.dev_flushes.unwrap_or(r.per_txn.fsyncs);
    // Modes that do not wait for a flush would dwarf the others' bars: TPS is charted per
    // class, the not crash-safe references left out (all modes are in the tables).
    let tps_chart = |workload: &str, results: &[ModeResult], class: Durability, level: &str| {
        bar_chart(
            &format!("Transactions per second ({workload}; synchronous={level})"),
            "txn/s",
            &of_class(results, class),
            |r| r.tps,
        )
    };
    let (full, normal) = (Durability::AtCommit, Durability::AfterCheckpoint);
    let charts = [
        tps_chart("insert", &insert, full, "FULL")?,
        tps_chart("insert", &insert, normal, "NORMAL and OFF")?,
        bar_chart(
            if device {
                "KiB written to the device per transaction (insert)"
            } else {
                "KiB written per transaction (insert)"
            },
            "KiB",
            &insert,
            kib,
        )?,
        bar_chart(
            if device {
                "Device flushes per transaction (insert)"
            } else {
                "fsync calls per transaction (insert)"
            },
            "flushes",
            &insert,
            flushes,
        )?,
        cdf_chart("Commit latency, cumulative (insert)", &insert)?,
        tps_chart("dbbench, 4 threads", &dbbench, full, "FULL")?,
        tps_chart("dbbench, 4 threads", &dbbench, normal, "NORMAL and OFF")?,
    ];
    let mut html = format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>onesync-lab report</title>\n\
         <style>body{{font-family:sans-serif;max-width:1000px;margin:2em auto;color:#222}}\
         table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:2px 8px;text-align:right}}\
         th:first-child,td:first-child{{text-align:left}}</style></head><body>\n\
         <h1>onesync-lab report</h1>\n<p>Every mode ran the same workload in the same run, on {place}. \
         Higher is better for transactions per second; lower is better for bytes, flushes and \
         latency. {NOTE}</p>\n"
    );
    for chart in &charts {
        let _ = writeln!(html, "<div>{chart}</div>");
    }
    html.push_str("<h2>insert</h2>\n");
    html.push_str(&html_tables(&insert, "h3"));
    html.push_str("<h2>dbbench, 4 threads</h2>\n");
    html.push_str(&html_tables(&dbbench, "h3"));
    if !args.no_flash {
        let (flash_html, flash_md) = flash_section()?;
        html.push_str(&flash_html);
        md.push_str(&flash_md);
        std::fs::write(&md_path, &md).with_context(|| format!("writing {}", md_path.display()))?;
    }
    html.push_str("</body></html>\n");
    let html_path = out.join("report.html");
    std::fs::write(&html_path, &html).with_context(|| format!("writing {}", html_path.display()))?;
    println!(
        "onesync-lab report: wrote {} and {}",
        html_path.display(),
        md_path.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// The X-FTL experiments on the simulated drive (shorter runs than the subcommands'
/// defaults): charts for the HTML, tables for the Markdown.
fn flash_section() -> Result<(String, String)> {
    let partsupp = flash::partsupp(&flash::PartsuppArgs {
        mode: vec![flash::SqlMode::Rbj, flash::SqlMode::Wal, flash::SqlMode::Xftl],
        pages: vec![1, 5, 10, 15, 20],
        txns: 300,
        capacity_mib: 128,
        drive: flash::DriveArgs::default(),
        json: None,
    })?;
    let gc = flash::gc(&flash::GcArgs {
        mode: vec![flash::SqlMode::Rbj, flash::SqlMode::Wal, flash::SqlMode::Xftl],
        ratios: vec![30, 50, 70],
        pages: 5,
        txns: 600,
        capacity_mib: 64,
        drive: flash::DriveArgs::default(),
        json: None,
    })?;
    let fio = flash::fio(&flash::FioArgs {
        mode: vec![
            flash::FioMode::Xftl,
            flash::FioMode::Ordered,
            flash::FioMode::Data,
        ],
        pages_per_fsync: vec![1, 5, 10, 15, 20],
        writes: 2000,
        file_mib: 32,
        capacity_mib: 128,
        drive: flash::DriveArgs::default(),
        json: None,
    })?;
    let restart = flash::restart(&flash::RestartArgs {
        mode: vec![flash::SqlMode::Rbj, flash::SqlMode::Wal, flash::SqlMode::Xftl],
        txns: 150,
        capacity_mib: 128,
        drive: flash::DriveArgs::default(),
        json: None,
    })?;
    let per_txn_ms = |r: &FlashResult| r.sim_ms / r.ops.max(1) as f64;
    let charts = [
        line_chart(
            "Simulated SSD: time per transaction (partsupp)",
            "pages updated per transaction",
            "ms per transaction",
            &series(&partsupp, per_txn_ms),
        )?,
        line_chart(
            "Simulated SSD: NAND pages programmed per transaction (partsupp)",
            "pages updated per transaction",
            "NAND programs",
            &series(&partsupp, |r| r.nand_programs as f64 / r.ops.max(1) as f64),
        )?,
        line_chart(
            "Simulated SSD: garbage collections per 1,000 transactions (partsupp, 5 pages)",
            "target valid-page ratio of GC victims, % (measured ratios in the table)",
            "GC runs",
            &series(&gc, |r| r.gc_runs as f64 * 1000.0 / r.ops.max(1) as f64),
        )?,
        line_chart(
            "Simulated SSD: FIO random writes",
            "pages written per fsync",
            "IOPS (simulated)",
            &series(&fio, |r| r.per_sec),
        )?,
        labelled_bars(
            "Simulated SSD: restart after a power cut mid-transaction (drive + mount + SQLite)",
            "ms",
            &restart
                .iter()
                .map(|r| (r.mode.clone(), r.sim_ms, flash_color(&r.mode)))
                .collect::<Vec<_>>(),
        )?,
    ];
    let mut html = String::from(
        "<h2>Simulated flash SSD (X-FTL)</h2>\n<p>SQLite on a simulated MLC NAND SSD (8 KiB \
         pages, 128 pages per block, greedy GC): <code>rbj</code> and <code>wal</code> on an \
         ext4-like ordered-journaling filesystem, <code>xftl</code> with the journal in memory \
         and every commit one drive transaction. Time is the drive's simulated clock. Lower is \
         better except for IOPS.</p>\n",
    );
    for chart in &charts {
        let _ = writeln!(html, "<div>{chart}</div>");
    }
    let all: Vec<FlashResult> = partsupp.into_iter().chain(gc).chain(fio).chain(restart).collect();
    let _ = writeln!(html, "<pre>{}</pre>", flash::table(&all));
    let md = format!(
        "\n## Simulated flash SSD (X-FTL)\n\nrbj and wal on an ext4-like ordered-journaling \
         filesystem, xftl with SQLite's journal in memory and each commit one drive transaction; \
         time is the drive's simulated clock.\n\n```\n{}```\n",
        flash::table(&all)
    );
    Ok((html, md))
}
