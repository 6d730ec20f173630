//! The file-level import graph: every source file a node, an edge where one file's code
//! names another file's module through `crate::`, `super::`, `self::` or a child module's
//! name (brace groups too), followed through `use` re-exports to where the item lives.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use super::rust_files;

/// Source text with comments, string literals and character literals blanked to spaces
/// (newlines kept), so that neither a doc comment nor a message naming a module counts.
pub fn strip_code(text: &str) -> String {
    let s: Vec<char> = text.chars().collect();
    let mut out: Vec<char> = s.clone();
    let blank = |out: &mut Vec<char>, from: usize, to: usize| {
        for c in &mut out[from..to.min(s.len())] {
            if *c != '\n' {
                *c = ' ';
            }
        }
    };
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut i = 0;
    while i < s.len() {
        let next = s.get(i + 1).copied();
        if s[i] == '/' && next == Some('/') {
            let end = s[i..].iter().position(|&c| c == '\n').map_or(s.len(), |p| i + p);
            blank(&mut out, i, end);
            i = end;
        } else if s[i] == '/' && next == Some('*') {
            let (mut depth, mut j) = (0, i);
            while j < s.len() {
                if s[j] == '/' && s.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 2;
                } else if s[j] == '*' && s.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if s[i] == 'r'
            && (i == 0 || !ident(s[i - 1]) || (s[i - 1] == 'b' && (i < 2 || !ident(s[i - 2]))))
            && matches!(next, Some('"' | '#'))
        {
            // A raw string r"…", r#"…"#: ends at a quote followed by as many hashes.
            let hashes = s[i + 1..].iter().take_while(|&&c| c == '#').count();
            if s.get(i + 1 + hashes) != Some(&'"') {
                i += 1;
                continue;
            }
            let mut j = i + 2 + hashes;
            while j < s.len()
                && !(s[j] == '"' && s[j + 1..].iter().take(hashes).filter(|&&c| c == '#').count() == hashes)
            {
                j += 1;
            }
            let end = j + 1 + hashes;
            blank(&mut out, i, end);
            i = end;
        } else if s[i] == '"' {
            let mut j = i + 1;
            while j < s.len() && s[j] != '"' {
                j += if s[j] == '\\' { 2 } else { 1 };
            }
            blank(&mut out, i, j + 1);
            i = j + 1;
        } else if s[i] == '\'' && (next == Some('\\') || s.get(i + 2) == Some(&'\'')) {
            // A character literal ('x', '\n', '\u{..}'); a lifetime ('a) has no closing quote.
            let mut j = i + 2;
            while j < s.len() && s[j] != '\'' {
                j += 1;
            }
            blank(&mut out, i, j + 1);
            i = j + 1;
        } else {
            i += 1;
        }
    }
    out.into_iter().collect()
}

/// Rust tokens, roughly: identifiers, `::`, and single punctuation characters.
pub fn tokens(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = code.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        if c.is_alphanumeric() || c == '_' {
            let mut end = at + c.len_utf8();
            while let Some(&(i, d)) = chars.peek() {
                if !(d.is_alphanumeric() || d == '_') {
                    break;
                }
                end = i + d.len_utf8();
                chars.next();
            }
            out.push(code[at..end].to_string());
        } else if c == ':' && chars.peek().is_some_and(|&(_, d)| d == ':') {
            chars.next();
            out.push("::".to_string());
        } else if !c.is_whitespace() {
            out.push(c.to_string());
        }
    }
    out
}

