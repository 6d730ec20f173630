//! Reading the checkpoint a header names into a [`State`]: a version-1 checkpoint whole,
//! into a base in memory; a version-2 manifest, into a base on its runs (read on demand) and
//! the free slots it persists. Opening a version-2 store reads the header and the manifest,
//! never the mapping.

use crate::error::{Error, Result};
use crate::format::{slot_offset, Checkpoint, Header, Manifest};
use crate::free_set::FreeSet;
use crate::io::StorageIo;
use crate::state::base::SlotBlocks;
use crate::state::{Base, FileState, State};
use onesync_mapping::{Cache, Stack};
use std::sync::Arc;

/// What a base on runs reads through: the store's medium and the process's block cache.
#[derive(Clone)]
pub(crate) struct MappingIo {
    pub io: Arc<dyn StorageIo>,
    pub cache: Arc<Cache>,
}

impl MappingIo {
    /// A cache of at most `cache_bytes` of mapping blocks over `io`.
    pub fn new(io: Arc<dyn StorageIo>, cache_bytes: usize) -> MappingIo {
        MappingIo {
            io,
            cache: Arc::new(Cache::new(cache_bytes)),
        }
    }
}

/// The free slots a manifest persisted, as of the checkpoint.
#[derive(Debug, Clone)]
pub(crate) struct FreeBaseline {
    /// The file's slots when the manifest was written: every slot past it is free too.
    pub slot_total: u64,
    pub free: FreeSet,
}

/// A checkpoint read: the state at its seq, and for a manifest the free slots it names.
pub(crate) struct Loaded {
    pub state: State,
    /// `None` for a version-1 checkpoint (the free slots follow from the whole mapping).
    pub free: Option<FreeBaseline>,
}

/// The checkpoint's bytes, checked against the header's CRC.
fn read_blob(io: &dyn StorageIo, header: &Header) -> Result<Vec<u8>> {
    let page_size = header.page_size as u64;
    let ck = header.checkpoint;
    let mut blob = vec![0u8; ck.len as usize];
    let mut at = 0usize;
    for &(first, n) in ck.extents() {
        let take = (blob.len() - at).min((n * page_size) as usize);
        io.read_at(&mut blob[at..at + take], slot_offset(first, page_size))
            .map_err(|e| Error::io("reading the checkpoint", e))?;
        at += take;
    }
    if crc32c::crc32c(&blob) != ck.crc {
        return Err(Error::Corrupt(format!(
            "the checkpoint of generation {} fails its checksum",
            header.generation
        )));
    }
    Ok(blob)
}

pub(crate) fn load_checkpoint(
    io: &dyn StorageIo,
    header: &Header,
    capacity: u64,
    mapping: &MappingIo,
) -> Result<Loaded> {
    let page_size = header.page_size as u64;
    let ck = header.checkpoint;
    let needed = ck
        .extents()
        .iter()
        .map(|&(first, n)| first.saturating_add(n))
        .max()
        .unwrap_or(0);
    let needed = needed.max(header.log.window_end);
    if needed > capacity {
        return Err(Error::Truncated(format!(
            "the header names slots up to {needed} but the file holds {capacity}"
        )));
    }
    let blob = read_blob(io, header)?;
    if header.version >= 2 {
        let manifest = Manifest::decode(&blob)?;
        if manifest.seq != ck.seq {
            return Err(Error::Corrupt(
                "manifest and header disagree on the sequence number".into(),
            ));
        }
        return from_manifest(manifest, header, capacity, mapping);
    }
    let decoded = Checkpoint::decode(&blob)?;
    if decoded.seq != ck.seq {
        return Err(Error::Corrupt(
            "checkpoint and header disagree on the sequence number".into(),
        ));
    }
    let state = State::from_checkpoint(decoded, page_size)?;
    if let Some(beyond) = state.live_slots()?.into_iter().find(|s| *s >= capacity) {
        return Err(Error::Truncated(format!(
            "a page lives in slot {beyond} but the file holds {capacity} slots"
        )));
    }
    Ok(Loaded { state, free: None })
}

/// The state a manifest names: its files with nothing changed since, on a base of its runs.
fn from_manifest(manifest: Manifest, header: &Header, capacity: u64, mapping: &MappingIo) -> Result<Loaded> {
    let page_size = header.page_size as u64;
    // A run's root past the file's end: the file was cut after this manifest was written
    // (an older header copy) or lost its end.
    if let Some(run) = manifest
        .runs
        .iter()
        .find(|run| run.root.slot.saturating_add(u64::from(run.root.slots)) > capacity)
    {
        return Err(Error::Truncated(format!(
            "the mapping's block at slot {} lies past the file's {capacity} slots",
            run.root.slot
        )));
    }
    let mut files = imbl::OrdMap::new();
    for f in &manifest.files {
        let mut file = FileState::new(&f.name, manifest.seq);
        file.size = f.size;
        file.base_pages = file.page_count(page_size);
        if f.mapped > file.base_pages {
            return Err(Error::Corrupt(format!(
                "the manifest says file {} maps {} pages, but it has {}",
                f.id, f.mapped, file.base_pages
            )));
        }
        file.mapped = f.mapped;
        files.insert(f.id, file);
    }
    let base = Base::runs(
        manifest.seq,
        Stack {
            runs: manifest.runs.clone(),
        },
        SlotBlocks {
            io: mapping.io.clone(),
            page_size,
        },
        mapping.cache.clone(),
    );
    let mut free = FreeSet::from_extents(&manifest.free);
    // The file may have been cut since (`give_back_space`): what lies past it is not a slot.
    free.clip(capacity);
    Ok(Loaded {
        state: State {
            seq: manifest.seq,
            files,
            next_file_id: manifest.next_file_id,
            base: Arc::new(base),
        },
        free: Some(FreeBaseline {
            slot_total: manifest.slot_total.min(capacity),
            free,
        }),
    })
}
