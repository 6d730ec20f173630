//! The `open_recover` fuzz harness on stable Rust: thousands of random and mutated store
//! images, seeded, in a few seconds, so CI covers it without nightly or cargo-fuzz.
//!
//! Each test keeps the input it is running in `target/fuzz_open-<test>.bin` (removed when
//! the test passes), so a panic or an abort leaves its reproducer behind; the cargo-fuzz
//! target runs it as is: `cargo +nightly fuzz run open_recover target/fuzz_open-<test>.bin`
//! (from the workspace root).
//!
//! `ONESYNC_FUZZ_CASES` scales every loop (default 1: about 3,500 images in a few seconds).

#[path = "support/open_recover.rs"]
mod harness;

use harness::{MODES, PATCH, PATCH_FIXED, RAW, RESIZE};
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

fn scale() -> u64 {
    std::env::var("ONESYNC_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

/// Where the input under test is kept while it runs: a panic is caught and reported, but an
/// abort (a failed allocation) kills the process, and then this file is the reproducer.
fn input_path(test: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../../target/fuzz_open-{test}.bin"))
}

/// Runs inputs for one test, keeping the current one on disk, and tallies what they did.
struct Runner {
    path: PathBuf,
    name: String,
    tally: std::cell::RefCell<Tally>,
}

#[derive(Debug, Default)]
struct Tally {
    cases: u64,
    skipped: u64,
    opened: u64,
    replayed: u64,
    committed: u64,
    reopened: u64,
    errors: std::collections::BTreeMap<&'static str, u64>,
    /// Inputs that opened, took commits, and then did not reopen (with the error).
    lost_after_commit: Vec<(&'static str, Vec<u8>)>,
}

impl Runner {
    fn new(test: &str) -> Runner {
        let path = input_path(test);
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        Runner {
            path,
            name: test.to_string(),
            tally: Default::default(),
        }
    }

    /// Print the tally, and check that enough cases got past the checksums to matter.
    fn finish(self, min_opened_percent: u64) {
        let t = self.tally.borrow();
        eprintln!(
            "{}: {} cases, {} skipped (screen), {} opened ({} replayed records, {} committed, {} reopened), open errors {:?}",
            self.name, t.cases, t.skipped, t.opened, t.replayed, t.committed, t.reopened, t.errors
        );
        for (error, input) in t.lost_after_commit.iter().take(3) {
            eprintln!("  took commits, then would not reopen ({error}): input {input:02x?}");
        }
        assert!(
            t.lost_after_commit.is_empty(),
            "{}: a store that accepted an image and took commits would not reopen",
            self.name
        );
        assert!(
            t.opened * 100 >= t.cases * min_opened_percent,
            "{}: only {} of {} images opened; the harness no longer reaches recovery",
            self.name,
            t.opened,
            t.cases
        );
    }

    /// Run one input; on a panic, fail with where it came from.
    fn case(&self, input: &[u8], what: &str) {
        let _ = std::fs::write(&self.path, input);
        let Ok(outcome) = catch_unwind(AssertUnwindSafe(|| harness::run(input))) else {
            panic!(
                "{what}: the harness panicked; input ({} bytes) kept in {}",
                input.len(),
                self.path.display()
            );
        };
        let mut t = self.tally.borrow_mut();
        t.cases += 1;
        t.skipped += outcome.skipped as u64;
        match outcome.open_error {
            Some(kind) => *t.errors.entry(kind).or_insert(0) += 1,
            None if !outcome.skipped => t.opened += 1,
            None => {}
        }
        t.replayed += (outcome.replayed > 0) as u64;
        t.committed += outcome.committed as u64;
        t.reopened += outcome.reopened as u64;
        if let (true, Some(e)) = (outcome.committed, outcome.reopen_error) {
            t.lost_after_commit.push((e, input.to_vec()));
        }
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Patch commands for `PATCH`-style modes: `[region, off x3, kind|len, bytes...]`.
fn patch_cmds(rng: &mut StdRng, count: usize) -> Vec<u8> {
    let mut cmds = Vec::new();
    for _ in 0..count {
        cmds.push(rng.random());
        cmds.extend_from_slice(&rng.random::<[u8; 3]>());
        let len = rng.random_range(0..8u8);
        let xor = if rng.random_bool(0.5) { 0x80 } else { 0 };
        cmds.push(xor | len);
        for _ in 0..len.max(1) {
            // Small values, all-ones and zeros find more edges than uniform bytes.
            let b = match rng.random_range(0..4) {
                0 => 0xff,
                1 => 0,
                2 => rng.random_range(0..4),
                _ => rng.random(),
            };
            cmds.push(b);
        }
    }
    cmds
}

/// An input in `mode`, with option flags at `input[1]`.
fn random_input(rng: &mut StdRng, mode: u8) -> Vec<u8> {
    let mut input = vec![mode];
    match mode {
        RAW => {
            let len = match rng.random_range(0..4) {
                0 => rng.random_range(0..256),
                1 => rng.random_range(0..9000),
                _ => rng.random_range(8192..24_000),
            };
            let mut image = vec![0u8; len];
            rng.fill_bytes(&mut image);
            if rng.random_bool(0.5) {
                // Start from the real magic, and sometimes most of a real header.
                let base = harness::base_image();
                let keep = rng
                    .random_range(16..=image.len().clamp(16, 4096 + 128))
                    .min(image.len());
                image[..keep].copy_from_slice(&base[..keep]);
            }
            input.extend_from_slice(&image);
        }
        RESIZE => {
            let len = rng.random_range(0..2 * harness::base_image().len() as u32);
            input.push(rng.random()); // flags
            input.extend_from_slice(&len.to_le_bytes()[..3]);
            input.push(rng.random()); // bit 0: fix checksums
            let n = rng.random_range(0..4);
            input.extend(patch_cmds(rng, n));
        }
        _ => {
            // input[1] is both the flags and the first patch's region.
            let n = rng.random_range(1..6);
            input.extend(patch_cmds(rng, n));
        }
    }
    input
}

#[test]
fn the_base_image_is_a_healthy_reproducible_store() {
    // The first call builds and checks it (three files, replay of two records).
    let image = harness::base_image().to_vec();
    // A second construction in this process gives the same bytes: crashes found with the
    // fuzzer reproduce from their input alone.
    assert!(
        harness::rebuild_for_test() == image,
        "the base image is not deterministic"
    );
    // Re-sealing an intact image changes nothing.
    let mut resealed = image.clone();
    harness::fix_checksums(&mut resealed, None);
    assert!(resealed == image, "fix_checksums changed a healthy image");
    let runner = Runner::new("base");
    runner.case(&[PATCH], "the base image, unpatched");
    let t = runner.tally.borrow();
    assert_eq!((t.opened, t.committed, t.reopened), (1, 1, 1), "{t:?}");
}

#[test]
fn random_images_never_panic() {
    let runner = Runner::new("raw");
    let mut rng = StdRng::seed_from_u64(0x09e1);
    for case in 0..1500 * scale() {
        let input = random_input(&mut rng, RAW);
        runner.case(&input, &format!("raw case {case}"));
    }
    runner.finish(0);
}

#[test]
fn patched_images_never_panic() {
    let runner = Runner::new("patch");
    let mut rng = StdRng::seed_from_u64(0xface);
    for case in 0..400 * scale() {
        let input = random_input(&mut rng, PATCH);
        runner.case(&input, &format!("patch case {case}"));
    }
    runner.finish(20);
}

#[test]
fn resealed_patched_images_never_panic() {
    let runner = Runner::new("resealed");
    let mut rng = StdRng::seed_from_u64(0x5ea1);
    for case in 0..600 * scale() {
        let input = random_input(&mut rng, PATCH_FIXED);
        runner.case(&input, &format!("resealed patch case {case}"));
    }
    runner.finish(20);
}

#[test]
fn resized_images_never_panic() {
    let runner = Runner::new("resize");
    let mut rng = StdRng::seed_from_u64(0x512e);
    for case in 0..200 * scale() {
        let input = random_input(&mut rng, RESIZE);
        runner.case(&input, &format!("resize case {case}"));
    }
    runner.finish(5);
}

/// Every bit of the base image's metadata (both header copies, both checkpoints, the log's
/// live records) flipped in turn, raw and resealed.
#[test]
fn every_metadata_bit_flipped_never_panics() {
    let runner = Runner::new("bitflip");
    let base = harness::base_image();
    let (step, bits): (usize, &[u8]) = if scale() > 1 {
        (1, &[0, 3, 7])
    } else {
        (9, &[0, 7])
    };
    for (region, span) in [(0u8, 128u32), (1, 128), (2, 200), (3, 200), (4, 1024)] {
        for offset in (0..span).step_by(step) {
            for &bit in bits {
                for mode in [PATCH, PATCH_FIXED] {
                    let o = offset.to_le_bytes();
                    let input = [mode, region, o[0], o[1], o[2], 0x80, 1 << bit];
                    runner.case(
                        &input,
                        &format!("region {region} offset {offset} bit {bit} mode {mode}"),
                    );
                }
            }
        }
    }
    assert!(!base.is_empty());
    runner.finish(20);
}

/// Writes a seed corpus for the cargo-fuzz target: the base image raw, truncated and
/// resealed, plus a sample of each mode. Run from the workspace root:
/// `ONESYNC_FUZZ_CORPUS=fuzz/corpus/open_recover cargo test -p onesync-store --test fuzz_open -- --ignored seed_corpus`
#[test]
#[ignore = "writes files; run by hand to (re)make the fuzz seed corpus"]
fn seed_corpus() {
    let dir = PathBuf::from(
        std::env::var("ONESYNC_FUZZ_CORPUS").unwrap_or_else(|_| "fuzz/corpus/open_recover".into()),
    );
    let dir = if dir.is_absolute() {
        dir
    } else {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").join(dir)
    };
    std::fs::create_dir_all(&dir).unwrap();
    let base = harness::base_image();
    let mut seeds: Vec<(String, Vec<u8>)> = vec![
        // Raw images stop at 16 KiB (the fuzzer runs with -max_len=16384): the modes that
        // patch the built-in base image cover whole stores.
        ("raw-base-head".into(), [&[RAW][..], &base[..16 << 10]].concat()),
        ("raw-headers".into(), [&[RAW][..], &base[..8192]].concat()),
        ("raw-empty".into(), vec![RAW]),
        ("patch-none".into(), vec![PATCH]),
        ("fixed-none".into(), vec![PATCH_FIXED]),
        ("resize-half".into(), vec![RESIZE, 0, 0x00, 0x30, 0x00, 0]),
    ];
    let mut rng = StdRng::seed_from_u64(7);
    for mode in 0..MODES {
        for n in 0..8 {
            seeds.push((format!("mode{mode}-{n}"), random_input(&mut rng, mode)));
        }
    }
    for (name, data) in &seeds {
        std::fs::write(dir.join(name), data).unwrap();
    }
    eprintln!("wrote {} seeds to {}", seeds.len(), dir.display());
}

/// Found by the tallies of `resealed_patched_images_never_panic`: a stale (off-chain) commit
/// record whose epoch is far in the future, checksums valid. The store opens (the chain does
/// not reach it), takes a commit and a checkpoint, and a second commit; the chain's head then
/// points at that slot. On the next open, recovery finds a valid record of a newer epoch at
/// the head, takes it for proof that a newer checkpoint's header was lost, and refuses
/// (Corrupt, "refusing to roll back"): commits that were acknowledged can no longer be
/// opened. Natural epochs only grow, so this takes a forged record; but a store that accepts
/// an image and acknowledges commits should be able to open what it wrote. Expected: the
/// store opens after every acknowledged commit (or refuses the image at the first open).
#[test]
fn a_stale_record_at_the_head_does_not_brick_the_store() {
    use onesync_store::sim::SimDisk;
    use onesync_store::Store;
    // PATCH_FIXED, xor 0x01 into byte 37 (epoch, byte 5) of the base image's second
    // record-shaped slot, reseal. The reproducer is tied to the base image: check that it
    // still hits an off-chain record.
    let input = [PATCH_FIXED, 4, 37, 2, 0, 0x80, 1];
    let image = harness::build_image(&input);
    let opts = harness::base_options();
    let disk = SimDisk::from_image(image);
    let Ok(store) = Store::open_with_io(disk.io(), &opts) else {
        panic!("reproducer out of date: the image no longer opens (the base image changed)");
    };
    let f = store.snapshot().files()[0].0;
    for (n, checkpoint) in [(0u64, true), (1, false), (2, false), (3, false)] {
        let mut t = store.begin();
        t.write_page(f, n, &[n as u8 + 7; 512]).unwrap();
        let seq = t.commit().unwrap();
        if checkpoint {
            store.checkpoint().unwrap();
        }
        let reopened = Store::open_with_io(Box::new(SimDisk::from_image(disk.image())), &opts);
        assert!(
            reopened.is_ok(),
            "after acknowledged commit {seq}: {:?}",
            reopened.err()
        );
    }
}
