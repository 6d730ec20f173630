//! A super-journal's list of journal names (`onesync_vfs::SuperJournalNames`, SQLite's format,
//! read back from disk when another VFS wrote it): any bytes decode without panicking, and
//! the names re-encode to bytes that list them again.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    onesync_codec::fuzz::one_input::<onesync_vfs::SuperJournalNames>(&(), data);
});
