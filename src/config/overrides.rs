//! One way to change a config's values from outside its file: `section.key=value`. `train --set`
//! takes it as typed, each of `train`'s named flags (`--max-iters 400`) is a shortcut for one key,
//! and the page's Train form sends its fields the same way; all of them meet the file's values in
//! [`RunConfig::load_with`].

use super::{legacy, parse_error, ConfigError, RunConfig, KIND_SETTINGS};
use serde::Serialize;

/// A setting to change: its `section.key` and its new value.
#[derive(Debug, Clone, PartialEq)]
pub struct Override {
    pub key: String,
    pub value: toml::Value,
}

impl Override {
    /// `section.key=value` as typed: the value read as TOML (a number, true or false, "a
    /// string", [an, array]), or else taken as a string (`schedule.kind=wsd`). The key is
    /// checked to name a setting, and the value to be one it takes; a key of the old layout
    /// (`train.learning_rate`) is read as the key it is now (`optimizer.learning_rate`).
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let Some((key, value)) = text.split_once('=') else {
            return Err(invalid(
                text,
                "give section.key=value, e.g. optimizer.learning_rate=1e-3 (configs/default.toml lists the settings)",
            ));
        };
        let key = key.trim_matches(' ');
        let hidden = |c: char| crate::data::error::is_invisible(c) || c.is_whitespace();
        if let Some(c) = key.chars().find(|&c| hidden(c)) {
            return Err(invalid(
                &crate::cli::escaped(key),
                &format!(
                    "its key holds {}, which cannot be seen: type the key again without it (section.key, e.g. train.seed)",
                    crate::data::error::describe_char(c)
                ),
            ));
        }
        if let Some(c) = value.chars().find(|&c| crate::data::error::is_invisible(c)) {
            return Err(invalid(
                key,
                &format!(
                    "its value holds {}, which cannot be seen: type the value again without it",
                    crate::data::error::describe_char(c)
                ),
            ));
        }
        let parsed = toml::from_str::<toml::Table>(&format!("v = {value}"))
            .ok()
            .and_then(|mut table| table.remove("v"));
        let digits = value.trim();
        let digits = digits.strip_prefix(['-', '+']).unwrap_or(digits);
        if parsed.is_none() && !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()) {
            return Err(invalid(
                key,
                &format!(
                    "{} is more than {}, the largest integer a config file can hold: use a smaller one",
                    value.trim(),
                    i64::MAX
                ),
            ));
        }
        match value.trim().parse::<f64>() {
            Ok(number) if parsed.is_none() && number.is_finite() => {
                return Err(invalid(
                    key,
                    &format!(
                        "{} is not written as a config file writes numbers (digits on both sides of the point): write {number:?}",
                        value.trim()
                    ),
                ))
            }
            Ok(_) if parsed.is_none() => {
                return Err(invalid(
                    key,
                    &format!(
                        "{} is beyond the numbers a config file can hold (about ±1.8e308): use a smaller one",
                        value.trim()
                    ),
                ))
            }
            _ => {}
        }
        let value = parsed.unwrap_or_else(|| toml::Value::String(value.to_string()));
        Override::checked(key, value)
    }

    /// The typed `value` (a flag's) for `key`.
    pub fn of(key: &str, value: impl Serialize) -> Result<Self, ConfigError> {
        let toml_value = toml::Value::try_from(&value).map_err(|e| {
            // A count past what a TOML integer holds says so as a config file's would.
            let json = serde_json::to_string(&value).unwrap_or_default();
            let name = key.rsplit('.').next().unwrap_or(key);
            match json.parse::<u64>() {
                Ok(big) => super::check_toml_integer(name, big).err(),
                Err(_) => None,
            }
            .unwrap_or_else(|| invalid(key, &format!("its value cannot be written as TOML: {e}")))
        })?;
        Override::checked(key, toml_value)
    }

    /// `key` set to `value`, refused unless a config with it alone reads.
    fn checked(key: &str, value: toml::Value) -> Result<Self, ConfigError> {
        let Some((section, name)) = key.split_once('.') else {
            return Err(invalid(
                key,
                "name a setting as section.key, e.g. train.max_iters or model.n_layer",
            ));
        };
        if let Some(why) = legacy::refuse_input_switch(section, name) {
            return Err(invalid(key, &why));
        }
        let (section, name) = legacy::current_key(section, name);
        let alone = toml::Table::from_iter([(
            section.clone(),
            toml::Value::Table(toml::Table::from_iter([(name.clone(), value.clone())])),
        )]);
        toml::Value::Table(alone)
            .try_into::<RunConfig>()
            .map_err(
                |e| match (parse_error(&format!("--set {key}"), e), section.as_str()) {
                    (ConfigError::Parse { path, message }, "train")
                        if message.contains("unknown field") =>
                    {
                        ConfigError::Parse {
                            path,
                            message: format!("{message}; {MOVED_OUT_OF_TRAIN}"),
                        }
                    }
                    (e, _) => e,
                },
            )?;
        Ok(Override {
            key: format!("{section}.{name}"),
            value,
        })
    }
}

/// Where the settings that are not `[train]`'s live, for a `--set train.…` that names none.
const MOVED_OUT_OF_TRAIN: &str = "the optimiser's settings (optimizer.learning_rate, optimizer.beta2, …) are in [optimizer], the warm-up and decay in [schedule], the corpus in [data]";

/// An override refused before it was read as a setting.
fn invalid(what: &str, why: &str) -> ConfigError {
    ConfigError::Parse {
        path: format!("--set {what}"),
        message: why.to_string(),
    }
}

/// Sets each of `overrides` in a config's `table` in order (`given_how`, as flags or in a file:
/// said if both a step count and the minutes are given). A step count wins over the table's
/// minutes, and a kind leaves the table's settings of other kinds behind.
pub(super) fn apply(
    table: &mut toml::Table,
    overrides: &[Override],
    given_how: &str,
) -> Result<(), ConfigError> {
    let given = |key: &str| overrides.iter().any(|o| o.key == key);
    if given("train.max_iters") && given("train.minutes") {
        return Err(ConfigError::Invalid(format!(
            "train.max_iters and train.minutes are both given {given_how}: give one, \
             a step count or the minutes to plan it for"
        )));
    }
    if given("train.max_iters") {
        if let Some(toml::Value::Table(train)) = table.get_mut("train") {
            train.remove("minutes");
        }
    }
    // A kind chosen from outside leaves the file's settings of other kinds behind
    // (default.toml's decay_fraction under `--schedule cosine`); asked for, they still count.
    for (section, settings) in KIND_SETTINGS {
        let key = format!("{section}.kind");
        let Some(kind) = overrides.iter().rev().find(|o| o.key == key) else {
            continue;
        };
        if let Some(toml::Value::Table(own)) = table.get_mut(section) {
            for (name, owner) in settings {
                if kind.value.as_str() != Some(owner) && !given(&format!("{section}.{name}")) {
                    own.remove(*name);
                }
            }
        }
    }
    for o in overrides {
        let (section, name) = o.key.split_once('.').unwrap_or((&o.key, ""));
        let section = table
            .entry(section)
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if let toml::Value::Table(section) = section {
            section.insert(name.to_string(), o.value.clone());
        }
    }
    Ok(())
}
