//! What the bad-input tests share: a store with a known history (`Fixture`) and its model,
//! the checks that a store holds it or refuses to open, and the header and checkpoint
//! offsets the tests damage. Each test file includes it as `mod fixtures`.

use onesync_store::layout::{HEADER_BLOCK, MAGIC, SLOT_BASE};
use onesync_store::sim::SimDisk;
use onesync_store::{Error, FileId, Options, Store};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

// ---------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------

pub const PS: usize = 512;

/// A small store: 512-byte pages, 1.5 MiB of slots (the 1 MiB window the commit chain
/// writes into, then free slots).
pub fn small() -> Options {
    Options {
        page_size: PS as u32,
        initial_capacity: 1536 << 10,
        log_capacity: 64 << 10,
        growth_step: 64 << 10,
        ..Options::default()
    }
}

pub use crate::harness::pattern;

/// What the store should hold: file name -> page contents (every page up to the size).
pub type Model = BTreeMap<String, Vec<Vec<u8>>>;

/// Drives commits against a store and keeps the model of what they committed.
pub struct Fixture {
    pub model: Model,
    pub ps: usize,
    pub tag: u64,
    /// Pages last changed by an overlay (their slot holds an older base).
    pub overlaid: std::collections::BTreeSet<(String, u64)>,
}

impl Fixture {
    pub fn new(ps: usize) -> Fixture {
        Fixture {
            model: Model::new(),
            ps,
            tag: 0,
            overlaid: Default::default(),
        }
    }

    pub fn next_page(&mut self) -> Vec<u8> {
        self.tag += 1;
        pattern(self.tag, self.ps)
    }

    pub fn file_id(store: &Store, name: &str) -> Option<FileId> {
        store.snapshot().file(name)
    }

    /// One commit writing fresh content to `pages` of `name` (created if missing).
    pub fn write(&mut self, store: &Store, name: &str, pages: &[u64]) -> u64 {
        let mut t = store.begin();
        let id = match t.file(name) {
            Some(id) => id,
            None => t.create_file(name).unwrap(),
        };
        let mut staged = self.model.get(name).cloned().unwrap_or_default();
        for &p in pages {
            let data = self.next_page();
            t.write_page(id, p, &data).unwrap();
            while staged.len() <= p as usize {
                staged.push(vec![0; self.ps]);
            }
            staged[p as usize] = data;
            self.overlaid.remove(&(name.to_string(), p));
        }
        let seq = t.commit().unwrap();
        self.model.insert(name.to_string(), staged);
        seq
    }

    /// One commit changing 4 bytes of a page: small enough to ride in the record as an
    /// overlay, so it allocates no slot.
    pub fn tweak(&mut self, store: &Store, name: &str, page: u64) -> u64 {
        self.tag += 1;
        let id = Self::file_id(store, name).unwrap();
        let mut data = self.model[name][page as usize].clone();
        data[100..104].copy_from_slice(&(self.tag as u32).to_le_bytes());
        let mut t = store.begin();
        t.write_page(id, page, &data).unwrap();
        let seq = t.commit().unwrap();
        self.model.get_mut(name).unwrap()[page as usize] = data;
        self.overlaid.insert((name.to_string(), page));
        seq
    }

    pub fn resize(&mut self, store: &Store, name: &str, pages: usize) -> u64 {
        let id = Self::file_id(store, name).unwrap();
        let mut t = store.begin();
        t.set_file_size(id, (pages * self.ps) as u64).unwrap();
        let seq = t.commit().unwrap();
        self.model.get_mut(name).unwrap().resize(pages, vec![0; self.ps]);
        seq
    }

    pub fn delete(&mut self, store: &Store, name: &str) -> u64 {
        let id = Self::file_id(store, name).unwrap();
        let mut t = store.begin();
        t.delete_file(id).unwrap();
        let seq = t.commit().unwrap();
        self.model.remove(name);
        seq
    }

    /// A history touching every kind of operation: creates, page writes, an overwrite, an
    /// overlay, a shrink, a deletion.
    pub fn populate(&mut self, store: &Store) {
        self.write(store, "main", &[0, 1, 2, 3]);
        self.write(store, "aux", &[0, 1, 2]);
        self.write(store, "main", &[1]);
        self.tweak(store, "main", 0);
        self.write(store, "gone", &[0]);
        self.delete(store, "gone");
        self.resize(store, "aux", 2);
        self.write(store, "main", &[5]);
    }

