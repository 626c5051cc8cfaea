//! Configs written before today's layout still read as they were meant: those before the
//! sections (everything but the model in one `[train]`: runs saved then, ablation specs and
//! `--set train.learning_rate=…`), each old key moved to where it lives now; and those before the
//! model's inputs were a list, whose switches (`verse_places = true`) become its names. This is
//! the one place in config/ that names the inputs a text gives.

use super::ConfigError;

/// Where each key of the old `[train]` that moved lives now: (old name, section, new name).
const MOVED: [(&str, &str, &str); 13] = [
    ("corpus", "data", "corpus"),
    ("corpus_kind", "data", "kind"),
    ("optimizer", "optimizer", "kind"),
    ("learning_rate", "optimizer", "learning_rate"),
    ("weight_decay", "optimizer", "weight_decay"),
    ("beta1", "optimizer", "beta1"),
    ("beta2", "optimizer", "beta2"),
    ("grad_clip", "optimizer", "grad_clip"),
    ("muon_learning_rate", "optimizer", "muon_learning_rate"),
    ("muon_momentum", "optimizer", "muon_momentum"),
    ("schedule", "schedule", "kind"),
    ("warmup_iters", "schedule", "warmup_iters"),
    ("decay_fraction", "schedule", "decay_fraction"),
];

/// The model's switches of its inputs before they were a list, in the order the model took them.
const INPUT_SWITCHES: [&str; 4] = ["sound", "verse_places", "rhyme_memory", "rhyme_bias"];

/// The switches of `model` (a `[model]` table) as the list `inputs` names them, in the order the
/// model took them; refused beside a list of its own, or with a value other than true or false.
fn upgrade_model(model: &mut toml::Table) -> Result<(), String> {
    let switched: Vec<(&str, toml::Value)> = INPUT_SWITCHES
        .iter()
        .filter_map(|&name| Some((name, model.remove(name)?)))
        .collect();
    if switched.is_empty() {
        return Ok(());
    }
    if model.contains_key("inputs") {
        return Err(format!(
            "[model] inputs and the old switch {} both say which inputs the model takes: keep inputs and remove the switch",
            switched[0].0
        ));
    }
    let mut names = Vec::new();
    for (name, value) in switched {
        match value {
            toml::Value::Boolean(true) => names.push(toml::Value::String(name.into())),
            toml::Value::Boolean(false) => {}
            other => {
                return Err(format!(
                    "[model] {name} = {other}: the old switch takes true or false; today's configs write inputs = [\"{name}\"]"
                ))
            }
        }
    }
    model.insert("inputs".into(), toml::Value::Array(names));
    Ok(())
}

/// The one-line refusal of `--set model.<switch>=…`, an old switch of an input: today the list
/// `model.inputs` names them.
pub(super) fn refuse_input_switch(section: &str, name: &str) -> Option<String> {
    (section == "model" && INPUT_SWITCHES.contains(&name)).then(|| {
        format!(
            "{name} is an input's name in the list model.inputs now: e.g. --set 'model.inputs=[\"{name}\"]' (the list replaces the config's)"
        )
    })
}

/// [`upgrade`] of a config read from `origin` (named in its error).
pub(super) fn upgraded(table: &mut toml::Table, origin: &str) -> Result<(), ConfigError> {
    upgrade(table).map_err(|message| refused(origin, message))
}

/// [`upgrade_model`] of a model's table read from `origin` (named in its error).
pub(super) fn upgraded_model(model: &mut toml::Table, origin: &str) -> Result<(), ConfigError> {
    upgrade_model(model).map_err(|message| refused(origin, message))
}

/// A config from `origin` refused for `message`.
fn refused(origin: &str, message: String) -> ConfigError {
    ConfigError::Parse {
        path: origin.to_string(),
        message,
    }
}

/// The key `section.name` as it is written now.
pub(super) fn current_key(section: &str, name: &str) -> (String, String) {
    match MOVED.iter().find(|m| section == "train" && m.0 == name) {
        Some(&(_, section, name)) => (section.to_string(), name.to_string()),
        None => (section.to_string(), name.to_string()),
    }
}

