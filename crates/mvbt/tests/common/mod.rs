//! Shared by the integration tests: the simulated disk as a medium, the four presets,
//! and a reference model.
#![allow(dead_code)]

use onesync_mvbt::{Config, StorageIo};
use onesync_store::sim::SimDisk;
use std::collections::BTreeMap;

pub fn sim_io(disk: &SimDisk) -> Box<dyn StorageIo> {
    disk.io()
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
