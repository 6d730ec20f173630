//! Test support (cargo feature `test-support`), for this crate's tests and for crates that
//! replicate through it: Go programs built once into a `go-bin` cache directory (stock
//! Litestream, Versity's S3 gateway), the SKIP-or-fail convention, and [`S3Server`], a real
//! local S3 endpoint (versitygw's POSIX backend) started on a free port and killed on drop.
//!
//! A test binary finds its cache as `go_bin_dir(Path::new(env!("CARGO_TARGET_TMPDIR")))`:
//! `$CARGO_TARGET_DIR/go-bin`.

use crate::client::s3::{S3Client, S3Options};
use crate::error::Error;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The Litestream issue 43 names.
pub const LITESTREAM_VERSION: &str = "v0.5.18";
/// Versity's S3 gateway, the local S3 server of the tests.
pub const VERSITYGW_VERSION: &str = "v1.8.0";
/// The credentials [`S3Server`] accepts.
pub const ACCESS_KEY_ID: &str = "AKIAONESYNCTEST";
pub const SECRET_ACCESS_KEY: &str = "onesync-test-secret";
/// The region the tests' URLs name.
pub const REGION: &str = "us-east-1";

/// Serializes Go builds within a process (tests of one binary run in parallel).
static GO_BUILD: Mutex<()> = Mutex::new(());

/// `$CARGO_TARGET_DIR/go-bin`, from a test's `CARGO_TARGET_TMPDIR` (`$CARGO_TARGET_DIR/tmp`).
pub fn go_bin_dir(target_tmpdir: &Path) -> PathBuf {
    target_tmpdir.parent().unwrap_or(target_tmpdir).join("go-bin")
}

/// A test that cannot get what it needs: prints SKIP and passes when `CI` is unset (or
/// "false"/"0"), panics when it is set — CI must run it.
pub fn skip_or_fail(test: &str, why: &str) {
    match std::env::var("CI") {
        Ok(v) if !v.is_empty() && v != "false" && v != "0" => {
            panic!("{test}: {why}, and CI={v} requires this test to run")
        }
        _ => println!("SKIP {test}: {why}"),
    }
}

/// `go`: `$GO` if set (a path; one that does not exist means no Go), else PATH, else the
/// usual install places.
pub fn find_go() -> Option<PathBuf> {
    if let Some(go) = std::env::var_os("GO") {
        return Some(PathBuf::from(go)).filter(|p| p.is_file());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("go"))
        .chain(["/usr/local/go/bin/go".into(), "/usr/lib/go/bin/go".into()])
        .find(|p| p.is_file())
}

