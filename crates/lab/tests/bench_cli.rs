//! `onesync-lab bench` run as a user would, on small workloads: every mode answers in the JSON
//! shape the lab promises, the counting shim sees the stock modes' journals, and onesync
//! makes one flush per transaction. With `--fs` (root, mkfs.ext4) the device columns too.

use std::process::Command;

use serde_json::Value;

mod common;

use common::{onesync, results};

fn f(v: &Value, path: &[&str]) -> f64 {
    let mut at = v;
    for key in path {
        at = &at[*key];
    }
    at.as_f64().unwrap_or_else(|| panic!("{path:?} in {v}"))
}

#[test]
fn every_mode_reports_its_costs() {
    let dir = tempfile::tempdir().unwrap();
    let modes = "delete,truncate,persist,wal,wal-normal,wal-delayed,memory,off,onesync";
    let out = onesync(&[
        "bench",
        "insert",
        "--mode",
        modes,
        "--txns",
        "150",
        "--dir",
        dir.path().to_str().unwrap(),
        "--json",
        "-",
    ]);
    let rows = results(&out);
    let names: Vec<&str> = rows.iter().map(|r| r["mode"].as_str().unwrap()).collect();
    assert_eq!(names, modes.split(',').collect::<Vec<_>>());
    for r in &rows {
        assert_eq!(r["workload"], "insert");
        assert_eq!(r["txns"], 150);
        assert!(r["fs"].is_null());
        assert!(f(r, &["tps"]) > 0.0, "{r}");
        let l = &r["latency_us"];
        assert!(f(l, &["p50"]) <= f(l, &["p99"]) && f(l, &["p99"]) <= f(l, &["p999"]));
        assert!(f(l, &["p999"]) <= f(l, &["max"]), "{r}");
        assert!(r["per_txn"]["dev_writes"].is_null());
        assert!(f(r, &["per_txn", "write_calls"]) >= 1.0, "{r}");
    }
    let by = |m: &str| rows.iter().find(|r| r["mode"] == m).unwrap();
    // The rollback journal: the journal's writes and syncs are counted (the shim passes
    // journals through), so more than the database's own.
    assert!(f(by("delete"), &["per_txn", "fsyncs"]) >= 2.9, "{}", by("delete"));
    assert!(f(by("delete"), &["per_txn", "write_calls"]) > 3.0);
    assert!(f(by("wal"), &["per_txn", "fsyncs"]) < 1.1);
    assert!(f(by("wal-normal"), &["per_txn", "fsyncs"]) < 0.1);
    let o = by("onesync");
    // One flush per commit, and one per growth step: a fresh store grows four times in its
    // first 150 commits (steps of 256 KiB, grown a commit or two before they are needed,
    // after a commit and outside its locks; three when it grew only once a commit no
    // longer fit).
    assert!(f(o, &["per_txn", "fsyncs"]) <= 1.0 + 4.0 / 150.0 + 1e-9, "{o}");
    assert!(f(o, &["per_txn", "bytes_written"]) <= 8.5 * 1024.0, "{o}");
    // Growth zeros are reported apart, per commit, for a store only: a fresh store grows
    // in its first 150 commits (at least one 256 KiB step), and a plain file has none.
    let zeros = f(o, &["per_txn", "growth_zeros_kb"]);
    assert!((256.0 / 150.0..64.0).contains(&zeros), "{o}");
    assert!(by("wal")["per_txn"]["growth_zeros_kb"].is_null());
}

#[test]
fn tpcb_conserves_money_on_every_mode() {
    let dir = tempfile::tempdir().unwrap();
    let out = onesync(&[
        "bench",
        "tpcb",
        "--mode",
        "delete,wal,onesync",
        "--txns",
        "100",
        "--dir",
        dir.path().to_str().unwrap(),
        "--json",
        "-",
    ]);
    assert_eq!(results(&out).len(), 3);
}

