//! Nothing in what users install obeys a test hook. The store's sabotage (`ONESYNC_SABOTAGE`),
//! its write log (`ONESYNC_IO_LOG`) and the names of the defects they put back exist only in
//! builds with the feature `test-hooks` (the lab's `onesync-lab-hooked`), which no crate of
//! the workspace enables in its dependencies. So the workspace build's `libonesync.so`,
//! `libonesync.a` and `onesync`, and every file of the wheel, the npm package and the Go
//! module, hold none of those names; and the stock `sqlite3` CLI loading `libonesync.so`
//! makes as many flushes with `ONESYNC_SABOTAGE=skipped-flush` set as without it.
//!
//! This runs inside `cargo test --workspace --release`, after its test builds: the packages'
//! build (`cargo build --release --workspace --lib --bin onesync`) is then what the
//! artifacts are, and finding no hook in them shows that no dev-dependency unified the
//! feature into the product either.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{have, run};

/// The store's defects that a sabotage puts back, as `ONESYNC_SABOTAGE` names them.
const SABOTAGES: &[&str] = &[
    "checkpoint-publication",
    "skipped-flush",
    "lazy-growth",
    "growth-flush-failure-ignored",
    "no-read-validation",
    "catch-up-by-locker",
    "unvalidated-snapshot",
    "flush-coverage-read-late",
    "cached-pages-unnoted",
    "catch-up-trusts-unwritten",
    "announced-flush-trusted",
    "patch-ranges-by-offset",
    "kept-operations-unapplied",
    "run-blocks-freed-early",
    "run-blocks-unflushed",
    "fence-ignored",
    "relocated-pointer-missed",
    "stalled-retry-unflushed",
    "moved-pages-unflushed",
    "store-journal-in-memory",
    "multi-file-commit-deferred",
    // onesync-replica's (`ONESYNC_REPLICA_SABOTAGE`).
    "replication-lease-ignored",
    "position-saved-ahead",
    "ships-undurable",
    "sync-acks-early",
];

/// Every name a test hook would leave in a build: the variables, each sabotage's name as
/// the variable spells it and as the type does (`SkippedFlush`: its `Debug`), the type's own
/// name (generic code over it names it in the debug information) and the write log's.
fn hook_names() -> Vec<String> {
    let mut names: Vec<String> = [
        "ONESYNC_SABOTAGE",
        "ONESYNC_REPLICA_SABOTAGE",
        "ONESYNC_IO_LOG",
        "Sabotage",
        "IoLog",
    ]
    .map(String::from)
    .to_vec();
    for kebab in SABOTAGES {
        names.push(kebab.to_string());
        let camel: String = kebab
            .split('-')
            .map(|w| w[..1].to_uppercase() + &w[1..])
            .collect();
        names.push(camel);
    }
    names
}

/// The hook names `bytes` holds.
fn hooks_in(bytes: &[u8], names: &[String]) -> Vec<String> {
    names
        .iter()
        .filter(|n| bytes.windows(n.len()).any(|w| w == n.as_bytes()))
        .cloned()
        .collect()
}

/// The workspace's release build directory, where the packages take their files from.
fn release_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_onesync-package"))
        .parent()
        .and_then(Path::parent)
        .expect("the target directory")
        .join("release")
}

/// Builds package `kind` (which builds the workspace's release artifacts first) into a fresh
/// directory; returns its path.
fn build_package(kind: &str) -> PathBuf {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("no-test-hooks")
        .join(kind);
    let _ = std::fs::remove_dir_all(&out);
    let stdout = run(Command::new(env!("CARGO_BIN_EXE_onesync-package"))
        .args([kind, "--out"])
        .arg(&out));
    let line = stdout.lines().next().expect("onesync-package printed no package");
    PathBuf::from(line.split('\t').next().unwrap())
}

/// Every file of a directory tree, as (path, bytes).
fn files_under(dir: &Path, found: &mut Vec<(String, Vec<u8>)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files_under(&path, found);
        } else {
            found.push((path.display().to_string(), std::fs::read(&path).unwrap()));
        }
    }
}

/// The files the packages ship, unpacked: the wheel's (a zip), the npm package's (a gzipped
/// tar) and the Go module's (a directory).
fn packaged_files() -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    let wheel = build_package("python");
    let mut zip = zip::ZipArchive::new(std::fs::File::open(&wheel).unwrap()).unwrap();
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i).unwrap();
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes).unwrap();
        let name = format!("{}:{}", wheel.display(), entry.name().unwrap());
        files.push((name, bytes));
    }
    let npm = build_package("node");
    let gz = flate2::read::GzDecoder::new(std::fs::File::open(&npm).unwrap());
    let mut tar = tar::Archive::new(gz);
    for entry in tar.entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = format!("{}:{}", npm.display(), entry.path().unwrap().display());
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes).unwrap();
        files.push((name, bytes));
    }
    files_under(&build_package("go"), &mut files);
    files
}