/// Reads the old switches of `[model]` as its list of inputs ([`upgrade_model`]) and moves the
/// old keys of `[train]` in `table` to their sections. Old files saved every setting,
/// those of the kinds not chosen too (`muon_learning_rate` under AdamW, `decay_fraction` under
/// the cosine): those are left out, since they never applied. A setting given in both layouts
/// (`[train] learning_rate` beside `[optimizer] learning_rate`) is refused: one would be dropped.
fn upgrade(table: &mut toml::Table) -> Result<(), String> {
    if let Some(toml::Value::Table(model)) = table.get_mut("model") {
        upgrade_model(model)?;
    }
    let Some(toml::Value::Table(train)) = table.get_mut("train") else {
        return Ok(());
    };
    let moved: Vec<(String, String, toml::Value)> = MOVED
        .iter()
        .filter_map(|&(old, section, name)| {
            let value = train.remove(old)?;
            Some((section.to_string(), name.to_string(), value))
        })
        .collect();
    let kind_of = |section: &str| {
        moved
            .iter()
            .find(|(s, n, _)| s == section && n == "kind")
            .and_then(|(_, _, v)| v.as_str().map(str::to_string))
    };
    let (optimizer, schedule) = (kind_of("optimizer"), kind_of("schedule"));
    for (section, name, value) in moved {
        let never_applied = match name.as_str() {
            "muon_learning_rate" | "muon_momentum" => optimizer.as_deref() != Some("muon"),
            "decay_fraction" => schedule.as_deref() != Some("wsd"),
            _ => false,
        };
        if never_applied {
            continue;
        }
        let entry = table
            .entry(section.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if let toml::Value::Table(new) = entry {
            if new.contains_key(&name) {
                let old = MOVED.iter().find(|m| m.1 == section && m.2 == name);
                return Err(format!(
                    "[train] {} (the old layout) and [{section}] {name} both set it: keep [{section}] {name} and remove the other",
                    old.map_or(name.as_str(), |m| m.0)
                ));
            }
            new.insert(name, value);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_old_train_table_moves_to_its_sections() {
        let mut table: toml::Table = toml::from_str(
            "[train]\ncorpus = \"c.txt\"\nmax_iters = 9\nlearning_rate = 0.5\noptimizer = \"adamw\"\n\
             muon_learning_rate = 0.005\nschedule = \"wsd\"\ndecay_fraction = 0.3\nwarmup_iters = 2\n\
             [optimizer]\nbeta2 = 0.9\n",
        )
        .unwrap();
        upgrade(&mut table).unwrap();
        let expected: toml::Table = toml::from_str(
            "[train]\nmax_iters = 9\n[data]\ncorpus = \"c.txt\"\n\
             [optimizer]\nbeta2 = 0.9\nkind = \"adamw\"\nlearning_rate = 0.5\n\
             [schedule]\nkind = \"wsd\"\nwarmup_iters = 2\ndecay_fraction = 0.3\n",
        )
        .unwrap();
        assert_eq!(table, expected);
        assert_eq!(
            current_key("train", "corpus_kind"),
            ("data".to_string(), "kind".to_string())
        );
        assert_eq!(
            current_key("train", "max_iters"),
            ("train".to_string(), "max_iters".to_string())
        );
    }

    #[test]
    fn the_switches_of_the_inputs_read_as_their_list_in_the_models_order() {
        let mut table: toml::Table = toml::from_str(
            "[model]\nn_layer = 2\nrhyme_bias = true\nsound = false\nverse_places = true\nrhyme_memory = false\n",
        )
        .unwrap();
        upgrade(&mut table).unwrap();
        let expected: toml::Table =
            toml::from_str("[model]\nn_layer = 2\ninputs = [\"verse_places\", \"rhyme_bias\"]\n")
                .unwrap();
        assert_eq!(table, expected);
        let mut mixed: toml::Table = toml::from_str("sound = true\ninputs = []\n").unwrap();
        assert!(upgrade_model(&mut mixed).unwrap_err().contains("both say"));
        let mut odd: toml::Table = toml::from_str("sound = 1\n").unwrap();
        assert!(upgrade_model(&mut odd)
            .unwrap_err()
            .contains("takes true or false"));
        assert!(refuse_input_switch("model", "sound").is_some());
        assert!(refuse_input_switch("model", "n_layer").is_none());
    }

    #[test]
    fn a_setting_in_both_layouts_is_refused_not_dropped() {
        for (text, says) in [
            (
                "[train]\nlearning_rate = 0.5\n[optimizer]\nlearning_rate = 0.1\n",
                "[train] learning_rate (the old layout) and [optimizer] learning_rate both set it",
            ),
            (
                "[train]\ncorpus = \"a.txt\"\n[data]\ncorpus = \"b.txt\"\n",
                "[train] corpus (the old layout) and [data] corpus both set it",
            ),
            (
                "[train]\ncorpus_kind = \"lines\"\n[data]\nkind = \"verse\"\n",
                "[train] corpus_kind (the old layout) and [data] kind both set it",
            ),
        ] {
            let mut table: toml::Table = toml::from_str(text).unwrap();
            assert_eq!(
                upgrade(&mut table).unwrap_err().split(':').next(),
                Some(says)
            );
        }
    }
}
