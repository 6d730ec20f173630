//! The onesync VFS over a onesync store: each transaction one commit record of the store, at
//! three `synchronous` levels (they differ only in their pragma and their promise).

use std::path::Path;

use anyhow::Result;
use rusqlite::Connection;

use super::{DeferredFlush, Durability, Rgb, Scheme, Storage};
use crate::sqlite::open_onesync;

pub struct Onesync {
    name: &'static str,
    description: &'static str,
    pragmas: &'static [&'static str],
    /// What makes a commit durable after its COMMIT returned (NORMAL, OFF); `None` at FULL,
    /// whose COMMIT waits for the flush. It decides the promise (`durability`) too.
    deferred_flush: Option<DeferredFlush>,
    chart_color: Rgb,
}

pub const ONESYNC: Onesync = Onesync {
    name: "onesync",
    description: "The onesync VFS over a onesync store (synchronous=FULL)",
    pragmas: &["PRAGMA synchronous=FULL"],
    deferred_flush: None,
    chart_color: (0x1b, 0x9e, 0x77),
};

pub const ONESYNC_NORMAL: Onesync = Onesync {
    name: "onesync-normal",
    description: "The onesync VFS, synchronous=NORMAL (commits shown at once, durable within 20 ms)",
    pragmas: &["PRAGMA synchronous=NORMAL"],
    deferred_flush: Some(DeferredFlush::Background),
    chart_color: (0x7f, 0xc9, 0xb0),
};

pub const ONESYNC_OFF: Onesync = Onesync {
    name: "onesync-off",
    description: "The onesync VFS, synchronous=OFF (commits shown at once, durable at the next flush or PRAGMA onesync_flush)",
    pragmas: &["PRAGMA synchronous=OFF"],
    deferred_flush: Some(DeferredFlush::OnDemand),
    chart_color: (0xb2, 0xe2, 0xd2),
};

impl Scheme for Onesync {
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
        open_onesync(path, true)
    }

    fn storage(&self) -> Storage {
        Storage::Store
    }

    fn durability(&self) -> Durability {
        match self.deferred_flush {
            None => Durability::AtCommit,
            Some(_) => Durability::AfterCheckpoint,
        }
    }

    fn deferred_flush(&self) -> Option<DeferredFlush> {
        self.deferred_flush
    }

    // kill_child: the default, the child of the same name, so that it runs the same
    // `synchronous` level (NORMAL and OFF differ from FULL in-process: a commit shown at once,
    // a flusher thread).

    fn chart_color(&self) -> Rgb {
        self.chart_color
    }
}
