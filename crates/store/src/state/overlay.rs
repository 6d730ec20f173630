//! A page's overlay: bytes laid over its slot's content without rewriting it.

use std::sync::Arc;

/// Bytes laid over a page without rewriting it: sorted, disjoint `(offset, bytes)` ranges.
/// Shared bytes: a merge copies only the region it changes (every process following a
/// commit merges each range the commit patches).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overlay {
    pub ranges: Vec<(u32, Arc<[u8]>)>,
}

impl Overlay {
    pub fn total_bytes(&self) -> usize {
        self.ranges.iter().map(|(_, b)| b.len()).sum()
    }

    pub fn apply_to(&self, page: &mut [u8]) {
        for (offset, bytes) in &self.ranges {
            let start = *offset as usize;
            page[start..start + bytes.len()].copy_from_slice(bytes);
        }
    }

    /// This overlay with `bytes` at `offset` laid on top (see [`Overlay::lay`]).
    pub fn merged(&self, offset: u32, bytes: &[u8]) -> Overlay {
        let mut overlay = self.clone();
        overlay.lay(offset, &Arc::from(bytes));
        overlay
    }

    /// Lay `bytes` at `offset` on top. Ranges stay sorted, disjoint and not adjacent: the
    /// new bytes join every range they overlap or touch into one region, whose bytes are
    /// collected once, or are that region themselves where they cover every range they
    /// touch (every process following a commit lays each range it patches, most of them
    /// over the same range as the commit before).
    pub fn lay(&mut self, offset: u32, bytes: &Arc<[u8]>) {
        let (start, end) = (offset as usize, offset as usize + bytes.len());
        let reaches = |(o, b): &(u32, Arc<[u8]>)| *o as usize + b.len();
        // Ranges are sorted and disjoint, so those touching `start..end` are one run.
        let first = self.ranges.partition_point(|r| reaches(r) < start);
        let last = first + self.ranges[first..].partition_point(|(o, _)| *o as usize <= end);
        let touching = &self.ranges[first..last];
        // Only the first of them can begin before the new bytes, and only the last end
        // after them (the same range, if the bytes land inside one).
        let before: &[u8] = match touching.first() {
            Some((o, b)) if (*o as usize) < start => &b[..start - *o as usize],
            _ => &[],
        };
        let after: &[u8] = match touching.last() {
            Some(r @ (o, b)) if reaches(r) > end => &b[end - *o as usize..],
            _ => &[],
        };
        let region_start = (start - before.len()) as u32;
        let region: Arc<[u8]> = if before.is_empty() && after.is_empty() {
            bytes.clone()
        } else {
            before.iter().chain(bytes.iter()).chain(after).copied().collect()
        };
        self.ranges
            .splice(first..last, std::iter::once((region_start, region)));
    }
}
