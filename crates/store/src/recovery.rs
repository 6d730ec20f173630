//! Recovery: choose the newest intact header and checkpoint, then follow the chain of
//! commit records from it while each record is intact, in sequence, on the chain, and its
//! pages match their checksums.

use crate::alloc::SlotAllocator;
use crate::error::{Error, Result};
use crate::format::{
    slot_offset, Header, Op, Record, RecordKind, FORMAT_VERSION, HEADER_BLOCK, HEADER_LEN, NO_SLOT,
    RECORD_ALIGN, SLOT_BASE,
};
use crate::io::{StorageIo, DIRECT_ALIGN};
use crate::loading::{load_checkpoint, FreeBaseline, Loaded, MappingIo};
use crate::state::State;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};

/// What recovery found.
pub(crate) struct Recovered {
    pub header: Header,
    pub state: State,
    pub alloc: SlotAllocator,
    /// Slots that replayed records name (their own, and pages they superseded): not free
    /// until the next checkpoint.
    pub awaiting_checkpoint: Vec<u64>,
    pub head: u64,
    pub window_end: u64,
    pub prev_crc: u32,
    pub records_replayed: u64,
    pub log_bytes: u64,
    /// Both header copies are intact and equal to `header`.
    pub copies_agree: bool,
    /// Salvaging: the read error that ended the chain early.
    pub stopped_by: Option<String>,
    /// The free slots the checkpoint's manifest persisted (`None`: a version-1 checkpoint).
    pub free_baseline: Option<FreeBaseline>,
    /// Slots the replayed records freed or used for themselves (superseded pages, records,
    /// jumps): free in the next checkpoint's manifest unless it names them.
    pub freed_since: Vec<u64>,
}

/// The medium as its device holds it (see `StorageIo::read_durable_at`): recovery must not
/// accept a commit that sits only in a cache after a failed flush.
struct Durable<'a>(&'a dyn StorageIo);

impl StorageIo for Durable<'_> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.0.read_durable_at(buf, offset)
    }
    fn write_at(&self, data: &[u8], offset: u64) -> std::io::Result<()> {
        self.0.write_at(data, offset)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.0.sync_data()
    }
    fn size(&self) -> std::io::Result<u64> {
        self.0.size()
    }
    fn reads_ahead_on_a_thread(&self) -> bool {
        self.0.reads_ahead_on_a_thread()
    }
}

/// The chain read ahead in large reads: recovery follows records that lie next to each
/// other (each in the window after the last, its pages right behind it), and one read of
/// the device per record and per page made recovery slow (`onesync-lab store-bench`
/// prints its time). Reads go to the device a chunk of `READ_AHEAD` bytes at a time
/// (aligned, clipped to the file), and later reads inside the chunk come from it. With a
/// reader thread (`prefetching`), the chunks after it are read meanwhile, up to `DEPTH`
/// ahead, from the chain's start while the checkpoint is loaded: the device and the
/// checks of the records overlap. Where the chain leaves the chunks read ahead, those
/// not read yet are dropped. Read-only: recovery writes nothing through it.
struct ReadAhead<'a> {
    io: &'a dyn StorageIo,
    len: u64,
    inner: Mutex<Ahead>,
}

const READ_AHEAD: u64 = 1 << 20;
/// Chunks the reader thread reads ahead at most (their buffers stay allocated until the
/// open ends).
const DEPTH: usize = 8;

struct Ahead {
    chunk: Chunk,
    /// Buffers for the next chunks.
    spare: Vec<Buffer>,
    reader: Option<Reader>,
    /// The chunks (offset, length) asked of the reader thread, oldest first.
    asked: std::collections::VecDeque<(u64, usize)>,
    /// How many chunks to have asked for: doubled (up to `DEPTH`) each time the chain
    /// goes on into the next chunk, none after it jumped elsewhere. Where the chain hops
    /// from one small free run to the next (a fragmented store), chunks read ahead at
    /// each hop are mostly wasted, and the device's time is recovery's.
    depth: usize,
}

/// The reader thread: it answers every request in order, reading it unless its
/// generation is older than `current` (then the buffer comes back unread).
struct Reader {
    requests: mpsc::Sender<Request>,
    answers: mpsc::Receiver<(Buffer, Option<std::io::Result<()>>)>,
    current: Arc<AtomicU64>,
}

struct Request {
    at: u64,
    n: usize,
    buf: Buffer,
    generation: u64,
}

struct Chunk {
    buf: Buffer,
    /// The file offset of the chunk, and how many of its bytes are read.
    start: u64,
    filled: usize,
}

