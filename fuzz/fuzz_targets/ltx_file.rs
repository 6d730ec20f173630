//! Decode arbitrary bytes as an LTX file (`onesync_ltx::LtxFile`, Litestream 0.5's replica
//! format); what decodes must re-encode to bytes that decode to the same value
//! (`onesync_codec::fuzz::one_input`). The stable twin, `crates/ltx/tests/codec.rs`
//! (`the_decoder_survives_the_codec_fuzz_harness`), runs the same property on inputs mutated
//! from real databases' LTX files, with their checksums recomputed.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    onesync_codec::fuzz::one_input::<onesync_ltx::LtxFile>(&(), data);
});
