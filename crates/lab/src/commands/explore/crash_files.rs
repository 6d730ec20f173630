//! The database files of a run's directory at a crash point, kept to start each check from
//! them in place: with a plain file attached (`attach-plain`), the journals name the
//! super-journal by its path, and each check's recovery changes them.

use std::path::{Path, PathBuf};

use anyhow::Result;

/// The database files of a run's directory as a crash left them (the store, the plain
/// file, their journals and the super-journal: every file named `bank…` but the logs).
pub(super) struct CrashFiles(Vec<(PathBuf, Vec<u8>)>);

impl CrashFiles {
    fn is_database_file(name: &str) -> bool {
        name.starts_with("bank") && !name.ends_with(".log")
    }

    pub(super) fn take(dir: &Path) -> Result<CrashFiles> {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            if Self::is_database_file(&entry.file_name().to_string_lossy()) {
                files.push((entry.path(), std::fs::read(entry.path())?));
            }
        }
        Ok(CrashFiles(files))
    }

    /// Puts them back (in place: the store keeps its inode) and removes any other database
    /// file a check made.
    pub(super) fn restore(&self, dir: &Path) -> Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let path = entry.path();
            if Self::is_database_file(&entry.file_name().to_string_lossy())
                && !self.0.iter().any(|(p, _)| *p == path)
            {
                std::fs::remove_file(&path)?;
            }
        }
        for (path, bytes) in &self.0 {
            std::fs::write(path, bytes)?;
        }
        Ok(())
    }
}
