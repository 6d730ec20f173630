//! Stock SQLite's rollback-journal modes (and the journal-less negative controls), through
//! the counting shim: they differ only in their pragmas, so one parameterised scheme.

use std::path::Path;

use anyhow::Result;
use rusqlite::Connection;

use super::counting_vfs::{self, BatchAtomic};
use super::{Durability, Rgb, Scheme, DEFAULT_COLOR};

/// A stock SQLite journal mode on the counting shim.
pub struct Stock {
    pub name: &'static str,
    pub description: &'static str,
    pub pragmas: &'static [&'static str],
    pub durability: Durability,
    /// The kill-torture child that runs it.
    pub kill_child: &'static str,
    pub chart_color: Rgb,
}

pub const DELETE: Stock = Stock {
    name: "delete",
    description: "Rollback journal, deleted at commit (synchronous=FULL)",
    pragmas: &["PRAGMA journal_mode=DELETE", "PRAGMA synchronous=FULL"],
    durability: Durability::AtCommit,
    kill_child: "delete",
    chart_color: DEFAULT_COLOR,
};

pub const TRUNCATE: Stock = Stock {
    name: "truncate",
    description: "Rollback journal, truncated at commit (synchronous=FULL)",
    pragmas: &["PRAGMA journal_mode=TRUNCATE", "PRAGMA synchronous=FULL"],
    durability: Durability::AtCommit,
    kill_child: "truncate",
    chart_color: (0xf0, 0x8c, 0x3c),
};

pub const PERSIST: Stock = Stock {
    name: "persist",
    description: "Rollback journal, header zeroed at commit (synchronous=FULL)",
    pragmas: &["PRAGMA journal_mode=PERSIST", "PRAGMA synchronous=FULL"],
    durability: Durability::AtCommit,
    kill_child: "persist",
    chart_color: (0xa8, 0x48, 0x00),
};

pub const MEMORY: Stock = Stock {
    name: "memory",
    description: "Journal in memory: not crash-safe (a negative control)",
    pragmas: &["PRAGMA journal_mode=MEMORY", "PRAGMA synchronous=FULL"],
    durability: Durability::None,
    kill_child: "memory",
    chart_color: (0xb0, 0xb0, 0xb0),
};

pub const OFF: Stock = Stock {
    name: "off",
    description: "No journal: not crash-safe (a negative control)",
    pragmas: &["PRAGMA journal_mode=OFF", "PRAGMA synchronous=FULL"],
    durability: Durability::None,
    kill_child: "off",
    chart_color: (0x70, 0x70, 0x70),
};

impl Scheme for Stock {
    fn name(&self) -> &'static str {
        self.name
    }

    fn description(&self) -> &'static str {
        self.description
    }

    fn pragmas(&self) -> &'static [&'static str] {
        self.pragmas
    }

    fn connect(&self, path: &Path) -> Result<Connection> {
        counting_vfs::open(path, BatchAtomic::Hidden)
    }

    fn durability(&self) -> Durability {
        self.durability
    }

    fn kill_child(&self) -> &'static str {
        self.kill_child
    }

    fn chart_color(&self) -> Rgb {
        self.chart_color
    }
}
