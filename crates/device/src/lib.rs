//! onesync-device: an emulated block device with a volatile write cache, for measuring commit
//! schemes at a real device's flush latency and for cutting its power through the real kernel.
//!
//! The device is a FUSE filesystem serving one image file; a loop device on that file carries
//! a real ext4, xfs or btrfs. The loop device turns the filesystem's writes into writes of the
//! file and its flushes into fsync, so this crate sees every request the filesystem sends to
//! its disk, in order. Writes land in a volatile cache; a flush writes the cache to the
//! durable image (a sparse file on the host) and costs the modelled flush latency. A power cut
//! loses, keeps or tears each cached write and fails every request until the power is back.
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! use onesync_device::{EmulatedDevice, Preset};
//! let device = EmulatedDevice::start(Preset::Nvme.model(), 1 << 30, 1)?;
//! // losetup -f --show <device.image_path()>, mkfs, mount, run a workload ...
//! let outcome = device.power_cut()?;
//! // umount, then:
//! device.power_on();
//! # let _ = outcome; Ok(()) }
//! ```
#![forbid(unsafe_code)]

mod cache;
mod device;
mod fuse;
mod model;
mod state;

pub use cache::{CutOutcome, Media, MemoryMedia, VolatileCache, SECTOR_BYTES};
pub use device::{check_prerequisites, unavailable_reason, EmulatedDevice};
pub use model::{DeviceModel, Preset, DEFAULT_CACHE_CAPACITY_BYTES};
pub use state::DeviceCounters;
