//! The Rust crates installed the way a user would: `onesync-package rust` runs `cargo
//! package --no-verify`, the `.crate` files are unpacked, and a fresh cargo project outside
//! the workspace depends on `onesync = "0.1"` from crates.io with `[patch.crates-io]`
//! pointing the unpublished crates at the unpacked sources, and `cargo run`s the block of
//! crates/onesync/README.md followed by a reopen and a plain SQLite file (this is the check
//! `cargo package`'s own verification would make: each crate builds from its package
//! alone). Then `cargo install --path` of the unpacked `onesync` crate, patched the same
//! way, gives the `onesync` command, which runs. Skips, saying why, without tar or a C
//! compiler (rusqlite's bundled SQLite), or when crates.io cannot be reached.
//!
//! Nested cargo runs use their own target directories under `target/packages-build` (the
//! outer `cargo test` holds the workspace's), kept between runs: the first run takes about
//! three minutes, later ones seconds.

use std::path::PathBuf;
use std::process::{Command, Output};

mod common;

use common::{assert_store_refused_without_vfs, consumer_lines, find_program, readme_block, show, workspace};

/// The nested builds' debug info: none (the consumer compiles every dependency from scratch,
/// and debug info adds to its compile and link time; the code is the same).
const NESTED_DEBUG: &str = "0";

/// Whether a failed cargo command could not reach crates.io.
fn unreachable(out: &Output) -> bool {
    let err = String::from_utf8_lossy(&out.stderr);
    [
        "Could not resolve host",
        "failed to download",
        "spurious network error",
        "failed to query replaced source registry",
        "Unable to update registry",
        "attempting to make an HTTP request, but --offline was specified",
    ]
    .iter()
    .any(|m| err.contains(m))
}

const MAIN_RS: &str = r#"fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The README's block.
    SNIPPET

    drop(db);
    let again = rusqlite::Connection::open("file:notes%20%231.onesync?vfs=onesync")?;
    let x: String = again.query_row("SELECT x FROM t", [], |r| r.get(0))?;
    let plain = rusqlite::Connection::open("plain.db")?;
    plain.execute_batch("CREATE TABLE p(y); INSERT INTO p VALUES (42);")?;
    let y: i64 = plain.query_row("SELECT y FROM p", [], |r| r.get(0))?;
    let header = |path: &str| -> std::io::Result<String> {
        let bytes = std::fs::read(path)?;
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        Ok(String::from_utf8_lossy(&bytes[..end]).into_owned())
    };
    let refused = rusqlite::Connection::open("notes #1.onesync")
        .and_then(|c| c.query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0)))
        .map_or_else(|e| e.to_string(), |n| format!("opened, {n} rows"));
    println!(
        "onesync rust: store {:?} (header {:?}): {n} row committed, reopened, read back {x:?}; plain.db (header {:?}) read back {y}",
        "notes #1.onesync",
        header("notes #1.onesync")?,
        header("plain.db")?,
    );
    println!("onesync rust: the store opened without vfs=onesync: {refused}");
    Ok(())
}
"#;

