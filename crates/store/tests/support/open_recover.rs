//! The `open_recover` harness, shared by the cargo-fuzz target (`fuzz/fuzz_targets/
//! open_recover.rs`, nightly) and the stable test `tests/fuzz_open.rs`.
//!
//! An input is a byte string: its first byte picks a mode, the rest drives it.
//! * `RAW`: the rest is the store image.
//! * `PATCH`: a small valid store image (built once, made byte-for-byte reproducible) with
//!   patches at input-chosen offsets, aimed at header copies, checkpoints, the log or slots.
//! * `PATCH_FIXED`: as `PATCH`, then every checksum is recomputed (headers, checkpoints, the
//!   log's record chain, the page checksums records name), so that the damage gets past the
//!   checksums to the decoders and to recovery itself. This is what a bug or a malicious
//!   writer could leave; a store must refuse it with an error, never panic.
//! * `RESIZE`: the valid image cut or extended to an input-chosen length, then patched.
//!
//! Whatever the image, `exercise` opens it on a `SimDisk`; if it opens, it reads every page
//! of every file, commits, checkpoints, closes and reopens. Errors are fine; panics are not.
//!
//! A crash found with the fuzzer is reproduced from its input file alone: the base image is
//! deterministic (see `canonicalize`).

#![allow(dead_code)]

use onesync_store::layout::{HEADER_BLOCK, HEADER_LEN, SLOT_BASE};
use onesync_store::sim::SimDisk;
use onesync_store::{Error, Options, Store};
use std::sync::OnceLock;

pub const RAW: u8 = 0;
pub const PATCH: u8 = 1;
pub const PATCH_FIXED: u8 = 2;
pub const RESIZE: u8 = 3;
pub const MODES: u8 = 4;

/// Pages read per file at most (a damaged size can claim billions of pages that read as
/// zeros; reading them all would only measure the loop).
pub const MAX_PAGES_READ: u64 = 4096;

const BASE_PAGE: usize = 512;

// Header fields (format.rs, Header::encode), little-endian.
const H_PAGE_SIZE: usize = 24;
const H_STORE_ID: usize = 32;
const H_GENERATION: usize = 40;
const H_CK_FIRST: usize = 48;
const H_CK_LEN: usize = 56;
const H_CK_CRC: usize = 72;
// Then the checkpoint's runs of slots: a count, then (first slot, slot count) pairs.
const H_CK_EXTENT_COUNT: usize = 96;
const H_CK_EXTENTS: usize = 100;
const MAX_EXTENTS: usize = 56;
const H_LOG_FIRST: usize = 76;
const H_SEED: usize = 92;

// Commit record fields (format.rs, Record::encode). Records start at a slot; the header
// names the first (`log.first_slot`), each names the next (`next_slot`).
const RECORD_MAGIC: u32 = 0x5243_534f;
const RECORD_ALIGN: usize = 512;
const R_TOTAL: usize = 8;
const R_PAYLOAD: usize = 12;
const R_SESSION: usize = 24;
const R_PREV_CRC: usize = 40;
const R_NEXT_SLOT: usize = 44;
const R_COUNT: usize = 60;
const R_OPS: usize = 64;

// --- bounds-checked little-endian access: the harness itself must not panic either -----

fn get<const N: usize>(b: &[u8], at: usize) -> Option<[u8; N]> {
    b.get(at..at.checked_add(N)?)?.try_into().ok()
}
fn rd16(b: &[u8], at: usize) -> Option<u16> {
    get::<2>(b, at).map(u16::from_le_bytes)
}
fn rd32(b: &[u8], at: usize) -> Option<u32> {
    get::<4>(b, at).map(u32::from_le_bytes)
}
fn rd64(b: &[u8], at: usize) -> Option<u64> {
    get::<8>(b, at).map(u64::from_le_bytes)
}
fn put(b: &mut [u8], at: usize, v: &[u8]) {
    if let Some(dst) = at.checked_add(v.len()).and_then(|end| b.get_mut(at..end)) {
        dst.copy_from_slice(v);
    }
}

fn page_size_at(image: &[u8], header: usize) -> Option<usize> {
    let ps = rd32(image, header + H_PAGE_SIZE)? as usize;
    (ps.is_power_of_two() && (512..=65536).contains(&ps)).then_some(ps)
}

