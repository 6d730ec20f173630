//! Renumbering the pages a transaction appended, so that it can commit after another commit
//! that grew the database too.
//!
//! Two transactions on one snapshot of `base_pages` pages both append at `base_pages + 1`. The
//! later one can still commit if its appended pages move past the other's end: every page-number
//! field of SQLite's file format that names an appended page (interior cells' left children and
//! the right-most pointer, cells' overflow pointers, overflow pages' next pointers, freelist
//! trunks' next and leaf entries, page 1's first trunk) is shifted by `latest - base`. Only pages
//! the transaction wrote can name an appended page: the others are as in the base, where the
//! appended pages did not exist.
//!
//! Why this is safe: in a well-formed database every page but page 1, the pending-byte page and
//! the b-tree roots (which `sqlite_schema` rows name, not a pointer field) is named by exactly
//! one such field. So every appended page must be named exactly once by the fields found here,
//! else the move is refused. Missing a real pointer leaves its page named zero times; taking
//! bytes that are not a pointer for one names an appended page twice. A wrong rewrite therefore
//! needs a missed pointer and a spurious one naming the same page, on pages that also passed a
//! strict parse. Anything else unexpected (auto-vacuum, a new table's root among the appended
//! pages, a malformed page) is refused: the caller then treats the commit as a conflict, which
//! is always safe.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

/// SQLite's lock bytes start here; the page holding them is never used.
const PENDING_BYTE: u64 = 0x4000_0000;
/// The largest page count SQLite allows.
const MAX_PAGE_COUNT: u32 = 0xFFFF_FFFE;

fn get16(p: &[u8], at: usize) -> Option<usize> {
    let b: [u8; 2] = p.get(at..at.checked_add(2)?)?.try_into().ok()?;
    Some(usize::from(u16::from_be_bytes(b)))
}

pub(super) fn get32(p: &[u8], at: usize) -> Option<u32> {
    let b: [u8; 4] = p.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(u32::from_be_bytes(b))
}

fn put32(p: &mut [u8], at: usize, v: u32) {
    if let Some(s) = p.get_mut(at..at.saturating_add(4)) {
        s.copy_from_slice(&v.to_be_bytes());
    }
}

/// SQLite's varint at `at`, ending before `end`: 1 to 9 bytes, 7 bits each with the high bit
/// saying "more", except a ninth byte, which gives 8. Returns the value and the offset past it.
fn varint(p: &[u8], at: usize, end: usize) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for i in 0..9 {
        let pos = at.checked_add(i).filter(|&pos| pos < end)?;
        let b = *p.get(pos)?;
        if i == 8 {
            return Some(((v << 8) | u64::from(b), pos + 1));
        }
        v = (v << 7) | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            return Some((v, pos + 1));
        }
    }
    None
}

/// What the move needs to know about the transaction's database.
struct Ctx<'a> {
    written: &'a BTreeMap<u32, &'a [u8]>,
    page_size: usize,
    usable: usize,
    base: u32,
    mine: u32,
}

impl Ctx<'_> {
    /// Whether `v` can be a page that a pointer names (page 1 never is).
    fn is_page(&self, v: u32) -> bool {
        (2..=self.mine).contains(&v)
    }
}

/// Page-number fields of a page by byte offset, each with the length in pages of the overflow
/// chain it starts (0 for any other pointer).
type Fields = Vec<(usize, u64)>;

/// Parses page `pgno` as a b-tree page, or None if it is not a well-formed one: every cell and
/// freeblock inside the content area, none overlapping, and the bytes left over equal to the
/// header's fragment count (as `PRAGMA integrity_check` demands), so that bytes that happen to
/// start with a page type are very unlikely to pass.
fn parse_btree(p: &[u8], pgno: u32, ctx: &Ctx) -> Option<Fields> {
    let h = if pgno == 1 { 100 } else { 0 };
    let kind = *p.get(h)?;
    // Page 1 is the root of sqlite_schema, a table.
    if !matches!(kind, 5 | 13) && (pgno == 1 || !matches!(kind, 2 | 10)) {
        return None;
    }
    let u = ctx.usable;
    let ncell = get16(p, h + 3)?;
    let content = Some(get16(p, h + 5)?).filter(|&c| c != 0).unwrap_or(65536);
    let frag = usize::from(*p.get(h + 7)?);
    let interior = kind < 8;
    let cells_at = h + if interior { 12 } else { 8 };
    if cells_at + 2 * ncell > content || content > u {
        return None;
    }
    let mut fields = Vec::new();
    if interior {
        ctx.is_page(get32(p, h + 8)?).then_some(())?;
        fields.push((h + 8, 0));
    }
    let mut spans = Vec::with_capacity(ncell + 1);
    for i in 0..ncell {
        let at = get16(p, cells_at + 2 * i)?;
        (at >= content).then_some(())?;
        spans.push((at, parse_cell(p, at, kind, ctx, &mut fields)?));
    }
    let mut free = get16(p, h + 1)?;
    while free != 0 {
        let (next, size) = (get16(p, free)?, get16(p, free + 2)?);
        // Ascending with gaps, as SQLite requires; this also ends the loop.
        if free < content || size < 4 || free + size > u || (next != 0 && next < free + size + 4) {
            return None;
        }
        spans.push((free, free + size));
        free = next;
    }
    spans.sort_unstable();
    let (mut used, mut prev_end) = (0, content);
    for (start, end) in spans {
        (start >= prev_end).then_some(())?;
        used += end - start;
        prev_end = end;
    }
    (u.checked_sub(content)?.checked_sub(used)? == frag).then_some(fields)
}

