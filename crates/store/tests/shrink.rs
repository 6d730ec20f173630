//! Space comes back (issue 40): after a commit that frees most of the store (a large
//! delete, SQLite's VACUUM truncating its file), a checkpoint moves what is left to the
//! lowest slots and the file's free end is cut off; a power cut at any I/O call of that
//! loses no acknowledged commit. Negative control (`--features test-hooks`):
//! `Sabotage::MovedPagesUnflushed` writes the moved pages' copies and the header naming
//! them with no flush between, and the cuts find pages that fail their checksums.

use std::collections::BTreeMap;

#[cfg(feature = "test-hooks")]
#[path = "support/sabotage.rs"]
mod sabotage;
#[cfg(feature = "test-hooks")]
use sabotage::with_sabotage;

use onesync_store::sim::SimDisk;
use onesync_store::{Options, Store};
use rand::rngs::StdRng;
use rand::SeedableRng;

const PS: usize = 512;
/// Pages written before the store is cut down to `KEPT` of them.
const FILLED: u64 = 400;
const KEPT: u64 = 6;

fn options() -> Options {
    Options {
        page_size: PS as u32,
        initial_capacity: 8 << 10,
        growth_step: 8 << 10,
        max_growth_step: 64 << 10,
        window_bytes: 4 << 10,
        ..Options::default()
    }
}

fn content(step: u64, page: u64) -> Vec<u8> {
    let mut data = vec![(step as u8) ^ (page as u8) ^ 0x5a; PS];
    data[..8].copy_from_slice(&step.to_le_bytes());
    data[8..16].copy_from_slice(&page.to_le_bytes());
    data
}

/// The file's pages after each commit (index = sequence number; 0 is the empty store).
type Model = Vec<BTreeMap<u64, Vec<u8>>>;

/// One commit of the workload: pages to write, then the number of pages to keep.
fn steps() -> Vec<(Vec<u64>, Option<u64>)> {
    let mut steps = Vec::new();
    // Fill the store in commits of 20 pages, so it grows.
    for first in (0..FILLED).step_by(20) {
        steps.push(((first..first + 20).collect(), None));
    }
    // Rewrite the first pages (their new copies land at the file's end), then cut the file
    // down, as VACUUM does: the commit supersedes most of the store.
    steps.push(((0..KEPT).collect(), None));
    steps.push((vec![1], Some(KEPT)));
    // Commits after the shrink, into the moved window.
    for n in 0..4 {
        steps.push((vec![n, KEPT + n], None));
    }
    steps
}

#[derive(Default)]
struct Run {
    acknowledged: u64,
    sequenced: u64,
    /// I/O calls before the cutting commit and after the store closed.
    shrink_calls: (u64, u64),
    returned: u64,
}

fn run_workload(disk: &SimDisk, opts: &Options, model: &mut Model) -> Run {
    let mut run = Run::default();
    model.clear();
    model.push(BTreeMap::new());
    let Ok(store) = Store::create_with_io(disk.io(), opts) else {
        return run;
    };
    let steps = steps();
    for (i, (pages, keep)) in steps.iter().enumerate() {
        let seq = i as u64 + 1;
        if keep.is_some() {
            run.shrink_calls.0 = disk.calls();
        }
        let mut next = model.last().unwrap().clone();
        let mut t = store.begin();
        let written = (|| {
            let id = match t.file("data") {
                Some(id) => id,
                None => t.create_file("data")?,
            };
            for &page in pages {
                let data = content(seq, page);
                t.write_page(id, page, &data)?;
                next.insert(page, data);
            }
            if let Some(keep) = keep {
                t.set_file_size(id, keep * PS as u64)?;
                next.retain(|&page, _| page < *keep);
            }
            Ok::<_, onesync_store::Error>(())
        })();
        if written.is_err() {
            return run;
        }
        model.push(next);
        match t.commit() {
            Ok(_) => {
                run.acknowledged = seq;
                run.sequenced = seq;
            }
            Err(e) => {
                if let Some(got) = e.seq {
                    run.sequenced = got;
                }
                return run;
            }
        }
    }
    run.returned = store.stats().bytes_returned;
    if store.close().is_ok() {
        run.shrink_calls.1 = disk.calls();
    }
    run
}

fn check_recovered(store: &Store, run: &Run, model: &Model) -> Result<(), String> {
    let last = store.last_seq();
    if last < run.acknowledged || last > run.sequenced {
        return Err(format!(
            "recovered to commit {last}: acknowledged {}, sequenced {}",
            run.acknowledged, run.sequenced
        ));
    }
    let expected = &model[last as usize];
    let snap = store.snapshot();
    let Some(id) = snap.file("data") else {
        return if expected.is_empty() {
            Ok(())
        } else {
            Err(format!("recovered to commit {last} without the data file"))
        };
    };
    let mut buf = vec![0u8; PS];
    for (&page, data) in expected {
        snap.read_page(id, page, &mut buf)
            .map_err(|e| format!("after commit {last}: reading page {page}: {e}"))?;
        if &buf != data {
            return Err(format!("after commit {last}: page {page} differs"));
        }
    }
    Ok(())
}

