//! Durability later: commits shown to readers as soon as they are written (SQLite's
//! `synchronous=NORMAL` and `OFF`), made durable by one background flush within a bounded
//! interval ([`Options::deferred_flush_interval`], changeable while open) or once
//! [`Options::deferred_flush_bytes`] are written unflushed, or at once on demand ([`Shared::flush_written`]).
//!
//! A power cut may then take back the last commits a reader saw, but never a part of one and
//! never one without those before it: recovery keeps a prefix of the chain. A process crash
//! takes back nothing: the commit's record and pages are in the page cache once written.
//!
//! [`Options::deferred_flush_interval`]: crate::Options::deferred_flush_interval
//! [`Options::deferred_flush_bytes`]: crate::Options::deferred_flush_bytes

use super::shared::{lock, micros, Deferred, Shared};
use crate::error::{Error, Result};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use std::thread;
use std::time::{Duration, Instant};

/// How often the written-prefix wait rechecks (a concurrent committer's write takes
/// microseconds; the condvar usually wakes it first).
const PREFIX_RECHECK: Duration = Duration::from_micros(200);

impl Shared {
    /// Show commit `seq` (and every commit before it) to new snapshots now, durable or not,
    /// and with `background_flush` have it made durable within the interval. Returns once a
    /// new snapshot shows it.
    pub(crate) fn show_written(self: &Arc<Self>, seq: u64, background_flush: bool) -> Result<()> {
        {
            let mut meta = self.meta();
            meta.shown_written_upto = meta.shown_written_upto.max(seq);
            if let Some(s) = &self.sharing {
                // Other processes' readers show it too (it is written: they can read it).
                s.publish_shown(meta.shown_written_upto)?;
            }
        }
        loop {
            {
                let mut meta = self.meta();
                let durable = lock(&self.flush).durable;
                self.promote_readable(&mut meta, durable);
                if meta.readable.seq >= seq {
                    break;
                }
            }
            // An earlier commit of another thread is still being written: the prefix
            // reaches this one when it is.
            let f = lock(&self.flush);
            if let Some(why) = &f.poisoned {
                return Err(Error::Poisoned(why.clone()));
            }
            let _ = self
                .written_changed
                .wait_timeout(f, PREFIX_RECHECK)
                .unwrap_or_else(|e| e.into_inner());
        }
        if background_flush {
            self.schedule_deferred_flush();
        }
        Ok(())
    }

    /// Make every commit written so far durable now; returns the durable sequence number.
    pub(crate) fn flush_written(&self) -> Result<u64> {
        let target = lock(&self.flush).written_upto;
        self.wait_durable(target)?;
        Ok(self.durable_seq())
    }

    /// The longest a commit shown before it is durable waits for its flush.
    pub(crate) fn deferred_flush_interval(&self) -> Duration {
        Duration::from_micros(self.deferred.interval_micros.load(Ordering::Relaxed))
    }

    /// Change the interval (a flush already due keeps its time; later ones follow this).
    pub(crate) fn set_deferred_flush_interval(&self, interval: Duration) {
        self.deferred
            .interval_micros
            .store(micros(interval), Ordering::Relaxed);
        // Sooner than the flush already due: bring it forward.
        let mut schedule = lock(&self.deferred.schedule);
        let sooner = Instant::now() + interval;
        if schedule.due.is_some_and(|due| due > sooner) {
            schedule.due = Some(sooner);
            self.deferred.wake.notify_all();
        }
    }

    fn schedule_deferred_flush(self: &Arc<Self>) {
        let written = self.counters.bytes_written.load(Ordering::Relaxed);
        let pending = written.saturating_sub(self.deferred.bytes_at_last_flush.load(Ordering::Relaxed));
        let now = Instant::now();
        let mut schedule = lock(&self.deferred.schedule);
        if pending >= self.opts.deferred_flush_bytes {
            // Enough unflushed bytes: flush now, whatever the timer says (bounds what a
            // power cut can take back in bytes as the interval does in time).
            if schedule.due.is_some_and(|due| due <= now) && schedule.thread_started {
                return;
            }
            schedule.due = Some(now);
        } else if schedule.due.is_some() && schedule.thread_started {
            // A flush is already due within the interval and the flusher sleeps until then:
            // waking it for every commit would cost two context switches each.
            return;
        } else {
            schedule.due = Some(now + self.deferred_flush_interval());
        }
        if !schedule.thread_started {
            schedule.thread_started = true;
            let weak = Arc::downgrade(self);
            let deferred = self.deferred.clone();
            let spawned = thread::Builder::new()
                .name("onesync-flusher".into())
                .spawn(move || run_flusher(weak, &deferred));
            if spawned.is_err() {
                // No thread: the commits become durable at the next flush of any kind
                // (a FULL commit, a checkpoint, close); say so by trying again next time.
                schedule.thread_started = false;
            }
        }
        self.deferred.wake.notify_all();
    }

    /// Ends the flusher thread (the store is going away).
    pub(super) fn stop_deferred_flusher(&self) {
        lock(&self.deferred.schedule).stop = true;
        self.deferred.wake.notify_all();
    }
}

fn run_flusher(shared: Weak<Shared>, deferred: &Deferred) {
    let mut schedule = lock(&deferred.schedule);
    loop {
        if schedule.stop {
            return;
        }
        let now = Instant::now();
        match schedule.due {
            None => {
                schedule = deferred.wake.wait(schedule).unwrap_or_else(|e| e.into_inner());
            }
            Some(due) if now < due => {
                schedule = deferred
                    .wake
                    .wait_timeout(schedule, due - now)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            Some(_) => {
                schedule.due = None;
                drop(schedule);
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                // A failed flush poisons the store; its committers learn it from their own
                // waits and every later commit fails, so there is nothing to report here.
                let _ = shared.flush_written();
                drop(shared);
                schedule = lock(&deferred.schedule);
            }
        }
    }
}
