//! The Python wheel, installed into fresh venvs the way a user would (`pip install
//! --no-index onesync-*.whl`): `onesync.connect` on a Python whose `sqlite3` cannot load
//! extensions (pyenv's `python3`), `onesync.load` on Debian's `/usr/bin/python3`, the
//! `onesync` command the wheel puts on PATH, and every code block of bindings/python/README.md as written.
//! A test whose Python (or venv) is missing says so and skips.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{code_blocks, describe, have, magic, make_plain_db, output, package, run, run_sh_block};

/// A fresh venv of `python` in `dir`; returns its bin directory, or None (after saying
/// why) if this Python cannot make one with pip.
fn venv(python: &str, dir: &Path) -> Option<PathBuf> {
    if !have(python, &["-c", "import venv, ensurepip"]) {
        println!("SKIP: {python} cannot make a venv with pip (apt-get install python3-venv)");
        return None;
    }
    let venv = dir.join("venv");
    run(Command::new(python).args(["-m", "venv"]).arg(&venv));
    Some(venv.join("bin"))
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/scripts")
        .join(name)
}

/// Every row of table `t` of the database at `uri`, as text, through `python`.
fn rows(python: &Path, db: &Path) -> String {
    let code = "import onesync, sqlite3, sys\n\
        p = sys.argv[1]\n\
        c = onesync.connect(p) if open(p, 'rb').read(16) == onesync.STORE_MAGIC else sqlite3.connect(p)\n\
        print(c.execute('SELECT * FROM t ORDER BY k').fetchall())\n";
    run(Command::new(python).args(["-c", code]).arg(db))
}

