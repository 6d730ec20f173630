//! The on-disk format: slot images (a 40-byte slot header, then cells) and the header node.
//!
//! Slot header (little endian):
//! `0..4` magic `MVBT`, `4..8` crc32c of bytes `8..node_size`, `8..16` node id,
//! `16` kind (0 header, 1 leaf, 2 internal), `17` stamp kind (1 commit, 2 spill),
//! `18..20` cell count, `20..24` batch count, `24..32` stamp version, `32..36` body bytes.

use crate::{Error, Result};

pub(crate) const SLOT_MAGIC: &[u8; 4] = b"MVBT";
pub(crate) const FILE_MAGIC: &[u8; 13] = b"ONESYNC-MVBT\0";
pub(crate) const FORMAT_VERSION: u32 = 1;
pub(crate) const SLOT_HEADER: usize = 40;
pub(crate) const LEAF_CELL_FIXED: usize = 26;
pub(crate) const INTERNAL_CELL: usize = 32;
pub(crate) const INFINITY: u64 = u64::MAX;
pub(crate) const HEADER_NODE: u64 = 0;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NodeKind {
    Header,
    Leaf,
    Internal,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StampKind {
    Commit,
    Spill,
}

/// One cell: a leaf's key/value or an internal node's router, with its life span [sv, ev).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Cell {
    pub key: i64,
    pub sv: u64,
    pub ev: u64,
    /// Internal cells only.
    pub child: u64,
    /// Leaf cells only.
    pub value: Vec<u8>,
}

