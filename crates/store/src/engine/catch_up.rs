//! Other processes: the cross-process write lock (claimed per commit, checkpoint or growth)
//! and catching up with the commits and checkpoints they appended, read from the store file.

use super::shared::{bump, lock, Kept, Meta, Shared};
use crate::error::{Error, Result};
use crate::format::{Header, Op, Record, RecordKind, NO_SLOT};
use crate::io::StorageIo;
use crate::loading::load_checkpoint;
use crate::options::Sabotage;
use crate::recovery::{header_copies, pages_intact, record_at};
use crate::sharing::{Sharing, NO_PIN};
use crate::state::State;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// One commit's hold on the cross-process write lock, let go when dropped. Before it
/// sequences anything, the commit calls [`Shared::catch_up_if_due`].
pub(super) struct WriterClaim {
    shared: Arc<Shared>,
    /// This claim took the lock (only `Sabotage::CatchUpByLocker` looks at it).
    pub took_lock: bool,
}

impl WriterClaim {
    pub fn take(shared: &Arc<Shared>) -> Result<WriterClaim> {
        let took_lock = shared.claim_writer()?;
        Ok(WriterClaim {
            shared: shared.clone(),
            took_lock,
        })
    }
}

impl Drop for WriterClaim {
    /// Let the claim go; if that let the lock go and other processes write, hand the core
    /// to the process the unlock woke: with more writers than cores it otherwise waits for
    /// a turn behind the others, the lock free meanwhile (`onesync-lab bench writers
    /// --processes 16` on fewer cores shows it).
    /// Here, not in `release_writer_claim`, which also runs holding `meta` (`with_writer`).
    fn drop(&mut self) {
        if self.shared.release_writer_claim() && self.shared.others_write() {
            std::thread::yield_now();
        }
    }
}

impl Shared {
    /// Publish the oldest commit this process may read (its oldest snapshot, or `also`) if
    /// that is older than what it published: lowering the pin cannot wait (another process
    /// could reuse a slot a reader here needs), raising it can. A pin left too low only
    /// keeps other processes from reusing slots a while longer (invariant 5), and raising
    /// it as each snapshot ends would cost two side-file writes per transaction; it is
    /// raised at checkpoints and by [`Shared::publish_exact_pin`].
    pub(super) fn set_pin(&self, meta: &mut Meta, also: Option<u64>) -> Result<()> {
        let want = Self::pin_wanted(meta, also);
        if want < meta.pin {
            self.publish_pin(meta, want)?;
        }
        Ok(())
    }

    /// Publish exactly the pin this process needs now, higher or lower.
    pub(super) fn publish_exact_pin(&self, meta: &mut Meta) -> Result<()> {
        let want = Self::pin_wanted(meta, None);
        if want != meta.pin {
            self.publish_pin(meta, want)?;
        }
        Ok(())
    }

    fn pin_wanted(meta: &Meta, also: Option<u64>) -> u64 {
        let oldest = meta.snapshots.keys().next().copied();
        oldest.into_iter().chain(also).min().unwrap_or(NO_PIN)
    }

    fn publish_pin(&self, meta: &mut Meta, pin: u64) -> Result<()> {
        let Some(s) = &self.sharing else {
            return Ok(());
        };
        s.publish_pin(pin)?;
        meta.pin = pin;
        Ok(())
    }

    /// Tell other processes (under the write lock) that the chain is about to reach commit
    /// `seq` of checkpoint `generation`: before a record or a checkpoint's header is
    /// written, so that a writer finding the side file still at its own last publication
    /// knows nobody wrote since (`follow_chain`).
    pub(super) fn publish_progress(&self, meta: &mut Meta, generation: u64, seq: u64) -> Result<()> {
        if let Some(s) = &self.sharing {
            s.publish_progress(generation, seq)?;
            meta.last_published = Some((generation, seq));
        }
        Ok(())
    }

    /// Run `f` holding the cross-process write lock, the chain caught up with.
    pub(super) fn with_writer<T>(
        &self,
        meta: &mut Meta,
        f: impl FnOnce(&mut Meta) -> Result<T>,
    ) -> Result<T> {
        let took_lock = self.claim_writer()?;
        let result = self.catch_up_if_due(meta, took_lock).and_then(|()| f(meta));
        self.release_writer_claim();
        result
    }

