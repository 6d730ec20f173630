//! Space: free slots for pages, windows for the chain, checkpoints' extents, the reserve
//! that keeps a full disk committable, growing the file, and reusing slots once no
//! checkpoint-to-be and no reader needs them (invariant 6).

use super::shared::{bump, lock, Meta, Shared};
use crate::error::{Error, Result};
use crate::format::{slot_offset, MAX_CHECKPOINT_EXTENTS, SLOT_BASE};
use crate::io::StorageIo;
use crate::options::Sabotage;
use crate::recovery::recover;
use crate::sharing::NO_PIN;
use std::sync::atomic::Ordering;

/// The longest a commit waits for a step grown ahead before it may grow one itself.
const GROWTH_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

/// Bytes of mapping per mapped page a checkpoint merging every run writes, about: a 40-byte
/// entry, the blocks' headers and unused ends, and the inner blocks.
const MAPPING_BYTES_PER_PAGE: u64 = 48;

/// The free slots are given back only once they are at least this fraction (1/N) of the
/// file. A checkpoint's merge frees the blocks of the runs it replaced, up to the whole
/// mapping (about 1 % of the file with 4 KiB pages), at every checkpoint that merges: were
/// those worth a compacting checkpoint, each would rewrite the mapping and move the pages
/// above them, and free as much again for the next (`onesync-lab bench scale --sizes 10G`
/// shows it in its checkpoint KiB).
const GIVE_BACK_DIVISOR: u64 = 16;

impl Shared {
    /// Alone with the store (holding `INIT`, no other process has it open): if this process
    /// joined others, rebuild which slots are free from the file, as the first process's
    /// recovery does, so that it owns every free slot.
    pub(super) fn own_every_free_slot(&self) -> Result<()> {
        let mut meta = self.meta();
        // (A step `grow_ahead` is flushing would read as free slots of zeros.)
        if meta.owns_all_slots || !meta.snapshots.is_empty() || meta.growing_ahead {
            return Ok(());
        }
        let recovered = recover(self.io.as_ref(), &self.mapping, false)?;
        if recovered.state.seq != meta.state.seq || recovered.header.generation != meta.header.generation {
            // Someone's commit or checkpoint this process has not read (its state would lie
            // on an older base than the header installed here): leave the space as it is.
            return Ok(());
        }
        let last = recovered.state.seq;
        meta.header = recovered.header;
        meta.alloc = recovered.alloc;
        meta.awaiting_checkpoint = recovered
            .awaiting_checkpoint
            .into_iter()
            .map(|slot| (last, slot))
            .collect();
        meta.awaiting_readers.clear();
        meta.moved_awaiting_readers.clear();
        meta.free_baseline = recovered.free_baseline;
        meta.freed_since = recovered.freed_since;
        meta.head = recovered.head;
        meta.window_end = recovered.window_end;
        meta.prev_crc = recovered.prev_crc;
        meta.owns_all_slots = true;
        Ok(())
    }

    /// Give back checkpointed slots that no snapshot, of this process or another, can
    /// read any more.
    pub(super) fn release_unread(&self, meta: &mut Meta) {
        if meta.awaiting_readers.is_empty() && meta.moved_awaiting_readers.is_empty() {
            return;
        }
        let own = meta.snapshots.keys().next().copied().unwrap_or(NO_PIN);
        // Unreadable pins keep everything (a slot held too long costs only space).
        let others = match &self.sharing {
            Some(s) => s.others_oldest_pin().unwrap_or(0),
            None => NO_PIN,
        };
        let oldest_reader = own.min(others);
        let Meta {
            awaiting_readers,
            moved_awaiting_readers,
            alloc,
            ..
        } = meta;
        for waiting in [awaiting_readers, moved_awaiting_readers] {
            waiting.retain(|&(superseded_at, slot)| {
                // A reader at seq s reads the slot only if it was superseded after s.
                let still_read = oldest_reader < superseded_at;
                if !still_read {
                    alloc.release(slot, 1);
                }
                still_read
            });
        }
    }

    /// How many slots the file holds now.
    pub(super) fn file_capacity(&self) -> Result<u64> {
        let len = self
            .io
            .size()
            .map_err(|e| Error::io("reading the store's length", e))?;
        Ok(len.saturating_sub(SLOT_BASE) / self.page_size)
    }

