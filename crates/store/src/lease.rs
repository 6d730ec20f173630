//! The alone lease: no lock call per transaction while one process has the store open.
//!
//! Every transaction takes and lets go `WRITE` (while its record is written), a user lock
//! (the VFS: SQLite's RESERVED) and, to be durable, `FLUSH`: each an `fcntl`, which SQLite's
//! WAL does not pay within one process. A process alone with the store keeps them in its
//! memory instead, and turns them into real locks only once another process arrives.
//!
//! Invariants (numbered as the engine's are; `Lease` checks 1 and 4 where it can):
//! 1. A process holds locks in memory only while it holds `ALONE` (exclusive), which it
//!    takes only as the first read-write process to open the store (holding `INIT`, after
//!    resetting the join word), and only with both shared files mapped.
//! 2. Before it holds a lock in memory it notes it in the side file's lease words (which
//!    lock, shared or exclusive), and then reads the join word; it lets go by clearing the
//!    note. Only the holder of `ALONE` writes the lease words.
//! 3. Any other process arriving, read-write or read-only, sets the join word (under
//!    `INIT`, before it takes any of these locks), and before each real `WRITE`, `FLUSH`
//!    or user lock reads the lease words: a noted lock it would conflict with holds it off
//!    (a `try` fails, a wait waits) while another process holds `ALONE`.
//!    By 2 and 3 (a store then a load on each side, sequentially consistent: Dekker's
//!    pairing) either the alone process sees the join word before it holds a lock in
//!    memory, and takes it for real, or the joiner sees the note and waits for it.
//! 4. The alone process that sees the join word gives the lease up before it takes the
//!    lock: it takes for real every lock it holds in memory (no joiner holds one: by 3 a
//!    joiner waits for noted locks), lets `ALONE` go, clears the notes, and takes every
//!    lock for real from then on, while it has the store open.
//! 5. A process that died holding `ALONE` left notes behind; the kernel let `ALONE` go, so
//!    joiners ignore them (as the kernel let its real locks go).
//!
//! The join word lives in its own file beside the side file, readable and writable by
//! everyone: a read-only process may not be allowed to write the side file (its owner
//! decides), yet must be able to end the lease. Writing it can only end a lease (every
//! lock is then real), never grant one.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::error::{Error, Result};
use crate::locks::{set_lock, Kind, Lockable, ALONE};
use crate::shared_words::{MapSideFile, SharedWords};

/// How many user locks the alone process holds in memory at once; one more ends its lease
/// (a transaction over more databases of one store than this is rare).
pub(crate) const USER_NOTES: usize = 8;

/// Bits of a lease note: how the lock is held.
const NOTE_EXCLUSIVE: u64 = 1;
const NOTE_SHARED: u64 = 2;

/// Where the lease's notes are in the side file, by word index (see `sharing`'s layout).
#[derive(Clone, Copy, Debug)]
pub(crate) struct NoteWords {
    pub write: usize,
    pub flush: usize,
    /// The first of [`USER_NOTES`] words: `(byte << 2) | bits`, 0 when unused.
    pub users: usize,
}

/// The join file of the store whose side file is `side`.
pub(crate) fn join_file_path(side: &Path) -> PathBuf {
    side.with_extension("join")
}

/// The locks held in memory (by this process, counted per kind: several threads may take
/// `FLUSH`).
#[derive(Debug, Default)]
struct Held {
    write: [u32; 2],
    flush: [u32; 2],
    /// Each user lock by its byte, as the last take left it (a user lock is the process's,
    /// as an OFD lock is: one let-go drops it).
    users: Vec<(u64, Kind)>,
}

fn kind_index(kind: Kind) -> usize {
    usize::from(kind == Kind::Shared)
}

fn bits(counts: [u32; 2]) -> u64 {
    let mut b = 0;
    if counts[0] > 0 {
        b |= NOTE_EXCLUSIVE;
    }
    if counts[1] > 0 {
        b |= NOTE_SHARED;
    }
    b
}

fn kind_bits(kind: Kind) -> u64 {
    match kind {
        Kind::Shared => NOTE_SHARED,
        _ => NOTE_EXCLUSIVE,
    }
}

/// What [`Held::add`] changed, so that [`Held::undo`] can put it back.
#[derive(Clone, Copy, Debug)]
enum Added {
    Counted,
    /// A user lock, and how it was held before (`None`: not at all).
    User(Option<Kind>),
}

