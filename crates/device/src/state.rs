//! The device between requests: its cache, its media, its counters, whether the power is on,
//! and a cut armed for the n-th flush. Shared by the FUSE thread and the [`EmulatedDevice`]
//! handle behind one mutex; the FUSE thread serves one request at a time, so requests are
//! applied in the order they arrive.
//!
//! [`EmulatedDevice`]: crate::EmulatedDevice

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use rand::rngs::SmallRng;

use crate::cache::{CutOutcome, Media, VolatileCache};
use crate::model::DeviceModel;

/// Requests the device served, as `/sys/block/NAME/stat` would count them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct DeviceCounters {
    pub read_requests: u64,
    pub bytes_read: u64,
    pub write_requests: u64,
    pub bytes_written: u64,
    /// Cache flushes (the loop device turns a flush request into an fsync of its file).
    pub flushes: u64,
    /// Writes that asked to be durable on their own (`O_SYNC`/`O_DSYNC` on the request): the
    /// loop device declares no FUA support, so the block layer turns a FUA write into a write
    /// and a flush, and this stays 0 under a loop device (checked by a test).
    pub fua_writes: u64,
    /// Discards (a hole punched in the image; the cache takes them as writes of zeros).
    pub discards: u64,
    /// Times the cache grew past its capacity and the device wrote it back on its own.
    pub write_backs: u64,
}

impl DeviceCounters {
    pub fn delta(&self, before: &DeviceCounters) -> DeviceCounters {
        DeviceCounters {
            read_requests: self.read_requests.saturating_sub(before.read_requests),
            bytes_read: self.bytes_read.saturating_sub(before.bytes_read),
            write_requests: self.write_requests.saturating_sub(before.write_requests),
            bytes_written: self.bytes_written.saturating_sub(before.bytes_written),
            flushes: self.flushes.saturating_sub(before.flushes),
            fua_writes: self.fua_writes.saturating_sub(before.fua_writes),
            discards: self.discards.saturating_sub(before.discards),
            write_backs: self.write_backs.saturating_sub(before.write_backs),
        }
    }
}

/// The durable image: a sparse file on the host. Nothing is ever fsynced to the host: the
/// power cuts are the emulator's, not the host's.
pub struct FileMedia {
    pub file: File,
}

impl Media for FileMedia {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let mut done = 0;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], offset + done as u64)? {
                0 => {
                    // Past the end of the sparse file: zeros, as a fresh disk reads.
                    buf[done..].fill(0);
                    break;
                }
                n => done += n,
            }
        }
        Ok(())
    }

    fn write_at(&mut self, data: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(data, offset)
    }
}

/// The power state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Power {
    On,
    /// Cut: every request fails with EIO until the power comes back.
    Off,
}

pub struct DeviceState {
    pub model: DeviceModel,
    pub size_bytes: u64,
    pub media: FileMedia,
    pub cache: VolatileCache,
    pub counters: DeviceCounters,
    pub power: Power,
    /// Cut the power when this many more flushes have arrived (the flush that arrives then
    /// does not happen).
    pub cut_at_flush: Option<u64>,
    /// What the last cut did, once it happened.
    pub last_cut: Option<CutOutcome>,
    pub rng: SmallRng,
}

impl DeviceState {
    /// Cuts the power now.
    pub fn cut(&mut self) -> io::Result<CutOutcome> {
        let outcome = self.cache.power_cut(&mut self.media, &mut self.rng)?;
        self.power = Power::Off;
        self.cut_at_flush = None;
        self.last_cut = Some(outcome);
        Ok(outcome)
    }

    /// Writes the whole cache back when it has outgrown the device's capacity.
    pub fn write_back_if_full(&mut self) -> io::Result<()> {
        if self.cache.cached_bytes() > self.model.cache_capacity_bytes {
            self.cache.flush(&mut self.media)?;
            self.counters.write_backs += 1;
        }
        Ok(())
    }
}
