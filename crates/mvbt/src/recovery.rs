//! Create and open: the scan of every slot's header, the decision which version is the
//! latest committed one, Algorithm 2 (revert an uncommitted version) over the whole tree in
//! memory, and the deferred write of that revert before the first write transaction.

use crate::format::{self, HeaderBody, SlotImage, StampKind, ValidSlot, HEADER_NODE, INFINITY};
use crate::node::Node;
use crate::tree::PendingRevert;
use crate::{Config, Counters, Error, RecoveryReport, Result, Sabotage, StorageIo, Tree, Version};
use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

/// Bytes the open-time scan reads at once.
const SCAN_CHUNK_BYTES: usize = 1 << 20;

fn check_config(config: &Config) -> Result<()> {
    if !format::valid_node_size(config.node_size) {
        return Err(Error::Misuse(format!(
            "node_size {} is not supported: it must be 512..=8192 and a multiple of 512",
            config.node_size
        )));
    }
    Ok(())
}

fn empty_tree(io: Box<dyn StorageIo>, config: Config, node_size: usize) -> Tree {
    Tree {
        io,
        file_lock: None,
        config,
        node_size,
        recovery: RecoveryReport::default(),
        counters: Counters::default(),
        latest: 0,
        history_floor: 0,
        root: 0,
        root_level: 0,
        root_since: 0,
        cache: HashMap::new(),
        slots: Vec::new(),
        free: BTreeSet::new(),
        refs: HashMap::new(),
        txn: None,
        pending_revert: None,
        poisoned: None,
    }
}

pub(crate) fn create(io: Box<dyn StorageIo>, config: Config) -> Result<Tree> {
    check_config(&config)?;
    if io.size()? != 0 {
        return Err(Error::Misuse(
            "create needs an empty medium; this one holds data".into(),
        ));
    }
    let node_size = config.node_size;
    let mut tree = empty_tree(io, config, node_size);
    tree.grow()?;
    let root = tree.free.pop_first().expect("a grown file has free nodes");
    tree.root = root;
    tree.cache.insert(
        root,
        Node {
            leaf: true,
            cells: Vec::new(),
        },
    );
    tree.refs.insert(root, 1);
    // Version 0 is one batch of two images: the header and the empty root leaf.
    let stamp = Tree::stamp(0, StampKind::Commit, 2);
    tree.write_header(&stamp)?;
    tree.write_node(root, &stamp)?;
    tree.io.sync_data()?;
    tree.counters.fsyncs += 1;
    Ok(tree)
}

fn read_slot(io: &dyn StorageIo, size: u64, offset: u64, len: usize) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    if offset >= size {
        return Ok(buf);
    }
    // A slot cut short by the end of the file (an interrupted growth) reads as zeros beyond it.
    let avail = ((size - offset) as usize).min(len);
    io.read_at(&mut buf[..avail], offset)?;
    Ok(buf)
}

fn read_slot_into(io: &dyn StorageIo, size: u64, offset: u64, buf: &mut [u8]) -> Result<()> {
    // A slot cut short by the end of the file (an interrupted growth) reads as zeros beyond it.
    let avail = (size.saturating_sub(offset) as usize).min(buf.len());
    io.read_at(&mut buf[..avail], offset)?;
    buf[avail..].fill(0);
    Ok(())
}

/// Node `id`'s newest valid image: its slots in the order of the stamps they claim, each
/// verified (checksum, decode) until one is valid. A slot found torn is marked invalid.
fn newest_image(
    tree: &mut Tree,
    size: u64,
    id: u64,
    verified: &mut HashMap<u64, (usize, ValidSlot)>,
    report: &mut RecoveryReport,
) -> Result<Option<ValidSlot>> {
    if let Some((_, image)) = verified.remove(&id) {
        // Verified by the scan: the newest valid image of the file's newest version.
        return Ok(Some(image));
    }
    let claims = tree.slots[id as usize];
    let order = if claims[1] > claims[0] { [1, 0] } else { [0, 1] };
    let mut buf = vec![0u8; tree.node_size];
    for slot in order {
        if claims[slot].is_none() {
            continue;
        }
        read_slot_into(tree.io.as_ref(), size, tree.slot_offset(id, slot), &mut buf)?;
        match format::decode_slot(&buf, id) {
            SlotImage::Valid(v) => return Ok(Some(v)),
            _ => {
                tree.slots[id as usize][slot] = None;
                report.torn_slots += 1;
                if tree.config.sabotage == Some(Sabotage::NoFallbackFromTornClaim) {
                    break;
                }
            }
        }
    }
    Ok(None)
}

