//! The stack of runs of one checkpoint, newest first: lookups, ranges merged across runs,
//! and the checkpoint that turns a delta into a new run merged per [`MergePolicy`].

use crate::cache::{checked_slot_size, Cache};
use crate::check::{check_runs, CheckReport};
use crate::merge::Merge;
use crate::run::{RunBuilder, RunIter};
use crate::types::{BlockIo, BlockRef, BlockSink, Error, Key, Mapped, RunRef, Value};

/// The runs of one checkpoint, newest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stack {
    pub runs: Vec<RunRef>,
}

/// When a checkpoint merges the newest runs into its delta's run.
///
/// Walking from the newest run, a checkpoint takes the next run in while the entries taken
/// so far, times `ratio`, reach that run's entries (it is not much larger than what is being
/// written anyway), or while keeping it would leave more than `max_runs` runs. Each run is
/// thus at least about `ratio` times the size of the runs above it, the stack has
/// logarithmically many runs, and an entry is rewritten about `ratio` times per level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MergePolicy {
    pub ratio: u64,
    pub max_runs: usize,
}

impl MergePolicy {
    pub const DEFAULT: MergePolicy = MergePolicy {
        ratio: 8,
        max_runs: 10,
    };

    /// Every run merged into one, even with nothing new: the whole mapping rewritten where
    /// the sink places it now (a store moving everything to the start of its file).
    pub const ALL: MergePolicy = MergePolicy {
        ratio: 8,
        max_runs: 0,
    };

    /// How many of `runs` (newest first) a checkpoint of `delta` entries merges.
    pub fn runs_to_merge(&self, delta: usize, runs: &[RunRef]) -> usize {
        let (mut taken, mut k) = (delta as u64, 0);
        while k < runs.len()
            && (taken.saturating_mul(self.ratio) >= runs[k].entries || runs.len() - k + 1 > self.max_runs)
        {
            taken = taken.saturating_add(runs[k].entries);
            k += 1;
        }
        k
    }
}

impl Default for MergePolicy {
    fn default() -> MergePolicy {
        MergePolicy::DEFAULT
    }
}

/// What a checkpoint did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointOutcome {
    /// The new stack: the new run (unless everything in it was dropped), then the runs not
    /// merged.
    pub stack: Stack,
    /// Every block of the merged runs: the store frees them once no reader can use the old
    /// stack.
    pub freed: Vec<BlockRef>,
    /// Slots of the new run's blocks.
    pub written_slots: u64,
    /// Runs of the old stack merged into the new run.
    pub merged_runs: usize,
}

/// One input of a checkpoint's merge: the delta (newest), or a run being merged (boxed: an
/// iterator holds a path of blocks, the delta a pointer).
enum Input<'a> {
    Delta(std::vec::IntoIter<(Key, Value)>),
    Run(Box<RunIter<'a>>),
}

impl Iterator for Input<'_> {
    type Item = Result<(Key, Value), Error>;

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Input::Delta(entries) => entries.next().map(Ok),
            Input::Run(run) => run.next(),
        }
    }
}

impl Stack {
    /// The mapping of `key`: from the newest run that holds it (`None` if that is a
    /// tombstone, or no run does). A run whose `[first, last]` excludes `key` costs no read.
    pub fn get(&self, key: Key, io: &dyn BlockIo, cache: &Cache) -> Result<Option<Mapped>, Error> {
        for run in &self.runs {
            match run.get(key, io, cache)? {
                Some(Value::Mapped(m)) => return Ok(Some(m)),
                Some(Value::Dropped { .. }) => return Ok(None),
                None => {}
            }
        }
        Ok(None)
    }

