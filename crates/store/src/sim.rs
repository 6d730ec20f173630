//! A simulated disk that models a power cut, for crash tests.
//!
//! Writes since the last successful flush are volatile. At a power cut each of them is,
//! independently and in a random order, lost, kept, or torn: each 512-byte sector it covers
//! is kept or lost on its own. The cut can be scheduled to fall after any number of I/O
//! calls; from then on every call fails, so the process under test sees the power go out
//! between two calls, exactly where a real crash could fall.

use crate::io::StorageIo;
use rand::seq::SliceRandom;
use rand::Rng;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

/// The sector size at which a power cut tears writes.
pub const SECTOR: u64 = 512;

/// A disk image in memory with volatile and durable states.
#[derive(Clone, Default)]
pub struct SimDisk {
    state: Arc<Mutex<SimState>>,
}

#[derive(Default)]
struct SimState {
    durable: Vec<u8>,
    current: Vec<u8>,
    pending: Vec<(u64, Vec<u8>)>,
    calls: u64,
    cut_at_call: Option<u64>,
    powered_off: bool,
    capacity: Option<u64>,
    failing_syncs: u32,
    syncs: u64,
    writes: u64,
    /// The medium's length as of the last successful flush.
    flushed_len: u64,
    syncs_of_new_length: u64,
    /// The shortest length the medium was cut to since the last flush: at a power cut the
    /// cut is kept or lost, as a whole.
    pending_cut: Option<u64>,
}

/// What happened to one unflushed write at a power cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteFate {
    Lost,
    Kept,
    Torn,
}

fn power_is_off() -> io::Error {
    io::Error::other("simulated power cut")
}

impl SimDisk {
    /// An empty disk.
    pub fn new() -> SimDisk {
        SimDisk::default()
    }

    /// A disk whose durable content is `image`.
    pub fn from_image(image: Vec<u8>) -> SimDisk {
        let disk = SimDisk::new();
        {
            let mut s = disk.lock();
            s.current = image.clone();
            s.flushed_len = image.len() as u64;
            s.durable = image;
        }
        disk
    }

    fn lock(&self) -> MutexGuard<'_, SimState> {
        // A panic while holding this lock can only come from a bug in a test; recover the
        // state rather than cascading the poison.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An I/O handle for the store.
    pub fn io(&self) -> Box<dyn StorageIo> {
        Box::new(self.clone())
    }

    /// Let `calls` more I/O calls succeed; the next one finds the power off.
    pub fn cut_after(&self, calls: u64) {
        let mut s = self.lock();
        s.cut_at_call = Some(s.calls + calls);
    }

    /// Whether the scheduled cut has happened.
    pub fn is_powered_off(&self) -> bool {
        self.lock().powered_off
    }

    /// I/O calls made so far.
    pub fn calls(&self) -> u64 {
        self.lock().calls
    }

    /// Successful flushes so far.
    pub fn syncs(&self) -> u64 {
        self.lock().syncs
    }

    /// Successful writes so far.
    pub fn writes(&self) -> u64 {
        self.lock().writes
    }

    /// Successful flushes that made a longer medium durable. On a real file system each
    /// of them journals the file's new length (filesystem metadata: another device write
    /// and flush), so a store's commits must never be among them.
    pub fn syncs_of_new_length(&self) -> u64 {
        self.lock().syncs_of_new_length
    }

    /// Make writes that would grow the medium past `bytes` fail with ENOSPC.
    pub fn set_capacity(&self, bytes: Option<u64>) {
        self.lock().capacity = bytes;
    }

    /// Make the next `count` flushes fail with EIO, as Linux fails them after a writeback
    /// error: the writes since the last flush never reach the disk, but reads (the page
    /// cache) keep showing them; `read_durable_at` (O_DIRECT) shows the disk.
    pub fn fail_syncs(&self, count: u32) {
        self.lock().failing_syncs = count;
    }

    /// What reads see now.
    pub fn image(&self) -> Vec<u8> {
        self.lock().current.clone()
    }

    /// What is durable now (what a cut with every unflushed write lost would leave).
    pub fn durable_image(&self) -> Vec<u8> {
        self.lock().durable.clone()
    }

    /// Overwrite bytes in place, durably, bypassing the simulation (to damage a store).
    pub fn corrupt(&self, offset: u64, bytes: &[u8]) {
        let mut s = self.lock();
        let s = &mut *s;
        for image in [&mut s.current, &mut s.durable] {
            write_into(image, offset, bytes);
        }
    }

    /// Cut the power now: this disk fails every further call, and the returned disk holds
    /// what survived, with each unflushed write lost, kept or torn at random.
    pub fn power_cut(&self, rng: &mut impl Rng) -> SimDisk {
        let mut s = self.lock();
        s.powered_off = true;
        let mut image = s.durable.clone();
        let mut pending = std::mem::take(&mut s.pending);
        pending.shuffle(rng);
        for (offset, data) in pending {
            apply_unflushed_write(&mut image, offset, &data, rng);
        }
        if let Some(len) = s.pending_cut.take() {
            if rng.random_bool(0.5) {
                image.truncate(len as usize);
            }
        }
        SimDisk::from_image(image)
    }

    /// Begin one I/O call: fail it if the power is (now) off.
    fn enter(s: &mut SimState) -> io::Result<()> {
        if s.powered_off {
            return Err(power_is_off());
        }
        if s.cut_at_call == Some(s.calls) {
            s.powered_off = true;
            return Err(power_is_off());
        }
        s.calls += 1;
        Ok(())
    }
}