    /// Every page the model holds in a slot of its own (i.e. not all zeros, not an overlay).
    pub fn whole_pages(&self) -> Vec<Vec<u8>> {
        let mut pages = Vec::new();
        for (name, file) in &self.model {
            for (n, page) in file.iter().enumerate() {
                if page.iter().any(|&b| b != 0) && !self.overlaid.contains(&(name.clone(), n as u64)) {
                    pages.push(page.clone());
                }
            }
        }
        pages
    }

    /// Another fixture continuing from this one's model with fresh page contents.
    pub fn fork(&self, tag: u64) -> Fixture {
        Fixture {
            model: self.model.clone(),
            ps: self.ps,
            tag,
            overlaid: self.overlaid.clone(),
        }
    }
}

/// Read everything the store holds, without panicking.
pub fn read_all(store: &Store) -> Result<Model, Error> {
    let snap = store.snapshot();
    let ps = store.page_size();
    let mut model = Model::new();
    for (id, name) in snap.files() {
        let size = snap.file_size(id)?;
        assert_eq!(size % ps as u64, 0, "the fixtures only make whole-page sizes");
        let mut pages = Vec::new();
        for n in 0..size / ps as u64 {
            let mut buf = vec![0u8; ps];
            snap.read_page(id, n, &mut buf)?;
            pages.push(buf);
        }
        model.insert(name, pages);
    }
    Ok(model)
}

#[track_caller]
pub fn assert_holds(store: &Store, model: &Model) {
    let got = read_all(store).expect("reading every committed page");
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        model.keys().collect::<Vec<_>>(),
        "file names"
    );
    for (name, pages) in model {
        assert_eq!(got[name].len(), pages.len(), "size of {name:?}");
        for (n, page) in pages.iter().enumerate() {
            assert!(
                got[name][n] == *page,
                "page {n} of {name:?} differs from what was committed"
            );
        }
    }
}

/// The one acceptable outcome of opening a store with damage recovery may not route around:
/// a `Corrupt` error, or every committed byte. Opening into some other state (an older
/// prefix, wrong page contents) would be silent data loss.
#[track_caller]
pub fn assert_corrupt_or_intact(opened: Result<Store, Error>, model: &Model, what: &str) {
    match opened {
        Err(Error::Corrupt(msg)) => assert!(!msg.is_empty()),
        Err(e) => panic!("{what}: expected Corrupt or an intact store, got {e:?}"),
        Ok(store) => match read_all(&store) {
            Ok(got) => assert!(
                got == *model,
                "{what}: the store opened into a different state (seq {}): committed data was silently lost",
                store.last_seq()
            ),
            // Reads that fail their checksums are not silent either.
            Err(Error::Corrupt(_)) => {}
            Err(e) => panic!("{what}: reading gave {e:?}"),
        },
    }
}

pub fn path_in(dir: &tempfile::TempDir, name: &str) -> PathBuf {
    dir.path().join(name)
}

/// A store file with the populated history. `close` checkpoints it (nothing to replay).
pub fn store_file(dir: &tempfile::TempDir, close: bool) -> (PathBuf, Fixture) {
    let path = path_in(dir, "s.onesync");
    let store = Store::create(&path, &small()).unwrap();
    let mut fx = Fixture::new(PS);
    fx.populate(&store);
    if close {
        store.close().unwrap();
    }
    (path, fx)
}

pub fn open_real(path: &Path) -> Result<Store, Error> {
    Store::open(path, &small())
}

pub fn open_image(image: Vec<u8>) -> Result<Store, Error> {
    Store::open_with_io(Box::new(SimDisk::from_image(image)), &small())
}

// Header layout (format.rs, Header::encode): little-endian fields at fixed offsets.
pub const H_VERSION: usize = 16;
pub const H_GENERATION: usize = 40;
pub const H_CK_FIRST: usize = 48;
pub const H_CK_LEN: usize = 56;
pub const H_CK_CRC: usize = 72;
pub const H_LOG_FIRST: usize = 76;
pub const H_WINDOW_END: usize = 84;
// Commit record fields (format.rs, Record::encode).
pub const RECORD_MAGIC: u32 = 0x5243_534f;
pub const R_EPOCH: usize = 32;

pub fn u64_at(image: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(image[at..at + 8].try_into().unwrap())
}

pub fn u32_at(image: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(image[at..at + 4].try_into().unwrap())
}

/// The fields of one header copy the tests need.
#[derive(Debug, Clone, Copy)]
pub struct HeaderView {
    pub offset: usize,
    pub generation: u64,
    pub ck_first: u64,
    pub ck_len: u64,
    pub ck_crc: u32,
    pub log_first: u64,
    /// End of the slots reserved for the commit chain.
    pub window_end: u64,
}

