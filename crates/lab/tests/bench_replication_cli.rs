//! `onesync-lab bench replication` run as a user would, tiny (one round of a second per
//! mode, onesync shipping every 100 ms): every mode answers or is skipped saying why (the
//! Litestream modes without Go), in the JSON shape the lab promises, with the table on
//! stdout and the stamped results files written; the synchronous modes' commits are all in
//! the replica when COMMIT returns, their lag printed as `-` and footnoted. Shapes, not figures: the figures are for a
//! quiet machine. The S3 modes run too where the local S3 server is built already (the
//! replication tests build it into the same go-bin).

use std::path::Path;

use serde_json::Value;

mod common;

use common::{onesync, said};

fn f(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("{key} in {v}"))
}

#[test]
fn every_mode_answers_or_is_skipped_and_the_results_are_written() {
    let dir = tempfile::tempdir().unwrap();
    let go_bin = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("go-bin");
    let s3 = go_bin.join("versitygw").is_file();
    let (json_path, results_dir) = (dir.path().join("out.json"), dir.path().join("results"));
    let mut args = vec![
        "bench",
        "replication",
        "--rounds",
        "1",
        "--seconds",
        "1",
        "--interval-ms",
        "100",
        "--dir",
        dir.path().to_str().unwrap(),
        "--go-bin",
        go_bin.to_str().unwrap(),
        "--json",
        json_path.to_str().unwrap(),
        "--results",
        results_dir.to_str().unwrap(),
    ];
    if s3 {
        args.push("--s3");
    }
    let out = onesync(&args);
    assert!(out.status.success(), "{}", said(&out));
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    let results = doc["results"].as_array().unwrap();
    let skipped = doc["skipped"].as_array().unwrap();
    let mut expected = vec![
        "onesync",
        "onesync+dir",
        "onesync+dir-sync",
        "onesync+dir-sync-4t",
    ];
    if s3 {
        expected.extend(["onesync+s3", "onesync+s3-sync", "onesync+s3-sync-4t"]);
    }
    expected.extend(["wal", "wal+litestream-1s", "wal+litestream-min"]);
    if s3 {
        expected.extend(["wal+litestream-1s-s3", "wal+litestream-min-s3"]);
    }
    let ran: Vec<&str> = results.iter().map(|r| r["mode"].as_str().unwrap()).collect();
    let not_run: Vec<&str> = skipped.iter().map(|s| s["mode"].as_str().unwrap()).collect();
    let mut all: Vec<&str> = ran.iter().chain(&not_run).copied().collect();
    all.sort();
    let mut want = expected.clone();
    want.sort();
    assert_eq!(all, want, "{}", said(&out));
    // Only the Litestream modes may be skipped (no Go here), each saying why.
    for s in skipped {
        assert!(s["mode"].as_str().unwrap().contains("litestream"), "{s}");
        assert!(s["reason"].as_str().unwrap().contains("Litestream"), "{s}");
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    for r in results {
        let mode = r["mode"].as_str().unwrap();
        let base = r["baseline"].as_str().unwrap();
        assert_eq!(
            base,
            if mode.starts_with("wal") { "wal" } else { "onesync" },
            "{r}"
        );
        for key in ["tps", "ratio"] {
            assert!(f(r, key) > 0.0, "{key} in {r}");
        }
        assert!(f(&r["latency_us"], "p50") > 0.0, "{r}");
        assert!(f(&r["latency_us"], "p99") >= f(&r["latency_us"], "p50"), "{r}");
        assert!(f(r, "p50_ratio") > 0.0, "{r}");
        assert_eq!(r["rounds"].as_array().unwrap().len(), 1, "{r}");
        assert!(f(&r["rounds"][0], "p50_us") > 0.0, "{r}");
        let row = stdout
            .lines()
            .find(|l| l.starts_with(&format!("{mode} ")))
            .unwrap_or_else(|| panic!("{mode} row:\n{stdout}"));
        let sync = mode.contains("-sync");
        let group = mode.ends_with("-4t");
        assert_eq!(r["threads"], if group { 4 } else { 1 }, "{r}");
        assert_eq!(r["replicate_sync"], sync, "{r}");
        if mode == base {
            assert_eq!(f(r, "ratio"), 1.0, "{r}");
            assert_eq!(f(r, "p50_ratio"), 1.0, "{r}");
            assert!(r["lag_ms"].is_null() && r["bytes_per_txn"].is_null(), "{r}");
            continue;
        }
        // Replicated: every sampled commit shipped, a lag for them, bytes uploaded.
        assert_eq!(r["unshipped"], 0, "{r}");
        let lag = &r["lag_ms"];
        assert!(lag["n"].as_u64().unwrap() >= 1, "{r}");
        assert!(f(lag, "p99") >= f(lag, "p50") && f(lag, "p50") >= 0.0, "{r}");
        // A one-row insert changes at least one page somewhere in what ships.
        assert!(f(r, "bytes_per_txn") > 0.0, "{r}");
        assert!(f(r, "files_per_1000_txns") > 0.0, "{r}");
        if mode.starts_with("onesync") {
            // Every sampled commit (one in 8, and the last) read its seq and replicated_seq
            // right after COMMIT returned: in the synchronous modes the replica held each.
            let acked = &r["acked_at_return"];
            let sampled = acked["sampled"].as_u64().unwrap();
            assert!(sampled >= 1, "{r}");
            if sync {
                assert_eq!(acked["acked"].as_u64(), Some(sampled), "{r}");
                // The lag columns: "-", and the footnote saying why.
                let cells: Vec<&str> = row.split_whitespace().collect();
                assert_eq!(cells[cells.len() - 4..cells.len() - 2], ["-", "-"], "{row}");
                let note = format!("{mode}: lag - above: 0 by construction");
                assert!(stdout.contains(&note), "{note}:\n{stdout}");
            }
            assert_eq!(r["lag_method"], "shipped_seq", "{r}");
            // Several tables' rowids: the group's replica files are not read for its lag.
            if group {
                assert!(r["lag_by_files_ms"].is_null(), "{r}");
                // Commits waiting together share an upload.
                assert!(f(r, "uploads_per_commit") < 1.0, "{r}");
            } else {
                assert!(r["lag_by_files_ms"]["n"].as_u64().unwrap() >= 1, "{r}");
            }
            assert!(f(r, "uploads_per_commit") > 0.0, "{r}");
            assert!(f(r, "pragma_bytes_per_txn") > 0.0, "{r}");
            assert!(r["last_error"].is_null(), "{r}");
        } else {
            assert_eq!(r["lag_method"], "replica files", "{r}");
        }
    }
    assert!(stdout.contains("-- onesync at synchronous=FULL"), "{stdout}");
    assert!(
        stdout.contains("-- stock SQLite's WAL at synchronous=FULL"),
        "{stdout}"
    );
    // The stamped files: the table in the .md, the stamp and the results in the .json.
    let names: Vec<String> = std::fs::read_dir(&results_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let md = names
        .iter()
        .find(|n| n.starts_with("replication-") && n.ends_with(".md"));
    let json = names
        .iter()
        .find(|n| n.starts_with("replication-") && n.ends_with(".json"));
    let (md, json) = (
        md.expect("replication-DATE.md"),
        json.expect("replication-DATE.json"),
    );
    let text = std::fs::read_to_string(results_dir.join(md)).unwrap();
    assert!(text.contains("onesync+dir"), "{text}");
    let stamped: Value =
        serde_json::from_str(&std::fs::read_to_string(results_dir.join(json)).unwrap()).unwrap();
    assert!(stamped["stamp"]["commit"].is_string(), "{stamped}");
    assert_eq!(stamped["results"].as_array().unwrap().len(), results.len());
}

#[test]
fn modes_runs_the_modes_named_with_their_baseline_and_refuses_an_unknown_one() {
    let dir = tempfile::tempdir().unwrap();
    let results_dir = dir.path().join("results");
    let out = onesync(&[
        "bench",
        "replication",
        "--modes",
        "onesync+dir",
        "--rounds",
        "2",
        "--seconds",
        "0.5",
        "--interval-ms",
        "100",
        "--dir",
        dir.path().to_str().unwrap(),
        "--json",
        "-",
        "--results",
        results_dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", said(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let modes: Vec<&str> = doc["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["mode"].as_str().unwrap())
        .collect();
    assert_eq!(modes, ["onesync", "onesync+dir"], "{doc}");
    let names: Vec<String> = std::fs::read_dir(&results_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().all(|n| n.contains("-onesync-dir.")) && names.len() == 2,
        "the focused run's files are named after its modes: {names:?}"
    );

    let out = onesync(&[
        "bench",
        "replication",
        "--modes",
        "onesync+s3",
        "--dir",
        dir.path().to_str().unwrap(),
    ]);
    let text = said(&out);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("no mode \"onesync+s3\" without --s3"), "{text}");
}