/// The module paths a file's code names, each from the crate root (`crate::a::b::C` is
/// `[a, b, C]`), read from `crate::`, `super::`, `self::` and paths that start with a child
/// module's name (`is_child(module, name)`), brace groups and `super::super::` included.
/// `module` is the file's own module path; inline modules (`mod tests { … }`) are entered.
/// `$crate::` is left out: it names the crate from a macro expanded in another crate.
pub fn named_paths(
    code: &str,
    module: &[String],
    is_child: &dyn Fn(&[String], &str) -> bool,
) -> Vec<Vec<String>> {
    let t = tokens(&strip_code(code));
    let mut found = Vec::new();
    let mut current: Vec<String> = module.to_vec();
    let mut inline: Vec<usize> = Vec::new(); // the brace depth each inline module opened at
    let mut depth = 0usize;
    let mut i = 0;
    while i < t.len() {
        match t[i].as_str() {
            "{" => depth += 1,
            "}" => {
                depth = depth.saturating_sub(1);
                if inline.last() == Some(&depth) {
                    inline.pop();
                    current.pop();
                }
            }
            // A unit-test module is left out: tests may set up fixtures from any layer.
            "#" if t[i..]
                .iter()
                .take(7)
                .map(String::as_str)
                .eq(["#", "[", "cfg", "(", "test", ")", "]"])
                && t.get(i + 7).is_some_and(|s| s == "mod")
                && t.get(i + 9).is_some_and(|s| s == "{") =>
            {
                let mut inner = 0usize;
                i += 9;
                while i < t.len() {
                    match t[i].as_str() {
                        "{" => inner += 1,
                        "}" => {
                            inner -= 1;
                            if inner == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    i += 1;
                }
                i += 1;
                continue;
            }
            "mod" if t.get(i + 2).is_some_and(|b| b == "{") => {
                inline.push(depth);
                current.push(t[i + 1].clone());
                depth += 1;
                i += 3;
                continue;
            }
            _ => {}
        }
        let starts_path = t.get(i + 1).is_some_and(|n| n == "::")
            && !(i > 0 && (t[i - 1] == "::" || t[i - 1] == "$"))
            && t[i].chars().next().is_some_and(|c| c.is_alphabetic() || c == '_');
        if !starts_path {
            i += 1;
            continue;
        }
        let mut base: Vec<String> = match t[i].as_str() {
            "crate" => Vec::new(),
            "self" => current.clone(),
            "super" => current[..current.len().saturating_sub(1)].to_vec(),
            name if is_child(&current, name) => {
                let mut b = current.clone();
                b.push(name.to_string());
                b
            }
            _ => {
                i += 1;
                continue;
            }
        };
        i += 2;
        while t.get(i).is_some_and(|s| s == "super") && t.get(i + 1).is_some_and(|s| s == "::") {
            base.pop();
            i += 2;
        }
        let mut leaves = Vec::new();
        i = path_leaves(&t, i, base, &mut leaves);
        found.extend(leaves.into_iter().map(|(path, _)| path));
    }
    found
}

/// A path a file names, from the crate root where known, and the name it is brought in as
/// (`as NAME`; `*` for a glob, whose path is the module globbed).
pub type Leaf = (Vec<String>, Option<String>);

/// Reads the rest of a path after `prefix::` at `t[i]`: identifiers joined by `::`, maybe
/// ending in a brace group of paths, `self`, `*` or `as NAME`; pushes every complete path.
/// Returns the index after it.
pub fn path_leaves(t: &[String], mut i: usize, mut prefix: Vec<String>, out: &mut Vec<Leaf>) -> usize {
    let alias_at = |i: usize| {
        (t.get(i).is_some_and(|s| s == "as"))
            .then(|| t.get(i + 1).cloned())
            .flatten()
    };
    loop {
        match t.get(i).map(String::as_str) {
            Some("{") => {
                i += 1;
                loop {
                    match t.get(i).map(String::as_str) {
                        None => return i,
                        Some("}") => return i + 1,
                        Some(",") => i += 1,
                        _ => i = path_leaves(t, i, prefix.clone(), out),
                    }
                }
            }
            Some("::") => i += 1,
            // `a::b::{self}` names `b`.
            Some("self") if !prefix.is_empty() => {
                let alias = alias_at(i + 1);
                let end = if alias.is_some() { i + 3 } else { i + 1 };
                out.push((prefix, alias));
                return end;
            }
            Some(word)
                if word
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_') =>
            {
                prefix.push(word.to_string());
                i += 1;
                if let Some(alias) = alias_at(i) {
                    out.push((prefix, Some(alias)));
                    return i + 2;
                }
                if t.get(i).is_none_or(|s| s != "::") {
                    out.push((prefix, None));
                    return i;
                }
            }
            _ => {
                // `*`, or something a path does not hold: the path so far is what is named.
                out.push((prefix, Some("*".to_string())));
                return i + 1;
            }
        }
    }
}

/// The names a file's top-level `use` declarations bring in, each with the path it stands
/// for from the crate root (`use super::x::Y as Z;` in module `[a, b]` gives `Z → [a, x, Y]`).
/// Globs and external crates are left out.
pub fn use_aliases(
    code: &str,
    module: &[String],
    is_child: &dyn Fn(&[String], &str) -> bool,
) -> BTreeMap<String, Vec<String>> {
    let t = tokens(&strip_code(code));
    let mut out = BTreeMap::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < t.len() {
        match t[i].as_str() {
            "{" => depth += 1,
            "}" => depth = depth.saturating_sub(1),
            "use" if depth == 0 => {
                let end = t[i..].iter().position(|s| s == ";").map_or(t.len(), |p| i + p);
                use_tree(&t[i + 1..end], module, is_child, &mut out);
                i = end;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The leaves of one `use` tree (the tokens between `use` and `;`) into `out`.
pub fn use_tree(
    t: &[String],
    module: &[String],
    is_child: &dyn Fn(&[String], &str) -> bool,
    out: &mut BTreeMap<String, Vec<String>>,
) {
    let mut found = Vec::new();
    let start = usize::from(t.first().is_some_and(|s| s == "::"));
    path_leaves(t, start, Vec::new(), &mut found);
    for (path, alias) in found {
        if alias.as_deref() == Some("*") {
            continue; // globs are left out
        }
        let Some(first) = path.first() else { continue };
        let (mut base, rest): (Vec<String>, &[String]) = match first.as_str() {
            "crate" => (Vec::new(), &path[1..]),
            "self" => (module.to_vec(), &path[1..]),
            "super" => (module[..module.len().saturating_sub(1)].to_vec(), &path[1..]),
            name if is_child(module, name) => (module.to_vec(), &path[..]),
            _ => continue,
        };
        let mut rest = rest.to_vec();
        while rest.first().is_some_and(|s| s == "super") {
            base.pop();
            rest.remove(0);
        }
        base.extend(rest);
        let Some(name) = alias.or_else(|| base.last().cloned()) else {
            continue;
        };
        if name != "_" {
            out.insert(name, base);
        }
    }
}

/// One crate's source files by module path: each crate root (`lib.rs`, `main.rs`,
/// `bin/*.rs`) and the files its `mod name;` declarations reach. A binary is a crate of its
/// own, so each root has its own map.
pub struct CrateFiles {
    /// (root file, module path → file) per crate root.
    pub roots: Vec<(PathBuf, BTreeMap<Vec<String>, PathBuf>)>,
}

/// The `mod name;` declarations at a file's top level.
pub fn declared_modules(code: &str) -> Vec<String> {
    let t = tokens(&strip_code(code));
    let mut depth = 0usize;
    let mut out = Vec::new();
    for (i, tok) in t.iter().enumerate() {
        match tok.as_str() {
            "{" => depth += 1,
            "}" => depth = depth.saturating_sub(1),
            "mod" if depth == 0 && t.get(i + 2).is_some_and(|s| s == ";") => out.push(t[i + 1].clone()),
            _ => {}
        }
    }
    out
}

pub fn crate_files(src: &Path) -> CrateFiles {
    let mut roots: Vec<PathBuf> = ["lib.rs", "main.rs"]
        .iter()
        .map(|f| src.join(f))
        .filter(|p| p.exists())
        .collect();
    let mut bins = Vec::new();
    rust_files(&src.join("bin"), &mut bins);
    bins.retain(|b| b.parent() == Some(&src.join("bin")) || b.file_name().is_some_and(|n| n == "main.rs"));
    bins.sort();
    roots.extend(bins);
    let mut out = Vec::new();
    for root in roots {
        let mut modules = BTreeMap::new();
        let mut todo = vec![(Vec::<String>::new(), root.clone())];
        while let Some((path, file)) = todo.pop() {
            // A crate root or mod.rs holds its children beside it; a.rs holds them in a/.
            let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
            let dir = if file == root || stem == "mod" {
                file.parent().unwrap().to_path_buf()
            } else {
                file.parent().unwrap().join(&stem)
            };
            for name in declared_modules(&fs::read_to_string(&file).unwrap()) {
                let child = [dir.join(format!("{name}.rs")), dir.join(&name).join("mod.rs")]
                    .into_iter()
                    .find(|p| p.exists());
                if let Some(child) = child {
                    let mut child_path = path.clone();
                    child_path.push(name);
                    todo.push((child_path, child));
                }
            }
            modules.insert(path, file);
        }
        out.push((root, modules));
    }
    CrateFiles { roots: out }
}

/// The file graph of one crate: each file under `src/` and the files its code names.
pub fn file_graph(src: &Path) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let mut all = Vec::new();
    rust_files(src, &mut all);
    let mut graph: BTreeMap<PathBuf, BTreeSet<PathBuf>> =
        all.iter().map(|f| (f.clone(), BTreeSet::new())).collect();
    for (_, modules) in &crate_files(src).roots {
        let is_child = |module: &[String], name: &str| {
            let mut child = module.to_vec();
            child.push(name.to_string());
            modules.contains_key(&child)
        };
        let aliases: BTreeMap<&PathBuf, BTreeMap<String, Vec<String>>> = modules
            .iter()
            .map(|(module, file)| {
                (
                    file,
                    use_aliases(&fs::read_to_string(file).unwrap(), module, &is_child),
                )
            })
            .collect();
        // The file an item's path leads to: the deepest module along it that is a file,
        // followed through that file's `use` when the next name is one it imports (a
        // re-export is where the item is reached, not where it lives).
        let resolve = |mut path: Vec<String>| -> Option<&PathBuf> {
            for _ in 0..16 {
                let k = (0..=path.len())
                    .rev()
                    .find(|k| modules.contains_key(&path[..*k]))?;
                let file = &modules[&path[..k]];
                match path.get(k).and_then(|name| aliases[file].get(name)) {
                    Some(target) if *target != path[..=k] => {
                        let mut next = target.clone();
                        next.extend_from_slice(&path[k + 1..]);
                        path = next;
                    }
                    _ => return Some(file),
                }
            }
            None
        };
        for (module, file) in modules {
            for path in named_paths(&fs::read_to_string(file).unwrap(), module, &is_child) {
                let to = resolve(path);
                if let Some(to) = to.filter(|to| *to != file) {
                    graph.get_mut(file).unwrap().insert(to.clone());
                }
            }
        }
    }
    graph
}

/// The strongly connected components of more than one node (Tarjan's algorithm).
pub fn cycles_of<N: Ord + Clone>(graph: &BTreeMap<N, BTreeSet<N>>) -> Vec<Vec<N>> {
    struct Walk<'g, N> {
        graph: &'g BTreeMap<N, BTreeSet<N>>,
        index: BTreeMap<N, usize>,
        low: BTreeMap<N, usize>,
        stack: Vec<N>,
        out: Vec<Vec<N>>,
    }
    fn visit<N: Ord + Clone>(w: &mut Walk<N>, node: &N) {
        let n = w.index.len();
        w.index.insert(node.clone(), n);
        w.low.insert(node.clone(), n);
        w.stack.push(node.clone());
        for next in w.graph.get(node).into_iter().flatten() {
            if !w.index.contains_key(next) {
                visit(w, next);
                let low = w.low[node].min(w.low[next]);
                w.low.insert(node.clone(), low);
            } else if w.stack.contains(next) {
                let low = w.low[node].min(w.index[next]);
                w.low.insert(node.clone(), low);
            }
        }
        if w.low[node] == w.index[node] {
            let at = w.stack.iter().position(|x| x == node).unwrap();
            let mut component = w.stack.split_off(at);
            if component.len() > 1 {
                component.sort();
                w.out.push(component);
            }
        }
    }
    let mut w = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        out: Vec::new(),
    };
    for node in graph.keys() {
        if !w.index.contains_key(node) {
            visit(&mut w, node);
        }
    }
    w.out.sort();
    w.out
}