/// A chunk's buffer, aligned as `O_DIRECT` wants it so that the device reads into it as
/// it is, and kept from chunk to chunk: a chunk allocated, cleared and copied out of a
/// bounce buffer each time was most of recovery's time outside the device.
struct Buffer {
    raw: Vec<u8>,
    skip: usize,
}

impl Buffer {
    fn new() -> Buffer {
        let raw = vec![0u8; READ_AHEAD as usize + DIRECT_ALIGN];
        let skip = raw.as_ptr().align_offset(DIRECT_ALIGN);
        Buffer { raw, skip }
    }

    fn bytes(&self, n: usize) -> &[u8] {
        &self.raw[self.skip..self.skip + n]
    }

    fn bytes_mut(&mut self, n: usize) -> &mut [u8] {
        &mut self.raw[self.skip..self.skip + n]
    }
}

impl Drop for ReadAhead<'_> {
    /// The chunks asked and not begun are not read: the open need not wait for them.
    fn drop(&mut self) {
        if let Some(reader) = &self.lock().reader {
            reader.current.fetch_add(1, Ordering::AcqRel);
        }
    }
}

impl<'a> ReadAhead<'a> {
    fn new(io: &'a dyn StorageIo, len: u64) -> Self {
        Self {
            io,
            len,
            inner: Mutex::new(Ahead {
                chunk: Chunk {
                    buf: Buffer {
                        raw: Vec::new(),
                        skip: 0,
                    },
                    start: 0,
                    filled: 0,
                },
                spare: Vec::new(),
                reader: None,
                asked: Default::default(),
                depth: DEPTH,
            }),
        }
    }

    /// Read ahead on a thread of `scope`, from `offset` on. Without a thread (none could
    /// start), chunks are read when needed.
    fn prefetching<'scope>(self, scope: &'scope std::thread::Scope<'scope, '_>, offset: u64) -> Self
    where
        'a: 'scope,
    {
        let (requests, asked) = mpsc::channel::<Request>();
        let (answer, answers) = mpsc::channel();
        let current = Arc::new(AtomicU64::new(0));
        let (io, generation) = (self.io, current.clone());
        let started = std::thread::Builder::new()
            .name("onesync-recovery-read".into())
            .spawn_scoped(scope, move || {
                for mut request in asked {
                    let read = (request.generation == generation.load(Ordering::Acquire))
                        .then(|| io.read_at(request.buf.bytes_mut(request.n), request.at));
                    if answer.send((request.buf, read)).is_err() {
                        break;
                    }
                }
            });
        if started.is_ok() {
            let mut inner = self.lock();
            inner.reader = Some(Reader {
                requests,
                answers,
                current,
            });
            let first = offset / DIRECT_ALIGN as u64 * DIRECT_ALIGN as u64;
            self.ask_from(&mut inner, first);
        }
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Ahead> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Ask the reader thread for the chunks from `next` on, up to `DEPTH` asked.
    fn ask_from(&self, inner: &mut Ahead, mut next: u64) {
        let Some(reader) = &inner.reader else { return };
        let generation = reader.current.load(Ordering::Relaxed);
        while inner.asked.len() < inner.depth && next < self.len {
            let stop = (next + READ_AHEAD).min(self.len);
            let buf = inner.spare.pop().unwrap_or_else(Buffer::new);
            let request = Request {
                at: next,
                n: (stop - next) as usize,
                buf,
                generation,
            };
            if reader.requests.send(request).is_err() {
                return;
            }
            inner.asked.push_back((next, (stop - next) as usize));
            next = stop;
        }
    }

    /// The chunk the reader thread read that holds `offset..end`, if it was asked for
    /// (its buffer, offset and length); the chunks asked before it are waited for and
    /// dropped, and all of them if none holds it (the chain jumped): the reader skips
    /// those it has not begun.
    fn land(inner: &mut Ahead, offset: u64, end: u64) -> Option<(Buffer, u64, usize)> {
        let reader = inner.reader.as_ref()?;
        let holds = |&(at, n): &(u64, usize)| at <= offset && end <= at + n as u64;
        if !inner.asked.iter().any(holds) {
            reader.current.fetch_add(1, Ordering::AcqRel);
        }
        while let Some(asked) = inner.asked.pop_front() {
            let (buf, read) = reader.answers.recv().ok()?;
            if holds(&asked) && matches!(read, Some(Ok(()))) {
                return Some((buf, asked.0, asked.1));
            }
            inner.spare.push(buf);
        }
        None
    }

    /// `f` of the `n` bytes at `offset`, lent out of the chunk (read first if need be)
    /// rather than copied.
    fn with_bytes<T>(
        &self,
        offset: u64,
        n: usize,
        wanted: Wanted,
        f: impl FnOnce(&[u8]) -> T,
    ) -> std::io::Result<T> {
        let end = offset + n as u64;
        let mut inner = self.lock();
        let inner = &mut *inner;
        let chunk = &mut inner.chunk;
        let chunk_end = chunk.start + chunk.filled as u64;
        if offset >= chunk.start && end <= chunk_end {
            let from = (offset - chunk.start) as usize;
            return Ok(f(&chunk.buf.bytes(chunk.filled)[from..from + n]));
        }
        let align = DIRECT_ALIGN as u64;
        let first = offset / align * align;
        let asked = |&(at, len): &(u64, usize)| at <= offset && end <= at + len as u64;
        let window_end = match wanted {
            Wanted::Chain { window_end } => window_end,
            Wanted::Page if inner.asked.iter().any(asked) => end,
            Wanted::Page => return read_once(self.io, offset, n, f),
        };
        if end - first > READ_AHEAD || end > self.len {
            return read_once(self.io, offset, n, f);
        }
        let onward = offset >= chunk_end && offset < chunk_end + READ_AHEAD;
        let (start, len) = match Self::land(inner, offset, end) {
            Some((landed, at, filled)) => {
                inner.depth = (inner.depth * 2).clamp(1, DEPTH);
                let old = std::mem::replace(&mut inner.chunk.buf, landed);
                if !old.raw.is_empty() {
                    inner.spare.push(old);
                }
                (at, filled)
            }
            None => {
                inner.depth = if onward {
                    (inner.depth * 2).clamp(1, DEPTH)
                } else {
                    0
                };
                // The window's records and pages lie up to its end: a hop to a small
                // window reads that much, not a whole chunk.
                let stop = window_end
                    .max(end)
                    .div_ceil(align)
                    .saturating_mul(align)
                    .min(first + READ_AHEAD)
                    .min(self.len);
                let len = (stop - first) as usize;
                let chunk = &mut inner.chunk;
                if chunk.buf.raw.is_empty() {
                    chunk.buf = inner.spare.pop().unwrap_or_else(Buffer::new);
                }
                if self.io.read_at(chunk.buf.bytes_mut(len), first).is_err() {
                    // A bad block elsewhere in the chunk must not fail this read: only its own.
                    chunk.filled = 0;
                    return read_once(self.io, offset, n, f);
                }
                (first, len)
            }
        };
        // The chain runs on in the file (but where a record jumps to a new window).
        let next = inner
            .asked
            .back()
            .map_or(start + len as u64, |&(at, n)| at + n as u64);
        self.ask_from(inner, next);
        let chunk = &mut inner.chunk;
        chunk.start = start;
        chunk.filled = len;
        let from = (offset - start) as usize;
        Ok(f(&chunk.buf.bytes(len)[from..from + n]))
    }
}

