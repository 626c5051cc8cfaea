//! The ladder's records: its rungs (one recipe per budget of minutes, configs/ladder/), each
//! with the record of its run on the reference machine (docs/results/ladder_*.json, compiled in:
//! the figures are read from it and nowhere copied), and whether a config is the recipe a record
//! ran.

use crate::config::{Change, RunConfig};
use anyhow::{Context, Result};

/// One recipe of the ladder: the budget it is chosen for, its config, and the record of its run
/// on the reference machine.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rung {
    /// The budget it was chosen for, in minutes on the reference machine.
    pub minutes: f64,
    /// Its config (max_iters: the steps it ran there), and the record of that run.
    pub config: &'static str,
    pub record: &'static str,
    /// The record's text.
    text: &'static str,
}

/// A rung named `name` for `minutes`: configs/ladder/NAME.toml, docs/results/ladder_NAME.json.
macro_rules! rung {
    ($minutes:expr, $name:literal) => {
        Rung {
            minutes: $minutes,
            config: concat!("configs/ladder/", $name, ".toml"),
            record: concat!("docs/results/ladder_", $name, ".json"),
            text: include_str!(concat!("../../../docs/results/ladder_", $name, ".json")),
        }
    };
}

/// The machine the ladder was measured on.
pub const REFERENCE: &str = "Intel Xeon (family 6, model 207), 2 cores, AVX-512 and AMX-BF16";

/// The rungs, smallest first (each below the loss of the one before it; of two rungs of the same
/// minutes, the second needs what the first does not). The last two train on data/tang_song.txt
/// with bf16 matmuls, which need AMX-BF16 or AVX512-BF16: where either is not here (or the corpus
/// was changed), they are passed over.
pub const LADDER: [Rung; 6] = [
    rung!(1.0, "1min"),
    rung!(3.0, "3min"),
    rung!(10.0, "10min"),
    rung!(30.0, "30min"),
    rung!(30.0, "30min_bf16"),
    rung!(60.0, "60min"),
];

/// What a rung's record says of its run on the reference machine.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// The steps it ran, and its loss over the whole validation split.
    pub steps: usize,
    pub loss: f64,
    /// The seconds a training step of it took, timed as [`time_step`] times it (without the
    /// evaluations, which the run's minutes held too).
    pub step_s: f64,
    /// The fingerprints of the texts it read (`data::RunText::fingerprints`): its corpus, and
    /// the held-out text and the decay's where other files gave them.
    pub texts: String,
    /// The config it ran, as the run completed it.
    pub config: RunConfig,
}

impl Rung {
    /// What its record says (the records are compiled in: a record that does not read is a
    /// fault of the build, which tests/ladder.rs catches).
    pub fn recorded(&self) -> Result<Recorded> {
        let read = || -> Result<Recorded> {
            let record: serde_json::Value = serde_json::from_str(self.text)?;
            let number = |v: &serde_json::Value, what: &str| {
                v.as_f64().with_context(|| format!("no {what}"))
            };
            Ok(Recorded {
                steps: number(&record["summary"]["max_iters"], "summary.max_iters")? as usize,
                loss: number(
                    &record["summary"]["val_loss_whole"],
                    "summary.val_loss_whole",
                )?,
                step_s: number(&record["ladder"]["step_s"], "ladder.step_s")?,
                texts: record["ladder"]["text_fingerprints"]
                    .as_str()
                    .context("no ladder.text_fingerprints")?
                    .to_string(),
                config: serde_json::from_value(record["config"].clone())?,
            })
        };
        read().with_context(|| format!("the ladder's record {} does not read", self.record))
    }

    /// The minutes its steps take on a machine where a step takes `step_s` seconds, at the
    /// reference machine's share of time for everything else.
    pub fn minutes_at(&self, recorded: &Recorded, step_s: f64) -> f64 {
        self.minutes * step_s / recorded.step_s
    }
}

impl Rung {
    /// Why `cfg`, this rung's config as it reads now, is not the recipe its record `ran` (an
    /// edited rung), naming the settings that differ: None where it is. What the run completed
    /// from its corpus and the minutes it was planned for are not the recipe's.
    pub fn edited(&self, cfg: &RunConfig, ran: &RunConfig) -> Option<String> {
        let changes: Vec<String> = recipe_changes(cfg, ran)
            .iter()
            .map(|c| c.describe(["recorded", "now"]))
            .collect();
        (!changes.is_empty()).then(|| {
            format!(
                "{} is not the recipe its record ran ({}), so the record says nothing of it; train it with --config {} --minutes M",
                self.config,
                changes.join("; "),
                self.config
            )
        })
    }
}

/// The settings a run fills in from its corpus, and the minutes it was planned for: not its recipe.
const FILLED_IN: [&str; 4] = [
    "model.vocab_size",
    "data.kind",
    "data.header_fields",
    "train.minutes",
];

/// The settings of the recipe `ran` that `cfg` changes.
fn recipe_changes(cfg: &RunConfig, ran: &RunConfig) -> Vec<Change> {
    let mut changes = ran.spelled_out().changes(&cfg.spelled_out());
    changes.retain(|c| !FILLED_IN.contains(&c.key.as_str()));
    changes
}

/// Whether `cfg` is the recipe `ran` but for its steps.
pub fn same_recipe(cfg: &RunConfig, ran: &RunConfig) -> bool {
    recipe_changes(cfg, ran)
        .iter()
        .all(|c| c.key == "train.max_iters")
}
