//! A run's configuration in sections, one place for every default, parsed from TOML and validated
//! before any tensor is built: `[model]` (the GPT, `model.rs`), then `[data]`, `[train]`,
//! `[optimizer]` and `[schedule]` (`training.rs`). Any setting can be changed from outside as
//! `section.key=value` (`overrides.rs`); configs of the old layout still read (`legacy.rs`).

/// `Display` and `FromStr` for a setting chosen by name (`$t::ALL`, `$t::name`); an unknown name
/// is refused with the list of names, as `$what`.
macro_rules! named_setting {
    ($t:ty, $what:literal) => {
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl std::str::FromStr for $t {
            type Err = super::ConfigError;
            fn from_str(s: &str) -> Result<Self, super::ConfigError> {
                super::by_name(s, <$t>::ALL, <$t>::name, $what)
            }
        }
    };
}

mod base;
mod legacy;
mod model;
mod overrides;
mod training;

pub use crate::data::CorpusKind;
pub use model::{Activation, ModelConfig, Position};
pub use overrides::Override;
use serde::{Deserialize, Serialize};
use std::path::Path;
pub use training::{
    DataConfig, OptimizerConfig, OptimizerKind, ScheduleConfig, ScheduleKind, TrainConfig,
    DECAY_FRACTION, MUON_LEARNING_RATE, MUON_MOMENTUM,
};

/// The value of `all` called `name`, or an error that lists the names.
fn by_name<T: Copy, const N: usize>(
    name: &str,
    all: [T; N],
    name_of: fn(T) -> &'static str,
    what: &str,
) -> Result<T, ConfigError> {
    all.into_iter()
        .find(|&v| name_of(v) == name)
        .ok_or_else(|| {
            let names: Vec<_> = all.into_iter().map(name_of).collect();
            ConfigError::Invalid(format!(
                "unknown {what} `{name}`: use one of {}",
                names.join(", ")
            ))
        })
}

/// What is wrong with a configuration, said so that the user knows what to change.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}; give a config file (configs/ holds them, e.g. configs/default.toml)")]
    Read {
        /// The file that was asked for.
        path: String,
        /// Why reading failed.
        source: std::io::Error,
    },
    /// The TOML is malformed, has unknown keys or values of the wrong type.
    #[error("config {path} is not valid: {message}")]
    Parse {
        /// The file (or `<string>`).
        path: String,
        /// The parser's message, which names the key and line.
        message: String,
    },
    /// The values parse but do not make a model.
    #[error("invalid config: {0}")]
    Invalid(String),
    /// What is wrong with a config's base, and which config names that base.
    #[error("{inner}; it is the base of {config}")]
    InBase {
        /// The config that names the base.
        config: String,
        /// What is wrong with the base (or with a base of its own).
        inner: Box<ConfigError>,
    },
    /// Training the model would need more memory than the machine has available.
    #[error("training this config needs about {needed} of memory but {available} is available: lower batch_size, block_size, n_layer or n_embd")]
    TooLarge {
        /// The estimate, e.g. "99.0 GB".
        needed: String,
        /// What the machine has available.
        available: String,
    },
}

/// The keys whose values differ between two tables of settings, as `key: a X, b Y` with the two
/// sides named by `names` (`nothing` for a key one side does not set).
fn differences<T: Serialize>(a: &T, b: &T, names: [&str; 2]) -> Vec<String> {
    let as_table = |t: &T| toml::Table::try_from(t).unwrap_or_default();
    changes(&as_table(a), &as_table(b), "")
        .iter()
        .map(|c| c.describe(names))
        .collect()
}

/// A setting whose value differs between two configs.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// `section.key` (or `key` within one section).
    pub key: String,
    /// The two values, `nothing` where one side does not set it.
    pub values: [String; 2],
}

impl Change {
    /// `key: a X, b Y`, the two sides named by `names`.
    pub fn describe(&self, names: [&str; 2]) -> String {
        let [a, b] = &self.values;
        format!("{}: {} {a}, {} {b}", self.key, names[0], names[1])
    }
}

/// The keys of `a` or `b` whose values differ, each after `prefix`, in sorted order.
fn changes(a: &toml::Table, b: &toml::Table, prefix: &str) -> Vec<Change> {
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    let shown = |v: Option<&toml::Value>| v.map_or("nothing".into(), |v| v.to_string());
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| Change {
            key: format!("{prefix}{k}"),
            values: [shown(a.get(k)), shown(b.get(k))],
        })
        .collect()
}

