//! Power cuts at random I/O calls on the simulated disk: after reopening, the tree holds
//! exactly the last acknowledged version (or, if the cut hit its commit, the next one).
mod common;

use common::*;
use onesync_mvbt::{Config, RecoveryReport, Sabotage, Tree};
use onesync_store::sim::SimDisk;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::ops::Bound;

fn contents(tree: &mut Tree) -> Result<Model, String> {
    let all = tree
        .range(Bound::Unbounded, Bound::Unbounded, None, usize::MAX)
        .map_err(|e| e.to_string())?;
    Ok(all.into_iter().collect())
}

/// One random transaction on `tree`; returns the contents it commits, or the error.
fn transaction(tree: &mut Tree, base: &Model, rng: &mut StdRng, big: bool) -> (Model, Result<bool, String>) {
    let mut model = base.clone();
    let value_max = tree.max_value_len();
    let run = |tree: &mut Tree, model: &mut Model, rng: &mut StdRng| -> onesync_mvbt::Result<bool> {
        tree.begin()?;
        let ops = if big { 3000 } else { rng.random_range(1..12) };
        for i in 0..ops {
            let key = rng.random_range(0..if big { 5000 } else { 400 });
            if rng.random_bool(0.25) {
                tree.delete(key)?;
                model.remove(&key);
            } else {
                let len = rng.random_range(0..=value_max.min(200));
                let value = vec![rng.random::<u8>(); len];
                tree.put(key, &value)?;
                model.insert(key, value);
            }
            if big && i % 500 == 499 {
                tree.spill()?;
            }
        }
        if rng.random_bool(0.1) {
            tree.spill()?;
        }
        if rng.random_bool(0.1) {
            tree.rollback()?;
            return Ok(false);
        }
        Ok(true)
    };
    match run(tree, &mut model, rng) {
        Ok(false) => (base.clone(), Ok(false)),
        Ok(true) => {
            let committed = tree.commit().map(|_| true).map_err(|e| format!("commit: {e}"));
            (model, committed)
        }
        Err(e) => (base.clone(), Err(e.to_string())),
    }
}

/// One case: some committed history, then transactions until a scheduled power cut, then
/// reopen the surviving image and compare.
fn crash_case(seed: u64, config: &Config, big: bool) -> Result<RecoveryReport, String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let disk = SimDisk::new();
    let mut tree = Tree::create_on(sim_io(&disk), config.clone()).map_err(|e| e.to_string())?;
    let mut acked = Model::new();
    let mut acked_version = 0;
    for _ in 0..rng.random_range(0..30) {
        let (m, r) = transaction(&mut tree, &acked, &mut rng, false);
        if r.map_err(|e| format!("before the cut: {e}"))? {
            acked = m;
            acked_version = tree.latest_version();
        }
    }
    disk.cut_after(rng.random_range(0..if big { 600 } else { 120 }));
    let mut maybe: Option<Model> = None;
    let mut first = true;
    loop {
        let (m, r) = transaction(&mut tree, &acked, &mut rng, big && first);
        first = false;
        match r {
            Ok(true) => {
                acked = m;
                acked_version = tree.latest_version();
            }
            Ok(false) => {}
            Err(e) => {
                if e.starts_with("commit") {
                    maybe = Some(m);
                }
                break;
            }
        }
        if disk.is_powered_off() {
            break;
        }
    }
    drop(tree);
    let survived = disk.power_cut(&mut rng);
    let mut tree = Tree::open_on(sim_io(&survived), config.clone()).map_err(|e| format!("reopen: {e}"))?;
    tree.check().map_err(|e| format!("check after reopen: {e}"))?;
    let got = contents(&mut tree)?;
    let report = tree.recovery().clone();
    if got == acked {
        if tree.latest_version() != acked_version {
            return Err(format!(
                "contents of v{acked_version} but latest_version {}",
                tree.latest_version()
            ));
        }
    } else if maybe.as_ref() == Some(&got) {
        if tree.latest_version() != acked_version + 1 {
            return Err(format!(
                "the interrupted commit survived but latest_version is {}",
                tree.latest_version()
            ));
        }
    } else {
        return Err(format!(
            "after the cut: {} keys, expected {} (acked v{acked_version}) or {:?}; recovery {report:?}",
            got.len(),
            acked.len(),
            maybe.as_ref().map(|m| m.len())
        ));
    }
    if report.latest_version != tree.latest_version() {
        return Err(format!(
            "recovery report says v{} but the tree v{}",
            report.latest_version,
            tree.latest_version()
        ));
    }
    // The reverted version number is reused: commit, reopen, and read it back.
    let (m, r) = transaction(&mut tree, &got, &mut rng, false);
    let expect = if r.map_err(|e| format!("after recovery: {e}"))? {
        m
    } else {
        got
    };
    let expect_version = tree.latest_version();
    drop(tree);
    let mut tree =
        Tree::open_on(sim_io(&survived), config.clone()).map_err(|e| format!("second reopen: {e}"))?;
    if tree.latest_version() != expect_version {
        return Err(format!(
            "second reopen: v{} instead of v{expect_version}",
            tree.latest_version()
        ));
    }
    // Reopening after a clean close may only "revert" the version recovery already
    // neutralised (it has no images stamped Commit), which changes nothing.
    if let Some(v) = tree.recovery().reverted_version {
        if v != expect_version + 1 || tree.recovery().cells_reverted != 0 {
            return Err(format!("a clean reopen reverted v{v}: {:?}", tree.recovery()));
        }
    }
    tree.check()
        .map_err(|e| format!("check after second reopen: {e}"))?;
    if contents(&mut tree)? != expect {
        return Err("the transaction after recovery did not survive a reopen".into());
    }
    Ok(report)
}

