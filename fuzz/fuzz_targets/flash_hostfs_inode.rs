//! Decodes arbitrary bytes with onesync-flash's `hostfs_inode` decoder: an error is fine; a panic, or
//! a decoded value that does not survive re-encoding, is a bug. Stable twin: the
//! `check_decoder` test beside the decoder.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = onesync_flash::fuzz::hostfs_inode(data);
});