#[test]
fn rust_crates_from_their_packages() {
    for (tool, why) in [
        ("tar", "to unpack .crate files"),
        ("cc", "for rusqlite's bundled SQLite"),
    ] {
        if find_program(tool, &[]).is_none() {
            println!("SKIP rust_crates_from_their_packages: no {tool} ({why})");
            return;
        }
    }
    let root = workspace();
    let work = root.join("target/packages-build/test-rust");
    let out = work.join("crates");
    let _ = std::fs::remove_dir_all(&out);
    let started = std::time::Instant::now();
    let built = Command::new(env!("CARGO_BIN_EXE_onesync-package"))
        .args(["rust", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    show("onesync-package rust", &built);
    if !built.status.success() && unreachable(&built) {
        println!("SKIP rust_crates_from_their_packages: crates.io is unreachable");
        return;
    }
    assert!(built.status.success(), "onesync-package rust failed");
    println!("cargo package: {:.1} s", started.elapsed().as_secs_f64());

    // Unpacked one directory each, as cargo unpacks downloaded crates. A crate whose file is
    // unchanged since the last run stays as it was (so its build is reused); a changed one is
    // unpacked afresh with the current time as its files' mtime (`tar -m`): cargo packages
    // every file with one fixed old mtime, which would make a stale build look fresh.
    let src = work.join("src");
    std::fs::create_dir_all(&src).unwrap();
    let mut patches = String::new();
    let mut install_patches = Vec::new();
    let mut command_crate = None;
    let mut crates: Vec<PathBuf> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    crates.sort();
    for file in &crates {
        println!("{}\t{} bytes", file.display(), file.metadata().unwrap().len());
        let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
        let (name, _version) = stem.rsplit_once('-').unwrap();
        let unpacked = src.join(&stem);
        let previous = src.join(format!("{stem}.crate"));
        let bytes = std::fs::read(file).unwrap();
        if !unpacked.is_dir() || std::fs::read(&previous).ok().as_ref() != Some(&bytes) {
            let _ = std::fs::remove_dir_all(&unpacked);
            let status = Command::new("tar")
                .arg("xzmf")
                .arg(file)
                .arg("-C")
                .arg(&src)
                .status()
                .unwrap();
            assert!(status.success(), "unpacking {}", file.display());
            std::fs::write(&previous, &bytes).unwrap();
        }
        patches.push_str(&format!("{name} = {{ path = {unpacked:?} }}\n"));
        if name == "onesync" {
            command_crate = Some(file.clone());
        } else {
            install_patches.push(format!("patch.crates-io.{name}.path={unpacked:?}"));
        }
    }
    // src/rust.rs CRATES: codec, mapping, store, ltx, replica, follow, vfs, onesync.
    assert_eq!(crates.len(), 8, "{crates:?}");

    let dir = std::env::temp_dir().join(format!("onesync-rust-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"onesync-consumer\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n\
             [dependencies]\nonesync = \"0.1\"\nrusqlite = {{ version = \"0.41\", features = [\"bundled\"] }}\n\n\
             [patch.crates-io]\n{patches}\n[workspace]\n"
        ),
    )
    .unwrap();
    let snippet = readme_block(&root.join("crates/onesync/README.md"), "rust");
    std::fs::write(
        dir.join("src/main.rs"),
        MAIN_RS.replace("SNIPPET", snippet.trim()),
    )
    .unwrap();

    let started = std::time::Instant::now();
    let ran = Command::new(env!("CARGO"))
        .args(["run", "--quiet"])
        .current_dir(&dir)
        .env("CARGO_TARGET_DIR", work.join("target"))
        .env("CARGO_PROFILE_DEV_DEBUG", NESTED_DEBUG)
        .output()
        .unwrap();
    show("cargo run (the consumer)", &ran);
    if !ran.status.success() && unreachable(&ran) {
        println!("SKIP rust_crates_from_their_packages: crates.io is unreachable");
        return;
    }
    let lines = consumer_lines("cargo run", ran, &dir, started);
    assert_eq!(
        lines.first().map(String::as_str),
        Some(
            "onesync rust: store \"notes #1.onesync\" (header \"onesync store\"): 1 row committed, reopened, \
             read back \"hello\"; plain.db (header \"SQLite format 3\") read back 42"
        )
    );
    assert_store_refused_without_vfs(&lines);

    // `cargo install onesync`, from the package unpacked outside any workspace (inside one,
    // cargo would take it for a missing member): `--debug` builds with the profile the
    // consumer's `cargo run` just built the same dependencies with, in the same target
    // directory, so only the binary itself is compiled.
    let command_crate = command_crate.expect("a onesync .crate");
    let unpacked = std::env::temp_dir().join(format!("onesync-rust-command-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&unpacked);
    std::fs::create_dir_all(&unpacked).unwrap();
    let status = Command::new("tar")
        .arg("xzmf")
        .arg(&command_crate)
        .arg("-C")
        .arg(&unpacked)
        .status()
        .unwrap();
    assert!(status.success(), "unpacking {}", command_crate.display());
    let root_dir = unpacked.join("installed");
    let mut install = Command::new(env!("CARGO"));
    install
        .args(["install", "--quiet", "--debug", "--root"])
        .arg(&root_dir)
        .arg("--path")
        .arg(unpacked.join(command_crate.file_stem().unwrap()))
        .current_dir(&dir)
        .env("CARGO_TARGET_DIR", work.join("target"))
        .env("CARGO_PROFILE_DEV_DEBUG", NESTED_DEBUG);
    for patch in &install_patches {
        install.args(["--config", patch]);
    }
    let started = std::time::Instant::now();
    let installed = install.output().unwrap();
    show("cargo install --path (the onesync crate)", &installed);
    assert!(installed.status.success(), "cargo install failed");
    println!("cargo install: {:.1} s", started.elapsed().as_secs_f64());
    let onesync = root_dir.join("bin/onesync");
    let help = Command::new(&onesync)
        .arg("--help")
        .current_dir(&dir)
        .output()
        .unwrap();
    show("onesync --help", &help);
    let help = String::from_utf8(help.stdout).unwrap();
    assert!(
        help.starts_with("Convert between plain SQLite files and onesync stores")
            && help.contains("Usage: onesync"),
        "{help}"
    );
    let info = Command::new(&onesync)
        .args(["info", "notes #1.onesync"])
        .current_dir(&dir)
        .output()
        .unwrap();
    show("onesync info", &info);
    let info = String::from_utf8(info.stdout).unwrap();
    print!("{info}");
    assert!(
        info.contains("kind: onesync store") && info.contains("t: 1 rows"),
        "{info}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&unpacked).unwrap();
}
