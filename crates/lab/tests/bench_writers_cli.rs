//! `onesync-lab bench writers` run as a user would, briefly: every workload on wal and onesync,
//! from 2 threads and from 2 processes, answers in the JSON shape the lab promises with the
//! oracle passed; the oracle fails a run given one uncounted commit (the negative control);
//! retries (busy_timeout 0) keep the oracle's counts right; and `bench WORKLOAD` still parses
//! beside the subcommand.

use serde_json::Value;

mod common;

use common::{onesync, results, said};

const WORKLOADS: [&str; 3] = ["own-rows", "shared-pages", "hot-rows"];

fn f(v: &Value, path: &[&str]) -> f64 {
    let mut at = v;
    for key in path {
        at = &at[*key];
    }
    at.as_f64().unwrap_or_else(|| panic!("{path:?} in {v}"))
}

/// `bench writers --workload W --mode M --txns N --json -` in a fresh directory, with `extra`.
fn writers(workload: &str, modes: &str, txns: u64, extra: &[&str]) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let txns = txns.to_string();
    let mut args = vec![
        "bench",
        "writers",
        "--workload",
        workload,
        "--mode",
        modes,
        "--txns",
        &txns,
        "--dir",
        dir.path().to_str().unwrap(),
        "--json",
        "-",
    ];
    args.extend_from_slice(extra);
    onesync(&args)
}

fn check_shape(rows: &[Value], workload: &str, modes: &[&str], txns: u64, processes: Option<u64>) {
    let names: Vec<&str> = rows.iter().map(|r| r["mode"].as_str().unwrap()).collect();
    assert_eq!(names, modes);
    for r in rows {
        assert_eq!(r["workload"], workload, "{r}");
        assert_eq!(r["txns"], txns, "{r}");
        assert_eq!(r["writers"], 2, "{r}");
        assert_eq!(r["processes"].as_u64(), processes, "{r}");
        assert_eq!(r["oracle"], "ok", "{r}");
        assert!(r["fs"].is_null(), "{r}");
        assert!(f(r, &["tps"]) > 0.0 && f(r, &["seconds"]) > 0.0, "{r}");
        assert!(f(r, &["ratio"]) > 0.0, "{r}");
        let retries = r["retries"].as_u64().unwrap();
        assert_eq!(
            f(r, &["retries_per_100"]),
            100.0 * retries as f64 / txns as f64,
            "{r}"
        );
        let by_code: u64 = r["retry_codes"]
            .as_object()
            .unwrap()
            .values()
            .map(|n| n.as_u64().unwrap())
            .sum();
        assert_eq!(by_code, retries, "{r}");
        let l = &r["latency_us"];
        assert!(f(l, &["p50"]) > 0.0, "{r}");
        assert!(
            f(l, &["p50"]) <= f(l, &["p99"]) && f(l, &["p99"]) <= f(l, &["p999"]),
            "{r}"
        );
        assert!(f(l, &["p999"]) <= f(l, &["max"]), "{r}");
        assert!(f(r, &["per_txn", "fsyncs"]) > 0.0, "{r}");
        assert!(r["per_txn"]["dev_flushes"].is_null(), "{r}");
    }
    assert_eq!(f(&rows[0], &["ratio"]), 1.0);
}

#[test]
fn every_workload_runs_on_two_threads() {
    for workload in WORKLOADS {
        let rows = results(&writers(workload, "wal,onesync", 60, &["--threads", "2"]));
        check_shape(&rows, workload, &["wal", "onesync"], 60, None);
        for r in &rows {
            assert_eq!(r["threads"], 2, "{r}");
        }
    }
}

#[test]
fn every_workload_runs_in_two_processes() {
    for workload in WORKLOADS {
        let rows = results(&writers(workload, "wal,onesync", 60, &["--processes", "2"]));
        check_shape(&rows, workload, &["wal", "onesync"], 60, Some(2));
        for r in &rows {
            assert_eq!(r["threads"], 1, "{r}");
        }
        // The store's counters, added up over both processes: one record per commit, and
        // each process followed the other's commits (a plain file has none).
        assert!(rows[0]["store"].is_null(), "{}", rows[0]);
        let store = &rows[1]["store"];
        assert_eq!(store["commit_records"], 60, "{store}");
        assert!(f(store, &["records_followed"]) > 0.0, "{store}");
        assert!(f(store, &["catch_ups"]) > 0.0, "{store}");
        // And the flushes that bound the rate, with the time they took, and the growth
        // steps' zeros (a new store grows as it fills).
        assert!(f(store, &["flushes"]) > 0.0, "{store}");
        assert!(f(store, &["flush_micros"]) > 0.0, "{store}");
        assert!(f(store, &["group_commit_flushes"]) > 0.0, "{store}");
        assert!(
            f(store, &["group_commit_flushes"]) <= f(store, &["flushes"]),
            "{store}"
        );
        assert!(f(store, &["bytes_preallocated"]) > 0.0, "{store}");
        // Every commit sequences and writes under the cross-process write lock, one
        // process at a time: held a while in all, but never longer than the run.
        let held_seconds = f(store, &["write_lock_held_micros"]) / 1e6;
        assert!(held_seconds > 0.0, "{store}");
        assert!(held_seconds <= f(&rows[1], &["seconds"]), "{store}");
    }
}