/// Parses the cell at `at` of a b-tree page of type `kind`, noting its pointer fields.
/// Returns the offset just past the cell.
fn parse_cell(p: &[u8], at: usize, kind: u8, ctx: &Ctx, fields: &mut Fields) -> Option<usize> {
    let u = ctx.usable;
    let mut pos = at;
    if kind < 8 {
        (at + 4 <= u && ctx.is_page(get32(p, at)?)).then_some(())?;
        fields.push((at, 0));
        pos += 4;
    }
    if kind == 5 {
        return Some(varint(p, pos, u)?.1); // a table interior cell is the child and a rowid
    }
    let (payload, after) = varint(p, pos, u)?;
    pos = after;
    if kind == 13 {
        pos = varint(p, pos, u)?.1; // the rowid
    }
    // SQLite reads payload sizes as 32 bits and keeps them below 2^31.
    let payload = usize::try_from(payload)
        .ok()
        .filter(|&n| n <= i32::MAX as usize)?;
    let min_local = (u - 12) * 32 / 255 - 23;
    let max_local = if kind == 13 {
        u - 35
    } else {
        (u - 12) * 64 / 255 - 23
    };
    if payload <= max_local {
        // SQLite never makes a cell smaller than 4 bytes (so it can become a freeblock).
        let end = (pos + payload).max(at + 4);
        return (end <= u).then_some(end);
    }
    let surplus = min_local + (payload - min_local) % (u - 4);
    let ptr = pos + if surplus <= max_local { surplus } else { min_local };
    (ptr + 4 <= u && ctx.is_page(get32(p, ptr)?)).then_some(())?;
    fields.push((ptr, (payload - (ptr - pos)).div_ceil(u - 4) as u64));
    Some(ptr + 4)
}

/// Walks the freelist from page 1, reading unwritten trunks as the base has them. Returns its
/// pages, true for a trunk. Each page may appear once, and the total must match page 1's count,
/// which also bounds the walk.
fn walk_freelist(
    page1: &[u8],
    ctx: &Ctx,
    read_base: &dyn Fn(u32) -> Option<Vec<u8>>,
) -> Result<BTreeMap<u32, bool>, String> {
    let total = get32(page1, 36).unwrap_or(u32::MAX);
    if total >= ctx.mine {
        return Err(format!("freelist count {total} is too large"));
    }
    let mut free = BTreeMap::new();
    let mut trunk = get32(page1, 32).unwrap_or(0);
    while trunk != 0 {
        if !ctx.is_page(trunk) || free.len() >= total as usize || free.insert(trunk, true).is_some() {
            return Err(format!("freelist trunk {trunk} is out of range or repeated"));
        }
        // An unwritten trunk is as in the base, which had no page past base_pages.
        let unwritten = !ctx.written.contains_key(&trunk);
        let data: Cow<[u8]> = match ctx.written.get(&trunk) {
            Some(d) => Cow::Borrowed(*d),
            None => Cow::Owned(read_base(trunk).ok_or_else(|| format!("cannot read base page {trunk}"))?),
        };
        let n = get32(&data, 4).map_or(usize::MAX, |n| n as usize);
        if data.len() != ctx.page_size || n > ctx.usable / 4 - 2 {
            return Err(format!("freelist trunk {trunk} is malformed"));
        }
        for i in 0..n {
            let leaf = get32(&data, 8 + 4 * i).unwrap_or(0);
            let bad = !ctx.is_page(leaf) || (unwritten && leaf > ctx.base);
            if bad || free.len() >= total as usize || free.insert(leaf, false).is_some() {
                return Err(format!("freelist trunk {trunk} lists page {leaf} wrongly"));
            }
        }
        trunk = get32(&data, 0).unwrap_or(0);
        if unwritten && trunk > ctx.base {
            return Err(format!("unwritten freelist trunk names page {trunk}"));
        }
    }
    if free.len() != total as usize {
        return Err(format!(
            "freelist holds {} pages, page 1 says {total}",
            free.len()
        ));
    }
    Ok(free)
}

