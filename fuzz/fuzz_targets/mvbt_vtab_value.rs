//! The mvbt virtual table's stored row values (`onesync_mvbt_vtab::MvbtValue`): any bytes decode
//! without panicking, and a decoded value re-encodes to bytes that decode to it again.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    onesync_codec::fuzz::one_input::<onesync_mvbt_vtab::MvbtValue>(&(), data);
});
