//! Reading the store's write log (`ONESYNC_IO_LOG`, format in `onesync_store::io`) and
//! rebuilding from it what a power cut at a point of the log leaves on the disk.
//!
//! The model: every write of the store file logged before the `B` (flush begins) record of
//! a flush whose `S` (flush done) record comes before the cut is on the disk; every other
//! write before the cut is independently lost, kept, or torn at 512-byte sectors (each
//! sector kept or not). Writes after the cut never happened. A write logged after a flush
//! began may or may not be covered by it (Linux writes back what is dirty when it looks),
//! so it counts as unflushed; the process that wrote it learnt of its completion only
//! after logging it, so nothing it did relied on that flush covering it.

use std::collections::HashMap;

use anyhow::{bail, Result};
use onesync_store::io::{LOG_HEADER_LEN, LOG_NOTE, LOG_SYNCED, LOG_SYNC_BEGIN, LOG_WRITE, LOG_ZEROS};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const SECTOR: u64 = 512;

/// One record; `data` indexes the log's bytes.
#[derive(Clone, Debug)]
pub struct Record {
    /// Byte position of the record in the log (the global order).
    pub pos: u64,
    pub kind: u8,
    pub pid: u32,
    pub file: (u64, u64),
    pub offset: u64,
    pub len: u64,
    data: std::ops::Range<usize>,
}

pub struct Log {
    bytes: Vec<u8>,
    pub records: Vec<Record>,
}

impl Log {
    pub fn parse(bytes: Vec<u8>) -> Result<Log> {
        let mut records = Vec::new();
        let mut at = 0usize;
        let field = |b: &[u8], i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or_default());
        while at < bytes.len() {
            if bytes.len() - at < LOG_HEADER_LEN {
                bail!("the write log ends inside a record header at byte {at}");
            }
            let h = &bytes[at..at + LOG_HEADER_LEN];
            let kind = h[0];
            let len = field(h, 32);
            let carried = match kind {
                LOG_WRITE | LOG_NOTE => len as usize,
                LOG_ZEROS | LOG_SYNC_BEGIN | LOG_SYNCED => 0,
                other => bail!("unknown record kind {other} at byte {at} of the write log"),
            };
            let start = at + LOG_HEADER_LEN;
            if bytes.len() - start < carried {
                bail!("the write log ends inside the record at byte {at}");
            }
            records.push(Record {
                pos: at as u64,
                kind,
                pid: u32::from_le_bytes([h[4], h[5], h[6], h[7]]),
                file: (field(h, 8), field(h, 16)),
                offset: field(h, 24),
                len,
                data: start..start + carried,
            });
            at = start + carried;
        }
        Ok(Log { bytes, records })
    }

    pub fn data(&self, r: &Record) -> &[u8] {
        &self.bytes[r.data.clone()]
    }

    /// The notes before `cut`, in order.
    pub fn notes_before(&self, cut: u64) -> impl Iterator<Item = (u64, &str)> {
        self.records
            .iter()
            .filter(move |r| r.kind == LOG_NOTE && r.pos < cut)
            .map(|r| (r.pos, std::str::from_utf8(self.data(r)).unwrap_or("")))
    }

    /// The log position before which every write of `file` is durable at `cut`: the `B`
    /// record of the last flush of the file completed before `cut` (0: none).
    pub fn durable_before(&self, file: (u64, u64), cut: u64) -> u64 {
        let mut began: HashMap<u32, u64> = HashMap::new();
        let mut durable = 0;
        for r in self.records.iter().filter(|r| r.pos < cut && r.file == file) {
            match r.kind {
                LOG_SYNC_BEGIN => {
                    began.insert(r.pid, r.pos);
                }
                LOG_SYNCED => {
                    if let Some(b) = began.remove(&r.pid) {
                        durable = durable.max(b);
                    }
                }
                _ => {}
            }
        }
        durable
    }

    /// The writes of `file` before `cut` that a power cut may lose.
    pub fn unflushed(&self, file: (u64, u64), cut: u64) -> usize {
        let durable = self.durable_before(file, cut);
        self.writes(file, cut).filter(|r| r.pos >= durable).count()
    }

    fn writes(&self, file: (u64, u64), cut: u64) -> impl Iterator<Item = &Record> {
        self.records
            .iter()
            .filter(move |r| r.pos < cut && r.file == file && matches!(r.kind, LOG_WRITE | LOG_ZEROS))
    }

    /// `image` (the file before the run) with the writes of `file` before `cut` applied as
    /// `fate` says for those not yet flushed.
    pub fn rebuild(&self, image: &[u8], file: (u64, u64), cut: u64, fate: Fate) -> Vec<u8> {
        let durable = self.durable_before(file, cut);
        let mut out = image.to_vec();
        let mut rng = SmallRng::seed_from_u64(match fate {
            Fate::Random(seed) => seed,
            _ => 0,
        });
        let mut unflushed = 0usize;
        for r in self.writes(file, cut) {
            if r.pos < durable {
                self.apply(&mut out, r, None);
                continue;
            }
            unflushed += 1;
            match fate {
                Fate::AllLost => {}
                Fate::AllKept => self.apply(&mut out, r, None),
                Fate::Prefix(n) => {
                    if unflushed <= n {
                        self.apply(&mut out, r, None);
                    }
                }
                Fate::Random(_) => match rng.random_range(0..3u8) {
                    0 => {}
                    1 => self.apply(&mut out, r, None),
                    _ => {
                        let keep: Vec<bool> = (0..sectors(r).len()).map(|_| rng.random_bool(0.5)).collect();
                        self.apply(&mut out, r, Some(&keep));
                    }
                },
            }
        }
        out
    }

    /// Applies a write to `out`; with `keep`, only the sectors it marks.
    fn apply(&self, out: &mut Vec<u8>, r: &Record, keep: Option<&[bool]>) {
        for (i, (from, to)) in sectors(r).into_iter().enumerate() {
            if keep.is_some_and(|k| !k[i]) {
                continue;
            }
            if out.len() < to as usize {
                out.resize(to as usize, 0);
            }
            let dst = &mut out[from as usize..to as usize];
            if r.kind == LOG_ZEROS {
                dst.fill(0);
            } else {
                let at = (from - r.offset) as usize;
                dst.copy_from_slice(&self.data(r)[at..at + dst.len()]);
            }
        }
    }
}

