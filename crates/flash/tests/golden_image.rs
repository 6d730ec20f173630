//! Pins the bytes the drive and the host filesystem write: a fixed sequence of filesystem
//! operations in every mount mode must leave exactly the same drive image (every logical
//! page: superblock, bitmaps, directory, inodes, journal blocks, data), cost exactly the same
//! NAND operations (so the drive's metadata pages keep their size and number), and mount and
//! replay the same way. Written before the encoders moved onto `onesync_codec`, so any byte
//! the move changed shows here.

mod small_fs;

use onesync_flash::hostfs::{FlashFs, Journaling};
use onesync_flash::Ssd;
use small_fs::{config, small_drive};

/// (CRC-32C of the image, pages that are not all zeros).
type Fingerprint = (u32, usize);
/// (mode, image after the workload, image after cut + mount, NAND programs, replayed).
type Outcome = (Journaling, Fingerprint, Fingerprint, u64, u64);

/// CRC-32C over every logical page in order, and how many pages are not all zeros.
fn image_fingerprint(ssd: &mut Ssd) -> Fingerprint {
    let mut page = vec![0u8; ssd.page_size()];
    let mut crc = 0u32;
    let mut nonzero = 0;
    for lpn in 0..ssd.logical_pages() {
        ssd.read(lpn, &mut page).expect("read");
        crc = crc32c::crc32c_append(crc, &page);
        if page.iter().any(|&b| b != 0) {
            nonzero += 1;
        }
    }
    (crc, nonzero)
}

/// A workload touching every structure: creates, writes that grow and overwrite, fsync and
/// fdatasync, a truncation, an unlink, and unsynced writes left for the cut.
fn workload(fs: &mut FlashFs) {
    let a = fs.open("alpha.db", true).unwrap();
    let b = fs.open("beta-journal", true).unwrap();
    let data: Vec<u8> = (0..70_000u32).map(|i| (i * 7 % 251) as u8).collect();
    fs.write(a, 0, &data).unwrap();
    fs.fdatasync(a).unwrap();
    fs.write(b, 0, &data[..20_000]).unwrap();
    fs.fsync(b).unwrap();
    fs.write(a, 9_000, b"overwritten in place").unwrap();
    fs.fsync(a).unwrap();
    fs.truncate(a, 30_001).unwrap();
    fs.fdatasync(a).unwrap();
    fs.unlink("beta-journal").unwrap();
    fs.sync_directory().unwrap();
    let c = fs.open("gamma", true).unwrap();
    fs.write(c, 100, &data[..12_345]).unwrap();
    fs.fsync(c).unwrap();
    fs.write(a, 40_000, b"grown but never synced").unwrap();
}

#[test]
fn the_drive_image_is_byte_for_byte_what_it_was() {
    let expected: [Outcome; 3] = [
        (Journaling::Ordered, (3492690955, 55), (3492690955, 55), 81, 0),
        (Journaling::Data, (947264453, 64), (2992841788, 66), 98, 2),
        (Journaling::XFtl, (1340470088, 21), (1340470088, 21), 55, 0),
    ];
    let mut got = Vec::new();
    for (mode, ..) in expected {
        let mut fs = FlashFs::format(small_drive(), config(mode)).unwrap();
        workload(&mut fs);
        let mut ssd = fs.into_ssd();
        let before = image_fingerprint(&mut ssd);
        ssd.power_cut_now();
        let (ssd, _) = ssd.restart().unwrap();
        let (fs, report) = FlashFs::mount(ssd, config(mode)).unwrap();
        let mut ssd = fs.into_ssd();
        let after = image_fingerprint(&mut ssd);
        got.push((
            mode,
            before,
            after,
            ssd.counters().nand_programs,
            report.journal_transactions_replayed,
        ));
    }
    assert_eq!(got, expected);
}
