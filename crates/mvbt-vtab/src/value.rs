//! SQL values: read from SQLite, stored in the tree with a one-byte type tag
//! (so NULL, INTEGER, REAL, TEXT and BLOB read back exactly as written), and
//! turned into keys and key ranges.

use std::ops::Bound;

use onesync_codec::{DecodeError, OnDisk, Reader, Writer};

use super::error::VtabError;

pub(crate) use crate::sys::vtab::SqlValue;

const TAG_NULL: u8 = 0;
const TAG_INT: u8 = 1;
const TAG_REAL: u8 = 2;
const TAG_TEXT: u8 = 3;
const TAG_BLOB: u8 = 4;

/// A row's value as the tree stores it: a type tag, then the value (integers and reals as 8
/// little-endian bytes, text as UTF-8, blobs as is).
///
/// | bytes | value |
/// | --- | --- |
/// | `00` | NULL |
/// | `01` + 8 bytes | INTEGER (i64, little-endian) |
/// | `02` + 8 bytes | REAL (f64 bits, little-endian) |
/// | `03` + UTF-8 | TEXT |
/// | `04` + any | BLOB |
/// | anything else | a BLOB of all its bytes (written by something other than this module) |
///
/// Reading never fails: every byte string is some value.
#[derive(Clone, Debug)]
pub enum MvbtValue {
    Null,
    Int(i64),
    Real(f64),
    Text(Vec<u8>),
    Blob(Vec<u8>),
}

/// Reals compare by their bits, so a stored NaN reads back equal to itself.
impl PartialEq for MvbtValue {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (MvbtValue::Real(a), MvbtValue::Real(b)) => a.to_bits() == b.to_bits(),
            _ => self.as_sql() == other.as_sql(),
        }
    }
}

impl MvbtValue {
    /// The value of stored bytes, borrowing them (the cursor's column reads).
    pub(crate) fn parse(bytes: &[u8]) -> SqlValue<'_> {
        let eight = |b: &[u8]| <[u8; 8]>::try_from(b).ok();
        match bytes.split_first() {
            Some((&TAG_NULL, [])) => SqlValue::Null,
            Some((&TAG_INT, rest)) if rest.len() == 8 => {
                SqlValue::Int(i64::from_le_bytes(eight(rest).unwrap_or_default()))
            }
            Some((&TAG_REAL, rest)) if rest.len() == 8 => {
                SqlValue::Real(f64::from_le_bytes(eight(rest).unwrap_or_default()))
            }
            Some((&TAG_TEXT, rest)) if std::str::from_utf8(rest).is_ok() => SqlValue::Text(rest),
            Some((&TAG_BLOB, rest)) => SqlValue::Blob(rest),
            _ => SqlValue::Blob(bytes),
        }
    }

    /// The stored bytes of an SQL value (INSERT and UPDATE).
    pub(crate) fn encode_sql(v: &SqlValue<'_>) -> Vec<u8> {
        let mut w = Writer::with_capacity(9);
        write_sql(v, &mut w);
        w.into_bytes()
    }

    fn as_sql(&self) -> SqlValue<'_> {
        match self {
            MvbtValue::Null => SqlValue::Null,
            MvbtValue::Int(i) => SqlValue::Int(*i),
            MvbtValue::Real(r) => SqlValue::Real(*r),
            MvbtValue::Text(t) => SqlValue::Text(t),
            MvbtValue::Blob(b) => SqlValue::Blob(b),
        }
    }

    fn from_sql(v: SqlValue<'_>) -> Self {
        match v {
            SqlValue::Null => MvbtValue::Null,
            SqlValue::Int(i) => MvbtValue::Int(i),
            SqlValue::Real(r) => MvbtValue::Real(r),
            SqlValue::Text(t) => MvbtValue::Text(t.to_vec()),
            SqlValue::Blob(b) => MvbtValue::Blob(b.to_vec()),
        }
    }
}

