//! The onesync VFS over a onesync store: each transaction one commit record of the store, at
//! three `synchronous` levels (they differ only in their pragma and their promise), and at
//! FULL opened with the URI parameter `concurrent=1` (concurrent writers).

use std::path::Path;

use anyhow::Result;
use rusqlite::Connection;

use super::{DeferredFlush, Durability, Rgb, Scheme, Storage};
use crate::sqlite::open_onesync_with;

pub struct Onesync {
    name: &'static str,
    description: &'static str,
    pragmas: &'static [&'static str],
    /// What makes a commit durable after its COMMIT returned (NORMAL, OFF); `None` at FULL,
    /// whose COMMIT waits for the flush. It decides the promise (`durability`) too.
    deferred_flush: Option<DeferredFlush>,
    /// URI parameters of every connection (`file:PATH?vfs=onesync&...`), if any.
    uri_parameters: &'static str,
    chart_color: Rgb,
}

pub const ONESYNC: Onesync = Onesync {
    name: "onesync",
    description: "The onesync VFS over a onesync store (synchronous=FULL)",
    pragmas: &["PRAGMA synchronous=FULL"],
    deferred_flush: None,
    uri_parameters: "",
    chart_color: (0x1b, 0x9e, 0x77),
};

pub const ONESYNC_NORMAL: Onesync = Onesync {
    name: "onesync-normal",
    description: "The onesync VFS, synchronous=NORMAL (commits shown at once, durable within 20 ms)",
    pragmas: &["PRAGMA synchronous=NORMAL"],
    deferred_flush: Some(DeferredFlush::Background),
    uri_parameters: "",
    chart_color: (0x7f, 0xc9, 0xb0),
};

pub const ONESYNC_OFF: Onesync = Onesync {
    name: "onesync-off",
    description: "The onesync VFS, synchronous=OFF (commits shown at once, durable at the next flush or PRAGMA onesync_flush)",
    pragmas: &["PRAGMA synchronous=OFF"],
    deferred_flush: Some(DeferredFlush::OnDemand),
    uri_parameters: "",
    chart_color: (0xb2, 0xe2, 0xd2),
};

/// `concurrent=1`: asks the VFS to let several connections write at once. The serial VFS
/// ignores the parameter, and this mode then runs as `onesync` does.
pub const ONESYNC_CONCURRENT: Onesync = Onesync {
    name: "onesync-concurrent",
    description: "The onesync VFS opened with concurrent=1 (concurrent writers; synchronous=FULL)",
    pragmas: &["PRAGMA synchronous=FULL"],
    deferred_flush: None,
    uri_parameters: "concurrent=1",
    chart_color: (0x0b, 0x6e, 0x52),
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
        open_onesync_with(path, true, self.uri_parameters)
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

    // kill_child: the child of the same name, so that it runs the same `synchronous` level
    // (NORMAL and OFF differ from FULL in-process: a commit shown at once, a flusher thread);
    // onesync-concurrent has no child of its own and runs as `onesync`'s.
    fn kill_child(&self) -> &'static str {
        if self.uri_parameters.is_empty() {
            self.name
        } else {
            ONESYNC.name
        }
    }

    fn chart_color(&self) -> Rgb {
        self.chart_color
    }
}