#[test]
fn dbbench_runs_threads_on_separate_and_shared_tables() {
    let dir = tempfile::tempdir().unwrap();
    for shared in [false, true] {
        let mut args = vec![
            "bench",
            "dbbench",
            "--threads",
            "3",
            "--mode",
            "wal,onesync",
            "--txns",
            "300",
            "--dir",
            dir.path().to_str().unwrap(),
            "--json",
            "-",
        ];
        if shared {
            args.push("--shared-table");
        }
        let rows = results(&onesync(&args));
        assert_eq!(rows.len(), 2);
        for r in &rows {
            assert_eq!(r["txns"], 300);
            assert!(f(r, &["tps"]) > 0.0);
        }
    }
}

/// Every dbbench thread's connection runs at the mode's level (the pragmas are per
/// connection): at FULL each flush covers at most one commit per thread; at NORMAL the
/// store's background flusher flushes once per 20 ms at most; at OFF nothing flushes but a
/// checkpoint (one per 1,000 commits). One thread left at FULL would flush per commit.
#[test]
fn dbbench_threads_all_run_at_the_modes_synchronous_level() {
    let dir = tempfile::tempdir().unwrap();
    let txns = 800.0;
    let rows = results(&onesync(&[
        "bench",
        "dbbench",
        "--threads",
        "4",
        "--mode",
        "onesync,onesync-normal,onesync-off",
        "--txns",
        "800",
        "--dir",
        dir.path().to_str().unwrap(),
        "--json",
        "-",
    ]));
    let names: Vec<&str> = rows.iter().map(|r| r["mode"].as_str().unwrap()).collect();
    assert_eq!(names, ["onesync", "onesync-normal", "onesync-off"]);
    let flushes = |r: &Value| f(r, &["per_txn", "fsyncs"]) * txns;
    let seconds = |r: &Value| txns / f(r, &["tps"]);
    let (full, normal, off) = (&rows[0], &rows[1], &rows[2]);
    assert!(flushes(full) >= txns / 4.0 - 0.5, "{full}");
    // Slack for the checkpoints' flushes and the interval's edges.
    assert!(flushes(normal) <= seconds(normal) / 0.020 + 6.0, "{normal}");
    assert!(flushes(off) <= 4.0, "{off}");
}

#[test]
fn update_and_delete_run() {
    let dir = tempfile::tempdir().unwrap();
    for workload in ["update", "delete", "partsupp", "mixed"] {
        let out = onesync(&[
            "bench",
            workload,
            "--mode",
            "persist,onesync",
            "--txns",
            "100",
            "--dir",
            dir.path().to_str().unwrap(),
            "--json",
            "-",
        ]);
        assert_eq!(results(&out).len(), 2, "{workload}");
    }
}

#[test]
fn on_a_loop_ext4_the_device_is_counted() {
    let root = nix::unistd::geteuid().is_root();
    let mkfs = Command::new("mkfs.ext4").arg("-V").output().is_ok();
    if !root || !mkfs {
        eprintln!("SKIPPED: needs root and mkfs.ext4");
        return;
    }
    let out = onesync(&[
        "bench",
        "insert",
        "--mode",
        "delete,onesync",
        "--txns",
        "200",
        "--fs",
        "ext4",
        "--fs-size-mib",
        "256",
        "--json",
        "-",
    ]);
    let rows = results(&out);
    for r in &rows {
        assert_eq!(r["fs"], "ext4");
        assert!(f(r, &["per_txn", "dev_writes"]) > 0.0, "{r}");
    }
    let o = &rows[1];
    // One flush per commit, plus the new store's growth steps (a flush each, about ten in
    // its first thousand commits, all of them inside this short run; 10,000 transactions
    // give 1.005).
    assert!(f(o, &["per_txn", "dev_flushes"]) <= 1.1, "{o}");
    // The rollback journal costs the device several times onesync's bytes.
    assert!(f(&rows[0], &["per_txn", "dev_kb"]) > 3.0 * f(o, &["per_txn", "dev_kb"]));
}

