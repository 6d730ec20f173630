//! Open arbitrary bytes as a store image, and images mutated from a valid store, and use
//! whatever opens: read every page of every file, commit, checkpoint, reopen. Errors are
//! fine; a panic, an abort or a hang is a bug. The input format and the harness are in
//! `crates/store/tests/support/open_recover.rs`, shared with the stable test
//! `crates/store/tests/fuzz_open.rs`.
#![no_main]

#[path = "../../crates/store/tests/support/open_recover.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = harness::run(data);
});
