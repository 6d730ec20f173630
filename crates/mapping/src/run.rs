//! One run: building it bottom-up from a sorted stream ([`RunBuilder`]), looking a key up,
//! iterating from a key ([`RunIter`]), and listing its blocks.
//!
//! A run is a static B+tree: leaves filled in key order, each level of inner blocks naming
//! the level below, one root. It is written in one pass holding one block per level, and never
//! changed after.

use std::sync::Arc;

use onesync_codec::Writer;

use crate::cache::{corrupt, fetch, Block, Cache};
use crate::format::{
    block_len, check_overlay, encode_inner, encode_leaf, heap_len, inner_capacity, Child, ENTRY_LEN,
    HEADER_LEN, MAX_HEIGHT,
};
use crate::types::{ends_at_first_error, BlockIo, BlockRef, BlockSink, Error, Key, RunRef, Value};

/// Builds a run from entries pushed in increasing key order, writing each block through the
/// sink as it fills.
pub struct RunBuilder {
    slot_size: usize,
    /// The leaf being filled, and the bytes it would use.
    leaf: Vec<(Key, Value)>,
    leaf_used: usize,
    /// The inner block being filled at each level, from level 1 up.
    levels: Vec<Level>,
    entries: u64,
    slots: u64,
    first: Option<Key>,
    last: Option<Key>,
}

#[derive(Default)]
struct Level {
    children: Vec<Child>,
    /// Blocks written at this level so far.
    written: u64,
}

impl RunBuilder {
    /// A builder for slots of `slot_size` bytes.
    ///
    /// # Panics
    /// If `slot_size` is not a power of two in 512..=65536 (the store's page sizes).
    pub fn new(slot_size: usize) -> RunBuilder {
        assert!(
            crate::format::valid_slot_size(slot_size),
            "slot size {slot_size} is not a power of two in 512..=65536"
        );
        RunBuilder {
            slot_size,
            leaf: Vec::new(),
            leaf_used: HEADER_LEN,
            levels: Vec::new(),
            entries: 0,
            slots: 0,
            first: None,
            last: None,
        }
    }

    /// Adds the next entry; keys must strictly increase, and an overlay must be one a leaf
    /// can hold (sorted, disjoint, not adjacent, inside the page, at most 255 ranges).
    pub fn push(&mut self, key: Key, value: Value, sink: &mut dyn BlockSink) -> Result<(), Error> {
        if let Some(last) = self.last.filter(|last| *last >= key) {
            return Err(Error::Corrupt(format!(
                "run entries out of order: {key} pushed after {last}"
            )));
        }
        if let Value::Mapped(m) = &value {
            check_overlay(&m.overlay, self.slot_size)
                .map_err(|why| Error::Corrupt(format!("the entry of {key}: {why}")))?;
        }
        let size = ENTRY_LEN + heap_len(&value);
        // A leaf too full for the entry is written; an entry too large for any leaf gets one
        // of its own, as long as it needs.
        if !self.leaf.is_empty() && self.leaf_used + size > block_len(self.slot_size) {
            self.flush_leaf(sink)?;
        }
        self.leaf.push((key, value));
        self.leaf_used += size;
        self.entries += 1;
        self.first.get_or_insert(key);
        self.last = Some(key);
        Ok(())
    }

    /// Writes what is pending and returns the run, or `None` when nothing was pushed.
    pub fn finish(mut self, sink: &mut dyn BlockSink) -> Result<Option<RunRef>, Error> {
        let (Some(first), Some(last)) = (self.first, self.last) else {
            return Ok(None);
        };
        self.flush_leaf(sink)?;
        let mut level = 1;
        loop {
            let top = level == self.levels.len();
            let pending = &self.levels[level - 1];
            // The one block of the level below is the root.
            if top && pending.written == 0 && pending.children.len() == 1 {
                return Ok(Some(RunRef {
                    root: pending.children[0].block,
                    height: level as u8,
                    entries: self.entries,
                    slots: self.slots,
                    first,
                    last,
                }));
            }
            self.flush_inner(level, sink)?;
            level += 1;
        }
    }

    fn flush_leaf(&mut self, sink: &mut dyn BlockSink) -> Result<(), Error> {
        let Some(&(first, _)) = self.leaf.first() else {
            return Ok(());
        };
        let mut w = Writer::with_capacity(block_len(self.slot_size));
        encode_leaf(&self.leaf, self.slot_size, &mut w);
        let block = self.write(&w.into_bytes(), sink)?;
        self.leaf.clear();
        self.leaf_used = HEADER_LEN;
        self.add_child(1, Child { first, block }, sink)
    }