impl Held {
    /// Note a take; `None` if there is no room for another user lock.
    fn add(&mut self, what: Lockable, kind: Kind) -> Option<Added> {
        match what {
            Lockable::Write => self.write[kind_index(kind)] += 1,
            Lockable::Flush => self.flush[kind_index(kind)] += 1,
            Lockable::User(byte) => {
                let room = self.users.len() < USER_NOTES;
                return match self.users.iter_mut().find(|(b, _)| *b == byte) {
                    Some(entry) => Some(Added::User(Some(std::mem::replace(&mut entry.1, kind)))),
                    None if room => {
                        self.users.push((byte, kind));
                        Some(Added::User(None))
                    }
                    None => None,
                };
            }
        }
        Some(Added::Counted)
    }

    /// Take back what `add(what, kind)` did.
    fn undo(&mut self, what: Lockable, kind: Kind, added: Added) {
        match (what, added) {
            (Lockable::User(byte), Added::User(Some(before))) => {
                if let Some(entry) = self.users.iter_mut().find(|(b, _)| *b == byte) {
                    entry.1 = before;
                }
            }
            _ => self.remove(what, kind),
        }
    }

    fn remove(&mut self, what: Lockable, kind: Kind) {
        match what {
            Lockable::Write => self.write[kind_index(kind)] = self.write[kind_index(kind)].saturating_sub(1),
            Lockable::Flush => self.flush[kind_index(kind)] = self.flush[kind_index(kind)].saturating_sub(1),
            Lockable::User(byte) => self.users.retain(|(b, _)| *b != byte),
        }
    }

    /// Every lock held, each with the kind to take it as for real.
    fn real_locks(&self) -> Vec<(Lockable, Kind)> {
        let strongest = |counts: [u32; 2]| match (counts[0] > 0, counts[1] > 0) {
            (true, _) => Some(Kind::Exclusive),
            (false, true) => Some(Kind::Shared),
            _ => None,
        };
        let mut all = Vec::new();
        if let Some(kind) = strongest(self.write) {
            all.push((Lockable::Write, kind));
        }
        if let Some(kind) = strongest(self.flush) {
            all.push((Lockable::Flush, kind));
        }
        all.extend(
            self.users
                .iter()
                .map(|&(byte, kind)| (Lockable::User(byte), kind)),
        );
        all
    }
}

/// The lease's notes as a joiner reads them from the side file.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct NoteValues {
    pub write: u64,
    pub flush: u64,
    pub users: [u64; USER_NOTES],
}

impl NoteValues {
    /// Whether a real take of `what` as `kind` conflicts with a lock noted here. Whether
    /// the noter still holds `ALONE` is the caller's question (invariant 5).
    pub(crate) fn conflict(&self, what: Lockable, kind: Kind) -> bool {
        let clash = |held: u64| match kind {
            Kind::Shared => held & NOTE_EXCLUSIVE != 0,
            _ => held != 0,
        };
        match what {
            Lockable::Write => clash(self.write),
            Lockable::Flush => clash(self.flush),
            Lockable::User(byte) => self
                .users
                .iter()
                .any(|&w| w != 0 && w >> 2 == byte && clash(w & 3)),
        }
    }
}

/// This process's lease: whether it holds `ALONE`, and what it holds in memory.
pub(crate) struct Lease {
    alone: AtomicBool,
    held: Mutex<Held>,
    /// The side file's words (its notes); set while alone.
    side: Option<std::sync::Arc<dyn SharedWords>>,
    notes: NoteWords,
    /// The join file's one word; set while alone.
    join: Option<Box<dyn SharedWords>>,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease").field("alone", &self.is_alone()).finish()
    }
}

