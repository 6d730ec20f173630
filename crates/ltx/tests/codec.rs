//! LTX files through the workspace's codec: round trips of real databases' snapshots and
//! transactions, every single-byte flip and every truncation of a file refused with an
//! error (or, inside a compressed block, decoded to the very same pages), and the codec
//! crate's fuzz harness over mutated files, with their checksums recomputed so the damage
//! reaches the field checks.

mod common;

use onesync_codec::fuzz::{check_decoder, check_decoder_resealed};
use onesync_codec::OnDisk;
use onesync_ltx::format::{HEADER_FLAG_NO_CHECKSUM, HEADER_SIZE};
use onesync_ltx::{database_checksum, lock_pgno, page_checksum, Header, LtxFile, Page, CHECKSUM_FLAG};

/// A real database's bytes (a few rows; `page_size` bytes a page).
fn database(rows: usize, page_size: u32) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("src.db");
    drop(common::build_db(&path, rows, page_size));
    std::fs::read(path).unwrap()
}

/// A level-0 file changing pages 2 and the last of `db` (and growing it by one page).
fn transaction(db: &[u8], page_size: u32) -> LtxFile {
    let ps = page_size as usize;
    let n = (db.len() / ps) as u32;
    let mut after = db.to_vec();
    after[ps + 7] ^= 0x5a;
    after.extend(std::iter::repeat_n(0xab, ps));
    let pages = [2, n, n + 1]
        .into_iter()
        .map(|pgno| Page {
            pgno,
            data: after[(pgno as usize - 1) * ps..pgno as usize * ps].to_vec(),
        })
        .collect();
    let header = Header {
        page_size,
        commit: n + 1,
        min_txid: 2,
        max_txid: 2,
        timestamp: 1_700_000_000_123,
        pre_apply_checksum: database_checksum(db, page_size),
        ..Header::default()
    };
    LtxFile::new(header, pages, database_checksum(&after, page_size)).unwrap()
}

#[test]
fn snapshots_and_transactions_round_trip() {
    for page_size in [512, 4096, 65536] {
        let db = database(300, page_size);
        let snap = LtxFile::snapshot(&db, page_size, 1, 1_700_000_000_000).unwrap();
        let bytes = snap.encode_bytes();
        assert_eq!(&bytes[..4], b"LTX1");
        assert_eq!(LtxFile::decode_bytes(&bytes).unwrap(), snap);
        assert_eq!(snap.post_apply_checksum, database_checksum(&db, page_size));
        assert_eq!(snap.pages.len() * page_size as usize, db.len());

        let tx = transaction(&db, page_size);
        let bytes = tx.encode_bytes();
        assert_eq!(LtxFile::decode_bytes(&bytes).unwrap(), tx);
        assert_eq!(bytes, LtxFile::decode_bytes(&bytes).unwrap().encode_bytes());
    }
}

#[test]
fn files_without_checksums_and_empty_databases_round_trip() {
    let db = database(10, 4096);
    let mut tx = transaction(&db, 4096);
    tx.header.flags = HEADER_FLAG_NO_CHECKSUM;
    tx.header.pre_apply_checksum = 0;
    tx.post_apply_checksum = 0;
    let tx = LtxFile::new(tx.header, tx.pages, 0).unwrap();
    assert_eq!(LtxFile::decode_bytes(&tx.encode_bytes()).unwrap(), tx);

    let header = Header {
        page_size: 4096,
        commit: 0,
        min_txid: 3,
        max_txid: 3,
        pre_apply_checksum: CHECKSUM_FLAG | 5,
        ..Header::default()
    };
    let empty = LtxFile::new(header, vec![], CHECKSUM_FLAG).unwrap();
    assert_eq!(LtxFile::decode_bytes(&empty.encode_bytes()).unwrap(), empty);
}

