//! The host filesystem on the simulated drive: durability of fsynced files across power
//! cuts in every journaling mode, X-FTL abort, journal replay, and bad input.

mod small_fs;

use std::collections::HashMap;

use onesync_flash::hostfs::{FileId, FlashFs, FsConfig, FsError, Journaling};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use small_fs::{config, small_drive};

const MODES: [Journaling; 3] = [Journaling::Ordered, Journaling::Data, Journaling::XFtl];

fn restart(fs: FlashFs, journaling: Journaling) -> FlashFs {
    let (ssd, _) = fs.into_ssd().restart().expect("drive restarts");
    let (fs, _) = FlashFs::mount(ssd, config(journaling)).expect("filesystem mounts");
    fs
}

fn contents(fs: &mut FlashFs, name: &str) -> Vec<u8> {
    let id = fs.open(name, false).expect("file exists");
    let size = fs.size(id).unwrap() as usize;
    let mut buf = vec![0u8; size];
    assert_eq!(fs.read(id, 0, &mut buf).unwrap(), size);
    buf
}

#[test]
fn fsynced_files_survive_a_power_cut_in_every_mode() {
    for mode in MODES {
        let mut fs = FlashFs::format(small_drive(), config(mode)).unwrap();
        let id = fs.open("a.db", true).unwrap();
        let data: Vec<u8> = (0..50_000u32).map(|i| (i % 251) as u8).collect();
        fs.write(id, 0, &data).unwrap();
        fs.fdatasync(id).unwrap();
        // Unsynced: lost (or, in the journaling modes, possibly kept) after the cut.
        fs.write(id, 100, b"unsynced").unwrap();
        fs.ssd_mut().power_cut_now();
        let mut fs = restart(fs, mode);
        let got = contents(&mut fs, "a.db");
        assert_eq!(got.len(), data.len(), "{mode:?}");
        if mode == Journaling::XFtl {
            assert_eq!(got, data, "{mode:?}: an uncommitted write is visible");
        } else {
            assert_eq!(got[..100], data[..100], "{mode:?}");
            assert_eq!(got[108..], data[108..], "{mode:?}");
        }
    }
}

#[test]
fn xftl_abort_restores_the_committed_file() {
    let mut fs = FlashFs::format(small_drive(), config(Journaling::XFtl)).unwrap();
    let id = fs.open("a.db", true).unwrap();
    fs.write(id, 0, &vec![1u8; 20_000]).unwrap();
    fs.fdatasync(id).unwrap();
    // More than the dirty limit: some of these reach the drive under the transaction.
    fs.write(id, 0, &vec![2u8; 120_000]).unwrap();
    assert!(
        fs.ssd().active_txs() > 0,
        "the dirty limit should have pushed writes to the drive"
    );
    fs.abort(id).unwrap();
    assert_eq!(fs.size(id).unwrap(), 20_000);
    assert_eq!(contents(&mut fs, "a.db"), vec![1u8; 20_000]);
    // And the drive agrees after a restart.
    fs.ssd_mut().power_cut_now();
    let mut fs = restart(fs, Journaling::XFtl);
    assert_eq!(contents(&mut fs, "a.db"), vec![1u8; 20_000]);
}

#[test]
fn a_deleted_file_stays_deleted_once_committed_and_blocks_are_reused() {
    for mode in MODES {
        let mut fs = FlashFs::format(small_drive(), config(mode)).unwrap();
        for round in 0..200u32 {
            let j = fs.open("a.db-journal", true).unwrap();
            fs.write(j, 0, &vec![round as u8; 30_000]).unwrap();
            fs.fdatasync(j).unwrap();
            fs.unlink("a.db-journal").unwrap();
        }
        fs.sync_directory().unwrap();
        fs.ssd_mut().power_cut_now();
        let fs = restart(fs, mode);
        assert!(!fs.exists("a.db-journal"), "{mode:?}");
    }
}

/// A file as the random test expects it.
#[derive(Default)]
struct ModelFile {
    current: Vec<u8>,
    /// Content at the last completed sync.
    synced: Option<Vec<u8>>,
    /// Content of a sync in progress (a cut may or may not let it commit).
    syncing: Option<Vec<u8>>,
    /// Changed since the last sync.
    touched: bool,
}

