//! `onesync-lab report --baseline` and `--write-baseline`, run tiny: the table's shape, the
//! baseline file's, the stamped check file, and the verdicts against a doctored baseline.

mod common;

use common::onesync;
use serde_json::Value;

/// Two rounds are the fewest with an interval; three keep it narrow enough that the
/// doctored medians below lie far outside it.
const TINY: &[&str] = &[
    "--rounds",
    "3",
    "--txns",
    "50",
    "--recovery-records",
    "50",
    "--recovery-pages",
    "256",
];

const FIGURES: [&str; 6] = [
    "insert FULL onesync/wal",
    "insert NORMAL onesync-normal/wal-normal",
    "p99.9 latency NORMAL onesync-normal/wal-normal",
    "dbbench 4 threads NORMAL onesync-normal/wal-normal",
    "store-bench single/raw fdatasync",
    "store-bench recovery ms",
];

fn run(extra: &[&str]) -> (i32, String, String) {
    let mut args = vec!["report"];
    args.extend_from_slice(extra);
    args.extend_from_slice(TINY);
    let output = onesync(&args);
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The line of the figure called `name`.
fn line<'a>(stdout: &'a str, name: &str) -> &'a str {
    stdout
        .lines()
        .find(|l| l.starts_with(name))
        .unwrap_or_else(|| panic!("no line for {name}:\n{stdout}"))
}

#[test]
fn a_written_baseline_and_a_doctored_one_give_each_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("baseline.json");
    let results = dir.path().join("results");
    let (code, stdout, stderr) = run(&[
        "--write-baseline",
        file.to_str().unwrap(),
        "--results",
        results.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stderr.contains("round 3 of 3"), "progress on stderr:\n{stderr}");
    assert!(stdout.starts_with("figure"), "{stdout}");
    for name in FIGURES {
        let l = line(&stdout, name);
        assert!(l.contains("no baseline"), "{l}");
        assert!(l.contains("target met") || l.contains("target missed"), "{l}");
    }
    // The stamped check file beside the results, like the headline's.
    let checks: Vec<_> = std::fs::read_dir(&results)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(checks.len(), 1, "{checks:?}");
    let check_name = checks[0].to_string_lossy().into_owned();
    assert!(
        check_name.starts_with("baseline-check-") && check_name.ends_with(".md"),
        "{check_name}"
    );
    let md = std::fs::read_to_string(results.join(&check_name)).unwrap();
    for field in ["- command: `", "- commit: `", "- date: ", "- machine: "] {
        assert!(md.contains(field), "{field} in {md}");
    }

    // The baseline: stamped, every figure with a median, an interval and its rounds.
    let mut baseline: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert!(baseline.pointer("/stamp/commit").is_some(), "{baseline}");
    let figures = baseline["figures"].as_array_mut().unwrap();
    assert_eq!(figures.len(), FIGURES.len());
    // Each figure's median put absurdly far off, to its good side (the run is then worse) or
    // its bad side (better): insert FULL, p99.9 and single/raw worse; the others better.
    for figure in figures.iter_mut() {
        assert!(figure["interval"]["low"].as_f64().is_some(), "{figure}");
        assert_eq!(figure["rounds"].as_array().unwrap().len(), 3);
        let key = figure["key"].as_str().unwrap().to_owned();
        let higher_is_better = figure["better"] == "higher";
        let make_worse = ["insert_full", "p999_normal", "store_single_vs_raw"].contains(&key.as_str());
        figure["median"] = if make_worse == higher_is_better {
            1e12
        } else {
            1e-12
        }
        .into();
    }
    std::fs::write(&file, serde_json::to_string(&baseline).unwrap()).unwrap();

    let (code, stdout, stderr) = run(&["--baseline", file.to_str().unwrap(), "--fail-on-worse"]);
    assert_eq!(
        code, 1,
        "a worse figure with --fail-on-worse exits 1:\n{stdout}\n{stderr}"
    );
    for (name, expected) in FIGURES
        .iter()
        .zip(["worse", "better", "worse", "better", "worse", "better"])
    {
        let verdict = line(&stdout, name).rsplit("  ").next().unwrap();
        assert!(
            verdict.starts_with(&format!("{expected},")),
            "{name}: {verdict}\n{stdout}"
        );
    }

    // Without --fail-on-worse the check reports and exits 0.
    let (code, _, stderr) = run(&["--baseline", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn a_file_that_is_no_baseline_fails_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("x.json");
    std::fs::write(&file, "{}").unwrap();
    let (code, _, stderr) = run(&["--baseline", file.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(stderr.contains("is no baseline file"), "{stderr}");
    assert!(!stderr.contains("round 1"), "failed before running: {stderr}");
}
