//! Where one logical page lives: its slot, checksum, version and overlay.

use super::overlay::Overlay;
use crate::format::NO_SLOT;
use std::sync::Arc;

/// Where one logical page lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageEntry {
    /// The slot holding the page's base content, or `NO_SLOT` for zeros.
    pub slot: u64,
    /// CRC-32C of the slot's content (0 with `NO_SLOT`).
    pub crc: u32,
    /// Sequence number of the commit that last changed this page (for conflict checks).
    pub seq: u64,
    pub overlay: Option<Arc<Overlay>>,
}

impl PageEntry {
    pub const ZERO: PageEntry = PageEntry {
        slot: NO_SLOT,
        crc: 0,
        seq: 0,
        overlay: None,
    };
}
