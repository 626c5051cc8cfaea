//! Configs as changes: a config may name the config it changes, `base = "configs/default.toml"`
//! (a path from the working directory, as its corpus is, and as an ablation spec's base is; else
//! from a folder above the config's), and hold only the keys it changes, as nanoGPT's config files set
//! only what differs from its defaults. The base's own base is read in turn, and each file's keys
//! win over its base's as a `--set` of them would (a kind it chooses leaves the base's settings
//! of other kinds behind).

use super::{legacy, parse_error, read_config_file, ConfigError, RunConfig, SECTIONS};
use std::path::{Path, PathBuf};

/// The top-level key that names a config's base.
pub const BASE_KEY: &str = "base";

/// How many bases deep a config may go.
const DEPTH: usize = 8;

/// The table of the config file at `path`: its own keys over its bases' (each file upgraded from
/// the old layout, and its own values checked).
pub(super) fn table_of(path: &Path) -> Result<toml::Table, ConfigError> {
    table_in_chain(path, &mut Vec::new())
}

/// The table of a whole config's text, from `origin` (a text names no base: there is no folder to
/// find one from), upgraded from the old layout and checked.
pub(super) fn table_of_text(text: &str, origin: &str) -> Result<toml::Table, ConfigError> {
    let (table, base) = own_table(text, origin)?;
    match base {
        Some(base) => Err(refused(origin, format!(
            "base = {base:?}: a config given as text cannot name a base; give the whole config (`train --config FILE --print-config` prints it)"
        ))),
        None => Ok(table),
    }
}

/// A config file's own table, upgraded and checked, and the base it names.
fn own_table(text: &str, origin: &str) -> Result<(toml::Table, Option<String>), ConfigError> {
    let mut table: toml::Table = toml::from_str(text).map_err(|e| parse_error(origin, e))?;
    let base = match table.remove(BASE_KEY) {
        None => None,
        Some(toml::Value::String(base)) => Some(base),
        Some(other) => {
            return Err(refused(&origin, format!(
                "base = {other} is not a path: name the config this one changes as a string (base = \"configs/default.toml\")"
            )))
        }
    };
    if base.is_none() && !SECTIONS.iter().any(|s| table.contains_key(*s)) {
        return Err(refused(origin, "it has none of the sections [model], [data], [train], [optimizer], [schedule]: name the config it changes (base = \"configs/default.toml\") or copy configs/default.toml and change what you need".into()));
    }
    // Its own values are checked before its base's can hide them.
    RunConfig::from_toml_str(&without_base_line(text), origin)?;
    legacy::upgraded(&mut table, origin)?;
    Ok((table, base))
}

/// [`table_of`] for a file reached from the files of `chain` (each the base of the one before).
fn table_in_chain(path: &Path, chain: &mut Vec<PathBuf>) -> Result<toml::Table, ConfigError> {
    let text = read_config_file(path)?;
    let origin = path.display().to_string();
    let (table, base) = own_table(&text, &origin)?;
    let Some(base) = base else {
        return Ok(table);
    };
    let Some(base_path) = found(&base, path) else {
        return Err(refused(&origin, format!(
            "its base {:?} is not a file, from the working directory nor from a folder above the config's: name it as the corpus is named, from the repository's root (configs/ladder/3min.toml names \"configs/default.toml\"), and run from there", base
        )));
    };
    let base_shown = crate::cli::shell_word(&base_path);
    chain.push(std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()));
    let canonical = std::fs::canonicalize(&base_path).unwrap_or_else(|_| base_path.clone());
    if chain.contains(&canonical) {
        return Err(refused(&origin, format!(
            "its base {base_shown} leads back to a config of the chain that reaches it: a config cannot be its own base, nor its base's; name one that does not"
        )));
    }
    if chain.len() >= DEPTH {
        return Err(refused(&origin, format!(
            "its bases go more than {DEPTH} deep: name a config nearer the end of the chain (configs/default.toml)"
        )));
    }
    let mut merged = table_in_chain(&base_path, chain).map_err(|inner| ConfigError::InBase {
        config: origin.clone(),
        inner: Box::new(inner),
    })?;
    let changes = table
        .into_iter()
        .flat_map(|(section, keys)| match keys {
            toml::Value::Table(keys) => keys
                .into_iter()
                .map(|(name, value)| super::Override {
                    key: format!("{section}.{name}"),
                    value,
                })
                .collect(),
            _ => Vec::new(), // no such key: its own check above refused it
        })
        .collect::<Vec<_>>();
    super::overrides::apply(&mut merged, &changes, &format!("in {origin}"))?;
    Ok(merged)
}

/// The file `base` names for the config at `config`: from the working directory, or else from a
/// folder above the config's (so that a config given by its full path from elsewhere finds its
/// base beside it, as `configs/default.toml` for `/repo/configs/tiny.toml`).
fn found(base: &str, config: &Path) -> Option<PathBuf> {
    let config = std::path::absolute(config).unwrap_or_else(|_| config.to_path_buf());
    let above = config.parent().into_iter().flat_map(Path::ancestors);
    std::iter::once(PathBuf::from(base))
        .chain(above.map(|folder| folder.join(base)))
        .find(|candidate| candidate.is_file())
}

