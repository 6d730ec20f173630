//! Durability later: commits shown to readers as soon as they are written (SQLite's
//! `synchronous=NORMAL` and `OFF`), made durable by one background flush within a bounded
//! interval ([`Options::deferred_flush_interval`]), or at once on demand ([`Shared::flush_written`]).
//!
//! A power cut may then take back the last commits a reader saw, but never a part of one and
//! never one without those before it: recovery keeps a prefix of the chain. A process crash
//! takes back nothing: the commit's record and pages are in the page cache once written.
//!
//! [`Options::deferred_flush_interval`]: crate::Options::deferred_flush_interval

use super::{lock, Shared};
use crate::error::{Error, Result};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread;
use std::time::{Duration, Instant};

/// The background flusher's schedule, shared with its thread (which holds the engine only
/// weakly, so that dropping the store ends it).
#[derive(Default)]
pub(super) struct Deferred {
    schedule: Mutex<Schedule>,
    wake: Condvar,
}

#[derive(Default)]
struct Schedule {
    /// When the next background flush is due: set by the first commit shown undurable
    /// after the last flush, so none waits longer than the interval.
    due: Option<Instant>,
    thread_started: bool,
    stop: bool,
}

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

    fn schedule_deferred_flush(self: &Arc<Self>) {
        let mut schedule = lock(&self.deferred.schedule);
        if schedule.due.is_some() && schedule.thread_started {
            // A flush is already due within the interval and the flusher sleeps until then:
            // waking it for every commit would cost two context switches each.
            return;
        }
        schedule.due = Some(Instant::now() + self.opts.deferred_flush_interval);
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
