//! The small drive and host-filesystem settings the filesystem tests share: small blocks so
//! garbage collection runs often, a small journal and dirty limit so commits and checkpoints
//! come often.

use onesync_flash::hostfs::{FsConfig, Journaling};
use onesync_flash::{Geometry, Ssd, SsdConfig};

/// A small drive with small blocks, so garbage collection runs often.
pub fn small_drive() -> Ssd {
    let mut cfg = SsdConfig::with_capacity_mib(8);
    cfg.geometry = Geometry {
        pages_per_block: 16,
        blocks: 96,
        ..cfg.geometry
    };
    Ssd::new(cfg).expect("drive")
}

pub fn config(journaling: Journaling) -> FsConfig {
    FsConfig {
        journal_blocks: 64,
        dirty_limit_blocks: 6,
        ..FsConfig::with_journaling(journaling)
    }
}
