//! The top-level README's "Use it from your language" section stays tested: each of its
//! code blocks is a copy of a block that a package test runs (in the binding READMEs), but
//! for the stock `sqlite3` CLI block, which this test runs in the workspace.

mod common;

use common::{code_blocks, have, run_sh_block, workspace};

/// The READMEs whose blocks the package tests run as written.
const TESTED_READMES: &[&str] = &[
    "bindings/python/README.md",
    "bindings/node/README.md",
    "bindings/go/README.md",
    "crates/onesync/README.md",
];

/// What marks the block this test runs itself.
const CLI_BLOCK_MARK: &str = "-cmd '.load target/release/libonesync'";

fn section(readme: &str) -> &str {
    let start = readme
        .find("## Use it from your language\n")
        .expect("README.md has a \"Use it from your language\" section");
    let rest = &readme[start + 3..];
    let end = rest.find("\n## ").map_or(rest.len(), |i| i + 1);
    &rest[..end]
}

fn read(path: &str) -> String {
    std::fs::read_to_string(workspace().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn every_snippet_is_a_copy_of_a_tested_block() {
    let readme = read("README.md");
    let blocks = code_blocks(section(&readme));
    let tested: Vec<(String, String)> = TESTED_READMES
        .iter()
        .flat_map(|path| code_blocks(&read(path)))
        .collect();
    let mut languages = Vec::new();
    for (lang, code) in &blocks {
        languages.push(lang.as_str());
        if code.contains(CLI_BLOCK_MARK) {
            continue;
        }
        assert!(
            tested.iter().any(|(l, c)| l == lang && c == code),
            "this README.md block is not a copy of one the package tests run \
             (in {TESTED_READMES:?}):\n```{lang}\n{code}```"
        );
    }
    for lang in ["python", "js", "go", "rust", "sh"] {
        assert!(languages.contains(&lang), "no {lang} snippet: {languages:?}");
    }
}

#[test]
fn the_cli_snippet_runs() {
    let readme = read("README.md");
    let (_, code) = code_blocks(section(&readme))
        .into_iter()
        .find(|(_, code)| code.contains(CLI_BLOCK_MARK))
        .expect("the section has the sqlite3 CLI block");
    // Its store goes to a directory of this test's, not /tmp.
    let dir = tempfile::tempdir().unwrap();
    assert!(code.contains("/tmp/"), "{code}");
    let code = code.replace("/tmp/", &format!("{}/", dir.path().display()));
    run_sh_block(&code, &workspace(), None, &[]);
    if have("sqlite3", &["--version"]) {
        let store = std::fs::read(dir.path().join("notes.onesync")).unwrap_or_default();
        assert!(
            store.starts_with(b"onesync store\0"),
            "the block did not make a store"
        );
    }
}
