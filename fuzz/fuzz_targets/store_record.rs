//! Decode arbitrary bytes as a commit record of the store; what decodes must re-encode to bytes
//! that decode to the same value (`onesync_codec::fuzz::one_input`). The stable test beside
//! the structure in `crates/store/src/format/record.rs` runs the same property on inputs
//! mutated from a real store's encodings.
#![no_main]

use onesync_store::layout::Record;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    onesync_codec::fuzz::one_input::<Record>(&(), data);
});