    /// Adds a child to the inner block pending at `level`, writing that block first if full.
    fn add_child(&mut self, level: usize, child: Child, sink: &mut dyn BlockSink) -> Result<(), Error> {
        if level >= usize::from(MAX_HEIGHT) {
            return Err(Error::Corrupt(format!("a run of more than {MAX_HEIGHT} levels")));
        }
        if self.levels.len() < level {
            self.levels.push(Level::default());
        }
        if self.levels[level - 1].children.len() == inner_capacity(self.slot_size) {
            self.flush_inner(level, sink)?;
        }
        self.levels[level - 1].children.push(child);
        Ok(())
    }

    fn flush_inner(&mut self, level: usize, sink: &mut dyn BlockSink) -> Result<(), Error> {
        let children = std::mem::take(&mut self.levels[level - 1].children);
        let Some(first) = children.first().map(|c| c.first) else {
            return Ok(());
        };
        let mut w = Writer::with_capacity(block_len(self.slot_size));
        encode_inner(level as u8, &children, self.slot_size, &mut w);
        let block = self.write(&w.into_bytes(), sink)?;
        // The vector is reused for the level's next block.
        let pending = &mut self.levels[level - 1];
        pending.children = children;
        pending.children.clear();
        pending.written += 1;
        self.add_child(level + 1, Child { first, block }, sink)
    }

    fn write(&mut self, bytes: &[u8], sink: &mut dyn BlockSink) -> Result<BlockRef, Error> {
        let slots = (bytes.len() / self.slot_size) as u32;
        let crc = crc32c::crc32c(bytes);
        let slot = sink.place(bytes)?;
        self.slots += u64::from(slots);
        Ok(BlockRef { slot, slots, crc })
    }
}

/// The level of a run's root block.
fn root_level(run: &RunRef) -> u8 {
    run.height.saturating_sub(1)
}

/// Requires a block's first key to be the one its parent (or the run ref) names for it.
fn check_first(at: BlockRef, block: &Block, expected: Key) -> Result<(), Error> {
    let first = match block.level() {
        0 => block.leaf(at)?.key(0),
        _ => block.inner(at)?.child(0).first,
    };
    if first != expected {
        return Err(corrupt(
            at,
            format!("its first key is {first}, its parent names {expected}"),
        ));
    }
    Ok(())
}

impl RunRef {
    /// What the run holds for `key` (a tombstone is `Some(Value::Dropped { seq })`); reads one
    /// block per level, none when `key` is outside `[first, last]`.
    pub fn get(&self, key: Key, io: &dyn BlockIo, cache: &Cache) -> Result<Option<Value>, Error> {
        if key < self.first || key > self.last {
            return Ok(None);
        }
        let (mut at, mut level, mut first) = (self.root, root_level(self), self.first);
        loop {
            let block = fetch(io, Some(cache), at, level)?;
            check_first(at, &block, first)?;
            if level == 0 {
                let leaf = block.leaf(at)?;
                return Ok(leaf.search(key).ok().map(|i| leaf.value(i)));
            }
            let inner = block.inner(at)?;
            let child = inner.child(inner.child_for(key));
            (at, level, first) = (child.block, level - 1, child.first);
        }
    }

    /// The run's entries from `from` on, in key order, read block by block (through `cache`,
    /// or around it with `None`, as a merge does).
    pub fn iter_from<'a>(&self, from: Key, io: &'a dyn BlockIo, cache: Option<&'a Cache>) -> RunIter<'a> {
        RunIter::new(*self, from, None, io, cache)
    }

    /// The run's entries in `[from, to)`, in key order; stops without reading the leaf that
    /// starts at or past `to`.
    pub fn iter_range<'a>(
        &self,
        from: Key,
        to: Key,
        io: &'a dyn BlockIo,
        cache: Option<&'a Cache>,
    ) -> RunIter<'a> {
        RunIter::new(*self, from, Some(to), io, cache)
    }

    /// Every block of the run: the root, the inner blocks level by level, then the leaves.
    /// Reads the inner blocks only.
    pub fn blocks(&self, io: &dyn BlockIo, cache: Option<&Cache>) -> Result<Vec<BlockRef>, Error> {
        let mut out = vec![self.root];
        let mut level_start = 0;
        for level in (1..=root_level(self)).rev() {
            let level_end = out.len();
            for i in level_start..level_end {
                let at = out[i];
                let block = fetch(io, cache, at, level)?;
                let inner = block.inner(at)?;
                out.extend((0..inner.len()).map(|c| inner.child(c).block));
            }
            level_start = level_end;
        }
        Ok(out)
    }
}

