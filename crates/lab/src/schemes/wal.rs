//! Stock SQLite's write-ahead log, in three variants (a [`Stock`] scheme each: they differ
//! only in their pragmas). All run as the `wal` child under kills.

use super::stock::Stock;
use super::Durability;

pub const WAL: Stock = Stock {
    name: "wal",
    description: "Write-ahead log, synchronous=FULL",
    pragmas: &["PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL"],
    durability: Durability::AtCommit,
    kill_child: "wal",
    chart_color: (0x75, 0x70, 0xb3),
};

pub const WAL_NORMAL: Stock = Stock {
    name: "wal-normal",
    description: "Write-ahead log, synchronous=NORMAL (commits are not durable until a checkpoint)",
    pragmas: &["PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL"],
    durability: Durability::AfterCheckpoint,
    kill_child: "wal",
    chart_color: (0xb8, 0xb5, 0xdc),
};

pub const WAL_DELAYED: Stock = Stock {
    name: "wal-delayed",
    description: "Write-ahead log, synchronous=FULL, checkpoints only when the log reaches 64 MiB",
    // 16384 pages of 4 KiB: the log grows to 64 MiB before a checkpoint.
    pragmas: &[
        "PRAGMA journal_mode=WAL",
        "PRAGMA synchronous=FULL",
        "PRAGMA wal_autocheckpoint=16384",
    ],
    durability: Durability::AtCommit,
    kill_child: "wal",
    chart_color: (0x4a, 0x45, 0x8a),
};
