//! The `onesync` command's subcommands (src/main.rs parses the arguments).

pub mod convert;
pub mod files;
pub mod inspect;
pub mod output;
pub mod restore;