/// What a read through the read-ahead is for.
#[derive(Clone, Copy)]
enum Wanted {
    /// A record of the chain, whose window (where the records and pages that follow it
    /// lie) ends at this offset.
    Chain { window_end: u64 },
    /// A page, which a commit may have put in a free slot anywhere: one outside the
    /// chunks read or asked for is read alone, without dropping them.
    Page,
}

/// `f` of the `n` bytes at `offset`, read from the medium itself.
fn read_once<T>(io: &dyn StorageIo, offset: u64, n: usize, f: impl FnOnce(&[u8]) -> T) -> std::io::Result<T> {
    let mut bytes = vec![0u8; n];
    io.read_at(&mut bytes, offset)?;
    Ok(f(&bytes))
}

impl StorageIo for ReadAhead<'_> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        let wanted = Wanted::Chain { window_end: u64::MAX };
        self.with_bytes(offset, buf.len(), wanted, |bytes| buf.copy_from_slice(bytes))
    }
    fn write_at(&self, _: &[u8], _: u64) -> std::io::Result<()> {
        Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
    }
    fn sync_data(&self) -> std::io::Result<()> {
        Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
    }
    fn size(&self) -> std::io::Result<u64> {
        Ok(self.len)
    }
}

/// Recover the newest state the device holds: the newest intact header and checkpoint, then
/// the chain, all read from the device itself.
///
/// `salvage`: a read error while following the chain ends the chain there (said in
/// `Recovered::stopped_by`) instead of failing; only for a read-only open that copies the
/// commits before the damage elsewhere.
pub(crate) fn recover(io: &dyn StorageIo, mapping: &MappingIo, salvage: bool) -> Result<Recovered> {
    let io: &dyn StorageIo = &Durable(io);
    let len = io
        .size()
        .map_err(|e| Error::io("reading the store's length", e))?;
    let mut head = vec![0u8; len.min(SLOT_BASE) as usize];
    io.read_at(&mut head, 0)
        .map_err(|e| Error::io("reading the header", e))?;
    let copies: Vec<Result<Header>> = [0u64, HEADER_BLOCK]
        .iter()
        .map(|&at| match head.get(at as usize..at as usize + HEADER_LEN) {
            Some(bytes) => Header::decode(bytes),
            None => Err(Error::NotAStore("file too short".into())),
        })
        .collect();
    let mut valid: Vec<Header> = copies.iter().filter_map(|c| c.as_ref().ok().copied()).collect();
    if valid.is_empty() {
        if head.len() >= 16 && head[..16] == crate::format::MAGIC && len < SLOT_BASE {
            return Err(Error::Truncated(format!(
                "{len} bytes, shorter than the {SLOT_BASE}-byte header area"
            )));
        }
        return Err(match (&copies[0], &copies[1]) {
            (Err(Error::UnsupportedVersion { found, .. }), _)
            | (_, Err(Error::UnsupportedVersion { found, .. })) => Error::UnsupportedVersion {
                found: *found,
                supported: FORMAT_VERSION,
            },
            (Err(Error::NotAStore(_)), Err(Error::NotAStore(_))) if len >= HEADER_LEN as u64 => {
                Error::NotAStore("the file does not begin with the onesync store magic".into())
            }
            (Err(Error::NotAStore(_)), Err(Error::NotAStore(_))) => Error::NotAStore(format!(
                "the file is {len} bytes, too short to hold a store header"
            )),
            _ => Error::Corrupt("both header copies fail their checksums".into()),
        });
    }
    if valid.len() == 2
        && (valid[0].store_id != valid[1].store_id || valid[0].page_size != valid[1].page_size)
    {
        return Err(Error::Corrupt(
            "the two header copies describe different stores".into(),
        ));
    }
    if len < SLOT_BASE {
        return Err(Error::Truncated(format!(
            "{len} bytes, shorter than the {SLOT_BASE}-byte header area"
        )));
    }
    valid.sort_by_key(|h| std::cmp::Reverse(h.generation));
    valid.dedup();
    let page_size = valid[0].page_size as u64;
    let capacity = (len - SLOT_BASE) / page_size;
    let mut last_error = None;
    // The newest header whose checkpoint is intact. An older one is used only when a crash
    // cut a checkpoint short; `replay` refuses it if commits followed the newer one.
    let damaged_copy = copies.iter().any(|c| c.is_err());
    // The newest header's chain is read ahead while its checkpoint loads.
    let chain_start = valid[0]
        .log
        .first_slot
        .checked_mul(page_size)
        .and_then(|at| at.checked_add(SLOT_BASE))
        .unwrap_or(u64::MAX);
    std::thread::scope(|scope| {
        let mut read_ahead = ReadAhead::new(io, len);
        if io.reads_ahead_on_a_thread() {
            read_ahead = read_ahead.prefetching(scope, chain_start);
        }
        for (i, header) in valid.iter().enumerate() {
            match load_checkpoint(io, header, capacity, mapping) {
                Ok(loaded) => {
                    let copies_agree = copies.iter().all(|c| c.as_ref().ok() == Some(header));
                    let fell_back = i > 0 || damaged_copy;
                    return replay(&read_ahead, *header, loaded, capacity, fell_back, salvage)
                        .map(|r| Recovered { copies_agree, ..r });
                }
                // An older header (the newer copy damaged) may name slots the store has
                // since given back to the filesystem (`give_back_space` cuts only after
                // both copies name the newer checkpoint): that header is stale, not the
                // file short.
                Err(Error::Truncated(why)) if i > 0 || damaged_copy => {
                    last_error = Some(Error::Corrupt(format!(
                        "the intact header copy is older than the file ({why})"
                    )));
                }
                Err(e @ (Error::Truncated(_) | Error::Io { .. })) => return Err(e),
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.unwrap_or_else(|| Error::Corrupt("no usable checkpoint".into())))
    })
}

fn read_failed(during: &'static str, offset: u64, source: std::io::Error) -> Error {
    match Error::io(during, source) {
        Error::Io { during, source } => Error::ReadFailed {
            during,
            offset,
            source,
        },
        other => other,
    }
}

/// The intact record at `slot`, its CRC and its length; `None` where the chain ends.
pub(crate) fn record_at(
    io: &dyn StorageIo,
    slot: u64,
    page_size: u64,
    capacity: u64,
    buf: &mut Vec<u8>,
) -> Result<Option<(Record, u32, u64)>> {
    if slot >= capacity {
        return Ok(None);
    }
    let offset = slot_offset(slot, page_size);
    let room = (capacity - slot) * page_size;
    // The whole first slot at once: a record occupies whole slots, and most fit in one
    // (a follower reads one per commit of every other process, so a second read each
    // counted: 3.4 of the 37 `pread`s per transaction with 16 processes). Into the
    // caller's buffer, kept from record to record: its bytes past what a read fills are
    // never looked at.
    let first_len = page_size.max(RECORD_ALIGN).min(room) as usize;
    if buf.len() < first_len {
        buf.resize(first_len, 0);
    }
    io.read_at(&mut buf[..first_len], offset)
        .map_err(|e| read_failed("reading a commit record", offset, e))?;
    let Some(len) = Record::peek_len(&buf[..first_len]) else {
        return Ok(None);
    };
    if len > room {
        return Ok(None);
    }
    let len_bytes = len as usize;
    if len_bytes > first_len {
        if buf.len() < len_bytes {
            buf.resize(len_bytes, 0);
        }
        io.read_at(&mut buf[first_len..len_bytes], offset + first_len as u64)
            .map_err(|e| read_failed("reading a commit record", offset, e))?;
    }
    Ok(Record::decode(&buf[..len_bytes]).map(|(record, crc)| (record, crc, len)))
}

/// Whether every page a commit maps holds the content its record says.
pub(crate) fn pages_intact(
    io: &dyn StorageIo,
    record: &Record,
    page_size: u64,
    capacity: u64,
) -> Result<bool> {
    let mut page = vec![0u8; page_size as usize];
    pages_intact_by(record, page_size, capacity, |at| {
        io.read_at(&mut page, at)?;
        Ok(crc32c::crc32c(&page))
    })
}

/// [`pages_intact`], with `crc_at` giving the CRC of the page at an offset.
fn pages_intact_by(
    record: &Record,
    page_size: u64,
    capacity: u64,
    mut crc_at: impl FnMut(u64) -> std::io::Result<u32>,
) -> Result<bool> {
    for op in &record.ops {
        let Op::Page { slot, crc, .. } = op else { continue };
        if *slot == NO_SLOT {
            continue;
        }
        if *slot >= capacity {
            return Err(Error::Truncated(format!(
                "commit {} maps a page to slot {slot} past the end of the file",
                record.seq
            )));
        }
        let at = slot_offset(*slot, page_size);
        let found = crc_at(at).map_err(|e| read_failed("verifying a committed page", at, e))?;
        if found != *crc && !cfg!(feature = "deliberately-broken-recovery") {
            return Ok(false);
        }
    }
    Ok(true)
}

/// [`record_at`] through the read-ahead, for a record in the window ending at slot
/// `window_end`: the record is decoded where it lies in the chunk, and only its first
/// `RECORD_ALIGN` bytes are looked at before its length is known (a follower reads a whole
/// slot at once, to save a read; here a copy of it cost more).
fn record_ahead(
    io: &ReadAhead,
    slot: u64,
    window_end: u64,
    page_size: u64,
    capacity: u64,
) -> Result<Option<(Record, u32, u64)>> {
    if slot >= capacity {
        return Ok(None);
    }
    let offset = slot_offset(slot, page_size);
    let room = (capacity - slot) * page_size;
    let failed = |e| read_failed("reading a commit record", offset, e);
    let wanted = Wanted::Chain {
        window_end: window_end.saturating_mul(page_size).saturating_add(SLOT_BASE),
    };
    let peek = RECORD_ALIGN.min(room) as usize;
    let Some(len) = io
        .with_bytes(offset, peek, wanted, Record::peek_len)
        .map_err(failed)?
    else {
        return Ok(None);
    };
    if len > room {
        return Ok(None);
    }
    io.with_bytes(offset, len as usize, wanted, |bytes| {
        Record::decode(bytes).map(|(record, crc)| (record, crc, len))
    })
    .map_err(failed)
}

/// The newest intact header copy (for a process following others' commits).
pub(crate) fn newest_header(io: &dyn StorageIo) -> Result<Header> {
    header_copies(io).map(|(header, _)| header)
}

/// The newest intact header copy, and whether both copies are intact and equal to it.
pub(crate) fn header_copies(io: &dyn StorageIo) -> Result<(Header, bool)> {
    let mut area = vec![0u8; SLOT_BASE as usize];
    io.read_at(&mut area, 0)
        .map_err(|e| Error::io("reading the header", e))?;
    let copies: Vec<Option<Header>> = [0u64, HEADER_BLOCK]
        .iter()
        .map(|&at| Header::decode(&area[at as usize..at as usize + HEADER_LEN]).ok())
        .collect();
    let newest = copies
        .iter()
        .flatten()
        .max_by_key(|h| h.generation)
        .copied()
        .ok_or_else(|| Error::Corrupt("both header copies fail their checksums".into()))?;
    let agree = copies.iter().all(|c| c.as_ref() == Some(&newest));
    Ok((newest, agree))
}

/// `fell_back`: a header copy is damaged or the newest one's checkpoint was unusable, so a
/// newer checkpoint may have existed; commits that follow it must not be rolled back.
fn replay(
    io: &ReadAhead,
    header: Header,
    loaded: Loaded,
    capacity: u64,
    fell_back: bool,
    salvage: bool,
) -> Result<Recovered> {
    let Loaded {
        mut state,
        free: free_baseline,
    } = loaded;
    let page_size = header.page_size as u64;
    let epoch = header.generation;
    let mut record_pages = Vec::new();
    let mut slot = header.log.first_slot;
    let mut window_end = header.log.window_end;
    let mut prev_crc = header.log.seed;
    let mut chain_slots = Vec::new();
    let mut superseded = Vec::new();
    let mut replayed = 0u64;
    let mut log_bytes = 0u64;
    let mut stopped_by = None;
    let salvaged = |e: Error, stopped_by: &mut Option<String>| match e {
        Error::ReadFailed { .. } if salvage => {
            *stopped_by = Some(e.to_string());
            Ok(())
        }
        other => Err(other),
    };
    loop {
        let (record, crc, len) = match record_ahead(io, slot, window_end, page_size, capacity) {
            Ok(Some(found)) => found,
            Ok(None) => break,
            Err(e) => {
                salvaged(e, &mut stopped_by)?;
                break;
            }
        };
        if record.epoch != epoch || record.prev_crc != prev_crc || record.seq != state.seq + 1 {
            if fell_back && record.epoch > epoch {
                // Records follow a checkpoint newer than the one we loaded, so its header
                // was durable once: rolling back to ours would silently drop commits.
                // (Without a fallback such a record can only be stale or forged.)
                return Err(Error::Corrupt(format!(
                    "commit {} follows checkpoint generation {}, whose header is damaged; refusing to roll back",
                    record.seq, record.epoch
                )));
            }
            break;
        }
        if record.next_slot >= record.window_end || record.window_end > capacity {
            return Err(Error::Truncated(format!(
                "commit {} reserves slots up to {} but the file holds {capacity}",
                record.seq, record.window_end
            )));
        }
        let record_slots = len.div_ceil(page_size);
        if record.kind == RecordKind::Commit {
            let crc_at = |at| io.with_bytes(at, page_size as usize, Wanted::Page, crc32c::crc32c);
            match pages_intact_by(&record, page_size, capacity, crc_at) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    salvaged(e, &mut stopped_by)?;
                    break;
                }
            }
            // In place: a record that does not apply fails the open, so no copy needs to
            // keep the state before it (a copy per record copied the mapping's path each).
            state.apply(&record.ops, record.seq, page_size, &mut superseded)?;
            replayed += 1;
            if free_baseline.is_some() {
                record_pages.extend(record.ops.iter().filter_map(|op| match op {
                    Op::Page { slot, .. } if *slot != NO_SLOT => Some(*slot),
                    _ => None,
                }));
            }
        }
        chain_slots.extend(slot..slot + record_slots);
        log_bytes += record_slots * page_size;
        prev_crc = crc;
        slot = record.next_slot;
        window_end = record.window_end;
    }
    let chain = Chain {
        header,
        slot,
        window_end,
        prev_crc,
        chain_slots,
        superseded,
        replayed,
        log_bytes,
        stopped_by,
    };
    match free_baseline {
        Some(baseline) => on_manifest(chain, state, baseline, record_pages, capacity),
        None => on_whole_mapping(chain, state, capacity),
    }
}