/// Describes a finished program for a message.
pub fn show(what: &str, out: &Output) -> String {
    format!(
        "{what}: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `go ARGS` in `dir` with `GOBIN=go_bin`; `Err` says why it could not (no Go, the
/// module proxy or toolchain unreachable); any other failure panics with Go's output.
pub fn go_build(go_bin: &Path, args: &[&str], dir: &Path) -> Result<(), String> {
    let go = find_go().ok_or("no go ($GO, PATH, /usr/local/go/bin)")?;
    let _one_at_a_time = GO_BUILD.lock().unwrap_or_else(|p| p.into_inner());
    std::fs::create_dir_all(go_bin).map_err(|e| e.to_string())?;
    let out = Command::new(&go)
        .current_dir(dir)
        .args(args)
        .env("GOFLAGS", "-mod=mod")
        .env("GOTOOLCHAIN", "local")
        .env("GOBIN", go_bin)
        // These machines set AWS_CA_BUNDLE; the AWS Go SDK then fails to start.
        .env_remove("AWS_CA_BUNDLE")
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let offline = [
        "dial tcp",
        "no such host",
        "i/o timeout",
        "connection refused",
        "TLS handshake",
        "proxy.golang.org",
        "requires go >=",
    ]
    .iter()
    .any(|m| err.contains(m));
    let text = show(&format!("go {}", args.join(" ")), &out);
    if offline {
        Err(format!(
            "the Go build could not get its modules or toolchain: {text}"
        ))
    } else {
        panic!("{text}")
    }
}

/// `go install PACKAGE@VERSION` into `go_bin` unless `go_bin/NAME` exists with the stamp
/// `NAME.version` saying VERSION.
fn go_install_once(go_bin: &Path, name: &str, package: &str, version: &str) -> Result<PathBuf, String> {
    let bin = go_bin.join(name);
    let stamp = go_bin.join(format!("{name}.version"));
    let fresh = || bin.is_file() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(version);
    if fresh() {
        return Ok(bin);
    }
    go_build(
        go_bin,
        &["install", &format!("{package}@{version}")],
        &std::env::temp_dir(),
    )?;
    std::fs::write(&stamp, version).map_err(|e| e.to_string())?;
    Ok(bin)
}

/// Stock Litestream at [`LITESTREAM_VERSION`], built once and kept.
pub fn litestream_command(go_bin: &Path) -> Result<PathBuf, String> {
    let bin = go_bin.join("litestream");
    if bin.is_file() {
        let out = Command::new(&bin)
            .arg("version")
            .output()
            .map_err(|e| e.to_string())?;
        if String::from_utf8_lossy(&out.stdout).trim() == LITESTREAM_VERSION {
            return Ok(bin);
        }
    }
    go_install_once(
        go_bin,
        "litestream",
        "github.com/benbjohnson/litestream/cmd/litestream",
        LITESTREAM_VERSION,
    )
}

/// Versity's gateway at [`VERSITYGW_VERSION`], built once and kept.
pub fn versitygw_command(go_bin: &Path) -> Result<PathBuf, String> {
    go_install_once(
        go_bin,
        "versitygw",
        "github.com/versity/versitygw/cmd/versitygw",
        VERSITYGW_VERSION,
    )
}

/// A free TCP port on 127.0.0.1 (free when asked; the server binds it right after).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

/// A local S3 endpoint: versitygw serving a temporary directory (each top-level
/// directory a bucket) on 127.0.0.1, with [`ACCESS_KEY_ID`] / [`SECRET_ACCESS_KEY`].
/// Killed on drop; [`stop`](Self::stop) and [`start_again`](Self::start_again) simulate
/// an outage (same port, same data).
pub struct S3Server {
    bin: PathBuf,
    root: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
}

impl S3Server {
    /// Builds versitygw if needed (`Err`: Go or its modules unavailable, for
    /// [`skip_or_fail`]), starts it and waits until it accepts connections.
    pub fn start(go_bin: &Path) -> Result<S3Server, String> {
        let bin = versitygw_command(go_bin)?;
        let root = tempfile::tempdir().map_err(|e| e.to_string())?;
        let mut server = S3Server {
            bin,
            root,
            port: free_port(),
            child: None,
        };
        server
            .start_again()
            .map_err(|e| format!("versitygw did not start: {e}"))?;
        Ok(server)
    }

    /// Starts the server again after [`stop`](Self::stop) (panics on failure: the binary
    /// ran before).
    pub fn start_again(&mut self) -> Result<(), String> {
        if self.child.is_some() {
            return Ok(());
        }
        let log = std::fs::File::create(self.root.path().join("versitygw.log")).map_err(|e| e.to_string())?;
        let data = self.root.path().join("data");
        std::fs::create_dir_all(&data).map_err(|e| e.to_string())?;
        let mut child = Command::new(&self.bin)
            .arg("--access")
            .arg(ACCESS_KEY_ID)
            .arg("--secret")
            .arg(SECRET_ACCESS_KEY)
            .arg("--port")
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("posix")
            .arg(&data)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("{}: {e}", self.bin.display()))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                let log = std::fs::read_to_string(self.root.path().join("versitygw.log")).unwrap_or_default();
                return Err(format!("versitygw exited ({status}): {log}"));
            }
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.port));
            if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                break;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "versitygw did not listen on port {} within 30 s",
                    self.port
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.child = Some(child);
        Ok(())
    }

    /// Kills the server (the data stays).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Creates a bucket (a top-level directory); returns its directory.
    pub fn create_bucket(&self, bucket: &str) -> PathBuf {
        let dir = self.root.path().join("data").join(bucket);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create bucket {bucket}: {e}"));
        dir
    }

    /// A bucket's directory (objects are files below it).
    pub fn bucket_dir(&self, bucket: &str) -> PathBuf {
        self.root.path().join("data").join(bucket)
    }

    /// The replica URL of `bucket/prefix` on this server, as stock Litestream reads it too.
    pub fn url(&self, bucket: &str, prefix: &str) -> String {
        format!(
            "s3://{bucket}/{prefix}?endpoint={}&region={REGION}&force-path-style=true",
            self.endpoint()
        )
    }

    /// A client of `bucket/prefix` with this server's credentials (the environment's are
    /// not read for them).
    pub fn client(&self, bucket: &str, prefix: &str) -> Result<S3Client, Error> {
        let options = S3Options {
            access_key_id: Some(ACCESS_KEY_ID.into()),
            secret_access_key: Some(SECRET_ACCESS_KEY.into()),
            session_token: None,
            ..S3Options::from_url(&self.url(bucket, prefix))?
        };
        S3Client::with_options(options)
    }

    /// The variables a child process (stock Litestream, or a process replicating through
    /// [`crate::client::open`]) needs to reach this server.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID.into()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY.into()),
            ("AWS_REGION", REGION.into()),
        ]
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.stop();
    }
}