pub fn header(image: &[u8], copy: usize) -> HeaderView {
    let base = copy * HEADER_BLOCK as usize;
    assert_eq!(image[base..base + 16], MAGIC);
    HeaderView {
        offset: base,
        generation: u64_at(image, base + H_GENERATION),
        ck_first: u64_at(image, base + H_CK_FIRST),
        ck_len: u64_at(image, base + H_CK_LEN),
        ck_crc: u32_at(image, base + H_CK_CRC),
        log_first: u64_at(image, base + H_LOG_FIRST),
        window_end: u64_at(image, base + H_WINDOW_END),
    }
}

/// (newest, older) header copies by generation.
pub fn headers_by_age(image: &[u8]) -> (HeaderView, HeaderView) {
    let (a, b) = (header(image, 0), header(image, 1));
    if a.generation > b.generation {
        (a, b)
    } else {
        (b, a)
    }
}

pub fn slot_offset(slot: u64) -> usize {
    (SLOT_BASE + slot * PS as u64) as usize
}

/// Flip bits inside a header copy's checksummed fields (the generation), keeping the magic
/// and version: the copy then fails its checksum.
pub fn damage_header(image: &mut [u8], copy: usize) {
    image[copy * HEADER_BLOCK as usize + H_GENERATION] ^= 0x5a;
}

/// Image byte ranges holding the checkpoint a header copy names (in runs of slots).
pub fn checkpoint_ranges(image: &[u8], h: &HeaderView) -> Vec<std::ops::Range<usize>> {
    crate::harness::checkpoint_ranges(image, h.offset).expect("the header's checkpoint is in the image")
}

/// Image offset of byte `n` of a header copy's checkpoint.
pub fn checkpoint_byte(image: &[u8], h: &HeaderView, mut n: usize) -> usize {
    for r in checkpoint_ranges(image, h) {
        if n < r.len() {
            return r.start + n;
        }
        n -= r.len();
    }
    panic!("byte {n} is past the checkpoint");
}

pub fn damage_checkpoint(image: &mut [u8], h: &HeaderView) {
    let at = checkpoint_byte(image, h, h.ck_len as usize / 2);
    image[at] ^= 0xff;
}

pub fn checkpoint_intact(image: &[u8], h: &HeaderView) -> bool {
    let blob: Vec<u8> = checkpoint_ranges(image, h)
        .into_iter()
        .flat_map(|r| image[r].to_vec())
        .collect();
    crc32c::crc32c(&blob) == h.ck_crc
}

/// One past the last slot a header copy's checkpoint occupies.
pub fn checkpoint_end_slot(image: &[u8], h: &HeaderView) -> u64 {
    checkpoint_ranges(image, h)
        .iter()
        .map(|r| ((r.end - SLOT_BASE as usize).div_ceil(PS)) as u64)
        .max()
        .unwrap_or(0)
}

/// The end (exclusive) of the last block of the mapping's runs the header copy's manifest
/// names (0 for a version-1 checkpoint): a block is padded with zeros to its length, so
/// its last slots may be all zeros and still belong to it.
pub fn mapping_end_slot(image: &[u8], h: &HeaderView) -> u64 {
    struct Image<'a>(&'a [u8]);
    impl onesync_mapping::BlockIo for Image<'_> {
        fn slot_size(&self) -> usize {
            PS
        }
        fn read_block(&self, block: onesync_mapping::BlockRef, buf: &mut [u8]) -> std::io::Result<()> {
            let at = slot_offset(block.slot);
            let bytes = self
                .0
                .get(at..at + buf.len())
                .ok_or(std::io::ErrorKind::UnexpectedEof)?;
            buf.copy_from_slice(bytes);
            Ok(())
        }
    }
    let blob: Vec<u8> = checkpoint_ranges(image, h)
        .into_iter()
        .flat_map(|r| image[r].to_vec())
        .collect();
    let Ok(manifest) = onesync_store::layout::Manifest::decode(&blob) else {
        return 0;
    };
    let mut end = 0;
    for run in &manifest.runs {
        for block in run
            .blocks(&Image(image), None)
            .expect("the mapping's blocks read")
        {
            end = end.max(block.slot + u64::from(block.slots));
        }
    }
    end
}

/// The slot holding exactly `content`, if any.
pub fn slot_holding(image: &[u8], content: &[u8]) -> Option<u64> {
    let slots = (image.len() - SLOT_BASE as usize) / PS;
    (0..slots as u64).find(|&s| &image[slot_offset(s)..slot_offset(s) + PS] == content)
}

pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}
