//! The README's results table is generated, not written by hand: what lies between its
//! `<!-- results:begin -->` and `<!-- results:end -->` markers must be exactly what
//! `onesync-lab report --print-readme-table` renders from the newest file in docs/results
//! (the renderer `report --update-readme README.md` writes with). Also: `report --results`
//! writes the three stamped files, and the newest file is chosen by its stamp, not its name.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

mod common;

use common::said;

const BEGIN: &str = "<!-- results:begin -->";
const END: &str = "<!-- results:end -->";

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The lab binary run in `dir` (links in the rendered block are relative to it).
fn lab_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_onesync-lab"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the lab binary runs")
}

/// What lies between the markers of `text`, after the begin marker's line.
fn block(text: &str) -> Option<&str> {
    let after_begin = text.find(BEGIN)? + BEGIN.len();
    let end = after_begin + text[after_begin..].find(END)?;
    text[after_begin..end].strip_prefix('\n')
}

fn stdout(output: &Output) -> String {
    assert!(output.status.success(), "failed: {}", said(output));
    String::from_utf8(output.stdout.clone()).expect("UTF-8 output")
}

#[test]
fn the_readme_table_is_what_the_newest_results_file_renders_to() {
    let root = workspace_root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let in_readme = block(&readme).expect("README.md has the results markers, begin before end");
    let rendered = stdout(&lab_in(&root, &["report", "--print-readme-table"]));
    assert!(
        in_readme == rendered,
        "README.md's results table differs from what the newest file in docs/results renders \
         to: run `onesync-lab report --update-readme README.md` (or fix the results file).\n\
         --- README.md:\n{in_readme}\n--- rendered:\n{rendered}"
    );
}

/// A temporary checkout-like directory: README.md with a stale block and docs/results
/// holding a copy of the newest committed headline results file (under `name`).
fn scratch(name: &str) -> (tempfile::TempDir, Value) {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("docs/results");
    std::fs::create_dir_all(&results).unwrap();
    let committed = std::fs::read_dir(workspace_root().join("docs/results"))
        .expect("docs/results")
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("headline-") && n.ends_with(".json"))
        })
        .max()
        .expect("a committed headline results JSON");
    let json: Value = serde_json::from_str(&std::fs::read_to_string(committed).unwrap()).unwrap();
    std::fs::write(results.join(name), json.to_string()).unwrap();
    std::fs::write(
        dir.path().join("README.md"),
        format!("# T\n\n## Results\n{BEGIN}\n| stale |\n{END}\n\n## After\n"),
    )
    .unwrap();
    (dir, json)
}

#[test]
fn update_readme_rewrites_only_the_block_and_takes_the_newest_stamp() {
    let (dir, json) = scratch("headline-2000-01-01.json");
    // A file whose name sorts last but whose stamp is older must not be the one rendered.
    let mut older = json.clone();
    older["stamp"]["utc"] = Value::from("1999-12-31T23:59:59Z");
    older["headline"]["results"][0]["tps"] = Value::from(123_456_789.0);
    std::fs::write(
        dir.path().join("docs/results/headline-2099-12-31.json"),
        older.to_string(),
    )
    .unwrap();

    stdout(&lab_in(dir.path(), &["report", "--update-readme", "README.md"]));
    let readme = std::fs::read_to_string(dir.path().join("README.md")).unwrap();
    assert!(
        readme.starts_with(&format!("# T\n\n## Results\n{BEGIN}\n")),
        "{readme}"
    );
    assert!(readme.ends_with(&format!("{END}\n\n## After\n")), "{readme}");
    let written = block(&readme).unwrap();
    assert!(
        !written.contains("stale") && !written.contains("123456789"),
        "{written}"
    );
    assert!(
        written.contains("docs/results/headline-2000-01-01.md"),
        "{written}"
    );
    let commit = json["stamp"]["commit"].as_str().unwrap();
    assert!(written.contains(&commit[..12]), "{written}");
    assert_eq!(
        written,
        stdout(&lab_in(dir.path(), &["report", "--print-readme-table"]))
    );
    // A second run finds nothing to change.
    assert!(stdout(&lab_in(dir.path(), &["report", "--update-readme", "README.md"])).contains("up to date"));
}

#[test]
fn a_readme_without_markers_is_an_error_that_says_so() {
    let (dir, _) = scratch("headline-2000-01-01.json");
    std::fs::write(dir.path().join("README.md"), "# no markers\n").unwrap();
    let out = lab_in(dir.path(), &["report", "--update-readme", "README.md"]);
    assert!(!out.status.success());
    assert!(said(&out).contains(BEGIN), "{}", said(&out));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("README.md")).unwrap(),
        "# no markers\n"
    );
}

#[test]
fn report_results_writes_three_stamped_files() {
    let dir = tempfile::tempdir().unwrap();
    let out = lab_in(
        dir.path(),
        &["report", "--results", "out", "--rounds", "2", "--txns", "20"],
    );
    stdout(&out);
    let names: Vec<String> = std::fs::read_dir(dir.path().join("out"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let json_name = names.iter().find(|n| n.ends_with(".json")).expect("a JSON file");
    let stem = json_name.trim_end_matches(".json");
    assert!(
        stem.starts_with("headline-") && stem.len() == "headline-YYYY-MM-DD".len(),
        "{names:?}"
    );
    for ext in ["md", "svg"] {
        assert!(names.contains(&format!("{stem}.{ext}")), "{names:?}");
    }
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("out").join(json_name)).unwrap())
            .unwrap();
    let stamp = &json["stamp"];
    assert!(stamp["command"]
        .as_str()
        .unwrap()
        .ends_with("report --results out --rounds 2 --txns 20"));
    assert!(
        stamp["utc"]
            .as_str()
            .unwrap()
            .starts_with(&stem["headline-".len()..]),
        "{stamp}"
    );
    for key in ["cpu", "kernel", "filesystem", "sqlite"] {
        assert!(!stamp["machine"][key].as_str().unwrap().is_empty(), "{stamp}");
    }
    assert!(stamp["machine"]["cores"].as_u64().unwrap() >= 1);
    let modes: Vec<&str> = json["headline"]["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["mode"].as_str().unwrap())
        .collect();
    assert_eq!(
        modes,
        ["delete", "wal", "onesync", "wal-normal", "onesync-normal"]
    );
    for r in json["headline"]["results"].as_array().unwrap() {
        assert_eq!(r["rounds_tps"].as_array().unwrap().len(), 2, "{r}");
        assert!(r["tps_interval"].is_object(), "{r}");
    }
    let md = std::fs::read_to_string(dir.path().join("out").join(format!("{stem}.md"))).unwrap();
    for needle in [stamp["commit"].as_str().unwrap(), "| onesync-normal |", "p99.9"] {
        assert!(md.contains(needle), "{needle} in {md}");
    }
    let svg = std::fs::read_to_string(dir.path().join("out").join(format!("{stem}.svg"))).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("onesync"), "{svg}");
}
