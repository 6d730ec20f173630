//! The on-disk format, versions 1 and 2 (version 2 differs in what the header's checkpoint
//! is: a manifest naming the mapping's runs instead of the whole mapping).
//!
//! Every structure is a packed byte stream: integers are little-endian, fields follow each
//! other with no padding or alignment, and variable-length parts are a length field followed
//! by that many bytes. Every CRC is CRC-32C (Castagnoli). Offsets in the tables below are
//! in bytes from the start of the structure the table describes. Each structure has its
//! file, its byte table at the top: `header.rs` (the header copies), `checkpoint.rs` (the
//! mapping checkpoint, version 1), `manifest.rs` (the manifest of version 2), `record.rs` (commit records and their operations). All are encoded
//! and decoded through `onesync_codec::OnDisk`; a `DecodeError` becomes `Error::Corrupt`
//! with its message.
//!
//! # File layout
//!
//! ```text
//! offset 0                     header copy 0  (HEADER_BLOCK = 4096 bytes, HEADER_LEN = 1024 used)
//! offset 4096                  header copy 1
//! offset 8192 + n * page_size  slot n, page_size bytes  (SLOT_BASE = 2 * HEADER_BLOCK = 8192)
//! ```
//!
//! Every slot holds a data page, a piece of the mapping checkpoint, (part of) a commit
//! record, or is free or reserved for the records to come. The header says where the
//! checkpoint is and where the chain of records after it starts. Since `page_size` is a
//! power of two of at least 512, every slot starts at a multiple of `RECORD_ALIGN`.
//!
//! * **Header**, two copies. A checkpoint writes the copy at `Header::copy_offset`
//!   (`generation % 2`) and flushes, then duplicates it into the other copy and flushes
//!   again; of the valid copies the one with the higher generation wins.
//! * **Checkpoint**: the whole mapping (files, sizes, page -> slot + CRC + small overlays)
//!   as of one sequence number. Mapping metadata only: no data page is ever copied.
//! * **Commit record**: starts at a slot. A commit writes its record and its pages as one
//!   contiguous run `[record | pages]` with one `pwrite`, so a commit is one write request
//!   plus one flush. Records form a chain through the slots: the header names the first,
//!   each names the next. The CRC chain (`prev_crc`), the session nonce and the epoch
//!   reject stale records of an earlier session or checkpoint. A `Page` operation carries
//!   the CRC of the page it maps, so recovery rejects a record whose pages did not all
//!   reach the disk.
//!

mod checkpoint;
mod constants;
mod header;
mod manifest;
mod record;

pub use checkpoint::Checkpoint;
#[cfg(test)]
pub use checkpoint::CheckpointEncoder;
pub use constants::{
    slot_offset, valid_page_size, FORMAT_VERSION, HEADER_BLOCK, HEADER_LEN, MAGIC, MAX_CHECKPOINT_EXTENTS,
    MAX_NAME_LEN, MAX_PAGE_SIZE, MIN_PAGE_SIZE, NO_SLOT, RECORD_ALIGN, SLOT_BASE,
};
pub use header::{CheckpointRef, Header, LogRef};
pub use manifest::{Manifest, ManifestFile};
pub use record::{Op, Record, RecordKind};

/// Little-endian readers for the offset tests, and seeds for the decoder fuzz tests taken
/// from a real store.
#[cfg(test)]
mod test_support {
    use super::{slot_offset, Header, Record, HEADER_BLOCK, HEADER_LEN};
    use crate::sim::SimDisk;
    use crate::{Options, Store};

    pub fn u16_at(buf: &[u8], at: usize) -> u16 {
        u16::from_le_bytes(buf[at..at + 2].try_into().unwrap())
    }
    pub fn u32_at(buf: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(buf[at..at + 4].try_into().unwrap())
    }
    pub fn u64_at(buf: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(buf[at..at + 8].try_into().unwrap())
    }

    /// Decoder fuzz iterations per structure.
    pub const FUZZ_INPUTS: usize = 4000;

    /// The encodings a real store wrote: both header copies, every record of the chain
    /// after the newest checkpoint, and that checkpoint.
    pub struct Seeds {
        pub headers: Vec<Vec<u8>>,
        pub records: Vec<Vec<u8>>,
        pub checkpoints: Vec<Vec<u8>>,
        pub manifests: Vec<Vec<u8>>,
    }

    /// A version-1 checkpoint (stores write manifests now): two files, zeros, an overlay.
    fn version_1_checkpoint() -> Vec<u8> {
        let mut enc = super::CheckpointEncoder::new(9, 4, 2);
        enc.file(1, "main", 3 * 512, 2);
        enc.page(0, 17, 0x1234_5678, &[(24, vec![1u8, 2, 3])]);
        enc.page(2, 18, 0x9abc_def0, &[] as &[(u32, Vec<u8>)]);
        enc.file(3, "main-journal", 512, 1);
        enc.page(0, super::NO_SLOT, 0, &[(0, vec![7u8; 9])]);
        enc.finish().0
    }

    pub fn seeds() -> Seeds {
        const PS: usize = 512;
        let opts = Options {
            page_size: PS as u32,
            initial_capacity: 64 << 10,
            window_bytes: 4 << 10,
            ..Options::default()
        };
        let disk = SimDisk::new();
        let store = Store::create_with_io(disk.io(), &opts).unwrap();
        let mut page = vec![0u8; PS];
        for round in 0..6u8 {
            let mut t = store.begin();
            let main = match t.file("main") {
                Some(f) => f,
                None => t.create_file("main").unwrap(),
            };
            page.fill(round + 1);
            t.write_page(main, u64::from(round), &page).unwrap();
            // A few bytes changed: carried in the record as an overlay.
            page[24..28].copy_from_slice(&[round, 1, 2, 3]);
            t.write_page(main, 0, &page).unwrap();
            if round == 2 {
                let side = t.create_file("side-journal").unwrap();
                t.write_page(side, 0, &page).unwrap();
            }
            if round == 4 {
                let side = t.file("side-journal").unwrap();
                t.delete_file(side).unwrap();
                t.set_file_size(main, 3 * PS as u64).unwrap();
            }
            t.commit().unwrap();
            if round == 3 {
                store.checkpoint().unwrap();
            }
        }
        drop(store);
        let image = disk.image();
        let headers: Vec<Vec<u8>> = [0, HEADER_BLOCK as usize]
            .iter()
            .map(|&at| image[at..at + HEADER_LEN].to_vec())
            .collect();
        let header = Header::decode(&headers[0]).unwrap();
        let mut checkpoint = Vec::new();
        for &(first, n) in header.checkpoint.extents() {
            let at = slot_offset(first, PS as u64) as usize;
            checkpoint.extend_from_slice(&image[at..at + n as usize * PS]);
        }
        checkpoint.truncate(header.checkpoint.len as usize);
        let mut records = Vec::new();
        let mut slot = header.log.first_slot;
        loop {
            let at = slot_offset(slot, PS as u64) as usize;
            let Some(len) = Record::peek_len(&image[at..at + PS]) else {
                break;
            };
            let bytes = image[at..at + len as usize].to_vec();
            let Some((record, _)) = Record::decode(&bytes) else {
                break;
            };
            records.push(bytes);
            slot = record.next_slot;
        }
        assert!(
            records.len() >= 2,
            "the chain after the checkpoint holds the last commits"
        );
        Seeds {
            headers,
            records,
            checkpoints: vec![version_1_checkpoint()],
            manifests: vec![checkpoint],
        }
    }
}