fn write_sql(v: &SqlValue<'_>, w: &mut Writer) {
    match v {
        SqlValue::Null => w.u8(TAG_NULL),
        SqlValue::Int(i) => w.u8(TAG_INT).u64(*i as u64),
        SqlValue::Real(r) => w.u8(TAG_REAL).u64(r.to_bits()),
        SqlValue::Text(t) => w.u8(TAG_TEXT).bytes(t),
        SqlValue::Blob(b) => w.u8(TAG_BLOB).bytes(b),
    };
}

impl OnDisk for MvbtValue {
    const NAME: &'static str = "mvbt row value";
    type Context = ();

    fn encode(&self, _: &(), w: &mut Writer) {
        write_sql(&self.as_sql(), w);
    }

    /// Takes every remaining byte: a value fills its tree cell.
    fn decode(_: &(), r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let bytes = r.take(r.remaining())?;
        Ok(MvbtValue::from_sql(MvbtValue::parse(bytes)))
    }
}

/// What a value means as a key, under the INTEGER affinity of the `key`
/// column: an integer, or text that reads as one.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Numeric {
    Int(i64),
    Real(f64),
    /// NULL (compares as unknown: matches nothing).
    Null,
    /// Text that isn't a number, or a blob: greater than every number.
    AboveNumbers,
}

fn numeric(v: &SqlValue<'_>) -> Numeric {
    match v {
        SqlValue::Null => Numeric::Null,
        SqlValue::Int(i) => Numeric::Int(*i),
        SqlValue::Real(r) if r.is_nan() => Numeric::Null,
        SqlValue::Real(r) => Numeric::Real(*r),
        SqlValue::Text(t) => {
            let s = std::str::from_utf8(t).unwrap_or("").trim();
            if let Ok(i) = s.parse::<i64>() {
                Numeric::Int(i)
            } else if let Some(r) = s
                .parse::<f64>()
                .ok()
                .filter(|r| r.is_finite() && looks_numeric(s))
            {
                Numeric::Real(r)
            } else {
                Numeric::AboveNumbers
            }
        }
        SqlValue::Blob(_) => Numeric::AboveNumbers,
    }
}

/// Rust parses "inf", "NaN" and "1e5"; SQLite's numeric text is digits, an
/// optional point and exponent.
fn looks_numeric(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'))
}

/// 2^63 as a double: the first double above every i64.
const TWO_63: f64 = 9_223_372_036_854_775_808.0;

/// The integer `r` equals, if any.
fn exact_int(r: f64) -> Option<i64> {
    (r.fract() == 0.0 && (-TWO_63..TWO_63).contains(&r)).then_some(r as i64)
}

/// The key an INSERT or UPDATE names: `None` for NULL, an error for a value
/// that is not an integer.
pub(crate) fn key_of(v: &SqlValue<'_>) -> Result<Option<i64>, VtabError> {
    match numeric(v) {
        Numeric::Null => Ok(None),
        Numeric::Int(i) => Ok(Some(i)),
        Numeric::Real(r) if exact_int(r).is_some() => Ok(exact_int(r)),
        _ => Err(VtabError::mismatch("datatype mismatch: mvbt keys are integers")),
    }
}

/// A set of keys a cursor visits: `low..high`, or nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KeyRange {
    pub low: Bound<i64>,
    pub high: Bound<i64>,
}

impl KeyRange {
    pub const ALL: KeyRange = KeyRange {
        low: Bound::Unbounded,
        high: Bound::Unbounded,
    };
    pub const EMPTY: KeyRange = KeyRange {
        low: Bound::Excluded(i64::MAX),
        high: Bound::Unbounded,
    };

    /// Whether no key lies in the range (the engine is never asked then).
    pub fn is_empty(&self) -> bool {
        let low = match self.low {
            Bound::Unbounded => i128::from(i64::MIN),
            Bound::Included(k) => i128::from(k),
            Bound::Excluded(k) => i128::from(k) + 1,
        };
        let high = match self.high {
            Bound::Unbounded => i128::from(i64::MAX),
            Bound::Included(k) => i128::from(k),
            Bound::Excluded(k) => i128::from(k) - 1,
        };
        low > high || low > i128::from(i64::MAX) || high < i128::from(i64::MIN)
    }

