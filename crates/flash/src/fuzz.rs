//! Entry points for the cargo-fuzz targets (`fuzz/fuzz_targets/flash_*.rs`): each feeds
//! arbitrary bytes to one on-disk structure's decoder through
//! [`onesync_codec::fuzz::one_input`], which panics if a decoder panics or a decoded value
//! does not survive re-encoding. The stable tests beside each decoder run the same property
//! over inputs mutated from real encodings.

use onesync_codec::fuzz::{one_input, Outcome};

use crate::hostfs::layout::{CommitBlock, Descriptor, InodeSlot, JournalSuperblock, Superblock};
use crate::meta::MetaPage;

/// The page and block size the targets decode with (small, so inputs fill whole pages).
pub const PAGE_SIZE: usize = 512;

/// A drive metadata page (checkpoint or mapping-log page).
pub fn metadata_page(data: &[u8]) -> Outcome {
    one_input::<MetaPage>(&PAGE_SIZE, data)
}

/// The host filesystem's superblock.
pub fn hostfs_superblock(data: &[u8]) -> Outcome {
    one_input::<Superblock>(&PAGE_SIZE, data)
}

/// One inode record.
pub fn hostfs_inode(data: &[u8]) -> Outcome {
    one_input::<InodeSlot>(&(), data)
}

/// The journal superblock.
pub fn hostfs_journal_superblock(data: &[u8]) -> Outcome {
    one_input::<JournalSuperblock>(&PAGE_SIZE, data)
}

/// A journal descriptor block.
pub fn hostfs_journal_descriptor(data: &[u8]) -> Outcome {
    one_input::<Descriptor>(&PAGE_SIZE, data)
}

/// A journal commit block.
pub fn hostfs_journal_commit(data: &[u8]) -> Outcome {
    one_input::<CommitBlock>(&PAGE_SIZE, data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_points_decode_real_blocks_and_reject_noise() {
        assert_eq!(hostfs_inode(&[0; 512]), Outcome::Decoded, "a free inode");
        let noise = vec![0x5a; PAGE_SIZE];
        for target in [
            metadata_page,
            hostfs_superblock,
            hostfs_inode,
            hostfs_journal_superblock,
            hostfs_journal_descriptor,
            hostfs_journal_commit,
        ] {
            assert_eq!(target(&noise), Outcome::Rejected);
            assert_eq!(target(&[]), Outcome::Rejected);
        }
    }
}
