//! Shared by the integration tests: a `NodeIo` over the simulated disk, the four presets,
//! and a reference model.
#![allow(dead_code)]

use onesync_mvbt::{Config, NodeIo};
use onesync_store::io::StorageIo;
use onesync_store::sim::SimDisk;
use std::collections::BTreeMap;

/// The simulated disk of `onesync-store` as a tree's medium.
pub struct SimIo(pub SimDisk);

impl NodeIo for SimIo {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.0.read_at(buf, offset)
    }
    fn write_at(&self, data: &[u8], offset: u64) -> std::io::Result<()> {
        self.0.write_at(data, offset)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.0.sync_data()
    }
    fn size(&self) -> std::io::Result<u64> {
        self.0.size()
    }
}

pub fn sim_io(disk: &SimDisk) -> Box<dyn NodeIo> {
    Box::new(SimIo(disk.clone()))
}

pub fn presets() -> Vec<(&'static str, Config)> {
    vec![
        ("ls_mvbt", Config::ls_mvbt()),
        ("mvbt", Config::mvbt()),
        ("mvbt_embedding", Config::mvbt_embedding()),
        ("mvbt_lazy_split", Config::mvbt_lazy_split()),
    ]
}

pub type Model = BTreeMap<i64, Vec<u8>>;

/// How many cases a randomized test runs: `ONESYNC_MVBT_CASES` or the default.
pub fn cases(default: u32) -> u32 {
    std::env::var("ONESYNC_MVBT_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}