/// Where the chain after a checkpoint ended, and the slots it named.
struct Chain {
    header: Header,
    /// The head (where the next record goes) and the end of its window.
    slot: u64,
    window_end: u64,
    prev_crc: u32,
    chain_slots: Vec<u64>,
    superseded: Vec<u64>,
    replayed: u64,
    log_bytes: u64,
    stopped_by: Option<String>,
}

/// After a manifest: the free slots are the manifest's, plus those past its slot total,
/// less what the chain since names (its records, the pages they map, the window). Looked
/// up, never scanned: the mapping is not read. A record that names a slot the manifest
/// does not call free (a page, a block of the mapping, the manifest itself) was not written
/// by this store.
fn on_manifest(
    chain: Chain,
    state: State,
    baseline: FreeBaseline,
    mut record_pages: Vec<u64>,
    capacity: u64,
) -> Result<Recovered> {
    let header = chain.header;
    let (log_first, log_end) = (header.log.first_slot, header.log.window_end);
    let FreeBaseline { slot_total, free } = &baseline;
    let usable = |s: u64| s >= *slot_total || free.contains(s) || (log_first..log_end).contains(&s);
    let count = record_pages.len();
    record_pages.sort_unstable();
    record_pages.dedup();
    if record_pages.len() != count {
        return Err(Error::Corrupt("two pages map to the same slot".into()));
    }
    let in_manifest = |s: u64| header.checkpoint.slots().any(|c| c == s);
    let clash = chain.chain_slots.iter().chain(&record_pages).any(|&s| !usable(s))
        || (chain.slot..chain.window_end).any(|s| !usable(s))
        || (log_first..log_end).any(in_manifest)
        || chain
            .chain_slots
            .iter()
            .any(|s| record_pages.binary_search(s).is_ok());
    if clash {
        return Err(Error::Corrupt(
            "a slot is named for two roles (page, checkpoint, record, window)".into(),
        ));
    }
    let mut alloc_free = free.clone();
    alloc_free.add(*slot_total, capacity);
    alloc_free.remove(log_first, log_end);
    alloc_free.remove(chain.slot, chain.window_end);
    for &s in chain
        .chain_slots
        .iter()
        .chain(&record_pages)
        .chain(&chain.superseded)
    {
        alloc_free.remove(s, s + 1);
    }
    let mut awaiting: Vec<u64> = chain
        .superseded
        .iter()
        .chain(&chain.chain_slots)
        .copied()
        .collect();
    awaiting.sort_unstable();
    awaiting.dedup();
    Ok(Recovered {
        header,
        state,
        alloc: SlotAllocator::from_free(capacity, &alloc_free),
        freed_since: awaiting.clone(),
        awaiting_checkpoint: awaiting,
        head: chain.slot,
        window_end: chain.window_end,
        prev_crc: chain.prev_crc,
        records_replayed: chain.replayed,
        log_bytes: chain.log_bytes,
        copies_agree: true,
        stopped_by: chain.stopped_by,
        free_baseline: Some(baseline),
    })
}

