//! The standard comparison's modes, how `report` runs each, and its tables per durability
//! class (Markdown and HTML). Below the report (`mod.rs`) and its run across emulated
//! devices (`emulated.rs`), which both print them.

use std::fmt::Write as _;

use crate::commands::bench::{self, BenchArgs, ModeResult, Place};
use crate::loopfs::{EmulateArgs, FsKind};
use crate::schemes::{Durability, Mode};
use crate::workloads::Workload;

/// Grouped by durability class (FULL, then NORMAL and OFF, then not crash-safe); the first is
/// the FULL modes' baseline, wal-normal the NORMAL and OFF modes'.
pub(super) const INSERT_MODES: [Mode; 10] = [
    Mode::Delete,
    Mode::Truncate,
    Mode::Persist,
    Mode::Wal,
    Mode::Onesync,
    Mode::WalNormal,
    Mode::OnesyncNormal,
    Mode::OnesyncOff,
    Mode::Memory,
    Mode::Off,
];

/// WAL and onesync at each level: the NORMAL-class runs cost well under a second each.
pub(super) const DBBENCH_MODES: [Mode; 5] = [
    Mode::Wal,
    Mode::Onesync,
    Mode::WalNormal,
    Mode::OnesyncNormal,
    Mode::OnesyncOff,
];

/// The report's groups of modes, by what a returned COMMIT promises, with their titles.
pub(super) const CLASSES: [(Durability, &str); 3] = [
    (Durability::AtCommit, "durable at COMMIT (synchronous=FULL)"),
    (
        Durability::AfterCheckpoint,
        "atomic, durable shortly after COMMIT (synchronous=NORMAL and OFF)",
    ),
    (Durability::None, "not crash-safe (negative controls)"),
];

/// The durability class of the mode of `r` (an unknown mode claims nothing).
pub(super) fn class_of(r: &ModeResult) -> Durability {
    Mode::by_name(r.mode).map_or(Durability::None, |m| m.scheme().durability())
}

/// The results of `class`, in run order.
pub(super) fn of_class(results: &[ModeResult], class: Durability) -> Vec<ModeResult> {
    results.iter().filter(|r| class_of(r) == class).cloned().collect()
}

/// What the report asks `bench` for: its standard settings (seed 1, dbbench on 4 threads,
/// each on its own table) with the place, size and device given.
pub(super) fn report_bench_args(
    workload: Workload,
    mode: Vec<Mode>,
    txns: u64,
    fs: Option<FsKind>,
    fs_size_mib: u64,
    emulate: EmulateArgs,
) -> BenchArgs {
    BenchArgs {
        workload,
        mode,
        txns,
        place: Place {
            dir: None,
            fs,
            fs_size_mib,
            emulate,
        },
        device: None,
        seed: 1,
        threads: 4,
        shared_table: false,
        pages: 5,
        searches_per_write: 1.0,
        json: None,
    }
}

/// What the tables' groups and ratios mean (Markdown and HTML alike).
pub(super) const NOTE: &str = "The modes are grouped by what a returned COMMIT promises. Ratios are of \
                    transactions per second: NORMAL and OFF modes against wal-normal (stock \
                    SQLite's way to the same promise: atomic, not yet durable), the others \
                    against the first mode run. memory and off are not crash-safe: \
                    references, not choices.\n";

pub(super) const COLUMNS: [&str; 11] = [
    "mode",
    "txn/s",
    "ratio (against)",
    "p50 us",
    "p99 us",
    "p99.9 us",
    "writes/txn",
    "KiB/txn",
    "fsyncs/txn",
    "dev KiB/txn",
    "dev flushes/txn",
];

/// `r`'s cells; its ratio is to its baseline among `results`.
pub(super) fn row(results: &[ModeResult], r: &ModeResult) -> [String; 11] {
    let opt = |v: Option<f64>, digits: usize| v.map_or("–".to_owned(), |v| format!("{v:.digits$}"));
    [
        r.mode.to_owned(),
        format!("{:.0}", r.tps),
        bench::ratio(results, r).map_or("–".to_owned(), |(ratio, base)| format!("{ratio:.2} ({base})")),
        format!("{:.0}", r.latency_us.p50),
        format!("{:.0}", r.latency_us.p99),
        format!("{:.0}", r.latency_us.p999),
        format!("{:.2}", r.per_txn.write_calls),
        format!("{:.2}", r.per_txn.bytes_written / 1024.0),
        format!("{:.3}", r.per_txn.fsyncs),
        opt(r.per_txn.dev_kb, 2),
        opt(r.per_txn.dev_flushes, 3),
    ]
}

/// The classes that ran, in [`CLASSES`] order, each with its title and rows (ratios taken
/// among all of `results`, so a class's baseline may be another class's mode).
pub(super) fn groups(results: &[ModeResult]) -> Vec<(&'static str, Vec<[String; 11]>)> {
    CLASSES
        .iter()
        .map(|&(class, title)| {
            let rows = results
                .iter()
                .filter(|r| class_of(r) == class)
                .map(|r| row(results, r))
                .collect::<Vec<_>>();
            (title, rows)
        })
        .filter(|(_, rows)| !rows.is_empty())
        .collect()
}

/// A table per class, each under a `heading` ("###") title.
pub(super) fn markdown_tables(results: &[ModeResult], heading: &str) -> String {
    let mut out = String::new();
    for (title, rows) in groups(results) {
        let _ = write!(
            out,
            "{heading} {title}\n\n| {} |\n|{}\n",
            COLUMNS.join(" | "),
            "---|".repeat(COLUMNS.len())
        );
        for cells in rows {
            let _ = writeln!(out, "| {} |", cells.join(" | "));
        }
        out.push('\n');
    }
    out
}

/// A table per class, each under a `tag` ("h3") title.
pub(super) fn html_tables(results: &[ModeResult], tag: &str) -> String {
    let mut out = String::new();
    for (title, rows) in groups(results) {
        let _ = write!(out, "<{tag}>{title}</{tag}>\n<table><tr>");
        for c in COLUMNS {
            let _ = write!(out, "<th>{c}</th>");
        }
        out.push_str("</tr>\n");
        for cells in rows {
            out.push_str("<tr>");
            for cell in cells {
                let _ = write!(out, "<td>{cell}</td>");
            }
            out.push_str("</tr>\n");
        }
        out.push_str("</table>\n");
    }
    out
}
