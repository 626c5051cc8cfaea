//! The training sections of a config: what to train on (`[data]`), how long and in what batches
//! (`[train]`), the optimiser (`[optimizer]`) and the learning rate's course (`[schedule]`). A
//! choice that carries its own settings names itself with `kind`, and its settings are refused
//! under another kind (`decay_fraction` belongs to `kind = "wsd"`, `muon_*` to `kind = "muon"`).

use super::{check_count, check_toml_integer, shown, ConfigError, MIN_PLANNING_STEPS};
use crate::data::CorpusKind;
use crate::ops::Precision;
use serde::{Deserialize, Serialize};

/// The optimiser of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OptimizerKind {
    /// AdamW for every parameter (nanoGPT's).
    #[default]
    Adamw,
    /// Muon for the blocks' weight matrices, AdamW for embeddings, biases and norms.
    Muon,
}

impl OptimizerKind {
    pub const ALL: [OptimizerKind; 2] = [OptimizerKind::Adamw, OptimizerKind::Muon];

    /// The name used in config files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            OptimizerKind::Adamw => "adamw",
            OptimizerKind::Muon => "muon",
        }
    }
}

named_setting!(OptimizerKind, "optimizer");

/// The learning rate's course after the warm-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScheduleKind {
    /// Cosine decay to a tenth of the peak at max_iters (nanoGPT's).
    #[default]
    Cosine,
    /// Warm-up, stable, decay: the peak held, then a linear decay to a tenth of it over the last
    /// `decay_fraction` of the steps.
    Wsd,
}

impl ScheduleKind {
    pub const ALL: [ScheduleKind; 2] = [ScheduleKind::Cosine, ScheduleKind::Wsd];

    /// The name used in config files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ScheduleKind::Cosine => "cosine",
            ScheduleKind::Wsd => "wsd",
        }
    }
}

named_setting!(ScheduleKind, "schedule");

/// What to train on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DataConfig {
    /// The corpus file: verse (one poem per line), one item per line, or running text.
    pub corpus: String,
    /// What the corpus holds: "auto" (chosen from the file; a run saves what was chosen),
    /// "verse", "lines" or "text".
    pub kind: CorpusKind,
    /// Measure the run on this file's held-out items instead of the corpus's own (every item of
    /// the corpus then trains, and none may share a line with them): "data/poems.txt" measures
    /// any corpus on the default's held-out Tang poems. None: the corpus's own split.
    pub validation: Option<String>,
    /// Train the schedule's decay (WSD's last decay_fraction of the steps) on this file's items
    /// instead of the corpus, those that share a line with the held-out text left out: Song and
    /// Tang first, Tang last ("data/poems.txt"). None: the corpus throughout.
    pub decay_corpus: Option<String>,
    /// Written by `train`, not a setting: the fields of the header each line of the corpus
    /// begins with (`data::header`): 0 for none, 1 for `【tune】`, 2 for `【poet·title】`. What a
    /// run writes before its poems follows it; runs saved before it was recorded have none
    /// (their vocabulary tells).
    pub header_fields: Option<usize>,
}

impl Default for DataConfig {
    fn default() -> Self {
        DataConfig {
            corpus: "data/poems.txt".into(),
            kind: CorpusKind::Auto,
            validation: None,
            decay_corpus: None,
            header_fields: None,
        }
    }
}

impl DataConfig {
    /// The files the corpus is read with besides itself.
    pub fn others(&self) -> crate::data::run_text::OtherFiles<'_> {
        crate::data::run_text::OtherFiles {
            validation: self.validation.as_deref(),
            decay: self.decay_corpus.as_deref(),
        }
    }

    /// The kind of corpus a saved run was trained on: runs saved before the kinds existed say
    /// auto, and were all verse.
    pub fn trained_kind(&self) -> CorpusKind {
        match self.kind {
            CorpusKind::Auto => CorpusKind::Verse,
            kind => kind,
        }
    }
}

