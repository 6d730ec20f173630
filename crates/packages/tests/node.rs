//! The npm tarball, installed into a fresh project the way a user would (`npm install
//! better-sqlite3 ./onesync-VERSION.tgz`, the install line of bindings/node/README.md, with
//! better-sqlite3 from the registry, compiled from source: about 90 s): stores opened
//! through `open()` and through `load(db, {default: true})` + `new Database(path)`, with
//! no SQLITE_USE_URI in the environment, plain files still plain in the same process,
//! every code block of the README as written, and the `onesync` command (`npx onesync`). Skips, saying why, without node and npm or
//! without the npm registry.

mod common;

use std::path::Path;
use std::process::Command;

use common::{code_blocks, describe, have, magic, output, package, run, run_sh_block};

/// The scripts and README blocks run without it: better-sqlite3's SQLite would take URI
/// filenames with it, which is not what a user has.
const NO_URI: &str = "SQLITE_USE_URI";

fn node(dir: &Path) -> Command {
    let mut cmd = Command::new("node");
    cmd.current_dir(dir).env_remove(NO_URI);
    cmd
}

#[test]
fn npm_tarball_with_better_sqlite3() {
    if !have("node", &["--version"]) || !have("npm", &["--version"]) {
        println!("SKIP: no node or npm (apt-get install nodejs npm)");
        return;
    }
    let ping = output(Command::new("npm").args(["ping", "--fetch-timeout=15000", "--fetch-retries=0"]));
    if !ping.status.success() {
        println!(
            "SKIP: the npm registry does not answer (npm ping): {}",
            describe(&ping)
        );
        return;
    }
    let tgz = package("node");
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("app");
    std::fs::create_dir(&project).unwrap();
    std::fs::write(
        project.join("package.json"),
        "{\"name\": \"app\", \"private\": true}\n",
    )
    .unwrap();
    std::fs::copy(&tgz, project.join(tgz.file_name().unwrap())).unwrap();

    // The README's blocks in order, in the project: its install line, then its examples
    // (on `app.db`, the user's plain database, made by the first js step below).
    let readme = std::fs::read_to_string(common::workspace().join("bindings/node/README.md")).unwrap();
    let blocks = code_blocks(&readme);
    let (install, rest) = blocks.split_first().expect("README has no code blocks");
    assert_eq!(install.0, "sh");
    assert!(
        install.1.starts_with("npm install"),
        "the README's first block installs: {install:?}"
    );
    // better-sqlite3 compiles against Node's headers: node-gyp would download them, which
    // this machine cannot; the distribution's are used where it ships them.
    let nodedir = ["/usr/include/node/node.h", "/usr/local/include/node/node.h"]
        .iter()
        .find(|h| Path::new(h).exists())
        .map(|h| {
            if h.starts_with("/usr/local") {
                "/usr/local"
            } else {
                "/usr"
            }
        });
    let mut npm_env = vec![("npm_config_audit", "false"), ("npm_config_fund", "false")];
    if let Some(dir) = nodedir {
        npm_env.push(("npm_config_nodedir", dir));
    }
    run_sh_block(&install.1, &project, None, &npm_env);

    run(node(&project).args([
        "-e",
        "const D = require('better-sqlite3'); const d = new D('app.db'); \
         d.exec('CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT); INSERT INTO t(v) VALUES (1), (2)'); d.close()",
    ]));
    for (lang, code) in rest {
        match lang.as_str() {
            "sh" => run_sh_block(code, &project, None, &[]),
            "js" => {
                let out = run(node(&project).args(["-e", code]));
                println!("README block ok:\n{code}{out}");
            }
            other => panic!("README block of unknown language {other:?}"),
        }
    }
    let cli = have("sqlite3", &["--version"]);
    for (file, kind, by_cli) in [
        ("notes.onesync", common::STORE_MAGIC, false),
        ("more.onesync", common::STORE_MAGIC, false),
        ("app.db", common::SQLITE_MAGIC, false),
        ("vacuumed.onesync", common::STORE_MAGIC, true),
        ("restored.onesync", common::STORE_MAGIC, true),
        ("copy.db", common::SQLITE_MAGIC, true),
    ] {
        if cli || !by_cli {
            assert_eq!(magic(&project.join(file)), kind, "{file}");
        }
    }

    // Both ways to a store, each in its own process (the default VFS is per process). The
    // script is copied into the project: require() looks for modules from where it is.
    let script = project.join("node_check.js");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/node_check.js"),
        &script,
    )
    .unwrap();
    for mode in ["open", "load"] {
        let out = run(node(&project).arg(&script).arg(mode).arg(dir.path()));
        print!("{out}");
        assert!(out.contains(&format!("node {mode}: ok")), "{out}");
    }

    // The command, as package.json's `bin` links it: `npx onesync` (no download: the
    // project has it).
    let npx = |args: &[&str]| {
        let mut cmd = Command::new("npx");
        cmd.args(["--no-install", "onesync"])
            .args(args)
            .current_dir(&project);
        run(&mut cmd)
    };
    let help = npx(&["--help"]);
    assert!(help.contains("Usage: onesync <COMMAND>"), "{help}");
    let info = npx(&["info", "notes.onesync"]);
    print!("{info}");
    assert!(info.contains("kind: onesync store"), "{info}");
    let info = npx(&["info", "app.db"]);
    assert!(
        info.contains("kind: plain SQLite database") && info.contains("t: 2 rows"),
        "{info}"
    );
}