    /// Free slots that commits adding pages must leave, so that on a full disk commits
    /// that shrink the store, and the checkpoints that free space, still find room.
    fn reserve(&self, meta: &Meta) -> u64 {
        let pages = meta.state.mapped_pages() + 4 * meta.state.files.len() as u64;
        // About what the largest checkpoint of the current mapping takes: one merging every
        // run, 40-byte entries in blocks with their inner blocks beside (format version 2).
        8 + (pages * MAPPING_BYTES_PER_PAGE).div_ceil(self.page_size)
    }

    /// The slots this process allocates from, against which growth steps and windows are
    /// measured: the whole file when it owns every free slot, else only what it grew itself
    /// (a process that joined others would otherwise grow by a share of their file).
    fn space_base(&self, meta: &Meta) -> u64 {
        if meta.owns_all_slots {
            meta.alloc.capacity()
        } else {
            meta.grown_here
        }
    }

    /// Make room for `at_least` more slots: on a large file a checkpoint that frees
    /// superseded slots comes first (`Options::reclaims_before_growing`), then the file
    /// grows; when the medium is full, a checkpoint is tried after all. `fits` says whether
    /// what a checkpoint freed will do.
    fn make_room(&self, meta: &mut Meta, at_least: u64, fits: impl Fn(&Self, &Meta) -> bool) -> Result<()> {
        let mut reclaimed = false;
        if self.reclaim_pays(meta, at_least) {
            reclaimed = self.reclaim(meta)?;
            if reclaimed && fits(self, meta) {
                return Ok(());
            }
        }
        match self.grow(meta, at_least) {
            Err(Error::NoSpace) if !reclaimed => {
                if self.reclaim(meta)? && fits(self, meta) {
                    Ok(())
                } else {
                    Err(Error::NoSpace)
                }
            }
            grown => grown,
        }
    }

    /// After a commit took slots for pages: keep the reserve, growing the file if need be.
    pub(super) fn keep_reserve(&self, meta: &mut Meta) -> Result<()> {
        let reserve = self.reserve(meta);
        if meta.alloc.free_count() < reserve {
            self.make_room(meta, reserve, |s, m| m.alloc.free_count() >= s.reserve(m))?;
        }
        Ok(())
    }

    /// Take one free slot for a page (one a large transaction spills early, or one that did
    /// not fit next to its commit record), checkpointing or growing the file if need be.
    pub(super) fn alloc_slot(&self, meta: &mut Meta) -> Result<u64> {
        let reserve = self.reserve(meta);
        if meta.alloc.free_count() > reserve {
            if let Some(slot) = meta.alloc.take_run(1) {
                return Ok(slot);
            }
        }
        // After a checkpoint any free slot will do (the reserve is kept after the commit).
        self.make_room(meta, reserve + 1, |_, m| m.alloc.free_count() > 0)?;
        meta.alloc
            .take_run(1)
            .ok_or_else(|| Error::Corrupt("no free slot after growing".into()))
    }

    pub(super) fn alloc_run(&self, meta: &mut Meta, n: u64) -> Result<u64> {
        if let Some(first) = meta.alloc.take_run(n) {
            return Ok(first);
        }
        self.grow(meta, n)?;
        meta.alloc
            .take_run(n)
            .ok_or_else(|| Error::Corrupt("no free run after growing".into()))
    }

    /// Slots for a checkpoint of `n` slots: one run if there is one, else the fewest runs
    /// (longest first) the header can list, else grow the file.
    pub(super) fn alloc_extents(&self, meta: &mut Meta, n: u64) -> Result<Vec<(u64, u64)>> {
        if let Some(first) = meta.alloc.take_run(n) {
            return Ok(vec![(first, n)]);
        }
        if meta.alloc.free_count() >= n {
            let mut extents = Vec::new();
            let mut missing = n;
            while missing > 0 && extents.len() < MAX_CHECKPOINT_EXTENTS {
                let Some((first, got)) = meta.alloc.take_largest(missing) else {
                    break;
                };
                extents.push((first, got));
                missing -= got;
            }
            if missing == 0 {
                return Ok(extents);
            }
            for (first, got) in extents {
                meta.alloc.release(first, got);
            }
        }
        Ok(vec![(self.alloc_run(meta, n)?, n)])
    }