fn valid_header(buf: &[u8], node_size: usize) -> Option<ValidSlot> {
    match format::decode_slot(buf, HEADER_NODE) {
        SlotImage::Valid(v) if v.header.as_ref().map(|h| h.node_size as usize) == Some(node_size) => Some(v),
        _ => None,
    }
}

/// Find the node size from whichever header slot is intact.
fn detect_node_size(io: &dyn StorageIo, size: u64) -> Result<usize> {
    let head = read_slot(io, size, 0, 512)?;
    if let Some(ns) = format::header_claimed_node_size(&head) {
        if format::valid_node_size(ns) && valid_header(&read_slot(io, size, 0, ns)?, ns).is_some() {
            return Ok(ns);
        }
    }
    for ns in (512..=8192).step_by(512) {
        if size >= 2 * ns as u64 && valid_header(&read_slot(io, size, ns as u64, ns)?, ns).is_some() {
            return Ok(ns);
        }
    }
    if head.starts_with(format::SLOT_MAGIC) {
        Err(Error::Corrupt(
            "the mvbt file is damaged: both images of its header node are unreadable".into(),
        ))
    } else {
        Err(Error::Corrupt(format!(
            "is not an mvbt file: it does not start with an mvbt header ({size} bytes, first bytes {:02x?})",
            &head[..8.min(size as usize)]
        )))
    }
}

