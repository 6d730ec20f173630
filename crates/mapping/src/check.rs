//! The offline check of a whole stack: every block read and validated, and everything the
//! read path checks only where cheap checked everywhere.

use crate::cache::{corrupt, fetch};
use crate::types::{BlockIo, BlockRef, Error, Key, RunRef};

/// What [`Stack::check`](crate::Stack::check) read: all of it consistent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CheckReport {
    pub runs: usize,
    pub blocks: u64,
    pub slots: u64,
    pub entries: u64,
}

/// Checks each run: every block's CRC and fields; keys strictly increasing across its
/// blocks, from its `first` to its `last`; each inner block's first keys equal to its
/// children's first keys; each child one level below its parent; the run ref's entry and
/// slot counts. Then that no two blocks of the stack overlap.
pub(crate) fn check_runs(runs: &[RunRef], io: &dyn BlockIo) -> Result<CheckReport, Error> {
    let mut report = CheckReport {
        runs: runs.len(),
        ..CheckReport::default()
    };
    let mut extents: Vec<(BlockRef, usize)> = Vec::new();
    for (index, run) in runs.iter().enumerate() {
        let in_run = |e: Error| match e {
            Error::Corrupt(why) => Error::Corrupt(format!("run {index} of the stack: {why}")),
            other => other,
        };
        let mut walk = Walk {
            io,
            run: index,
            previous: None,
            entries: 0,
            slots: 0,
            extents: &mut extents,
        };
        let level = run.height.saturating_sub(1);
        walk.visit(run.root, level, run.first).map_err(in_run)?;
        let mismatch = |what: &str, found: String, expected: String| {
            in_run(Error::Corrupt(format!(
                "its blocks hold {what} {found}, its ref says {expected}"
            )))
        };
        if walk.entries != run.entries {
            return Err(mismatch(
                "entries",
                walk.entries.to_string(),
                run.entries.to_string(),
            ));
        }
        if walk.slots != run.slots {
            return Err(mismatch("slots", walk.slots.to_string(), run.slots.to_string()));
        }
        if walk.previous != Some(run.last) {
            let last = walk.previous.map_or("nothing".into(), |k| k.to_string());
            return Err(mismatch("last key", last, run.last.to_string()));
        }
        report.entries += walk.entries;
        report.slots += walk.slots;
    }
    report.blocks = extents.len() as u64;
    extents.sort_by_key(|(block, _)| block.slot);
    for pair in extents.windows(2) {
        let ((a, run_a), (b, run_b)) = (pair[0], pair[1]);
        if a.slot.saturating_add(u64::from(a.slots)) > b.slot {
            return Err(Error::Corrupt(format!(
                "the block at slot {} ({} slots) of run {run_a} overlaps the block at slot {} of run {run_b}",
                a.slot, a.slots, b.slot
            )));
        }
    }
    Ok(report)
}

/// A depth-first walk of one run, in key order.
struct Walk<'a> {
    io: &'a dyn BlockIo,
    run: usize,
    previous: Option<Key>,
    entries: u64,
    slots: u64,
    extents: &'a mut Vec<(BlockRef, usize)>,
}

impl Walk<'_> {
    /// Checks the block `at`, which its parent says is at `level` and starts at `first`, and
    /// everything below it. Depth is at most the run's height (8).
    fn visit(&mut self, at: BlockRef, level: u8, first: Key) -> Result<(), Error> {
        let block = fetch(self.io, None, at, level)?;
        self.extents.push((at, self.run));
        self.slots += u64::from(at.slots);
        if level == 0 {
            let leaf = block.leaf(at)?;
            if leaf.key(0) != first {
                return Err(corrupt(
                    at,
                    format!("first key {}, its parent names {first}", leaf.key(0)),
                ));
            }
            for i in 0..leaf.len() {
                let key = leaf.key(i);
                if let Some(previous) = self.previous.filter(|p| *p >= key) {
                    return Err(corrupt(at, format!("key {key} follows {previous}")));
                }
                self.previous = Some(key);
            }
            self.entries += leaf.len() as u64;
            return Ok(());
        }
        let inner = block.inner(at)?;
        if inner.child(0).first != first {
            return Err(corrupt(
                at,
                format!("first key {}, its parent names {first}", inner.child(0).first),
            ));
        }
        for i in 0..inner.len() {
            let child = inner.child(i);
            self.visit(child.block, level - 1, child.first)?;
        }
        Ok(())
    }
}