    /// Reserve a run for the records and pages that follow: a full window if one is free,
    /// else the largest free run of at least `min` slots, else make room (a checkpoint on
    /// a large file, else growth) and take one.
    pub(super) fn new_window(&self, meta: &mut Meta, min: u64) -> Result<(u64, u64)> {
        let want = self.opts.window_slots(self.space_base(meta)).max(min);
        let take = |meta: &mut Meta| {
            if let Some(first) = meta.alloc.take_run(want) {
                return Some((first, first + want));
            }
            if meta.alloc.largest_run() >= min {
                return meta
                    .alloc
                    .take_largest(want)
                    .map(|(first, len)| (first, first + len));
            }
            None
        };
        if let Some(window) = take(meta) {
            return Ok(window);
        }
        self.make_room(meta, want, |_, m| m.alloc.largest_run() >= min)?;
        take(meta).ok_or_else(|| Error::Corrupt("no free run after growing".into()))
    }

    /// Whether a checkpoint before growing (on a file of `Options::max_growth_step` or more)
    /// would free enough to be worth it: a quarter of the step it spares, and what is asked
    /// for. Each such checkpoint writes the whole mapping inside the commit's locks, and
    /// takes a run of slots for it, often by growing the file after all. When commits
    /// mostly add pages, it freed a few scattered slots each time, and these checkpoints,
    /// with the steps they grew inside the locks, were a large share of the CPU (`perf
    /// record -a -g -- onesync-lab bench writers --workload own-rows --threads 16 --txns
    /// 40000`).
    fn reclaim_pays(&self, meta: &Meta, at_least: u64) -> bool {
        let base = self.space_base(meta);
        let spared = self.opts.growth_slots(base, at_least);
        self.opts.reclaims_before_growing(base)
            && meta.awaiting_checkpoint.len() as u64 >= (spared / 4).max(at_least)
    }

    /// Before growing the file, free what a checkpoint would free. Returns whether it ran.
    fn reclaim(&self, meta: &mut Meta) -> Result<bool> {
        if meta.awaiting_checkpoint.is_empty() {
            return Ok(false);
        }
        self.checkpoint_locked(meta)?;
        Ok(true)
    }

    /// Extend the file by one step (`Options::growth_slots`) of zeros and flush the new
    /// length, before any commit can be given the new slots: a commit's own write then
    /// never extends the file, so its flush carries no filesystem metadata. A power cut
    /// before the flush completes leaves the old length or a longer one of zeros (or torn
    /// zeros) past every slot in use, which recovery counts as free.
    fn grow(&self, meta: &mut Meta, at_least: u64) -> Result<()> {
        self.with_writer(meta, |meta| self.grow_holding_writer(meta, at_least))
    }

    fn grow_holding_writer(&self, meta: &mut Meta, at_least: u64) -> Result<()> {
        let (old, new) = self.claim_growth(meta, at_least)?;
        self.fill_growth(old, new)?;
        self.flush_growth()?;
        bump(&self.counters.growths_holding_locks, 1);
        self.hand_out_growth(meta, old, new);
        Ok(())
    }

    /// After a commit of `slots` slots (record and pages) is written and its writer claim
    /// let go: if another like it would leave fewer free slots than the reserve, grow the
    /// file now rather than inside that commit. Under the write lock (every process grows
    /// at the file's end) only the step's last slot is written, which sets the file's new
    /// length; the rest of the zeros and the flush follow after it is let go and outside
    /// `meta`, so that other processes and threads commit meanwhile (writing a step's zeros
    /// under both had every commit wait behind up to a megabyte of them); the slots are
    /// handed out once the flush returned. Meanwhile the step reads as zeros (a hole until
    /// its zeros land), is counted used by every process, and is never handed out, so
    /// nobody writes in it; a process that dies before the end leaves it to recovery, which
    /// counts unreferenced slots free. (A process owning every free slot grows only a
    /// commit or two early, so its file and bytes written stay as they were; see
    /// `grow_ahead_due`.)
    pub(super) fn grow_ahead(&self, slots: u64) -> Result<()> {
        let (old, new) = {
            let mut meta = self.meta();
            let reserve = self.reserve(&meta);
            if meta.growing_ahead || !self.grow_ahead_due(&meta, slots, reserve) {
                return Ok(());
            }
            let claimed = self.with_writer(&mut meta, |meta| self.claim_growth(meta, reserve))?;
            meta.growing_ahead = true;
            claimed
        };
        let flushed = self.fill_growth(old, new).and_then(|()| self.flush_growth());
        let mut meta = self.meta();
        meta.growing_ahead = false;
        // A failed write or flush (which poisoned the store) leaves the step's slots unused.
        if flushed.is_ok() {
            self.hand_out_growth(&mut meta, old, new);
        }
        self.growth_landed.notify_all();
        flushed
    }