fn slot_range(image: &[u8], ps: usize, first_slot: u64, len: u64) -> Option<std::ops::Range<usize>> {
    let start = (first_slot as usize)
        .checked_mul(ps)?
        .checked_add(SLOT_BASE as usize)?;
    let end = start.checked_add(usize::try_from(len).ok()?)?;
    (end <= image.len()).then_some(start..end)
}

/// The image byte ranges holding the checkpoint named by the header copy at `header`, in
/// order, `len` bytes in all; `None` if the header names runs outside the image.
pub fn checkpoint_ranges(image: &[u8], header: usize) -> Option<Vec<std::ops::Range<usize>>> {
    let ps = page_size_at(image, header)?;
    let mut left = rd64(image, header + H_CK_LEN)? as usize;
    let count = (rd32(image, header + H_CK_EXTENT_COUNT)? as usize).min(MAX_EXTENTS);
    let mut ranges = Vec::new();
    for i in 0..count {
        if left == 0 {
            break;
        }
        let at = header + H_CK_EXTENTS + 16 * i;
        let (first, n) = (rd64(image, at)?, rd64(image, at + 8)?);
        let bytes = (n as usize).checked_mul(ps)?.min(left);
        ranges.push(slot_range(image, ps, first, bytes as u64)?);
        left -= bytes;
    }
    (left == 0).then_some(ranges)
}

fn gather(image: &[u8], ranges: &[std::ops::Range<usize>]) -> Vec<u8> {
    ranges
        .iter()
        .flat_map(|r| image[r.clone()].iter().copied())
        .collect()
}

fn scatter(image: &mut [u8], ranges: &[std::ops::Range<usize>], blob: &[u8]) {
    let mut from = 0;
    for r in ranges {
        image[r.clone()].copy_from_slice(&blob[from..from + r.len()]);
        from += r.len();
    }
}

/// Recompute the checksums of one header copy and of the checkpoint it names.
fn fix_header(image: &mut [u8], header: usize) {
    if image.len() < header + HEADER_LEN {
        return;
    }
    if let (Some(ps), Some(ranges)) = (page_size_at(image, header), checkpoint_ranges(image, header)) {
        let mut blob = gather(image, &ranges);
        // A version-1 checkpoint holds page CRCs; a manifest (version 2) names blocks of
        // the mapping by their CRCs, which are left as they are (a block damaged in
        // place fails its CRC: `Corrupt`).
        if blob.starts_with(b"OSCK") {
            fix_checkpoint_pages(&mut blob, image, ps);
        }
        scatter(image, &ranges, &blob);
        let crc = crc32c::crc32c(&blob);
        put(image, header + H_CK_CRC, &crc.to_le_bytes());
    }
    let crc = crc32c::crc32c(&image[header..header + HEADER_LEN - 4]);
    put(image, header + HEADER_LEN - 4, &crc.to_le_bytes());
}

/// Offsets in a checkpoint blob (format.rs, CheckpointEncoder) of each file's size field
/// and of each page entry.
struct BlobLayout {
    sizes: Vec<usize>,
    pages: Vec<usize>,
}

fn blob_layout(blob: &[u8]) -> BlobLayout {
    let mut layout = BlobLayout {
        sizes: Vec::new(),
        pages: Vec::new(),
    };
    let mut at = 24; // magic, version, seq, next_file_id, file_count
    let Some(files) = rd32(blob, 20) else {
        return layout;
    };
    for _ in 0..files.min(1 << 16) {
        let Some(name_len) = rd16(blob, at + 4) else { break };
        at += 6 + name_len as usize;
        let Some(pages) = rd64(blob, at + 8) else { break };
        layout.sizes.push(at);
        at += 16;
        for _ in 0..pages.min(1 << 20) {
            if at + 22 > blob.len() {
                return layout;
            }
            layout.pages.push(at);
            let Some(ranges) = rd16(blob, at + 20) else {
                return layout;
            };
            at += 22;
            for _ in 0..ranges {
                let Some(len) = rd16(blob, at + 4) else {
                    return layout;
                };
                at += 6 + len as usize;
            }
        }
    }
    layout
}