#[test]
fn the_encoder_refuses_what_superfly_ltx_refuses() {
    let db = database(10, 4096);
    let good = transaction(&db, 4096);
    let refuse = |f: &dyn Fn(&mut LtxFile), why: &str| {
        let mut bad = good.clone();
        f(&mut bad);
        let err = LtxFile::new(bad.header, bad.pages, bad.post_apply_checksum).unwrap_err();
        assert!(err.to_string().contains(why), "{err} (expected {why})");
    };
    refuse(&|f| f.pages.swap(0, 1), "out-of-order page numbers");
    refuse(&|f| f.header.commit = 2, "out-of-bounds for commit size");
    refuse(&|f| f.header.page_size = 1000, "invalid page size");
    refuse(
        &|f| f.header.pre_apply_checksum = 0,
        "pre-apply checksum required",
    );
    refuse(
        &|f| f.header.pre_apply_checksum = 5,
        "invalid pre-apply checksum format",
    );
    refuse(
        &|f| f.post_apply_checksum = 5,
        "invalid post-apply checksum format",
    );
    refuse(&|f| f.header.min_txid = 3, "transaction ids out of order");
    refuse(&|f| f.header.flags = 1, "invalid flags");
    refuse(
        &|f| f.pages[0].data.pop().map(drop).unwrap_or(()),
        "invalid page buffer size",
    );
    refuse(
        &|f| {
            f.header.page_size = 65536;
            f.header.commit = lock_pgno(65536) + 1;
            f.pages = vec![Page {
                pgno: lock_pgno(65536),
                data: vec![0; 65536],
            }];
        },
        "cannot encode lock page",
    );
    let snap = LtxFile::snapshot(&db, 4096, 1, 0).unwrap();
    let mut gap = snap.pages.clone();
    gap.remove(1);
    let err = LtxFile::new(snap.header, gap, snap.post_apply_checksum).unwrap_err();
    assert!(
        err.to_string().contains("nonsequential page numbers in snapshot"),
        "{err}"
    );
    let err = LtxFile::new(snap.header, snap.pages.clone(), snap.post_apply_checksum ^ 1).unwrap_err();
    assert!(err.to_string().contains("snapshot post-apply checksum"), "{err}");
}

/// Where each frame's compressed block lies in an encoded file.
fn block_ranges(bytes: &[u8]) -> Vec<std::ops::Range<usize>> {
    let mut at = HEADER_SIZE;
    let mut out = Vec::new();
    loop {
        let pgno = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
        if pgno == 0 {
            return out;
        }
        let n = u32::from_be_bytes(bytes[at + 6..at + 10].try_into().unwrap()) as usize;
        out.push(at + 10..at + 10 + n);
        at += 10 + n;
    }
}