/// The concurrent mode (its store opened with `concurrent=1`) runs from threads and from
/// processes with the oracle passed (an odd number of transactions: the shares differ by
/// one).
#[test]
fn onesync_concurrent_runs_from_threads_and_processes() {
    for extra in [["--threads", "2"], ["--processes", "2"]] {
        let rows = results(&writers("hot-rows", "onesync-concurrent", 51, &extra));
        assert_eq!(rows[0]["oracle"], "ok", "{}", rows[0]);
        assert_eq!(rows[0]["txns"], 51);
    }
}

/// `--rounds 3`: every mode runs three times; its row is its median round by txn/s, its
/// ratio the median of its rounds' ratios to the first mode's round, and every round's
/// figures are in the JSON.
#[test]
fn rounds_report_each_modes_median() {
    let rows = results(&writers(
        "own-rows",
        "wal,onesync",
        40,
        &["--threads", "2", "--rounds", "3"],
    ));
    check_shape(&rows, "own-rows", &["wal", "onesync"], 40, None);
    let median = |values: &[Value]| {
        let mut v: Vec<f64> = values.iter().map(|x| x.as_f64().unwrap()).collect();
        v.sort_by(f64::total_cmp);
        v[1]
    };
    for r in &rows {
        let tps = r["rounds_tps"].as_array().unwrap();
        let ratio = r["rounds_ratio"].as_array().unwrap();
        assert_eq!((tps.len(), ratio.len()), (3, 3), "{r}");
        assert_eq!(f(r, &["tps"]), median(tps), "{r}");
        assert_eq!(f(r, &["ratio"]), median(ratio), "{r}");
    }
    assert!(rows[0]["rounds_ratio"]
        .as_array()
        .unwrap()
        .iter()
        .all(|x| x == 1.0));
}

/// Negative control: one transaction committed behind the writers' backs (an increment no
/// writer counted) fails the oracle, and the command, on every workload.
#[test]
fn the_oracle_fails_an_uncounted_commit() {
    for workload in WORKLOADS {
        for extra in [["--threads", "2"], ["--processes", "2"]] {
            let mut args = extra.to_vec();
            args.push("--sabotage-oracle");
            let out = writers(workload, "wal", 20, &args);
            assert!(
                !out.status.success(),
                "{workload} {extra:?} passed: {}",
                said(&out)
            );
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(stderr.contains("the oracle failed"), "{stderr}");
            let rows = common::json(&out)["results"].as_array().unwrap().clone();
            assert_ne!(rows[0]["oracle"], "ok", "{}", rows[0]);
        }
    }
    let out = writers(
        "hot-rows",
        "onesync",
        20,
        &["--threads", "2", "--sabotage-oracle"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("hot-rows oracle"),
        "{stderr}"
    );
}

/// With busy_timeout 0 every lock conflict is a retry: ROLLBACK and the whole transaction
/// again. Each retried transaction still commits exactly once.
#[test]
fn retries_keep_the_oracle_right() {
    for extra in [["--threads", "2"], ["--processes", "2"]] {
        let mut args = extra.to_vec();
        args.extend(["--busy-timeout-ms", "0"]);
        let rows = results(&writers("hot-rows", "wal,onesync", 100, &args));
        for r in &rows {
            assert_eq!(r["oracle"], "ok", "{r}");
            assert_eq!(r["txns"], 100, "{r}");
        }
    }
}

#[test]
fn bench_parses_a_workload_or_the_writers_subcommand() {
    // `bench` alone is the headline (tests/bench_cli.rs); a workload's options still need
    // the workload.
    let out = onesync(&["bench", "--seed", "1"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("WORKLOAD"),
        "{}",
        said(&out)
    );
    // The subcommand needs its --workload, and takes only its own.
    let out = onesync(&["bench", "writers"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--workload"),
        "{}",
        said(&out)
    );
    let out = onesync(&["bench", "writers", "--workload", "insert"]);
    assert!(!out.status.success(), "{}", said(&out));
    let out = onesync(&["bench", "writers", "--workload", "hot-rows", "--shared-table"]);
    assert!(!out.status.success(), "{}", said(&out));
    // A workload and the subcommand do not mix.
    let out = onesync(&["bench", "insert", "writers"]);
    assert!(!out.status.success(), "{}", said(&out));
    // `bench insert` runs as before.
    let dir = tempfile::tempdir().unwrap();
    let rows = results(&onesync(&[
        "bench",
        "insert",
        "--mode",
        "wal,onesync-concurrent",
        "--txns",
        "20",
        "--dir",
        dir.path().to_str().unwrap(),
        "--json",
        "-",
    ]));
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1]["mode"], "onesync-concurrent");
}
