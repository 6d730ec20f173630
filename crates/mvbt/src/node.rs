//! Cells and nodes as the tree works with them: life spans, the (key, sv) order, ending
//! cells for a split, routing. Their bytes, and so their sizes, are in `format.rs`.

/// The end of a life span that has not ended (stored as such on disk).
pub(crate) const INFINITY: u64 = u64::MAX;

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
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Node {
    pub leaf: bool,
    /// Sorted by (key, sv).
    pub cells: Vec<Cell>,
}

impl Node {
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