/// `python3` on PATH (pyenv's here, whose `sqlite3` cannot load extensions).
#[test]
fn python3_connect_cli_and_readme() {
    if !have("python3", &["--version"]) {
        println!("SKIP: no python3 on PATH");
        return;
    }
    let wheel = package("python");
    let dir = tempfile::tempdir().unwrap();
    let Some(bin) = venv("python3", dir.path()) else {
        return;
    };
    let python = bin.join("python");

    // The README's blocks, in order, in one directory that has the wheel and the user's
    // plain `app.db`; its install line is the install, run as written, kept offline by
    // PIP_NO_INDEX.
    let work = dir.path().join("readme");
    std::fs::create_dir(&work).unwrap();
    std::fs::copy(&wheel, work.join(wheel.file_name().unwrap())).unwrap();
    make_plain_db(&python, &work.join("app.db"), 50);
    let readme = std::fs::read_to_string(common::workspace().join("bindings/python/README.md")).unwrap();
    let blocks = code_blocks(&readme);
    assert!(blocks.len() >= 4, "README blocks: {blocks:?}");
    assert!(
        blocks[0].1.starts_with("pip install"),
        "the README's first block installs: {:?}",
        blocks[0]
    );
    let env = [("PIP_NO_INDEX", "1"), ("PIP_DISABLE_PIP_VERSION_CHECK", "1")];
    for (lang, code) in &blocks {
        match lang.as_str() {
            "sh" => run_sh_block(code, &work, Some(&bin), &env),
            "python" => {
                let out = run(Command::new(&python).args(["-c", code]).current_dir(&work));
                println!("README block ok:\n{code}{out}");
            }
            other => panic!("README block of unknown language {other:?}"),
        }
    }
    // What the README's blocks made is what they say.
    assert_eq!(magic(&work.join("notes #1.onesync")), common::STORE_MAGIC);
    assert_eq!(magic(&work.join("app.onesync")), common::STORE_MAGIC);
    assert_eq!(
        rows(&python, &work.join("copy.db")),
        rows(&python, &work.join("app.db"))
    );

    // onesync.connect: a URI-hostile path, reopen, counters, a plain file refused.
    let out = run(Command::new(&python).arg(script("py_connect.py")).arg(dir.path()));
    print!("{out}");
    assert!(out.contains("connect: ok"));

    // The command in the venv's bin (the Rust binary, not a Python script): import, info,
    // check, export; the rows survive the round trip.
    let plain = dir.path().join("src db.db");
    make_plain_db(&python, &plain, 300);
    let store = dir.path().join("converted #.onesync");
    let back = dir.path().join("back.db");
    let onesync = bin.join("onesync");
    assert!(
        std::fs::read(&onesync).unwrap().starts_with(b"\x7fELF"),
        "{} is not the onesync binary",
        onesync.display()
    );
    print!(
        "{}",
        run(Command::new(&onesync).arg("import").arg(&plain).arg(&store))
    );
    let info = run(Command::new(&onesync).arg("info").arg(&store));
    print!("{info}");
    assert!(
        info.contains("kind: onesync store") && info.contains("t: 300 rows"),
        "{info}"
    );
    let info = run(Command::new(&onesync).arg("info").arg(&plain));
    assert!(info.contains("kind: plain SQLite database"), "{info}");
    let check = run(Command::new(&onesync).arg("check").arg(&store));
    print!("{check}");
    assert!(
        check.contains("integrity_check: ok") && check.contains("\"last_seq\""),
        "{check}"
    );
    print!(
        "{}",
        run(Command::new(&onesync).arg("export").arg(&store).arg(&back))
    );
    assert_eq!(magic(&back), common::SQLITE_MAGIC);
    assert_eq!(rows(&python, &back), rows(&python, &plain));
    assert_eq!(rows(&python, &store), rows(&python, &plain));

    // A WAL-mode database (no -wal left next to it) imports too, as a rollback-mode store.
    let wal = dir.path().join("wal.db");
    make_plain_db(&python, &wal, 20);
    run(Command::new(&python)
        .args([
            "-c",
            "import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute('PRAGMA journal_mode=WAL')",
        ])
        .arg(&wal));
    assert_eq!(std::fs::read(&wal).unwrap()[18..20], [2, 2], "not in WAL mode");
    let wal_store = dir.path().join("wal.onesync");
    print!(
        "{}",
        run(Command::new(&onesync).arg("import").arg(&wal).arg(&wal_store))
    );
    assert_eq!(rows(&python, &wal_store), rows(&python, &wal));

    // Errors: non-zero, one clear line, nothing overwritten.
    for (args, says) in [
        (vec![plain.as_os_str(), store.as_os_str()], "already exists"),
        (
            vec![store.as_os_str(), dir.path().join("new.onesync").as_os_str()],
            "onesync import needs a plain SQLite database",
        ),
    ] {
        let out = output(Command::new(&onesync).arg("import").args(&args));
        assert!(!out.status.success(), "{}", describe(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(says),
            "{}",
            describe(&out)
        );
    }
    let out = output(
        Command::new(&onesync)
            .arg("export")
            .arg(&plain)
            .arg(dir.path().join("x.db")),
    );
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("needs a onesync store"));
    let out = output(
        Command::new(&onesync)
            .arg("check")
            .arg(dir.path().join("missing.onesync")),
    );
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("does not exist"));

    // onesync.load on an apsw connection (apsw bundles its own SQLite), where the base
    // python3 has apsw: the venv's onesync put on its path.
    if !have("python3", &["-c", "import apsw"]) {
        println!("SKIP (apsw part): the base python3 has no apsw (pip install apsw)");
        return;
    }
    let site =
        run(Command::new(&python).args(["-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]));
    let code = "import apsw, onesync, sys\n\
        onesync.load(apsw.Connection(':memory:'))\n\
        c = apsw.Connection(sys.argv[1], vfs='onesync')\n\
        c.execute('CREATE TABLE t(v); INSERT INTO t VALUES (7)')\n\
        c.close()\n\
        c = apsw.Connection(sys.argv[1], vfs='onesync')\n\
        assert c.execute('SELECT v FROM t').fetchall() == [(7,)]\n\
        assert open(sys.argv[1], 'rb').read(16) == onesync.STORE_MAGIC\n\
        print('apsw: ok')\n";
    let out = run(Command::new("python3")
        .args(["-c", code])
        .arg(dir.path().join("apsw ?#.onesync"))
        .env("PYTHONPATH", site.trim()));
    print!("{out}");
    assert!(out.contains("apsw: ok"), "{out}");
}

#[test]
fn debian_python_load_extension() {
    let python = "/usr/bin/python3";
    if !Path::new(python).exists() {
        println!("SKIP: no {python}");
        return;
    }
    if !have(
        python,
        &["-c", "import sqlite3; sqlite3.Connection.enable_load_extension"],
    ) {
        println!("SKIP: {python}'s sqlite3 cannot load extensions");
        return;
    }
    let wheel = package("python");
    let dir = tempfile::tempdir().unwrap();
    let Some(bin) = venv(python, dir.path()) else {
        return;
    };
    run(Command::new(bin.join("pip"))
        .args(["install", "-q", "--no-index", "--disable-pip-version-check"])
        .arg(&wheel));
    let out = run(Command::new(bin.join("python"))
        .arg(script("py_load.py"))
        .arg(dir.path()));
    print!("{out}");
    assert!(out.contains("load: ok"));
}