/// NORMAL and OFF modes are compared with wal-normal (the same promise), the others with
/// the first mode.
#[test]
fn normal_modes_take_their_ratio_against_wal_normal() {
    let dir = tempfile::tempdir().unwrap();
    let out = onesync(&[
        "bench",
        "insert",
        "--mode",
        "wal,onesync,wal-normal,onesync-normal,onesync-off",
        "--txns",
        "100",
        "--dir",
        dir.path().to_str().unwrap(),
    ]);
    let text = common::said(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(
            "(ratio: txn/s against wal for wal, onesync; against wal-normal (the same promise) \
             for wal-normal, onesync-normal, onesync-off)"
        ),
        "{text}"
    );
    // A row's column: mode, txn/s, ratio, ...
    let column = |mode: &str, n: usize| -> f64 {
        let line = text
            .lines()
            .find(|l| l.split_whitespace().next() == Some(mode))
            .unwrap_or_else(|| panic!("no {mode} row in {text}"));
        line.split_whitespace().nth(n).unwrap().parse().unwrap()
    };
    let ratio = |mode: &str| column(mode, 2);
    assert_eq!(ratio("wal"), 1.0);
    assert_eq!(ratio("wal-normal"), 1.0);
    // The column itself, not only the note, takes each ratio against its baseline (txn/s
    // printed whole, the ratio to two places).
    for (mode, base) in [
        ("onesync", "wal"),
        ("onesync-normal", "wal-normal"),
        ("onesync-off", "wal-normal"),
    ] {
        let expected = column(mode, 1) / column(base, 1);
        assert!(
            (ratio(mode) - expected).abs() <= 0.006 + expected * 0.01,
            "{mode}: ratio {} is not its txn/s over {base}'s ({expected:.3}):\n{text}",
            ratio(mode)
        );
    }
}