/// Cut the power at every I/O call from the commit that cut the file down to the close,
/// with several outcomes for the unflushed writes each; returns the failures.
fn power_cuts_in_shrink(opts: &Options) -> Vec<String> {
    let mut model = Model::new();
    let dry = run_workload(&SimDisk::new(), opts, &mut model);
    assert_eq!(
        dry.acknowledged,
        steps().len() as u64,
        "the run without a cut completes"
    );
    assert!(
        dry.returned > 0,
        "the commit that cut the store down gave no space back"
    );
    let (from, to) = dry.shrink_calls;
    assert!(to > from, "the store closed");
    let mut failures = Vec::new();
    for cut in from..=to {
        for outcome in 0..4u64 {
            let disk = SimDisk::new();
            disk.cut_after(cut);
            let mut model = Model::new();
            let run = run_workload(&disk, opts, &mut model);
            let after = disk.power_cut(&mut StdRng::seed_from_u64(cut * 8 + outcome));
            let checked = Store::open_with_io(after.io(), opts)
                .map_err(|e| format!("reopening failed: {e}"))
                .and_then(|store| check_recovered(&store, &run, &model));
            if let Err(e) = checked {
                failures.push(format!("cut at call {cut}, outcome {outcome}: {e}"));
            }
        }
    }
    eprintln!(
        "{} power cuts from the cutting commit to the close, {} failed{}",
        4 * (to - from + 1),
        failures.len(),
        failures
            .first()
            .map(|f| format!("; first: {f}"))
            .unwrap_or_default()
    );
    failures
}

#[test]
fn a_store_cut_down_gives_its_space_back() {
    let disk = SimDisk::new();
    let mut model = Model::new();
    let run = run_workload(&disk, &options(), &mut model);
    assert_eq!(run.acknowledged, steps().len() as u64);
    let len = disk.image().len() as u64;
    // 400 pages of 512 bytes were written (200 KiB); 6 are left, and the mapping's run (a
    // block of 4 KiB, eight slots of 512 bytes, where eight free slots were).
    assert!(
        len <= (32 << 10) + 4096,
        "the store is {len} bytes after it was cut down to {KEPT} pages"
    );
    let store = Store::open_with_io(disk.io(), &options()).unwrap();
    check_recovered(&store, &run, &model).unwrap();
}

#[test]
fn a_power_cut_at_any_point_of_a_shrink_loses_no_acknowledged_commit() {
    let failures = power_cuts_in_shrink(&options());
    assert!(
        failures.is_empty(),
        "{} cuts failed; first: {}",
        failures.len(),
        failures[0]
    );
}

#[cfg(feature = "test-hooks")]
#[test]
fn moved_pages_named_before_they_are_durable_lose_commits() {
    let opts = with_sabotage(options(), Some(onesync_store::Sabotage::MovedPagesUnflushed));
    let failures = power_cuts_in_shrink(&opts);
    assert!(!failures.is_empty(), "the negative control lost nothing");
}

/// A read-only process may have the store open while another cuts it down: either the
/// shrink waits for it (as here: the reader's pin keeps the superseded slots), or its next
/// read takes the moved mapping; never the slots given up.
#[test]
fn a_read_only_handle_reads_the_moved_pages_after_a_shrink() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.onesync");
    let opts = options();
    let writer = Store::create(&path, &opts).unwrap();
    let mut model = BTreeMap::new();
    let mut commit = |pages: &[u64], keep: Option<u64>, seq: u64| {
        let mut t = writer.begin();
        let id = match t.file("data") {
            Some(id) => id,
            None => t.create_file("data").unwrap(),
        };
        for &page in pages {
            t.write_page(id, page, &content(seq, page)).unwrap();
            model.insert(page, content(seq, page));
        }
        if let Some(keep) = keep {
            t.set_file_size(id, keep * PS as u64).unwrap();
            model.retain(|&page, _| page < keep);
        }
        t.commit().unwrap();
    };
    let mut seq = 0;
    for first in (0..FILLED).step_by(20) {
        seq += 1;
        commit(&(first..first + 20).collect::<Vec<_>>(), None, seq);
    }
    let reader = Store::open(
        &path,
        &Options {
            read_only: true,
            ..options()
        },
    )
    .unwrap();
    drop(reader.snapshot());
    seq += 1;
    commit(&(0..KEPT).collect::<Vec<_>>(), None, seq);
    seq += 1;
    commit(&[1], Some(KEPT), seq);
    eprintln!(
        "bytes given back with a read-only handle open: {}",
        writer.stats().bytes_returned
    );
    let snap = reader.snapshot();
    let id = snap.file("data").unwrap();
    let mut buf = vec![0u8; PS];
    for (&page, data) in &model {
        snap.read_page(id, page, &mut buf)
            .unwrap_or_else(|e| panic!("the reader reading page {page}: {e}"));
        assert_eq!(&buf, data, "page {page}");
    }
    drop(snap);
    drop(reader);
    writer.close().unwrap();
    let reopened = Store::open(&path, &opts).unwrap();
    assert!(
        reopened.stats().slots_total < 128,
        "closed alone, the store gave its space back"
    );
}
