//! The programs `bench replication` runs beside the lab: stock Litestream (the WAL modes'
//! replicator, a process of its own as operators run it) and a local S3 server (Versity's
//! gateway), both built once from the Go module proxy into a `go-bin` directory by
//! `onesync_ltx::testing`, as the replication tests build them.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use onesync_ltx::testing::{self, S3Server};

/// The bucket every S3 mode replicates into (a fresh prefix per run).
pub const BUCKET: &str = "bench";

/// How long Litestream gets to finish its last sync after SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);

/// `--go-bin`, else `go-bin` beside the target directory this binary was built in
/// (`$CARGO_TARGET_DIR/go-bin`, where the replication tests keep their builds).
pub fn go_bin_dir(given: Option<&Path>) -> Result<PathBuf> {
    if let Some(dir) = given {
        return Ok(dir.to_owned());
    }
    let exe = std::env::current_exe().context("finding this program")?;
    exe.parent()
        .and_then(Path::parent)
        .map(|target| target.join("go-bin"))
        .ok_or_else(|| {
            anyhow!(
                "{} has no target directory above it: give --go-bin",
                exe.display()
            )
        })
}

/// `build()`, with a panic (the Go build failing for a reason other than being offline)
/// turned into its message: a bench skips the modes that need the program, saying why.
fn guarded<T>(build: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(build)).unwrap_or_else(|panic| {
        Err(panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "the Go build panicked".to_owned()))
    })
}

/// Stock Litestream (`testing::LITESTREAM_VERSION`), built into `go_bin` if not there yet
/// (about 3 minutes on 2 cores); `Err` says why not.
pub fn litestream(go_bin: &Path) -> Result<PathBuf, String> {
    guarded(|| testing::litestream_command(go_bin))
}

/// A local S3 server with the bench's bucket, built into `go_bin` if need be (about 5
/// minutes); `Err` says why not.
pub fn s3_server(go_bin: &Path) -> Result<S3Server, String> {
    let server = guarded(|| S3Server::start(go_bin))?;
    server.create_bucket(BUCKET);
    Ok(server)
}

/// Where a run replicates to.
pub enum Replica<'a> {
    Dir(&'a Path),
    S3 { server: &'a S3Server, prefix: &'a str },
}

impl Replica<'_> {
    /// The directory whose files are the replica's objects (for [`super::replica_watch`]).
    pub fn root(&self) -> PathBuf {
        match self {
            Replica::Dir(dir) => dir.to_path_buf(),
            Replica::S3 { server, prefix } => server.bucket_dir(BUCKET).join(prefix),
        }
    }

    /// The replica URL as `onesync_replicate` and Litestream take it.
    pub fn url(&self) -> String {
        match self {
            Replica::Dir(dir) => format!("file://{}", dir.display()),
            Replica::S3 { server, prefix } => server.url(BUCKET, prefix),
        }
    }
}

/// A YAML double-quoted string (JSON's string syntax is YAML's).
fn quoted(text: &str) -> String {
    serde_json::Value::from(text).to_string()
}

/// The `replicate` configuration of one database.
fn config(db: &Path, replica: &Replica, sync_interval: &str) -> String {
    let target = match replica {
        Replica::Dir(dir) => format!(
            "      type: file\n      path: {}\n",
            quoted(&dir.to_string_lossy())
        ),
        Replica::S3 { server, prefix } => format!(
            "      type: s3\n      bucket: {BUCKET}\n      path: {}\n      endpoint: {}\n      \
             region: {}\n      force-path-style: true\n      access-key-id: {}\n      \
             secret-access-key: {}\n",
            quoted(prefix),
            quoted(&server.endpoint()),
            testing::REGION,
            quoted(testing::ACCESS_KEY_ID),
            quoted(testing::SECRET_ACCESS_KEY)
        ),
    };
    format!(
        "dbs:\n  - path: {}\n    replica:\n{target}      sync-interval: {sync_interval}\n",
        quoted(&db.to_string_lossy())
    )
}

/// A `litestream replicate` process, stopped (SIGTERM, then its last sync) by [`stop`].
pub struct Litestream {
    child: Option<Child>,
    log: PathBuf,
}

impl Litestream {
    /// Starts `bin replicate` on `db` (a WAL database) with its configuration and log in
    /// `aux` (beside the replica, off the measured filesystem).
    pub fn start(
        bin: &Path,
        aux: &Path,
        db: &Path,
        replica: &Replica,
        sync_interval: &str,
    ) -> Result<Litestream> {
        let config_path = aux.join("litestream.yml");
        std::fs::write(&config_path, config(db, replica, sync_interval))
            .with_context(|| format!("writing {}", config_path.display()))?;
        let log = aux.join("litestream.log");
        let out = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let child = Command::new(bin)
            .arg("replicate")
            .arg("-config")
            .arg(&config_path)
            // These machines set AWS_CA_BUNDLE; the AWS Go SDK then fails to start.
            .env_remove("AWS_CA_BUNDLE")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        Ok(Litestream {
            child: Some(child),
            log,
        })
    }

    /// The end of its log, for a message.
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }

    /// An error if it has exited.
    pub fn check_running(&mut self) -> Result<()> {
        if let Some(child) = &mut self.child {
            if let Some(status) = child.try_wait()? {
                self.child = None;
                bail!("litestream exited ({status}); its log ends:\n{}", self.log_tail());
            }
        }
        Ok(())
    }

    /// SIGTERM (Litestream then syncs once more), SIGKILL after [`STOP_TIMEOUT`].
    pub fn stop(mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if child.try_wait()?.is_some() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        bail!(
            "litestream did not stop within {} s of SIGTERM; its log ends:\n{}",
            STOP_TIMEOUT.as_secs(),
            self.log_tail()
        )
    }
}

impl Drop for Litestream {
    fn drop(&mut self) {
        // An error path: never leave it running.
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_replica_is_configured_with_its_sync_interval() {
        let text = config(Path::new("/a/src.db"), &Replica::Dir(Path::new("/r")), "1s");
        assert_eq!(
            text,
            "dbs:\n  - path: \"/a/src.db\"\n    replica:\n      type: file\n      path: \"/r\"\n      \
             sync-interval: 1s\n"
        );
    }
}
