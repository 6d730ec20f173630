//! A store's simulated disk whose power can also go out at a moment, not only after a number
//! of I/O calls, and which notes the moment the first call found it out: the time of the
//! cut, against which the torture measures how old the commits it took back were.
//!
//! `SimDisk` counts calls of every thread alike (the store's background flusher's included),
//! so a cut after n calls falls at no particular time; at `synchronous=NORMAL` what a cut
//! takes back depends on when it falls against the flusher's timer, so the deferred modes'
//! runs last a random time and the power goes at its end if the calls have not run out first.

use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use onesync_store::io::StorageIo;
use onesync_store::sim::SimDisk;

/// The cut's schedule and record, shared by the stores opened on the simulated disk.
#[derive(Default)]
pub struct CutClock {
    state: Mutex<ClockState>,
}

#[derive(Default)]
struct ClockState {
    /// Stores opened before the last [`CutClock::restart`] (on a disk since cut) are stale:
    /// their failing calls say nothing of this run's cut.
    generation: u64,
    deadline: Option<Instant>,
    /// When the first call that found the power off was made.
    cut_at: Option<Instant>,
}

impl CutClock {
    fn state(&self) -> MutexGuard<'_, ClockState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new run: no deadline, no cut seen, earlier stores stale.
    pub fn restart(&self) {
        let mut s = self.state();
        s.generation += 1;
        s.deadline = None;
        s.cut_at = None;
    }

    /// The power goes out at the first call made at or after `deadline`.
    pub fn arm(&self, deadline: Instant) {
        self.state().deadline = Some(deadline);
    }

    pub fn disarm(&self) {
        self.state().deadline = None;
    }

    /// When the power went out in this run, if it has.
    pub fn cut_at(&self) -> Option<Instant> {
        self.state().cut_at
    }

    /// The I/O of a store opened now on `disk`.
    pub fn io(self: &Arc<Self>, disk: SimDisk) -> Box<dyn StorageIo> {
        let generation = self.state().generation;
        Box::new(TimedIo {
            disk,
            clock: self.clone(),
            generation,
        })
    }
}

struct TimedIo {
    disk: SimDisk,
    clock: Arc<CutClock>,
    generation: u64,
}

impl TimedIo {
    fn call<T>(&self, op: impl FnOnce(&SimDisk) -> io::Result<T>) -> io::Result<T> {
        let started = Instant::now();
        let current = {
            let s = self.clock.state();
            let current = s.generation == self.generation;
            if current
                && s.deadline.is_some_and(|deadline| started >= deadline)
                && !self.disk.is_powered_off()
            {
                // This call, or another thread's that got in first, finds the power off.
                self.disk.cut_after(0);
            }
            current
        };
        let result = op(&self.disk);
        if result.is_err() && current && self.disk.is_powered_off() {
            let mut s = self.clock.state();
            if s.generation == self.generation {
                s.cut_at = Some(s.cut_at.map_or(started, |at| at.min(started)));
            }
        }
        result
    }
}

impl StorageIo for TimedIo {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.call(|disk| disk.read_at(buf, offset))
    }

    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        self.call(|disk| disk.write_at(data, offset))
    }

    fn sync_data(&self) -> io::Result<()> {
        self.call(|disk| disk.sync_data())
    }

    fn size(&self) -> io::Result<u64> {
        self.call(|disk| disk.size())
    }

    fn read_durable_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.call(|disk| disk.read_durable_at(buf, offset))
    }
}
