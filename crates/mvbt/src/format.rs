//! The on-disk format: slot images (a 40-byte slot header, then a body) of tree nodes and of
//! the header node.
//!
//! The file is a sequence of slots of `node_size` bytes (512 to 8192, a multiple of 512):
//! node `i` has two, at `(2i) × node_size` and `(2i + 1) × node_size`. Integers are
//! little-endian; fields follow each other with no padding. [`Slot`] is a slot image's
//! [`OnDisk`] encoding (context: the node size); a slot is zero-filled past its body. The
//! decoded cells and nodes, and what the tree does with them, are in `node.rs`.
//!
//! # Slot header (40 bytes, every slot)
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 4 | magic | `b"MVBT"` (other bytes: an empty slot) |
//! | 4 | 4 | CRC | u32, CRC-32C of bytes `8..node_size` (wrong: a torn write) |
//! | 8 | 8 | node id | u64, must be the id whose slot this is |
//! | 16 | 1 | kind | 0 header (node 0 only), 1 leaf, 2 internal (never node 0) |
//! | 17 | 1 | stamp kind | 1 commit, 2 spill |
//! | 18 | 2 | cell count | u16 (header: 0) |
//! | 20 | 4 | batch | u32, images its commit wrote (0 for spills) |
//! | 24 | 8 | stamp version | u64, the transaction that wrote this image |
//! | 32 | 4 | body length | u32, bytes of body after the slot header |
//! | 36 | 4 | reserved | 0 |
//!
//! # Leaf body: `cell count` cells, sorted by (key, sv), exactly `body length` bytes
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 8 | key | i64 |
//! | 8 | 8 | sv | u64, first version the cell is alive at |
//! | 16 | 8 | ev | u64, first version it is dead at (`u64::MAX`: ∞) |
//! | 24 | 2 | value length | u16, `n` |
//! | 26 | n | value | |
//!
//! # Internal body: `cell count` cells of 32 bytes, sorted by (key, sv)
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 8 | key | i64, low key of the child's range |
//! | 8 | 8 | sv | u64 |
//! | 16 | 8 | ev | u64 |
//! | 24 | 8 | child | u64, node id |
//!
//! # Header body (node 0, 49 bytes; a longer body's extra bytes are ignored)
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 13 | file magic | `b"ONESYNC-MVBT\0"` |
//! | 13 | 4 | format version | u32, `FORMAT_VERSION` (1) |
//! | 17 | 4 | node size | u32 |
//! | 21 | 8 | root | u64, root node id |
//! | 29 | 4 | root level | u32 |
//! | 33 | 8 | root since | u64, version from which `root` is the root |
//! | 41 | 8 | version | u64, the version that last wrote the header |

use onesync_codec::{DecodeError, OnDisk, Reader, Writer};

use crate::node::{Cell, Node};
use crate::{Error, Result};

pub(crate) const SLOT_MAGIC: &[u8; 4] = b"MVBT";
pub(crate) const FILE_MAGIC: &[u8; 13] = b"ONESYNC-MVBT\0";
pub(crate) const FORMAT_VERSION: u32 = 1;
pub(crate) const SLOT_HEADER: usize = 40;
pub(crate) const LEAF_CELL_FIXED: usize = 26;
pub(crate) const INTERNAL_CELL: usize = 32;
pub(crate) use crate::node::INFINITY;
pub(crate) const HEADER_NODE: u64 = 0;

// What cells and nodes take on disk lives here, beside their byte tables.
impl Cell {
    /// Bytes the cell takes in a leaf or an internal node.
    pub fn size_in(&self, leaf: bool) -> usize {
        if leaf {
            LEAF_CELL_FIXED + self.value.len()
        } else {
            INTERNAL_CELL
        }
    }
}

