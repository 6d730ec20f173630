//! The FUSE filesystem: one directory holding one file, `disk.img`, whose reads, writes and
//! fsyncs are the emulated device's requests. A loop device put on that file sends the
//! filesystem's block requests here: writes as writes, flushes (and FUA writes, which the
//! block layer splits into a write and flushes) as fsync, discards as hole punches.
//!
//! Every request takes the device lock, does its work on the cache, then (outside the lock)
//! waits out what the request costs on the modelled device before replying.

use std::ffi::OsStr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, INodeNo, KernelConfig, LockOwner,
    OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs,
    ReplyWrite, Request, WriteFlags,
};

use crate::state::{DeviceState, Power};

/// The one file the filesystem serves.
pub const IMAGE_NAME: &str = "disk.img";
const IMAGE_INODE: INodeNo = INodeNo(2);
/// Attributes never change behind the kernel's back (the size is fixed), so they can be
/// cached for as long as the mount lives.
const ATTR_TTL: Duration = Duration::from_secs(3600);

pub struct DeviceFs {
    pub state: Arc<Mutex<DeviceState>>,
}

impl DeviceFs {
    fn lock(&self) -> MutexGuard<'_, DeviceState> {
        // A poisoned lock means a request handler panicked; the state is still consistent
        // enough to fail requests with, and failing is what the device does next anyway.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The device's state for a request on `ino`: only the image takes I/O, and a device
    /// whose power is cut fails every request.
    fn powered_image(&self, ino: INodeNo) -> Result<MutexGuard<'_, DeviceState>, Errno> {
        if ino != IMAGE_INODE {
            return Err(Errno::EISDIR);
        }
        let state = self.lock();
        if state.power == Power::Off {
            return Err(Errno::EIO);
        }
        Ok(state)
    }

    fn attr(&self, ino: INodeNo) -> Option<FileAttr> {
        let (kind, size, perm, nlink) = match ino {
            INodeNo::ROOT => (FileType::Directory, 0, 0o755, 2),
            IMAGE_INODE => (FileType::RegularFile, self.lock().size_bytes, 0o600, 1),
            _ => return None,
        };
        Some(FileAttr {
            ino,
            size,
            blocks: size.div_ceil(512),
            atime: UNIX_EPOCH,
            mtime: UNIX_EPOCH,
            ctime: UNIX_EPOCH,
            crtime: UNIX_EPOCH,
            kind,
            perm,
            nlink,
            uid: 0,
            gid: 0,
            rdev: 0,
            flags: 0,
            blksize: 4096,
        })
    }
}

/// Waits until `deadline`: sleeps most of the way (the thread's timer slack is set to 1 ns,
/// so a sleep ends within a few µs of when asked), then yields for the last stretch.
fn wait_until(deadline: Instant) {
    const SPIN_BELOW: Duration = Duration::from_micros(60);
    loop {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        let left = deadline - now;
        if left > SPIN_BELOW {
            thread::sleep(left - SPIN_BELOW);
        } else {
            thread::yield_now();
        }
    }
}