fn lock_held(m: &Mutex<Held>) -> MutexGuard<'_, Held> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Lease {
    /// No lease: every lock is taken for real.
    pub(crate) fn none(notes: NoteWords) -> Lease {
        Lease {
            alone: AtomicBool::new(false),
            held: Mutex::new(Held::default()),
            side: None,
            notes,
            join: None,
        }
    }

    /// Take the lease, as the first read-write process to open the store (holding `INIT`,
    /// after resetting the side file: its notes are clear). `None` where it cannot be
    /// taken (no mapper, a join file this process does not own, `ALONE` held: each only
    /// costs the lock calls the lease would save).
    pub(crate) fn take_alone(
        store: &File,
        side_path: &Path,
        side: &std::sync::Arc<dyn SharedWords>,
        notes: NoteWords,
        map: &MapSideFile,
    ) -> Option<Lease> {
        let path = join_file_path(side_path);
        let join = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o666)
            .open(&path)
            .ok()?;
        let meta = join.metadata().ok()?;
        // Another user's file could be made unwritable to joiners behind our back.
        if meta.uid() != nix::unistd::geteuid().as_raw() {
            return None;
        }
        join.set_permissions(std::fs::Permissions::from_mode(0o666))
            .ok()?;
        join.write_all_at(&0u64.to_le_bytes(), 0).ok()?;
        join.set_len(8).ok()?;
        let mapped = map(&join, 8).ok()?;
        mapped.words().first()?.store(0, Ordering::SeqCst);
        if !set_lock(store, Kind::Exclusive, ALONE, false).ok()? {
            return None;
        }
        Some(Lease {
            alone: AtomicBool::new(true),
            held: Mutex::new(Held::default()),
            side: Some(side.clone()),
            notes,
            join: Some(mapped),
        })
    }

    pub(crate) fn is_alone(&self) -> bool {
        self.alone.load(Ordering::Acquire)
    }

    fn note_word(&self, index: usize) -> Option<&AtomicU64> {
        self.side.as_ref().and_then(|s| s.words().get(index))
    }

    fn joined(&self) -> bool {
        self.join
            .as_ref()
            .and_then(|j| j.words().first())
            .is_none_or(|w| w.load(Ordering::SeqCst) != 0)
    }

    /// Write the notes of what `held` holds (invariant 2).
    fn publish(&self, held: &Held, what: Lockable) {
        match what {
            Lockable::Write => {
                if let Some(w) = self.note_word(self.notes.write) {
                    w.store(bits(held.write), Ordering::SeqCst);
                }
            }
            Lockable::Flush => {
                if let Some(w) = self.note_word(self.notes.flush) {
                    w.store(bits(held.flush), Ordering::SeqCst);
                }
            }
            Lockable::User(_) => {
                for i in 0..USER_NOTES {
                    let value = held
                        .users
                        .get(i)
                        .map(|&(byte, kind)| (byte << 2) | kind_bits(kind))
                        .unwrap_or(0);
                    if let Some(w) = self.note_word(self.notes.users + i) {
                        w.store(value, Ordering::SeqCst);
                    }
                }
            }
        }
    }

    /// Take `what` in memory if this process holds the lease; `Ok(false)`: take it for real
    /// (there is no lease, or a joiner ended it just now: invariant 4).
    pub(crate) fn take(&self, store: &File, what: Lockable, kind: Kind) -> Result<bool> {
        if !self.is_alone() {
            return Ok(false);
        }
        let mut held = lock_held(&self.held);
        if !self.is_alone() {
            return Ok(false);
        }
        if let Some(added) = held.add(what, kind) {
            self.publish(&held, what);
            // Invariant 3: the note is visible before the join word is read.
            fence(Ordering::SeqCst);
            if !self.joined() {
                return Ok(true);
            }
            held.undo(what, kind, added);
            self.publish(&held, what);
        }
        self.give_up(&mut held, store)?;
        Ok(false)
    }

    /// Let `what` go in memory; `false`: it is held for real (the lease ended since).
    pub(crate) fn give(&self, what: Lockable, kind: Kind) -> bool {
        if !self.is_alone() {
            return false;
        }
        let mut held = lock_held(&self.held);
        if !self.is_alone() {
            return false;
        }
        held.remove(what, kind);
        self.publish(&held, what);
        true
    }

    /// Invariant 4: every lock held in memory taken for real, then `ALONE` let go and the
    /// notes cleared.
    fn give_up(&self, held: &mut Held, store: &File) -> Result<()> {
        for (what, kind) in held.real_locks() {
            let taken = set_lock(store, kind, what.offset(), false)
                .map_err(|e| Error::io("taking for real a lock held alone", e))?;
            if !taken {
                // A joiner holds it though it was noted: invariant 3 broken.
                return Err(Error::Corrupt(format!(
                    "another process took {what:?} while this process held it alone"
                )));
            }
        }
        let _ = set_lock(store, Kind::Unlock, ALONE, false);
        self.alone.store(false, Ordering::Release);
        *held = Held::default();
        for what in [Lockable::Write, Lockable::Flush, Lockable::User(0)] {
            self.publish(held, what);
        }
        Ok(())
    }
}