#[test]
fn every_flipped_byte_and_every_truncation_is_refused() {
    let db = database(20, 512);
    for file in [
        LtxFile::snapshot(&db, 512, 1, 1_700_000_000_000).unwrap(),
        transaction(&db, 512),
    ] {
        let bytes = file.encode_bytes();
        let blocks = block_ranges(&bytes);
        let (mut refused, mut same) = (0, 0);
        for at in 0..bytes.len() {
            for mask in [0x01u8, 0x80, 0xff] {
                let mut bad = bytes.clone();
                bad[at] ^= mask;
                match LtxFile::decode_bytes(&bad) {
                    Err(e) => {
                        refused += 1;
                        assert!(e.offset <= bad.len(), "{e}");
                        assert!(!e.to_string().is_empty());
                    }
                    // The file checksum covers the pages uncompressed: a flip inside a
                    // block that still decompresses to the same page (a match's offset
                    // moved within a run of equal bytes) changes no data.
                    Ok(v) => {
                        assert_eq!(v, file, "byte {at} ^ {mask:#x} decoded to different contents");
                        assert!(
                            blocks.iter().any(|r| r.contains(&at)),
                            "byte {at} ^ {mask:#x} accepted outside a block"
                        );
                        same += 1;
                    }
                }
            }
        }
        for len in 0..bytes.len() {
            assert!(
                LtxFile::decode_bytes(&bytes[..len]).is_err(),
                "truncated to {len} accepted"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(LtxFile::decode_bytes(&longer).is_err());
        println!(
            "{} bytes (min TXID {}): {refused} of {} flips refused, {same} inside LZ4 blocks decoded to the same pages",
            bytes.len(),
            file.header.min_txid,
            bytes.len() * 3
        );
    }
}

#[test]
fn errors_name_what_is_wrong() {
    let db = database(20, 512);
    let bytes = LtxFile::snapshot(&db, 512, 1, 0).unwrap().encode_bytes();
    let err = |at: usize, mask: u8| {
        let mut bad = bytes.clone();
        bad[at] ^= mask;
        LtxFile::decode_bytes(&bad).unwrap_err().to_string()
    };
    assert!(err(0, 1).contains("bad magic at byte 0"), "{}", err(0, 1));
    assert!(err(9, 0x10).contains("invalid page size"), "{}", err(9, 0x10));
    let last = bytes.len() - 1;
    assert!(
        err(last, 1).contains("file checksum mismatch"),
        "{}",
        err(last, 1)
    );
    assert!(
        err(last - 8, 1).contains("file checksum mismatch"),
        "{}",
        err(last - 8, 1)
    );
    assert!(
        err(HEADER_SIZE + 20, 0x40).starts_with("ltx file: "),
        "{}",
        err(HEADER_SIZE + 20, 0x40)
    );
}

/// Recomputes an encoded file's checksums where its structure still parses: the snapshot's
/// post-apply checksum and the file checksum, so mutations reach the checks behind them.
fn reseal(bytes: &mut [u8]) {
    let Some(page_size) = bytes
        .get(8..12)
        .map(|b| u32::from_be_bytes(b.try_into().unwrap()))
    else {
        return;
    };
    if !(512..=65536).contains(&page_size) || !page_size.is_power_of_two() {
        return;
    }
    let crc = crc::Crc::<u64>::new(&crc::CRC_64_GO_ISO);
    let mut d = crc.digest();
    d.update(&bytes[..HEADER_SIZE.min(bytes.len())]);
    let mut at = HEADER_SIZE;
    let mut db_sum = CHECKSUM_FLAG;
    loop {
        let Some(frame) = bytes.get(at..at + 6) else {
            return;
        };
        d.update(frame);
        let pgno = u32::from_be_bytes(frame[..4].try_into().unwrap());
        if frame == [0; 6] {
            at += 6;
            break;
        }
        let Some(size) = bytes.get(at + 6..at + 10) else {
            return;
        };
        d.update(size);
        let n = u32::from_be_bytes(size.try_into().unwrap()) as usize;
        let Some(block) = bytes.get(at + 10..at + 10 + n) else {
            return;
        };
        let mut page = vec![0u8; page_size as usize];
        if onesync_ltx::lz4::decompress_exact(block, &mut page).is_none() {
            return;
        }
        d.update(&page);
        db_sum = CHECKSUM_FLAG | (db_sum ^ page_checksum(pgno, &page));
        at += 10 + n;
    }
    if bytes.len() < at + 24 {
        return;
    }
    let trailer = bytes.len() - 16;
    if bytes[16..24] == 1u64.to_be_bytes() {
        bytes[trailer..trailer + 8].copy_from_slice(&db_sum.to_be_bytes());
    }
    d.update(&bytes[at..bytes.len() - 8]);
    let sum = CHECKSUM_FLAG | d.finalize();
    let end = bytes.len();
    bytes[end - 8..].copy_from_slice(&sum.to_be_bytes());
}

#[test]
fn the_decoder_survives_the_codec_fuzz_harness() {
    let db = database(6, 512);
    let seeds = vec![
        LtxFile::snapshot(&db, 512, 1, 7).unwrap().encode_bytes(),
        transaction(&db, 512).encode_bytes(),
    ];
    for s in &seeds {
        let mut again = s.clone();
        reseal(&mut again);
        assert_eq!(&again, s, "reseal leaves a sound file as it is");
    }
    let plain = check_decoder::<LtxFile>(&(), &seeds, 3_000);
    let resealed = check_decoder_resealed::<LtxFile>(&(), &seeds, 6_000, |b: &mut Vec<u8>| reseal(b));
    println!("fuzz harness: plain {plain:?}, resealed {resealed:?}");
    assert!(
        resealed.decoded > seeds.len(),
        "resealing lets some mutations decode: {resealed:?}"
    );
    assert!(resealed.rejected > 0);
    let _ = LtxFile::from_bytes(&(), &seeds[0]).unwrap();
}