    /// The keys that are both in `self` and in `other`.
    pub fn intersect(self, other: KeyRange) -> KeyRange {
        fn tighter_low(a: Bound<i64>, b: Bound<i64>) -> Bound<i64> {
            match (a, b) {
                (Bound::Unbounded, x) | (x, Bound::Unbounded) => x,
                (Bound::Included(x), Bound::Included(y)) => Bound::Included(x.max(y)),
                (Bound::Excluded(x), Bound::Excluded(y)) => Bound::Excluded(x.max(y)),
                (Bound::Included(i), Bound::Excluded(e)) | (Bound::Excluded(e), Bound::Included(i)) => {
                    if i > e {
                        Bound::Included(i)
                    } else {
                        Bound::Excluded(e)
                    }
                }
            }
        }
        fn tighter_high(a: Bound<i64>, b: Bound<i64>) -> Bound<i64> {
            match (a, b) {
                (Bound::Unbounded, x) | (x, Bound::Unbounded) => x,
                (Bound::Included(x), Bound::Included(y)) => Bound::Included(x.min(y)),
                (Bound::Excluded(x), Bound::Excluded(y)) => Bound::Excluded(x.min(y)),
                (Bound::Included(i), Bound::Excluded(e)) | (Bound::Excluded(e), Bound::Included(i)) => {
                    if i < e {
                        Bound::Included(i)
                    } else {
                        Bound::Excluded(e)
                    }
                }
            }
        }
        KeyRange {
            low: tighter_low(self.low, other.low),
            high: tighter_high(self.high, other.high),
        }
    }
}

/// A comparison of the key column with a value, as `xBestIndex` reported it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeyOp {
    Eq,
    Gt,
    Ge,
    Lt,
    Le,
}

/// The keys `key <op> v` selects, with SQLite's comparison rules for an
/// INTEGER column: exact integer/real comparison, numeric text converted,
/// other text and blobs above every number, NULL matching nothing.
pub(crate) fn key_range(op: KeyOp, v: &SqlValue<'_>) -> KeyRange {
    use Bound::{Excluded, Included, Unbounded};
    let range = |low, high| KeyRange { low, high };
    match numeric(v) {
        Numeric::Null => KeyRange::EMPTY,
        Numeric::AboveNumbers => match op {
            KeyOp::Eq | KeyOp::Gt | KeyOp::Ge => KeyRange::EMPTY,
            KeyOp::Lt | KeyOp::Le => KeyRange::ALL,
        },
        Numeric::Int(i) => match op {
            KeyOp::Eq => range(Included(i), Included(i)),
            KeyOp::Gt => range(Excluded(i), Unbounded),
            KeyOp::Ge => range(Included(i), Unbounded),
            KeyOp::Lt => range(Unbounded, Excluded(i)),
            KeyOp::Le => range(Unbounded, Included(i)),
        },
        Numeric::Real(r) => {
            // Every i64 is below 2^63 and at or above -2^63.
            if r >= TWO_63 {
                return match op {
                    KeyOp::Lt | KeyOp::Le => KeyRange::ALL,
                    _ => KeyRange::EMPTY,
                };
            }
            if r < -TWO_63 {
                return match op {
                    KeyOp::Gt | KeyOp::Ge => KeyRange::ALL,
                    _ => KeyRange::EMPTY,
                };
            }
            // In range: floor and ceil are exact i64s (or -2^63 itself).
            let floor = r.floor() as i64;
            let ceil = r.ceil() as i64;
            match op {
                KeyOp::Eq => exact_int(r).map_or(KeyRange::EMPTY, |i| range(Included(i), Included(i))),
                KeyOp::Gt => range(Excluded(floor), Unbounded),
                KeyOp::Ge => range(Included(ceil), Unbounded),
                KeyOp::Lt => range(Unbounded, Excluded(ceil)),
                KeyOp::Le => range(Unbounded, Included(floor)),
            }
        }
    }
}

