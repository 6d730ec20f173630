//! The onesync VFS over a onesync store: each transaction one commit record of the store.

use std::path::Path;

use anyhow::Result;
use rusqlite::Connection;

use super::{Rgb, Scheme, Storage};
use crate::sqlite::open_onesync;

pub struct Onesync;

pub const ONESYNC: Onesync = Onesync;

impl Scheme for Onesync {
    fn name(&self) -> &'static str {
        "onesync"
    }

    fn description(&self) -> &'static str {
        "The onesync VFS over a onesync store (synchronous=FULL)"
    }

    fn pragmas(&self) -> &'static [&'static str] {
        &["PRAGMA synchronous=FULL"]
    }

    fn connect(&self, path: &Path) -> Result<Connection> {
        open_onesync(path, true)
    }

    fn storage(&self) -> Storage {
        Storage::Store
    }

    fn chart_color(&self) -> Rgb {
        (0x1b, 0x9e, 0x77)
    }
}