/// Set each checkpoint page entry's CRC to that of the slot it names, where that exists.
fn fix_checkpoint_pages(blob: &mut [u8], image: &[u8], ps: usize) {
    for at in blob_layout(blob).pages {
        let Some(slot) = rd64(blob, at + 8) else { continue };
        if let Some(r) = slot_range(image, ps, slot, ps as u64) {
            let crc = crc32c::crc32c(&image[r]);
            put(blob, at + 16, &crc.to_le_bytes());
        }
    }
}

/// Image offsets of the size field of every file in the checkpoint named by the header copy
/// at `header` (for tests that craft a checkpoint, then `fix_checksums`).
pub fn checkpoint_size_fields(image: &[u8], header: usize) -> Vec<usize> {
    let Some(ranges) = checkpoint_ranges(image, header) else {
        return Vec::new();
    };
    let blob = gather(image, &ranges);
    let to_image = |mut off: usize| {
        for r in &ranges {
            if off < r.len() {
                return Some(r.start + off);
            }
            off -= r.len();
        }
        None
    };
    blob_layout(&blob)
        .sizes
        .into_iter()
        .filter_map(|o| Some((to_image(o)?, to_image(o + 7)?)))
        .filter(|(a, b)| b - a == 7) // not split across runs
        .map(|(a, _)| a)
        .collect()
}

/// Within one record's ops, set each `Page` op's CRC to that of the slot it names.
fn fix_record_pages(image: &mut [u8], record: usize, payload_end: usize, ps: usize) {
    let Some(count) = rd32(image, record + R_COUNT) else {
        return;
    };
    let mut at = record + R_OPS;
    for _ in 0..count.min(1 << 16) {
        if at >= payload_end {
            return;
        }
        let Some(tag) = image.get(at).copied() else { return };
        at += 1;
        match tag {
            1 => {
                let Some(len) = rd16(image, at + 4) else { return };
                at += 6 + len as usize;
            }
            2 => at += 4,
            3 => at += 12,
            4 => {
                if let Some(slot) = rd64(image, at + 12) {
                    if let Some(r) = slot_range(image, ps, slot, ps as u64) {
                        let crc = crc32c::crc32c(&image[r]);
                        put(image, at + 20, &crc.to_le_bytes());
                    }
                }
                at += 24;
            }
            5 => {
                let Some(len) = rd16(image, at + 16) else { return };
                at += 18 + len as usize;
            }
            _ => return,
        }
    }
}

/// The byte range of a plausible record (magic, aligned length, payload inside it, all in
/// the image) starting at `at`, and its payload length.
fn record_span(image: &[u8], at: usize) -> Option<(std::ops::Range<usize>, usize)> {
    let (magic, total, payload) = (
        rd32(image, at)?,
        rd32(image, at + R_TOTAL)?,
        rd32(image, at + R_PAYLOAD)?,
    );
    let (total, payload) = (total as usize, payload as usize);
    let end = at.checked_add(total)?;
    let plausible = magic == RECORD_MAGIC
        && total > 0
        && total % RECORD_ALIGN == 0
        && end <= image.len()
        && payload >= R_OPS
        && payload + 4 <= total;
    plausible.then_some((at..end, payload))
}

/// Re-seal one record: its pages' checksums, `prev_crc`, optionally its session, its CRC.
fn reseal_record(
    image: &mut [u8],
    at: usize,
    payload: usize,
    ps: usize,
    prev: u32,
    session: Option<u64>,
) -> u32 {
    if let Some(session) = session {
        put(image, at + R_SESSION, &session.to_le_bytes());
    }
    put(image, at + R_PREV_CRC, &prev.to_le_bytes());
    fix_record_pages(image, at, at + payload, ps);
    let crc = crc32c::crc32c(&image[at..at + payload]);
    put(image, at + payload, &crc.to_le_bytes());
    crc
}

fn slot_start(ps: usize, slot: u64) -> Option<usize> {
    (slot as usize).checked_mul(ps)?.checked_add(SLOT_BASE as usize)
}

/// Re-seal every record-shaped slot that is not on a chain, with a fixed `prev_crc` (it
/// stays off the chain; this only makes stale records deterministic).
fn fix_stale_records(image: &mut [u8], ps: usize, session: Option<u64>) {
    let slots = image.len().saturating_sub(SLOT_BASE as usize) / ps;
    for slot in 0..slots as u64 {
        let Some(at) = slot_start(ps, slot) else { return };
        if let Some((_, payload)) = record_span(image, at) {
            reseal_record(image, at, payload, ps, 0x5eed_57a1, session);
        }
    }
}

