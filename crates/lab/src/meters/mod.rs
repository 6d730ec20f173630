//! Meters: counters sampled around a timed section. Here wall time, the store's own
//! counters and, on a loop filesystem, the block device's ([`Meter`]); in [`io`] a
//! connection's write calls, bytes and syncs whatever its scheme, and the device of a run;
//! in [`latency`] commit-latency percentiles; in [`spread`] how far a ratio over several
//! rounds can be trusted.

pub mod io;
pub mod latency;
pub mod spread;

use std::time::{Duration, Instant};

use anyhow::Result;

use crate::loopfs::{DevCounters, LoopFs};
use onesync_store::Store;

/// The store's cumulative counters at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreCounters {
    pub pages_written: u64,
    pub commit_records: u64,
    pub bytes_written: u64,
    pub flushes: u64,
    pub checkpoints: u64,
}

impl StoreCounters {
    pub fn sample(store: &Store) -> StoreCounters {
        let stats = store.stats();
        StoreCounters {
            pages_written: stats.pages_written,
            commit_records: stats.commit_records,
            bytes_written: stats.bytes_written,
            flushes: stats.flushes,
            checkpoints: stats.checkpoints,
        }
    }

    pub fn delta(&self, before: &StoreCounters) -> StoreCounters {
        StoreCounters {
            pages_written: self.pages_written.saturating_sub(before.pages_written),
            commit_records: self.commit_records.saturating_sub(before.commit_records),
            bytes_written: self.bytes_written.saturating_sub(before.bytes_written),
            flushes: self.flushes.saturating_sub(before.flushes),
            checkpoints: self.checkpoints.saturating_sub(before.checkpoints),
        }
    }
}

/// What a timed section cost.
#[derive(Clone, Copy, Debug)]
pub struct Measurement {
    pub elapsed: Duration,
    /// Present when a store was metered.
    pub store: Option<StoreCounters>,
    /// Present when the section ran on a loop filesystem.
    pub device: Option<DevCounters>,
}

impl Measurement {
    /// Operations per second over the section; 0 for an empty section.
    pub fn rate(&self, operations: u64) -> f64 {
        per(operations as f64, self.elapsed.as_secs_f64())
    }
}

/// `amount / count`, with an empty denominator giving 0 rather than NaN (which JSON lacks).
pub fn per(amount: f64, count: f64) -> f64 {
    if count > 0.0 {
        amount / count
    } else {
        0.0
    }
}

/// Started just before a timed section and stopped just after it.
pub struct Meter<'a> {
    store: Option<(&'a Store, StoreCounters)>,
    device: Option<(&'a LoopFs, DevCounters)>,
    started: Instant,
}

impl<'a> Meter<'a> {
    /// Samples the device first: its sync writes back earlier dirty data, and that must
    /// neither be billed to the section nor counted in its time.
    pub fn start(store: Option<&'a Store>, device: Option<&'a LoopFs>) -> Result<Meter<'a>> {
        let device = match device {
            Some(loop_fs) => Some((loop_fs, loop_fs.counters()?)),
            None => None,
        };
        let store = store.map(|store| (store, StoreCounters::sample(store)));
        Ok(Meter {
            store,
            device,
            started: Instant::now(),
        })
    }

    /// Takes the time before the device sync, so the sync is billed in blocks but not in time.
    pub fn stop(self) -> Result<Measurement> {
        let elapsed = self.started.elapsed();
        let store = self
            .store
            .map(|(store, before)| StoreCounters::sample(store).delta(&before));
        let device = match self.device {
            Some((loop_fs, before)) => Some(loop_fs.counters()?.delta(&before)),
            None => None,
        };
        Ok(Measurement {
            elapsed,
            store,
            device,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_avoids_nan() {
        assert_eq!(per(5.0, 0.0), 0.0);
        assert_eq!(per(6.0, 3.0), 2.0);
    }

    #[test]
    fn store_delta_subtracts_each_counter() {
        let before = StoreCounters {
            pages_written: 1,
            commit_records: 2,
            bytes_written: 3,
            flushes: 4,
            checkpoints: 5,
        };
        let after = StoreCounters {
            pages_written: 11,
            commit_records: 12,
            bytes_written: 13,
            flushes: 14,
            checkpoints: 15,
        };
        let delta = after.delta(&before);
        assert_eq!(
            delta,
            StoreCounters {
                pages_written: 10,
                commit_records: 10,
                bytes_written: 10,
                flushes: 10,
                checkpoints: 10
            }
        );
    }
}