fn configs(sabotage: Option<Sabotage>) -> Vec<Config> {
    let mut out = Vec::new();
    for (i, (_, c)) in presets().into_iter().enumerate() {
        let node_size = [512, 1024, 4096, 8192][i];
        out.push(Config {
            node_size,
            sabotage,
            keep_versions: i as u64 % 2,
            ..c
        });
    }
    out.push(Config {
        node_size: 512,
        sibling_redistribution: true,
        sabotage,
        ..Config::ls_mvbt()
    });
    out
}

#[test]
fn power_cuts_keep_the_acknowledged_version() {
    let cases = cases(300) as u64;
    let configs = configs(None);
    let (mut reverted, mut torn) = (0, 0);
    for seed in 0..cases {
        let config = &configs[seed as usize % configs.len()];
        match crash_case(seed, config, false) {
            Ok(report) => {
                reverted += report.reverted_version.is_some() as u32;
                torn += (report.torn_slots > 0) as u32;
            }
            Err(e) => panic!("seed {seed}, config {config:?}: {e}"),
        }
    }
    eprintln!("{cases} power cuts: {reverted} recoveries reverted a version, {torn} found torn slots");
    assert!(
        reverted > 0 && torn > 0,
        "the cuts never hit a transaction's writes"
    );
}

#[test]
fn a_big_spilled_transaction_is_reverted() {
    let configs = configs(None);
    for seed in 0..(cases(300) as u64 / 30).max(4) {
        let config = &configs[seed as usize % 2];
        match crash_case(1000 + seed, config, true) {
            Ok(report) => eprintln!("big transaction: {report:?}"),
            Err(e) => panic!("seed {}, config {config:?}: {e}", 1000 + seed),
        }
    }
}

#[test]
fn sabotaged_recovery_is_caught() {
    let configs = configs(Some(Sabotage::SkipRevertEndVersions));
    let mut failures = 0;
    let cases = cases(300) as u64;
    for seed in 0..cases {
        let config = &configs[seed as usize % configs.len()];
        if crash_case(seed, config, false).is_err() {
            failures += 1;
        }
    }
    for seed in 0..4 {
        if crash_case(1000 + seed, &configs[0], true).is_err() {
            failures += 1;
        }
    }
    assert!(
        failures > 0,
        "recovery that leaves ended cells dead passed every crash case"
    );
    eprintln!("sabotaged recovery failed {failures} of {} cases", cases + 4);
}

