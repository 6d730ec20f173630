//! One encode/decode trait for every on-disk structure in onesync.
//!
//! Every structure that reaches a disk (store headers, commit records and checkpoints,
//! LS-MVBT nodes, the flash host filesystem's superblock and inodes, mvbt row values)
//! implements [`OnDisk`]. Decoding goes through a [`Reader`], which is bounds-checked: bad
//! bytes are a [`DecodeError`] naming the structure and the offset, never a panic. The
//! [`fuzz`] module is the one harness all decoders are fuzzed with.
#![forbid(unsafe_code)]

pub mod fuzz;

use std::fmt;

/// An on-disk structure: its byte-exact encoding and its checked decoding.
///
/// `Context` is what the bytes alone do not say (a node or page size the structure is padded
/// to); structures that need nothing use `()`.
pub trait OnDisk: Sized {
    /// What the structure is called in errors: "store header", "mvbt node".
    const NAME: &'static str;
    /// What encoding and decoding need besides the value and the bytes.
    type Context;

    /// Appends the structure's bytes to `w`.
    fn encode(&self, ctx: &Self::Context, w: &mut Writer);

    /// Reads one structure from `r`; leaves `r` just past it.
    fn decode(ctx: &Self::Context, r: &mut Reader<'_>) -> Result<Self, DecodeError>;

    /// The structure's bytes on their own.
    fn to_bytes(&self, ctx: &Self::Context) -> Vec<u8> {
        let mut w = Writer::new();
        self.encode(ctx, &mut w);
        w.into_bytes()
    }

    /// Decodes a structure that must fill `bytes` exactly.
    fn from_bytes(ctx: &Self::Context, bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(Self::NAME, bytes);
        let value = Self::decode(ctx, &mut r)?;
        r.expect_end()?;
        Ok(value)
    }
}

/// Why bytes are not a valid structure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{structure}: {problem} at byte {offset}")]
pub struct DecodeError {
    /// The structure being decoded ([`OnDisk::NAME`]).
    pub structure: &'static str,
    /// Where in its bytes the problem was found.
    pub offset: usize,
    /// What is wrong.
    pub problem: Problem,
}

/// What is wrong with bytes that do not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// The bytes end before the structure does.
    Truncated { needed: usize, available: usize },
    /// Bytes follow the structure where none may.
    TrailingBytes(usize),
    /// The magic number is not this structure's.
    BadMagic,
    /// The stored checksum does not match the bytes.
    BadChecksum { stored: u32, computed: u32 },
    /// A field holds a value the format does not allow.
    Invalid(String),
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Truncated { needed, available } => {
                write!(f, "truncated: needs {needed} more bytes, {available} left")
            }
            Problem::TrailingBytes(n) => write!(f, "{n} trailing bytes"),
            Problem::BadMagic => write!(f, "bad magic"),
            Problem::BadChecksum { stored, computed } => {
                write!(
                    f,
                    "checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
                )
            }
            Problem::Invalid(why) => write!(f, "{why}"),
        }
    }
}

/// Builds a structure's bytes, little-endian.
#[derive(Debug, Default, Clone)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    pub fn new() -> Writer {
        Writer::default()
    }
    pub fn with_capacity(n: usize) -> Writer {
        Writer {
            buf: Vec::with_capacity(n),
        }
    }
    /// Bytes written so far (the offset the next field lands at).
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    pub fn u8(&mut self, v: u8) -> &mut Writer {
        self.buf.push(v);
        self
    }
    pub fn u16(&mut self, v: u16) -> &mut Writer {
        self.bytes(&v.to_le_bytes())
    }
    pub fn u32(&mut self, v: u32) -> &mut Writer {
        self.bytes(&v.to_le_bytes())
    }
    pub fn u64(&mut self, v: u64) -> &mut Writer {
        self.bytes(&v.to_le_bytes())
    }
    pub fn bytes(&mut self, v: &[u8]) -> &mut Writer {
        self.buf.extend_from_slice(v);
        self
    }
    /// Zero-fills up to `len` bytes in all (no-op when already that long).
    pub fn pad_to(&mut self, len: usize) -> &mut Writer {
        if self.buf.len() < len {
            self.buf.resize(len, 0);
        }
        self
    }
    /// Overwrites a u32 written earlier (a checksum or length known only at the end).
    ///
    /// Panics if `at + 4` is past what was written: that is a bug in the encoder, not bad input.
    pub fn patch_u32(&mut self, at: usize, v: u32) -> &mut Writer {
        self.buf[at..at + 4].copy_from_slice(&v.to_le_bytes());
        self
    }
    /// The bytes written so far.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }
    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }
}

