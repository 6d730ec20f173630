//! A condition variable whose notify costs no system call while nobody waits.
//!
//! `std::sync::Condvar::notify_all` is a `futex` wake on Linux whether or not a thread
//! sleeps on it, and a commit notifies several (written, durable, a writer left): a lone
//! committer paid a system call for each (`strace -c -f onesync-lab bench insert --mode
//! onesync-normal --txns 5000`). Waiters count themselves while they hold the mutex, before
//! they sleep; a notifier that changed the condition under that mutex therefore sees them.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Condvar, LockResult, MutexGuard, WaitTimeoutResult};
use std::time::Duration;

/// A `Condvar` that skips the wake when no thread waits (see the module's notes). Every
/// notifier must change the awaited condition under the mutex the waiters use.
#[derive(Default)]
pub struct Wakeup {
    condvar: Condvar,
    waiters: AtomicUsize,
}

/// Counts a waiter while it lives (also when a wait unwinds): `Wakeup`'s waiters, and the
/// VFS's connections waiting for a write lock.
pub struct Counted<'a>(&'a AtomicUsize);

impl<'a> Counted<'a> {
    pub fn new(waiters: &'a AtomicUsize) -> Self {
        waiters.fetch_add(1, SeqCst);
        Self(waiters)
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, SeqCst);
    }
}

impl Wakeup {
    pub const fn new() -> Self {
        Self {
            condvar: Condvar::new(),
            waiters: AtomicUsize::new(0),
        }
    }

    pub fn wait<'a, T>(&self, guard: MutexGuard<'a, T>) -> LockResult<MutexGuard<'a, T>> {
        let _counted = Counted::new(&self.waiters);
        self.condvar.wait(guard)
    }

    pub fn wait_timeout<'a, T>(
        &self,
        guard: MutexGuard<'a, T>,
        timeout: Duration,
    ) -> LockResult<(MutexGuard<'a, T>, WaitTimeoutResult)> {
        let _counted = Counted::new(&self.waiters);
        self.condvar.wait_timeout(guard, timeout)
    }

    pub fn wait_timeout_while<'a, T, F>(
        &self,
        guard: MutexGuard<'a, T>,
        timeout: Duration,
        condition: F,
    ) -> LockResult<(MutexGuard<'a, T>, WaitTimeoutResult)>
    where
        F: FnMut(&mut T) -> bool,
    {
        let _counted = Counted::new(&self.waiters);
        self.condvar.wait_timeout_while(guard, timeout, condition)
    }

    pub fn notify_all(&self) {
        if self.waiters.load(SeqCst) > 0 {
            self.condvar.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A waiter that went to sleep before the notify is woken by it, long before its timeout
    /// (a notify that skipped a counted waiter would leave it to time out), and is no longer
    /// counted after.
    #[test]
    fn wakes_a_sleeping_waiter() {
        const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);
        let shared = Arc::new((Mutex::new(false), Wakeup::new()));
        let waiter = {
            let shared = shared.clone();
            std::thread::spawn(move || {
                let (flag, wakeup) = &*shared;
                let started = std::time::Instant::now();
                let set = flag.lock().unwrap();
                let (set, _) = wakeup.wait_timeout_while(set, TIMEOUT, |set| !*set).unwrap();
                (*set, started.elapsed())
            })
        };
        while shared.1.waiters.load(SeqCst) == 0 {
            std::thread::yield_now();
        }
        *shared.0.lock().unwrap() = true;
        shared.1.notify_all();
        let (woken, waited) = waiter.join().unwrap();
        assert!(woken && waited < TIMEOUT / 2, "woken {woken} after {waited:?}");
        assert_eq!(shared.1.waiters.load(SeqCst), 0);
    }
}
