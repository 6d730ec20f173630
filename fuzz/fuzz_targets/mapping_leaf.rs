//! Decode arbitrary bytes as a leaf block of the page mapping (512-byte slots); what decodes
//! must re-encode to bytes that decode to the same value (`onesync_codec::fuzz::one_input`).
//! The stable twins are the `the_leaf_decoder_survives_fuzzing_*` tests in
//! `crates/mapping/src/format.rs`, on inputs mutated from real leaves.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    onesync_mapping::fuzz::leaf(data);
});