/// After a version-1 checkpoint: the free slots follow from the whole mapping in memory.
fn on_whole_mapping(chain: Chain, state: State, capacity: u64) -> Result<Recovered> {
    let Chain {
        header,
        slot,
        window_end,
        prev_crc,
        chain_slots,
        superseded,
        replayed,
        log_bytes,
        stopped_by,
    } = chain;
    let mut used: Vec<u64> = state.live_slots()?;
    let live_count = used.len();
    used.sort_unstable();
    used.dedup();
    if used.len() != live_count {
        return Err(Error::Corrupt("two pages map to the same slot".into()));
    }
    // Looked up in the sorted slots and the extents themselves: sets of every live slot
    // cost more to build than all the lookups.
    let live = |s: &u64| used.binary_search(s).is_ok();
    let extents = header.checkpoint.extents();
    let in_checkpoint = |s: &u64| extents.iter().any(|&(first, n)| *s >= first && *s - first < n);
    // Each slot has one role: a live page, the checkpoint, a record of the chain, or the
    // reserved window. Records that say otherwise were not written by this store.
    let roles_clash = chain_slots.iter().any(|s| live(s) || in_checkpoint(s))
        || (slot..window_end).any(|s| live(&s) || in_checkpoint(&s))
        || header.checkpoint.slots().any(|s| live(&s));
    if roles_clash {
        return Err(Error::Corrupt(
            "a slot is named for two roles (page, checkpoint, record, window)".into(),
        ));
    }
    let mut awaiting: Vec<u64> = superseded
        .into_iter()
        .chain(chain_slots)
        .filter(|s| !live(s))
        .collect();
    awaiting.sort_unstable();
    awaiting.dedup();
    let reserved = header.checkpoint.slots().chain(slot..window_end);
    let alloc = SlotAllocator::new(
        capacity,
        used.iter()
            .copied()
            .chain(awaiting.iter().copied())
            .chain(reserved),
    );
    Ok(Recovered {
        header,
        state,
        alloc,
        freed_since: awaiting.clone(),
        awaiting_checkpoint: awaiting,
        head: slot,
        window_end,
        prev_crc,
        records_replayed: replayed,
        log_bytes,
        copies_agree: true,
        stopped_by,
        free_baseline: None,
    })
}

