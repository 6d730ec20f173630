//! Property test: random transactions against a reference model (one map per committed
//! version), over the four presets, several node sizes and value sizes.
mod common;

use common::*;
use onesync_mvbt::{Config, Error, Tree};
use onesync_store::sim::SimDisk;
use proptest::prelude::*;
use std::ops::Bound;

#[derive(Clone, Debug)]
enum Op {
    Put(i64, u8),
    Delete(i64),
    Savepoint,
    RollbackTo(u8),
    Release(u8),
    Commit,
    Rollback,
    Spill,
    Reopen,
    Range(i64, i64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        30 => (0i64..300, any::<u8>()).prop_map(|(k, l)| Op::Put(k, l)),
        10 => (0i64..300).prop_map(Op::Delete),
        3 => Just(Op::Savepoint),
        3 => any::<u8>().prop_map(Op::RollbackTo),
        2 => any::<u8>().prop_map(Op::Release),
        8 => Just(Op::Commit),
        2 => Just(Op::Rollback),
        2 => Just(Op::Spill),
        1 => Just(Op::Reopen),
        3 => (0i64..300, 0i64..300).prop_map(|(a, b)| Op::Range(a.min(b), a.max(b))),
    ]
}

struct Run {
    disk: SimDisk,
    config: Config,
    tree: Tree,
    /// committed[v] = the contents as of version v.
    committed: Vec<Model>,
    /// The open transaction's contents and its savepoints' contents.
    txn: Option<(Model, Vec<Model>)>,
    near_max: bool,
}

impl Run {
    fn value(&self, key: i64, sel: u8) -> Vec<u8> {
        let max = self.tree.max_value_len();
        let len = if self.near_max {
            max - (sel as usize % 3)
        } else {
            sel as usize % 40
        };
        vec![(key as u8) ^ sel; len]
    }

    fn current(&self) -> &Model {
        match &self.txn {
            Some((m, _)) => m,
            None => self.committed.last().unwrap(),
        }
    }

