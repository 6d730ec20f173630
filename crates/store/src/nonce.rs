//! Random numbers the store needs to be unique, not secret: store ids, session nonces, the
//! seeds of the records' CRC chain, temporary names.
//!
//! They come from `/dev/urandom`, which never blocks. `getrandom()` (what the `rand` crate
//! asks) blocks until the kernel's random pool is initialised, and early in a boot, in a VM
//! without an entropy device, that takes minutes: opening a store then hung (the qemu
//! torture on ext4 showed it; issue 14).

use std::fs::File;
use std::hash::{BuildHasher, Hasher};
use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A random 64-bit number, without ever blocking.
pub fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    if File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .is_ok()
    {
        return u64::from_le_bytes(bytes);
    }
    // No /dev/urandom (a chroot without /dev): the time, the process and a counter, mixed by
    // the standard library's randomly keyed hasher (it never blocks either).
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    h.write_u64(now);
    h.write_u32(std::process::id());
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.finish()
}

#[cfg(test)]
mod tests {
    #[test]
    fn numbers_differ() {
        let a: std::collections::BTreeSet<u64> = (0..100).map(|_| super::random_u64()).collect();
        assert_eq!(a.len(), 100);
    }
}