impl Filesystem for DeviceFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Sleeps of a few µs must not be rounded up to the default 50 µs slack.
        let _ = nix::sys::prctl::set_timerslack(1);
        // Large requests pass through whole, as the loop device sent them (up to 1 MiB).
        let _ = config.set_max_write(1 << 20);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match (parent, self.attr(IMAGE_INODE)) {
            (INodeNo::ROOT, Some(attr)) if name == IMAGE_NAME => {
                reply.entry(&ATTR_TTL, &attr, fuser::Generation(0))
            }
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr(ino) {
            Some(attr) => reply.attr(&ATTR_TTL, &attr),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<fuser::TimeOrNow>,
        _mtime: Option<fuser::TimeOrNow>,
        _ctime: Option<std::time::SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<std::time::SystemTime>,
        _chgtime: Option<std::time::SystemTime>,
        _bkuptime: Option<std::time::SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // A disk does not change size; an open with O_TRUNC or a timestamp update is harmless.
        match (self.attr(ino), size) {
            (Some(attr), Some(size)) if size != attr.size => reply.error(Errno::EPERM),
            (Some(attr), _) => reply.attr(&ATTR_TTL, &attr),
            (None, _) => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if ino != IMAGE_INODE {
            return reply.error(Errno::EISDIR);
        }
        // Direct I/O: no page cache of the image in between, so every write the loop device
        // sends arrives here at once, and a read after a power cut sees the surviving image.
        reply.opened(FileHandle(0), FopenFlags::FOPEN_DIRECT_IO);
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let mut state = match self.powered_image(ino) {
            Ok(state) => state,
            Err(errno) => return reply.error(errno),
        };
        let length = (size as u64).min(state.size_bytes.saturating_sub(offset)) as usize;
        let mut buf = vec![0u8; length];
        if state.cache.read(&state.media, &mut buf, offset).is_err() {
            return reply.error(Errno::EIO);
        }
        state.counters.read_requests += 1;
        state.counters.bytes_read += length as u64;
        drop(state);
        reply.data(&buf);
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let arrived = Instant::now();
        let mut state = match self.powered_image(ino) {
            Ok(state) => state,
            Err(errno) => return reply.error(errno),
        };
        if offset.saturating_add(data.len() as u64) > state.size_bytes {
            return reply.error(Errno::ENOSPC);
        }
        let DeviceState { cache, media, .. } = &mut *state;
        if cache.write(media, offset, data).is_err() {
            return reply.error(Errno::EIO);
        }
        state.counters.write_requests += 1;
        state.counters.bytes_written += data.len() as u64;
        let durable_now = flags.0 & (libc_flags::O_SYNC | libc_flags::O_DSYNC) != 0;
        if durable_now {
            state.counters.fua_writes += 1;
        }
        let mut cost = state.model.write_cost(data.len() as u64);
        let result = if durable_now {
            cost += state.model.flush_latency;
            let DeviceState { cache, media, .. } = &mut *state;
            cache.flush(media)
        } else {
            state.write_back_if_full()
        };
        drop(state);
        if result.is_err() {
            return reply.error(Errno::EIO);
        }
        wait_until(arrived + cost);
        reply.written(data.len() as u32);
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close(2), not a cache flush.
        reply.ok();
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let arrived = Instant::now();
        if ino != IMAGE_INODE {
            return reply.ok();
        }
        let mut state = self.lock();
        if state.power == Power::Off {
            return reply.error(Errno::EIO);
        }
        if let Some(left) = state.cut_at_flush {
            if left <= 1 {
                // The power goes as this flush arrives: it never completes.
                let _ = state.cut();
                return reply.error(Errno::EIO);
            }
            state.cut_at_flush = Some(left - 1);
        }
        state.counters.flushes += 1;
        let cost = state.model.flush_latency;
        let DeviceState { cache, media, .. } = &mut *state;
        let result = cache.flush(media);
        drop(state);
        if result.is_err() {
            return reply.error(Errno::EIO);
        }
        wait_until(arrived + cost);
        reply.ok();
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        _mode: i32,
        reply: ReplyEmpty,
    ) {
        let mut state = match self.powered_image(ino) {
            Ok(state) => state,
            Err(errno) => return reply.error(errno),
        };
        // A discard (hole punch) or zeroing: the range reads as zeros from now on. Taken as
        // cached writes of zeros, in pieces, so that a cut can lose them like any write.
        let end = offset.saturating_add(length).min(state.size_bytes);
        let zeros = vec![0u8; 1 << 20];
        let mut at = offset;
        while at < end {
            let piece = (end - at).min(zeros.len() as u64) as usize;
            let DeviceState { cache, media, .. } = &mut *state;
            if cache.write(media, at, &zeros[..piece]).is_err() {
                return reply.error(Errno::EIO);
            }
            at += piece as u64;
        }
        state.counters.discards += 1;
        let result = state.write_back_if_full();
        drop(state);
        match result {
            Ok(()) => reply.ok(),
            Err(_) => reply.error(Errno::EIO),
        }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        if ino != INodeNo::ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        let entries = [
            (INodeNo::ROOT, FileType::Directory, "."),
            (INodeNo::ROOT, FileType::Directory, ".."),
            (IMAGE_INODE, FileType::RegularFile, IMAGE_NAME),
        ];
        for (index, (ino, kind, name)) in entries.into_iter().enumerate().skip(offset as usize) {
            if reply.add(ino, index as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let blocks = self.lock().size_bytes / 4096;
        reply.statfs(blocks, 0, 0, 1, 0, 4096, 255, 4096);
    }
}

/// The open(2) flags that make every write durable on its own.
mod libc_flags {
    pub const O_SYNC: i32 = nix::fcntl::OFlag::O_SYNC.bits();
    pub const O_DSYNC: i32 = nix::fcntl::OFlag::O_DSYNC.bits();
}