/// A disk left by a cut in the middle of the commit of a spilled transaction, and the
/// contents it must recover to (seed 0 of `crash_case`'s history, then the interrupted one).
fn interrupted_image(seed: u64, config: &Config) -> (Vec<u8>, Model) {
    let mut rng = StdRng::seed_from_u64(seed);
    let disk = SimDisk::new();
    let mut tree = Tree::create_on(sim_io(&disk), config.clone()).unwrap();
    let mut acked = Model::new();
    for _ in 0..5 {
        let (m, r) = transaction(&mut tree, &acked, &mut rng, false);
        if r.unwrap() {
            acked = m;
        }
    }
    tree.begin().unwrap();
    for key in 0..300 {
        tree.put(key * 7 % 400, &[key as u8; 60]).unwrap();
    }
    for key in (0..400).step_by(9) {
        tree.delete(key).unwrap();
    }
    tree.spill().unwrap();
    // Touch every leaf again, so that the commit's batch is many nodes long ...
    for key in (0..460).step_by(11) {
        tree.put(key, b"after the spill").unwrap();
    }
    // ... and only its first two images reach the disk.
    disk.cut_after(2);
    assert!(tree.commit().is_err(), "the cut must interrupt the commit");
    drop(tree);
    (disk.power_cut(&mut rng).image(), acked)
}

/// Runs one small transaction on a tree opened over `disk`; a cut may stop it anywhere.
/// Returns the contents it commits and whether its commit returned (and was acknowledged).
fn second_transaction(tree: &mut Tree, base: &Model, round: u64) -> (Model, Result<bool, String>) {
    let mut model = base.clone();
    let mut run = || -> onesync_mvbt::Result<()> {
        tree.begin()?;
        for i in 0..20 {
            let key = (round as i64 * 31 + i * 17) % 500;
            tree.put(key, &[round as u8; 40])?;
            model.insert(key, vec![round as u8; 40]);
        }
        tree.delete(3)?;
        model.remove(&3);
        Ok(())
    };
    if let Err(e) = run() {
        return (base.clone(), Err(format!("before commit: {e}")));
    }
    let committed = tree.commit().map(|_| true).map_err(|e| format!("commit: {e}"));
    (model, committed)
}

/// Open defers writing the revert to the first write transaction. A second cut at every
/// I/O call of that transaction (the deferred revert's writes and sync, then its own writes
/// and commit) must leave a file that recovers to the recovered contents, or to the second
/// transaction's if its commit was reached, and stays usable after that.
fn second_cut_at_every_point(config: &Config, seed: u64) -> Result<u64, String> {
    let (image, acked) = interrupted_image(seed, config);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut points = 0;
    for cut in 0.. {
        let disk = SimDisk::from_image(image.clone());
        let mut tree = Tree::open_on(sim_io(&disk), config.clone()).map_err(|e| format!("open: {e}"))?;
        if tree.recovery().reverted_version.is_none() || disk.writes() != 0 {
            return Err(format!(
                "open must revert in memory only: {:?}, {} writes",
                tree.recovery(),
                disk.writes()
            ));
        }
        tree.check().map_err(|e| format!("check before any write: {e}"))?;
        if contents(&mut tree)? != acked {
            return Err("open did not recover the acknowledged contents".into());
        }
        let recovered_version = tree.latest_version();
        disk.cut_after(cut);
        let (next, r) = second_transaction(&mut tree, &acked, cut);
        let hit = disk.is_powered_off();
        let allowed: Vec<&Model> = match &r {
            Ok(_) => vec![&next],
            Err(e) if e.starts_with("commit") => vec![&acked, &next],
            Err(_) => vec![&acked],
        };
        drop(tree);
        let survived = disk.power_cut(&mut rng);
        let mut tree = Tree::open_on(sim_io(&survived), config.clone())
            .map_err(|e| format!("cut at call {cut}: reopen: {e}"))?;
        tree.check()
            .map_err(|e| format!("cut at call {cut}: check: {e}"))?;
        let got = contents(&mut tree)?;
        if !allowed.contains(&&got) {
            return Err(format!(
                "cut at call {cut} ({r:?}): {} keys after reopen, expected one of {:?}; {:?}",
                got.len(),
                allowed.iter().map(|m| m.len()).collect::<Vec<_>>(),
                tree.recovery()
            ));
        }
        let expect_version = recovered_version + (got != acked) as u64;
        if tree.latest_version() != expect_version {
            return Err(format!(
                "cut at call {cut}: latest_version {} instead of {expect_version}",
                tree.latest_version()
            ));
        }
        // Still usable: one more transaction, then a clean reopen.
        let (third, r) = second_transaction(&mut tree, &got, 1000 + cut);
        r.map_err(|e| format!("cut at call {cut}: the transaction after: {e}"))?;
        drop(tree);
        let mut tree = Tree::open_on(sim_io(&survived), config.clone())
            .map_err(|e| format!("cut at call {cut}: last reopen: {e}"))?;
        tree.check()
            .map_err(|e| format!("cut at call {cut}: last check: {e}"))?;
        if contents(&mut tree)? != third {
            return Err(format!(
                "cut at call {cut}: the transaction after did not survive"
            ));
        }
        points += 1;
        if !hit {
            return Ok(points);
        }
    }
    unreachable!("the loop ends when a cut no longer falls inside the transaction")
}

