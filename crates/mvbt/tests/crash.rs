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