    fn ensure_txn(&mut self) {
        if self.txn.is_none() {
            self.tree.begin().unwrap();
            self.txn = Some((self.committed.last().unwrap().clone(), Vec::new()));
        }
    }

    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match *op {
            Op::Put(k, sel) => {
                self.ensure_txn();
                let v = self.value(k, sel);
                let existed = self.tree.put(k, &v).unwrap();
                let m = &mut self.txn.as_mut().unwrap().0;
                prop_assert_eq!(existed, m.insert(k, v).is_some());
            }
            Op::Delete(k) => {
                self.ensure_txn();
                let existed = self.tree.delete(k).unwrap();
                let m = &mut self.txn.as_mut().unwrap().0;
                prop_assert_eq!(existed, m.remove(&k).is_some());
            }
            Op::Savepoint => {
                self.ensure_txn();
                let depth = self.tree.savepoint().unwrap();
                let (m, sps) = self.txn.as_mut().unwrap();
                sps.push(m.clone());
                prop_assert_eq!(depth, sps.len());
            }
            Op::RollbackTo(sel) => {
                let Some((m, sps)) = self.txn.as_mut() else {
                    return Ok(());
                };
                if sps.is_empty() {
                    prop_assert!(matches!(self.tree.rollback_to(1), Err(Error::Misuse(_))));
                    return Ok(());
                }
                let depth = 1 + sel as usize % sps.len();
                self.tree.rollback_to(depth).unwrap();
                sps.truncate(depth);
                *m = sps[depth - 1].clone();
            }
            Op::Release(sel) => {
                let Some((_, sps)) = self.txn.as_mut() else {
                    return Ok(());
                };
                if sps.is_empty() {
                    return Ok(());
                }
                let depth = 1 + sel as usize % sps.len();
                self.tree.release(depth).unwrap();
                sps.truncate(depth - 1);
            }
            Op::Commit => {
                let Some((m, _)) = self.txn.take() else {
                    return Ok(());
                };
                let before = self.tree.latest_version();
                let v = self.tree.commit().unwrap();
                if v == before {
                    prop_assert_eq!(&m, self.committed.last().unwrap());
                } else {
                    prop_assert_eq!(v, before + 1);
                    self.committed.push(m);
                }
                self.verify(true)?;
            }
            Op::Rollback => {
                if self.txn.take().is_some() {
                    self.tree.rollback().unwrap();
                    self.verify(true)?;
                }
            }
            Op::Spill => {
                if self.txn.is_some() {
                    self.tree.spill().unwrap();
                }
            }
            Op::Reopen => {
                // An open transaction is lost, as in a crash (its spills, if any, revert).
                self.txn = None;
                let fresh = Tree::create_on(sim_io(&SimDisk::new()), self.config.clone()).unwrap();
                drop(std::mem::replace(&mut self.tree, fresh));
                self.tree = Tree::open_on(sim_io(&self.disk), self.config.clone()).unwrap();
                prop_assert_eq!(self.tree.latest_version() as usize, self.committed.len() - 1);
                prop_assert_eq!(self.tree.oldest_readable_version(), self.tree.latest_version());
                self.verify(true)?;
            }
            Op::Range(a, b) => {
                let got = self
                    .tree
                    .range(Bound::Included(a), Bound::Excluded(b), None, 5)
                    .unwrap();
                let want: Vec<_> = self
                    .current()
                    .range(a..b)
                    .take(5)
                    .map(|(k, v)| (*k, v.clone()))
                    .collect();
                prop_assert_eq!(got, want);
            }
        }
        Ok(())
    }

    fn verify(&mut self, old_versions: bool) -> Result<(), TestCaseError> {
        if let Err(e) = self.tree.check() {
            return Err(TestCaseError::fail(format!("check: {e}")));
        }
        let all = self
            .tree
            .range(Bound::Unbounded, Bound::Unbounded, None, usize::MAX)
            .unwrap();
        let want: Vec<_> = self.current().iter().map(|(k, v)| (*k, v.clone())).collect();
        prop_assert_eq!(&all, &want);
        prop_assert_eq!(self.tree.count(None).unwrap(), want.len() as u64);
        if old_versions {
            let latest = self.tree.latest_version();
            let oldest = self.tree.oldest_readable_version();
            prop_assert!(oldest + self.config.keep_versions >= latest);
            for v in oldest..=latest {
                let got = self
                    .tree
                    .range(Bound::Unbounded, Bound::Unbounded, Some(v), usize::MAX)
                    .unwrap();
                let want: Vec<_> = self.committed[v as usize]
                    .iter()
                    .map(|(k, v)| (*k, v.clone()))
                    .collect();
                prop_assert_eq!(&got, &want, "as of version {}", v);
                prop_assert_eq!(self.tree.count(Some(v)).unwrap(), want.len() as u64);
                for (k, val) in self.committed[v as usize].iter().take(3) {
                    let got = self.tree.get_at(*k, v).unwrap();
                    prop_assert_eq!(got.as_ref(), Some(val));
                }
            }
            if oldest > 0 {
                let gone = matches!(self.tree.get_at(0, oldest - 1), Err(Error::VersionGone { .. }));
                prop_assert!(gone);
            }
        }
        Ok(())
    }
}

fn run(
    preset: usize,
    node_size: usize,
    keep: u64,
    redistribute: bool,
    near_max: bool,
    ops: Vec<Op>,
) -> Result<(), TestCaseError> {
    let config = Config {
        node_size,
        keep_versions: keep,
        sibling_redistribution: redistribute,
        ..presets()[preset].1.clone()
    };
    let disk = SimDisk::new();
    let tree = Tree::create_on(sim_io(&disk), config.clone()).unwrap();
    let mut run = Run {
        disk,
        config,
        tree,
        committed: vec![Model::new()],
        txn: None,
        near_max,
    };
    for op in &ops {
        run.apply(op)?;
    }
    run.apply(&Op::Commit)?;
    run.apply(&Op::Reopen)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(400), ..ProptestConfig::default() })]

    #[test]
    fn matches_the_model(
        preset in 0usize..4,
        node_size in prop_oneof![Just(512usize), Just(1024), Just(4096), Just(8192)],
        keep in 0u64..4,
        redistribute in any::<bool>(),
        near_max in prop::bool::weighted(0.3),
        ops in prop::collection::vec(op(), 1..250),
    ) {
        run(preset, node_size, keep, redistribute, near_max, ops)?;
    }
}
