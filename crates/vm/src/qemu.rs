//! qemu: its command line (software emulation, the image as a virtio disk through the host's
//! page cache) and the running process, its console lines arriving on a channel.

use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use crate::types::GuestRun;

/// Guest memory, MiB.
const GUEST_MEMORY_MIB: u32 = 1024;

/// The qemu command line of one boot: `kernel` with `initrd`, `run.image` as the disk.
pub(crate) fn qemu_command(qemu: &Path, kernel: &Path, run: &GuestRun, initrd: &Path) -> Result<Command> {
    if run.argv.is_empty() {
        bail!("no command to run in the guest");
    }
    let image_meta = fs::metadata(run.image)
        .with_context(|| format!("the guest image {} is not there", run.image.display()))?;
    if !image_meta.is_file() {
        bail!("the guest image {} is not a regular file", run.image.display());
    }
    let image = run
        .image
        .to_str()
        .ok_or_else(|| anyhow!("the image path {} is not UTF-8", run.image.display()))?;
    let mut command = Command::new(qemu);
    command
        .args(["-accel", "tcg", "-m", &GUEST_MEMORY_MIB.to_string(), "-smp", "1"])
        .args(["-nographic", "-no-reboot", "-nic", "none"])
        .arg("-kernel")
        .arg(kernel)
        .arg("-initrd")
        .arg(initrd)
        .arg("-append")
        .arg(format!(
            "console=ttyS0 quiet loglevel=0 panic=-1 onesync.fs={}",
            run.fs.name()
        ))
        .arg("-drive")
        // qemu's option syntax: a comma inside a value is written twice.
        .arg(format!(
            "file={},format=raw,if=virtio,cache=writeback{}",
            image.replace(',', ",,"),
            run.disk_iops
                .map(|iops| format!(",throttling.iops-total={iops}"))
                .unwrap_or_default()
        ));
    Ok(command)
}

/// A running qemu, its console lines arriving on a channel. Dropping it kills and reaps it.
pub(crate) struct Qemu {
    child: Child,
    pub lines: mpsc::Receiver<String>,
    stderr: Option<JoinHandle<String>>,
    reaped: bool,
}

impl Qemu {
    pub fn spawn(mut command: Command) -> Result<Qemu> {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("could not start {}", command.get_program().to_string_lossy()))?;
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let (sender, lines) = mpsc::channel();
        // From here on, an early return drops the Qemu, which kills it.
        let mut qemu = Qemu {
            child,
            lines,
            stderr: None,
            reaped: false,
        };
        let (Some(stdout), Some(stderr)) = (stdout, stderr) else {
            bail!("qemu's stdout or stderr was not captured");
        };
        thread::Builder::new()
            .name("qemu-console".into())
            .spawn(move || {
                let mut reader = BufReader::new(stdout);
                let mut line = Vec::new();
                loop {
                    line.clear();
                    match reader.read_until(b'\n', &mut line) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {
                            let text = String::from_utf8_lossy(&line);
                            let text = text.trim_end_matches('\n').trim_end_matches('\r');
                            if sender.send(text.to_owned()).is_err() {
                                break;
                            }
                        }
                    }
                }
            })
            .context("starting the console reader thread")?;
        qemu.stderr = Some(
            thread::Builder::new()
                .name("qemu-stderr".into())
                .spawn(move || {
                    let mut text = Vec::new();
                    let _ = BufReader::new(stderr).read_to_end(&mut text);
                    String::from_utf8_lossy(&text).into_owned()
                })
                .context("starting the qemu stderr reader thread")?,
        );
        Ok(qemu)
    }

    /// SIGKILL: for the guest, a power cut.
    pub fn kill(&mut self) -> Result<()> {
        if !self.reaped {
            // Fails only if it has exited already, which the wait below sees.
            let _ = self.child.kill();
            self.child.wait().context("waiting for the killed qemu")?;
            self.reaped = true;
        }
        Ok(())
    }

    /// Waits for a qemu that has closed its console (a few seconds at most, then kills it).
    pub fn wait_briefly(&mut self) -> Result<ExitStatus> {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().context("waiting for qemu")? {
                self.reaped = true;
                return Ok(status);
            }
            if Instant::now() >= until {
                self.kill()?;
                bail!("qemu closed its console but did not exit; killed it");
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Everything qemu wrote on stderr (waits for the pipe to close: call after it exited).
    pub fn stderr_text(&mut self) -> String {
        self.stderr
            .take()
            .and_then(|reader| reader.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Qemu {
    fn drop(&mut self) {
        if let Err(error) = self.kill() {
            eprintln!("onesync: warning: {error:#}");
        }
    }
}
