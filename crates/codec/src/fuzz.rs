//! The one harness every [`OnDisk`] decoder is fuzzed with.
//!
//! [`one_input`] is the property: decoding arbitrary bytes returns an error or a value, never
//! panics, and a decoded value re-encodes to bytes that decode to the same value. cargo-fuzz
//! targets (`fuzz/fuzz_targets/`, nightly) call it with libFuzzer's inputs; stable tests call
//! [`check_decoder`], which feeds it thousands of deterministic random and mutated inputs.

use std::fmt::Debug;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::{OnDisk, Reader};

/// What decoding one input gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Decoded,
    Rejected,
}

/// Decodes `bytes` as a `T`; if that works, re-encodes the value and requires the new bytes
/// to decode to an equal value. Panics (the fuzzer's failure signal) when that does not hold.
pub fn one_input<T>(ctx: &T::Context, bytes: &[u8]) -> Outcome
where
    T: OnDisk + PartialEq + Debug,
{
    let mut r = Reader::new(T::NAME, bytes);
    let Ok(value) = T::decode(ctx, &mut r) else {
        return Outcome::Rejected;
    };
    let again = value.to_bytes(ctx);
    match T::from_bytes(ctx, &again) {
        Ok(v) if v == value => Outcome::Decoded,
        Ok(v) => panic!(
            "{}: re-encoded value decodes differently: {value:?} became {v:?}",
            T::NAME
        ),
        Err(e) => panic!("{}: re-encoded value does not decode: {e} ({value:?})", T::NAME),
    }
}

/// Counts from [`check_decoder`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Report {
    pub inputs: usize,
    pub decoded: usize,
    pub rejected: usize,
}

/// Runs [`one_input`] over `iterations` inputs: the seeds, random bytes, and seeds mutated
/// (bits flipped, bytes set, cut short, extended). Deterministic. Panics naming the input
/// (hex) when a decoder panics or fails to round-trip.
pub fn check_decoder<T>(ctx: &T::Context, seeds: &[Vec<u8>], iterations: usize) -> Report
where
    T: OnDisk + PartialEq + Debug,
{
    check_decoder_resealed::<T>(ctx, seeds, iterations, |_| {})
}

/// [`check_decoder`], with `reseal` applied to every mutated input before decoding, so
/// damage gets past the checksums to the field checks behind them (pass a function that
/// recomputes the structure's checksums).
pub fn check_decoder_resealed<T>(
    ctx: &T::Context,
    seeds: &[Vec<u8>],
    iterations: usize,
    reseal: impl Fn(&mut Vec<u8>),
) -> Report
where
    T: OnDisk + PartialEq + Debug,
{
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut report = Report::default();
    let max_len = seeds.iter().map(Vec::len).max().unwrap_or(64).max(64);
    for i in 0..iterations {
        let input = if i < seeds.len() {
            seeds[i].clone()
        } else if seeds.is_empty() || i % 8 == 0 {
            let len = rng.below(max_len * 2 + 1);
            (0..len).map(|_| rng.next() as u8).collect()
        } else {
            let mut bytes = seeds[rng.below(seeds.len())].clone();
            mutate(&mut rng, &mut bytes);
            if i % 2 == 0 {
                reseal(&mut bytes);
            }
            bytes
        };
        let outcome = catch_unwind(AssertUnwindSafe(|| one_input::<T>(ctx, &input)));
        match outcome {
            Ok(Outcome::Decoded) => report.decoded += 1,
            Ok(Outcome::Rejected) => report.rejected += 1,
            Err(_) => panic!("{} decoder failed on input {}", T::NAME, hex(&input)),
        }
        report.inputs += 1;
    }
    report
}

fn mutate(rng: &mut XorShift, bytes: &mut Vec<u8>) {
    for _ in 0..=rng.below(4) {
        match rng.below(5) {
            0 | 1 if !bytes.is_empty() => {
                let at = rng.below(bytes.len());
                bytes[at] ^= 1 << rng.below(8);
            }
            2 if !bytes.is_empty() => {
                let at = rng.below(bytes.len());
                bytes[at] = [0, 0xff, 1, 0x7f, 0x80][rng.below(5)];
            }
            3 => {
                let keep = rng.below(bytes.len() + 1);
                bytes.truncate(keep);
            }
            _ => {
                let more = rng.below(16);
                bytes.extend((0..more).map(|_| rng.next() as u8));
            }
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}