/// The write's byte ranges cut at 512-byte sector boundaries of the file.
fn sectors(r: &Record) -> Vec<(u64, u64)> {
    let end = r.offset + r.len;
    let mut out = Vec::new();
    let mut at = r.offset;
    while at < end {
        let next = ((at / SECTOR) + 1) * SECTOR;
        out.push((at, next.min(end)));
        at = next;
    }
    out
}

/// What a power cut does to the writes not yet flushed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    AllLost,
    AllKept,
    /// The first N in log order kept, the rest lost (a disk that writes in order).
    Prefix(usize),
    /// Each lost, kept or torn, drawn from this seed.
    Random(u64),
}

impl std::fmt::Display for Fate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fate::AllLost => write!(f, "unflushed writes all lost"),
            Fate::AllKept => write!(f, "unflushed writes all kept"),
            Fate::Prefix(n) => write!(f, "first {n} unflushed writes kept"),
            Fate::Random(seed) => write!(f, "unflushed writes lost/kept/torn (seed {seed})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u8, pid: u32, offset: u64, data: &[u8]) -> Vec<u8> {
        let mut r = vec![kind, 0, 0, 0];
        r.extend_from_slice(&pid.to_le_bytes());
        for f in [1u64, 2, offset, data.len() as u64] {
            r.extend_from_slice(&f.to_le_bytes());
        }
        if kind == LOG_WRITE || kind == LOG_NOTE {
            r.extend_from_slice(data);
        }
        r
    }

    #[test]
    fn flushed_writes_survive_and_later_ones_follow_their_fate() {
        let mut log = Vec::new();
        log.extend(record(LOG_WRITE, 1, 0, &[1u8; 1024]));
        log.extend(record(LOG_SYNC_BEGIN, 1, 0, &[]));
        // Logged while the flush ran: not covered by it.
        log.extend(record(LOG_WRITE, 2, 1024, &[2u8; 512]));
        log.extend(record(LOG_SYNCED, 1, 0, &[]));
        log.extend(record(LOG_NOTE, 1, 0, b"ack A1"));
        log.extend(record(LOG_WRITE, 1, 0, &[3u8; 1024]));
        let cut = log.len() as u64;
        let log = Log::parse(log).unwrap();
        let file = (1, 2);
        assert_eq!(log.unflushed(file, cut), 2);
        let lost = log.rebuild(&[], file, cut, Fate::AllLost);
        assert_eq!(lost, vec![1u8; 1024]);
        let kept = log.rebuild(&[], file, cut, Fate::AllKept);
        assert_eq!(&kept[..1024], &[3u8; 1024][..]);
        assert_eq!(&kept[1024..], &[2u8; 512][..]);
        let first = log.rebuild(&[], file, cut, Fate::Prefix(1));
        assert_eq!(&first[..1024], &[1u8; 1024][..]);
        assert_eq!(&first[1024..], &[2u8; 512][..]);
        assert_eq!(
            log.notes_before(cut).map(|(_, n)| n).collect::<Vec<_>>(),
            ["ack A1"]
        );
        // Torn: each sector is all old or all new.
        for seed in 0..20 {
            let torn = log.rebuild(&[], file, cut, Fate::Random(seed));
            for sector in torn[..1024].chunks(512) {
                assert!(sector.iter().all(|&b| b == sector[0]), "seed {seed}");
            }
        }
    }
}