    /// The mappings of the keys in `[from, to)`, in key order: each from the newest run that
    /// holds it, tombstones hidden. Reads each run's blocks as it reaches them.
    pub fn range<'a>(
        &self,
        from: Key,
        to: Key,
        io: &'a dyn BlockIo,
        cache: Option<&'a Cache>,
    ) -> impl Iterator<Item = Result<(Key, Mapped), Error>> + 'a {
        let sources: Vec<RunIter<'a>> = self
            .runs
            .iter()
            .filter(|run| from < to && run.first < to && run.last >= from)
            .map(|run| run.iter_range(from, to, io, cache))
            .collect();
        Merge::new(sources).filter_map(|entry| match entry {
            Ok((key, Value::Mapped(m))) => Some(Ok((key, m))),
            Ok((_, Value::Dropped { .. })) => None,
            Err(e) => Some(Err(e)),
        })
    }

    /// Entries in all runs, tombstones and shadowed entries included.
    pub fn entries(&self) -> u64 {
        self.runs.iter().map(|run| run.entries).sum()
    }

    /// Writes `delta` (every entry changed since the last checkpoint, strictly increasing by
    /// key) as a new run, merged with the newest runs per `policy`; drops the entries whose
    /// key `keep` refuses (files deleted since), and tombstones when the merge reaches the
    /// oldest run. Streams: reads the merged runs block by block around the cache, and holds
    /// one block per level of the new run.
    ///
    /// The old stack is untouched: its blocks stay readable until the store frees
    /// `freed`. On an error, blocks placed so far are named by no stack; the sink's owner
    /// takes them back.
    pub fn checkpoint(
        &self,
        delta: Vec<(Key, Value)>,
        keep: &dyn Fn(Key) -> bool,
        policy: MergePolicy,
        io: &dyn BlockIo,
        sink: &mut dyn BlockSink,
    ) -> Result<CheckpointOutcome, Error> {
        if let Some(pair) = delta.windows(2).find(|pair| pair[0].0 >= pair[1].0) {
            return Err(Error::Corrupt(format!(
                "checkpoint delta out of order: {} before {}",
                pair[0].0, pair[1].0
            )));
        }
        if delta.is_empty() && policy != MergePolicy::ALL {
            return Ok(CheckpointOutcome {
                stack: self.clone(),
                freed: Vec::new(),
                written_slots: 0,
                merged_runs: 0,
            });
        }
        let slot_size = checked_slot_size(sink.slot_size())?;
        if io.slot_size() != slot_size {
            return Err(Error::Corrupt(format!(
                "the sink's slots are {slot_size} bytes, the reader's {}",
                io.slot_size()
            )));
        }
        let merged = policy.runs_to_merge(delta.len(), &self.runs);
        // Nothing older than the oldest run can hold a key a tombstone hides.
        let drop_tombstones = merged == self.runs.len();
        let mut sources = vec![Input::Delta(delta.into_iter())];
        sources.extend(
            self.runs[..merged]
                .iter()
                .map(|run| Input::Run(Box::new(run.iter_from(Key::MIN, io, None).recording()))),
        );
        let mut merge = Merge::new(sources);
        let mut builder = RunBuilder::new(slot_size);
        for entry in &mut merge {
            let (key, value) = entry?;
            if !keep(key) || (drop_tombstones && matches!(value, Value::Dropped { .. })) {
                continue;
            }
            builder.push(key, value, sink)?;
        }
        let new_run = builder.finish(sink)?;
        // The merged runs were walked whole, so their iterators read every one of their blocks.
        let freed = merge
            .into_sources()
            .into_iter()
            .flat_map(|input| match input {
                Input::Run(run) => run.into_recorded(),
                Input::Delta(_) => Vec::new(),
            })
            .collect();
        let mut runs: Vec<RunRef> = new_run.into_iter().collect();
        runs.extend_from_slice(&self.runs[merged..]);
        Ok(CheckpointOutcome {
            stack: Stack { runs },
            freed,
            written_slots: new_run.map_or(0, |run| run.slots),
            merged_runs: merged,
        })
    }

    /// Reads every block of every run and checks all of it (see [`CheckReport`]); the first
    /// problem found is `Error::Corrupt` naming the run and block. Reads around any cache.
    pub fn check(&self, io: &dyn BlockIo) -> Result<CheckReport, Error> {
        check_runs(&self.runs, io)
    }
}
