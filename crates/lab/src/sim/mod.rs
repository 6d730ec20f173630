//! Simulated media SQLite runs on: files that lose power, and the simulated flash drive's
//! filesystem.

pub mod flash_files;
pub mod power_cut_files;
