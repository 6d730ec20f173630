//! Shared by the tests that build a package and install it the way a user would.
#![allow(dead_code)] // each test binary uses its own part of this module

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap()
        .to_path_buf()
}

/// Builds the package `kind` once per test binary with `onesync-package KIND --out DIR`
/// (into cargo's scratch directory for tests) and returns its path.
pub fn package(kind: &'static str) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("packages").join(kind);
            let _ = std::fs::remove_dir_all(&out);
            let stdout = run(Command::new(env!("CARGO_BIN_EXE_onesync-package"))
                .args([kind, "--out"])
                .arg(&out));
            // One line per package: PATH<TAB>SIZE.
            let line = stdout.lines().next().expect("onesync-package printed no package");
            let path = PathBuf::from(line.split('\t').next().unwrap());
            assert!(path.is_file(), "{} was not written", path.display());
            println!("built {line}");
            path
        })
        .clone()
}

/// Whether `program args` runs and succeeds.
pub fn have(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `cmd`, panicking with its output unless it succeeds; returns its stdout.
pub fn run(cmd: &mut Command) -> String {
    let out = output(cmd);
    assert!(out.status.success(), "{cmd:?} failed: {}", describe(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `cmd` to completion, its output captured.
pub fn output(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"))
}

/// Exit status, stdout and stderr, for a failure message.
pub fn describe(out: &Output) -> String {
    format!(
        "{}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The fenced code blocks of a README, as (language, code), in order.
pub fn code_blocks(readme: &str) -> Vec<(String, String)> {
    let mut blocks = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in readme.lines() {
        match (line.strip_prefix("```"), current.take()) {
            (Some(lang), None) => current = Some((lang.trim().to_owned(), String::new())),
            (Some(_), Some(block)) => blocks.push(block),
            (None, Some((lang, mut code))) => {
                code.push_str(line);
                code.push('\n');
                current = Some((lang, code));
            }
            (None, None) => {}
        }
    }
    assert!(current.is_none(), "a README code block is not closed");
    blocks
}

/// Runs a README's `sh` block with bash (stopping at the first failing command) in `dir`,
/// `path_first` (a venv's bin) first on PATH; `sqlite3` CLI blocks are skipped, saying so,
/// without it.
pub fn run_sh_block(code: &str, dir: &Path, path_first: Option<&Path>, envs: &[(&str, &str)]) {
    if code.contains("sqlite3 ") && !have("sqlite3", &["--version"]) {
        println!("SKIP (this README block): no sqlite3 CLI (apt-get install sqlite3)\n{code}");
        return;
    }
    let mut bash = Command::new("bash");
    bash.args(["-euo", "pipefail", "-c", code])
        .current_dir(dir)
        .envs(envs.iter().copied());
    if let Some(first) = path_first {
        let path = format!(
            "{}:{}",
            first.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        bash.env("PATH", path);
    }
    let out = run(&mut bash);
    println!("README block ok:\n{code}{out}");
}

/// Makes the plain SQLite database `path` with table `t` of `rows` rows, through the
/// `sqlite3` module of `python`.
pub fn make_plain_db(python: &Path, path: &Path, rows: usize) {
    let script = "import sqlite3, sys\n\
        c = sqlite3.connect(sys.argv[1])\n\
        c.execute('CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT)')\n\
        c.executemany('INSERT INTO t(v) VALUES (?)', [(f'row {i}',) for i in range(int(sys.argv[2]))])\n\
        c.commit()\n";
    run(Command::new(python)
        .args(["-c", script])
        .arg(path)
        .arg(rows.to_string()));
}

/// The first 16 bytes of `path`.
pub fn magic(path: &Path) -> Vec<u8> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    bytes[..16.min(bytes.len())].to_vec()
}

pub const STORE_MAGIC: &[u8] = b"onesync store\0\r\n";
pub const SQLITE_MAGIC: &[u8] = b"SQLite format 3\0";

/// `name` on PATH, or at one of `also`.
pub fn find_program(name: &str, also: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .chain(also.iter().map(PathBuf::from))
        .find(|p| p.is_file())
}

/// The first fenced block of `lang` after the line that says the test runs it.
pub fn readme_block(readme: &Path, lang: &str) -> String {
    let text = std::fs::read_to_string(readme).unwrap();
    let after = text
        .split_once("runs this block")
        .expect("the README marks its tested block")
        .1;
    let start = after.find(&format!("```{lang}\n")).expect("a fenced block") + lang.len() + 4;
    let len = after[start..].find("```").expect("the block's end");
    after[start..start + len].to_owned()
}

/// A command's status and stderr (and its stdout if it failed).
pub fn show(what: &str, out: &Output) {
    let stdout = if out.status.success() {
        Default::default()
    } else {
        String::from_utf8_lossy(&out.stdout)
    };
    eprintln!(
        "--- {what}: {}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The lines a consumer program (the `go run` or `cargo run` of a package test) printed,
/// after checking that it succeeded (its project is left in `dir` if not) and printing
/// them and its run time.
pub fn consumer_lines(what: &str, out: Output, dir: &Path, started: std::time::Instant) -> Vec<String> {
    assert!(
        out.status.success(),
        "{what} failed (project left in {})",
        dir.display()
    );
    println!("{what}: {:.1} s", started.elapsed().as_secs_f64());
    let stdout = String::from_utf8(out.stdout).unwrap();
    for line in stdout.lines() {
        println!("{line}");
    }
    stdout.lines().map(str::to_owned).collect()
}

/// A consumer's second line: a store opened without the VFS was refused, saying why.
pub fn assert_store_refused_without_vfs(lines: &[String]) {
    assert!(
        lines
            .get(1)
            .is_some_and(|l| l.contains("is a onesync store, not a plain SQLite file")),
        "a store opened without the VFS is refused with the reason: {lines:#?}"
    );
}