/// How long to train, in what batches, and how often to evaluate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrainConfig {
    /// Sequences per step.
    pub batch_size: usize,
    /// Optimiser steps in the whole run.
    pub max_iters: usize,
    /// Plan max_iters for this many minutes of wall time, from the step rate measured over the
    /// warm-up steps (whose learning rates do not depend on max_iters), again at each evaluation
    /// from the pace since then until the last decay_fraction of the steps (`train::plan`); the
    /// plan is saved in the run's config.toml as its max_iters.
    pub minutes: Option<f64>,
    /// Steps between validation passes (and checkpoints).
    pub eval_interval: usize,
    /// Validation batches averaged at each evaluation.
    pub eval_iters: usize,
    /// Seed of the initial weights, the batches and the dropout masks.
    pub seed: u64,
    /// The inputs of the training step's matmuls: "f32", or "bf16" (mixed precision on CPUs with
    /// AMX-BF16 or AVX512-BF16: bf16 products summed in f32, everything else in f32).
    pub dtype: Precision,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            batch_size: 32,
            max_iters: 1000,
            minutes: None,
            eval_interval: 100,
            eval_iters: 20,
            seed: 1337,
            dtype: Precision::F32,
        }
    }
}

impl TrainConfig {
    /// Checks the counts a run needs.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (name, value) in [
            ("batch_size", self.batch_size),
            ("max_iters", self.max_iters),
            ("eval_interval", self.eval_interval),
            ("eval_iters", self.eval_iters),
        ] {
            check_count(name, value)?;
        }
        check_toml_integer("seed", self.seed)?;
        if let Some(minutes) = self.minutes {
            if !(minutes.is_finite() && minutes > 0.0) {
                return invalid(format!(
                    "minutes {} must be a positive, finite number, e.g. 10",
                    shown(minutes)
                ));
            }
        }
        Ok(())
    }
}

/// Muon's learning rate unless set: at the default's time it ties AdamW, where
/// modded-nanogpt's 0.02 ends 0.14 nats above it (docs/experiments.md, section 6).
pub const MUON_LEARNING_RATE: f64 = 0.005;
/// Muon's momentum unless set.
pub const MUON_MOMENTUM: f64 = 0.95;

/// The optimiser: AdamW for every parameter, or Muon for the blocks' weight matrices and AdamW
/// for the rest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OptimizerConfig {
    /// "adamw", or "muon".
    pub kind: OptimizerKind,
    /// AdamW's peak learning rate (on the schedule); the cosine decays to a tenth of it.
    pub learning_rate: f64,
    /// AdamW weight decay, applied to tensors of 2 or more dimensions only.
    pub weight_decay: f64,
    /// AdamW β1.
    pub beta1: f64,
    /// AdamW β2.
    pub beta2: f64,
    /// Gradients are rescaled when their global norm exceeds this (0 turns clipping off).
    pub grad_clip: f64,
    /// `kind = "muon"` only: Muon's peak learning rate, on the same schedule
    /// ([`MUON_LEARNING_RATE`] unless set).
    pub muon_learning_rate: Option<f64>,
    /// `kind = "muon"` only: Muon's momentum ([`MUON_MOMENTUM`] unless set).
    pub muon_momentum: Option<f64>,
}

impl Default for OptimizerConfig {
    fn default() -> Self {
        OptimizerConfig {
            kind: OptimizerKind::Adamw,
            learning_rate: 1e-3,
            weight_decay: 0.1,
            beta1: 0.9,
            beta2: 0.95,
            grad_clip: 1.0,
            muon_learning_rate: None,
            muon_momentum: None,
        }
    }
}

impl OptimizerConfig {
    /// Muon's peak learning rate.
    pub fn muon_learning_rate(&self) -> f64 {
        self.muon_learning_rate.unwrap_or(MUON_LEARNING_RATE)
    }

    /// Muon's momentum.
    pub fn muon_momentum(&self) -> f64 {
        self.muon_momentum.unwrap_or(MUON_MOMENTUM)
    }