/// Image offsets of the `slot` field of every `Page` operation in the records of the chain
/// that starts at the header copy at `header`, with the slot each record itself starts at.
pub fn chain_page_slot_fields(image: &[u8], header: usize) -> Vec<(u64, usize)> {
    let mut fields = Vec::new();
    let (Some(ps), Some(first)) = (page_size_at(image, header), rd64(image, header + H_LOG_FIRST)) else {
        return fields;
    };
    let mut visited = std::collections::BTreeSet::new();
    let mut slot = first;
    while visited.insert(slot) {
        let Some(at) = slot_start(ps, slot) else { break };
        let Some((span, payload)) = record_span(image, at) else {
            break;
        };
        let count = rd32(image, at + R_COUNT).unwrap_or(0);
        let mut op = at + R_OPS;
        for _ in 0..count.min(1 << 16) {
            if op >= at + payload.min(span.len()) {
                break;
            }
            let Some(tag) = image.get(op).copied() else { break };
            op += 1;
            if tag == 4 {
                fields.push((slot, op + 12));
            }
            op += match tag {
                1 => 6 + rd16(image, op + 4).unwrap_or(0) as usize,
                2 => 4,
                3 => 12,
                4 => 24,
                5 => 18 + rd16(image, op + 16).unwrap_or(0) as usize,
                _ => break,
            };
        }
        let Some(next) = rd64(image, at + R_NEXT_SLOT) else {
            break;
        };
        slot = next;
    }
    fields
}

/// The header copy with the higher generation (copy 0 on a tie).
pub fn newest_header(image: &[u8]) -> usize {
    if generation(image, HEADER_BLOCK as usize) > generation(image, 0) {
        HEADER_BLOCK as usize
    } else {
        0
    }
}

/// Re-seal the chain of the header copy at `header`: from the record at `log.first_slot`,
/// following `next_slot`, each record gets `prev_crc` chained to the one before (the first
/// to the header's seed), its pages' checksums fixed and its CRC recomputed.
fn fix_chain(image: &mut [u8], header: usize, session: Option<u64>) {
    let (Some(ps), Some(first), Some(seed)) = (
        page_size_at(image, header),
        rd64(image, header + H_LOG_FIRST),
        rd32(image, header + H_SEED),
    ) else {
        return;
    };
    let slots = image.len().saturating_sub(SLOT_BASE as usize) / ps;
    let mut visited = std::collections::BTreeSet::new();
    let (mut slot, mut prev) = (first, seed);
    while (slot as usize) < slots && visited.insert(slot) {
        let Some(at) = slot_start(ps, slot) else { return };
        let Some((_, payload)) = record_span(image, at) else {
            return;
        };
        prev = reseal_record(image, at, payload, ps, prev, session);
        let Some(next) = rd64(image, at + R_NEXT_SLOT) else {
            return;
        };
        slot = next;
    }
}

fn generation(image: &[u8], header: usize) -> u64 {
    rd64(image, header + H_GENERATION).unwrap_or(0)
}

/// Make every checksum in the image agree with the bytes around it.
pub fn fix_checksums(image: &mut [u8], session: Option<u64>) {
    let copies = [0usize, HEADER_BLOCK as usize];
    // Stale records first, then the older copy's chain, then the newest's (it wins where
    // they share records), then checkpoints and headers (they cover the checkpoint CRC).
    if let Some(ps) = copies.iter().find_map(|&h| page_size_at(image, h)) {
        fix_stale_records(image, ps, session);
    }
    let mut by_age = copies;
    by_age.sort_by_key(|&h| generation(image, h));
    for h in by_age {
        if image.len() >= h + HEADER_LEN {
            fix_chain(image, h, session);
        }
    }
    for h in copies {
        fix_header(image, h);
    }
}

/// Replace the random parts of a freshly made store (store id, log seeds, session nonces)
/// with constants and re-seal it, so the same construction gives the same bytes every run.
fn canonicalize(image: &mut [u8]) {
    for h in [0usize, HEADER_BLOCK as usize] {
        put(image, h + H_STORE_ID, &0x0123_4567_89ab_cdefu64.to_le_bytes());
        // Copies of one generation are one header: same seed.
        let seed = 0x5eed_0000u32.wrapping_add(generation(image, h) as u32);
        put(image, h + H_SEED, &seed.to_le_bytes());
    }
    fix_checksums(image, Some(0x5e55_1011));
}

