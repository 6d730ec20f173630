//! One module per CLI command (`main.rs` only parses and dispatches).

pub mod bench;
pub mod explore;
pub mod flash;
pub mod kernel_torture;
pub mod mvbt;
pub mod replication_torture;
pub mod report;
pub mod store_bench;
pub mod torture;
pub mod vfs_concurrency;
pub mod vfs_kill_torture;
