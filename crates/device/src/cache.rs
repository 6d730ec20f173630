//! The device's volatile write cache, with no FUSE and no timing in it: what a write, a
//! read, a flush and a power cut do to the bytes.
//!
//! The cache keeps every write since the last flush, in order (a power cut decides each one's
//! fate), and the newest bytes of each sector (what a read returns). A flush writes the newest
//! bytes to the media and empties the cache. A power cut goes through the cached writes in a
//! random order and loses, keeps, or tears each one at the sector size (keeps a random subset
//! of its sectors): so every sector ends up holding what the media held at the last flush or
//! any version written since, which is what a cache that writes back in its own order can
//! leave behind.

use std::collections::HashMap;
use std::io;

use rand::seq::SliceRandom;
use rand::Rng;

/// The unit a device writes atomically; a torn write keeps some of its sectors and not others.
pub const SECTOR_BYTES: u64 = 512;

/// Where the cache writes back to: the durable image.
pub trait Media {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    fn write_at(&mut self, data: &[u8], offset: u64) -> io::Result<()>;
}

/// One write request as the device received it.
#[derive(Clone, Debug)]
struct CachedWrite {
    offset: u64,
    data: Vec<u8>,
}

/// What a power cut did to the cached writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CutOutcome {
    /// Write requests in the cache at the cut.
    pub cached: u64,
    pub lost: u64,
    pub kept: u64,
    /// Kept in part: some sectors reached the media, others not.
    pub torn: u64,
}

#[derive(Default)]
pub struct VolatileCache {
    writes: Vec<CachedWrite>,
    /// Sector number -> the newest bytes written to it since the last flush.
    newest: HashMap<u64, Box<[u8]>>,
    cached_bytes: u64,
}

impl VolatileCache {
    pub fn cached_bytes(&self) -> u64 {
        self.cached_bytes
    }

    pub fn cached_writes(&self) -> usize {
        self.writes.len()
    }