#[test]
fn no_shipped_artifact_holds_a_test_hook() {
    let names = hook_names();
    // The scan can fail: the lab's hooked build holds the names (when it is there: CI builds
    // it before the tests), and so does any buffer that has one.
    let hooked = release_dir().join("onesync-lab-hooked");
    match std::fs::read(&hooked) {
        Ok(bytes) => {
            let found = hooks_in(&bytes, &names);
            for name in [
                "ONESYNC_SABOTAGE",
                "ONESYNC_REPLICA_SABOTAGE",
                "ONESYNC_IO_LOG",
                "skipped-flush",
                "SkippedFlush",
            ] {
                assert!(
                    found.iter().any(|f| f == name),
                    "{name} not found in {}",
                    hooked.display()
                );
            }
        }
        Err(_) => println!("note: no {} to check the scan against", hooked.display()),
    }
    assert_eq!(
        hooks_in(b"x ONESYNC_SABOTAGE=lazy-growth", &names),
        ["ONESYNC_SABOTAGE", "lazy-growth"]
    );

    let mut files = packaged_files();
    // After the packages' builds, the workspace's artifacts are theirs.
    for name in ["libonesync.so", "libonesync.a", "onesync"] {
        let path = release_dir().join(name);
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        files.push((path.display().to_string(), bytes));
    }
    let with_hooks: Vec<String> = files
        .iter()
        .filter_map(|(name, bytes)| {
            let found = hooks_in(bytes, &names);
            (!found.is_empty()).then(|| format!("{name}: {}", found.join(", ")))
        })
        .collect();
    assert!(
        with_hooks.is_empty(),
        "shipped files hold test hooks:\n{}",
        with_hooks.join("\n")
    );
    println!("{} shipped files, no test hook in any", files.len());
}

/// Flush calls (fdatasync, fsync) of the stock `sqlite3` CLI loading `libonesync.so` and
/// committing a table and three rows to a new store, with `envs` set.
fn cli_flushes(lib: &Path, envs: &[(&str, &str)]) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.onesync");
    let trace = dir.path().join("strace.out");
    let status = Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=fdatasync,fsync", "-o"])
        .arg(&trace)
        .args(["sqlite3", ":memory:", "-cmd"])
        .arg(format!(".load {}", lib.with_extension("").display()))
        .arg("-cmd")
        .arg(format!(".open 'file:{}?vfs=onesync'", db.display()))
        .arg("CREATE TABLE t(x); INSERT INTO t VALUES (1); INSERT INTO t VALUES (2); INSERT INTO t VALUES (3);")
        .envs(envs.iter().copied())
        .status()
        .unwrap();
    assert!(status.success(), "sqlite3 under strace failed ({envs:?})");
    let text = std::fs::read_to_string(&trace).unwrap();
    // An interrupted call is one line `fdatasync(3 <unfinished ...>` and one `<... resumed>`.
    text.lines()
        .filter(|l| l.contains("fdatasync(") || l.contains("fsync("))
        .count()
}

#[test]
fn onesync_sabotage_changes_nothing_the_cli_flushes() {
    if !have("sqlite3", &["--version"]) {
        println!("SKIPPED: no sqlite3 CLI (apt-get install sqlite3)");
        return;
    }
    if !have("strace", &["-f", "-qq", "-o", "/dev/null", "true"]) {
        println!("SKIPPED: strace is missing or cannot trace here (apt-get install strace)");
        return;
    }
    // The packages' build of the workspace's artifacts (a no-op after the workspace build).
    run(Command::new(env!("CARGO"))
        .args(["build", "--release", "--workspace", "--lib", "--bin", "onesync"])
        .current_dir(common::workspace()));
    let lib = release_dir().join("libonesync.so");
    let plain = cli_flushes(&lib, &[]);
    assert!(plain > 0, "no flush traced: the count cannot tell");
    // The defects that change flushes (the scan above finds none of the names at all).
    for sabotage in ["skipped-flush", "lazy-growth", "flush-coverage-read-late"] {
        let set = cli_flushes(&lib, &[("ONESYNC_SABOTAGE", sabotage)]);
        assert_eq!(
            set, plain,
            "ONESYNC_SABOTAGE={sabotage} changed the CLI's flushes"
        );
    }
    println!("{plain} flushes with and without ONESYNC_SABOTAGE");
}
