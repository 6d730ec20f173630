//! The device through FUSE alone (no loop device, no filesystem): requests, counters, an
//! armed cut at the n-th flush, and the image after power comes back. Needs root and
//! /dev/fuse; says why and does nothing otherwise.

use std::os::unix::fs::FileExt;

use onesync_device::{DeviceModel, EmulatedDevice};

/// A free 1 MiB device and its image opened read-write, or `None` (saying why) where FUSE
/// cannot run.
fn device(test: &str) -> Option<(EmulatedDevice, std::fs::File)> {
    if let Some(reason) = onesync_device::unavailable_reason() {
        println!("note: skipping {test}: {reason}");
        return None;
    }
    let device = EmulatedDevice::start(DeviceModel::FREE, 1 << 20, 7).unwrap();
    let file = std::fs::File::options()
        .read(true)
        .write(true)
        .open(device.image_path())
        .unwrap();
    Some((device, file))
}

#[test]
fn counts_requests_and_serves_what_was_written() {
    let Some((device, file)) = device("counts_requests_and_serves_what_was_written") else {
        return;
    };
    file.write_all_at(&[1; 4096], 0).unwrap();
    file.write_all_at(&[2; 1000], 10_000).unwrap();
    assert_eq!(device.cached_bytes(), 5096);
    file.sync_data().unwrap();
    assert_eq!(device.cached_bytes(), 0);
    let mut back = vec![0u8; 1000];
    file.read_exact_at(&mut back, 10_000).unwrap();
    assert_eq!(back, vec![2; 1000]);
    let counters = device.counters();
    assert_eq!(counters.write_requests, 2);
    assert_eq!(counters.bytes_written, 5096);
    assert_eq!(counters.flushes, 1);
    // Past the end of the device: no space, nothing written.
    assert!(file.write_all_at(&[3; 512], 1 << 20).is_err());
    assert_eq!(device.counters().write_requests, 2);
}

#[test]
fn an_armed_cut_happens_at_that_flush_and_fails_everything_after() {
    let Some((device, file)) = device("an_armed_cut_happens_at_that_flush_and_fails_everything_after") else {
        return;
    };
    file.write_all_at(&[1; 4096], 0).unwrap();
    device.cut_at_flush(2);
    file.sync_data().unwrap(); // flush 1 of 2: happens
    file.write_all_at(&[2; 4096], 0).unwrap();
    assert!(device.is_powered());
    assert!(file.sync_data().is_err(), "the power goes as flush 2 arrives");
    assert!(!device.is_powered());
    let outcome = device.last_cut().unwrap();
    assert_eq!(outcome.cached, 1);
    assert!(
        file.write_all_at(&[3; 4096], 0).is_err(),
        "a dead device takes no writes"
    );
    let mut back = vec![0u8; 4096];
    assert!(file.read_exact_at(&mut back, 0).is_err(), "nor reads");
    device.power_on();
    file.read_exact_at(&mut back, 0).unwrap();
    // Flushed: 1s. The cut write was lost, kept or torn (sector by sector).
    for sector in back.chunks(512) {
        assert!(
            sector.iter().all(|&b| b == 1) || sector.iter().all(|&b| b == 2),
            "{sector:?}"
        );
    }
    if outcome.lost == 1 {
        assert_eq!(back, vec![1; 4096]);
    }
    if outcome.kept == 1 {
        assert_eq!(back, vec![2; 4096]);
    }
    assert_eq!(
        device.counters().flushes,
        1,
        "the cut flush is not counted as done"
    );
}
