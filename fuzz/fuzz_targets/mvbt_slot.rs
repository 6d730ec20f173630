//! Decodes arbitrary bytes as an LS-MVBT slot image (tree node or header node): an error is
//! fine; a panic, or a decoded image that does not survive re-encoding, is a bug. Stable
//! twin: `the_decoder_survives_damaged_slots` in `crates/mvbt/src/format.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = onesync_mvbt::fuzz::slot(data);
});