#[test]
fn bad_arguments_are_refused() {
    let out = onesync(&["bench", "insert", "--mode", "nonsense"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nonsense"));
    let out = onesync(&["bench", "insert", "--txns", "0"]);
    assert!(!out.status.success());
    let out = onesync(&["bench", "mixed", "--searches-per-write=nan"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--searches-per-write"));
}

#[test]
fn bench_without_a_workload_runs_the_headline() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path().to_str().unwrap();
    let out = onesync(&[
        "bench", "--rounds", "2", "--txns", "40", "--dir", dir, "--json", "-",
    ]);
    let rows = results(&out);
    let names: Vec<&str> = rows.iter().map(|r| r["mode"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["delete", "wal", "onesync", "wal-normal", "onesync-normal"]
    );
    let baselines: Vec<&str> = rows.iter().map(|r| r["baseline"].as_str().unwrap()).collect();
    assert_eq!(baselines, ["wal", "wal", "wal", "wal-normal", "wal-normal"]);
    for r in &rows {
        let rounds_tps = r["rounds_tps"].as_array().unwrap();
        assert_eq!(rounds_tps.len(), 2, "{r}");
        // The median of two rounds lies between them, inside or at the interval's ends.
        let (a, b) = (rounds_tps[0].as_f64().unwrap(), rounds_tps[1].as_f64().unwrap());
        let tps = f(r, &["tps"]);
        assert!(tps >= a.min(b) && tps <= a.max(b), "{r}");
        assert!(
            f(r, &["tps_interval", "low"]) <= f(r, &["tps_interval", "high"]),
            "{r}"
        );
        assert!(
            f(r, &["bytes_per_commit"]) > 0.0 && f(r, &["p999_us"]) > 0.0,
            "{r}"
        );
        if r["mode"] == r["baseline"] {
            assert_eq!(f(r, &["ratio"]), 1.0, "{r}");
        }
    }
    let by = |m: &str| rows.iter().find(|r| r["mode"] == m).unwrap();
    assert!(f(by("wal"), &["flushes_per_commit"]) >= 0.99, "{}", by("wal"));
    assert!(
        f(by("wal-normal"), &["flushes_per_commit"]) < 0.1,
        "{}",
        by("wal-normal")
    );
    // The ratio is paired within each round: onesync's over wal's of the same round.
    let (onesync_tps, wal_tps) = (&by("onesync")["rounds_tps"], &by("wal")["rounds_tps"]);
    for round in 0..2 {
        let paired = onesync_tps[round].as_f64().unwrap() / wal_tps[round].as_f64().unwrap();
        let reported = by("onesync")["rounds_ratio"][round].as_f64().unwrap();
        assert!((paired - reported).abs() < 1e-9, "{paired} {reported}");
    }

    // The human table: one row per mode, a line per class.
    let out = onesync(&["bench", "--rounds", "1", "--txns", "20", "--dir", dir]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("synchronous=FULL") && table.contains("synchronous=NORMAL"),
        "{table}"
    );
    assert!(table.lines().any(|l| l.starts_with("onesync-normal ")), "{table}");
}

#[test]
fn the_headline_refuses_a_workload_run_option() {
    let out = onesync(&["bench", "--mode", "wal"]);
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("--mode") && said.contains("WORKLOAD"), "{said}");
    let out = onesync(&["bench", "insert", "--rounds", "2"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--rounds"));
}

#[test]
fn report_writes_html_with_charts_and_markdown_tables() {
    let out_dir = tempfile::tempdir().unwrap();
    let out = onesync(&[
        "report",
        "--out",
        out_dir.path().to_str().unwrap(),
        "--txns",
        "100",
        "--no-fs",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let html = std::fs::read_to_string(out_dir.path().join("report.html")).unwrap();
    // Seven charts (insert TPS at FULL and at NORMAL/OFF, KiB and flushes per transaction,
    // the latency CDF, dbbench TPS at FULL and at NORMAL/OFF) and five of the simulated flash
    // SSD (partsupp time and programs, GC, FIO, restart).
    assert!(html.contains("Simulated flash SSD"));
    assert_eq!(
        html.matches("<svg").count(),
        12,
        "{}",
        &html[..html.len().min(2000)]
    );
    for mode in [
        "delete",
        "truncate",
        "persist",
        "wal",
        "memory",
        "off",
        "onesync",
        "wal-normal",
        "onesync-normal",
        "onesync-off",
    ] {
        assert!(
            html.contains(&format!("<td>{mode}</td>")),
            "{mode} missing from the HTML table"
        );
    }
    let md = std::fs::read_to_string(out_dir.path().join("report.md")).unwrap();
    assert!(md.contains("| onesync |") && md.contains("## dbbench"), "{md}");
    // The NORMAL class in its own tables, in insert and in dbbench, against wal-normal.
    let normal = "### atomic, durable shortly after COMMIT (synchronous=NORMAL and OFF)";
    assert_eq!(md.matches(normal).count(), 2, "{md}");
    let dbbench = &md[md.find("## dbbench").unwrap()..];
    for mode in ["wal-normal", "onesync-normal", "onesync-off"] {
        assert!(md.contains(&format!("| {mode} |")), "{mode} missing:\n{md}");
        assert!(
            dbbench.contains(&format!("| {mode} |")),
            "{mode} not in dbbench:\n{md}"
        );
    }
    assert!(md.contains("| 1.00 (wal-normal) |"), "{md}");
    for line in md
        .lines()
        .filter(|l| l.starts_with("| onesync-normal |") || l.starts_with("| onesync-off |"))
    {
        assert!(line.contains(" (wal-normal) |"), "not against wal-normal: {line}");
    }
    assert!(md.contains("| onesync |") && md.contains(" (delete) |"), "{md}");
    // FULL modes against the workload's first mode: delete in insert, wal in dbbench.
    let insert = &md[..md.find("## dbbench").unwrap()];
    for (section, first) in [(insert, "delete"), (dbbench, "wal")] {
        let line = section
            .lines()
            .find(|l| l.starts_with("| onesync |"))
            .expect("onesync row");
        assert!(
            line.contains(&format!(" ({first}) |")),
            "not against {first}: {line}"
        );
    }
}