    /// Checks the rates, β's and the settings of the kind chosen.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.learning_rate.is_finite() && self.learning_rate > 0.0) {
            return invalid(format!(
                "learning_rate {} must be a positive, finite number, e.g. 1e-3",
                shown(self.learning_rate)
            ));
        }
        for (name, beta) in [("beta1", self.beta1), ("beta2", self.beta2)] {
            // The moments are float32: a β that rounds to 1 there never forgets, and the
            // bias correction 1 - β^t is 0 (the loss climbs without bound).
            if !((0.0..1.0).contains(&beta) && (beta as f32) < 1.0) {
                return invalid(format!(
                    "{name} {} must be in [0, 1) and below 1 in float32 (at most 0.99999994), e.g. 0.9 or 0.95",
                    shown(beta)
                ));
            }
        }
        for (name, value) in [
            ("weight_decay", self.weight_decay),
            ("grad_clip", self.grad_clip),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                return invalid(format!(
                    "{name} {} must be a finite number of at least 0 (0 turns it off)",
                    shown(value)
                ));
            }
        }
        let muon_settings = [
            ("muon_learning_rate", self.muon_learning_rate),
            ("muon_momentum", self.muon_momentum),
        ];
        if self.kind != OptimizerKind::Muon {
            if let Some((name, _)) = muon_settings.iter().find(|(_, v)| v.is_some()) {
                return invalid(format!(
                    "{name} is a setting of the muon optimizer, but [optimizer] kind is {}: \
                     add --optimizer muon (optimizer.kind = \"muon\"), or leave it out",
                    self.kind.name()
                ));
            }
        }
        let rate = self.muon_learning_rate();
        if !(rate.is_finite() && rate > 0.0) {
            return invalid(format!(
                "muon_learning_rate {} must be a positive, finite number, e.g. {MUON_LEARNING_RATE}",
                shown(rate)
            ));
        }
        if !((0.0..1.0).contains(&self.muon_momentum())) {
            return invalid(format!(
                "muon_momentum {} must be in [0, 1), e.g. {MUON_MOMENTUM}",
                shown(self.muon_momentum())
            ));
        }
        Ok(())
    }
}

/// WSD's decay share unless set: the last fifth of the steps.
pub const DECAY_FRACTION: f64 = 0.2;

/// The learning rate's course: a linear warm-up, then the kind's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ScheduleConfig {
    /// After the warm-up: "cosine" (down to a tenth of the peak at max_iters) or "wsd" (the peak
    /// held, then a linear decay to a tenth over the last decay_fraction of the steps). A config
    /// that names none keeps the cosine, so that configs written before WSD give the results
    /// they gave; configs/default.toml names wsd (0.015 nats lower, docs/experiments.md,
    /// section 6).
    pub kind: ScheduleKind,
    /// Steps of linear warm-up.
    pub warmup_iters: usize,
    /// `kind = "wsd"` only: the share of the steps over which it decays ([`DECAY_FRACTION`]
    /// unless set).
    pub decay_fraction: Option<f64>,
}

impl Default for ScheduleConfig {
    fn default() -> Self {
        ScheduleConfig {
            kind: ScheduleKind::Cosine,
            warmup_iters: 50,
            decay_fraction: None,
        }
    }
}

impl ScheduleConfig {
    /// The share of the steps over which "wsd" decays.
    pub fn decay_fraction(&self) -> f64 {
        self.decay_fraction.unwrap_or(DECAY_FRACTION)
    }

    /// Checks the warm-up against the run's `train` and the settings of the kind chosen.
    pub fn validate(&self, train: &TrainConfig) -> Result<(), ConfigError> {
        check_toml_integer("warmup_iters", self.warmup_iters as u64)?;
        if self.kind != ScheduleKind::Wsd && self.decay_fraction.is_some() {
            return invalid(format!(
                "decay_fraction is a setting of the wsd schedule, but [schedule] kind is {}: \
                 add --schedule wsd (schedule.kind = \"wsd\"), or leave it out",
                self.kind.name()
            ));
        }
        let fraction = self.decay_fraction();
        if !(fraction > 0.0 && fraction <= 1.0) {
            return invalid(format!(
                "decay_fraction {} must be in (0, 1], e.g. 0.2 (the last fifth of the steps)",
                shown(fraction)
            ));
        }
        if train.minutes.is_some() && self.warmup_iters < MIN_PLANNING_STEPS {
            return invalid(format!(
                "minutes plans the run from the step rate of the warm-up, but warmup_iters is {}: \
                 give --warmup-iters {MIN_PLANNING_STEPS} or more",
                self.warmup_iters
            ));
        }
        // With minutes, max_iters is planned after the warm-up, so it holds the warm-up.
        if train.minutes.is_none() && self.warmup_iters > train.max_iters {
            return invalid(format!(
                "warmup_iters {} is more than max_iters {}: the learning rate would never reach its peak; \
                 use fewer warm-up steps (--warmup-iters, e.g. a tenth of max_iters)",
                self.warmup_iters, train.max_iters
            ));
        }
        Ok(())
    }
}

/// An invalid config with `message`.
fn invalid<T>(message: String) -> Result<T, ConfigError> {
    Err(ConfigError::Invalid(message))
}
