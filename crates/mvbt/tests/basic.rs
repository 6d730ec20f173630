mod common;

use common::*;
use onesync_mvbt::{Config, Error, Tree};
use onesync_store::sim::SimDisk;
use std::ops::Bound;

#[test]
fn insert_get_delete_many_all_presets() {
    for (name, config) in presets() {
        for node_size in [512, 1024, 4096] {
            let disk = SimDisk::new();
            let config = Config {
                node_size,
                ..config.clone()
            };
            let mut t = Tree::create_on(sim_io(&disk), config.clone()).unwrap();
            let mut model = Model::new();
            for round in 0..30u64 {
                t.begin().unwrap();
                for i in 0..40i64 {
                    let k = ((i * 7919 + round as i64 * 104729) % 1000) - 500;
                    if (i + round as i64) % 5 == 0 {
                        assert_eq!(t.delete(k).unwrap(), model.remove(&k).is_some());
                    } else {
                        let v = vec![(k & 0xff) as u8; (k.unsigned_abs() % 60) as usize];
                        assert_eq!(t.put(k, &v).unwrap(), model.insert(k, v).is_some());
                    }
                }
                let v = t.commit().unwrap();
                assert_eq!(v, round + 1);
                t.check()
                    .unwrap_or_else(|e| panic!("{name}/{node_size} round {round}: {e}"));
                let all = t
                    .range(Bound::Unbounded, Bound::Unbounded, None, usize::MAX)
                    .unwrap();
                let want: Vec<_> = model.iter().map(|(k, v)| (*k, v.clone())).collect();
                assert_eq!(all, want, "{name}/{node_size} round {round}");
            }
            drop(t);
            let mut t = Tree::open_on(sim_io(&disk), config).unwrap();
            t.check().unwrap();
            assert_eq!(t.latest_version(), 30);
            assert_eq!(t.count(None).unwrap(), model.len() as u64);
            for (k, v) in &model {
                assert_eq!(t.get(*k).unwrap().as_ref(), Some(v));
            }
        }
    }
}

#[test]
fn misuse_is_reported() {
    let disk = SimDisk::new();
    let mut t = Tree::create_on(sim_io(&disk), Config::ls_mvbt()).unwrap();
    assert!(matches!(t.put(1, b"x"), Err(Error::Misuse(_))));
    t.begin().unwrap();
    assert!(matches!(t.begin(), Err(Error::Misuse(_))));
    assert!(matches!(t.rollback_to(1), Err(Error::Misuse(_))));
    let big = vec![0u8; t.max_value_len() + 1];
    assert!(matches!(t.put(1, &big), Err(Error::Misuse(_))));
    t.put(1, &vec![1u8; t.max_value_len()]).unwrap();
    t.commit().unwrap();
    assert!(matches!(t.get_at(1, 5), Err(Error::Misuse(_))));
    let bad = Config {
        node_size: 1000,
        ..Config::ls_mvbt()
    };
    assert!(matches!(
        Tree::create_on(sim_io(&SimDisk::new()), bad),
        Err(Error::Misuse(_))
    ));
}

#[test]
fn every_mechanism_is_exercised() {
    for (redistribute, keep) in [(false, 0), (true, 0), (false, 2)] {
        let config = Config {
            node_size: 512,
            sibling_redistribution: redistribute,
            keep_versions: keep,
            ..Config::ls_mvbt()
        };
        let mut t = Tree::create_on(sim_io(&SimDisk::new()), config).unwrap();
        let mut model = Model::new();
        for round in 0..200i64 {
            t.begin().unwrap();
            for i in 0..3 {
                let k = (round * 37 + i * 101) % 500;
                if (round + i) % 4 == 0 {
                    t.delete(k).unwrap();
                    model.remove(&k);
                } else {
                    t.put(k, &[round as u8; 20]).unwrap();
                    model.insert(k, vec![round as u8; 20]);
                }
            }
            t.commit().unwrap();
        }
        t.check().unwrap();
        assert_eq!(t.count(None).unwrap(), model.len() as u64);
        let c = t.counters();
        eprintln!("redistribute {redistribute}, keep {keep}: {c:?}");
        assert!(
            c.lazy_splits > 0 && c.gc_cells > 0 && c.reserve_absorbed > 0,
            "{c:?}"
        );
        if redistribute {
            assert!(c.redistributions > 0, "{c:?}");
        }
    }
}
