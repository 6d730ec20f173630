//! Files that are not trees, or damaged ones: clear errors, no panic, the file untouched.
mod common;

use common::*;
use onesync_mvbt::{Config, Error, Tree};
use onesync_store::sim::SimDisk;

fn expect_corrupt(bytes: Vec<u8>, what: &str) -> String {
    let disk = SimDisk::from_image(bytes.clone());
    let err = match Tree::open_on(sim_io(&disk), Config::ls_mvbt()) {
        Err(e) => e,
        Ok(_) => panic!("{what}: opened"),
    };
    assert_eq!(disk.image(), bytes, "{what}: the file was changed");
    match err {
        Error::Corrupt(m) => m,
        other => panic!("{what}: {other:?}"),
    }
}

fn a_tree() -> (SimDisk, Config) {
    let disk = SimDisk::new();
    let config = Config {
        node_size: 1024,
        ..Config::ls_mvbt()
    };
    let mut t = Tree::create_on(sim_io(&disk), config.clone()).unwrap();
    for round in 0..20 {
        t.begin().unwrap();
        for k in 0..50 {
            t.put(round * 50 + k, &[7u8; 40]).unwrap();
        }
        t.commit().unwrap();
    }
    (disk, config)
}

#[test]
fn foreign_empty_and_truncated_files() {
    let m = expect_corrupt(Vec::new(), "empty");
    assert!(m.contains("is not an mvbt file"), "{m}");
    let m = expect_corrupt(
        b"SQLite format 3\0".iter().copied().cycle().take(8192).collect(),
        "sqlite",
    );
    assert!(m.contains("is not an mvbt file"), "{m}");
    let m = expect_corrupt(vec![0u8; 100_000], "zeros");
    assert!(m.contains("is not an mvbt file"), "{m}");
    let (disk, _) = a_tree();
    let image = disk.durable_image();
    let m = expect_corrupt(image[..300].to_vec(), "truncated in the header");
    assert!(m.contains("mvbt"), "{m}");
    let m = expect_corrupt(image[..6 * 1024].to_vec(), "truncated in the tree");
    assert!(m.contains("damaged"), "{m}");
}

#[test]
fn both_slots_of_a_node_damaged() {
    let (disk, config) = a_tree();
    let image = disk.durable_image();
    // Node 1 (the first root leaf) is reachable through the root's dead entries or live ones.
    for id in 1..4u64 {
        let mut bad = image.clone();
        for slot in 0..2 {
            let at = ((id * 2 + slot) * 1024 + 100) as usize;
            bad[at] ^= 0xff;
        }
        let disk = SimDisk::from_image(bad.clone());
        match Tree::open_on(sim_io(&disk), config.clone()) {
            Err(Error::Corrupt(m)) => {
                assert!(m.contains(&format!("node {id}")), "{m}");
                assert_eq!(disk.image(), bad);
            }
            Err(e) => panic!("node {id}: {e:?}"),
            // A node no longer reachable (freed) may be damaged harmlessly.
            Ok(mut t) => t.check().unwrap(),
        }
    }
    // Both header slots.
    let mut bad = image.clone();
    bad[100] ^= 0xff;
    bad[1024 + 100] ^= 0xff;
    let m = expect_corrupt(bad, "header");
    assert!(m.contains("header"), "{m}");
}

#[test]
fn one_damaged_slot_is_survived() {
    let (disk, config) = a_tree();
    let mut image = disk.durable_image();
    for id in 0..(image.len() / 2048) {
        // Damage the newer slot of every node: recovery falls back to the older image,
        // which for nodes last written by the latest commit means reverting it.
        let at = id * 2048 + 200;
        image[at] ^= 0x55;
    }
    let disk = SimDisk::from_image(image);
    match Tree::open_on(sim_io(&disk), config) {
        Ok(mut t) => t.check().unwrap(),
        Err(Error::Corrupt(m)) => assert!(m.contains("damaged"), "{m}"),
        Err(e) => panic!("{e:?}"),
    }
}

#[test]
fn files_on_disk_lock_and_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.mvbt");
    let mut t = Tree::open_or_create(&path, Config::ls_mvbt()).unwrap();
    t.begin().unwrap();
    t.put(1, b"one").unwrap();
    t.commit().unwrap();
    // flock locks belong to the open file description, so a second open in this process
    // is refused like another process would be.
    assert!(matches!(
        Tree::open(&path, Config::ls_mvbt()),
        Err(Error::Busy(_))
    ));
    drop(t);
    let mut t = Tree::open(&path, Config::ls_mvbt()).unwrap();
    assert_eq!(t.get(1).unwrap(), Some(b"one".to_vec()));
    drop(t);
    assert!(matches!(
        Tree::create(&path, Config::ls_mvbt()),
        Err(Error::Misuse(_))
    ));
    let foreign = dir.path().join("foreign");
    std::fs::write(&foreign, b"hello, not a tree").unwrap();
    match Tree::open(&foreign, Config::ls_mvbt()) {
        Err(Error::Corrupt(m)) => assert!(m.contains("is not an mvbt file"), "{m}"),
        other => panic!("{:?}", other.err()),
    }
    assert_eq!(std::fs::read(&foreign).unwrap(), b"hello, not a tree");
}
