//! The entry point for the cargo-fuzz target `fuzz/fuzz_targets/mvbt_slot.rs`: arbitrary
//! bytes through the slot-image decoder with [`onesync_codec::fuzz::one_input`], which
//! panics if the decoder panics or a decoded image does not survive re-encoding. The stable
//! test `format::tests::the_decoder_survives_damaged_slots` runs the same property over
//! images mutated from real ones.

use onesync_codec::fuzz::{one_input, Outcome};

use crate::format::Slot;

/// The node size the target decodes with (the smallest allowed, so inputs fill whole slots).
pub const NODE_SIZE: usize = 512;

/// One slot image: a tree node's or the header node's.
pub fn slot(data: &[u8]) -> Outcome {
    one_input::<Slot>(&NODE_SIZE, data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_point_rejects_noise() {
        assert_eq!(slot(&[]), Outcome::Rejected);
        assert_eq!(slot(&[0x4d; NODE_SIZE]), Outcome::Rejected);
    }
}