/// Follows the overflow chains of the b-tree pages through written pages, returning the written
/// overflow pages. An unwritten page ends a walk: it is as in the base, so neither it nor the
/// rest of its chain names an appended page.
fn walk_overflows(
    btrees: &BTreeMap<u32, Fields>,
    ctx: &Ctx,
    free: &BTreeMap<u32, bool>,
) -> Result<BTreeSet<u32>, String> {
    let mut overflow = BTreeSet::new();
    for (pgno, fields) in btrees {
        let page = ctx.written.get(pgno).map_or(&[][..], |p| &p[..]);
        for &(at, mut left) in fields.iter().filter(|f| f.1 > 0) {
            let mut cur = get32(page, at).unwrap_or(0);
            while let Some(data) = ctx.written.get(&cur) {
                if free.contains_key(&cur) || !overflow.insert(cur) {
                    return Err(format!("overflow page {cur} is also free or in another chain"));
                }
                left -= 1;
                let next = get32(data, 0).unwrap_or(u32::MAX);
                if (left == 0 && next != 0) || (left > 0 && !ctx.is_page(next)) {
                    return Err(format!("overflow page {cur} names {next}"));
                }
                cur = next;
            }
        }
    }
    Ok(overflow)
}

/// What moving a transaction's appended pages takes, found once per commit: which bytes of
/// which written pages name an appended page. It does not depend on where the pages move,
/// so a commit that loses the race to the store's lock and plans again on a later end
/// applies it again without parsing the pages again (`apply`).
pub(crate) struct Relocation {
    base: u32,
    mine: u32,
    page_size: usize,
    /// Per written page (1-based), the offsets of its fields naming an appended page.
    fields: BTreeMap<u32, Vec<usize>>,
}

/// Finds what moving the pages a transaction appended (base_pages+1 ..= mine_pages, 1-based
/// SQLite page numbers, where mine_pages is the page count in the transaction's page 1, bytes
/// 28..32) needs to rewrite: every pointer to them.
/// `written`: the transaction's full pages by 1-based page number (page 1 always present).
/// `read_base`: an unwritten page as the transaction's base had it (for freelist trunk walks).
/// Err: a reason it cannot be done safely; the caller then treats the commit as a conflict
/// (the application retries), so when in doubt return Err — never guess.
pub(crate) fn analyze_appended<P: AsRef<[u8]>>(
    written: &BTreeMap<u32, &P>,
    read_base: &dyn Fn(u32) -> Option<Vec<u8>>,
    base_pages: u32,
) -> Result<Relocation, String> {
    let written: BTreeMap<u32, &[u8]> = written.iter().map(|(&p, d)| (p, d.as_ref())).collect();
    let written = &written;
    let page1 = *written.get(&1).ok_or("page 1 was not written")?;
    if page1.get(..16) != Some(b"SQLite format 3\0") || page1.get(21..24) != Some(&[64, 32, 32]) {
        return Err("page 1 is not a SQLite database header".into());
    }
    let page_size = match get16(page1, 16) {
        Some(1) => 65536,
        Some(n) if n.is_power_of_two() && (512..=32768).contains(&n) => n,
        _ => return Err("bad page size in page 1".into()),
    };
    let usable = page_size - usize::from(page1[20]);
    // The page count at 28 is only valid when the change counter matches version-valid-for.
    let mine = get32(page1, 28).unwrap_or(0);
    if usable < 480 || page1.get(24..28) != page1.get(92..96) {
        return Err("usable size too small or page count not valid in page 1".into());
    }
    if base_pages == 0 || mine <= base_pages {
        return Err(format!("nothing to move: base {base_pages}, mine {mine}"));
    }
    let count = mine - base_pages;
    let pending = pending_byte_page(page_size);
    if base_pages < pending && pending <= mine {
        return Err(format!("pending-byte page {pending} would move"));
    }
    // Auto-vacuum databases keep pointer maps, which this does not rewrite.
    if get32(page1, 52) != Some(0) {
        return Err("auto-vacuum database".into());
    }
    let bad = |(&p, d): (&u32, &&[u8])| (p == 0 || p > mine || d.len() != page_size).then_some(p);
    if let Some(p) = written.iter().find_map(bad) {
        return Err(format!(
            "written page {p} is past the end or not {page_size} bytes"
        ));
    }
    if written.range(base_pages + 1..).count() != count as usize {
        return Err("a page this transaction appended was not written".into());
    }
    let ctx = Ctx {
        written,
        page_size,
        usable,
        base: base_pages,
        mine,
    };

    let free = walk_freelist(page1, &ctx, read_base)?;
    let mut btrees: BTreeMap<u32, Fields> = written
        .iter()
        .filter(|(p, _)| !free.contains_key(p))
        .filter_map(|(&p, d)| Some((p, parse_btree(d, p, &ctx)?)))
        .collect();
    if !btrees.contains_key(&1) {
        return Err("page 1 is not a well-formed b-tree page".into());
    }
    // A page named as overflow is overflow, even if it parses as a b-tree page; its cells may
    // have started chains of their own, so walk again without it.
    let overflow = loop {
        let overflow = walk_overflows(&btrees, &ctx, &free)?;
        let before = btrees.len();
        btrees.retain(|p, _| !overflow.contains(p));
        if btrees.len() == before {
            break overflow;
        }
    };
    let known = |p: &u32| btrees.contains_key(p) || overflow.contains(p) || free.contains_key(p);
    if let Some(p) = written.range(base_pages + 1..).map(|w| w.0).find(|p| !known(p)) {
        return Err(format!("appended page {p} is neither b-tree, overflow nor free"));
    }

    let mut named: BTreeMap<u32, u32> = BTreeMap::new();
    let mut shifted = BTreeMap::new();
    for (&pgno, data) in written {
        let mut fields: Vec<usize> = btrees.get(&pgno).into_iter().flatten().map(|f| f.0).collect();
        if pgno == 1 {
            fields.push(32);
        }
        if overflow.contains(&pgno) {
            fields.push(0);
        }
        if free.get(&pgno) == Some(&true) {
            let n = get32(data, 4).unwrap_or(0) as usize; // bounded by the walk
            fields.extend((0..=n).map(|i| if i == 0 { 0 } else { 4 + 4 * i }));
        }
        let mut naming = Vec::new();
        for at in fields {
            let v = get32(data, at).ok_or("pointer field outside the page")?;
            if v > base_pages && v <= mine {
                *named.entry(v).or_insert(0) += 1;
                naming.push(at);
            }
        }
        if !naming.is_empty() {
            shifted.insert(pgno, naming);
        }
    }
    // The check that makes misclassification detectable (see the module doc).
    for p in written.range(base_pages + 1..).map(|w| *w.0) {
        match named.get(&p).copied().unwrap_or(0) {
            1 => {}
            n => return Err(format!("appended page {p} is referenced {n} times, not once")),
        }
    }
    Ok(Relocation {
        base: base_pages,
        mine,
        page_size,
        fields: shifted,
    })
}

