//! The on-disk structures and where they live: the superblock and the layout it implies,
//! inodes and their extents, the journal's blocks.

use crate::Lpn;

use super::{FsError, FsResult};

/// Bytes per inode record.
pub const INODE_SIZE: usize = 512;
/// Longest file name.
pub const MAX_NAME: usize = 96;
/// Extents an inode holds (ext4 keeps 4 in the inode and grows a tree; a fixed list keeps
/// the format simple and allocation in chunks keeps files to a few extents).
pub(super) const MAX_EXTENTS: usize = 48;
pub(super) const SUPER_MAGIC: &[u8; 8] = b"OSFLFS01";
pub(super) const JSB_MAGIC: u32 = 0x4a53_4231; // "JSB1"
pub(super) const DESC_MAGIC: u32 = 0x4a44_5343; // "JDSC"
pub(super) const COMMIT_MAGIC: u32 = 0x4a43_4d54; // "JCMT"

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Layout {
    pub(super) block_size: usize,
    pub(super) total_blocks: u64,
    pub(super) group_desc: Lpn,
    pub(super) inode_bitmap: Lpn,
    pub(super) block_bitmap_start: Lpn,
    pub(super) block_bitmap_blocks: u64,
    pub(super) directory: Lpn,
    pub(super) inode_start: Lpn,
    pub(super) inode_blocks: u64,
    pub(super) journal_start: Lpn,
    pub(super) journal_blocks: u64,
    pub(super) data_start: Lpn,
}

impl Layout {
    pub(super) fn new(
        block_size: usize,
        total_blocks: u64,
        inode_blocks: u64,
        journal_blocks: u64,
    ) -> FsResult<Layout> {
        let bits_per_block = (block_size * 8) as u64;
        let block_bitmap_blocks = total_blocks.div_ceil(bits_per_block).max(1);
        let block_bitmap_start = 3;
        let directory = block_bitmap_start + block_bitmap_blocks;
        let inode_start = directory + 1;
        let journal_start = inode_start + inode_blocks;
        let data_start = journal_start + journal_blocks;
        if journal_blocks < 16 || inode_blocks == 0 || data_start + 16 > total_blocks {
            return Err(FsError::TooSmall(total_blocks));
        }
        Ok(Layout {
            block_size,
            total_blocks,
            group_desc: 1,
            inode_bitmap: 2,
            block_bitmap_start,
            block_bitmap_blocks,
            directory,
            inode_start,
            inode_blocks,
            journal_start,
            journal_blocks,
            data_start,
        })
    }

    pub(super) fn inodes_per_block(&self) -> usize {
        self.block_size / INODE_SIZE
    }

    pub(super) fn inode_count(&self) -> usize {
        self.inodes_per_block() * self.inode_blocks as usize
    }

    pub(super) fn inode_block(&self, ino: u32) -> Lpn {
        self.inode_start + ino as u64 / self.inodes_per_block() as u64
    }

    /// Log blocks of the journal (after its superblock).
    pub(super) fn log_len(&self) -> u64 {
        self.journal_blocks - 1
    }

    pub(super) fn log_block(&self, pos: u64) -> Lpn {
        self.journal_start + 1 + pos
    }

    pub(super) fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; self.block_size];
        b[..8].copy_from_slice(SUPER_MAGIC);
        let fields = [
            self.block_size as u64,
            self.total_blocks,
            self.block_bitmap_blocks,
            self.inode_blocks,
            self.journal_blocks,
        ];
        for (i, v) in fields.iter().enumerate() {
            put_u64(&mut b, 8 + i * 8, *v);
        }
        seal(&mut b);
        b
    }

    pub(super) fn decode(b: &[u8]) -> FsResult<Layout> {
        if &b[..8] != SUPER_MAGIC {
            return Err(FsError::NotFormatted("no superblock magic in block 0".into()));
        }
        if !sealed(b) {
            return Err(FsError::Corrupt("the superblock fails its checksum".into()));
        }
        let field = |i: usize| get_u64(b, 8 + i * 8);
        let layout = Layout::new(field(0) as usize, field(1), field(3), field(4))?;
        if layout.block_bitmap_blocks != field(2) || layout.block_size != b.len() {
            return Err(FsError::Corrupt("the superblock's layout does not add up".into()));
        }
        Ok(layout)
    }
}