/// What a power cut leaves of one write that no flush covered: lost, kept or torn at
/// [`SECTOR`] boundaries, at random with equal odds. [`SimDisk::power_cut`] applies it to
/// each pending write in a random order; the lab's simulated files use it too, so that one
/// power-cut model serves every crash test.
pub fn apply_unflushed_write(image: &mut Vec<u8>, offset: u64, data: &[u8], rng: &mut impl Rng) {
    let fate = match rng.random_range(0..3) {
        0 => WriteFate::Lost,
        1 => WriteFate::Kept,
        _ => WriteFate::Torn,
    };
    apply_with_fate(image, offset, data, fate, rng);
}

/// Apply one unflushed write to a crash image according to its fate.
fn apply_with_fate(image: &mut Vec<u8>, offset: u64, data: &[u8], fate: WriteFate, rng: &mut impl Rng) {
    match fate {
        WriteFate::Lost => {}
        WriteFate::Kept => write_into(image, offset, data),
        WriteFate::Torn => {
            let end = offset + data.len() as u64;
            let mut sector_start = offset;
            while sector_start < end {
                let sector_end = ((sector_start / SECTOR) + 1) * SECTOR;
                let piece_end = sector_end.min(end);
                if rng.random_bool(0.5) {
                    let from = (sector_start - offset) as usize;
                    let to = (piece_end - offset) as usize;
                    write_into(image, sector_start, &data[from..to]);
                }
                sector_start = piece_end;
            }
        }
    }
}

fn write_into(image: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let start = offset as usize;
    let end = start + data.len();
    if image.len() < end {
        image.resize(end, 0);
    }
    image[start..end].copy_from_slice(data);
}

impl StorageIo for SimDisk {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let mut s = self.lock();
        SimDisk::enter(&mut s)?;
        let start = offset as usize;
        let end = start + buf.len();
        if end > s.current.len() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "read past end of simulated disk",
            ));
        }
        buf.copy_from_slice(&s.current[start..end]);
        Ok(())
    }

    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        let mut s = self.lock();
        SimDisk::enter(&mut s)?;
        let end = offset + data.len() as u64;
        if let Some(capacity) = s.capacity {
            if end > capacity && end > s.current.len() as u64 {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
        }
        write_into(&mut s.current, offset, data);
        s.pending.push((offset, data.to_vec()));
        s.writes += 1;
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut s = self.lock();
        SimDisk::enter(&mut s)?;
        if s.failing_syncs > 0 {
            s.failing_syncs -= 1;
            // The pages are marked clean: nothing will write them again.
            s.pending.clear();
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        let s = &mut *s;
        for (offset, data) in s.pending.drain(..) {
            write_into(&mut s.durable, offset, &data);
        }
        // Every write is durable now, and so is the length reads see.
        s.durable.truncate(s.current.len());
        s.pending_cut = None;
        s.syncs += 1;
        if s.current.len() as u64 > s.flushed_len {
            s.syncs_of_new_length += 1;
            s.flushed_len = s.current.len() as u64;
        }
        s.flushed_len = s.flushed_len.min(s.current.len() as u64);
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut s = self.lock();
        SimDisk::enter(&mut s)?;
        if len < s.current.len() as u64 {
            s.current.truncate(len as usize);
            s.pending_cut = Some(s.pending_cut.map_or(len, |cut| cut.min(len)));
        }
        Ok(())
    }

    fn size(&self) -> io::Result<u64> {
        let mut s = self.lock();
        SimDisk::enter(&mut s)?;
        Ok(s.current.len() as u64)
    }

    /// As `O_DIRECT` reads: dirty writes in the range are written back first, then the disk
    /// is read.
    fn read_durable_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let mut s = self.lock();
        SimDisk::enter(&mut s)?;
        let (start, end) = (offset, offset + buf.len() as u64);
        let s = &mut *s;
        let mut kept = Vec::with_capacity(s.pending.len());
        for (at, data) in s.pending.drain(..) {
            if at < end && at + data.len() as u64 > start {
                write_into(&mut s.durable, at, &data);
            } else {
                kept.push((at, data));
            }
        }
        s.pending = kept;
        let (start, end) = (start as usize, end as usize);
        if end > s.current.len() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "read past end of simulated disk",
            ));
        }
        let durable_end = end.min(s.durable.len());
        buf.fill(0);
        if start < durable_end {
            buf[..durable_end - start].copy_from_slice(&s.durable[start..durable_end]);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    #[test]
    fn flushed_writes_survive_and_unflushed_may_not() {
        let mut seen = std::collections::HashSet::new();
        for seed in 0..64 {
            let disk = SimDisk::new();
            disk.write_at(&[1u8; 1024], 0).unwrap();
            disk.sync_data().unwrap();
            disk.write_at(&[2u8; 1024], 0).unwrap();
            let after = disk.power_cut(&mut StdRng::seed_from_u64(seed)).image();
            assert_eq!(after.len(), 1024);
            // Each sector is wholly old or wholly new: tears fall on sector boundaries.
            assert!(after[..512].iter().all(|&b| b == after[0]));
            assert!(after[512..].iter().all(|&b| b == after[512]));
            seen.insert((after[0], after[512]));
        }
        assert_eq!(
            seen.len(),
            4,
            "all four outcomes of a two-sector write should occur: {seen:?}"
        );
    }

    #[test]
    fn calls_fail_after_the_scheduled_cut() {
        let disk = SimDisk::new();
        disk.cut_after(2);
        disk.write_at(b"a", 0).unwrap();
        disk.write_at(b"b", 1).unwrap();
        assert!(disk.sync_data().is_err());
        assert!(disk.is_powered_off());
        assert!(disk.read_at(&mut [0u8; 1], 0).is_err());
    }

    #[test]
    fn capacity_gives_enospc_and_writes_nothing() {
        let disk = SimDisk::new();
        disk.set_capacity(Some(100));
        let err = disk.write_at(&[0u8; 200], 0).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
        assert_eq!(disk.image().len(), 0);
    }
}