pub(crate) fn open(io: Box<dyn StorageIo>, config: Config) -> Result<Tree> {
    let started = Instant::now();
    check_config(&config)?;
    let size = io.size()?;
    if size == 0 {
        return Err(Error::Corrupt("is not an mvbt file: it is empty".into()));
    }
    let node_size = detect_node_size(io.as_ref(), size)?;
    let config = Config { node_size, ..config };
    let mut tree = empty_tree(io, config, node_size);
    let mut report = RecoveryReport::default();

    // Scan every slot's header: the stamps decide which version is the latest committed
    // one. A slot is verified (checksum, decode) only where open relies on it: here every
    // slot claiming at least the highest valid stamp seen so far (so the newest version and
    // all its images are known, as valid), and in the walk below each reachable node's
    // newest image. Other slots are only read for the stamp they claim, kept in `slots`
    // (where a wrong claim can only make a write pick that slot, which is then overwritten).
    let ids = size.div_ceil(2 * node_size as u64);
    tree.slots = vec![[None, None]; ids as usize];
    let mut headers: Vec<ValidSlot> = Vec::new();
    // The highest version any node slot claims, and its valid images (one per node).
    let mut top: Version = 0;
    let mut top_images: HashMap<u64, (usize, ValidSlot)> = HashMap::new();
    // Read in large chunks: recovery reads the whole file, and one read per slot would cost
    // a system call (or, cold, a device request) per 512..8192 bytes.
    let ids_per_chunk = (SCAN_CHUNK_BYTES / (2 * node_size)).max(1) as u64;
    let mut chunk = vec![0u8; (ids.min(ids_per_chunk) * 2 * node_size as u64) as usize];
    let mut chunk_first = 0;
    for id in 0..ids {
        if id % ids_per_chunk == 0 {
            chunk_first = id;
            let offset = tree.slot_offset(id, 0);
            let len = ((ids - id).min(ids_per_chunk) * 2 * node_size as u64) as usize;
            read_slot_into(tree.io.as_ref(), size, offset, &mut chunk[..len])?;
        }
        for slot in 0..2 {
            let at = ((id - chunk_first) as usize * 2 + slot) * node_size;
            let buf = &chunk[at..at + node_size];
            tree.counters.nodes_read += 1;
            if id == HEADER_NODE {
                match format::decode_slot(buf, id) {
                    SlotImage::Empty => {}
                    SlotImage::Torn => report.torn_slots += 1,
                    SlotImage::Valid(v) => {
                        tree.slots[0][slot] = Some(v.stamp);
                        headers.push(v);
                    }
                }
                continue;
            }
            let Some(claim) = format::claimed_stamp(buf, id) else {
                report.torn_slots += buf.starts_with(format::SLOT_MAGIC) as u64;
                continue;
            };
            tree.slots[id as usize][slot] = Some(claim);
            if claim < top {
                continue;
            }
            match format::decode_slot(buf, id) {
                SlotImage::Valid(v) => {
                    if claim > top {
                        top = claim;
                        top_images.clear();
                    }
                    top_images.entry(id).or_insert((slot, v));
                }
                _ => {
                    tree.slots[id as usize][slot] = None;
                    report.torn_slots += 1;
                }
            }
        }
    }
    report.nodes_scanned = ids;
    if headers.is_empty() {
        return Err(Error::Corrupt(
            "the mvbt file is damaged: both images of its header node are unreadable".into(),
        ));
    }

    // The newest version: its Commit images must number their batch count.
    let v_max = headers.iter().map(|h| h.stamp).max().unwrap_or(0).max(top);
    let top_valid = top_images.values().map(|(_, v)| v).filter(|v| v.stamp == v_max);
    let commit_images: Vec<u32> = headers
        .iter()
        .filter(|h| h.stamp == v_max)
        .chain(top_valid)
        .filter(|v| v.stamp_kind == StampKind::Commit)
        .map(|v| v.batch)
        .collect();
    let committed =
        !commit_images.is_empty() && commit_images.iter().all(|&b| b as usize == commit_images.len());
    let uncommitted = if committed {
        None
    } else if v_max == 0 {
        return Err(Error::Corrupt(
            "is not an mvbt file: its creation never completed".into(),
        ));
    } else {
        Some(v_max)
    };
    let latest = if committed { v_max } else { v_max - 1 };

    let header: HeaderBody = headers
        .iter()
        .filter(|h| h.stamp <= latest)
        .max_by_key(|h| h.stamp)
        .and_then(|h| h.header.clone())
        .ok_or_else(|| {
            Error::Corrupt(format!(
                "the mvbt file is damaged: no header image of a committed version (≤ {latest})"
            ))
        })?;
    if header.root == HEADER_NODE || header.root >= ids || header.root_level > 64 {
        return Err(Error::Corrupt(format!(
            "the mvbt file is damaged: its header names root node {} at level {} but the file holds {ids} node ids",
            header.root, header.root_level
        )));
    }

    // Walk everything reachable (dead entries too), reverting the uncommitted version.
    let revert_ends = tree.config.sabotage != Some(Sabotage::SkipRevertEndVersions);
    let mut rewrite = BTreeSet::new();
    let mut levels: HashMap<u64, u32> = HashMap::new();
    let mut stack = vec![(header.root, header.root_level)];
    tree.refs.insert(header.root, 1);
    while let Some((id, level)) = stack.pop() {
        if let Some(&seen) = levels.get(&id) {
            if seen != level {
                return Err(Error::Corrupt(format!(
                    "the mvbt file is damaged: node {id} is reached at levels {seen} and {level}"
                )));
            }
            continue;
        }
        levels.insert(id, level);
        let slot = newest_image(&mut tree, size, id, &mut top_images, &mut report)?.ok_or_else(|| {
            Error::Corrupt(format!(
                "the mvbt file is damaged: node {id} (level {level}) has no valid image: both slots are torn, empty or past the end of the file"
            ))
        })?;
        let mut node = slot.node.expect("a valid non-header slot holds a node");
        if node.leaf != (level == 0) {
            return Err(Error::Corrupt(format!(
                "the mvbt file is damaged: node {id} is a {} at level {level}",
                if node.leaf { "leaf" } else { "internal node" }
            )));
        }
        if Some(slot.stamp) == uncommitted {
            report.cells_reverted += revert_version(&mut node, slot.stamp, revert_ends);
            rewrite.insert(id);
        }
        if !node.leaf {
            for c in &node.cells {
                if c.child == HEADER_NODE || c.child >= ids {
                    return Err(Error::Corrupt(format!(
                        "the mvbt file is damaged: node {id} names child {} outside the file",
                        c.child
                    )));
                }
                *tree.refs.entry(c.child).or_insert(0) += 1;
                stack.push((c.child, level - 1));
            }
        }
        tree.cache.insert(id, node);
    }

    tree.root = header.root;
    tree.root_level = header.root_level;
    tree.root_since = header.root_since;
    tree.latest = latest;
    tree.history_floor = latest;
    tree.free = (1..ids).filter(|id| !levels.contains_key(id)).collect();

    // The reverted version's images stay on disk until the next write transaction
    // (`settle_revert`): until then the file is exactly the crash image, which another
    // crash leaves to the next open to recover the same way. A read-only session never
    // writes.
    if let Some(v) = uncommitted {
        tree.pending_revert = Some(PendingRevert { version: v, rewrite });
        report.reverted_version = Some(v);
    }
    report.latest_version = latest;
    report.micros = started.elapsed().as_micros() as u64;
    tree.recovery = report;
    Ok(tree)
}

