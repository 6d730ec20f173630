//! Entry points for the cargo-fuzz targets `fuzz/fuzz_targets/mapping_leaf.rs` and
//! `mapping_inner.rs` (and the run ref): arbitrary bytes through each decoder with
//! [`onesync_codec::fuzz::one_input`], which panics if the decoder panics or a decoded value
//! does not survive re-encoding. The stable tests in `format.rs` run the same property
//! on blocks mutated from real ones. Blocks have no checksum of their own (their parent holds
//! it), so every mutation reaches the field checks.

use onesync_codec::fuzz::{one_input, Outcome};

use crate::format::{Inner, Leaf};
use crate::types::RunRef;

/// The slot size the targets decode with (the smallest: a block is eight slots, so short
/// inputs reach every check).
pub const SLOT_SIZE: usize = 512;

/// One leaf block.
pub fn leaf(data: &[u8]) -> Outcome {
    one_input::<Leaf>(&SLOT_SIZE, data)
}

/// One inner block.
pub fn inner(data: &[u8]) -> Outcome {
    one_input::<Inner>(&SLOT_SIZE, data)
}

/// One run ref.
pub fn run_ref(data: &[u8]) -> Outcome {
    one_input::<RunRef>(&(), data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_points_reject_noise() {
        assert_eq!(leaf(&[]), Outcome::Rejected);
        assert_eq!(leaf(&[0x4f; 4096]), Outcome::Rejected);
        assert_eq!(inner(&[0; 4096]), Outcome::Rejected);
        assert_eq!(run_ref(&[0; 60]), Outcome::Rejected);
    }
}
