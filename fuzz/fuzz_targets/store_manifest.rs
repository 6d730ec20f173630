//! Decode arbitrary bytes as a store manifest (format version 2); what decodes must re-encode
//! to bytes that decode to the same value (`onesync_codec::fuzz::one_input`). The stable test
//! beside the structure in `crates/store/src/format/manifest.rs` runs the same property on
//! mutated inputs.
#![no_main]

use onesync_store::layout::Manifest;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    onesync_codec::fuzz::one_input::<Manifest>(&(), data);
});
