//! `Snapshot::changed_since`, which replication ships from: after random writes, zeroed
//! pages, truncations and regrowth across checkpoints, the pages it names equal, for every
//! earlier commit, those whose `page_version` is newer — found from the delta alone when the
//! commit is at or after the last checkpoint, by reading the mapping otherwise.

use onesync_store::{Options, Store};

const PS: usize = 512;

/// A small deterministic generator (the test needs no crate for it).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn brute_force(snap: &onesync_store::Snapshot, file: onesync_store::FileId, since: u64) -> Vec<u64> {
    let pages = snap.file_size(file).unwrap().div_ceil(PS as u64);
    (0..pages)
        .filter(|&p| snap.page_version(file, p).unwrap().unwrap_or(0) > since)
        .collect()
}

#[test]
fn changed_since_names_exactly_the_pages_with_newer_versions() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        page_size: PS as u32,
        checkpoint_interval: 7,
        ..Options::default()
    };
    let store = Store::create(dir.path().join("s.onesync"), &opts).unwrap();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut seqs = vec![0u64];
    let (mut fast, mut scanned) = (0, 0);
    for round in 0..120u64 {
        let mut txn = store.begin();
        let file = match txn.file("db") {
            Some(f) => f,
            None => txn.create_file("db").unwrap(),
        };
        let size = txn.file_size(file).unwrap() / PS as u64;
        match rng.below(10) {
            // A truncation, sometimes to nothing.
            0 => txn.set_file_size(file, rng.below(size + 1) * PS as u64).unwrap(),
            // Growth without writing the pages between.
            1 => txn
                .set_file_size(file, (size + rng.below(4)) * PS as u64)
                .unwrap(),
            _ => {
                for _ in 0..=rng.below(5) {
                    let page = rng.below(size + 3);
                    let mut data = vec![0u8; PS];
                    if rng.below(6) != 0 {
                        data[..8].copy_from_slice(&round.to_le_bytes());
                        data[8] = rng.below(256) as u8;
                    }
                    txn.write_page(file, page, &data).unwrap();
                }
            }
        }
        seqs.push(txn.commit().unwrap());
        if round % 17 == 0 {
            store.checkpoint().unwrap();
        }
        let snap = store.snapshot();
        let Some(file) = snap.file("db") else { continue };
        for &since in &seqs {
            let changed = snap.changed_since(file, since).unwrap();
            assert_eq!(
                changed.pages,
                brute_force(&snap, file, since),
                "round {round}, since {since}"
            );
            if changed.scanned_mapping {
                scanned += 1;
            } else {
                fast += 1;
            }
        }
    }
    // Both ways were taken: the test can tell a wrong delta from a wrong scan.
    assert!(fast > 100 && scanned > 100, "fast {fast}, scanned {scanned}");
}
