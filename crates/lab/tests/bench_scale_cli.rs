//! `onesync-lab bench scale` run as a user would, tiny: a 20M database on wal and onesync
//! answers in the JSON shape the lab promises with positive figures (a checkpoint's time and
//! bytes after the updates among them, in the JSON and as the table's columns), a second run
//! reuses the cached databases, a bad `--sizes` value is refused with a clear message, and a size the
//! disk has no room for is skipped, saying why.

use std::path::Path;
use std::process::Output;

use serde_json::Value;

mod common;

use common::{json, onesync, results, said};

/// `bench scale --sizes SIZES --updates N --dir DIR` with `extra`.
fn scale(sizes: &str, updates: u64, dir: &Path, extra: &[&str]) -> Output {
    let updates = updates.to_string();
    let mut args = vec![
        "bench",
        "scale",
        "--sizes",
        sizes,
        "--updates",
        &updates,
        "--dir",
        dir.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    onesync(&args)
}

fn f(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("{key} in {v}"))
}

#[test]
fn both_modes_answer_with_positive_figures_and_a_second_run_reuses_the_databases() {
    let dir = tempfile::tempdir().unwrap();
    let out = scale("20M", 200, dir.path(), &["--json", "-"]);
    let rows = results(&out);
    let modes: Vec<&str> = rows.iter().map(|r| r["mode"].as_str().unwrap()).collect();
    assert_eq!(modes, ["wal", "onesync"], "{}", said(&out));
    for r in &rows {
        assert_eq!(r["size"], "20M", "{r}");
        assert_eq!(r["size_bytes"], 20 << 20, "{r}");
        assert_eq!(r["rows"], 20 * 1024, "{r}");
        assert_eq!(r["updates"], 200, "{r}");
        assert!(f(r, "file_bytes") >= (20 << 20) as f64, "{r}");
        for key in [
            "open_ms",
            "updates_per_s",
            "ratio",
            "inserts_per_s",
            "inserts_ratio",
            "peak_rss_mib",
            "bytes_per_update_commit",
            "reopen_after_kill_ms",
            "checkpoint_ms",
            "checkpoint_kib",
        ] {
            assert!(f(r, key) > 0.0, "{key} in {r}");
        }
        // An update rewrites a 1000-byte row: a page of 4 KiB at least, whichever the mode.
        assert!(f(r, "bytes_per_update_commit") >= 4096.0, "{r}");
    }
    assert_eq!(f(&rows[0], "ratio"), 1.0);
    assert!(rows[0]["checkpoints"].is_null(), "{}", rows[0]);
    assert!(f(&rows[1], "checkpoints") >= 0.0, "{}", rows[1]);
    // The store's forced checkpoint covers exactly the update commits since the fresh open.
    assert!(rows[0]["checkpoint_commits"].is_null(), "{}", rows[0]);
    assert_eq!(f(&rows[1], "checkpoint_commits"), 200.0, "{}", rows[1]);
    assert_eq!(f(&rows[0], "checkpoint_count"), 1.0, "{}", rows[0]);
    assert!(f(&rows[1], "checkpoint_count") >= 1.0, "{}", rows[1]);
    // wal copies back at least the pages the updates changed since its last checkpoint.
    assert!(f(&rows[0], "checkpoint_kib") >= 4.0, "{}", rows[0]);
    assert_eq!(json(&out)["skipped"], serde_json::json!([]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("building"), "{stderr}");
    assert!(!stderr.contains("reusing"), "{stderr}");

    // The table, and the cached databases reused; the stamped results written.
    let results = tempfile::tempdir().unwrap();
    let results_dir = results.path().to_str().unwrap();
    let out = scale("20M", 50, dir.path(), &["--results", results_dir]);
    assert!(out.status.success(), "{}", said(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let written: Vec<String> = std::fs::read_dir(results.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let md_name = written
        .iter()
        .find(|n| n.starts_with("scale-") && n.ends_with(".md"));
    let md = std::fs::read_to_string(results.path().join(md_name.expect("no scale-DATE.md"))).unwrap();
    for word in [
        "- command: `",
        "bench scale",
        "--results",
        "- commit: `",
        "- machine: ",
        "20480 rows",
    ] {
        assert!(md.contains(word), "{word}: {md}");
    }
    let json_name = md_name.unwrap().replace(".md", ".json");
    let stamped: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(results.path().join(json_name)).unwrap()).unwrap();
    assert!(stamped["stamp"]["commit"].is_string(), "{stamped}");
    assert_eq!(stamped["results"].as_array().map(Vec::len), Some(2), "{stamped}");
    for word in [
        "bench scale",
        "updates/s",
        "wal",
        "onesync",
        "20480 rows",
        "onesync_checkpoint",
    ] {
        assert!(stdout.contains(word), "{word}: {stdout}");
    }
    // The checkpoint's columns, with a number in each row.
    let lines: Vec<&str> = stdout.lines().collect();
    let header = lines.iter().position(|l| l.contains("checkpoints")).unwrap();
    let heads: Vec<&str> = lines[header].split_whitespace().collect();
    assert_eq!(
        heads.iter().filter(|&&h| h == "checkpoint").count(),
        2,
        "{stdout}"
    );
    let units: Vec<&str> = lines[header + 1].split_whitespace().collect();
    assert!(units.windows(2).any(|w| w == ["ms", "KiB"]), "{stdout}");
    let row = |mode: &str| -> Vec<String> {
        lines
            .iter()
            .map(|l| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
            .find(|w| w.len() == 12 && w[0] == "20M" && w[1] == mode)
            .unwrap_or_else(|| panic!("no 20M {mode} row of 12 columns: {stdout}"))
    };
    // onesync's checkpoint: a time and its bytes (two header copies at least); wal's
    // checkpoints run inside its commits, so it shows none.
    let store = row("onesync");
    assert!(store[9].parse::<f64>().unwrap() > 0.0, "{stdout}");
    assert!(store[10].parse::<f64>().unwrap() >= 2.0, "{stdout}");
    assert_eq!(row("wal")[9..11], ["-", "-"], "{stdout}");
    assert!(!stdout.contains("the forced checkpoint covered"), "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches("reusing").count(), 2, "{stderr}");
    assert!(!stderr.contains("building"), "{stderr}");
}

#[test]
fn a_bad_size_is_refused_saying_what_a_size_is() {
    let dir = tempfile::tempdir().unwrap();
    for bad in ["12X", "1.5G", "0M", "100M,G"] {
        let out = scale(bad, 10, dir.path(), &[]);
        assert!(!out.status.success(), "{bad}: {}", said(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("is not a size") || stderr.contains("must be from 1M to 1024G"),
            "{bad}: {stderr}"
        );
    }
    let out = scale("12X", 10, dir.path(), &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("\"12X\" is not a size") && stderr.contains("M (MiB) or G (GiB)"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "nothing built");
}

#[test]
fn a_size_without_room_is_skipped_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    // More than any test machine's disk holds: nothing is built.
    let out = scale("1024G", 10, dir.path(), &["--json", "-"]);
    assert!(
        !out.status.success(),
        "nothing measured is a failure: {}",
        said(&out)
    );
    let report = json(&out);
    assert_eq!(report["results"], serde_json::json!([]));
    assert_eq!(report["skipped"][0]["size"], "1024G", "{report}");
    let reason = report["skipped"][0]["reason"].as_str().unwrap();
    assert!(reason.contains("free"), "{reason}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("skipping 1024G"), "{stderr}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "nothing built");
}
