//! The arguments of `CREATE VIRTUAL TABLE t USING mvbt(...)`.

use std::path::{Path, PathBuf};

use onesync_mvbt::Config;

/// Versions an `mvbt` table keeps readable by `as_of` besides the latest,
/// unless `keep_versions=` says otherwise.
pub const DEFAULT_KEEP_VERSIONS: u64 = 100;

/// The parsed arguments.
#[derive(Clone, Debug)]
pub(crate) struct TableArgs {
    /// `file=` as written (None: next to the database).
    pub file: Option<String>,
    pub config: Config,
}

const KEYS: &str = "file, node_size, keep_versions, variant, redistribution, durable, reserved_cells";

/// Parses `key=value` arguments (values optionally quoted with ' or ").
pub(crate) fn parse(args: &[String]) -> Result<TableArgs, String> {
    let mut file = None;
    let mut variant = None;
    let mut node_size = None;
    let mut keep_versions = None;
    let mut redistribution = None;
    let mut durable = None;
    let mut reserved_cells = None;
    for arg in args {
        let Some((key, value)) = arg.split_once('=') else {
            return Err(format!("mvbt: argument `{arg}` is not key=value (keys: {KEYS})"));
        };
        let key = key.trim().to_ascii_lowercase();
        let value = unquote(value.trim());
        match key.as_str() {
            "file" => file = Some(value),
            "variant" => variant = Some(value),
            "node_size" => node_size = Some(number(&key, &value)?),
            "keep_versions" => keep_versions = Some(number(&key, &value)?),
            "redistribution" => redistribution = Some(flag(&key, &value)?),
            "durable" => durable = Some(flag(&key, &value)?),
            "reserved_cells" => reserved_cells = Some(number(&key, &value)?),
            _ => return Err(format!("mvbt: unknown argument `{key}` (keys: {KEYS})")),
        }
    }
    let mut config = match variant.as_deref().map(str::to_ascii_lowercase).as_deref() {
        None | Some("ls-mvbt") => Config::ls_mvbt(),
        Some("mvbt") => Config::mvbt(),
        Some("mvbt+embedding") => Config::mvbt_embedding(),
        Some("mvbt+lazy-split") => Config::mvbt_lazy_split(),
        Some(other) => {
            return Err(format!(
                "mvbt: unknown variant '{other}' (one of: ls-mvbt, mvbt, mvbt+embedding, mvbt+lazy-split)"
            ))
        }
    };
    config.keep_versions = keep_versions.unwrap_or(DEFAULT_KEEP_VERSIONS);
    if let Some(size) = node_size {
        if !(512..=8192).contains(&size) || size % 512 != 0 {
            return Err(format!(
                "mvbt: node_size must be a multiple of 512 from 512 to 8192 (got {size})"
            ));
        }
        config.node_size = usize::try_from(size).map_err(|e| e.to_string())?;
    }
    if let Some(on) = redistribution {
        config.sibling_redistribution = on;
    }
    if let Some(on) = durable {
        config.durable = on;
    }
    if let Some(cells) = reserved_cells {
        config.reserved_cells = usize::try_from(cells).map_err(|e| e.to_string())?;
    }
    Ok(TableArgs { file, config })
}

/// The tree file of table `table`: `file=` (relative to the database's
/// directory), or `<database file>-<table>.mvbt`. `db_file` is
/// `sqlite3_db_filename` ("" or None for in-memory and temp databases).
pub(crate) fn table_path(
    file: Option<&str>,
    db_file: Option<&str>,
    schema: &str,
    table: &str,
) -> Result<PathBuf, String> {
    let db_file = db_file.filter(|f| !f.is_empty());
    match (file, db_file) {
        (Some(f), _) if Path::new(f).is_absolute() => Ok(PathBuf::from(f)),
        (Some(f), Some(db)) => Ok(Path::new(db).parent().unwrap_or(Path::new("")).join(f)),
        (Some(f), None) => Ok(PathBuf::from(f)),
        (None, Some(db)) => Ok(PathBuf::from(format!("{db}-{table}.mvbt"))),
        (None, None) => Err(format!(
            "mvbt: table {table} needs file='PATH': database '{schema}' is in memory or temporary, \
             so there is no database file to put the tree next to"
        )),
    }
}

fn unquote(v: &str) -> String {
    for q in ['\'', '"'] {
        if v.len() >= 2 && v.starts_with(q) && v.ends_with(q) {
            let doubled: String = [q, q].iter().collect();
            return v[1..v.len() - 1].replace(&doubled, &q.to_string());
        }
    }
    v.to_owned()
}

fn number(key: &str, value: &str) -> Result<u64, String> {
    value
        .parse()
        .map_err(|_| format!("mvbt: {key} must be a non-negative integer (got '{value}')"))
}

fn flag(key: &str, value: &str) -> Result<bool, String> {
    match value.to_ascii_lowercase().as_str() {
        "1" | "on" | "true" | "yes" => Ok(true),
        "0" | "off" | "false" | "no" => Ok(false),
        _ => Err(format!("mvbt: {key} must be 0 or 1 (got '{value}')")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn parses_presets_and_knobs() {
        let a = parse(&strings(&[
            "file='a''b.mvbt'",
            " variant = mvbt ",
            "node_size=1024",
            "redistribution=1",
        ]))
        .unwrap();
        assert_eq!(a.file.as_deref(), Some("a'b.mvbt"));
        assert_eq!(a.config.node_size, 1024);
        assert!(a.config.sibling_redistribution);
        assert!(!a.config.metadata_embedding);
        assert_eq!(a.config.keep_versions, DEFAULT_KEEP_VERSIONS);
        assert!(parse(&strings(&["node_size=100"]))
            .unwrap_err()
            .contains("node_size"));
        assert!(parse(&strings(&["variant=btree"]))
            .unwrap_err()
            .contains("unknown variant"));
        assert!(parse(&strings(&["colour=red"]))
            .unwrap_err()
            .contains("unknown argument"));
    }

    #[test]
    fn paths() {
        assert_eq!(
            table_path(None, Some("/d/x.db"), "main", "kv").unwrap(),
            Path::new("/d/x.db-kv.mvbt")
        );
        assert_eq!(
            table_path(Some("t.mvbt"), Some("/d/x.db"), "main", "kv").unwrap(),
            Path::new("/d/t.mvbt")
        );
        assert_eq!(
            table_path(Some("/e/t"), Some("/d/x.db"), "main", "kv").unwrap(),
            Path::new("/e/t")
        );
        assert!(table_path(None, Some(""), "main", "kv")
            .unwrap_err()
            .contains("file="));
    }
}