fn page(tag: u32) -> Vec<u8> {
    pattern(tag as u64, BASE_PAGE)
}

/// Distinct, non-uniform page contents (so a page can be found in an image by content);
/// the same for the same tag on every run, which keeps the base image reproducible.
pub fn pattern(tag: u64, len: usize) -> Vec<u8> {
    let mut x = tag.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Options for the base image: tiny, so an exec is cheap and every region gets hit.
pub fn base_options() -> Options {
    Options {
        page_size: BASE_PAGE as u32,
        checkpoint_interval: 0,
        log_capacity: 16 * 512,
        initial_capacity: 0,
        growth_step: 16 * 512,
        embed_limit: 64,
        window_bytes: 4 * 512,
        read_only: false,
        ..Options::default()
    }
}

/// The base image: two checkpoints' worth of history, then commits waiting in the log:
/// several files, whole pages, overlays, a shrink, a deletion, a sparse page.
fn build_base() -> Vec<u8> {
    let disk = SimDisk::new();
    let store = Store::create_with_io(disk.io(), &base_options()).expect("create the base store");
    let commit = |f: &dyn Fn(&mut onesync_store::Transaction)| {
        let mut t = store.begin();
        f(&mut t);
        t.commit().expect("commit to the base store");
    };
    commit(&|t| {
        let a = t.create_file("alpha").unwrap();
        let b = t.create_file("beta").unwrap();
        t.write_page(a, 0, &page(1)).unwrap();
        t.write_page(a, 1, &page(2)).unwrap();
        t.write_page(b, 0, &page(3)).unwrap();
    });
    commit(&|t| {
        let a = t.file("alpha").unwrap();
        let mut p = page(1);
        p[24..28].copy_from_slice(&[9, 9, 9, 9]);
        t.write_page(a, 0, &p).unwrap();
        t.write_page(a, 1, &page(4)).unwrap();
    });
    store.checkpoint().expect("checkpoint the base store");
    commit(&|t| {
        let b = t.file("beta").unwrap();
        t.delete_file(b).unwrap();
        let g = t.create_file("gamma").unwrap();
        t.write_page(g, 3, &page(5)).unwrap();
    });
    commit(&|t| {
        let a = t.file("alpha").unwrap();
        t.set_file_size(a, 512 + 100).unwrap();
    });
    store.checkpoint().expect("checkpoint the base store");
    commit(&|t| {
        let g = t.file("gamma").unwrap();
        let mut p = page(5);
        p[0] = 0xee;
        t.write_page(g, 3, &p).unwrap();
        t.write_page(g, 1, &page(6)).unwrap();
    });
    commit(&|t| {
        let d = t.create_file("delta").unwrap();
        t.write_page(d, 0, &page(7)).unwrap();
    });
    drop(store);
    let mut image = disk.durable_image();
    canonicalize(&mut image);
    image
}

/// The base image, made reproducible: the random fields the store writes (store id, seeds,
/// session nonces) are replaced by constants (`canonicalize`), and whatever random bytes are
/// left in dead space (say, the tail of an old record under a shorter checkpoint written
/// over it) are zeroed: the image is built four times, and every byte that is not the same
/// in all four is set to zero. `base_image` checks that the result is still the same store.
fn reproducible_base() -> Vec<u8> {
    let builds: Vec<Vec<u8>> = (0..4).map(|_| build_base()).collect();
    let mut image = builds[0].clone();
    for other in &builds[1..] {
        assert_eq!(other.len(), image.len(), "base images of different lengths");
        for (i, b) in other.iter().enumerate() {
            if *b != builds[0][i] {
                image[i] = 0;
            }
        }
    }
    image
}

/// A fresh construction of the base image (to check that it is deterministic).
pub fn rebuild_for_test() -> Vec<u8> {
    reproducible_base()
}

/// The base image, built once per process.
pub fn base_image() -> &'static [u8] {
    static BASE: OnceLock<Vec<u8>> = OnceLock::new();
    BASE.get_or_init(|| {
        let image = reproducible_base();
        // The canonical image must be a healthy store, or the mutating modes test nothing.
        let store = Store::open_with_io(Box::new(SimDisk::from_image(image.clone())), &base_options())
            .expect("the canonical base image opens");
        assert_eq!(store.last_seq(), 6);
        assert_eq!(store.stats().records_replayed, 2);
        assert_eq!(store.snapshot().files().len(), 3);
        image
    })
}