/// Reads a structure's bytes, little-endian; every read is bounds-checked.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    structure: &'static str,
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader over `buf` that names `structure` in its errors.
    pub fn new(structure: &'static str, buf: &'a [u8]) -> Reader<'a> {
        Reader {
            structure,
            buf,
            pos: 0,
        }
    }
    /// The offset of the next byte to be read.
    pub fn position(&self) -> usize {
        self.pos
    }
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    /// Every byte of the structure, read or not.
    pub fn all(&self) -> &'a [u8] {
        self.buf
    }
    /// An error at the current offset.
    pub fn error(&self, problem: Problem) -> DecodeError {
        DecodeError {
            structure: self.structure,
            offset: self.pos,
            problem,
        }
    }
    /// An `Invalid` error at the current offset.
    pub fn invalid(&self, why: impl Into<String>) -> DecodeError {
        self.error(Problem::Invalid(why.into()))
    }
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.remaining() {
            return Err(self.error(Problem::Truncated {
                needed: n,
                available: self.remaining(),
            }));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    pub fn skip(&mut self, n: usize) -> Result<(), DecodeError> {
        self.take(n).map(|_| ())
    }
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    pub fn u16(&mut self) -> Result<u16, DecodeError> {
        self.array().map(u16::from_le_bytes)
    }
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        self.array().map(u32::from_le_bytes)
    }
    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        self.array().map(u64::from_le_bytes)
    }
    /// Requires the next bytes to be `magic`.
    pub fn magic(&mut self, magic: &[u8]) -> Result<(), DecodeError> {
        let at = self.pos;
        if self.take(magic.len())? != magic {
            self.pos = at;
            return Err(self.error(Problem::BadMagic));
        }
        Ok(())
    }
    /// Requires a stored checksum to equal the computed one.
    pub fn check_sum(&self, stored: u32, computed: u32) -> Result<(), DecodeError> {
        if stored != computed {
            return Err(self.error(Problem::BadChecksum { stored, computed }));
        }
        Ok(())
    }
    /// Requires that nothing is left.
    pub fn expect_end(&self) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(self.error(Problem::TrailingBytes(n))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct Pair {
        a: u16,
        b: u64,
    }

    impl OnDisk for Pair {
        const NAME: &'static str = "pair";
        type Context = ();
        fn encode(&self, _: &(), w: &mut Writer) {
            w.bytes(b"PR").u16(self.a).u64(self.b);
        }
        fn decode(_: &(), r: &mut Reader<'_>) -> Result<Pair, DecodeError> {
            r.magic(b"PR")?;
            Ok(Pair {
                a: r.u16()?,
                b: r.u64()?,
            })
        }
    }

    #[test]
    fn round_trips_and_names_the_offset_of_damage() {
        let p = Pair {
            a: 7,
            b: u64::MAX - 3,
        };
        let bytes = p.to_bytes(&());
        assert_eq!(bytes.len(), 12);
        assert_eq!(&bytes[2..4], &[7, 0], "little-endian");
        assert_eq!(Pair::from_bytes(&(), &bytes).unwrap(), p);

        let err = Pair::from_bytes(&(), &bytes[..7]).unwrap_err();
        assert_eq!(err.offset, 4);
        assert_eq!(
            err.problem,
            Problem::Truncated {
                needed: 8,
                available: 3
            }
        );
        assert_eq!(
            err.to_string(),
            "pair: truncated: needs 8 more bytes, 3 left at byte 4"
        );

        let mut extra = bytes.clone();
        extra.push(0);
        assert_eq!(
            Pair::from_bytes(&(), &extra).unwrap_err().problem,
            Problem::TrailingBytes(1)
        );

        let mut bad = bytes;
        bad[0] = b'X';
        let err = Pair::from_bytes(&(), &bad).unwrap_err();
        assert_eq!((err.offset, err.problem), (0, Problem::BadMagic));
    }

    /// A decoder that indexes past what it checked: the harness must catch it.
    #[derive(Debug, PartialEq)]
    struct Careless(u8);

    impl OnDisk for Careless {
        const NAME: &'static str = "careless";
        type Context = ();
        fn encode(&self, _: &(), w: &mut Writer) {
            w.u8(1).u8(self.0);
        }
        fn decode(_: &(), r: &mut Reader<'_>) -> Result<Careless, DecodeError> {
            let all = r.all();
            r.skip(all.len())?;
            Ok(Careless(all[all[0] as usize]))
        }
    }

    /// A decoder whose values do not survive re-encoding: the harness must catch it too.
    #[derive(Debug, PartialEq)]
    struct Lossy(u16);

    impl OnDisk for Lossy {
        const NAME: &'static str = "lossy";
        type Context = ();
        fn encode(&self, _: &(), w: &mut Writer) {
            w.u8(self.0 as u8);
        }
        fn decode(_: &(), r: &mut Reader<'_>) -> Result<Lossy, DecodeError> {
            Ok(Lossy(r.u16()?))
        }
    }

    #[test]
    #[should_panic(expected = "careless decoder failed on input")]
    fn the_fuzz_harness_catches_a_decoder_that_panics() {
        fuzz::check_decoder::<Careless>(&(), &[vec![1, 7]], 2_000);
    }

    #[test]
    #[should_panic(expected = "lossy decoder failed on input")]
    fn the_fuzz_harness_catches_a_value_that_does_not_round_trip() {
        fuzz::check_decoder::<Lossy>(&(), &[vec![0x34, 0x12]], 2_000);
    }

    #[test]
    fn the_fuzz_harness_passes_a_sound_decoder() {
        let seed = Pair { a: 1, b: 2 }.to_bytes(&());
        let report = fuzz::check_decoder::<Pair>(&(), &[seed], 2_000);
        assert!(report.decoded > 0 && report.rejected > 0, "{report:?}");
    }
}
