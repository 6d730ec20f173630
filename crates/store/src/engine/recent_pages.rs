//! The contents of recently committed pages, so that a transaction rewriting a page a
//! commit of this process just wrote does not read it back from the file to find what
//! changed. SQLite rewrites the same few pages (page 1, the table's last leaf) in every
//! transaction. Pages read are not kept: SQLite caches what it reads itself.
//!
//! A content is kept under its page's (file, page) with the whole entry it belongs to, and
//! given back only for an equal entry. An entry of a committed state names the commit that
//! last changed the page (`PageEntry::seq`, never 0 once committed) along with its slot,
//! checksum and overlay, so equal entries mean equal contents, whichever process wrote them.

use super::shared::{lock, Content, PageKey, Shared};
use crate::state::PageEntry;

/// Pages kept at most (a few MiB at SQLite's page sizes); past it the cache starts over.
const RECENT_PAGES: usize = 512;

impl Shared {
    /// Copy the content of `(file, page)` as of `entry` into `buf`, if it is known.
    pub(crate) fn recent_page(&self, file: u32, page: u64, entry: &PageEntry, buf: &mut [u8]) -> bool {
        if entry.seq == 0 {
            return false;
        }
        let recent = lock(&self.recent_pages);
        match recent.pages.get(&(file, page)) {
            Some((known, content)) if known == entry && content.len() == buf.len() => {
                buf.copy_from_slice(content);
                true
            }
            _ => false,
        }
    }

    /// Keep the contents a commit gave pages: those whose entry in the latest state is
    /// still the one commit `seq` made.
    pub(crate) fn remember_committed(&self, seq: u64, pages: Vec<(PageKey, Content)>) {
        let entries: Vec<_> = {
            let meta = self.meta();
            pages
                .into_iter()
                .filter_map(|(key, content)| {
                    let entry = meta.state.entry(key.0, key.1, self.page_size).ok()??;
                    (entry.seq == seq).then_some((key, entry, content))
                })
                .collect()
        };
        let mut recent = lock(&self.recent_pages);
        for (key, entry, content) in entries {
            if recent.pages.len() >= RECENT_PAGES && !recent.pages.contains_key(&key) {
                recent.pages.clear();
            }
            recent.pages.insert(key, (entry, content));
        }
    }
}