/// Byte offsets of the record-shaped slots of the base image.
fn base_records() -> &'static [usize] {
    static RECORDS: OnceLock<Vec<usize>> = OnceLock::new();
    RECORDS.get_or_init(|| {
        let base = base_image();
        let slots = (base.len() - SLOT_BASE as usize) / BASE_PAGE;
        (0..slots as u64)
            .filter_map(|s| slot_start(BASE_PAGE, s))
            .filter(|&at| record_span(base, at).is_some())
            .collect()
    })
}

/// Where in the base image a patch lands: aimed at the structures that matter.
fn patch_offset(image_len: usize, region: u8, raw: u32) -> usize {
    let base = base_image();
    let len = image_len.max(1);
    let hb = HEADER_BLOCK as usize;
    let within = |start: usize, span: usize| start + raw as usize % span.max(1);
    let at = match region % 8 {
        0 => within(0, HEADER_LEN),
        1 => within(hb, HEADER_LEN),
        2 | 3 => {
            // The checkpoint named by header copy 0 or 1.
            let h = if region % 8 == 2 { 0 } else { hb };
            let ranges = checkpoint_ranges(base, h).unwrap_or_default();
            let total: usize = ranges.iter().map(|r| r.len()).sum();
            let mut off = raw as usize % total.max(1);
            let mut at = 0;
            for r in &ranges {
                if off < r.len() {
                    at = r.start + off;
                    break;
                }
                off -= r.len();
            }
            at
        }
        4 | 5 => {
            // Inside one of the base image's commit records.
            let records = base_records();
            let n = records.len().max(1);
            let at = records
                .get((raw as usize / RECORD_ALIGN) % n)
                .copied()
                .unwrap_or(SLOT_BASE as usize);
            at + raw as usize % RECORD_ALIGN
        }
        6 => within(SLOT_BASE as usize, len.saturating_sub(SLOT_BASE as usize)), // slots
        _ => raw as usize,
    };
    at % len
}

/// Apply patch commands: `[region, off0, off1, off2, kind_len, bytes...]` repeated.
/// `kind_len` high bit: xor instead of overwrite; low 6 bits: length (0 = 1 byte).
fn apply_patches(image: &mut [u8], mut cmds: &[u8]) {
    let mut n = 0;
    while cmds.len() >= 5 && n < 64 {
        let region = cmds[0];
        let raw = u32::from_le_bytes([cmds[1], cmds[2], cmds[3], 0]);
        let xor = cmds[4] & 0x80 != 0;
        let len = ((cmds[4] & 0x3f) as usize).max(1);
        let data = &cmds[5..(5 + len).min(cmds.len())];
        cmds = &cmds[(5 + len).min(cmds.len())..];
        let at = patch_offset(image.len(), region, raw);
        for (i, b) in data.iter().enumerate() {
            if let Some(dst) = image.get_mut(at + i) {
                *dst = if xor { *dst ^ b } else { *b };
            }
        }
        n += 1;
    }
}

/// A screen for a known defect, off unless `ONESYNC_FUZZ_SKIP_KNOWN=1`: when the store kept
/// one in-memory entry per logical page, a checkpoint or record (checksums valid) claiming
/// a file of 2^40 pages made `State::from_checkpoint` allocate petabytes (an abort). Pages
/// are sparse now; the screen stays for bisecting older versions. With it on, images whose
/// metadata claims a file larger than this many pages are skipped, and counted.
pub const SCREEN_PAGES: u64 = 1 << 20;

pub fn skip_known_defects() -> bool {
    static SKIP: OnceLock<bool> = OnceLock::new();
    *SKIP.get_or_init(|| std::env::var("ONESYNC_FUZZ_SKIP_KNOWN").is_ok_and(|v| v == "1"))
}

