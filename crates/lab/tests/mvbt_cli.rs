//! Smoke tests of `onesync-lab mvbt`: short runs of each experiment (JSON shape, and the
//! relations that hold in any run: LS-MVBT writes about one node per transaction and one
//! flush; its recovery reverts the aborted transaction) and of the torture, whose sabotaged
//! recovery must be caught.

use serde_json::Value;

mod common;

use common::{json, onesync, results, said};

fn num(row: &Value, key: &str) -> f64 {
    row[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing in {row}"))
}

#[test]
fn insert_reports_every_mode_and_ls_mvbt_writes_about_one_node_per_transaction() {
    let out = onesync(&[
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
    let rows = results(&out);
    let modes: Vec<&str> = rows.iter().map(|r| r["mode"].as_str().unwrap()).collect();
    assert_eq!(modes, ["ls-mvbt", "wal", "wal", "truncate"], "{}", said(&out));
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
    let out = onesync(&[
        "mvbt",
        "mixed",
        "--txns",
        "100",
        "--search-percent",
        "0,100",
        "--json",
        "-",
    ]);
    let rows = results(&out);
    assert_eq!(rows.len(), 6, "{}", said(&out));
    // All searches: no transaction writes.
    for r in rows.iter().filter(|r| r["param"] == 100.0) {
        assert_eq!(num(r, "dirty_pages_per_txn"), 0.0, "{r}");
    }

    let out = onesync(&[
        "mvbt",
        "ablation",
        "--records",
        "300",
        "--txns",
        "60",
        "--json",
        "-",
    ]);
    let rows = results(&out);
    assert_eq!(rows.len(), 18, "{}", said(&out));
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
        "{}",
        said(&out)
    );

    let out = onesync(&[
        "mvbt",
        "node-size",
        "--node-sizes",
        "512,4096",
        "--inserts",
        "100",
        "--json",
        "-",
    ]);
    let rows = results(&out);
    assert_eq!(rows.len(), 4, "{}", said(&out));
    let splits = |size: f64| {
        num(
            rows.iter().find(|r| r["param"] == size).unwrap(),
            "splits_per_txn",
        )
    };
    assert!(splits(512.0) > splits(4096.0), "{}", said(&out));
}

#[test]
fn recovery_reverts_the_aborted_transaction() {
    let out = onesync(&[
        "mvbt",
        "recovery",
        "--aborted-inserts",
        "10,200",
        "--repeats",
        "1",
        "--json",
        "-",
    ]);
    let rows = results(&out);
    assert_eq!(rows.len(), 6, "{}", said(&out));
    for r in &rows {
        assert!(num(r, "recovery_ms") > 0.0, "{r}");
        assert!(num(r, "first_write_ms") > 0.0, "{r}");
        assert!(num(r, "image_kib") > 0.0, "{r}");
        // The engine's own open is part of LS-MVBT's recovery time.
        if r["mode"] == "ls-mvbt" {
            assert!(num(r, "engine_ms") <= num(r, "recovery_ms"), "{r}");
        }
    }
}

#[test]
fn torture_passes_and_a_sabotaged_recovery_is_caught() {
    let out = onesync(&[
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
    assert!(out.status.success(), "{}", said(&out));
    let summary = json(&out);
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

    let out = onesync(&[
        "mvbt",
        "torture",
        "--power-cuts",
        "600",
        "--kills",
        "30",
        "--sabotage",
        "--seed",
        "7",
        "--json",
        "-",
    ]);
    assert!(
        !out.status.success(),
        "the sabotaged recovery was not caught: {}",
        said(&out)
    );
    let summary = json(&out);
    assert!(summary["power_cut_failures"].as_u64().unwrap() > 0, "{summary}");
    assert!(summary["kill_failures"].as_u64().unwrap() > 0, "{summary}");
}