/// The page holding SQLite's lock bytes, never used.
fn pending_byte_page(page_size: usize) -> u32 {
    u32::try_from(PENDING_BYTE / page_size as u64 + 1).unwrap_or(u32::MAX)
}

impl Relocation {
    /// Negative controls only (`Sabotage::RelocatedPointerMissed`): forget the first field
    /// found, so that `apply` leaves it naming the page's old number.
    pub(crate) fn forget_one_field(&mut self) {
        if let Some(mut first) = self.fields.first_entry() {
            first.get_mut().remove(0);
            if first.get().is_empty() {
                first.remove();
            }
        }
    }

    /// The pages to commit instead of `written` (the ones `analyze_appended` was given) when
    /// another commit ended the file at `latest_pages`: the same set, the appended ones
    /// renumbered past that end, every pointer to them and page 1's page count (now
    /// latest_pages + (mine_pages - base_pages)) rewritten. Only pages with a pointer to
    /// rewrite, and page 1, are copied; the others are lent as they are.
    pub(crate) fn apply<'a, P>(
        &self,
        written: &BTreeMap<u32, &'a P>,
        latest_pages: u32,
    ) -> Result<BTreeMap<u32, Cow<'a, P>>, String>
    where
        P: AsRef<[u8]> + Clone + From<Vec<u8>>,
    {
        let (base, mine) = (self.base, self.mine);
        if latest_pages <= base {
            return Err(format!(
                "nothing to move: base {base}, latest {latest_pages}, mine {mine}"
            ));
        }
        let shift = latest_pages - base;
        let new_count = latest_pages
            .checked_add(mine - base)
            .filter(|&n| n <= MAX_PAGE_COUNT)
            .ok_or("too many pages")?;
        let pending = pending_byte_page(self.page_size);
        if latest_pages < pending && pending <= new_count {
            return Err(format!("pending-byte page {pending} would be moved onto"));
        }
        let mut out = BTreeMap::new();
        for (&pgno, &data) in written {
            let fields = self.fields.get(&pgno);
            let page = if fields.is_some() || pgno == 1 {
                let mut page = data.as_ref().to_vec();
                for &at in fields.into_iter().flatten() {
                    let v = get32(&page, at).ok_or("pointer field outside the page")?;
                    put32(&mut page, at, v + shift);
                }
                if pgno == 1 {
                    put32(&mut page, 28, new_count);
                }
                Cow::Owned(P::from(page))
            } else {
                Cow::Borrowed(data)
            };
            out.insert(if pgno > base { pgno + shift } else { pgno }, page);
        }
        Ok(out)
    }
}