/// The largest file, in pages, that any checkpoint or log record in the image claims
/// (whether or not its checksums hold).
pub fn largest_claimed_file(image: &[u8]) -> u64 {
    let mut largest = 0u64;
    for h in [0usize, HEADER_BLOCK as usize] {
        let Some(ps) = page_size_at(image, h) else {
            continue;
        };
        let pages = |bytes: u64| bytes.div_ceil(ps as u64);
        if let Some(ranges) = checkpoint_ranges(image, h) {
            let blob = gather(image, &ranges);
            for at in blob_layout(&blob).sizes {
                largest = largest.max(pages(rd64(&blob, at).unwrap_or(0)));
            }
        }
    }
    // Every OP_SIZE in any record-shaped slot.    // Every OP_SIZE in any record-shaped slot.
    if let Some(ps) = [0usize, HEADER_BLOCK as usize]
        .iter()
        .find_map(|&h| page_size_at(image, h))
    {
        let slots = image.len().saturating_sub(SLOT_BASE as usize) / ps;
        for slot in 0..slots as u64 {
            let Some(at) = slot_start(ps, slot) else { break };
            let Some((span, _)) = record_span(image, at) else {
                continue;
            };
            let mut op = at + R_OPS;
            let count = rd32(image, at + R_COUNT).unwrap_or(0);
            for _ in 0..count.min(1 << 16) {
                if op >= span.end {
                    break;
                }
                let Some(tag) = image.get(op).copied() else { break };
                op += 1;
                op += match tag {
                    1 => 6 + rd16(image, op + 4).unwrap_or(0) as usize,
                    2 => 4,
                    3 => {
                        let bytes = rd64(image, op + 4).unwrap_or(0);
                        largest = largest.max(bytes.div_ceil(ps as u64));
                        12
                    }
                    4 => 24,
                    5 => 18 + rd16(image, op + 16).unwrap_or(0) as usize,
                    _ => break,
                };
            }
        }
    }
    largest
}

/// Turn a fuzz input into a store image.
pub fn build_image(data: &[u8]) -> Vec<u8> {
    let Some((&mode, rest)) = data.split_first() else {
        return Vec::new();
    };
    match mode % MODES {
        RAW => rest.to_vec(),
        PATCH | PATCH_FIXED => {
            let mut image = base_image().to_vec();
            apply_patches(&mut image, rest);
            if mode % MODES == PATCH_FIXED {
                fix_checksums(&mut image, None);
            }
            image
        }
        _ => {
            let base = base_image();
            let Some(len) = get::<3>(rest, 0) else {
                return base.to_vec();
            };
            let len = u32::from_le_bytes([len[0], len[1], len[2], 0]) as usize % (2 * base.len());
            let mut image = base.to_vec();
            image.resize(len, 0);
            let cmds = &rest[3..];
            // A flag byte: re-seal after patching.
            let fix = cmds.first().is_some_and(|b| b & 1 == 1);
            apply_patches(&mut image, cmds.get(1..).unwrap_or(&[]));
            if fix {
                fix_checksums(&mut image, None);
            }
            image
        }
    }
}

fn read_everything(store: &Store) {
    let snap = store.snapshot();
    let mut buf = vec![0u8; store.page_size()];
    for (id, name) in snap.files() {
        let _ = snap.file(&name);
        let Ok(size) = snap.file_size(id) else { continue };
        let pages = size.div_ceil(store.page_size() as u64);
        for n in 0..pages.min(MAX_PAGES_READ) {
            let _ = snap.read_page(id, n, &mut buf);
        }
        let _ = snap.read_page(id, pages.saturating_add(3), &mut buf);
    }
}

/// What one input did (for the stable test's tallies; the fuzz target ignores it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Skipped by the known-defect screen (see `SCREEN_PAGES`).
    pub skipped: bool,
    /// The error opening gave, by variant name; `None` if it opened.
    pub open_error: Option<&'static str>,
    /// Records replayed at open.
    pub replayed: u64,
    /// The first commit after opening succeeded.
    pub committed: bool,
    /// The image after the commits and checkpoint reopened.
    pub reopened: bool,
    /// Why it did not, if it opened the first time.
    pub reopen_error: Option<&'static str>,
}