/// Set the join word (invariant 3), as a process arriving while another may hold the lease.
/// `Ok(())` also when there is no join file (no process can hold the lease: one creates it
/// before taking `ALONE`, under `INIT`, and the last to close removes it, under `INIT`).
pub(crate) fn signal_join(side_path: &Path, store: &File) -> Result<()> {
    let path = join_file_path(side_path);
    match OpenOptions::new().write(true).open(&path) {
        Ok(join) => {
            join.write_all_at(&1u64.to_le_bytes(), 0)
                .map_err(|e| Error::io("signalling a process alone with the store", e))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            // Nobody to signal unless a process holds the lease.
            if crate::locks::locked_elsewhere(store, ALONE)
                .map_err(|e| Error::io("testing for a lease", e))?
            {
                return Err(Error::io("signalling a process alone with the store", e));
            }
        }
    }
    // Invariant 3: the join word is visible before any note is read.
    fence(Ordering::SeqCst);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The notes a joiner reads, as the alone process publishes them from what it holds.
    fn notes_of(held: &Held) -> NoteValues {
        let mut notes = NoteValues {
            write: bits(held.write),
            flush: bits(held.flush),
            ..NoteValues::default()
        };
        for (i, &(byte, kind)) in held.users.iter().enumerate() {
            notes.users[i] = (byte << 2) | kind_bits(kind);
        }
        notes
    }

    #[test]
    fn a_noted_lock_conflicts_as_the_real_lock_would() {
        let mut held = Held::default();
        assert!(held.add(Lockable::Write, Kind::Exclusive).is_some());
        assert!(held.add(Lockable::user(7), Kind::Shared).is_some());
        assert!(held.add(Lockable::user(9), Kind::Exclusive).is_some());
        let notes = notes_of(&held);
        assert!(notes.conflict(Lockable::Write, Kind::Shared));
        assert!(notes.conflict(Lockable::Write, Kind::Exclusive));
        assert!(!notes.conflict(Lockable::Flush, Kind::Exclusive));
        // Shared beside shared, as concurrent writers of two processes hold a database.
        assert!(!notes.conflict(Lockable::user(7), Kind::Shared));
        assert!(notes.conflict(Lockable::user(7), Kind::Exclusive));
        assert!(notes.conflict(Lockable::user(9), Kind::Shared));
        assert!(!notes.conflict(Lockable::user(8), Kind::Exclusive));
        // Keys that hash to one byte share its lock, noted or real.
        assert!(notes.conflict(Lockable::user(9 + crate::locks::USER_RANGE), Kind::Exclusive));
        held.remove(Lockable::user(9), Kind::Exclusive);
        held.remove(Lockable::Write, Kind::Exclusive);
        let notes = notes_of(&held);
        assert!(!notes.conflict(Lockable::user(9), Kind::Exclusive));
        assert!(!notes.conflict(Lockable::Write, Kind::Exclusive));
    }

    #[test]
    fn counted_takes_stay_noted_until_the_last_let_go() {
        let mut held = Held::default();
        held.add(Lockable::Flush, Kind::Exclusive);
        held.add(Lockable::Flush, Kind::Exclusive);
        held.remove(Lockable::Flush, Kind::Exclusive);
        assert!(notes_of(&held).conflict(Lockable::Flush, Kind::Shared));
        assert_eq!(held.real_locks(), vec![(Lockable::Flush, Kind::Exclusive)]);
        held.remove(Lockable::Flush, Kind::Exclusive);
        assert!(!notes_of(&held).conflict(Lockable::Flush, Kind::Exclusive));
        assert!(held.real_locks().is_empty());
    }

    #[test]
    fn more_user_locks_than_notes_are_refused() {
        let mut held = Held::default();
        for key in 0..USER_NOTES as u64 {
            assert!(held.add(Lockable::user(key), Kind::Exclusive).is_some());
        }
        assert!(held
            .add(Lockable::user(USER_NOTES as u64), Kind::Exclusive)
            .is_none());
        // Taking one already held again needs no room.
        assert!(held.add(Lockable::user(0), Kind::Shared).is_some());
    }

    /// A take the join word turned back leaves the notes as they were before it.
    #[test]
    fn an_undone_take_restores_what_was_held() {
        let mut held = Held::default();
        held.add(Lockable::user(3), Kind::Shared);
        held.add(Lockable::Flush, Kind::Exclusive);
        let before = notes_of(&held);
        for (what, kind) in [
            (Lockable::user(3), Kind::Exclusive),
            (Lockable::user(4), Kind::Exclusive),
            (Lockable::Flush, Kind::Exclusive),
            (Lockable::Write, Kind::Shared),
        ] {
            let added = held.add(what, kind).expect("room");
            held.undo(what, kind, added);
            let after = notes_of(&held);
            assert_eq!(
                (after.write, after.flush, after.users),
                (before.write, before.flush, before.users),
                "{what:?} {kind:?}"
            );
        }
    }
}
