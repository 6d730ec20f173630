//! Files on a simulated disk that can lose power, served to SQLite through this project's
//! VFS (`RegisterOptions::files`): the medium of `onesync-lab torture` for every scheme that is
//! not a onesync store.
//!
//! A power cut loses, keeps or tears at 512-byte sector boundaries each write since a file's
//! last flush, independently and in a random order, exactly as the store's `SimDisk` does
//! (one function for both: `onesync_store::sim::apply_unflushed_write`). File creation and
//! deletion are durable at once: the simulation is about data blocks, as SQLite's own
//! assumptions are.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use onesync_store::sim::apply_unflushed_write;
use onesync_vfs::ffi::{
    SQLITE_IOERR, SQLITE_IOERR_DELETE_NOENT, SQLITE_IOERR_SHORT_READ, SQLITE_OPEN_CREATE,
};
use onesync_vfs::{DbBackend, FileSystem, IoResult};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::Rng;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A pending change of one file since its last flush.
#[derive(Clone)]
enum Pending {
    Write { offset: u64, data: Vec<u8> },
    Truncate { len: u64 },
}

#[derive(Default, Clone)]
struct SimFile {
    /// What reads see.
    current: Vec<u8>,
    /// What survives a power cut for sure (as of the last flush).
    durable: Vec<u8>,
    pending: Vec<Pending>,
}

#[derive(Default)]
struct SimState {
    files: HashMap<Vec<u8>, SimFile>,
    calls: u64,
    cut_at: Option<u64>,
    off: bool,
}

/// Files on a simulated disk that can lose power (see the module comment).
#[derive(Default)]
pub struct SimFs {
    state: Arc<Mutex<SimState>>,
}

/// Counts one I/O call; fails once the power is off.
fn call(state: &Mutex<SimState>) -> IoResult<MutexGuard<'_, SimState>> {
    let mut s = lock(state);
    s.calls += 1;
    if s.cut_at.is_some_and(|at| s.calls >= at) {
        s.off = true;
    }
    if s.off {
        return Err(SQLITE_IOERR);
    }
    Ok(s)
}

impl SimFs {
    /// An empty disk (the next open creates the database again).
    pub fn clear(&self) {
        lock(&self.state).files.clear();
    }

    /// Power goes off at the `calls`-th I/O call from now.
    pub fn cut_after(&self, calls: u64) {
        let mut s = lock(&self.state);
        s.cut_at = Some(s.calls + calls);
    }

    /// Power off and back on: each pending write is lost, kept or torn at sector boundaries
    /// exactly as the store's `SimDisk` does it ([`apply_unflushed_write`]), the writes
    /// since a file's last flush reaching it in a random order; each pending truncation is
    /// lost or kept, in its place among them.
    pub fn power_cut(&self, rng: &mut SmallRng) {
        let mut s = lock(&self.state);
        for file in s.files.values_mut() {
            let mut image = file.durable.clone();
            for change in writes_shuffled(&file.pending, rng) {
                match change {
                    Pending::Truncate { len } => {
                        if rng.random_bool(0.5) {
                            image.resize(*len as usize, 0);
                        }
                    }
                    Pending::Write { offset, data } => apply_unflushed_write(&mut image, *offset, data, rng),
                }
            }
            file.current = image.clone();
            file.durable = image;
            file.pending.clear();
        }
        s.cut_at = None;
        s.off = false;
    }
}

/// `pending` with its writes in a random order among the places writes held (a truncation
/// stays where it was: the file's size is metadata, not a data block in flight).
fn writes_shuffled<'a>(pending: &'a [Pending], rng: &mut SmallRng) -> Vec<&'a Pending> {
    let mut order: Vec<&Pending> = pending.iter().collect();
    let places: Vec<usize> = (0..order.len())
        .filter(|&i| matches!(order[i], Pending::Write { .. }))
        .collect();
    let mut writes: Vec<&Pending> = places.iter().map(|&i| order[i]).collect();
    writes.shuffle(rng);
    for (&place, write) in places.iter().zip(writes) {
        order[place] = write;
    }
    order
}

fn write_into(image: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let end = offset as usize + data.len();
    if image.len() < end {
        image.resize(end, 0);
    }
    image[offset as usize..end].copy_from_slice(data);
}

impl FileSystem for SimFs {
    fn open(&self, name: Option<&[u8]>, flags: i32) -> IoResult<(Box<dyn DbBackend>, i32)> {
        let key = match name {
            Some(n) => n.to_vec(),
            // An anonymous temporary file: private, never part of a crash.
            None => format!("\0anonymous-{}", rand::random::<u64>()).into_bytes(),
        };
        let mut s = lock(&self.state);
        if !s.files.contains_key(&key) {
            if flags & SQLITE_OPEN_CREATE == 0 {
                return Err(onesync_vfs::ffi::SQLITE_CANTOPEN);
            }
            s.files.insert(key.clone(), SimFile::default());
        }
        drop(s);
        Ok((
            Box::new(SimHandle {
                state: self.state.clone(),
                key,
            }),
            flags,
        ))
    }

    fn delete(&self, name: &[u8], _sync_dir: bool) -> IoResult<()> {
        let mut s = call(&self.state)?;
        match s.files.remove(name) {
            Some(_) => Ok(()),
            None => Err(SQLITE_IOERR_DELETE_NOENT),
        }
    }

    fn exists(&self, name: &[u8]) -> IoResult<bool> {
        Ok(lock(&self.state).files.contains_key(name))
    }
}

struct SimHandle {
    state: Arc<Mutex<SimState>>,
    key: Vec<u8>,
}

impl SimHandle {
    fn with_file<T>(&self, f: impl FnOnce(&mut SimFile) -> IoResult<T>) -> IoResult<T> {
        let mut s = call(&self.state)?;
        let file = s.files.get_mut(&self.key).ok_or(SQLITE_IOERR)?;
        f(file)
    }
}

impl DbBackend for SimHandle {
    fn read(&mut self, buf: &mut [u8], offset: u64) -> IoResult<()> {
        self.with_file(|file| {
            let start = (offset as usize).min(file.current.len());
            let end = (offset as usize + buf.len()).min(file.current.len());
            let n = end - start;
            buf[..n].copy_from_slice(&file.current[start..end]);
            if n < buf.len() {
                buf[n..].fill(0);
                return Err(SQLITE_IOERR_SHORT_READ);
            }
            Ok(())
        })
    }

    fn write(&mut self, buf: &[u8], offset: u64) -> IoResult<()> {
        self.with_file(|file| {
            write_into(&mut file.current, offset, buf);
            file.pending.push(Pending::Write {
                offset,
                data: buf.to_vec(),
            });
            Ok(())
        })
    }

    fn truncate(&mut self, size: u64) -> IoResult<()> {
        self.with_file(|file| {
            file.current.resize(size as usize, 0);
            file.pending.push(Pending::Truncate { len: size });
            Ok(())
        })
    }

    fn sync(&mut self, _flags: i32) -> IoResult<()> {
        self.with_file(|file| {
            file.durable = file.current.clone();
            file.pending.clear();
            Ok(())
        })
    }

    fn size(&mut self) -> IoResult<u64> {
        self.with_file(|file| Ok(file.current.len() as u64))
    }

    // Locks: the trait's default grants every one, right for one connection
    // (locking_mode=EXCLUSIVE).

    fn sector_size(&mut self) -> i32 {
        512
    }
}