/// A version named by `as_of = v`: `None` for NULL (matches nothing).
pub(crate) fn version_of(v: &SqlValue<'_>) -> Result<Option<u64>, VtabError> {
    let bad = || VtabError::error("mvbt: as_of must be a committed version number (an integer >= 0)");
    match key_of(v).map_err(|_| bad())? {
        None => Ok(None),
        Some(i) => u64::try_from(i).map(Some).map_err(|_| bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seeds() -> Vec<SqlValue<'static>> {
        vec![
            SqlValue::Null,
            SqlValue::Int(-5),
            SqlValue::Int(i64::MAX),
            SqlValue::Real(2.5),
            SqlValue::Real(f64::NAN),
            SqlValue::Text(b"hi"),
            SqlValue::Text(b""),
            SqlValue::Blob(b"\x00\x01"),
            SqlValue::Blob(b""),
        ]
    }

    #[test]
    fn round_trip() {
        for v in seeds()
            .into_iter()
            .filter(|v| !matches!(v, SqlValue::Real(r) if r.is_nan()))
        {
            assert_eq!(MvbtValue::parse(&MvbtValue::encode_sql(&v)), v);
        }
        assert_eq!(MvbtValue::parse(b""), SqlValue::Blob(b""));
        assert_eq!(MvbtValue::parse(b"\x09zz"), SqlValue::Blob(b"\x09zz"));
    }

    #[test]
    fn stored_bytes_are_the_documented_ones() {
        assert_eq!(MvbtValue::encode_sql(&SqlValue::Null), [0]);
        assert_eq!(
            MvbtValue::encode_sql(&SqlValue::Int(-2)),
            [1, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]
        );
        assert_eq!(
            MvbtValue::encode_sql(&SqlValue::Real(1.0)),
            [2, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f]
        );
        assert_eq!(MvbtValue::encode_sql(&SqlValue::Text(b"ab")), [3, b'a', b'b']);
        assert_eq!(MvbtValue::encode_sql(&SqlValue::Blob(b"\xff")), [4, 0xff]);
        let owned = MvbtValue::from_bytes(&(), &[1, 7, 0, 0, 0, 0, 0, 0, 0]).unwrap();
        assert_eq!(owned, MvbtValue::Int(7));
        assert_eq!(owned.to_bytes(&()), MvbtValue::encode_sql(&SqlValue::Int(7)));
    }

    #[test]
    fn decoder_survives_the_fuzz_harness() {
        let seeds: Vec<Vec<u8>> = seeds().iter().map(MvbtValue::encode_sql).collect();
        let report = onesync_codec::fuzz::check_decoder::<MvbtValue>(&(), &seeds, 5_000);
        assert_eq!(report.inputs, 5_000);
        assert_eq!(
            report.decoded, 5_000,
            "every byte string is some value: {report:?}"
        );
    }

    #[test]
    fn ranges() {
        use Bound::*;
        assert_eq!(key_range(KeyOp::Gt, &SqlValue::Real(2.5)).low, Excluded(2));
        assert_eq!(key_range(KeyOp::Ge, &SqlValue::Real(2.5)).low, Included(3));
        assert_eq!(key_range(KeyOp::Lt, &SqlValue::Real(-2.5)).high, Excluded(-2));
        assert_eq!(key_range(KeyOp::Le, &SqlValue::Real(-2.5)).high, Included(-3));
        assert!(key_range(KeyOp::Eq, &SqlValue::Real(2.5)).is_empty());
        assert_eq!(key_range(KeyOp::Eq, &SqlValue::Text(b" 7 ")).low, Included(7));
        assert!(key_range(KeyOp::Gt, &SqlValue::Text(b"abc")).is_empty());
        assert_eq!(key_range(KeyOp::Lt, &SqlValue::Blob(b"")), KeyRange::ALL);
        assert!(KeyRange {
            low: Excluded(i64::MAX),
            high: Unbounded
        }
        .is_empty());
        assert!(KeyRange {
            low: Included(5),
            high: Excluded(5)
        }
        .is_empty());
        let r = KeyRange {
            low: Included(3),
            high: Unbounded,
        }
        .intersect(KeyRange {
            low: Excluded(3),
            high: Included(9),
        });
        assert_eq!(
            r,
            KeyRange {
                low: Excluded(3),
                high: Included(9)
            }
        );
    }
}
