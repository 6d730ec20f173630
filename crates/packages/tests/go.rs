//! The Go module installed the way a user would: `onesync-package go` builds it, a fresh
//! module requires it (with a `replace` to the built directory), gets
//! github.com/mattn/go-sqlite3 from the Go module proxy, and `go run`s a program that opens a
//! onesync store first thing (the block of bindings/go/README.md), reopens it, and opens a
//! plain SQLite file; then `go run onesync.dev/go/onesync/cmd/onesync` runs the `onesync`
//! command the module embeds. Skips, saying why, without go or a C compiler, or when the module
//! proxy cannot be reached.
//!
//! The first run builds mattn/go-sqlite3's SQLite with cgo (1–2 minutes) and the static
//! library (about a minute); both are cached for later runs (Go's build cache, and
//! `target/packages-build`).

use std::process::{Command, Output};

mod common;

use common::{assert_store_refused_without_vfs, consumer_lines, find_program, readme_block, show, workspace};

/// The minor version of a Go 1 release (`go1.26.8` -> 26).
fn go_minor(version: &str) -> Option<u32> {
    version
        .strip_prefix("go1.")?
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// Whether a failed `go` command could not reach the module proxy.
fn unreachable(out: &Output) -> bool {
    let err = String::from_utf8_lossy(&out.stderr);
    [
        "dial tcp",
        "no such host",
        "i/o timeout",
        "connection refused",
        "TLS handshake",
        "proxy.golang.org",
    ]
    .iter()
    .any(|m| err.contains(m))
}

const MAIN_GO: &str = r#"package main

import (
	"database/sql"
	"fmt"
	"log"
	"os"

	"onesync.dev/go/onesync"
)

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

// The first bytes of a file, up to the first NUL.
func header(path string) string {
	b, err := os.ReadFile(path)
	check(err)
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

func main() {
	// The README's block, first thing: no warm-up before the first open.
	SNIPPET

	check(db.Close())
	again, err := sql.Open("sqlite3", "file:notes%20%231.onesync?vfs=onesync")
	check(err)
	var x string
	check(again.QueryRow(`SELECT x FROM t`).Scan(&x))
	check(again.Close())

	normal, err := sql.Open("sqlite3", onesync.URI("notes #1.onesync")+"&_sync=NORMAL")
	check(err)
	var sync int
	check(normal.QueryRow(`PRAGMA synchronous`).Scan(&sync))
	_, err = normal.Exec(`INSERT INTO t VALUES ('normal')`)
	check(err)
	check(normal.Close())

	plain, err := sql.Open("sqlite3", "plain.db")
	check(err)
	_, err = plain.Exec(`CREATE TABLE p(y); INSERT INTO p VALUES (42)`)
	check(err)
	var y int
	check(plain.QueryRow(`SELECT y FROM p`).Scan(&y))
	check(plain.Close())

	wrong, err := sql.Open("sqlite3", "notes #1.onesync")
	check(err)
	refused := wrong.QueryRow(`SELECT count(*) FROM t`).Scan(&n)

	fmt.Printf("onesync go: store %q (header %q): %d row committed, reopened, read back %q; synchronous=%d from the DSN; plain.db (header %q) read back %d\n",
		"notes #1.onesync", header("notes #1.onesync"), n, x, sync, header("plain.db"), y)
	fmt.Printf("onesync go: the store opened without vfs=onesync: %v\n", refused)

	// onesync as the default VFS: a new database is a store, a plain file stays plain.
	check(onesync.MakeDefault())
	fresh, err := sql.Open("sqlite3", "fresh.db")
	check(err)
	_, err = fresh.Exec(`CREATE TABLE f(z); INSERT INTO f VALUES (7)`)
	check(err)
	check(fresh.Close())
	old, err := sql.Open("sqlite3", "plain.db")
	check(err)
	_, err = old.Exec(`INSERT INTO p VALUES (1)`)
	check(err)
	check(old.QueryRow(`SELECT sum(y) FROM p`).Scan(&y))
	check(old.Close())
	fmt.Printf("onesync go: after MakeDefault: fresh.db (header %q); plain.db (header %q) written, sum %d\n",
		header("fresh.db"), header("plain.db"), y)
}
"#;

#[test]
fn go_module_with_mattn_sqlite3() {
    let Some(go) = find_program("go", &["/usr/local/go/bin/go", "/usr/lib/go/bin/go"]) else {
        println!("SKIP go_module_with_mattn_sqlite3: no go (PATH, /usr/local/go/bin)");
        return;
    };
    // mattn/go-sqlite3 says `go 1.21` (Debian 12's golang-go is 1.19).
    let version = Command::new(&go).args(["env", "GOVERSION"]).output().unwrap();
    let version = String::from_utf8_lossy(&version.stdout).trim().to_owned();
    if go_minor(&version).is_some_and(|minor| minor < 21) {
        println!(
            "SKIP go_module_with_mattn_sqlite3: {version} is older than go1.21, which mattn/go-sqlite3 needs"
        );
        return;
    }
    if find_program("gcc", &[])
        .or_else(|| find_program("cc", &[]))
        .is_none()
    {
        println!("SKIP go_module_with_mattn_sqlite3: no C compiler (gcc) for cgo");
        return;
    }
    let root = workspace();
    let out = root.join("target/packages-build/test-out");
    let built = Command::new(env!("CARGO_BIN_EXE_onesync-package"))
        .args(["go", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    show("onesync-package go", &built);
    assert!(built.status.success(), "onesync-package go failed");
    let module = out.join("onesync-go");
    let archive = module.join("lib/libonesync.a");
    println!(
        "go module: {} (lib/libonesync.a {} bytes)",
        module.display(),
        archive.metadata().unwrap().len()
    );

    let dir = std::env::temp_dir().join(format!("onesync-go-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("go.mod"),
        format!(
            "module onesynctest\n\ngo 1.21\n\nrequire onesync.dev/go/onesync v0.0.0\n\nreplace onesync.dev/go/onesync => {}\n",
            module.display()
        ),
    )
    .unwrap();
    let snippet = readme_block(&root.join("bindings/go/README.md"), "go");
    std::fs::write(dir.join("main.go"), MAIN_GO.replace("SNIPPET", snippet.trim())).unwrap();
    let go_command = |args: &[&str]| {
        let mut cmd = Command::new(&go);
        cmd.args(args)
            .current_dir(&dir)
            .env("GOFLAGS", "-mod=mod")
            .env("GOTOOLCHAIN", "local");
        if let Some(bin) = go.parent() {
            // cgo runs `go` tools by name; keep the found toolchain first.
            let path = std::env::var_os("PATH").unwrap_or_default();
            let joined =
                std::env::join_paths(std::iter::once(bin.to_path_buf()).chain(std::env::split_paths(&path)));
            cmd.env("PATH", joined.unwrap());
        }
        cmd
    };
    let go_cmd = |args: &[&str]| go_command(args).output().unwrap();

    let got = go_cmd(&["get", "github.com/mattn/go-sqlite3"]);
    show("go get github.com/mattn/go-sqlite3", &got);
    if !got.status.success() && unreachable(&got) {
        println!("SKIP go_module_with_mattn_sqlite3: the Go module proxy is unreachable");
        return;
    }
    assert!(got.status.success(), "go get failed");

    let started = std::time::Instant::now();
    let ran = go_cmd(&["run", "."]);
    show("go run .", &ran);
    let lines = consumer_lines("go run", ran, &dir, started);
    assert_eq!(
        lines.first().map(String::as_str),
        Some(
            "onesync go: store \"notes #1.onesync\" (header \"onesync store\"): 1 row committed, reopened, \
             read back \"hello\"; synchronous=1 from the DSN; plain.db (header \"SQLite format 3\") read back 42"
        )
    );
    assert_store_refused_without_vfs(&lines);
    assert_eq!(
        lines.get(2).map(String::as_str),
        Some(
            "onesync go: after MakeDefault: fresh.db (header \"onesync store\"); plain.db (header \"SQLite format 3\") \
             written, sum 43"
        )
    );

    // The command: `go run` of the module's cmd/onesync (the same works as `go install`),
    // which writes the embedded program into a cache directory (here the test's) and runs it.
    let command = |args: &[&str]| {
        let mut all = vec!["run", "onesync.dev/go/onesync/cmd/onesync"];
        all.extend_from_slice(args);
        let mut cmd = go_command(&all);
        cmd.env("XDG_CACHE_HOME", dir.join("cache"));
        let out = cmd.output().unwrap();
        show(&format!("go run .../cmd/onesync {}", args.join(" ")), &out);
        assert!(out.status.success(), "go run .../cmd/onesync {args:?} failed");
        String::from_utf8(out.stdout).unwrap()
    };
    let help = command(&["--help"]);
    assert!(help.contains("Usage: onesync <COMMAND>"), "{help}");
    let info = command(&["info", "notes #1.onesync"]);
    print!("{info}");
    assert!(
        info.contains("kind: onesync store") && info.contains("t: 2 rows"),
        "{info}"
    );
    // An error is the command's: its message and exit status come through.
    let mut missing = go_command(&[
        "run",
        "onesync.dev/go/onesync/cmd/onesync",
        "check",
        "missing.onesync",
    ]);
    let out = missing.env("XDG_CACHE_HOME", dir.join("cache")).output().unwrap();
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("onesync: error: "),
        "{out:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
