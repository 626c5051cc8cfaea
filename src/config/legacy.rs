//! Configs written before the sections (everything but the model in one `[train]`): runs saved
//! then, ablation specs and `--set train.learning_rate=…` still read, each old key moved to where
//! it lives now.

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

/// The key `section.name` as it is written now.
pub(super) fn current_key(section: &str, name: &str) -> (String, String) {
    match MOVED.iter().find(|m| section == "train" && m.0 == name) {
        Some(&(_, section, name)) => (section.to_string(), name.to_string()),
        None => (section.to_string(), name.to_string()),
    }
}

/// Moves the old keys of `[train]` in `table` to their sections. Old files saved every setting,
/// those of the kinds not chosen too (`muon_learning_rate` under AdamW, `decay_fraction` under
/// the cosine): those are left out, since they never applied.
pub(super) fn upgrade(table: &mut toml::Table) {
    let Some(toml::Value::Table(train)) = table.get_mut("train") else {
        return;
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
            .entry(section)
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if let toml::Value::Table(section) = entry {
            section.entry(name).or_insert(value);
        }
    }
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
        upgrade(&mut table);
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
}
