//! Decode arbitrary bytes as an inner block of the page mapping (512-byte slots); what
//! decodes must re-encode to bytes that decode to the same value
//! (`onesync_codec::fuzz::one_input`). The stable twin is
//! `the_inner_decoder_survives_fuzzing_from_real_inner_blocks` in
//! `crates/mapping/src/format.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    onesync_mapping::fuzz::inner(data);
});