/// Turns a TOML error into a [`ConfigError::Parse`] with a one-line message.
pub fn parse_error(origin: &str, e: toml::de::Error) -> ConfigError {
    let message = e
        .to_string()
        .replace('\n', " ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let message = format!(
        "{}; configs/default.toml shows every setting in its section",
        short_numbers(&message)
    );
    ConfigError::Parse {
        path: origin.to_string(),
        message,
    }
}

/// Reads a file into a string, with the path in the error.
pub fn read_config_file(path: &Path) -> Result<String, ConfigError> {
    crate::files::read_text_limited(path, crate::files::CONFIG_LIMIT).map_err(|source| {
        ConfigError::Read {
            path: path.display().to_string(),
            source,
        }
    })
}

/// A number as a message shows it: as Rust writes it where that is short, else in scientific
/// notation (`1e308`, not its 309 digits).
pub fn shown(x: f64) -> String {
    let plain = x.to_string();
    match plain.len() > 16 {
        true => format!("{x:e}"),
        false => plain,
    }
}

/// `n` things named `one` (the singular), as a sentence says them: "1 layer", "2 layers".
pub fn count(n: usize, one: &str) -> String {
    match n {
        1 => format!("1 {one}"),
        n => format!("{n} {one}s"),
    }
}

/// `minutes` as a sentence says them: "1 minute", "0.5 minutes", "30 minutes".
pub fn minutes_said(minutes: f64) -> String {
    match minutes == 1.0 {
        true => "1 minute".into(),
        false => format!("{} minutes", shown(minutes)),
    }
}

/// `text` with each number of more than 16 characters [`shown`] short (a parser's message quotes
/// the value it refused, all 309 digits of 1e308).
fn short_numbers(text: &str) -> String {
    let numeric = |c: char| c.is_ascii_digit() || ".eE+-".contains(c);
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(|c: char| c.is_ascii_digit()) {
        let run = rest[start..]
            .find(|c: char| !numeric(c))
            .map_or(rest.len(), |n| start + n);
        let number = &rest[start..run];
        out.push_str(&rest[..start]);
        match number.parse::<f64>() {
            Ok(x) if number.len() > 16 => out.push_str(&shown(x)),
            _ => out.push_str(number),
        }
        rest = &rest[run..];
    }
    out + rest
}

/// The most steps a run can be planned for: the largest integer a config file holds.
pub const MAX_ITERS: usize = i64::MAX as usize;

/// The fewest warm-up steps over which `minutes` measures the step rate.
pub const MIN_PLANNING_STEPS: usize = 5;

/// Refuses a count `name` of 0, or one a config file cannot hold.
fn check_count(name: &str, value: usize) -> Result<(), ConfigError> {
    if value == 0 {
        return Err(ConfigError::Invalid(format!("{name} must be at least 1")));
    }
    check_toml_integer(name, value as u64)
}

/// Refuses an integer that a TOML file cannot hold (they are signed 64-bit): saved in a run's
/// config.toml, it could not be read back.
pub fn check_toml_integer(name: &str, value: u64) -> Result<(), ConfigError> {
    match i64::try_from(value) {
        Ok(_) => Ok(()),
        Err(_) => Err(ConfigError::Invalid(format!(
            "{name} {value} is more than {}, the largest integer a config file can hold: use a smaller one",
            i64::MAX
        ))),
    }
}

/// The settings that belong to one kind of a section's choice, each with the kind: a wsd
/// schedule's decay, Muon's rate and momentum.
pub const KIND_SETTINGS: [(&str, &[(&str, &str)]); 2] = [
    ("schedule", &[("decay_fraction", "wsd")]),
    (
        "optimizer",
        &[("muon_learning_rate", "muon"), ("muon_momentum", "muon")],
    ),
];

/// The sections of a config, in the order a file lists them.
pub const SECTIONS: [&str; 5] = ["model", "data", "train", "optimizer", "schedule"];

/// A whole run's configuration, as stored in `configs/*.toml` and in each run directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RunConfig {
    /// The model.
    pub model: ModelConfig,
    /// What to train on.
    pub data: DataConfig,
    /// How long, in what batches.
    pub train: TrainConfig,
    /// The optimiser.
    pub optimizer: OptimizerConfig,
    /// The learning rate's course.
    pub schedule: ScheduleConfig,
}

