//! Smoke tests of `onesync mvbt`: short runs of each experiment (JSON shape, and the
//! relations that hold in any run: LS-MVBT writes about one node per transaction and one
//! flush; its recovery reverts the aborted transaction) and of the torture, whose sabotaged
//! recovery must be caught.

use std::process::Command;

use serde_json::Value;

fn onesync(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_onesync"))
        .args(args)
        .output()
        .expect("running onesync");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn results(json: &str) -> Vec<Value> {
    let v: Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("JSON on stdout ({e}): {json}"));
    v["results"].as_array().expect("results array").clone()
}

fn num(row: &Value, key: &str) -> f64 {
    row[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing in {row}"))
}

#[test]
fn insert_reports_every_mode_and_ls_mvbt_writes_about_one_node_per_transaction() {
    let (ok, out, err) = onesync(&[
        "mvbt",
        "insert",
        "--records",
        "500",
        "--txns",
        "200",
        "--checkpoint-intervals",
        "63,1000",
        "--json",
        "-",
    ]);
    assert!(ok, "{err}");
    let rows = results(&out);
    let modes: Vec<&str> = rows.iter().map(|r| r["mode"].as_str().unwrap()).collect();
    assert_eq!(modes, ["ls-mvbt", "wal", "wal", "truncate"], "{out}");
    for r in &rows {
        for key in ["tps", "us_per_txn", "dirty_pages_per_txn", "fsyncs_per_txn"] {
            assert!(num(r, key) > 0.0, "{key} in {r}");
        }
        assert!(r.get("checkpoint_interval").is_some(), "{r}");
    }
    let ls = &rows[0];
    assert!(ls["checkpoint_interval"].is_null());
    assert_eq!(rows[1]["checkpoint_interval"], 63);
    assert!(num(ls, "dirty_pages_per_txn") <= 1.5, "{ls}");
    assert!(
        (num(ls, "fsyncs_per_txn") - 1.0).abs() < 0.05,
        "one flush per commit: {ls}"
    );
    // TRUNCATE syncs the journal and the database at least.
    assert!(num(&rows[3], "fsyncs_per_txn") >= 2.0, "{}", rows[3]);
}

#[test]
fn mixed_ablation_and_node_size_run() {
    let (ok, out, err) = onesync(&[
        "mvbt",
        "mixed",
        "--txns",
        "100",
        "--search-percent",
        "0,100",
        "--json",
        "-",
    ]);
    assert!(ok, "{err}");
    let rows = results(&out);
    assert_eq!(rows.len(), 6, "{out}");
    // All searches: no transaction writes.
    for r in rows.iter().filter(|r| r["param"] == 100.0) {
        assert_eq!(num(r, "dirty_pages_per_txn"), 0.0, "{r}");
    }

    let (ok, out, err) = onesync(&[
        "mvbt",
        "ablation",
        "--records",
        "300",
        "--txns",
        "60",
        "--json",
        "-",
    ]);
    assert!(ok, "{err}");
    let rows = results(&out);
    assert_eq!(rows.len(), 18, "{out}");
    let pages = |mode: &str, query: &str| {
        num(
            rows.iter()
                .find(|r| r["mode"] == mode && r["query"] == query)
                .expect("row"),
            "dirty_pages_per_txn",
        )
    };
    // Without embedding, every commit also writes the header node.
    assert!(
        pages("mvbt", "update") > pages("mvbt+embedding", "update") + 0.5,
        "{out}"
    );

    let (ok, out, err) = onesync(&[
        "mvbt",
        "node-size",
        "--node-sizes",
        "512,4096",
        "--inserts",
        "100",
        "--json",
        "-",
    ]);
    assert!(ok, "{err}");
    let rows = results(&out);
    assert_eq!(rows.len(), 4, "{out}");
    let splits = |size: f64| {
        num(
            rows.iter().find(|r| r["param"] == size).unwrap(),
            "splits_per_txn",
        )
    };
    assert!(splits(512.0) > splits(4096.0), "{out}");
}

#[test]
fn recovery_reverts_the_aborted_transaction() {
    let (ok, out, err) = onesync(&[
        "mvbt",
        "recovery",
        "--aborted-inserts",
        "10,200",
        "--repeats",
        "1",
        "--json",
        "-",
    ]);
    assert!(ok, "{err}");
    let rows = results(&out);
    assert_eq!(rows.len(), 6, "{out}");
    for r in &rows {
        assert!(num(r, "recovery_ms") > 0.0, "{r}");
    }
}

#[test]
fn torture_passes_and_a_sabotaged_recovery_is_caught() {
    let (ok, out, err) = onesync(&[
        "mvbt",
        "torture",
        "--power-cuts",
        "150",
        "--kills",
        "10",
        "--seed",
        "7",
        "--json",
        "-",
    ]);
    assert!(ok, "{out}\n{err}");
    let summary: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(summary["power_cut_failures"], 0, "{summary}");
    assert_eq!(summary["kill_failures"], 0, "{summary}");
    assert!(
        summary["power_cut_transfers_acknowledged"].as_u64().unwrap() > 100,
        "{summary}"
    );
    assert!(
        summary["kill_transfers_acknowledged"].as_u64().unwrap() > 0,
        "{summary}"
    );

    let (ok, out, _) = onesync(&[
        "mvbt",
        "torture",
        "--power-cuts",
        "600",
        "--kills",
        "0",
        "--sabotage",
        "--seed",
        "7",
        "--json",
        "-",
    ]);
    assert!(!ok, "the sabotaged recovery was not caught: {out}");
    let summary: Value = serde_json::from_str(&out).unwrap();
    assert!(summary["power_cut_failures"].as_u64().unwrap() > 0, "{summary}");
}
