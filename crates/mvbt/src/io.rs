//! The file medium (with its exclusive lock) and the slot-level I/O every part uses.

use crate::format::{self, Stamp, StampKind};
use crate::node::Node;
use crate::tree::{FileLock, Tree};
use crate::types::{Error, Result, Version};
use nix::fcntl::{Flock, FlockArg};
use onesync_store::io::FileIo;
use std::fs::OpenOptions;
use std::path::Path;

/// Opens (optionally creating) `path` read-write and takes the exclusive lock: the file's
/// I/O and the lock, held on a second descriptor of the same open file.
pub(crate) fn open_locked(path: &Path, create: bool) -> Result<(FileIo, FileLock)> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .open(path)?;
    match Flock::lock(file.try_clone()?, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok((FileIo::new(file), lock)),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Err(Error::Busy(format!(
            "{} is open in another process (its exclusive lock is held)",
            path.display()
        ))),
        Err((_, errno)) => Err(Error::Io(std::io::Error::from(errno))),
    }
}

/// Nodes the file grows by at least (growth writes zeros and syncs, so that a commit's
/// fdatasync never has a size change to journal).
const GROW_MIN_NODES: u64 = 64;

impl Tree {
    pub(crate) fn slot_offset(&self, id: u64, slot: usize) -> u64 {
        (id * 2 + slot as u64) * self.node_size as u64
    }

    /// Where node `id` written by version `v` goes: the slot already stamped `v` (a spilled
    /// node rewritten), else the older or invalid slot, so that the other slot keeps the
    /// node's last image from an earlier, committed version.
    pub(crate) fn slot_for_write(&self, id: u64, v: Version) -> usize {
        let s = self.slots[id as usize];
        match (s[0], s[1]) {
            (Some(a), _) if a == v => 0,
            (_, Some(b)) if b == v => 1,
            (None, _) => 0,
            (_, None) => 1,
            (Some(a), Some(b)) => {
                if a <= b {
                    0
                } else {
                    1
                }
            }
        }
    }

    pub(crate) fn write_image(&mut self, id: u64, image: &[u8], v: Version) -> Result<()> {
        let slot = self.slot_for_write(id, v);
        // Until the write is known to be complete the slot's content is unknown.
        self.slots[id as usize][slot] = None;
        let offset = self.slot_offset(id, slot);
        self.io.write_at(image, offset)?;
        self.slots[id as usize][slot] = Some(v);
        self.counters.nodes_written += 1;
        Ok(())
    }

    pub(crate) fn write_node(&mut self, id: u64, stamp: &Stamp) -> Result<()> {
        let node = self.cache.get(&id).ok_or_else(|| missing(id))?;
        let image = format::encode_node(self.node_size, id, node, stamp)?;
        self.write_image(id, &image, stamp.version)
    }

    pub(crate) fn write_header(&mut self, stamp: &Stamp) -> Result<()> {
        let image = format::encode_header(self.node_size, &self.header_body(stamp.version), stamp);
        self.write_image(format::HEADER_NODE, &image, stamp.version)
    }

    pub(crate) fn header_body(&self, version: Version) -> format::HeaderBody {
        format::HeaderBody {
            node_size: self.node_size as u32,
            root: self.root,
            root_level: self.root_level,
            root_since: self.root_since,
            version,
        }
    }

    pub(crate) fn sync(&mut self) -> Result<()> {
        if self.config.durable {
            self.io.sync_data()?;
            self.counters.fsyncs += 1;
        }
        Ok(())
    }

    /// Node ids the file has room for.
    pub(crate) fn capacity_nodes(&self) -> u64 {
        self.slots.len() as u64
    }

    /// Make room for more nodes by writing zeros, then sync; the new ids become free.
    pub(crate) fn grow(&mut self) -> Result<()> {
        let old = self.capacity_nodes();
        let new = old + GROW_MIN_NODES.max(old / 8);
        let zeros = vec![0u8; 1 << 20];
        let mut offset = old * 2 * self.node_size as u64;
        let end = new * 2 * self.node_size as u64;
        while offset < end {
            let n = (end - offset).min(zeros.len() as u64) as usize;
            self.io.write_at(&zeros[..n], offset)?;
            offset += n as u64;
        }
        self.io.sync_data()?;
        self.counters.fsyncs += 1;
        self.slots.resize(new as usize, [None, None]);
        self.free.extend(old.max(1)..new);
        Ok(())
    }

    pub(crate) fn stamp(version: Version, kind: StampKind, batch: u32) -> Stamp {
        Stamp { version, kind, batch }
    }

    pub(crate) fn node(&self, id: u64) -> Result<&Node> {
        self.cache.get(&id).ok_or_else(|| missing(id))
    }

    pub(crate) fn node_mut(&mut self, id: u64) -> Result<&mut Node> {
        self.cache.get_mut(&id).ok_or_else(|| missing(id))
    }
}

pub(crate) fn missing(id: u64) -> Error {
    Error::Corrupt(format!("internal error: node {id} is referenced but not loaded"))
}