    /// Before a commit of about `slots` slots queues for the locks: if the free room might
    /// not hold it and a step is being grown ahead, wait for that step (at most
    /// `GROWTH_WAIT`) rather than grow another inside the locks, where every other commit
    /// and every new transaction of this process waits for its zeros and flush, the cores
    /// idle meanwhile (`perf record -e sched:sched_switch -a -g -- onesync-lab bench writers
    /// --threads 16`);
    /// then grow a step that is due and not under way, also outside the locks. A failure to
    /// grow here is met again, and reported, inside the commit.
    pub(super) fn room_before_commit(&self, slots: u64) {
        // Only read here: the plain guard, which the condvar takes. One look at `meta` when
        // nothing is to be done, as for most commits.
        let meta = lock(&self.meta);
        let (meta, _) = self
            .growth_landed
            .wait_timeout_while(meta, GROWTH_WAIT, |meta| {
                meta.growing_ahead && self.short_of_room(meta, slots)
            })
            .unwrap_or_else(|e| e.into_inner());
        let due = !meta.growing_ahead && self.grow_ahead_due(&meta, slots, self.reserve(&meta));
        drop(meta);
        if due {
            let _ = self.grow_ahead(slots);
        }
    }

    /// Whether sequencing a commit of `slots` slots (record and pages) might find no room
    /// without growing: too few free slots to leave the reserve, or too little left in the
    /// current window and no free run for one like it (`sequence`).
    fn short_of_room(&self, meta: &Meta, slots: u64) -> bool {
        let like_this = slots.max(2) + 1;
        meta.alloc.free_count() < self.reserve(meta) + slots
            || (meta.window_end.saturating_sub(meta.head) < 2 * like_this
                && meta.alloc.largest_run() < like_this)
    }

    /// Whether a commit of `slots` slots would find too few free slots to leave `reserve`,
    /// or no free run for its next window, unless a checkpoint would free room first
    /// (`reclaim_pays`: `make_room` checkpoints then). A process that joined others also
    /// counts the next window it may take: it grows its own small steps often, and each one
    /// inside a commit holds up every process.
    ///
    /// A window must hold a record and its pages and one slot more (`sequence`), and the
    /// next commit may be larger than this one (an embedded page makes its record two
    /// slots), or several may sequence before the next check: twice that, so that no
    /// commit grows the file inside its locks. Asking for a run of `slots` only, most steps
    /// of `growth::a_store_grows_ahead_of_its_commits_not_inside_them` were grown inside
    /// them, each stalling every writer.
    fn grow_ahead_due(&self, meta: &Meta, slots: u64, reserve: u64) -> bool {
        let base = self.space_base(meta);
        let large = self.opts.reclaims_before_growing(base);
        if large && self.reclaim_pays(meta, slots) {
            return false;
        }
        let window = if meta.owns_all_slots {
            0
        } else {
            self.opts.window_slots(base)
        };
        // A large file's steps are large (16-64 MiB), and commits take slots meanwhile:
        // start one once a quarter of a step is left in the longest run.
        let lead = if large {
            self.opts.growth_slots(base, 0) / 4
        } else {
            0
        };
        meta.alloc.free_count() < reserve + slots + window
            || meta.alloc.largest_run() < (2 * (slots.max(2) + 1)).max(lead)
    }

    /// Claim one growth step past the file's end (at least `at_least` slots): write its
    /// last slot of zeros, which sets the file's new length (under the write lock: every
    /// process grows at the file's end), and count the step in the allocator's capacity,
    /// not yet free. Returns the slots `old..new`; [`Shared::fill_growth`] writes the
    /// rest, [`Shared::flush_growth`] makes them durable, then they are handed out.
    fn claim_growth(&self, meta: &mut Meta, at_least: u64) -> Result<(u64, u64)> {
        let mut old = meta.alloc.capacity();
        if self.sharing.is_some() {
            // Other processes grow the file too: the new slots start at its end now.
            let len = self
                .io
                .size()
                .map_err(|e| Error::io("reading the store's length", e))?;
            let now = len.saturating_sub(SLOT_BASE) / self.page_size;
            if now > old {
                meta.alloc.extend_used(now);
                old = now;
            }
        }
        let step = self.opts.growth_slots(self.space_base(meta), at_least);
        let new = old + step;
        if !self.opts.sabotaged(Sabotage::LazyGrowth) {
            write_zeros(
                self.io.as_ref(),
                slot_offset(new - 1, self.page_size),
                slot_offset(new, self.page_size),
            )?;
        }
        meta.alloc.extend_used(new);
        Ok((old, new))
    }