/// Random files, writes, truncates and syncs in every mount mode, with power cuts at random
/// NAND operations: after each restart every file synced and untouched since holds exactly
/// its last synced content (under X-FTL also: uncommitted changes never show, or the cut sync
/// committed). `ONESYNC_FLASH_FS_MODE` (ordered, data, xftl) picks one mode,
/// `ONESYNC_FLASH_FS_CASES` and `ONESYNC_FLASH_FS_FIRST_CASE` the cases,
/// `ONESYNC_FLASH_FS_TRACE` prints the operations.
#[test]
fn random_operations_under_power_cuts() {
    let cases: u64 = std::env::var("ONESYNC_FLASH_FS_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let modes = match std::env::var("ONESYNC_FLASH_FS_MODE").as_deref() {
        Ok("ordered") => vec![Journaling::Ordered],
        Ok("data") => vec![Journaling::Data],
        Ok("xftl") => vec![Journaling::XFtl],
        _ => MODES.to_vec(),
    };
    let first: u64 = std::env::var("ONESYNC_FLASH_FS_FIRST_CASE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    for mode in modes {
        random_operations_in_mode(mode, first..first + cases);
    }
}

fn random_operations_in_mode(mode: Journaling, cases: std::ops::Range<u64>) {
    for case in cases {
        let mut rng = SmallRng::seed_from_u64(case);
        let mut fs = FlashFs::format(small_drive(), config(mode)).unwrap();
        let mut model: HashMap<String, ModelFile> = HashMap::new();
        for _cut in 0..4 {
            let ops = rng.random_range(1..400u64);
            fs.ssd_mut().schedule_power_cut(ops, rng.random());
            let mut handles: HashMap<String, FileId> = HashMap::new();
            loop {
                let name = format!("f{}", rng.random_range(0..4));
                let step = rng.random_range(0..10);
                let trace = std::env::var("ONESYNC_FLASH_FS_TRACE").is_ok();
                let result: Result<(), FsError> = (|| {
                    let id = match handles.get(&name) {
                        Some(&id) if fs.exists(&name) => id,
                        _ => {
                            let id = fs.open(&name, true)?;
                            model.entry(name.clone()).or_insert(ModelFile {
                                touched: true,
                                ..ModelFile::default()
                            });
                            handles.insert(name.clone(), id);
                            id
                        }
                    };
                    let entry = model.get_mut(&name).expect("inserted");
                    match step {
                        0..=4 => {
                            let offset = rng.random_range(0..40_000u64);
                            let len = rng.random_range(1..20_000usize);
                            let byte: u8 = rng.random();
                            // A write the cut interrupts may have reached the drive.
                            entry.touched = true;
                            if trace {
                                eprintln!("write {name} {offset}+{len}");
                            }
                            fs.write(id, offset, &vec![byte; len])?;
                            let end = offset as usize + len;
                            if entry.current.len() < end {
                                entry.current.resize(end, 0);
                            }
                            entry.current[offset as usize..end].fill(byte);
                            entry.touched = true;
                        }
                        5 => {
                            let size = rng.random_range(0..30_000u64);
                            entry.touched = true;
                            if trace {
                                eprintln!("truncate {name} {size}");
                            }
                            fs.truncate(id, size)?;
                            entry.current.resize(size as usize, 0);
                            entry.touched = true;
                        }
                        6..=8 => {
                            // A sync the cut interrupts may or may not have committed.
                            entry.syncing = Some(entry.current.clone());
                            if trace {
                                eprintln!("fdatasync {name}");
                            }
                            fs.fdatasync(id)?;
                            entry.synced = entry.syncing.take();
                            entry.touched = false;
                        }
                        _ => {
                            if mode != Journaling::XFtl {
                                if trace {
                                    eprintln!("unlink {name}");
                                }
                                fs.unlink(&name)?;
                                model.remove(&name);
                                handles.remove(&name);
                            }
                        }
                    }
                    Ok(())
                })();
                match result {
                    Ok(()) => {}
                    Err(FsError::PowerLost) => break,
                    Err(e) => panic!("case {case} ({mode:?}): {e}"),
                }
            }
            if std::env::var("ONESYNC_FLASH_FS_TRACE").is_ok() {
                eprintln!("--- power cut, restart");
            }
            fs = restart(fs, mode);
            for (name, file) in model.iter_mut() {
                let exists = fs.exists(name);
                let interrupted = file.syncing.take();
                match (mode, file.synced.as_ref()) {
                    (Journaling::XFtl, Some(s)) => {
                        assert!(exists, "case {case}: {name} vanished");
                        let got = contents(&mut fs, name);
                        assert!(
                            got == *s || Some(&got) == interrupted.as_ref(),
                            "case {case} ({mode:?}): {name} is not its last synced content: got {} bytes, \
                             synced {} (first difference at {:?}), interrupted sync {:?} bytes",
                            got.len(),
                            s.len(),
                            got.iter().zip(s.iter()).position(|(a, b)| a != b),
                            interrupted.as_ref().map(Vec::len),
                        );
                    }
                    (_, Some(s)) if !file.touched => {
                        assert!(exists, "case {case} ({mode:?}): {name} vanished");
                        let got = contents(&mut fs, name);
                        assert!(
                            got == *s,
                            "case {case} ({mode:?}): synced {name} changed: {} bytes, synced {}, first difference at {:?}",
                            got.len(),
                            s.len(),
                            got.iter().zip(s.iter()).position(|(a, b)| a != b)
                        );
                    }
                    _ => {}
                }
                // Continue from what survived.
                file.current = if exists {
                    contents(&mut fs, name)
                } else {
                    Vec::new()
                };
                file.synced = exists.then(|| file.current.clone());
                file.touched = false;
            }
            model.retain(|name, _| fs.exists(name));
            // A deletion the cut undid (not yet committed) brings its file back: continue
            // from what is there.
            for name in fs.file_names() {
                if let std::collections::hash_map::Entry::Vacant(slot) = model.entry(name) {
                    let current = contents(&mut fs, slot.key());
                    slot.insert(ModelFile {
                        synced: Some(current.clone()),
                        current,
                        ..ModelFile::default()
                    });
                }
            }
        }
    }
}