pub(super) fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

pub(super) fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

pub(super) fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

pub(super) fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// Puts a CRC-32C of everything before the last 4 bytes into the last 4 bytes.
pub(super) fn seal(b: &mut [u8]) {
    let n = b.len() - 4;
    let crc = crc32c::crc32c(&b[..n]);
    put_u32(b, n, crc);
}

pub(super) fn sealed(b: &[u8]) -> bool {
    let n = b.len() - 4;
    crc32c::crc32c(&b[..n]) == get_u32(b, n)
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Extents(pub(super) Vec<(Lpn, u64)>);

impl Extents {
    pub(super) fn blocks(&self) -> u64 {
        self.0.iter().map(|e| e.1).sum()
    }

    pub(super) fn lpn_of(&self, fblock: u64) -> Option<Lpn> {
        let mut base = 0;
        for &(start, len) in &self.0 {
            if fblock < base + len {
                return Some(start + (fblock - base));
            }
            base += len;
        }
        None
    }

    pub(super) fn end(&self) -> Option<Lpn> {
        self.0.last().map(|&(start, len)| start + len)
    }

    pub(super) fn push(&mut self, start: Lpn, len: u64) {
        if let Some(last) = self.0.last_mut() {
            if last.0 + last.1 == start {
                last.1 += len;
                return;
            }
        }
        self.0.push((start, len));
    }

    /// Keeps the first `keep` blocks; returns the rest as extents.
    pub(super) fn cut(&mut self, keep: u64) -> Vec<(Lpn, u64)> {
        let mut freed = Vec::new();
        let mut kept = Vec::new();
        let mut base = 0;
        for &(start, len) in &self.0 {
            if base + len <= keep {
                kept.push((start, len));
            } else if base >= keep {
                freed.push((start, len));
            } else {
                let k = keep - base;
                kept.push((start, k));
                freed.push((start + k, len - k));
            }
            base += len;
        }
        self.0 = kept;
        freed
    }
}

#[derive(Clone, Debug)]
pub(super) struct Inode {
    pub(super) name: String,
    pub(super) generation: u64,
    pub(super) size: u64,
    pub(super) extents: Extents,
}

impl Inode {
    pub(super) fn encode_into(&self, b: &mut [u8]) {
        b.fill(0);
        b[0] = 1;
        b[1] = self.name.len() as u8;
        b[2..2 + self.name.len()].copy_from_slice(self.name.as_bytes());
        put_u64(b, 100, self.size);
        put_u64(b, 108, self.generation);
        b[116..118].copy_from_slice(&(self.extents.0.len() as u16).to_le_bytes());
        for (i, &(start, len)) in self.extents.0.iter().enumerate() {
            put_u32(b, 120 + i * 8, start as u32);
            put_u32(b, 124 + i * 8, len as u32);
        }
        seal(b);
    }

    pub(super) fn decode(b: &[u8]) -> FsResult<Option<Inode>> {
        if b.iter().all(|&x| x == 0) {
            return Ok(None);
        }
        if !sealed(b) {
            return Err(FsError::Corrupt("an inode fails its checksum".into()));
        }
        if b[0] == 0 {
            return Ok(None);
        }
        let name_len = b[1] as usize;
        let count = u16::from_le_bytes([b[116], b[117]]) as usize;
        if name_len > MAX_NAME || count > MAX_EXTENTS {
            return Err(FsError::Corrupt(
                "an inode's name or extent count is out of range".into(),
            ));
        }
        let name = String::from_utf8(b[2..2 + name_len].to_vec())
            .map_err(|_| FsError::Corrupt("an inode's name is not UTF-8".into()))?;
        let extents = (0..count)
            .map(|i| (get_u32(b, 120 + i * 8) as u64, get_u32(b, 124 + i * 8) as u64))
            .collect();
        Ok(Some(Inode {
            name,
            generation: get_u64(b, 108),
            size: get_u64(b, 100),
            extents: Extents(extents),
        }))
    }
}
