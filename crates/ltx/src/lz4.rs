//! LZ4 block compression, the same bytes as github.com/pierrec/lz4/v4's `CompressBlock`
//! (the fast compressor superfly/ltx's encoder calls), and block decompression.
//!
//! Any LZ4 compressor makes a valid block, but the bytes differ between compressors, and an
//! LTX file's checksum covers each page's compressed size. Writing the same bytes as the Go
//! encoder makes our files byte-identical to superfly/ltx's for the same header and pages:
//! this is a port of pierrec/lz4 v4.1.23's `internal/lz4block` fast path (a 2^16-entry
//! table of 16-bit positions hashed from 6 bytes, three candidates per step, matches
//! extended 8 bytes at a time, an adaptive skip over incompressible runs). Decompression is
//! `lz4_flex`'s safe decoder, which reads any valid block.

/// The minimum match the format encodes.
const MIN_MATCH: usize = 4;
const WIN_SIZE: i64 = 1 << 16;
const WIN_MASK: i64 = WIN_SIZE - 1;
const HASH_LOG: u32 = 16;
const HT_SIZE: usize = 1 << HASH_LOG;
/// The last match cannot start within the last 14 bytes.
const MF_LIMIT: usize = 10 + MIN_MATCH;
/// How quickly the search skips ahead through incompressible bytes.
const ADAPT_SKIP_LOG: usize = 7;

/// The largest block `n` bytes can compress to (pierrec's `CompressBlockBound`).
pub fn compress_bound(n: usize) -> usize {
    n + n / 255 + 16
}

fn block_hash(x: u64) -> u32 {
    const PRIME_6_BYTES: u64 = 227_718_039_650_203;
    ((x << 16).wrapping_mul(PRIME_6_BYTES) >> (64 - HASH_LOG)) as u32
}

fn le_u64(src: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&src[at..at + 8]);
    u64::from_le_bytes(b)
}

fn le_u32(src: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&src[at..at + 4]);
    u32::from_le_bytes(b)
}

/// The hash table: the low 16 bits of the last position each hash was seen at.
struct Table {
    table: Vec<u16>,
    in_use: Vec<u32>,
}

impl Table {
    fn new() -> Table {
        Table {
            table: vec![0; HT_SIZE],
            in_use: vec![0; HT_SIZE / 32],
        }
    }

    /// The position of a presumptive match for hash `h` (negative in the first 64 KiB).
    fn get(&self, h: u32, si: usize) -> i64 {
        let h = h as usize & (HT_SIZE - 1);
        let mut i = 0i64;
        if self.in_use[h / 32] & (1 << (h % 32)) != 0 {
            i = i64::from(self.table[h]);
        }
        let si = si as i64;
        i += si & !WIN_MASK;
        if i >= si {
            i -= WIN_SIZE;
        }
        i
    }

    fn put(&mut self, h: u32, si: usize) {
        let h = h as usize & (HT_SIZE - 1);
        self.table[h] = si as u16;
        self.in_use[h / 32] |= 1 << (h % 32);
    }
}

/// Whether `src[si..si+4]` (as `word`) matches 4 bytes at `si - offset`.
fn is_match(src: &[u8], si: usize, offset: i64, word: u32) -> bool {
    let r = si as i64 - offset;
    offset > 0 && offset < WIN_SIZE && r >= 0 && word == le_u32(src, r as usize)
}

/// Appends a literal or match length's continuation bytes (after the token's 15).
fn push_len(dst: &mut Vec<u8>, mut n: usize) {
    while n >= 0xff {
        dst.push(0xff);
        n -= 0xff;
    }
    dst.push(n as u8);
}

