//! What every workload implements ([`Transactions`]) and the record most of them write
//! ([`payload`]): below `mod.rs`, which picks a workload, so that each workload file names
//! these and not the registry.

use anyhow::Result;
use rand::rngs::SmallRng;
use rand::RngCore;
use rusqlite::Connection;

/// What a workload does to a database.
pub trait Transactions: Send + Sync {
    /// Tables, and the rows the `txns` measured transactions update or delete; inside the
    /// caller's transaction.
    fn set_up(&self, conn: &Connection, txns: u64, rng: &mut SmallRng) -> Result<()>;

    /// The `n`-th measured transaction, committed when it returns.
    fn run(&self, conn: &Connection, n: u64, rng: &mut SmallRng) -> Result<()>;

    /// The workload's own invariant, after the run (integrity is checked by the caller).
    fn check(&self, _conn: &Connection) -> Result<()> {
        Ok(())
    }
}

/// MobiBench's record: a 100-byte string.
const PAYLOAD_BYTES: usize = 100;

/// A random record of [`PAYLOAD_BYTES`] lowercase letters.
///
/// Each letter is 32 random bits scaled to 0..26 (a bias below 1e-8), two letters per
/// draw: the generator sits in every writer's loop, and drawing each letter through
/// `random_range` into a `String` of `char`s was a visible share of a CPU-bound scheme's time
/// per 100-row transaction and not of a flush-bound one's (`perf record` of `bench writers
/// --processes 16`).
pub fn payload(rng: &mut SmallRng) -> String {
    let letter = |bits: u64| b'a' + (((bits & 0xffff_ffff) * 26) >> 32) as u8;
    let mut bytes = [0u8; PAYLOAD_BYTES];
    for pair in bytes.chunks_mut(2) {
        let draw = rng.next_u64();
        for (i, byte) in pair.iter_mut().enumerate() {
            *byte = letter(draw >> (32 * i));
        }
    }
    // Always valid: every byte is an ASCII letter.
    String::from_utf8(bytes.to_vec()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn payload_is_lowercase_letters_each_about_as_often() {
        let mut rng = SmallRng::seed_from_u64(7);
        let mut counts = [0u32; 26];
        for _ in 0..2_000 {
            let p = payload(&mut rng);
            assert_eq!(p.len(), PAYLOAD_BYTES);
            for b in p.bytes() {
                assert!(b.is_ascii_lowercase(), "{p}");
                counts[(b - b'a') as usize] += 1;
            }
        }
        // 200,000 letters: 7,692 expected each, a standard deviation of about 86.
        for (letter, &n) in counts.iter().enumerate() {
            assert!((7_250..8_150).contains(&n), "letter {letter} drawn {n} times");
        }
    }
}