    /// Count one more commit or checkpoint of this process on its way, taking the
    /// cross-process write lock if it is not held (a catch-up is then due: see
    /// [`Shared::catch_up_if_due`]); returns whether it took the lock.
    pub(super) fn claim_writer(&self) -> Result<bool> {
        let Some(s) = &self.sharing else {
            return Ok(false);
        };
        let mut w = lock(&self.writer);
        let took_lock = !w.held;
        if took_lock {
            let asked = std::time::Instant::now();
            s.lock_writer()?;
            let now = std::time::Instant::now();
            bump(
                &self.counters.write_lock_waited_micros,
                (now - asked).as_micros() as u64,
            );
            w.held = true;
            w.held_since = Some(now);
            w.catch_up_due = true;
        }
        w.claims += 1;
        Self::debug_assert_writer_invariants(&w);
        drop(w);
        if took_lock && self.opts.sabotaged(Sabotage::CatchUpByLocker) {
            // The negative control widens the window the defect needs (another thread's
            // claim reaching `meta` first), so that a loaded test machine still shows it.
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        Ok(took_lock)
    }

    /// Holding a claim and `meta`: catch up with the chain if nobody of this process has
    /// since the lock was taken. Not only the claimant that took the lock: another thread's
    /// claim, taken while the lock was held, may reach `meta` first, and sequencing on a
    /// state that misses other processes' commits forks the chain (the kill torture with
    /// two processes of two concurrent writers each lost acknowledged commits so).
    pub(super) fn catch_up_if_due(&self, meta: &mut Meta, took_lock: bool) -> Result<()> {
        let due = std::mem::take(&mut lock(&self.writer).catch_up_due);
        // The defect this replaced: only the claimant that took the lock caught up.
        let due = if self.opts.sabotaged(Sabotage::CatchUpByLocker) {
            took_lock
        } else {
            due
        };
        if due {
            if let Err(e) = self.catch_up(meta, true) {
                lock(&self.writer).catch_up_due = true;
                return Err(e);
            }
        }
        Ok(())
    }

    /// The commit or checkpoint is written (or failed); the last one lets the lock go,
    /// after saying how far the chain goes. Returns whether this let it go.
    pub(super) fn release_writer_claim(&self) -> bool {
        let Some(s) = &self.sharing else {
            return false;
        };
        let mut w = lock(&self.writer);
        w.claims = w.claims.saturating_sub(1);
        let let_go = w.claims == 0 && w.held;
        if let_go {
            s.unlock_writer();
            if let Some(since) = w.held_since.take() {
                bump(
                    &self.counters.write_lock_held_micros,
                    since.elapsed().as_micros() as u64,
                );
            }
            w.held = false;
            w.catch_up_due = false;
        }
        Self::debug_assert_writer_invariants(&w);
        let_go
    }

    /// Other processes write to this store: this process has followed their commits.
    pub(super) fn others_write(&self) -> bool {
        self.counters.records_followed.load(Ordering::Relaxed) > 0
    }

    /// Follow the commits other processes appended (and their checkpoints) into `meta`.
    /// Without the write lock, a record being written ends the chain for now.
    pub(super) fn catch_up(&self, meta: &mut Meta, holding_writer: bool) -> Result<()> {
        let Some(s) = &self.sharing else {
            return Ok(());
        };
        let caught_up_writer = {
            let w = lock(&self.writer);
            w.held && !w.catch_up_due
        };
        if !holding_writer && caught_up_writer {
            // This process is the writer and has caught up: nobody else has written since.
            return Ok(());
        }
        // Pin what this process knows before looking, so nothing after it is reused
        // meanwhile (or, if it already was, a newer checkpoint shows it).
        // (The pin stays this low until the caller's next snapshot change raises it.)
        let known = meta.state.seq;
        self.set_pin(meta, Some(known))?;
        self.catch_up_pinned(s, meta, holding_writer)
    }

    fn catch_up_pinned(&self, s: &Sharing, meta: &mut Meta, holding_writer: bool) -> Result<()> {
        let read_while_following = self.follow_chain(s, meta, holding_writer)?;
        if !meta.not_durable.is_empty() {
            // Others' commits this process read may not be durable yet: show readers what
            // some process has seen flushed. (Read before following, if it read anything:
            // a commit made durable since is shown at the next catch-up, which reads again.)
            let others = match read_while_following {
                Some(others) => others,
                None => OthersSettled::read(s)?,
            };
            let durable = match others.durable {
                Some(durable) => durable,
                None => {
                    // Nobody to ask: make what this process read durable itself (a flush
                    // works on a read-only descriptor, and finds nothing to do where the
                    // writer already flushed).
                    self.io
                        .sync_data()
                        .map_err(|e| Error::io("flushing the commits this process read", e))?;
                    meta.state.seq
                }
            };
            let durable = durable.max(lock(&self.flush).durable);
            // And what another process showed before it was durable (NORMAL/OFF): its own
            // readers see it, so these do too.
            meta.shown_written_upto = meta.shown_written_upto.max(others.shown.min(meta.state.seq));
            self.promote_readable(meta, durable);
        }
        Ok(())
    }

    /// Follow the chain from where `meta` stands. Returns what other processes said was
    /// settled, if it read new records (it reads that first: see below).
    fn follow_chain(
        &self,
        s: &Sharing,
        meta: &mut Meta,
        holding_writer: bool,
    ) -> Result<Option<OthersSettled>> {
        let page_size = self.page_size;
        let io = self.io.as_ref();
        let progress = s.progress()?;
        // A reader may trust the side file: writers publish progress before they write a
        // record, and a checkpoint before it writes its header. A writer must not: a
        // process may have died (or failed) between writing and publishing, and a record
        // tagged with a stale generation after a newer checkpoint is lost to recovery. So
        // a writer always reads the header and the record at the chain's head.
        // Except where the side file still holds exactly what this process published last,
        // at the chain's head as this process knows it: every writer publishes before it
        // writes, so nobody has written since (and a checkpoint would have changed the
        // generation).
        let trust_side_file = !holding_writer || self.opts.sabotaged(Sabotage::CheckpointPublication);
        let mine = Some((meta.header.generation, meta.state.seq));
        if holding_writer && progress.is_some() && progress == mine && meta.last_published == mine {
            return Ok(None);
        }
        if let Some((generation, seq)) = progress.filter(|_| trust_side_file) {
            if generation == meta.header.generation && seq <= meta.state.seq {
                return Ok(None);
            }
        }
        // The file's length costs a stat, which on ext4 cost a committer more than all the
        // rest of this (about 80 µs a commit). The file only grows, and another process grows
        // it only before commits it publishes, so the length this process knows will do
        // unless the side file shows another process at work (or there is none to show it)
        // or the header moved.
        let others_moved = match progress {
            Some((generation, seq)) => generation != meta.header.generation || seq > meta.state.seq,
            None => true,
        };
        let mut capacity = if others_moved {
            self.file_capacity()?
        } else {
            meta.alloc.capacity()
        };
        // A reader trusting the side file that shows this process's generation knows no
        // checkpoint has begun since it read the header (a checkpoint publishes its
        // generation before it writes its header): the header it holds is current, and
        // reading it again cost each process a read of the header per catch-up.
        let header_current =
            trust_side_file && progress.is_some_and(|(generation, _)| generation == meta.header.generation);
        let (header, copies_agree) = if header_current {
            (meta.header, true)
        } else {
            header_copies(io)?
        };
        if header.generation != meta.header.generation {
            capacity = self.file_capacity()?;
            if holding_writer && !copies_agree {
                // The process that wrote this checkpoint died before making it durable and
                // duplicating its header: finish that before writing anything after it.
                self.io
                    .sync_data()
                    .map_err(|e| Error::io("flushing another process's checkpoint", e))?;
                self.write_counted(
                    &header.encode(),
                    Header::copy_offset(header.generation + 1),
                    "repairing a header copy",
                )?;
                self.io
                    .sync_data()
                    .map_err(|e| Error::io("flushing a repaired header copy", e))?;
                bump(&self.counters.flushes, 2);
            }
            if header.generation < meta.header.generation {
                if holding_writer {
                    return Err(Error::Corrupt("the store's header went back a generation".into()));
                }
                // A checkpoint's header half rewritten: look again next time.
                return Ok(None);
            }
            let covered = header.checkpoint.seq;
            if covered < meta.state.seq {
                return Err(Error::Corrupt(format!(
                    "checkpoint generation {} covers commit {covered}, but this process has read commit {}",
                    header.generation, meta.state.seq
                )));
            }
            // The state at `covered` is the manifest's files on its runs, read in constant
            // time, whether this process was behind it or at it (then its own state has the
            // same mapping on the old base, whose blocks the checkpoint's writer frees once
            // no reader pins them; and a checkpoint that gave space back may have moved
            // pages, `give_back_space`). A checkpoint is written only once everything it
            // covers is durable. (A version-1 header here was written by an older binary
            // sharing the store: it is loaded whole, as that binary did.)
            let loaded = load_checkpoint(io, &header, capacity, &self.mapping)?;
            meta.state = Arc::new(loaded.state);
            meta.free_baseline = loaded.free;
            meta.visible = meta.state.clone();
            meta.readable = meta.state.clone();
            meta.not_durable.clear();
            // What the commits before it freed is in its manifest's free slots.
            meta.freed_since.clear();
            meta.header = header;
            meta.head = header.log.first_slot;
            meta.window_end = header.log.window_end;
            // This process's superseded slots are covered by that checkpoint too.
            self.rebase_on_checkpoint(meta, header.log.seed);
        }
        // Slots past the length this process knew belong to others, but it may be the one to
        // free some of them (the extents of another process's checkpoint it replaces).
        meta.alloc.extend_used(capacity);
        // Commits up to the side file's written word had every write returned before it was
        // raised (and it was reset when the store was last opened first): their pages are in
        // the file, and reading them back to check would cost a read per page per process.
        // Past it, a record may be half followed by its pages (its writer is writing them,
        // or died): those are checked.
        let written = if self.opts.sabotaged(Sabotage::CatchUpTrustsUnwritten) {
            u64::MAX
        } else {
            s.written()?
        };
        // The records read are applied to one copy of the state. Readers are shown a state
        // once every commit in it is durable (or shown before it was), so each commit past
        // what is settled now needs a state of its own, kept until a flush covers it; of
        // those at or below it, only the last does. (A state kept per record would copy
        // the mapping's changed paths once per record: most of what following costs.)
        let others = OthersSettled::read(s)?;
        let settled = others
            .durable
            .unwrap_or(0)
            .max(lock(&self.flush).durable)
            .max(meta.shown_written_upto)
            .max(others.shown);
        let mut kept: Vec<(u64, Kept)> = Vec::new();
        let mut next: Option<State> = None;
        let mut chain = ChainPosition::of(meta);
        let mut commits = 0;
        let mut superseded_elsewhere = Vec::new();
        let mut chain_slots = Vec::new();
        // The last commit the side file announced, to a reader that trusts it (so at this
        // process's generation): nothing follows it yet (a writer publishes before it
        // writes), so the read past it is saved.
        let announced_last = progress.filter(|_| header_current).map(|(_, seq)| seq);
        loop {
            let seq_before = next.as_ref().map_or(meta.state.seq, |state| state.seq);
            if announced_last.is_some_and(|last| seq_before >= last) {
                break;
            }
            let generation = meta.header.generation;
            let Some((record, crc, len)) =
                chain.next_record(io, page_size, generation, seq_before, capacity)?
            else {
                break;
            };
            if record.kind == RecordKind::Commit
                && record.seq > written
                && !pages_intact(io, &record, page_size, capacity)?
            {
                break;
            }
            chain_slots.extend(chain.head..chain.head + len.div_ceil(page_size));
            chain.pass(&record, crc, len, page_size);
            if record.kind == RecordKind::Commit {
                let state = next.get_or_insert_with(|| (*meta.state).clone());
                // The process that wrote the record frees what it superseded, not this one;
                // but whichever process writes the next checkpoint persists it as free.
                // An error leaves `meta` as it was (the copy is dropped).
                state.apply(&record.ops, record.seq, page_size, &mut superseded_elsewhere)?;
                commits += 1;
                if record.seq >= settled {
                    // The first of the run as a state (the one before it is not kept), the
                    // others as their operations, built only if shown (`Kept::Ops`).
                    let k = if kept.is_empty() {
                        Kept::State(Arc::new(state.clone()))
                    } else {
                        Kept::Ops(record.ops.into())
                    };
                    kept.push((record.seq, k));
                }
            }
        }
        // The last record's state is kept whether or not it is settled, as a state.
        if let Some(state) = next.map(Arc::new) {
            if kept.last().map(|(seq, _)| *seq) == Some(state.seq) {
                kept.pop();
            }
            kept.push((state.seq, Kept::State(state.clone())));
            meta.state = state;
        }
        meta.not_durable.extend(kept);
        meta.freed_since.extend(superseded_elsewhere);
        meta.freed_since.extend(chain_slots);
        if commits > 0 {
            bump(&self.counters.catch_ups, 1);
            bump(&self.counters.records_followed, commits);
        }
        meta.commits_since_checkpoint += commits;
        meta.log_bytes_since_checkpoint += chain.log_bytes;
        meta.prev_crc = chain.prev_crc;
        meta.head = chain.head;
        meta.window_end = chain.window_end;
        meta.visible = meta.state.clone();
        let seq = meta.state.seq;
        {
            let mut f = lock(&self.flush);
            f.sequenced = f.sequenced.max(seq);
            f.written_upto = f.written_upto.max(seq);
        }
        Ok(Some(others))
    }
}

/// Where the chain stands while `follow_chain` reads it, written to
/// `Meta` only once the records read so far are applied (an error leaves `Meta` as it
/// was), with the buffer its records are read into.
struct ChainPosition {
    head: u64,
    prev_crc: u32,
    window_end: u64,
    log_bytes: u64,
    buf: Vec<u8>,
}

impl ChainPosition {
    fn of(meta: &Meta) -> ChainPosition {
        ChainPosition {
            head: meta.head,
            prev_crc: meta.prev_crc,
            window_end: meta.window_end,
            log_bytes: 0,
            buf: Vec::new(),
        }
    }