    /// Takes a write into the cache. Offsets and lengths that are not whole sectors are
    /// accepted (a file, not a disk, is being served) and handled sector by sector with a
    /// read-modify-write of the partial ones.
    pub fn write(&mut self, media: &dyn Media, offset: u64, data: &[u8]) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let end = offset + data.len() as u64;
        for sector in offset / SECTOR_BYTES..end.div_ceil(SECTOR_BYTES) {
            let sector_start = sector * SECTOR_BYTES;
            let from = offset.max(sector_start);
            let to = end.min(sector_start + SECTOR_BYTES);
            let slot = match self.newest.entry(sector) {
                std::collections::hash_map::Entry::Occupied(entry) => entry.into_mut(),
                std::collections::hash_map::Entry::Vacant(entry) => {
                    let mut bytes = vec![0u8; SECTOR_BYTES as usize].into_boxed_slice();
                    if to - from < SECTOR_BYTES {
                        media.read_at(&mut bytes, sector_start)?;
                    }
                    entry.insert(bytes)
                }
            };
            slot[(from - sector_start) as usize..(to - sector_start) as usize]
                .copy_from_slice(&data[(from - offset) as usize..(to - offset) as usize]);
        }
        self.writes.push(CachedWrite {
            offset,
            data: data.to_vec(),
        });
        self.cached_bytes += data.len() as u64;
        Ok(())
    }

    /// Fills `buf` with what a read at `offset` returns: the media, overlaid by the cache.
    pub fn read(&self, media: &dyn Media, buf: &mut [u8], offset: u64) -> io::Result<()> {
        media.read_at(buf, offset)?;
        if self.newest.is_empty() || buf.is_empty() {
            return Ok(());
        }
        let end = offset + buf.len() as u64;
        for sector in offset / SECTOR_BYTES..end.div_ceil(SECTOR_BYTES) {
            if let Some(bytes) = self.newest.get(&sector) {
                let sector_start = sector * SECTOR_BYTES;
                let from = offset.max(sector_start);
                let to = end.min(sector_start + SECTOR_BYTES);
                buf[(from - offset) as usize..(to - offset) as usize]
                    .copy_from_slice(&bytes[(from - sector_start) as usize..(to - sector_start) as usize]);
            }
        }
        Ok(())
    }

    /// Writes the newest bytes of every cached sector to the media (runs of adjacent sectors
    /// in one call) and empties the cache.
    pub fn flush(&mut self, media: &mut dyn Media) -> io::Result<()> {
        let mut sectors: Vec<u64> = self.newest.keys().copied().collect();
        sectors.sort_unstable();
        let mut run: Vec<u8> = Vec::new();
        let mut run_start = 0;
        let mut next_sector = None;
        for sector in sectors {
            if next_sector != Some(sector) && !run.is_empty() {
                media.write_at(&run, run_start * SECTOR_BYTES)?;
                run.clear();
            }
            if run.is_empty() {
                run_start = sector;
            }
            run.extend_from_slice(&self.newest[&sector]);
            next_sector = Some(sector + 1);
        }
        if !run.is_empty() {
            media.write_at(&run, run_start * SECTOR_BYTES)?;
        }
        self.clear();
        Ok(())
    }

    /// The power goes: each cached write, in a random order, is lost, kept, or torn (a random
    /// subset of the sectors it covers reaches the media). The cache is empty afterwards.
    pub fn power_cut(&mut self, media: &mut dyn Media, rng: &mut impl Rng) -> io::Result<CutOutcome> {
        let mut outcome = CutOutcome {
            cached: self.writes.len() as u64,
            ..CutOutcome::default()
        };
        let mut writes = std::mem::take(&mut self.writes);
        writes.shuffle(rng);
        for write in &writes {
            match rng.random_range(0..3) {
                0 => outcome.lost += 1,
                1 => {
                    outcome.kept += 1;
                    write_sectors(media, write, |_| true)?;
                }
                _ => {
                    outcome.torn += 1;
                    write_sectors(media, write, |_| rng.random_bool(0.5))?;
                }
            }
        }
        self.clear();
        Ok(outcome)
    }

    fn clear(&mut self) {
        self.writes.clear();
        self.newest.clear();
        self.cached_bytes = 0;
    }
}

/// Writes the pieces of `write` that fall in the sectors `keep` says yes to.
fn write_sectors(
    media: &mut dyn Media,
    write: &CachedWrite,
    mut keep: impl FnMut(u64) -> bool,
) -> io::Result<()> {
    let end = write.offset + write.data.len() as u64;
    for sector in write.offset / SECTOR_BYTES..end.div_ceil(SECTOR_BYTES) {
        if !keep(sector) {
            continue;
        }
        let from = write.offset.max(sector * SECTOR_BYTES);
        let to = end.min((sector + 1) * SECTOR_BYTES);
        media.write_at(
            &write.data[(from - write.offset) as usize..(to - write.offset) as usize],
            from,
        )?;
    }
    Ok(())
}

/// Media in memory, for tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryMedia(pub Vec<u8>);

