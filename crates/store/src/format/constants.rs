//! The format's constants (the file layout they describe is at the top of `format/mod.rs`),
//! slot offsets and the page sizes a store may have.

pub const MAGIC: [u8; 16] = *b"onesync store\0\r\n";
/// The version every header is written in now; version 1 (a whole-mapping checkpoint)
/// is still read, and migrated by the first checkpoint.
pub const FORMAT_VERSION: u32 = 2;
pub const HEADER_BLOCK: u64 = 4096;
/// Bytes of a header copy covered by its CRC (fixed fields, checkpoint extents, CRC).
pub const HEADER_LEN: usize = 1024;
/// Runs of slots a checkpoint may occupy (so that a fragmented store can still write one).
pub const MAX_CHECKPOINT_EXTENTS: usize = 56;
/// Byte offset of slot 0.
pub const SLOT_BASE: u64 = 2 * HEADER_BLOCK;
/// Commit records are aligned to, and padded to a multiple of, this many bytes.
pub const RECORD_ALIGN: u64 = 512;
/// `slot` value of a page that reads as zeros (plus any overlay) and occupies no slot.
pub const NO_SLOT: u64 = u64::MAX;
pub const MIN_PAGE_SIZE: u32 = 512;
pub const MAX_PAGE_SIZE: u32 = 65536;
/// Longest logical file name.
pub const MAX_NAME_LEN: usize = 1024;

/// Byte offset of slot `slot` for pages of `page_size` bytes.
pub fn slot_offset(slot: u64, page_size: u64) -> u64 {
    SLOT_BASE + slot * page_size
}

pub fn valid_page_size(page_size: u32) -> bool {
    (MIN_PAGE_SIZE..=MAX_PAGE_SIZE).contains(&page_size) && page_size.is_power_of_two()
}
