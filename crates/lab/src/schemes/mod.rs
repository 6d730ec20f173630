//! Commit schemes: one file per way of making a SQLite transaction durable and atomic, each
//! an implementation of [`Scheme`]. Every command asks the scheme what differs (how to open
//! a connection, where its counters come from, what a power cut may do to it) instead of
//! matching on the mode.
//!
//! Adding a scheme: one file here implementing [`Scheme`], and one line in [`Mode`]'s
//! registry ([`Mode::scheme`], [`Mode::ALL`]) to offer it on the command line.

pub mod batch_atomic;
mod counting_vfs;
pub mod flash;
pub mod maw;
pub mod mvbt;
pub mod onesync;
pub mod scheme;
pub mod stock;
pub mod wal;

use std::path::Path;

use anyhow::Result;
use clap::builder::PossibleValue;
use rusqlite::Connection;
use serde::{Serialize, Serializer};

pub use scheme::{apply_pragmas, DeferredFlush, Durability, Rgb, Scheme, Storage, DEFAULT_COLOR};

impl Durability {
    /// The mode the lab's ratios compare this class with when it is in the run (else the
    /// run's first mode): wal-normal for NORMAL and OFF, stock SQLite's way to the same
    /// promise, so that they are not flattered by a comparison with FULL modes.
    pub fn reference(self) -> Option<Mode> {
        match self {
            Durability::AfterCheckpoint => Some(Mode::WalNormal),
            Durability::AtCommit | Durability::None => None,
        }
    }
}

/// The commit schemes offered on the command line (`--mode`): the registry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Delete,
    Truncate,
    Persist,
    Wal,
    WalNormal,
    WalDelayed,
    Memory,
    Off,
    Onesync,
    OnesyncNormal,
    OnesyncOff,
    OnesyncConcurrent,
    Maw,
    BatchAtomic,
}

impl Mode {
    /// Every mode, in the order `--help` lists them.
    pub const ALL: [Mode; 14] = [
        Mode::Delete,
        Mode::Truncate,
        Mode::Persist,
        Mode::Wal,
        Mode::WalNormal,
        Mode::WalDelayed,
        Mode::Memory,
        Mode::Off,
        Mode::Onesync,
        Mode::OnesyncNormal,
        Mode::OnesyncOff,
        Mode::OnesyncConcurrent,
        Mode::Maw,
        Mode::BatchAtomic,
    ];

    /// The scheme this mode names.
    pub fn scheme(self) -> &'static dyn Scheme {
        match self {
            Mode::Delete => &stock::DELETE,
            Mode::Truncate => &stock::TRUNCATE,
            Mode::Persist => &stock::PERSIST,
            Mode::Wal => &wal::WAL,
            Mode::WalNormal => &wal::WAL_NORMAL,
            Mode::WalDelayed => &wal::WAL_DELAYED,
            Mode::Memory => &stock::MEMORY,
            Mode::Off => &stock::OFF,
            Mode::Onesync => &onesync::ONESYNC,
            Mode::OnesyncNormal => &onesync::ONESYNC_NORMAL,
            Mode::OnesyncOff => &onesync::ONESYNC_OFF,
            Mode::OnesyncConcurrent => &onesync::ONESYNC_CONCURRENT,
            Mode::Maw => &maw::MAW,
            Mode::BatchAtomic => &batch_atomic::BATCH_ATOMIC,
        }
    }

    pub fn name(self) -> &'static str {
        self.scheme().name()
    }

    /// The length of the longest name (the width of a table's mode column).
    pub fn name_width() -> usize {
        Mode::ALL.iter().map(|m| m.name().len()).max().unwrap_or(0)
    }

    /// The mode called `name`, if any.
    pub fn by_name(name: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|mode| mode.name() == name)
    }
}

impl clap::ValueEnum for Mode {
    fn value_variants<'a>() -> &'a [Self] {
        &Mode::ALL
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        let scheme = self.scheme();
        Some(PossibleValue::new(scheme.name()).help(scheme.description()))
    }
}

impl Serialize for Mode {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

/// Opens (creating if need be) a mode's database at `path`, with the mode's pragmas.
pub fn open_stock(mode: Mode, path: &Path) -> Result<Connection> {
    mode.scheme().open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mode_is_found_by_its_name() {
        for mode in Mode::ALL {
            assert_eq!(Mode::by_name(mode.name()), Some(mode));
        }
    }

    #[test]
    fn normal_and_off_modes_are_compared_with_wal_normal() {
        for mode in Mode::ALL {
            let reference = mode.scheme().durability().reference();
            let normal_class = matches!(mode, Mode::WalNormal | Mode::OnesyncNormal | Mode::OnesyncOff);
            assert_eq!(
                reference,
                normal_class.then_some(Mode::WalNormal),
                "{}",
                mode.name()
            );
        }
    }
}