impl Node {
    pub fn cell_size(&self, cell: &Cell) -> usize {
        cell.size_in(self.leaf)
    }
    /// Bytes the node's cells take.
    pub fn used(&self) -> usize {
        self.cells.iter().map(|c| self.cell_size(c)).sum()
    }
}
/// Offset of the CRC field; the CRC covers everything after it.
const CRC_AT: usize = 4;
const CRC_FROM: usize = 8;
const ID_AT: usize = 8;
const STAMP_VERSION_AT: usize = 24;
/// Offset of the kind byte (read before the CRC by [`header_claimed_node_size`]).
const KIND_AT: usize = 16;
const HEADER_BODY_LEN: usize = 13 + 4 + 4 + 8 + 4 + 8 + 8;
/// Offset of the node size in the header body.
const HEADER_NODE_SIZE_AT: usize = 17;

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

/// What every slot image records about the write that made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub version: u64,
    pub kind: StampKind,
    pub batch: u32,
}

/// A slot's body: the header node's, or a tree node's cells.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SlotBody {
    Header(HeaderBody),
    Node(Node),
}

/// One slot image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Slot {
    pub id: u64,
    pub stamp: Stamp,
    pub body: SlotBody,
}

impl OnDisk for Slot {
    const NAME: &'static str = "mvbt slot";
    /// The node size.
    type Context = usize;

    fn encode(&self, node_size: &usize, w: &mut Writer) {
        let body = match &self.body {
            SlotBody::Header(h) => BodyRef::Header(h),
            SlotBody::Node(n) => BodyRef::Node(n),
        };
        write_slot(w, *node_size, self.id, &self.stamp, body);
    }

    fn decode(node_size: &usize, r: &mut Reader<'_>) -> std::result::Result<Slot, DecodeError> {
        let image = r.take(*node_size)?;
        let mut s = Reader::new(Self::NAME, image);
        s.magic(SLOT_MAGIC)?;
        let stored = s.u32()?;
        s.check_sum(stored, crc32c::crc32c(&image[CRC_FROM..]))?;
        let id = s.u64()?;
        let kind = match (s.u8()?, id == HEADER_NODE) {
            (0, true) => NodeKind::Header,
            (1, false) => NodeKind::Leaf,
            (2, false) => NodeKind::Internal,
            (k, _) => return Err(s.invalid(format!("kind {k} for node {id}"))),
        };
        let stamp_kind = match s.u8()? {
            1 => StampKind::Commit,
            2 => StampKind::Spill,
            k => return Err(s.invalid(format!("stamp kind {k}"))),
        };
        let ncells = s.u16()? as usize;
        let batch = s.u32()?;
        let version = s.u64()?;
        let body_len = s.u32()? as usize;
        s.skip(4)?;
        if body_len > s.remaining() {
            return Err(s.invalid(format!("a {body_len}-byte body does not fit")));
        }
        let mut b = Reader::new(Self::NAME, s.take(body_len)?);
        let body = match kind {
            NodeKind::Header => {
                if body_len < HEADER_BODY_LEN {
                    return Err(b.invalid("the header body is short"));
                }
                b.magic(FILE_MAGIC)?;
                if b.u32()? != FORMAT_VERSION {
                    return Err(b.invalid("unknown format version"));
                }
                SlotBody::Header(HeaderBody {
                    node_size: b.u32()?,
                    root: b.u64()?,
                    root_level: b.u32()?,
                    root_since: b.u64()?,
                    version: b.u64()?,
                })
            }
            NodeKind::Leaf | NodeKind::Internal => {
                let leaf = kind == NodeKind::Leaf;
                let mut cells = Vec::with_capacity(ncells.min(body_len / LEAF_CELL_FIXED));
                for _ in 0..ncells {
                    let (key, sv, ev) = (b.u64()? as i64, b.u64()?, b.u64()?);
                    let (child, value) = if leaf {
                        let len = b.u16()? as usize;
                        (0, b.take(len)?.to_vec())
                    } else {
                        (b.u64()?, Vec::new())
                    };
                    cells.push(Cell {
                        key,
                        sv,
                        ev,
                        child,
                        value,
                    });
                }
                b.expect_end()?;
                SlotBody::Node(Node { leaf, cells })
            }
        };
        Ok(Slot {
            id,
            stamp: Stamp {
                version,
                kind: stamp_kind,
                batch,
            },
            body,
        })
    }
}