impl Media for MemoryMedia {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let start = offset as usize;
        let available = self.0.len().saturating_sub(start).min(buf.len());
        buf[..available].copy_from_slice(&self.0[start..start + available]);
        buf[available..].fill(0);
        Ok(())
    }

    fn write_at(&mut self, data: &[u8], offset: u64) -> io::Result<()> {
        let end = offset as usize + data.len();
        if self.0.len() < end {
            self.0.resize(end, 0);
        }
        self.0[offset as usize..end].copy_from_slice(data);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    const SIZE: usize = 16 * SECTOR_BYTES as usize;

    fn write_strategy() -> impl Strategy<Value = (u64, Vec<u8>)> {
        (0..SIZE as u64 - 1).prop_flat_map(|offset| {
            let max_len = (SIZE as u64 - offset).min(3 * SECTOR_BYTES) as usize;
            (Just(offset), proptest::collection::vec(any::<u8>(), 1..=max_len))
        })
    }

    proptest! {
        /// Reads through the cache see every write at once, and a flush makes the media
        /// exactly what a plain file would hold.
        #[test]
        fn reads_and_flush_match_a_plain_file(writes in proptest::collection::vec(write_strategy(), 1..20)) {
            let mut media = MemoryMedia(vec![7u8; SIZE]);
            let mut plain = media.clone();
            let mut cache = VolatileCache::default();
            for (offset, data) in &writes {
                cache.write(&media, *offset, data).unwrap();
                plain.write_at(data, *offset).unwrap();
                let mut seen = vec![0u8; SIZE];
                cache.read(&media, &mut seen, 0).unwrap();
                prop_assert_eq!(&seen, &plain.0);
            }
            prop_assert_eq!(&media.0, &vec![7u8; SIZE], "nothing reaches the media before a flush");
            cache.flush(&mut media).unwrap();
            prop_assert_eq!(&media.0, &plain.0);
            prop_assert_eq!(cache.cached_writes(), 0);
        }

        /// After a cut, every sector holds the flushed version or one written since, never
        /// anything else; and with all writes to distinct sectors, each sector is either old
        /// or new.
        #[test]
        fn a_cut_leaves_each_sector_at_some_version(
            writes in proptest::collection::vec(write_strategy(), 1..20),
            seed in any::<u64>(),
        ) {
            let base = MemoryMedia(vec![7u8; SIZE]);
            let mut media = base.clone();
            let mut cache = VolatileCache::default();
            // Each sector's versions: the media's, then the image after each write.
            let mut versions: Vec<Vec<u8>> = vec![base.0.clone()];
            let mut plain = base.clone();
            for (offset, data) in &writes {
                cache.write(&media, *offset, data).unwrap();
                plain.write_at(data, *offset).unwrap();
                versions.push(plain.0.clone());
            }
            let outcome = cache.power_cut(&mut media, &mut SmallRng::seed_from_u64(seed)).unwrap();
            prop_assert_eq!(outcome.cached, writes.len() as u64);
            prop_assert_eq!(outcome.lost + outcome.kept + outcome.torn, outcome.cached);
            for byte in 0..SIZE {
                // Byte by byte: a torn sector never mixes within the sector, but this is the
                // weaker claim that nothing foreign appears.
                prop_assert!(versions.iter().any(|v| v[byte] == media.0[byte]), "byte {} is {}", byte, media.0[byte]);
            }
            prop_assert_eq!(cache.cached_writes(), 0);
        }
    }

    #[test]
    fn a_cut_loses_keeps_and_tears_over_many_seeds() {
        let mut totals = CutOutcome::default();
        for seed in 0..50 {
            let mut media = MemoryMedia(vec![0u8; SIZE]);
            let mut cache = VolatileCache::default();
            for index in 0..8u64 {
                cache
                    .write(
                        &media,
                        index * 2 * SECTOR_BYTES,
                        &[0xAB; 2 * SECTOR_BYTES as usize],
                    )
                    .unwrap();
            }
            let outcome = cache
                .power_cut(&mut media, &mut SmallRng::seed_from_u64(seed))
                .unwrap();
            totals.lost += outcome.lost;
            totals.kept += outcome.kept;
            totals.torn += outcome.torn;
        }
        assert!(
            totals.lost > 50 && totals.kept > 50 && totals.torn > 50,
            "{totals:?}"
        );
    }

    /// The negative control of the model: a flushed write survives every cut.
    #[test]
    fn flushed_writes_survive_a_cut() {
        for seed in 0..20 {
            let mut media = MemoryMedia(vec![0u8; SIZE]);
            let mut cache = VolatileCache::default();
            cache.write(&media, 0, &[1; 1024]).unwrap();
            cache.flush(&mut media).unwrap();
            cache.write(&media, 4096, &[2; 1024]).unwrap();
            cache
                .power_cut(&mut media, &mut SmallRng::seed_from_u64(seed))
                .unwrap();
            assert_eq!(&media.0[..1024], &[1; 1024]);
        }
    }
}
