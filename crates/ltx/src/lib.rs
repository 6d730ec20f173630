//! LTX files, Litestream 0.5's replica format, encoded and decoded byte for byte as
//! superfly/ltx (v0.5.2 and its newest commit) does, and Litestream replicas on a directory
//! or S3-compatible storage ([`client`]): written ([`replica`]), compacted and pruned
//! ([`compact`]), restored ([`restore`]).
//!
//! All integers are big-endian. A file is a header, page frames, an end marker, a page
//! index and a trailer:
//!
//! # Header (100 bytes)
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 4 | magic | the bytes `"LTX1"` (format version 3) |
//! | 4 | 4 | flags | u32; only bit 1 (`0x2`, no checksums) may be set |
//! | 8 | 4 | page size | u32, a power of two from 512 to 65536 |
//! | 12 | 4 | commit | u32, the database's size in pages after the file applies |
//! | 16 | 8 | min TXID | u64, > 0; 1 makes the file a snapshot |
//! | 24 | 8 | max TXID | u64, ≥ min TXID |
//! | 32 | 8 | timestamp | i64, milliseconds since the Unix epoch |
//! | 40 | 8 | pre-apply checksum | u64, the database checksum before; 0 on snapshots and without checksums, else flagged |
//! | 48 | 8 | WAL offset | i64, ≥ 0; 0 when not from a WAL |
//! | 56 | 8 | WAL size | i64, ≥ 0; 0 when the WAL offset is |
//! | 64 | 4 | WAL salt 1 | u32; 0 when the WAL offset is |
//! | 68 | 4 | WAL salt 2 | u32; 0 when the WAL offset is |
//! | 72 | 8 | node ID | u64, 0 if unset |
//! | 80 | 20 | reserved | zeros (read and ignored) |
//!
//! # Page frames, from byte 100
//!
//! One per page, in ascending page number; a snapshot holds every page `1..=commit` but
//! the lock page (the page holding SQLite's pending byte, `0x40000000 / page size + 1`),
//! which no file holds. No page is above commit.
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 4 | pgno | u32, > 0 |
//! | 4 | 2 | flags | u16, `0x0001`: a size follows and the data is one LZ4 block (files before LTX v0.5 used LZ4 frames and flag 0; not read here) |
//! | 6 | 4 | size | u32, `n`, the compressed bytes |
//! | 10 | n | data | the page as one LZ4 block, compressed as pierrec/lz4's `CompressBlock` does ([`lz4`]) |
//!
//! Then an end marker: 6 zero bytes (a page header with page number and flags 0).
//!
//! # Page index
//!
//! Per page, ascending: three unsigned LEB128 varints (Go's `binary.AppendUvarint`): the page
//! number, the file offset of its frame, and the frame's size (`10 + n`). Then a varint 0,
//! then u64 the index's size in bytes (the varints and the 0, not this field).
//!
//! # Trailer (16 bytes)
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 8 | post-apply checksum | u64, the database checksum after the file applies (flagged; exactly the flag when commit is 0); 0 without checksums |
//! | 8 | 8 | file checksum | u64, flagged CRC-64 (below) |
//!
//! # Checksums ([`checksum`])
//!
//! CRC-64 with Go's ISO table (CRC-64/GO-ISO); every stored checksum has bit 63 set. The
//! **file checksum** is the CRC of the header, every frame's 10 header and size bytes
//! followed by the page's *uncompressed* bytes (not the compressed ones), the end marker,
//! the index with its size, and the post-apply checksum. The **database checksum** is the
//! XOR of `CRC(pgno as u32 BE ‖ page)` over every page but the lock page, flagged. A
//! snapshot's post-apply checksum must equal its pages' database checksum.
//!
//! Decoding ([`LtxFile`] through [`onesync_codec::OnDisk`]) checks all of the above and that
//! the index describes the frames exactly; bad bytes are a [`DecodeError`] naming the byte
//! offset, never a panic.
#![forbid(unsafe_code)]

pub mod checksum;
pub mod client;
pub mod compact;
mod error;
pub mod format;
pub mod lz4;
pub mod replica;
pub mod restore;
#[cfg(feature = "test-support")]
pub mod testing;

pub use checksum::{database_checksum, lock_pgno, page_checksum, PageChecksums, CHECKSUM_FLAG};
pub use error::Error;
pub use format::{Header, LtxFile, Page};
pub use onesync_codec::DecodeError;
