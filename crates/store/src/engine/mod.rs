//! The engine: sequencing, space, checkpoints, catch-up with other processes and group
//! commit, behind one entry, [`Shared::commit`]. The facade (`store.rs`) opens and creates;
//! transactions (`txn.rs`) build operations; everything that moves the commit chain, the
//! allocator or the durable/visible states happens here.
//!
//! # Invariants
//!
//! Numbered as [`Shared::debug_assert_invariants`] cites them. Every one holds whenever the
//! `meta` lock is free; "checked" ones are asserted in debug builds (and release builds with
//! the feature `invariants`) each time it is released (the [`MetaGuard`](shared::MetaGuard)
//! does it), the others are kept by the code named.
//!
//! 1. **`durable <= written_upto <= sequenced <= meta.state.seq`** (`FlushState`). A
//!    commit is sequenced (given its place in the chain) before it is written, and written
//!    before a flush can cover it; `written_ahead` holds only sequence numbers in
//!    `written_upto + 1 ..= sequenced`. Checked.
//! 2. **`readable.seq <= visible.seq <= state.seq`.** `state` is the latest sequenced
//!    state (commits are checked against it), `visible` the latest whose commits and all
//!    before them are *written* (new transactions begin on it), `readable` the latest whose
//!    commits are all *durable* (snapshots show it). Checked.
//! 3. **What "visible" means.** `unpublished` holds exactly the states sequenced but not yet
//!    visible (keys in `visible.seq + 1 ..= state.seq`), `not_durable` those visible but not
//!    yet readable (keys in `readable.seq + 1 ..= visible.seq`); each moves on only when the
//!    whole prefix before it has (`mark_written`, `promote_readable`). A `not_durable`
//!    entry kept as operations (`Kept::Ops`, another process's commit) comes right after
//!    the entry before it, or after `readable`: its state is that one's with the
//!    operations applied, built only when readers are shown it. Checked.
//! 4. **Nothing shown that is not durable, unless its committer deferred durability.** On a
//!    store no other process shares, `readable.seq <= max(durable, shown_written_upto)`: no
//!    snapshot shows a commit before a flush of this process covered it, except commits
//!    shown once written (`PendingCommit::show`, SQLite's `synchronous=NORMAL`/`OFF`) and
//!    those before them; a background flush makes those durable within
//!    `Options::deferred_flush_interval` (`deferred.rs`). With sharing, `readable` may also rise to what another process published
//!    as durable (`Sharing::others_durable`) or to what this process flushed itself after
//!    reading it. Checked without sharing.
//! 5. **The side file is a hint.** A reader may trust its progress to skip reading the
//!    chain (writers publish progress before writing a record, and a checkpoint before its
//!    header); a writer never does: holding the write lock it reads the header and the
//!    record at the chain's head from the store file (`catch_up::follow_chain`). Pins read
//!    from it only hold slots back (an unreadable pin holds everything); losing it loses
//!    nothing. One word is trusted further: a follower does not read back the pages of a
//!    record at or below the *written* word (`follow_chain`), because it is raised only
//!    after a commit's writes returned and reset whenever a process opens the store first
//!    (after any crash), so it never covers a record whose pages are not in the file.
//!    Kept by `follow_chain` and `release_unread`.
//! 6. **Slots are reused only after a durable checkpoint.** A slot superseded (or holding a
//!    record) at commit `s` waits in `awaiting_checkpoint` until a checkpoint covering `s`
//!    is durable in both header copies, then in `awaiting_readers` until no snapshot of any
//!    process reads a commit before `s`; only then is it free. So every `awaiting_readers`
//!    entry has `s <= header.checkpoint.seq`, and no waiting slot is free in the allocator.
//!    (The slots a compacting checkpoint copied pages out of, the blocks of the mapping's
//!    runs a checkpoint replaced, and, with sharing, the old manifest's slots wait apart,
//!    in `moved_awaiting_readers` keyed at the checkpoint's seq + 1, for the snapshots of
//!    the checkpoint's own commit, the states on the old base, and a process loading the
//!    old manifest, which may have the seq of the new one after a compacting checkpoint.)
//!    Checked.
//! 7. **The chain's head is reserved.** `head < window_end`, and the slots `head ..
//!    window_end` (where the next records and pages go), and those of the checkpoint the
//!    header names, are not free. The header's checkpoint covers no commit past `state`:
//!    `header.checkpoint.seq <= state.seq`. Checked.
//! 8. **Poison is final.** Once a write or flush of a commit or checkpoint fails,
//!    `poisoned` is set and never cleared: nothing is sequenced after it (`sequence` checks
//!    it first) and no waiter is told its commit is durable unless a flush already covered
//!    it. Kept by `poison` and `wait_durable`.
//! 9. **The write lock follows the claims.** With sharing, `WriterClaims::held` is true
//!    exactly while `claims > 0` (commits being sequenced or written, checkpoints, growth);
//!    without sharing it is never taken. Every sequencing, checkpoint and growth of a shared
//!    store happens under it, after catching up: `catch_up_due` is set when the lock is
//!    taken and cleared by the first claimant to reach `meta` (any thread's, not only the
//!    one that took the lock), so nothing is sequenced on a state that misses another
//!    process's commits. Checked when the `writer` lock is released.
//! 10. **Snapshots are counted.** `meta.snapshots` holds a count above zero for each
//!     sequence number some live snapshot (or transaction base) shows, never past `state`.
//!     Checked.
//! 11. **Every slot handed out is inside the file's flushed length.** A growth step's
//!     slots count in the allocator's capacity once its zeros are written, but become
//!     free only after they are flushed (`claim_growth`, then `hand_out_growth`), so no
//!     commit's write extends the file or lands in a never-written extent, and its one
//!     flush carries no filesystem metadata. Steps are geometric (a quarter of the slots
//!     the process allocates from, `Options::growth_step` to `max_growth_step`), so growth
//!     flushes are few (about a dozen to reach 8 MiB). A step is taken by `grow_ahead`
//!     where it can, once a commit is written and its write lock let go, so that the
//!     flush holds up no other process; a commit that still finds no room grows inside
//!     the lock (`grow_holding_writer`).
//! 12. **A state's base is the newest checkpoint it knows.** Each state lays the pages
//!     changed since its base (`State::base`, the mapping of the checkpoint it was
//!     rebased on) over it: `base.seq <= state.seq`, and once a checkpoint the process
//!     wrote or followed covers `state.seq`, the latest state is rebased on it
//!     (`rebase_on_checkpoint`), so that a checkpoint needs only the pages changed since
//!     the last one. On a version-2 checkpoint the base is its runs: the writer's state
//!     is the same files on them with empty deltas (`State::on_runs`), another process's
//!     the state its manifest names. Checked: `state.base.seq` is between the header's
//!     checkpoint and `state.seq`.
//! 13. **A manifest's free slots are exactly what nothing names** (format version 2):
//!     none of the chain's window, the blocks of its runs, its own slots or the pages its
//!     checkpoint's delta maps is among them, and every slot below its total that this
//!     process's allocator holds free is. (That they hold no page of the whole mapping is
//!     the offline check's, `check_file`: looking would cost the mapping's size.) Checked
//!     as each checkpoint builds its manifest (`write_mapping`).
//!
//! # Locks
//!
//! Three mutexes, always taken in this order, none held across a page write or a flush
//! except where the table says: `meta` (bookkeeping: states, allocator, chain position,
//! header, waiting slots, snapshots, pin) → `writer` (this process's claims on the
//! cross-process write lock) → `flush` (group-commit counters, poison). Across processes:
//! the OFD write lock (taken with the first claim, released with the last) and the `INIT`
//! lock (opening and closing take turns).
//!
//! # State table
//!
//! One commit, from transaction to durable, and the calls that move the engine:
//!
//! | state → next | call | locks held | what changes |
//! |---|---|---|---|
//! | begun → holding changes | `Transaction::new` → `note_active_writer(true)` | `flush` | `active_writers += 1` (a flush leader waits for it briefly) |
//! | holding → claimed | `commit` → `claim_writer` | `writer` (+ OFD write lock, first claim) | `claims += 1`, `held` |
//! | claimed → caught up | `commit` → `catch_up` (first claim only) | `meta` (`writer`, `flush` briefly) | other processes' commits and checkpoints read into `state`, `visible`, `not_durable` |
//! | caught up → sequenced | `commit` → `sequence` | `meta`, then `flush` | `state` = new, `unpublished += seq`, `head`/`window_end` move, slots → `awaiting_checkpoint`, `sequenced = seq`; a policy checkpoint may run first |
//! | sequenced → written | `commit`: record + pages `pwrite`, then `mark_written` | none for the writes; `flush`, then `meta` | `written_upto` grows over the contiguous prefix; `unpublished` → `not_durable`, `visible` |
//! | written → released | `commit` drops its `WriterClaim` | `writer` | `claims -= 1`; the last lets the OFD lock go |
//! | written → durable | `PendingCommit::wait` → `wait_durable` (one leader per process; with sharing, one flush at a time across processes under the OFD `FLUSH` lock, skipped when another's covered it) | `flush`; none during `fdatasync`; then `meta` → `flush` | `durable = written_upto` at the flush's start; `not_durable` → `readable`; side file told |
//! | any → poisoned | a failed write or flush → `poison` | `flush` | `poisoned` set; every waiter and later commit fails |
//!
//! And the calls beside commits:
//!
//! | call | locks held | what changes |
//! |---|---|---|
//! | `checkpoint_locked` | `meta` throughout (+ a writer claim); `flush` briefly | waits for every sequenced commit to be written, flushes them, writes the mapping and one header copy, flushes, the other copy, flushes; `awaiting_checkpoint` → `awaiting_readers`; frees what no reader needs |
//! | `register_snapshot` / `forget_snapshot` | `meta` | `snapshots` count, the published pin; dropping the last snapshot of a seq frees slots only it held |
//! | `alloc_slot` / `new_window` / `make_room` | `meta` | the allocator; out of room, `make_room` checkpoints first on a file of `max_growth_step` or more where that frees a quarter of a step (`reclaim_pays`), else grows, and checkpoints after all if the medium is full |
//! | `grow` | `meta` + a writer claim; none released during the zeros and the flush | zeros written past the file's end (where nothing lives), flushed, and only then `alloc.grow`, `grown_here`: a cut before the flush ends leaves slots nobody was given |
//! | `grow_ahead` (after a commit is written, when free slots run low) | `meta` + a writer claim for the zeros; none during the flush; then `meta` | the same, but other processes and threads commit during the flush: the step is in the allocator's capacity, not free (`growing_ahead`), until the flush returns |
//! | `room_before_commit` (before a commit queues for the locks) | `meta`, released while it waits on `growth_landed` for a step under way (at most `GROWTH_WAIT`) | nothing; then `grow_ahead` if a step is due, so that a commit short of room, a joining process's first among them, grows outside the locks |
//! | `close` | `INIT` (shared), then `meta` + a writer claim | a final checkpoint by the last read-write process |
//!
//! Module map: `sequence.rs` gives a commit its place; `space.rs` slots, windows, growth
//! and reuse; `checkpoint.rs` checkpoints and close; `catch_up.rs` other processes and the
//! write lock; `group_commit.rs` written/durable tracking and the shared flush;
//! `commit.rs` the one entry; `invariants.rs` the checks above; `mapping_write.rs` what a
//! checkpoint writes of the mapping (runs, the manifest's free slots).
//! `shared.rs` holds [`Shared`], the state all of them work on, and the types it is made of.

mod catch_up;
mod checkpoint;
mod commit;
mod deferred;
mod group_commit;
mod invariants;
mod mapping_write;
mod recent_pages;
mod sequence;
mod shared;
mod space;

pub(crate) use commit::CommitRequest;
pub use group_commit::PendingCommit;
pub(crate) use shared::{Content, PageKey, Shared, View};
pub(crate) use space::write_zeros;