#[cfg(test)]
mod tests {
    use crate::format::{slot_offset, Header, Op, Record, HEADER_LEN};
    use crate::io::StorageIo;
    use crate::sim::SimDisk;
    use crate::{Error, Options, Store};

    /// Reads through the read-ahead return what reads of the medium itself return: inside
    /// one chunk, across chunks, longer than a chunk, up to and past the end; as records
    /// of windows of any size (runs of them on through the file, and jumps) and as pages;
    /// with and without the reader thread.
    #[test]
    fn read_ahead_returns_the_bytes_of_the_medium() {
        use super::{ReadAhead, Wanted, READ_AHEAD};
        let len = 12 * READ_AHEAD + 777;
        let image: Vec<u8> = (0..len).map(|i| (i * 7 + i / 4096) as u8).collect();
        let disk = SimDisk::from_image(image.clone());
        let io = disk.io();
        let mut x = 12345u64;
        let mut next = |bound: u64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % bound
        };
        let chunk = READ_AHEAD;
        let mut reads: Vec<(u64, u64, Option<Wanted>)> = vec![
            (0, 4096, None),
            (chunk - 100, 200, None),
            (len - 10, 10, None),
            (5, chunk + 3, None),
        ];
        for _ in 0..300 {
            let mut offset = next(len);
            let window_end = offset + next(3 * chunk);
            // A run of records and pages on through the file, as the chain is read.
            for _ in 0..next(40) {
                let n = 1 + next(16 * 1024);
                if offset + n > len {
                    break;
                }
                let wanted = match next(3) {
                    0 => Wanted::Page,
                    _ => Wanted::Chain { window_end },
                };
                reads.push((offset, n, Some(wanted)));
                offset += n + next(3) * next(chunk / 2);
            }
        }
        std::thread::scope(|scope| {
            for threaded in [false, true] {
                let mut ahead = ReadAhead::new(io.as_ref(), len);
                if threaded {
                    ahead = ahead.prefetching(scope, 4096);
                }
                for &(offset, n, wanted) in &reads {
                    let mut got = vec![0u8; n as usize];
                    match wanted {
                        None => ahead.read_at(&mut got, offset).unwrap(),
                        Some(wanted) => ahead
                            .with_bytes(offset, n as usize, wanted, |bytes| got.copy_from_slice(bytes))
                            .unwrap(),
                    }
                    assert_eq!(
                        got,
                        &image[offset as usize..(offset + n) as usize],
                        "{offset}+{n}, thread {threaded}"
                    );
                }
                let mut past = vec![0u8; 20];
                assert!(
                    ahead.read_at(&mut past, len - 10).is_err(),
                    "a read past the end fails"
                );
            }
        });
    }

    /// A record with a valid CRC and chain that maps a page onto the checkpoint's slot was
    /// not written by this store: open must refuse it, not hand the slot out twice.
    #[test]
    fn a_record_mapping_a_page_onto_the_checkpoint_is_corrupt() {
        let opts = Options {
            page_size: 512,
            initial_capacity: 1 << 20,
            ..Options::default()
        };
        let disk = SimDisk::new();
        let store = Store::create_with_io(disk.io(), &opts).unwrap();
        let mut t = store.begin();
        let f = t.create_file("main").unwrap();
        t.write_page(f, 0, &[7u8; 512]).unwrap();
        t.commit().unwrap();
        drop(store);
        let image = disk.image();
        let header = Header::decode(&image[..HEADER_LEN]).unwrap();
        let at = slot_offset(header.log.first_slot, 512) as usize;
        let (mut record, _) = Record::decode(&image[at..at + 512]).unwrap();
        let target = header.checkpoint.first_slot;
        let target_at = slot_offset(target, 512) as usize;
        let target_crc = crc32c::crc32c(&image[target_at..target_at + 512]);
        for op in &mut record.ops {
            if let Op::Page { slot, crc, .. } = op {
                *slot = target;
                *crc = target_crc;
            }
        }
        let (bytes, _) = record.encode();
        let forged = SimDisk::from_image(image);
        forged.corrupt(at as u64, &bytes);
        let opened = Store::open_with_io(forged.io(), &opts);
        assert!(matches!(opened, Err(Error::Corrupt(_))), "{:?}", opened.err());
    }
}
