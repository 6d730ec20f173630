//! [`EmulatedDevice`]: the handle that mounts the FUSE filesystem, and through which a lab
//! reads the counters, changes the timing, and cuts the power.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use fuser::{BackgroundSession, Config, MountOption};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use tempfile::TempDir;

use crate::cache::{CutOutcome, VolatileCache, SECTOR_BYTES};
use crate::fuse::{DeviceFs, IMAGE_NAME};
use crate::model::DeviceModel;
use crate::state::{DeviceCounters, DeviceState, FileMedia, Power};

/// A mounted emulated device. Put a loop device on [`EmulatedDevice::image_path`]; detach it
/// before dropping this, which unmounts the FUSE filesystem and deletes the image.
pub struct EmulatedDevice {
    state: Arc<Mutex<DeviceState>>,
    session: Option<BackgroundSession>,
    mount_point: PathBuf,
    /// Holds the durable image and the mount point; `None` once handed back in `Drop`.
    work_dir: Option<TempDir>,
}

impl EmulatedDevice {
    /// Makes a `size_bytes` sparse durable image in a temporary directory and mounts the
    /// device's one-file filesystem next to it. `seed` drives every power cut's choices.
    pub fn start(model: DeviceModel, size_bytes: u64, seed: u64) -> Result<EmulatedDevice> {
        check_prerequisites()?;
        if size_bytes == 0 || !size_bytes.is_multiple_of(SECTOR_BYTES) {
            bail!("an emulated device's size must be a positive multiple of {SECTOR_BYTES} bytes, not {size_bytes}");
        }
        let work_dir = tempfile::Builder::new()
            .prefix("onesync-device-")
            .tempdir()
            .context("making a temporary directory for the emulated device")?;
        let media_path = work_dir.path().join("media.img");
        let file = File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&media_path)
            .and_then(|file| file.set_len(size_bytes).map(|()| file))
            .with_context(|| format!("making the sparse image {}", media_path.display()))?;
        let mount_point = work_dir.path().join("dev");
        fs::create_dir(&mount_point)
            .with_context(|| format!("making mount point {}", mount_point.display()))?;

        let state = Arc::new(Mutex::new(DeviceState {
            model,
            size_bytes,
            media: FileMedia { file },
            cache: VolatileCache::default(),
            counters: DeviceCounters::default(),
            power: Power::On,
            cut_at_flush: None,
            last_cut: None,
            rng: SmallRng::seed_from_u64(seed),
        }));
        let mut config = Config::default();
        config.mount_options = vec![MountOption::FSName("onesync-device".into()), MountOption::NoAtime];
        config.n_threads = Some(1);
        let session = fuser::spawn_mount(DeviceFs { state: state.clone() }, &mount_point, &config)
            .with_context(|| {
                format!(
                    "mounting the emulated device's FUSE filesystem on {}",
                    mount_point.display()
                )
            })?;
        let device = EmulatedDevice {
            state,
            session: Some(session),
            mount_point,
            work_dir: Some(work_dir),
        };
        device.wait_until_served()?;
        Ok(device)
    }

    /// The file to attach a loop device to.
    pub fn image_path(&self) -> PathBuf {
        self.mount_point.join(IMAGE_NAME)
    }

    /// Changes the timing from the next request on (e.g. free while mkfs runs).
    pub fn set_model(&self, model: DeviceModel) {
        self.lock().model = model;
    }

    pub fn counters(&self) -> DeviceCounters {
        self.lock().counters
    }

    /// Bytes the cache holds that a power cut would put at risk.
    pub fn cached_bytes(&self) -> u64 {
        self.lock().cache.cached_bytes()
    }

    /// Cuts the power now: every cached write is lost, kept or torn, and every request from
    /// now on fails until [`EmulatedDevice::power_on`].
    pub fn power_cut(&self) -> Result<CutOutcome> {
        let mut state = self.lock();
        if state.power == Power::Off {
            bail!("the power is already off");
        }
        state
            .cut()
            .context("writing what survived the cut to the durable image")
    }

    /// Arms a cut at the `n`-th flush from now (1: the next one): the power goes as that
    /// flush arrives, so it never completes.
    pub fn cut_at_flush(&self, n: u64) {
        self.lock().cut_at_flush = Some(n.max(1));
    }

    /// Disarms a cut that has not happened yet.
    pub fn disarm(&self) {
        self.lock().cut_at_flush = None;
    }

    pub fn is_powered(&self) -> bool {
        self.lock().power == Power::On
    }

    /// What the last cut did, if the power is off.
    pub fn last_cut(&self) -> Option<CutOutcome> {
        let state = self.lock();
        (state.power == Power::Off).then_some(state.last_cut).flatten()
    }

    /// The power comes back: the device serves the image that survived, with an empty cache.
    pub fn power_on(&self) {
        let mut state = self.lock();
        state.power = Power::On;
        state.cut_at_flush = None;
    }

    fn lock(&self) -> MutexGuard<'_, DeviceState> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The mount is in place when the image can be seen through it.
    fn wait_until_served(&self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let image = self.image_path();
        loop {
            match fs::metadata(&image) {
                Ok(metadata) if metadata.len() == self.lock().size_bytes => return Ok(()),
                _ if Instant::now() > deadline => {
                    return Err(anyhow!(
                        "the emulated device did not appear at {} within 10 s",
                        image.display()
                    ))
                }
                _ => thread::sleep(Duration::from_millis(10)),
            }
        }
    }
}

impl Drop for EmulatedDevice {
    fn drop(&mut self) {
        // Whatever a user of the image left in flight must fail rather than hang the unmount.
        self.lock().power = Power::Off;
        if let Some(session) = self.session.take() {
            if let Err(error) = session.umount_and_join() {
                eprintln!(
                    "onesync: warning: could not unmount the emulated device at {}: {error}",
                    self.mount_point.display()
                );
                // Leave the directory: deleting would walk into a still-mounted filesystem.
                if let Some(work_dir) = self.work_dir.take() {
                    let _ = work_dir.keep();
                }
            }
        }
        if let Some(work_dir) = self.work_dir.take() {
            if let Err(error) = work_dir.close() {
                eprintln!("onesync: warning: could not remove the emulated device's directory: {error}");
            }
        }
    }
}

/// Fails early, naming what is missing, instead of letting the mount fail obscurely.
pub fn check_prerequisites() -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!("an emulated device needs root (it mounts a FUSE filesystem without fusermount)");
    }
    if !Path::new("/dev/fuse").exists() {
        bail!("an emulated device needs FUSE, and /dev/fuse is missing (modprobe fuse, or in a container pass --device /dev/fuse)");
    }
    Ok(())
}

/// Why an emulated device cannot run here, or `None` if it can.
pub fn unavailable_reason() -> Option<String> {
    check_prerequisites().err().map(|error| format!("{error:#}"))
}