#[test]
fn mounting_a_blank_or_damaged_drive_is_a_clear_error() {
    let blank = small_drive();
    match FlashFs::mount(blank, FsConfig::default()) {
        Err(FsError::NotFormatted(_)) => {}
        other => panic!("expected NotFormatted, got {:?}", other.map(|_| ())),
    }
    let mut fs = FlashFs::format(small_drive(), FsConfig::default()).unwrap();
    fs.ssd_mut().write(0, &vec![0xa5u8; 8192]).unwrap();
    fs.ssd_mut().flush().unwrap();
    match FlashFs::mount(fs.into_ssd(), FsConfig::default()) {
        Err(FsError::NotFormatted(_) | FsError::Corrupt(_)) => {}
        other => panic!("expected an error, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn a_full_filesystem_says_so_and_keeps_what_it_had() {
    let mut fs = FlashFs::format(small_drive(), config(Journaling::Ordered)).unwrap();
    let id = fs.open("big", true).unwrap();
    let block = vec![7u8; 8192];
    let mut written = 0u64;
    let err = loop {
        match fs.write(id, written * 8192, &block) {
            Ok(()) => written += 1,
            Err(e) => break e,
        }
        assert!(written < 10_000, "never filled up");
    };
    assert!(matches!(err, FsError::NoSpace(_)), "{err}");
    fs.fdatasync(id).unwrap();
    assert_eq!(fs.size(id).unwrap(), written * 8192);
}

#[test]
fn ordered_journaling_costs_a_journal_commit_only_when_metadata_changed() {
    let mut fs = FlashFs::format(small_drive(), FsConfig::with_journaling(Journaling::Ordered)).unwrap();
    let id = fs.open("a.db", true).unwrap();
    fs.write(id, 0, &vec![1u8; 8192 * 4]).unwrap();
    fs.fdatasync(id).unwrap();
    let before = fs.counters();
    // Overwrite in place: no metadata change, fdatasync is data + one flush.
    fs.write(id, 8192, &vec![2u8; 8192]).unwrap();
    fs.fdatasync(id).unwrap();
    let after = fs.counters();
    assert_eq!(after.journal_commits, before.journal_commits);
    assert_eq!(after.flushes - before.flushes, 1);
    // fsync (times changed) and growth commit the journal: two flushes.
    fs.write(id, 8192, &vec![3u8; 8192]).unwrap();
    fs.fsync(id).unwrap();
    let later = fs.counters();
    assert_eq!(later.journal_commits, after.journal_commits + 1);
    assert_eq!(later.flushes - after.flushes, 2);
}