/// Compresses `src` as one LZ4 block, byte for byte as pierrec/lz4's `CompressBlock` does
/// with a destination of `compress_bound(src.len())` bytes (so never "incompressible").
pub fn compress(src: &[u8]) -> Vec<u8> {
    let mut t = Table::new();
    let mut dst = Vec::with_capacity(compress_bound(src.len()));
    let mut si = 0usize;
    let mut anchor = 0usize;
    if src.len() > MF_LIMIT {
        let sn = src.len() - MF_LIMIT;
        while si < sn {
            let word = le_u64(src, si);
            let mut h = block_hash(word);
            let h2 = block_hash(word >> 8);
            let r1 = t.get(h, si);
            let r2 = t.get(h2, si + 1);
            t.put(h, si);
            t.put(h2, si + 1);
            let mut offset = si as i64 - r1;
            if !is_match(src, si, offset, word as u32) {
                h = block_hash(word >> 16);
                let r3 = t.get(h, si + 2);
                si += 1;
                offset = si as i64 - r2;
                if !is_match(src, si, offset, (word >> 8) as u32) {
                    si += 1;
                    offset = si as i64 - r3;
                    t.put(h, si);
                    if !is_match(src, si, offset, (word >> 16) as u32) {
                        si += 2 + ((si - anchor) >> ADAPT_SKIP_LOG);
                        continue;
                    }
                }
            }
            let offset = offset as usize;
            // A match: extend it backwards over the literals.
            let mut l_len = si - anchor;
            let mut m_len = MIN_MATCH;
            let mut t_off = si as i64 - offset as i64 - 1;
            while l_len > 0 && t_off >= 0 && src[si - 1] == src[t_off as usize] {
                si -= 1;
                t_off -= 1;
                l_len -= 1;
                m_len += 1;
            }
            let base = si + MIN_MATCH;
            si += m_len;
            // Then forwards, 8 bytes at a time.
            while si + 8 <= sn {
                let x = le_u64(src, si) ^ le_u64(src, si - offset);
                if x == 0 {
                    si += 8;
                } else {
                    si += (x.trailing_zeros() >> 3) as usize;
                    break;
                }
            }
            let m_len = si - base;
            let token = (m_len.min(0xf) as u8) | ((l_len.min(0xf) as u8) << 4);
            dst.push(token);
            if l_len >= 0xf {
                push_len(&mut dst, l_len - 0xf);
            }
            dst.extend_from_slice(&src[anchor..anchor + l_len]);
            dst.extend_from_slice(&(offset as u16).to_le_bytes());
            anchor = si;
            if m_len >= 0xf {
                push_len(&mut dst, m_len - 0xf);
            }
            if si >= sn {
                break;
            }
            let h = block_hash(le_u64(src, si - 2));
            t.put(h, si - 2);
        }
    }
    // The last literals.
    let l_len = src.len() - anchor;
    dst.push((l_len.min(0xf) as u8) << 4);
    if l_len >= 0xf {
        push_len(&mut dst, l_len - 0xf);
    }
    dst.extend_from_slice(&src[anchor..]);
    dst
}

/// Decompresses one LZ4 block that must fill `out` exactly; `None` when it is not a valid
/// block or does not decompress to `out.len()` bytes.
pub fn decompress_exact(block: &[u8], out: &mut [u8]) -> Option<()> {
    match lz4_flex::block::decompress_into(block, out) {
        Ok(n) if n == out.len() => Some(()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_lz4_flex() {
        let mut inputs: Vec<Vec<u8>> = vec![vec![], vec![7], vec![0; 4096], (0..=255).collect()];
        let mut x = 0x1234_5678_9abc_def0u64;
        let mut noisy = Vec::new();
        for i in 0..8192 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            noisy.push(if i % 3 == 0 { b'a' } else { x as u8 });
        }
        inputs.push(noisy);
        inputs.push(b"hello hello hello hello world world world!!!".repeat(40));
        for src in inputs {
            let c = compress(&src);
            assert!(c.len() <= compress_bound(src.len()));
            let mut out = vec![0u8; src.len()];
            assert_eq!(decompress_exact(&c, &mut out), Some(()));
            assert_eq!(out, src);
        }
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn compresses_as_pierrec_does() {
        // What pierrec/lz4 v4.1.23's Compressor.CompressBlock printed for the same inputs
        // (a Go program run once with the module from the Go module proxy).
        assert_eq!(
            hex(&compress(&[0u8; 4096])),
            "1f000100ffffffffffffffffffffffffffffffe8000200000200b00000000000000000000000"
        );
        assert_eq!(
            hex(&compress(
                b"hello hello hello hello world world world!!!"
                    .repeat(2)
                    .as_slice()
            )),
            "6e68656c6c6f20060058776f726c6406003f2121212c000a002c00b06c6420776f726c64212121"
        );
    }
}