/// `text` with its top-level `base = …` line blanked (the line kept, so that a parse error's
/// line stays the file's).
fn without_base_line(text: &str) -> String {
    let mut top = true;
    text.lines()
        .map(|line| {
            let trimmed = line.trim_start();
            top &= !trimmed.starts_with('[');
            let key = ["base", "\"base\"", "'base'"]
                .iter()
                .find_map(|key| trimmed.strip_prefix(key));
            let is_base = key.is_some_and(|rest| rest.trim_start().starts_with('='));
            match top && is_base {
                true => "",
                false => line,
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A config from `origin` refused for `message`.
fn refused(origin: &str, message: String) -> ConfigError {
    ConfigError::Parse {
        path: origin.to_string(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `files` (name, text, `{dir}` standing for the folder) into a new folder and loads
    /// the first.
    fn load(files: &[(&str, &str)]) -> Result<RunConfig, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let text = text.replace("{dir}", dir.path().to_str().unwrap());
            std::fs::write(path, text).unwrap();
        }
        RunConfig::load(&dir.path().join(files[0].0))
    }

    const BASE: &str = "[model]\nn_layer = 3\nn_embd = 96\n[train]\nmax_iters = 500\n\
                        [schedule]\nkind = \"wsd\"\ndecay_fraction = 0.3\n";

    #[test]
    fn a_config_holds_what_it_changes_over_its_base() {
        let cfg = load(&[
            (
                "ladder/small.toml",
                "base = '{dir}/base.toml'\n[model]\nn_layer = 1\n",
            ),
            ("base.toml", BASE),
        ])
        .unwrap();
        assert_eq!((cfg.model.n_layer, cfg.model.n_embd), (1, 96));
        assert_eq!(cfg.train.max_iters, 500);
        // The same config written whole is the same config.
        let whole = load(&[("whole.toml", &BASE.replace("n_layer = 3", "n_layer = 1"))]).unwrap();
        assert_eq!(cfg, whole);
        // A base of a base, and a kind chosen leaves the base's settings of its kind behind.
        let cfg = load(&[
            (
                "c.toml",
                "base = '{dir}/b.toml'\n[schedule]\nkind = \"cosine\"\n",
            ),
            (
                "b.toml",
                "base = '{dir}/base.toml'\n[train]\nmax_iters = 40\n",
            ),
            ("base.toml", BASE),
        ])
        .unwrap();
        assert_eq!((cfg.train.max_iters, cfg.model.n_layer), (40, 3));
        assert_eq!(cfg.schedule.decay_fraction, None);
    }

    #[test]
    fn a_config_given_from_elsewhere_finds_its_base_above_it() {
        let cfg = load(&[
            (
                "configs/ladder/small.toml",
                "base = \"configs/base.toml\"\n[model]\nn_layer = 1\n",
            ),
            ("configs/base.toml", BASE),
        ])
        .unwrap();
        assert_eq!((cfg.model.n_layer, cfg.model.n_embd), (1, 96));
    }

    #[test]
    fn a_config_given_as_text_is_whole_and_names_no_base() {
        let whole = RunConfig::from_toml_with(BASE, "page", &[]).unwrap();
        assert_eq!((whole.model.n_layer, whole.train.max_iters), (3, 500));
        let err = RunConfig::from_toml_with("base = \"configs/default.toml\"\n", "page", &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("cannot name a base") && err.contains("--print-config"),
            "{err}"
        );
    }

    #[test]
    fn a_bad_base_is_refused_with_what_to_do() {
        let message = |files: &[(&str, &str)]| load(files).unwrap_err().to_string();
        let missing = message(&[("a.toml", "base = '{dir}/nothing.toml'\n")]);
        assert!(
            missing.contains("is not a file") && missing.contains("working directory"),
            "{missing}"
        );
        let looped = message(&[
            ("a.toml", "base = '{dir}/b.toml'\n"),
            ("b.toml", "base = '{dir}/a.toml'\n[model]\nn_layer = 1\n"),
        ]);
        assert!(looped.contains("cannot be its own base"), "{looped}");
        let itself = message(&[("a.toml", "base = '{dir}/a.toml'\n")]);
        assert!(itself.contains("cannot be its own base"), "{itself}");
        let number = message(&[("a.toml", "base = 3\n")]);
        assert!(number.contains("is not a path"), "{number}");
        // A bad key of the file is named in the file, as in a config without a base.
        let bad = message(&[
            ("a.toml", "base = '{dir}/b.toml'\n[model]\nn_headz = 2\n"),
            ("b.toml", BASE),
        ]);
        assert!(bad.contains("a.toml") && bad.contains("n_headz"), "{bad}");
        // A bad key of the base is named in the base.
        let bad = message(&[
            ("a.toml", "base = '{dir}/b.toml'\n"),
            ("b.toml", "[model]\nn_layerz = 2\n"),
        ]);
        assert!(bad.contains("b.toml") && bad.contains("n_layerz"), "{bad}");
        // ... and the config that names that base is named after it.
        assert!(bad.ends_with("a.toml"), "{bad}");
        assert!(bad.contains("; it is the base of "), "{bad}");
    }
}