    /// The record at the head (with its CRC and length) if it is the chain's next after
    /// commit `seq_before` of checkpoint `generation`, naming only slots of a file of
    /// `capacity`; `None` where the chain ends for now.
    fn next_record(
        &mut self,
        io: &dyn StorageIo,
        page_size: u64,
        generation: u64,
        seq_before: u64,
        capacity: u64,
    ) -> Result<Option<(Record, u32, u64)>> {
        let Some((record, crc, len)) = record_at(io, self.head, page_size, capacity, &mut self.buf)? else {
            return Ok(None);
        };
        let in_sequence =
            record.epoch == generation && record.prev_crc == self.prev_crc && record.seq == seq_before + 1;
        let in_file = record.next_slot < record.window_end
            && record.window_end <= capacity
            && record.ops.iter().all(|op| match op {
                Op::Page { slot, .. } => *slot == NO_SLOT || *slot < capacity,
                _ => true,
            });
        Ok((in_sequence && in_file).then_some((record, crc, len)))
    }

    /// Move past `record` (`crc`, `len` bytes), which continues the chain.
    fn pass(&mut self, record: &Record, crc: u32, len: u64, page_size: u64) {
        self.log_bytes += len.div_ceil(page_size) * page_size;
        self.prev_crc = crc;
        self.head = record.next_slot;
        self.window_end = record.window_end;
    }
}

/// What other processes said is settled, from the side file.
#[derive(Clone, Copy)]
struct OthersSettled {
    /// The most any process published as durable (`None`: nobody to ask).
    durable: Option<u64>,
    /// How far commits were shown before they were durable (`synchronous=NORMAL`/`OFF`).
    shown: u64,
}

impl OthersSettled {
    fn read(s: &Sharing) -> Result<OthersSettled> {
        Ok(OthersSettled {
            durable: s.others_durable()?,
            shown: s.others_shown()?,
        })
    }
}