    /// Write the zeros of a claimed step `old..new` but its last slot (`claim_growth`'s).
    fn fill_growth(&self, old: u64, new: u64) -> Result<()> {
        if self.opts.sabotaged(Sabotage::LazyGrowth) {
            return Ok(());
        }
        write_zeros(
            self.io.as_ref(),
            slot_offset(old, self.page_size),
            slot_offset(new - 1, self.page_size),
        )
    }

    /// Flush a growth step's zeros and the file's new length.
    fn flush_growth(&self) -> Result<()> {
        if self.opts.sabotaged(Sabotage::LazyGrowth) {
            return Ok(());
        }
        if let Err(e) = self.io.sync_data() {
            // Like any failed flush ("fsyncgate"): the kernel may have dropped the
            // unflushed pages of commits written meanwhile, and will not say so again.
            if !self.opts.sabotaged(Sabotage::GrowthFlushFailureIgnored) {
                self.poison(format!("flushing a growth step failed: {e}"));
            }
            return Err(Error::io("flushing the grown store file", e));
        }
        bump(&self.counters.flushes, 1);
        Ok(())
    }

    /// After a checkpoint (holding the write lock): give the free slots at the file's end
    /// back to the filesystem, keeping the reserve and one growth step's room free, so
    /// that large deletes and VACUUM shrink the file. Only a process alone with the store
    /// (no other process has it open, read-only ones included, and none can arrive: `INIT`
    /// is held) that owns every free slot and knows every slot of the file does it, so no
    /// slot another process may read, write or hand out is cut. Every slot cut is free:
    /// named by neither header copy (both name the checkpoint just made durable), nor by
    /// a record after it, nor by the window reserved for the next records, and no snapshot
    /// reads it (`release_unread`). So a crash that keeps or loses the cut recovers the same
    /// state, and the flush that follows makes the new length durable before any commit,
    /// whose flush then carries no change of length.
    pub(super) fn give_back_space(&self, meta: &mut Meta) -> Result<()> {
        if self.opts.read_only || !meta.owns_all_slots || meta.growing_ahead {
            return Ok(());
        }
        let Some(slack) = self.worth_giving_back(meta) else {
            return Ok(());
        };
        let _init = match &self.sharing {
            Some(s) if !self.closing_alone.load(Ordering::Relaxed) => match s.try_lock_init_alone()? {
                Some(guard) => Some(guard),
                None => return Ok(()),
            },
            _ => None,
        };
        if self.file_capacity()? != meta.alloc.capacity() {
            return Ok(());
        }
        if self
            .cut_point(meta, slack)
            .is_none_or(|cut| cut > self.compacted_size(meta) + slack)
        {
            // Live slots in the file's upper part (the chain's window, pages written while
            // superseded slots waited for a checkpoint): move them down first.
            self.checkpoint_holding_writer(meta, true)?;
            if self
                .cut_point(meta, slack)
                .is_none_or(|cut| cut > self.compacted_size(meta) + slack)
            {
                // The mapping that checkpoint wrote went above the old window, which was
                // freed only once its header was durable: once more, into the slots freed.
                self.checkpoint_holding_writer(meta, true)?;
            }
        }
        let Some(new_capacity) = self.cut_point(meta, slack) else {
            return Ok(());
        };
        let len = slot_offset(new_capacity, self.page_size);
        match self.io.set_len(len) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Unsupported => return Ok(()),
            Err(e) => return Err(Error::io("shortening the store file", e)),
        }
        // The slots are gone from the file whether or not this flush completes.
        let cut = meta.alloc.shrink_to(new_capacity);
        meta.grown_here = meta.grown_here.saturating_sub(cut);
        if let Err(e) = self.io.sync_data() {
            self.poison(format!("flushing the shortened store file failed: {e}"));
            return Err(Error::io("flushing the shortened store file", e));
        }
        bump(&self.counters.flushes, 1);
        bump(&self.counters.bytes_returned, cut * self.page_size);
        Ok(())
    }

    /// The room kept free when the file shrinks beyond the reserve: the smallest growth
    /// step (`growth_step`), so that a store that shrinks and grows back by a little does
    /// not alternate the two, and the overhead stays fixed, not a share of the store. Some
    /// if the free slots, with the part of the chain's window a compacted store would not
    /// keep, leave at least twice that to give back, and are at least a sixteenth of the
    /// file (`GIVE_BACK_DIVISOR`).
    fn worth_giving_back(&self, meta: &Meta) -> Option<u64> {
        let slack = self.opts.growth_slots(0, 0);
        let window = meta.window_end.saturating_sub(meta.head);
        let reclaimable = meta.alloc.free_count() + window.saturating_sub(self.compacted_window(meta));
        let worth = reclaimable >= self.reserve(meta) + 2 * slack
            && reclaimable >= meta.alloc.capacity() / GIVE_BACK_DIVISOR;
        worth.then_some(slack)
    }

    /// Live slots but the chain's window and the slots waiting for readers (free soon).
    pub(super) fn live_slots(&self, meta: &Meta) -> u64 {
        let window = meta.window_end.saturating_sub(meta.head);
        (meta.alloc.capacity() - meta.alloc.free_count())
            .saturating_sub(window + (meta.awaiting_readers.len() + meta.moved_awaiting_readers.len()) as u64)
    }

    /// The window a compacting checkpoint gives the chain: sized for the store it leaves,
    /// and at most the smallest growth step, so that the fixed overhead stays small (a
    /// commit that needs more takes a new window, as any does).
    pub(super) fn compacted_window(&self, meta: &Meta) -> u64 {
        let live = self.live_slots(meta);
        let slack = self.opts.growth_slots(0, 0);
        self.opts.window_slots(live + slack).min(slack).max(2)
    }

    /// About the slots a compacting checkpoint would leave: the live ones but the
    /// window, a window sized for them, the reserve and a growth step free.
    fn compacted_size(&self, meta: &Meta) -> u64 {
        self.live_slots(meta)
            + self.compacted_window(meta)
            + self.opts.growth_slots(0, 0)
            + self.reserve(meta)
    }

    /// Where to cut the file: after its last live slot, keeping the reserve and `slack`
    /// free; `None` if that would give back less than `slack`.
    fn cut_point(&self, meta: &Meta, slack: u64) -> Option<u64> {
        let capacity = meta.alloc.capacity();
        let keep = self.reserve(meta) + slack;
        let new_capacity = meta
            .alloc
            .free_tail_start()
            .max(capacity.saturating_sub(meta.alloc.free_count().saturating_sub(keep)));
        (capacity.saturating_sub(new_capacity) >= slack).then_some(new_capacity)
    }

    /// The flushed step `old..new` becomes free slots of this process.
    fn hand_out_growth(&self, meta: &mut Meta, old: u64, new: u64) {
        if !self.opts.sabotaged(Sabotage::LazyGrowth) {
            bump(&self.counters.bytes_preallocated, (new - old) * self.page_size);
        }
        bump(&self.counters.growths, 1);
        meta.grown_here += new - old;
        meta.alloc.release(old, new - old);
    }
}

/// Zeros to write from: static, so a growth step costs no buffer to allocate and clear
/// (a step's last slot alone, claimed under the write lock, cleared a megabyte each time).
/// Its size is that of each write of a step's zeros: 128 KiB, where 1 MiB writes held up
/// the commits writing and flushing beside them (blocked in fdatasync and in the inode's
/// lock: `perf record -e sched:sched_switch -g -- onesync-lab bench writers --workload
/// own-rows --threads 16 --fs ext4 --mode onesync-concurrent`).
static ZEROS: [u8; 128 << 10] = [0; 128 << 10];

pub(crate) fn write_zeros(io: &dyn StorageIo, from: u64, to: u64) -> Result<()> {
    let mut at = from;
    while at < to {
        let n = (to - at).min(ZEROS.len() as u64);
        io.write_at(&ZEROS[..n as usize], at)
            .map_err(|e| Error::io("preallocating the store file", e))?;
        at += n;
    }
    Ok(())
}
