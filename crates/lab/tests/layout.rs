//! The workspace's layout rules, checked on its sources (issue 15's "done when"):
//! - inside every crate, the top-level modules import each other without cycles;
//! - `unsafe` appears only in `crates/vfs/src/sys/` (the one SQLite FFI boundary);
//! - no source file is over 1,000 lines unless it is listed below with its one job.
//!
//! Run `cargo test -p onesync-lab --test layout -- --nocapture` to print each crate's module
//! graph.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Files allowed past 1,000 lines because they do one job (e.g. one test suite of one subject),
/// with that job. None today.
const LONG_SINGLE_JOB_FILES: &[(&str, &str)] = &[];

const MAX_LINES: usize = 1_000;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn crates() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = fs::read_dir(workspace().join("crates"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("Cargo.toml").exists())
        .collect();
    out.sort();
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Source text without `//` comments (doc comments name modules without importing them).
fn code_of(path: &Path) -> String {
    fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| match line.find("//") {
            Some(at) if !line[..at].contains('"') => &line[..at],
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The top-level names a file reaches through `crate::` (`crate::a::b`, `crate::{a, b::c}`).
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let preceded_by_ident = rest[..at]
            .chars()
            .last()
            .is_some_and(|c| c.is_alphanumeric() || c == '_');
        rest = &rest[at + "crate::".len()..];
        if preceded_by_ident {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut item_start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && depth == 0 && (c.is_alphanumeric() || c == '_') => {
                        names.insert(ident_at(&group[i..]).to_string());
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            names.insert(ident_at(rest).to_string());
        }
    }
    names
}

/// The crate's top-level modules and, for each, the other top-level modules it imports.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let module_of = |file: &Path| -> Option<String> {
        let rel = file.strip_prefix(src).unwrap();
        let first = rel.components().next()?.as_os_str().to_str()?.to_string();
        let name = first.strip_suffix(".rs").unwrap_or(&first).to_string();
        (name != "lib" && name != "main").then_some(name)
    };
    let modules: BTreeSet<String> = files.iter().filter_map(|f| module_of(f)).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> =
        modules.iter().map(|m| (m.clone(), BTreeSet::new())).collect();
    for file in &files {
        let Some(from) = module_of(file) else { continue };
        for to in crate_paths(&code_of(file)) {
            if to != from && modules.contains(&to) {
                graph.get_mut(&from).unwrap().insert(to);
            }
        }
    }
    graph
}

/// A cycle in the graph, as the modules along it, if there is one.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in &graph[node] {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

#[test]
fn the_cycle_finder_finds_a_cycle_and_reads_grouped_imports() {
    let code = "use crate::{alpha::X, beta, gamma::{self, Y}};\nlet z = crate::delta::f(); my_crate::eps;";
    let found: Vec<String> = crate_paths(code).into_iter().collect();
    assert_eq!(found, ["alpha", "beta", "delta", "gamma"]);
    let mut graph = BTreeMap::new();
    graph.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    graph.insert("b".to_string(), BTreeSet::from(["c".to_string()]));
    graph.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(find_cycle(&graph).unwrap(), ["a", "b", "c", "a"]);
    graph.get_mut("c").unwrap().clear();
    assert_eq!(find_cycle(&graph), None);
}

#[test]
fn no_crate_has_an_import_cycle_between_its_modules() {
    let mut cycles = Vec::new();
    for krate in crates() {
        let graph = module_graph(&krate.join("src"));
        println!("{}:", krate.file_name().unwrap().to_string_lossy());
        for (module, imports) in &graph {
            println!(
                "  {module} -> {}",
                imports.iter().cloned().collect::<Vec<_>>().join(", ")
            );
        }
        if let Some(cycle) = find_cycle(&graph) {
            cycles.push(format!("{}: {}", krate.display(), cycle.join(" -> ")));
        }
    }
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn unsafe_code_lives_only_in_the_vfs_sys_module() {
    let root = workspace();
    let sys = root.join("crates/vfs/src/sys");
    let mut offenders = Vec::new();
    for krate in crates() {
        let mut files = Vec::new();
        rust_files(&krate.join("src"), &mut files);
        for file in files.iter().filter(|f| !f.starts_with(&sys)) {
            for (n, line) in code_of(file).lines().enumerate() {
                let allowed = line.contains("unsafe_code"); // the forbid/deny/allow attributes
                if line.contains("unsafe") && !allowed {
                    offenders.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "unsafe outside crates/vfs/src/sys/:\n{}",
        offenders.join("\n")
    );
}

#[test]
fn no_source_file_is_over_a_thousand_lines_unless_it_does_one_job() {
    let root = workspace();
    let mut long = Vec::new();
    for krate in crates() {
        let mut files = Vec::new();
        for dir in ["src", "tests", "benches", "examples"] {
            rust_files(&krate.join(dir), &mut files);
        }
        for file in files {
            let lines = fs::read_to_string(&file).unwrap().lines().count();
            let rel = file.strip_prefix(&root).unwrap().to_string_lossy().into_owned();
            if lines > MAX_LINES && !LONG_SINGLE_JOB_FILES.iter().any(|(path, _)| *path == rel) {
                long.push(format!("{rel}: {lines} lines"));
            }
        }
    }
    assert!(
        long.is_empty(),
        "files over {MAX_LINES} lines:\n{}",
        long.join("\n")
    );
}