/// `analyze_appended` and `apply` at once, with pages owned (the tests' form).
#[cfg(test)]
fn relocate_appended(
    written: &BTreeMap<u32, Vec<u8>>,
    read_base: &dyn Fn(u32) -> Option<Vec<u8>>,
    base_pages: u32,
    latest_pages: u32,
) -> Result<BTreeMap<u32, Vec<u8>>, String> {
    let lent: BTreeMap<u32, &Vec<u8>> = written.iter().map(|(&p, d)| (p, d)).collect();
    let relocation = analyze_appended(&lent, read_base, base_pages)?;
    let moved = relocation.apply(&lent, latest_pages)?;
    Ok(moved.into_iter().map(|(p, d)| (p, d.into_owned())).collect())
}
#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, Rng, RngCore, SeedableRng};
    use rusqlite::{params, types::Value, Connection};

    type Tx<'a> = &'a dyn Fn(&Connection);

    /// A base database and two transactions on copies of it: A (the winner) and B.
    struct Built {
        ps: usize,
        files: [Vec<u8>; 3],
        dir: tempfile::TempDir,
    }

    impl Built {
        fn page(&self, f: usize, p: u32) -> &[u8] {
            &self.files[f][(p as usize - 1) * self.ps..p as usize * self.ps]
        }
        fn pages(&self, f: usize) -> u32 {
            (self.files[f].len() / self.ps) as u32
        }
        /// The pages B wrote: those differing from the base, and all past its end.
        fn written(&self) -> BTreeMap<u32, Vec<u8>> {
            let nb = self.pages(BASE);
            let changed = |&p: &u32| p > nb || self.page(B, p) != self.page(BASE, p);
            (1..=self.pages(B))
                .filter(changed)
                .map(|p| (p, self.page(B, p).to_vec()))
                .collect()
        }
        fn read_base(&self) -> impl Fn(u32) -> Option<Vec<u8>> + '_ {
            |p| (p <= self.pages(BASE)).then(|| self.page(BASE, p).to_vec())
        }
    }
    const BASE: usize = 0;
    const A: usize = 1;
    const B: usize = 2;

    /// An empty database, page 1 written by hand because no pragma sets reserved bytes.
    fn empty_db(ps: usize, reserved: u8) -> Vec<u8> {
        let mut p = vec![0u8; ps];
        p[..16].copy_from_slice(b"SQLite format 3\0");
        let raw = if ps == 65536 { 1 } else { ps }; // SQLite's spelling of 65536
        p[16..24].copy_from_slice(&[(raw >> 8) as u8, raw as u8, 1, 1, reserved, 64, 32, 32]);
        for (at, v) in [(24, 1), (28, 1), (44, 4), (56, 1), (92, 1), (96, 3_054_001)] {
            put32(&mut p, at, v);
        }
        let usable = ps - usize::from(reserved); // 65536 is written as 0, as SQLite wants
        p[100..107].copy_from_slice(&[13, 0, 0, 0, 0, (usable >> 8) as u8, usable as u8]);
        p
    }

    fn build(ps: usize, reserved: u8, setup: Tx, a: Tx, b: Tx) -> Built {
        let dir = tempfile::tempdir().unwrap();
        let mut files = [empty_db(ps, reserved), vec![], vec![]];
        for (i, f) in [setup, a, b].into_iter().enumerate() {
            let path = dir.path().join(format!("{i}.db"));
            std::fs::write(&path, &files[BASE]).unwrap();
            let c = Connection::open(&path).unwrap();
            c.execute_batch(if i == 0 { "" } else { "BEGIN" }).unwrap();
            f(&c);
            c.execute_batch(if i == 0 { "" } else { "COMMIT" }).unwrap();
            files[i] = std::fs::read(&path).unwrap();
        }
        Built { ps, files, dir }
    }

    /// Tables a_t and b_t (each with an index on k if asked) and keep, a few rows each.
    fn schema(c: &Connection, index: bool) {
        for t in ["a_t", "b_t", "keep"] {
            let sql = format!("CREATE TABLE {t}(id INTEGER PRIMARY KEY, k TEXT, v BLOB)");
            c.execute_batch(&sql).unwrap();
            if index && t != "keep" {
                c.execute_batch(&format!("CREATE INDEX {t}_k ON {t}(k)")).unwrap();
            }
            fill(c, 1, t, 5, 30, 200);
        }
    }

    /// Inserts `rows` rows with keys of 1..=key_max letters and blobs of 0..=blob_max bytes.
    fn fill(c: &Connection, seed: u64, table: &str, rows: usize, key_max: usize, blob_max: usize) {
        let mut rng = StdRng::seed_from_u64(seed);
        let sql = format!("INSERT INTO {table}(k, v) VALUES (?1, ?2)");
        let mut st = c.prepare(&sql).unwrap();
        for _ in 0..rows {
            let len = rng.random_range(1..=key_max);
            let key: String = (0..len).map(|_| rng.random_range('a'..='z')).collect();
            let mut blob = vec![0u8; rng.random_range(0..=blob_max)];
            rng.fill_bytes(&mut blob);
            st.execute(params![key, blob]).unwrap();
        }
    }

    fn dump(c: &Connection, table: &str) -> Vec<Vec<Value>> {
        let mut st = c
            .prepare(&format!("SELECT * FROM {table} ORDER BY rowid"))
            .unwrap();
        let n = st.column_count();
        let row = |r: &rusqlite::Row| (0..n).map(|i| r.get::<_, Value>(i)).collect();
        st.query_map([], row).unwrap().map(Result::unwrap).collect()
    }

    fn integrity(c: &Connection) -> Result<(), String> {
        let ok: String = c.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
        (ok == "ok").then_some(()).ok_or(ok)
    }

    /// Places `moved` on `onto` (another commit's file) with page 1's counter after `counter`.
    fn place(onto: &[u8], ps: usize, moved: &BTreeMap<u32, Vec<u8>>, counter: u32) -> Vec<u8> {
        let mut merged = onto.to_vec();
        merged.resize(get32(&moved[&1], 28).unwrap() as usize * ps, 0);
        for (&p, d) in moved {
            merged[(p as usize - 1) * ps..p as usize * ps].copy_from_slice(d);
        }
        put32(&mut merged, 24, counter + 1);
        put32(&mut merged, 92, counter + 1);
        merged
    }

    /// Checks a merged file: integrity, each table as in file `expect(table)`, and integrity
    /// again after a write that frees pages (overflow chains among them).
    fn check(t: &Built, merged: &[u8], expect: &dyn Fn(&str) -> usize) -> Result<(), String> {
        let path = t.dir.path().join("merged.db");
        std::fs::write(&path, merged).unwrap();
        let c = Connection::open(&path).unwrap();
        integrity(&c)?;
        for table in ["a_t", "b_t", "keep"] {
            let want = Connection::open(t.dir.path().join(format!("{}.db", expect(table)))).unwrap();
            if dump(&c, table) != dump(&want, table) {
                return Err(format!("table {table} differs"));
            }
        }
        c.execute_batch("DELETE FROM b_t WHERE id % 3 = 0; DELETE FROM a_t WHERE id % 4 = 0")
            .unwrap();
        integrity(&c)
    }

    /// Commits A, then B's pages relocated on top, and checks the result holds both.
    fn merge(t: &Built) -> Result<(), String> {
        let (nb, written) = (t.pages(BASE), t.written());
        // Meaningful only if B wrote no page A changed, and A changed only page 1's counters.
        let (a1, base1) = (t.page(A, 1), t.page(BASE, 1));
        assert!((2..=nb).all(|p| t.page(A, p) == t.page(BASE, p) || !written.contains_key(&p)));
        assert!(a1[..24] == base1[..24] && a1[32..92] == base1[32..92] && a1[100..] == base1[100..]);
        let moved = relocate_appended(&written, &t.read_base(), nb, t.pages(A))?;
        assert_eq!(moved.len(), written.len());
        let merged = place(&t.files[A], t.ps, &moved, get32(a1, 24).unwrap());
        check(t, &merged, &|table| if table == "b_t" { B } else { A })
    }

    #[test]
    fn relocate_rows_overflow_and_index_4096() {
        let a = |c: &Connection| fill(c, 2, "a_t", 300, 3000, 6000);
        let t = build(4096, 0, &|c| schema(c, true), &a, &|c| {
            fill(c, 3, "b_t", 300, 3000, 9000)
        });
        merge(&t).unwrap();
    }

    fn deep() -> Built {
        let b = |c: &Connection| {
            fill(c, 5, "b_t", 6000, 12, 40);
            fill(c, 6, "b_t", 100, 800, 3000);
        };
        let a = |c: &Connection| fill(c, 4, "a_t", 500, 20, 100);
        build(1024, 0, &|c| schema(c, true), &a, &b)
    }

    #[test]
    fn relocate_deep_trees_1024() {
        let t = deep();
        let types: BTreeSet<u8> = t
            .written()
            .range(t.pages(BASE) + 1..)
            .map(|(_, d)| d[0])
            .collect();
        assert!(
            types.contains(&5) && types.contains(&2),
            "interior pages among the appended"
        );
        merge(&t).unwrap();
    }

    fn freelist(t: &Built, written: &BTreeMap<u32, Vec<u8>>) -> BTreeMap<u32, bool> {
        let (base, mine) = (t.pages(BASE), t.pages(B));
        let written: BTreeMap<u32, &[u8]> = written.iter().map(|(&p, d)| (p, d.as_slice())).collect();
        let ctx = Ctx {
            written: &written,
            page_size: t.ps,
            usable: t.ps,
            base,
            mine,
        };
        walk_freelist(written[&1], &ctx, &t.read_base()).unwrap()
    }

    #[test]
    fn relocate_freelist_made_by_the_transaction() {
        let b = |c: &Connection| {
            fill(c, 8, "b_t", 300, 10, 9000);
            c.execute_batch("DELETE FROM b_t WHERE id % 3 = 0").unwrap();
        };
        let a = |c: &Connection| fill(c, 7, "a_t", 100, 10, 5000);
        let t = build(4096, 0, &|c| schema(c, false), &a, &b);
        let nb = t.pages(BASE);
        assert!(
            freelist(&t, &t.written()).keys().any(|&p| p > nb),
            "appended pages are free"
        );
        merge(&t).unwrap();
    }

    /// With free pages in the base, a winner that grew drained the freelist, so it conflicts
    /// with B on page 1 and the trunks; here the winner's pages are free pages instead.
    #[test]
    fn relocate_with_freelist_in_base_1024() {
        let setup = |c: &Connection| {
            schema(c, true);
            fill(c, 10, "keep", 400, 10, 900);
            c.execute_batch("DELETE FROM keep").unwrap();
        };
        let b = |c: &Connection| {
            fill(c, 9, "b_t", 700, 300, 1500);
            c.execute_batch("DELETE FROM b_t WHERE id % 5 = 0").unwrap();
        };
        let t = build(1024, 0, &setup, &|_| {}, &b);
        let (nb, written, gap) = (t.pages(BASE), t.written(), 5);
        assert!(
            get32(&t.files[BASE], 36).unwrap() > 100,
            "the base has free pages"
        );
        assert!(freelist(&t, &written).values().any(|&trunk| trunk));
        let moved = relocate_appended(&written, &t.read_base(), nb, nb + gap).unwrap();
        let mut merged = place(&t.files[BASE], t.ps, &moved, get32(&t.files[BASE], 24).unwrap());
        // The gap becomes a new first trunk naming the rest of it.
        let trunk = nb as usize * t.ps;
        let fields = [(trunk, get32(&merged, 32).unwrap()), (trunk + 4, gap - 1)];
        let leaves = (1..gap).map(|i| (trunk + 4 + 4 * i as usize, nb + 1 + i));
        let head = [(32, nb + 1), (36, get32(&merged, 36).unwrap() + gap)];
        for (at, v) in fields.into_iter().chain(leaves).chain(head) {
            put32(&mut merged, at, v);
        }
        check(&t, &merged, &|_| B).unwrap();
    }

    #[test]
    fn relocate_random_seeds() {
        for seed in 0..30u64 {
            let mut rng = StdRng::seed_from_u64(seed);
            let ps = [512, 1024, 4096, 8192, 65536][rng.random_range(0..5)];
            let reserved = [0, 0, 8, 32][rng.random_range(0..4)];
            let (index, delete) = (rng.random_bool(0.5), rng.random_bool(0.5));
            let (na, nb) = (rng.random_range(1..300), rng.random_range(1..500));
            let key_max = [8, 100, 1500][rng.random_range(0..3)];
            let blob_max = [50, 700, 5000, 40000][rng.random_range(0..4)];
            // A first row that surely grows the file.
            let grow = |c: &Connection, t: &str| {
                let sql = format!("INSERT INTO {t}(k, v) VALUES ('grow', zeroblob({}))", 3 * ps);
                c.execute_batch(&sql).unwrap();
            };
            let a = |c: &Connection| {
                grow(c, "a_t");
                fill(c, seed + 100, "a_t", na, key_max, blob_max);
            };
            let b = |c: &Connection| {
                grow(c, "b_t");
                fill(c, seed + 200, "b_t", nb, key_max, blob_max);
                if delete {
                    c.execute_batch("DELETE FROM b_t WHERE id % 3 = 1").unwrap();
                }
            };
            let t = build(ps, reserved, &|c| schema(c, index), &a, &b);
            if let Err(e) = merge(&t) {
                panic!("seed {seed} (page size {ps}, reserved {reserved}): {e}");
            }
        }
    }

    #[test]
    fn relocate_refuses_misnamed_or_unknown_pages() {
        let t = deep();
        let (nb, written) = (t.pages(BASE), t.written());
        let run = |w: &BTreeMap<u32, Vec<u8>>| relocate_appended(w, &t.read_base(), nb, nb + 3);
        assert!(run(&written).is_ok());
        // An appended interior page whose right-most pointer and first child are appended.
        let appended = |v: Option<u32>| v.is_some_and(|v| v > nb);
        let first_child = |d: &[u8]| get32(d, get16(d, 12).unwrap());
        let (&p, page) = written
            .range(nb + 1..)
            .find(|(_, d)| d[0] == 5 && appended(get32(d, 8)) && appended(first_child(d)))
            .unwrap();
        let corrupt = |p: u32, at: usize, v: &[u8]| {
            let mut w = written.clone();
            w.get_mut(&p).unwrap().splice(at..at + v.len(), v.iter().copied());
            run(&w).unwrap_err()
        };
        let twice = corrupt(p, 8, &first_child(page).unwrap().to_be_bytes());
        assert!(twice.contains("referenced 0 times") || twice.contains("referenced 2 times"));
        assert!(corrupt(p, 8, &2u32.to_be_bytes()).contains("referenced 0 times"));
        assert!(corrupt(p, 0, &[0]).contains("neither b-tree"));
        assert!(corrupt(1, 52, &[0, 0, 0, 1]).contains("auto-vacuum"));
        let mut w = written.clone();
        w.remove(&(nb + 1));
        assert!(run(&w).unwrap_err().contains("not written"));
        w.insert(nb + 1, vec![0; 1000]);
        assert!(run(&w).unwrap_err().contains("not 1024 bytes"));
        assert!(relocate_appended(&written, &t.read_base(), nb, nb).is_err());
        // With 512-byte pages the pending byte is on page 2097153: not to move, nor to move onto.
        let pending = 2_097_153;
        let written = |base: u32, mine: u32| -> BTreeMap<u32, Vec<u8>> {
            let mut one = empty_db(512, 0);
            put32(&mut one, 28, mine);
            let appended = (base + 1..=mine).map(|p| (p, vec![0; 512]));
            std::iter::once((1, one)).chain(appended).collect()
        };
        let err = relocate_appended(
            &written(pending - 2, pending),
            &|_| None,
            pending - 2,
            pending + 5,
        );
        assert!(err.unwrap_err().contains("pending-byte page 2097153 would move"));
        // Moving onto it depends on where the pages go: found when the move is applied.
        let (base, mine) = (10, 12);
        let relocation = Relocation {
            base,
            mine,
            page_size: 512,
            fields: BTreeMap::new(),
        };
        let pages = written(base, mine);
        let lent: BTreeMap<u32, &Vec<u8>> = pages.iter().map(|(&p, d)| (p, d)).collect();
        let err = relocation.apply(&lent, pending - 1).unwrap_err();
        assert!(
            err.contains("pending-byte page 2097153 would be moved onto"),
            "{err}"
        );
        assert!(relocation.apply(&lent, pending - 3).is_ok());
    }

    /// A freelist whose second trunk is unwritten: the walk reads it from the base.
    #[test]
    fn relocate_reads_unwritten_trunks_from_the_base() {
        // 5 pages; the freelist: trunk 4 (leaf 5), then trunk 2 (leaf 3), unwritten.
        let mut one = empty_db(512, 0);
        let mut trunk = vec![0u8; 512];
        for (at, v, t) in [(28, 5, 2), (32, 4, 1), (36, 4, 5)] {
            put32(&mut one, at, v);
            put32(&mut trunk, at - 28, t);
        }
        let written = BTreeMap::from([(1, one), (4, trunk), (5, vec![7u8; 512])]);
        let reads = std::cell::RefCell::new(Vec::new());
        let read_base = |p: u32| -> Option<Vec<u8>> {
            reads.borrow_mut().push(p);
            Some([&[0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 3][..], &[0; 500]].concat())
        };
        let moved = relocate_appended(&written, &read_base, 3, 6).unwrap();
        assert_eq!(moved.keys().copied().collect::<Vec<_>>(), [1, 7, 8]);
        assert_eq!([28, 32, 36].map(|at| get32(&moved[&1], at).unwrap()), [8, 7, 4]);
        assert_eq!([0, 4, 8].map(|at| get32(&moved[&7], at).unwrap()), [2, 1, 8]);
        assert_eq!((moved[&8][0], reads.take()), (7, vec![2]));
    }

    #[test]
    fn relocate_never_panics_on_random_input() {
        let mut rng = StdRng::seed_from_u64(99);
        let t = deep();
        let (nb, written) = (t.pages(BASE), t.written());
        let keys: Vec<u32> = written.keys().copied().collect();
        for _ in 0..300 {
            let mut w = written.clone();
            for _ in 0..rng.random_range(1..8) {
                let page = w.get_mut(&keys[rng.random_range(0..keys.len())]).unwrap();
                let end = if rng.random_bool(0.5) { 16 } else { 1024 };
                page[rng.random_range(0..end)] = rng.random();
            }
            if let Ok(moved) = relocate_appended(&w, &t.read_base(), nb, nb + rng.random_range(1..9)) {
                assert_eq!(moved.len(), w.len());
            }
        }
        // Small random databases: a valid-looking page 1, pages of likely header bytes.
        for _ in 0..3000 {
            let n = rng.random_range(1..8u32);
            let mut w = BTreeMap::new();
            for p in 1..=n {
                let mut page = if p == 1 { empty_db(512, 0) } else { vec![0u8; 512] };
                for _ in 0..rng.random_range(0..40) {
                    let at = rng.random_range(if p == 1 { 16 } else { 0 }..512);
                    page[at] = [0, 1, 2, 5, 10, 13, rng.random()][rng.random_range(0..7)];
                }
                if p == 1 && rng.random_bool(0.8) {
                    put32(&mut page, 28, n);
                }
                w.insert(p, page);
            }
            let base = rng.random_range(0..n);
            let junk = |_| -> Option<Vec<u8>> { Some((0..512).map(|i| (i * 7 % 13) as u8).collect()) };
            let _ = relocate_appended(&w, &junk, base, base + rng.random_range(0..5));
        }
    }
}