pub fn kind(e: &Error) -> &'static str {
    match e {
        Error::Io { .. } => "Io",
        Error::ReadFailed { .. } => "ReadFailed",
        Error::NotAStore(_) => "NotAStore",
        Error::UnsupportedVersion { .. } => "UnsupportedVersion",
        Error::Truncated(_) => "Truncated",
        Error::Corrupt(_) => "Corrupt",
        Error::NoSpace => "NoSpace",
        Error::ReadOnly => "ReadOnly",
        Error::NotWritable { .. } => "NotWritable",
        Error::Locked(_) => "Locked",
        Error::AlreadyExists(_) => "AlreadyExists",
        Error::NotFound(_) => "NotFound",
        Error::Conflict(_) => "Conflict",
        Error::InvalidArgument(_) => "InvalidArgument",
        Error::NoSuchFile(_) => "NoSuchFile",
        Error::FileExists(_) => "FileExists",
        Error::Poisoned(_) => "Poisoned",
    }
}

/// Open an image; if it opens, use it every way: read everything, commit, checkpoint,
/// close, reopen, read again. `flags` varies the options and the commit.
pub fn exercise(image: Vec<u8>, flags: u8) -> Outcome {
    let mut outcome = Outcome::default();
    let opts = Options {
        checkpoint_interval: (flags & 3) as u64,
        embed_limit: if flags & 4 != 0 { 0 } else { 64 },
        ..base_options()
    };
    let disk = SimDisk::from_image(image);
    // Bound the growth a commit may ask for (a damaged image can name a huge page size).
    disk.set_capacity(Some(disk.image().len() as u64 + (4 << 20)));
    let store = match Store::open_with_io(disk.io(), &opts) {
        Ok(store) => store,
        Err(e) => {
            outcome.open_error = Some(kind(&e));
            return outcome;
        }
    };
    outcome.replayed = store.stats().records_replayed;
    read_everything(&store);

    let ps = store.page_size();
    let data: Vec<u8> = (0..ps).map(|i| (i as u8) ^ flags).collect();
    let mut t = store.begin();
    for (id, _) in t.files() {
        let mut buf = vec![0u8; ps];
        let _ = t.read_page(id, 0, &mut buf);
        let _ = t.write_page(id, 0, &data);
        if flags & 8 != 0 {
            let _ = t.write_page(id, 2, &buf);
        }
        if flags & 16 != 0 {
            let size = t.file_size(id).unwrap_or(0);
            let _ = t.set_file_size(id, size / 2);
        }
    }
    if let Ok(f) = t.create_file("fuzz") {
        let _ = t.write_page(f, 1, &data);
    }
    outcome.committed = t.commit().is_ok();
    // A second transaction: a small change (an overlay) and a deletion.
    let mut t = store.begin();
    let files = t.files();
    if let Some((id, _)) = files.first() {
        let mut small = data.clone();
        small[7] ^= 0xff;
        let _ = t.write_page(*id, 0, &small);
    }
    if flags & 32 != 0 {
        if let Some((id, _)) = files.last() {
            let _ = t.delete_file(*id);
        }
    }
    let _ = t.commit();
    let _ = store.checkpoint();
    read_everything(&store);
    let _ = store.close();

    match Store::open_with_io(Box::new(SimDisk::from_image(disk.image())), &opts) {
        Ok(again) => {
            outcome.reopened = true;
            read_everything(&again);
        }
        Err(e) => {
            outcome.reopen_error = Some(kind(&e));
            REOPEN_ERROR.with(|m| *m.borrow_mut() = e.to_string());
        }
    }
    outcome
}

/// One fuzz input, end to end.
pub fn run(data: &[u8]) -> Outcome {
    let flags = data.get(1).copied().unwrap_or(0);
    let image = build_image(data);
    if skip_known_defects() && largest_claimed_file(&image) > SCREEN_PAGES {
        return Outcome {
            skipped: true,
            ..Outcome::default()
        };
    }
    let outcome = exercise(image, flags);
    // Strict mode (`ONESYNC_FUZZ_STRICT=1`): a store that opened an image and acknowledged
    // commits must open what it wrote.
    if strict() && outcome.committed {
        if let Some(e) = outcome.reopen_error {
            let msg = REOPEN_ERROR.with(|m| m.borrow().clone());
            panic!("the store took commits, then would not reopen ({e}): {msg}");
        }
    }
    outcome
}

thread_local! {
    /// The message of the last reopen error (for strict mode's panic).
    static REOPEN_ERROR: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

fn strict() -> bool {
    static STRICT: OnceLock<bool> = OnceLock::new();
    *STRICT.get_or_init(|| std::env::var("ONESYNC_FUZZ_STRICT").is_ok_and(|v| v == "1"))
}