impl RunConfig {
    /// Reads and parses a TOML file (not yet validated: overrides may still change it). A file
    /// with none of the sections is refused: it would silently train the built-in defaults.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        Self::load_with(path, &[])
    }

    /// The config in `path` (over its bases: `base.rs`) with `overrides` applied in order (a
    /// later one wins). A step count given (`train.max_iters`) wins over `minutes` in the file;
    /// both given are refused.
    pub fn load_with(path: &Path, overrides: &[Override]) -> Result<Self, ConfigError> {
        let table = base::table_of(path)?;
        Self::overridden(table, &path.display().to_string(), overrides)
    }

    /// [`RunConfig::load_with`] of a whole config's text (the page's, which names no base);
    /// `origin` names it in errors.
    pub fn from_toml_with(
        text: &str,
        origin: &str,
        overrides: &[Override],
    ) -> Result<Self, ConfigError> {
        let table = base::table_of_text(text, origin)?;
        Self::overridden(table, origin, overrides)
    }

    /// The config of `table` (read from `origin`) with `overrides` applied.
    fn overridden(
        mut table: toml::Table,
        origin: &str,
        overrides: &[Override],
    ) -> Result<Self, ConfigError> {
        if overrides.is_empty() {
            return RunConfig::from_table(table, origin);
        }
        overrides::apply(&mut table, overrides, "(as flags or with --set)")?;
        RunConfig::from_table(table, &format!("{origin} with its overrides"))
    }

    /// Parses TOML text (not yet validated); `origin` names it in error messages.
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let table: toml::Table = toml::from_str(text).map_err(|e| parse_error(origin, e))?;
        Self::from_table(table, origin)
    }

    /// The config of a parsed file (of the old layout too).
    pub(super) fn from_table(mut table: toml::Table, origin: &str) -> Result<Self, ConfigError> {
        legacy::upgraded(&mut table, origin)?;
        toml::Value::Table(table)
            .try_into()
            .map_err(|e| parse_error(origin, e))
    }

    /// The TOML text of this config.
    pub fn to_toml(&self) -> Result<String, ConfigError> {
        toml::to_string(self)
            .map_err(|e| ConfigError::Invalid(format!("cannot write the config as TOML: {e}")))
    }

    /// This config with the settings of its kinds spelled out where it leaves them to their
    /// defaults (a wsd schedule's decay_fraction, Muon's rate and momentum): the same recipe,
    /// written one way, so that two configs compare by what they train.
    pub fn spelled_out(&self) -> RunConfig {
        let mut cfg = self.clone();
        if cfg.schedule.kind == ScheduleKind::Wsd {
            cfg.schedule.decay_fraction = Some(cfg.schedule.decay_fraction());
        }
        if cfg.optimizer.kind == OptimizerKind::Muon {
            cfg.optimizer.muon_learning_rate = Some(cfg.optimizer.muon_learning_rate());
            cfg.optimizer.muon_momentum = Some(cfg.optimizer.muon_momentum());
        }
        cfg
    }

    /// The settings, as `section.key`, in which `other` differs from this config.
    pub fn changes(&self, other: &RunConfig) -> Vec<Change> {
        let as_table = |c: &RunConfig| toml::Table::try_from(c).unwrap_or_default();
        let (a, b) = (as_table(self), as_table(other));
        let section = |t: &toml::Table, name: &str| match t.get(name) {
            Some(toml::Value::Table(section)) => section.clone(),
            _ => toml::Table::new(),
        };
        SECTIONS
            .iter()
            .flat_map(|name| changes(&section(&a, name), &section(&b, name), &format!("{name}.")))
            .collect()
    }

    /// [`RunConfig::changes`] as `section.key: a X, b Y`, the two sides named by `names`.
    pub fn differences(&self, other: &RunConfig, names: [&str; 2]) -> Vec<String> {
        self.changes(other)
            .iter()
            .map(|c| c.describe(names))
            .collect()
    }

    /// Validates every section.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.model.validate()?;
        self.train.validate()?;
        self.optimizer.validate()?;
        if self.data.decay_corpus.is_some() && self.schedule.kind != ScheduleKind::Wsd {
            return Err(ConfigError::Invalid(
                "data.decay_corpus trains the schedule's decay, and only schedule.kind = \"wsd\" has one: choose wsd, or leave decay_corpus out".into(),
            ));
        }
        self.schedule.validate(&self.train)
    }
}

#[cfg(test)]
mod tests {
    use super::{count, minutes_said};

    #[test]
    fn one_thing_is_said_in_the_singular() {
        assert_eq!(count(1, "layer"), "1 layer");
        assert_eq!(count(2, "layer"), "2 layers");
        assert_eq!(count(0, "head"), "0 heads");
        assert_eq!(minutes_said(1.0), "1 minute");
        assert_eq!(minutes_said(0.5), "0.5 minutes");
        assert_eq!(minutes_said(30.0), "30 minutes");
    }
}