/// A run's entries in key order, from a key on (and up to one, for ranges). Holds one block
/// per level. After an error it ends.
pub struct RunIter<'a> {
    run: RunRef,
    from: Key,
    to: Option<Key>,
    io: &'a dyn BlockIo,
    cache: Option<&'a Cache>,
    /// The inner blocks from the root down to the leaf's parent, each with the index of the
    /// child being walked.
    path: Vec<(BlockRef, Arc<Block>, usize)>,
    /// The leaf being walked and the index of its next entry.
    leaf: Option<(BlockRef, Arc<Block>, usize)>,
    started: bool,
    done: bool,
    previous: Option<Key>,
    /// Every block read, when recording (a merge frees what it read).
    recorded: Option<Vec<BlockRef>>,
}

impl<'a> RunIter<'a> {
    fn new(
        run: RunRef,
        from: Key,
        to: Option<Key>,
        io: &'a dyn BlockIo,
        cache: Option<&'a Cache>,
    ) -> RunIter<'a> {
        RunIter {
            run,
            from,
            to,
            io,
            cache,
            path: Vec::new(),
            leaf: None,
            started: false,
            done: false,
            previous: None,
            recorded: None,
        }
    }

    /// Records every block the iterator reads (all of the run's, when it is walked whole).
    pub(crate) fn recording(mut self) -> RunIter<'a> {
        self.recorded = Some(Vec::new());
        self
    }

    /// The blocks read, when recording.
    pub(crate) fn into_recorded(self) -> Vec<BlockRef> {
        self.recorded.unwrap_or_default()
    }

    /// Reads `at` at `level`, checks its first key, and walks down its leftmost path (or
    /// toward `seek`) to a leaf.
    fn descend(
        &mut self,
        mut at: BlockRef,
        mut level: u8,
        mut first: Key,
        seek: Option<Key>,
    ) -> Result<(), Error> {
        loop {
            let block = fetch(self.io, self.cache, at, level)?;
            if let Some(recorded) = &mut self.recorded {
                recorded.push(at);
            }
            check_first(at, &block, first)?;
            if level == 0 {
                let index = match seek {
                    Some(key) => block.leaf(at)?.search(key).unwrap_or_else(|i| i),
                    None => 0,
                };
                self.leaf = Some((at, block, index));
                return Ok(());
            }
            let inner = block.inner(at)?;
            let index = seek.map_or(0, |key| inner.child_for(key));
            let child = inner.child(index);
            self.path.push((at, block, index));
            (at, level, first) = (child.block, level - 1, child.first);
        }
    }

    fn advance(&mut self) -> Result<Option<(Key, Value)>, Error> {
        if !self.started {
            self.started = true;
            let run = self.run;
            if self.from > run.last || self.to.is_some_and(|to| to <= run.first) {
                return Ok(None);
            }
            self.descend(run.root, root_level(&run), run.first, Some(self.from))?;
        }
        loop {
            if let Some((at, block, index)) = &mut self.leaf {
                let leaf = block.leaf(*at)?;
                if *index < leaf.len() {
                    let key = leaf.key(*index);
                    if self.to.is_some_and(|to| key >= to) {
                        return Ok(None);
                    }
                    let value = leaf.value(*index);
                    *index += 1;
                    if self.previous.is_some_and(|p| p >= key) || key > self.run.last {
                        return Err(corrupt(*at, format!("key {key} is out of order in its run")));
                    }
                    self.previous = Some(key);
                    return Ok(Some((key, value)));
                }
                self.leaf = None;
            }
            // The leaf is done: the next child of the nearest inner block that has one.
            let next = loop {
                let Some((at, block, index)) = self.path.last_mut() else {
                    return Ok(None);
                };
                let inner = block.inner(*at)?;
                *index += 1;
                if *index < inner.len() {
                    break (inner.child(*index), inner.level() - 1);
                }
                self.path.pop();
            };
            let (child, level) = next;
            if self.to.is_some_and(|to| child.first >= to) {
                return Ok(None);
            }
            self.descend(child.block, level, child.first, None)?;
        }
    }
}

impl Iterator for RunIter<'_> {
    type Item = Result<(Key, Value), Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let step = self.advance();
        ends_at_first_error(&mut self.done, step)
    }
}
