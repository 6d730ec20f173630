//! The emulator's own floor: how long a write request and a flush take through FUSE alone
//! (no loop device, no filesystem) on a device that costs nothing, and at a preset.
//!
//!     cargo run --release -p onesync-device --example floor [-- PRESET]

use std::os::unix::fs::FileExt;
use std::time::Instant;

use onesync_device::{DeviceModel, EmulatedDevice, Preset};

fn main() -> anyhow::Result<()> {
    let model = match std::env::args().nth(1) {
        Some(name) => Preset::parse(&name)
            .ok_or_else(|| anyhow::anyhow!("no preset {name}"))?
            .model(),
        None => DeviceModel::FREE,
    };
    let device = EmulatedDevice::start(model, 64 << 20, 1)?;
    let file = std::fs::File::options()
        .read(true)
        .write(true)
        .open(device.image_path())?;
    let block = vec![0xA5u8; 4096];
    let rounds = 2_000u64;
    let started = Instant::now();
    for index in 0..rounds {
        file.write_all_at(&block, index % 1024 * 4096)?;
    }
    let write_us = started.elapsed().as_secs_f64() * 1e6 / rounds as f64;
    let started = Instant::now();
    for _ in 0..rounds {
        file.sync_data()?;
    }
    let flush_us = started.elapsed().as_secs_f64() * 1e6 / rounds as f64;
    println!("{model}: a 4 KiB write takes {write_us:.1} µs, a flush {flush_us:.1} µs (mean of {rounds}, through FUSE only)");
    drop(file);
    Ok(())
}