#[test]
fn a_second_cut_after_recovery_at_every_point() {
    for (seed, config) in configs(None).iter().enumerate() {
        match second_cut_at_every_point(config, seed as u64) {
            Ok(points) => eprintln!("{points} cut points after recovery: {config:?}"),
            Err(e) => panic!("seed {seed}, config {config:?}: {e}"),
        }
    }
}

#[test]
fn a_skipped_deferred_revert_is_caught() {
    let failures = configs(Some(Sabotage::SkipDeferredRevert))
        .iter()
        .enumerate()
        .filter(|(seed, config)| second_cut_at_every_point(config, *seed as u64).is_err())
        .count();
    assert!(
        failures > 0,
        "reusing the reverted version's number without neutralising its images passed"
    );
    eprintln!("the skipped deferred revert failed {failures} of 5 configurations");
}

/// A node whose newest image (v2) is torn below the file's newest version (v3): open reads
/// the node's other image (v1), so key 39 holds its v1 value. Crash cuts tear only images of the newest version, which the
/// scan verifies, so this case is built by hand.
fn open_with_a_torn_image_below_the_newest(sabotage: Option<Sabotage>) -> Result<Option<Vec<u8>>, String> {
    let config = Config {
        node_size: 512,
        sabotage,
        ..Config::ls_mvbt()
    };
    let disk = SimDisk::new();
    let mut tree = Tree::create_on(sim_io(&disk), config.clone()).map_err(|e| e.to_string())?;
    let commit = |tree: &mut Tree, puts: &[(i64, &[u8])]| -> onesync_mvbt::Result<()> {
        tree.begin()?;
        for (key, value) in puts {
            tree.put(*key, value)?;
        }
        tree.commit().map(|_| ())
    };
    let filler: Vec<(i64, &[u8])> = (0..40).map(|k| (k, &b"twenty bytes of data"[..])).collect();
    commit(&mut tree, &filler).map_err(|e| e.to_string())?;
    // The scan verifies every slot claiming at least the newest valid stamp seen so far, so
    // v3's image must come first in the file: it writes the first leaf (key 0), v2 the last.
    commit(&mut tree, &[(39, b"v2")]).map_err(|e| e.to_string())?;
    commit(&mut tree, &[(0, b"v3")]).map_err(|e| e.to_string())?;
    drop(tree);
    // The only image stamped 2 (bytes 24..32) is the leaf of key 39 that v2 wrote.
    let image = disk.image();
    let v2 = (0..image.len() / 512)
        .map(|slot| slot * 512)
        .filter(|&at| image[at..at + 4] == *b"MVBT" && image[at + 24..at + 32] == 2u64.to_le_bytes())
        .collect::<Vec<_>>();
    assert_eq!(v2.len(), 1, "v2 wrote one image");
    disk.corrupt(v2[0] as u64 + 100, &[image[v2[0] + 100] ^ 0xff]);
    let mut tree = Tree::open_on(sim_io(&disk), config).map_err(|e| e.to_string())?;
    tree.check().map_err(|e| e.to_string())?;
    tree.get(39).map_err(|e| e.to_string())
}

#[test]
fn a_torn_image_below_the_newest_version_falls_back_to_the_other_slot() {
    assert_eq!(
        open_with_a_torn_image_below_the_newest(None),
        Ok(Some(b"twenty bytes of data".to_vec()))
    );
    assert!(
        open_with_a_torn_image_below_the_newest(Some(Sabotage::NoFallbackFromTornClaim)).is_err(),
        "an open that trusts the newest claimed stamp of a torn slot passed"
    );
}