impl Cell {
    pub fn alive_at(&self, version: u64) -> bool {
        self.sv <= version && version < self.ev
    }
    /// An internal node's entry routing keys from `key` to `child` during [sv, ev).
    pub fn entry(key: i64, sv: u64, ev: u64, child: u64) -> Cell {
        Cell {
            key,
            sv,
            ev,
            child,
            value: Vec::new(),
        }
    }
    /// Bytes the cell takes in a leaf or an internal node.
    pub fn size_in(&self, leaf: bool) -> usize {
        if leaf {
            LEAF_CELL_FIXED + self.value.len()
        } else {
            INTERNAL_CELL
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Node {
    pub leaf: bool,
    /// Sorted by (key, sv).
    pub cells: Vec<Cell>,
}

impl Node {
    pub fn cell_size(&self, cell: &Cell) -> usize {
        cell.size_in(self.leaf)
    }
    /// Inserts `cell` at its place in (key, sv) order.
    pub fn insert_sorted(&mut self, cell: Cell) {
        let at = self
            .cells
            .partition_point(|c| (c.key, c.sv) < (cell.key, cell.sv));
        self.cells.insert(at, cell);
    }
    /// Ends at `v` the cells alive at `v` that `pick` chooses, for a split or a move: returns
    /// their copies born at `v`, and the children of those that `v` itself created (dropped
    /// outright, not ended: no other version ever saw them).
    pub fn end_at(&mut self, v: u64, pick: impl Fn(&Cell) -> bool) -> (Vec<Cell>, Vec<u64>) {
        let mut copies = Vec::new();
        let mut dropped_children = Vec::new();
        self.cells.retain_mut(|c| {
            if !(c.alive_at(v) && pick(c)) {
                return true;
            }
            copies.push(Cell {
                sv: v,
                ev: INFINITY,
                ..c.clone()
            });
            if c.sv == v {
                dropped_children.push(c.child);
                return false;
            }
            c.ev = v;
            true
        });
        (copies, dropped_children)
    }
    /// Index of this internal node's entry for `child` alive at `version`.
    pub fn live_entry_of(&self, child: u64, version: u64) -> Option<usize> {
        self.cells
            .iter()
            .position(|c| c.child == child && c.alive_at(version))
    }
    pub fn used(&self) -> usize {
        self.cells.iter().map(|c| self.cell_size(c)).sum()
    }
    pub fn sort(&mut self) {
        self.cells.sort_by_key(|c| (c.key, c.sv));
    }
    /// Index of the cell with `key` alive at `version`.
    pub fn find_alive(&self, key: i64, version: u64) -> Option<usize> {
        let start = self.cells.partition_point(|c| c.key < key);
        (start..self.cells.len())
            .take_while(|&i| self.cells[i].key == key)
            .find(|&i| self.cells[i].alive_at(version))
    }
    /// The internal entry routing `key` at `version`: the last alive entry whose key is
    /// `<= key` (the first alive one if none is, which a sound tree never needs).
    pub fn route(&self, key: i64, version: u64) -> Option<usize> {
        let mut first = None;
        let mut best = None;
        for (i, c) in self.cells.iter().enumerate() {
            if !c.alive_at(version) {
                continue;
            }
            if first.is_none() {
                first = Some(i);
            }
            if c.key <= key {
                best = Some(i);
            } else {
                break;
            }
        }
        best.or(first)
    }
}

/// The header node's body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HeaderBody {
    pub node_size: u32,
    pub root: u64,
    pub root_level: u32,
    /// The version from which `root` is the root (older versions go through its dead entry).
    pub root_since: u64,
    /// The version that last wrote the header (informational when metadata is embedded).
    pub version: u64,
}

/// What a slot holds.
#[derive(Clone, Debug)]
pub(crate) enum SlotImage {
    /// Zeros or foreign bytes.
    Empty,
    /// Our magic but a bad checksum or a wrong id: a torn write.
    Torn,
    Valid(ValidSlot),
}

#[derive(Clone, Debug)]
pub(crate) struct ValidSlot {
    pub stamp: u64,
    pub stamp_kind: StampKind,
    pub batch: u32,
    pub node: Option<Node>,
    pub header: Option<HeaderBody>,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

pub(crate) struct Stamp {
    pub version: u64,
    pub kind: StampKind,
    pub batch: u32,
}

fn finish(buf: &mut [u8], id: u64, kind: NodeKind, cells: usize, body: usize, stamp: &Stamp) {
    buf[0..4].copy_from_slice(SLOT_MAGIC);
    buf[8..16].copy_from_slice(&id.to_le_bytes());
    buf[16] = match kind {
        NodeKind::Header => 0,
        NodeKind::Leaf => 1,
        NodeKind::Internal => 2,
    };
    buf[17] = match stamp.kind {
        StampKind::Commit => 1,
        StampKind::Spill => 2,
    };
    buf[18..20].copy_from_slice(&(cells as u16).to_le_bytes());
    buf[20..24].copy_from_slice(&stamp.batch.to_le_bytes());
    buf[24..32].copy_from_slice(&stamp.version.to_le_bytes());
    buf[32..36].copy_from_slice(&(body as u32).to_le_bytes());
    let crc = crc32c::crc32c(&buf[8..]);
    buf[4..8].copy_from_slice(&crc.to_le_bytes());
}

pub(crate) fn encode_node(node_size: usize, id: u64, node: &Node, stamp: &Stamp) -> Result<Vec<u8>> {
    let body = node.used();
    if SLOT_HEADER + body > node_size || node.cells.len() > u16::MAX as usize {
        return Err(Error::Corrupt(format!(
            "internal error: node {id} holds {body} bytes of cells, more than a {node_size}-byte node"
        )));
    }
    let mut buf = vec![0u8; node_size];
    let mut at = SLOT_HEADER;
    for c in &node.cells {
        buf[at..at + 8].copy_from_slice(&c.key.to_le_bytes());
        buf[at + 8..at + 16].copy_from_slice(&c.sv.to_le_bytes());
        buf[at + 16..at + 24].copy_from_slice(&c.ev.to_le_bytes());
        if node.leaf {
            buf[at + 24..at + 26].copy_from_slice(&(c.value.len() as u16).to_le_bytes());
            buf[at + 26..at + 26 + c.value.len()].copy_from_slice(&c.value);
            at += LEAF_CELL_FIXED + c.value.len();
        } else {
            buf[at + 24..at + 32].copy_from_slice(&c.child.to_le_bytes());
            at += INTERNAL_CELL;
        }
    }
    let kind = if node.leaf {
        NodeKind::Leaf
    } else {
        NodeKind::Internal
    };
    finish(&mut buf, id, kind, node.cells.len(), body, stamp);
    Ok(buf)
}

const HEADER_BODY_LEN: usize = 13 + 4 + 4 + 8 + 4 + 8 + 8;

pub(crate) fn encode_header(node_size: usize, header: &HeaderBody, stamp: &Stamp) -> Vec<u8> {
    let mut buf = vec![0u8; node_size];
    let b = &mut buf[SLOT_HEADER..];
    b[0..13].copy_from_slice(FILE_MAGIC);
    b[13..17].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    b[17..21].copy_from_slice(&header.node_size.to_le_bytes());
    b[21..29].copy_from_slice(&header.root.to_le_bytes());
    b[29..33].copy_from_slice(&header.root_level.to_le_bytes());
    b[33..41].copy_from_slice(&header.root_since.to_le_bytes());
    b[41..49].copy_from_slice(&header.version.to_le_bytes());
    finish(&mut buf, HEADER_NODE, NodeKind::Header, 0, HEADER_BODY_LEN, stamp);
    buf
}

/// The node size a header slot image claims, if `buf` starts like one.
pub(crate) fn header_claimed_node_size(buf: &[u8]) -> Option<usize> {
    if buf.len() < SLOT_HEADER + HEADER_BODY_LEN || &buf[0..4] != SLOT_MAGIC || buf[16] != 0 {
        return None;
    }
    let b = &buf[SLOT_HEADER..];
    if &b[0..13] != FILE_MAGIC {
        return None;
    }
    Some(u32_at(b, 17) as usize)
}

/// Decode and validate one slot image of node `id`.
pub(crate) fn decode_slot(buf: &[u8], id: u64) -> SlotImage {
    if buf.len() < SLOT_HEADER || &buf[0..4] != SLOT_MAGIC {
        return SlotImage::Empty;
    }
    let crc = u32_at(buf, 4);
    if crc32c::crc32c(&buf[8..]) != crc || u64_at(buf, 8) != id {
        return SlotImage::Torn;
    }
    match decode_valid(buf, id) {
        Some(v) => SlotImage::Valid(v),
        // A checksummed image we cannot parse: treat as torn rather than trust it.
        None => SlotImage::Torn,
    }
}

fn decode_valid(buf: &[u8], id: u64) -> Option<ValidSlot> {
    let kind = match buf[16] {
        0 if id == HEADER_NODE => NodeKind::Header,
        1 if id != HEADER_NODE => NodeKind::Leaf,
        2 if id != HEADER_NODE => NodeKind::Internal,
        _ => return None,
    };
    let stamp_kind = match buf[17] {
        1 => StampKind::Commit,
        2 => StampKind::Spill,
        _ => return None,
    };
    let ncells = u16_at(buf, 18) as usize;
    let batch = u32_at(buf, 20);
    let stamp = u64_at(buf, 24);
    let body = u32_at(buf, 32) as usize;
    if SLOT_HEADER + body > buf.len() {
        return None;
    }
    let mut slot = ValidSlot {
        stamp,
        stamp_kind,
        batch,
        node: None,
        header: None,
    };
    match kind {
        NodeKind::Header => {
            let b = &buf[SLOT_HEADER..];
            if body < HEADER_BODY_LEN || &b[0..13] != FILE_MAGIC || u32_at(b, 13) != FORMAT_VERSION {
                return None;
            }
            slot.header = Some(HeaderBody {
                node_size: u32_at(b, 17),
                root: u64_at(b, 21),
                root_level: u32_at(b, 29),
                root_since: u64_at(b, 33),
                version: u64_at(b, 41),
            });
        }
        NodeKind::Leaf | NodeKind::Internal => {
            let leaf = kind == NodeKind::Leaf;
            let end = SLOT_HEADER + body;
            let mut at = SLOT_HEADER;
            let mut cells = Vec::with_capacity(ncells);
            for _ in 0..ncells {
                let fixed = if leaf { LEAF_CELL_FIXED } else { INTERNAL_CELL };
                if at + fixed > end {
                    return None;
                }
                let key = u64_at(buf, at) as i64;
                let sv = u64_at(buf, at + 8);
                let ev = u64_at(buf, at + 16);
                let (child, value) = if leaf {
                    let len = u16_at(buf, at + 24) as usize;
                    if at + fixed + len > end {
                        return None;
                    }
                    (0, buf[at + 26..at + 26 + len].to_vec())
                } else {
                    (u64_at(buf, at + 24), Vec::new())
                };
                at += fixed + value.len();
                cells.push(Cell {
                    key,
                    sv,
                    ev,
                    child,
                    value,
                });
            }
            if at != end {
                return None;
            }
            slot.node = Some(Node { leaf, cells });
        }
    }
    Some(slot)
}

pub(crate) fn valid_node_size(node_size: usize) -> bool {
    (512..=8192).contains(&node_size) && node_size.is_multiple_of(512)
}

/// The largest value for which at least four cells fit a node.
pub(crate) fn max_value_len(node_size: usize) -> usize {
    (node_size - SLOT_HEADER) / 4 - LEAF_CELL_FIXED
}

#[cfg(test)]
mod golden {
    use super::*;

    /// Pinned before the move onto `onesync_codec`: (length, CRC-32C of the whole image).
    fn fingerprint(image: &[u8]) -> (usize, u32) {
        (image.len(), crc32c::crc32c(image))
    }

    pub(super) fn sample_leaf() -> Node {
        Node {
            leaf: true,
            cells: vec![
                Cell {
                    key: -5,
                    sv: 1,
                    ev: INFINITY,
                    child: 0,
                    value: b"minus five".to_vec(),
                },
                Cell {
                    key: 7,
                    sv: 2,
                    ev: 9,
                    child: 0,
                    value: Vec::new(),
                },
                Cell {
                    key: i64::MAX,
                    sv: 3,
                    ev: INFINITY,
                    child: 0,
                    value: vec![0xab; 40],
                },
            ],
        }
    }

    pub(super) fn sample_internal() -> Node {
        Node {
            leaf: false,
            cells: vec![Cell::entry(i64::MIN, 1, INFINITY, 12), Cell::entry(100, 4, 8, 13)],
        }
    }

    pub(super) fn sample_header() -> HeaderBody {
        HeaderBody {
            node_size: 1024,
            root: 12,
            root_level: 1,
            root_since: 4,
            version: 9,
        }
    }

    #[test]
    fn slot_images_keep_their_bytes() {
        let commit = Stamp {
            version: 9,
            kind: StampKind::Commit,
            batch: 0,
        };
        let spill = Stamp {
            version: 10,
            kind: StampKind::Spill,
            batch: 3,
        };
        let leaf = encode_node(1024, 5, &sample_leaf(), &commit).unwrap();
        let internal = encode_node(512, 12, &sample_internal(), &spill).unwrap();
        let header = encode_header(1024, &sample_header(), &commit);
        assert_eq!(
            [fingerprint(&leaf), fingerprint(&internal), fingerprint(&header)],
            [(1024, 336804444), (512, 358625210), (1024, 2751707859)]
        );
    }
}