/// Algorithm 2 on one node image stamped `v`, the uncommitted version: what `v` created goes
/// (with the children its entries made), what `v` ended lives again. Returns the cells
/// changed. `revert_ends` false is the sabotage `SkipRevertEndVersions`.
pub(crate) fn revert_version(node: &mut Node, v: Version, revert_ends: bool) -> u64 {
    let before = node.cells.len();
    node.cells.retain(|c| c.sv != v);
    let mut reverted = (before - node.cells.len()) as u64;
    for c in node.cells.iter_mut().filter(|c| c.ev == v) {
        if revert_ends {
            c.ev = INFINITY;
        }
        reverted += 1;
    }
    reverted
}

impl Tree {
    /// Neutralise every image of the version open reverted, before this session writes
    /// anything: reachable nodes get their reverted image (stamped as a spill, so it never
    /// counts as a commit), every other image of the version is zeroed, and one sync makes
    /// that durable. Only then may the version number be reused, so no stale Commit image
    /// can make the reuse look committed or incomplete. A cut part way leaves fewer images
    /// of the version, never a complete Commit batch, so the next open reverts it again.
    pub(crate) fn settle_revert(&mut self) -> Result<()> {
        let Some(pending) = self.pending_revert.take() else {
            return Ok(());
        };
        if self.config.sabotage == Some(Sabotage::SkipDeferredRevert) {
            return Ok(());
        }
        let v = pending.version;
        let stamp = Tree::stamp(v, StampKind::Spill, 0);
        let mut written = 0;
        let mut rewritten = BTreeSet::new();
        for &id in &pending.rewrite {
            rewritten.insert((id, self.slot_for_write(id, v)));
            self.write_node(id, &stamp)?;
            written += 1;
        }
        // Every other slot claiming the version, valid or torn.
        let zeros = vec![0u8; self.node_size];
        for id in 0..self.capacity_nodes() {
            for slot in 0..2 {
                if self.slots[id as usize][slot] == Some(v) && !rewritten.contains(&(id, slot)) {
                    self.io.write_at(&zeros, self.slot_offset(id, slot))?;
                    self.slots[id as usize][slot] = None;
                    written += 1;
                }
            }
        }
        self.io.sync_data()?;
        self.counters.fsyncs += 1;
        self.recovery.nodes_rewritten += written;
        Ok(())
    }
}
