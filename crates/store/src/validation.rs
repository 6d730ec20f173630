//! Commit-time validation of a transaction's reads, and rebasing of the pages it merges,
//! against the commits made since it began (optimistic concurrency: see
//! `Transaction::read_page_noted` and `Transaction::merge_at_commit`).
//!
//! The argument for serializability: a commit is checked and sequenced under the store's
//! commit lock, so commits have one order. A transaction `T` that commits read every page
//! its decisions depend on through `read_page_noted`, and each such page is unchanged
//! between `T`'s base and the state it commits on (checked here, by the sequence number of
//! the commit that last changed the page); the pages it writes are unchanged too (checked
//! in `Transaction::find_write_conflict`). So `T` read and wrote exactly what it would
//! have had it run alone at its place in the commit order. Merged pages are the stated
//! exception: the merger decides what the transaction may ignore of another's change.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::format::Op;
use crate::state::State;

/// Rebases a page another commit changed since a transaction began, at its commit: given
/// the page as the transaction began on it, as it is now, and as the transaction has it
/// (its write, else the first), returns what the transaction commits instead, or `None`
/// for a conflict. See `Transaction::merge_at_commit`.
pub type PageMerger = Arc<dyn Fn(&[u8], &[u8], &[u8]) -> Option<Vec<u8>> + Send + Sync>;

/// Reads page `page` of file `file` as in the given state into the buffer.
pub(crate) type ReadPage<'a> = &'a dyn Fn(&State, u32, u64, &mut [u8]) -> bool;

/// The version of a page in `state`: the commit that last changed it, `Some(0)` for a page
/// never written (zeros), `None` past the file's end or for a missing file. A mapping that
/// cannot be read gives a description, which fails the transaction as a conflict would
/// (it cannot be shown not to be one).
fn version(state: &State, file: u32, page: u64, page_size: u64) -> Result<Option<u64>, String> {
    state
        .entry(file, page, page_size)
        .map(|e| e.map(|e| e.seq))
        .map_err(|e| format!("page {page} of file {file}, whose mapping could not be read ({e})"))
}

/// The first page of `reads` that another commit changed between `base` and `latest`
/// (pages with a merger are rebased instead), described for `Error::Conflict`.
pub(crate) fn changed_reads(
    page_size: u64,
    reads: &BTreeSet<(u32, u64)>,
    mergers: &BTreeMap<(u32, u64), PageMerger>,
    base: &State,
    latest: &State,
) -> Option<String> {
    for &(file, page) in reads {
        if mergers.contains_key(&(file, page)) {
            continue;
        }
        let Some(f) = latest.files.get(&file) else {
            return Some(format!("file {file} (deleted), which this transaction read"));
        };
        let (before, now) = match (
            version(base, file, page, page_size),
            version(latest, file, page, page_size),
        ) {
            (Ok(before), Ok(now)) => (before, now),
            (Err(what), _) | (_, Err(what)) => return Some(what),
        };
        if before != now {
            return Some(format!(
                "page {page} of {:?}, which this transaction read",
                f.name
            ));
        }
    }
    None
}

/// Rebase every page with a merger that another commit changed since `base`: the merger
/// gets the page as in `base`, as in `latest` and as this transaction has it; its result
/// replaces the transaction's buffered page (and its checksum in `ops`). `Err` describes a
/// page the merger refused, or one it cannot be given.
#[allow(clippy::too_many_arguments)]
pub(crate) fn rebase_merged(
    page_size: u64,
    read_page: ReadPage<'_>,
    mergers: &BTreeMap<(u32, u64), PageMerger>,
    base: &State,
    latest: &State,
    ops: &mut [Op],
    buffered: &[usize],
    pages: &mut [Arc<[u8]>],
    merged: &mut BTreeSet<(u32, u64)>,
) -> Result<(), String> {
    for (&(file, page), merger) in mergers {
        if !base.files.contains_key(&file) {
            continue; // created by this transaction: no one else has it
        }
        let Some(f) = latest.files.get(&file) else {
            return Err(format!(
                "file {file} (deleted), whose page {page} this transaction merges"
            ));
        };
        if version(base, file, page, page_size)? == version(latest, file, page, page_size)? {
            continue;
        }
        let what = || format!("page {page} of {:?}, changed since and not mergeable", f.name);
        let mut before = vec![0u8; page_size as usize];
        let mut now = vec![0u8; page_size as usize];
        if !read_page(base, file, page, &mut before) || !read_page(latest, file, page, &mut now) {
            return Err(what());
        }
        // The transaction's own write of the page, if it has one: a buffered `Page`.
        let written = buffered
            .iter()
            .position(|&i| matches!(&ops[i], Op::Page { file: f, page: p, .. } if *f == file && *p == page));
        let patched = ops
            .iter()
            .any(|op| matches!(op, Op::Patch { file: f, page: p, .. } if *f == file && *p == page));
        if patched {
            return Err(what()); // embedded before its merger was set: cannot be rebased
        }
        let mine = written.map_or(before.as_slice(), |pos| &pages[pos][..]);
        let rebased = merger(&before, &now, mine).ok_or_else(what)?;
        if rebased.len() != page_size as usize {
            return Err(what());
        }
        if let Some(pos) = written {
            if let Op::Page { crc, .. } = &mut ops[buffered[pos]] {
                *crc = crc32c::crc32c(&rebased);
            }
            pages[pos] = rebased.into();
            merged.insert((file, page));
        }
    }
    Ok(())
}