/// A body to encode, borrowed (a node is encoded on every write; no copy of it is made).
enum BodyRef<'a> {
    Header(&'a HeaderBody),
    Node(&'a Node),
}

fn write_slot(w: &mut Writer, node_size: usize, id: u64, stamp: &Stamp, body: BodyRef<'_>) {
    let start = w.len();
    let (kind, ncells, body_len) = match body {
        BodyRef::Header(_) => (0, 0, HEADER_BODY_LEN),
        BodyRef::Node(n) => (if n.leaf { 1 } else { 2 }, n.cells.len(), n.used()),
    };
    let stamp_kind = match stamp.kind {
        StampKind::Commit => 1,
        StampKind::Spill => 2,
    };
    w.bytes(SLOT_MAGIC)
        .u32(0) // the CRC, patched below
        .u64(id)
        .u8(kind)
        .u8(stamp_kind)
        .u16(ncells as u16)
        .u32(stamp.batch)
        .u64(stamp.version)
        .u32(body_len as u32)
        .u32(0);
    match body {
        BodyRef::Header(h) => {
            w.bytes(FILE_MAGIC)
                .u32(FORMAT_VERSION)
                .u32(h.node_size)
                .u64(h.root)
                .u32(h.root_level)
                .u64(h.root_since)
                .u64(h.version);
        }
        BodyRef::Node(n) => {
            for c in &n.cells {
                w.u64(c.key as u64).u64(c.sv).u64(c.ev);
                if n.leaf {
                    w.u16(c.value.len() as u16).bytes(&c.value);
                } else {
                    w.u64(c.child);
                }
            }
        }
    }
    w.pad_to(start + node_size);
    let crc = crc32c::crc32c(&w.as_bytes()[start + CRC_FROM..]);
    w.patch_u32(start + CRC_AT, crc);
}

pub(crate) fn encode_node(node_size: usize, id: u64, node: &Node, stamp: &Stamp) -> Result<Vec<u8>> {
    let body = node.used();
    if SLOT_HEADER + body > node_size || node.cells.len() > u16::MAX as usize {
        return Err(Error::Corrupt(format!(
            "internal error: node {id} holds {body} bytes of cells, more than a {node_size}-byte node"
        )));
    }
    let mut w = Writer::with_capacity(node_size);
    write_slot(&mut w, node_size, id, stamp, BodyRef::Node(node));
    Ok(w.into_bytes())
}

pub(crate) fn encode_header(node_size: usize, header: &HeaderBody, stamp: &Stamp) -> Vec<u8> {
    let mut w = Writer::with_capacity(node_size);
    write_slot(&mut w, node_size, HEADER_NODE, stamp, BodyRef::Header(header));
    w.into_bytes()
}

/// The node size a header slot image claims, if `buf` starts like one (read before the
/// node size, and so the CRC's extent, is known).
pub(crate) fn header_claimed_node_size(buf: &[u8]) -> Option<usize> {
    if buf.len() < SLOT_HEADER + HEADER_BODY_LEN {
        return None;
    }
    let mut r = Reader::new(Slot::NAME, buf);
    r.magic(SLOT_MAGIC).ok()?;
    r.skip(KIND_AT - r.position()).ok()?;
    if r.u8().ok()? != 0 {
        return None;
    }
    r.skip(SLOT_HEADER - r.position()).ok()?;
    r.magic(FILE_MAGIC).ok()?;
    r.skip(SLOT_HEADER + HEADER_NODE_SIZE_AT - r.position()).ok()?;
    Some(r.u32().ok()? as usize)
}

/// Decode and validate one slot image of node `id`.
pub(crate) fn decode_slot(buf: &[u8], id: u64) -> SlotImage {
    if buf.len() < SLOT_HEADER || !buf.starts_with(SLOT_MAGIC) {
        return SlotImage::Empty;
    }
    // A checksummed image we cannot parse, or another node's, is treated as torn rather
    // than trusted.
    match Slot::from_bytes(&buf.len(), buf) {
        Ok(slot) if slot.id == id => {
            let (node, header) = match slot.body {
                SlotBody::Header(h) => (None, Some(h)),
                SlotBody::Node(n) => (Some(n), None),
            };
            SlotImage::Valid(ValidSlot {
                stamp: slot.stamp.version,
                stamp_kind: slot.stamp.kind,
                batch: slot.stamp.batch,
                node,
                header,
            })
        }
        _ => SlotImage::Torn,
    }
}

/// The stamp version a slot image claims in its slot header (bytes 24..32), read without
/// checking its CRC or decoding its body: `None` for a slot without our magic or with
/// another node's id. A claim may be a torn write's; open verifies the claims it relies on.
pub(crate) fn claimed_stamp(buf: &[u8], id: u64) -> Option<u64> {
    let field = |at: usize| {
        buf.get(at..at + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
    };
    if !buf.starts_with(SLOT_MAGIC) || field(ID_AT)? != id {
        return None;
    }
    field(STAMP_VERSION_AT)
}

/// Recomputes a slot image's CRC (for the fuzz tests: damage then reaches the field checks).
#[cfg(test)]
pub(crate) fn reseal(image: &mut [u8]) {
    if image.len() >= CRC_FROM {
        let crc = crc32c::crc32c(&image[CRC_FROM..]);
        image[CRC_AT..CRC_FROM].copy_from_slice(&crc.to_le_bytes());
    }
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

#[cfg(test)]
mod tests {
    use onesync_codec::fuzz::check_decoder_resealed;

    use super::golden::{sample_header, sample_internal, sample_leaf};
    use super::*;

    fn u16_at(b: &[u8], at: usize) -> u16 {
        u16::from_le_bytes(b[at..at + 2].try_into().unwrap())
    }
    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
    }
    fn u64_at(b: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
    }

    const SPILL: Stamp = Stamp {
        version: 10,
        kind: StampKind::Spill,
        batch: 3,
    };

    #[test]
    fn slot_header_fields_sit_at_their_documented_offsets() {
        let image = encode_node(1024, 5, &sample_leaf(), &SPILL).unwrap();
        assert_eq!(&image[0..4], SLOT_MAGIC);
        assert_eq!(u32_at(&image, 4), crc32c::crc32c(&image[8..]));
        assert_eq!(u64_at(&image, 8), 5);
        assert_eq!((image[16], image[17]), (1, 2));
        assert_eq!(u16_at(&image, 18), 3);
        assert_eq!(u32_at(&image, 20), 3);
        assert_eq!(u64_at(&image, 24), 10);
        assert_eq!(u32_at(&image, 32) as usize, sample_leaf().used());
        assert_eq!(u32_at(&image, 36), 0);
    }

    #[test]
    fn a_claimed_stamp_is_read_without_the_checksum() {
        let mut image = encode_node(1024, 5, &sample_leaf(), &SPILL).unwrap();
        assert_eq!(claimed_stamp(&image, 5), Some(10));
        assert_eq!(
            claimed_stamp(&image, 6),
            None,
            "another node's image claims nothing"
        );
        // A torn body still claims its stamp (open verifies the claims it relies on) ...
        image[600] ^= 1;
        assert_eq!(claimed_stamp(&image, 5), Some(10));
        assert!(matches!(decode_slot(&image, 5), SlotImage::Torn));
        // ... and a slot without the magic claims nothing.
        assert_eq!(claimed_stamp(&vec![0u8; 1024], 5), None);
        assert_eq!(claimed_stamp(&image[..20], 5), None);
    }

    #[test]
    fn cells_sit_at_their_documented_offsets() {
        let leaf = encode_node(1024, 5, &sample_leaf(), &SPILL).unwrap();
        let c = SLOT_HEADER;
        assert_eq!(
            (
                u64_at(&leaf, c) as i64,
                u64_at(&leaf, c + 8),
                u64_at(&leaf, c + 16)
            ),
            (-5, 1, INFINITY)
        );
        assert_eq!(u16_at(&leaf, c + 24), 10);
        assert_eq!(&leaf[c + 26..c + 36], b"minus five");
        let second = c + LEAF_CELL_FIXED + 10;
        assert_eq!((u64_at(&leaf, second) as i64, u64_at(&leaf, second + 16)), (7, 9));
        let end = SLOT_HEADER + sample_leaf().used();
        assert!(leaf[end..].iter().all(|&b| b == 0), "zero-filled past the body");

        let internal = encode_node(512, 12, &sample_internal(), &SPILL).unwrap();
        assert_eq!(internal[16], 2);
        let c2 = SLOT_HEADER + INTERNAL_CELL;
        assert_eq!(
            (u64_at(&internal, c) as i64, u64_at(&internal, c + 24)),
            (i64::MIN, 12)
        );
        assert_eq!(
            (u64_at(&internal, c2) as i64, u64_at(&internal, c2 + 8)),
            (100, 4)
        );
        assert_eq!((u64_at(&internal, c2 + 16), u64_at(&internal, c2 + 24)), (8, 13));
    }

    #[test]
    fn header_body_fields_sit_at_their_documented_offsets() {
        let image = encode_header(1024, &sample_header(), &SPILL);
        let b = &image[SLOT_HEADER..];
        assert_eq!((image[16], u16_at(&image, 18), u32_at(&image, 32)), (0, 0, 49));
        assert_eq!(&b[0..13], FILE_MAGIC);
        assert_eq!((u32_at(b, 13), u32_at(b, 17)), (FORMAT_VERSION, 1024));
        assert_eq!((u64_at(b, 21), u32_at(b, 29)), (12, 1));
        assert_eq!((u64_at(b, 33), u64_at(b, 41)), (4, 9));
        assert_eq!(header_claimed_node_size(&image), Some(1024));
    }

    #[test]
    fn slots_round_trip_and_damage_is_torn() {
        let leaf = encode_node(1024, 5, &sample_leaf(), &SPILL).unwrap();
        let SlotImage::Valid(v) = decode_slot(&leaf, 5) else {
            panic!("a fresh image decodes");
        };
        assert_eq!((v.stamp, v.stamp_kind, v.batch), (10, StampKind::Spill, 3));
        assert_eq!(v.node, Some(sample_leaf()));
        assert!(
            matches!(decode_slot(&leaf, 6), SlotImage::Torn),
            "another node's image"
        );
        let mut torn = leaf.clone();
        torn[100] ^= 1;
        assert!(matches!(decode_slot(&torn, 5), SlotImage::Torn));
        assert!(matches!(decode_slot(&vec![0; 1024], 5), SlotImage::Empty));
        let header = encode_header(1024, &sample_header(), &SPILL);
        let SlotImage::Valid(h) = decode_slot(&header, HEADER_NODE) else {
            panic!("a fresh header decodes");
        };
        assert_eq!(h.header, Some(sample_header()));
    }

    #[test]
    fn the_decoder_survives_damaged_slots() {
        let seeds = vec![
            encode_node(512, 5, &sample_leaf(), &SPILL).unwrap(),
            encode_node(512, 12, &sample_internal(), &SPILL).unwrap(),
            encode_header(512, &sample_header(), &SPILL),
        ];
        let report = check_decoder_resealed::<Slot>(&512, &seeds, 5_000, |image| reseal(image));
        assert!(report.decoded > 100 && report.rejected > 100, "{report:?}");
    }
}
