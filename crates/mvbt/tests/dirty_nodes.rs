//! The paper's claim, as behaviour: with all optimisations an insert or delete commit
//! writes about one node; plain MVBT writes noticeably more.
mod common;

use common::*;
use onesync_mvbt::{Config, Tree};
use onesync_store::sim::SimDisk;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Node images written per commit over 1,000 one-row transactions alternating insert of
/// an absent key and delete of a present key, on a 2,000-key table of 128-byte values.
fn nodes_per_commit(config: Config) -> f64 {
    let mut tree = Tree::create_on(sim_io(&SimDisk::new()), config).unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    let mut present: Vec<i64> = Vec::new();
    tree.begin().unwrap();
    while present.len() < 2000 {
        let key = rng.random_range(0..1_000_000);
        if !tree.put(key, &[1u8; 128]).unwrap() {
            present.push(key);
        }
    }
    tree.commit().unwrap();
    let before = tree.counters();
    for i in 0..1000 {
        tree.begin().unwrap();
        if i % 2 == 0 {
            loop {
                let key = rng.random_range(0..1_000_000);
                if !tree.put(key, &[2u8; 128]).unwrap() {
                    present.push(key);
                    break;
                }
            }
        } else {
            let key = present.swap_remove(rng.random_range(0..present.len()));
            assert!(tree.delete(key).unwrap());
        }
        tree.commit().unwrap();
    }
    tree.check().unwrap();
    let after = tree.counters();
    assert_eq!(after.commits - before.commits, 1000);
    (after.nodes_written - before.nodes_written) as f64 / 1000.0
}

#[test]
fn ls_mvbt_writes_about_one_node_per_commit() {
    let ls = nodes_per_commit(Config::ls_mvbt());
    let mvbt = nodes_per_commit(Config::mvbt());
    let embedding = nodes_per_commit(Config::mvbt_embedding());
    let lazy = nodes_per_commit(Config::mvbt_lazy_split());
    eprintln!("nodes written per commit: ls_mvbt {ls:.3}, mvbt {mvbt:.3}, mvbt+embedding {embedding:.3}, mvbt+lazy split {lazy:.3}");
    assert!(ls <= 1.3, "LS-MVBT wrote {ls} nodes per commit");
    assert!(
        mvbt >= ls + 0.5,
        "MVBT wrote {mvbt} nodes per commit, LS-MVBT {ls}"
    );
}
