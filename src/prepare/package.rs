//! The `chinese-poetry` package's files as `prepare_data` reads them: numbered JSON arrays
//! (`poet.tang.N.json`, `ci.song.N.json`), read in the order of N.

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The `{prefix}N.json` files of `dir` (e.g. `poet.tang.N.json`), in the order of N; the errors
/// name `folder`, the package's folder that holds them.
fn numbered_files(dir: &Path, prefix: &str, folder: &str) -> Result<Vec<PathBuf>> {
    let entries = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read {}: give the package's {folder}", dir.display()))?;
    let mut files: Vec<(u64, PathBuf)> = Vec::new();
    for entry in entries {
        let path = entry?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if let Some(n) = name
            .strip_prefix(prefix)
            .and_then(|r| r.strip_suffix(".json"))
        {
            if let Ok(n) = n.parse() {
                files.push((n, path));
            }
        }
    }
    if files.is_empty() {
        bail!(
            "no {prefix}*.json in {}: give the package's {folder}",
            dir.display()
        );
    }
    files.sort();
    Ok(files.into_iter().map(|(_, p)| p).collect())
}

/// Every item of `dir`'s `{prefix}N.json` files (each a JSON array of `T`), in file order.
pub fn read_numbered_files<T: for<'de> Deserialize<'de>>(
    dir: &Path,
    prefix: &str,
    folder: &str,
) -> Result<Vec<T>> {
    let mut all = Vec::new();
    for file in numbered_files(dir, prefix, folder)? {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        let items: Vec<T> = serde_json::from_str(&text)
            .with_context(|| format!("{} is not the expected JSON", file.display()))?;
        all.extend(items);
    }
    Ok(all)
}

/// Every item of `dir`'s `poet.tang.N.json` files (each a JSON array of `T`), in file order.
pub fn read_tang_files<T: for<'de> Deserialize<'de>>(dir: &Path) -> Result<Vec<T>> {
    read_numbered_files(
        dir,
        "poet.tang.",
        "dist/quantangshi to --source, dist/strains/json to --strains",
    )
}

/// Every item of `dir`'s `poet.song.N.json` files, in file order.
pub fn read_song_files<T: for<'de> Deserialize<'de>>(dir: &Path) -> Result<Vec<T>> {
    read_numbered_files(dir, "poet.song.", "dist/quantangshi to --source")
}
