//! Model configuration: one place for every model default, parsed from TOML and validated before any
//! tensor is built.

use crate::ops::Precision;
mod overrides;

pub use overrides::Override;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// How the model learns where each character stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Position {
    /// No positional information: only the causal mask can leak order.
    None,
    /// GPT-2's trainable table of `block_size` rows, added to the token embedding.
    Learned,
    /// The fixed sin/cos table of Vaswani et al. (2017), added to the token embedding.
    Sinusoidal,
    /// Rotary embedding (Su et al. 2021): q and k rotated by their position in every head.
    Rope,
    /// ALiBi (Press et al. 2022): a per-head linear distance penalty on the attention scores.
    Alibi,
}

impl Position {
    /// Every scheme, in the order the lesson introduces them.
    pub const ALL: [Position; 5] = [
        Position::None,
        Position::Learned,
        Position::Sinusoidal,
        Position::Rope,
        Position::Alibi,
    ];

    /// The name used in config files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Position::None => "none",
            Position::Learned => "learned",
            Position::Sinusoidal => "sinusoidal",
            Position::Rope => "rope",
            Position::Alibi => "alibi",
        }
    }

    /// How a one-layer model with this scheme sees order, for the lesson's table.
    pub fn how_order_is_seen(self) -> &'static str {
        match self {
            Position::None => "attention scores and weighted sums see only content, so reordering the earlier characters changes nothing",
            Position::Learned => "a trained-table vector is added to each character, so the same character differs by position",
            Position::Sinusoidal => "the fixed sin/cos vector of each position is added, so the same character differs by position",
            Position::Rope => "q and k are rotated by position, so each score depends on how far apart two characters stand",
            Position::Alibi => "each score is penalised by distance, so the weights depend on where each character stands",
        }
    }
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Position {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        by_name(s, Position::ALL, Position::name, "position scheme")
    }
}

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
    #[error("cannot read config file {path}: {source}")]
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
    /// Training the model would need more memory than the machine has available.
    #[error("training this config needs about {needed} of memory but {available} is available: lower batch_size, block_size, n_layer or n_embd")]
    TooLarge {
        /// The estimate, e.g. "99.0 GB".
        needed: String,
        /// What the machine has available.
        available: String,
    },
}

/// The shape of the GPT: sizes, positional scheme and regularisation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
    /// Number of distinct tokens (characters). 0 in a config file means "take it from the tokenizer".
    pub vocab_size: usize,
    /// Longest context the model is trained on (and the rows of the learned position table).
    pub block_size: usize,
    /// Number of transformer blocks.
    pub n_layer: usize,
    /// Attention heads per block; `n_embd` is split evenly between them.
    pub n_head: usize,
    /// Width of the residual stream.
    pub n_embd: usize,
    /// Dropout probability during training (none in evaluation).
    pub dropout: f64,
    /// Whether Linear layers and LayerNorms have biases (nanoGPT's `bias`).
    pub bias: bool,
    /// Whether `lm_head` shares its weight with the token embedding.
    pub tie_weights: bool,
    /// The positional scheme.
    pub position: Position,
    /// The RoPE base θ (10000 in RoFormer).
    pub rope_base: f64,
    /// The factor the sinusoidal table is multiplied by before it is added to the token
    /// embeddings. 1 is Vaswani et al.'s table as is (values in [−1, 1]), against embeddings drawn
    /// at std 0.02 here (GPT-2's initialisation, without the original √d_model scaling): early in
    /// training the residual stream is then mostly position. 0.03 puts the table at the
    /// embeddings' scale (docs/experiments.md, section 2).
    pub sinusoidal_scale: f64,
    /// Whether each character's rhyme groups and tone (the shipped tables) are learned rows added
    /// to its embedding (an input, `verse::inputs::sound`).
    pub sound: bool,
    /// Whether each position's place in its poem (place in the line, line, whether the next
    /// character ends a line and must rhyme) is learned rows added to its embedding (an input,
    /// `verse::inputs::places`).
    pub verse_places: bool,
}

impl Default for ModelConfig {
    /// The lesson's model: 4 heads of 32 dimensions, 128 positions, learned position table.
    fn default() -> Self {
        ModelConfig {
            vocab_size: 0,
            block_size: 128,
            n_layer: 4,
            n_head: 4,
            n_embd: 128,
            dropout: 0.0,
            bias: true,
            tie_weights: false,
            position: Position::Learned,
            rope_base: 10_000.0,
            sinusoidal_scale: 1.0,
            sound: false,
            verse_places: false,
        }
    }
}

impl ModelConfig {
    /// Parses a TOML string; `origin` names it in error messages.
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| parse_error(origin, e))
    }

    /// Width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.n_embd / self.n_head.max(1)
    }

    /// The settings in which `other` differs from this config, as `key: this X, other Y`, with
    /// the two sides named by `names`.
    pub fn differences(&self, other: &ModelConfig, names: [&str; 2]) -> Vec<String> {
        differences(self, other, names)
    }

    /// The names of the inputs added to the token embeddings that this config switches on, in the
    /// order the model takes them (`model::inputs`, `verse::inputs`).
    pub fn inputs(&self) -> Vec<&'static str> {
        [("sound", self.sound), ("verse_places", self.verse_places)]
            .into_iter()
            .filter_map(|(name, on)| on.then_some(name))
            .collect()
    }

    /// The number of parameters, as a float so that absurd sizes cannot overflow.
    pub fn parameter_count(&self) -> f64 {
        let (v, c, l) = (
            self.vocab_size as f64,
            self.n_embd as f64,
            self.n_layer as f64,
        );
        let biases = if self.bias { 1.0 } else { 0.0 };
        let block = 12.0 * c * c + biases * 9.0 * c + (2.0 + 2.0 * biases) * c;
        let table = if self.position == Position::Learned {
            self.block_size as f64 * c
        } else {
            0.0
        };
        let head = if self.tie_weights { 0.0 } else { v * c };
        let inputs: usize = self
            .inputs()
            .into_iter()
            .map(crate::verse::inputs::rows)
            .sum();
        v * c + inputs as f64 * c + table + l * block + (1.0 + biases) * c + head
    }

    /// Bytes a training step needs, roughly: weights, gradients and AdamW's two moments, and the
    /// activations kept for the backward pass of `batch` sequences of block_size (each layer's
    /// ~20 vectors of n_embd per position and its attention weights, n_head × block_size per
    /// position), plus the output layer's logits in chunks of 256 rows per thread.
    pub fn training_bytes(&self, batch: usize) -> f64 {
        let (c, l, t) = (
            self.n_embd as f64,
            self.n_layer as f64,
            self.block_size as f64,
        );
        let per_position = l * (20.0 * c + 2.0 * self.n_head as f64 * t) + 4.0 * c;
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let logits = threads * 256.0 * self.vocab_size as f64;
        4.0 * (4.0 * self.parameter_count() + batch as f64 * t * per_position + logits)
    }

    /// Refuses this model where its weights alone need more memory than the machine has
    /// available: a fact about the machine, checked where a model is built
    /// ([`crate::model::Gpt::new`]), not part of the config's validity.
    pub fn check_weights_fit(&self) -> Result<(), ConfigError> {
        let available = crate::machine::available_memory();
        let needed = 4.0 * self.parameter_count();
        if needed > available as f64 {
            return Err(ConfigError::Invalid(format!(
                "the model's weights alone take {} ({:.3e} parameters) but this machine has {} available: \
                 choose fewer layers, a smaller n_embd or a smaller block_size",
                crate::machine::human_bytes(needed),
                self.parameter_count(),
                crate::machine::human_bytes(available as f64)
            )));
        }
        Ok(())
    }

    /// Refuses a training step of `batch` sequences that needs more memory than the machine has
    /// available ([`ModelConfig::training_bytes`]), before anything is allocated: checked where
    /// a run starts (and by the page before it starts one), weights first.
    pub fn check_training_memory(&self, batch: usize) -> Result<(), ConfigError> {
        self.check_weights_fit()?;
        let needed = self.training_bytes(batch);
        let available = crate::machine::available_memory() as f64;
        if needed > available {
            return Err(ConfigError::TooLarge {
                needed: crate::machine::human_bytes(needed),
                available: crate::machine::human_bytes(available),
            });
        }
        Ok(())
    }

    /// Checks every rule a model needs, so that a bad value fails here with a clear message
    /// rather than deep inside a tensor op.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |m: String| Err(ConfigError::Invalid(m));
        for (name, value) in [
            ("vocab_size", self.vocab_size),
            ("block_size", self.block_size),
            ("n_layer", self.n_layer),
            ("n_head", self.n_head),
            ("n_embd", self.n_embd),
        ] {
            if value == 0 {
                return invalid(format!("{name} must be at least 1"));
            }
            check_toml_integer(name, value as u64)?;
        }
        if !self.n_embd.is_multiple_of(self.n_head) {
            return invalid(format!(
                "n_embd {} is not divisible by n_head {}: choose n_embd = n_head × head size",
                self.n_embd, self.n_head
            ));
        }
        if self.position == Position::Rope && !self.head_dim().is_multiple_of(2) {
            return invalid(format!(
                "rope rotates pairs of dimensions, but the head size n_embd/n_head = {} is odd",
                self.head_dim()
            ));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return invalid(format!("dropout {} must be in [0, 1)", self.dropout));
        }
        if !(self.sinusoidal_scale.is_finite() && self.sinusoidal_scale > 0.0) {
            return invalid(format!(
                "sinusoidal_scale {} must be a finite number above 0",
                self.sinusoidal_scale
            ));
        }
        if !(self.rope_base.is_finite() && self.rope_base > 1.0) {
            return invalid(format!(
                "rope_base {} must be a finite number above 1",
                self.rope_base
            ));
        }
        Ok(())
    }
}

/// The keys whose values differ between two tables of settings, as `key: a X, b Y` with the two
/// sides named by `names`.
fn differences<T: Serialize>(a: &T, b: &T, names: [&str; 2]) -> Vec<String> {
    let as_table = |t: &T| toml::Table::try_from(t).unwrap_or_default();
    let (a, b) = (as_table(a), as_table(b));
    a.iter()
        .filter(|(k, v)| b.get(*k) != Some(v))
        .map(|(k, v)| {
            let other = b.get(k).map_or("nothing".into(), |x| x.to_string());
            format!("{k}: {} {v}, {} {other}", names[0], names[1])
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

/// What a corpus file holds, which decides how it is read and split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CorpusKind {
    /// Chosen from the file when it is read (`data::Corpus::load` says which, and why).
    #[default]
    Auto,
    /// Regular verse: one poem per line, lines that are not 五绝, 七绝, 五律 or 七律 left out;
    /// every 20th poem held out for validation.
    Verse,
    /// One item per line (ci, couplets, 古体诗, any line collection), every non-empty line kept;
    /// every 20th line held out.
    Lines,
    /// Running text (prose, drama, code): the whole file one token stream, its last tenth held
    /// out, so that no window straddles the split.
    Text,
}

impl CorpusKind {
    /// Every kind, `auto` first.
    pub const ALL: [CorpusKind; 4] = [
        CorpusKind::Auto,
        CorpusKind::Verse,
        CorpusKind::Lines,
        CorpusKind::Text,
    ];

    /// The name used in config files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            CorpusKind::Auto => "auto",
            CorpusKind::Verse => "verse",
            CorpusKind::Lines => "lines",
            CorpusKind::Text => "text",
        }
    }
}

impl std::fmt::Display for CorpusKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for CorpusKind {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        by_name(s, CorpusKind::ALL, CorpusKind::name, "corpus kind")
    }
}

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

impl std::str::FromStr for OptimizerKind {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        by_name(s, OptimizerKind::ALL, OptimizerKind::name, "optimizer")
    }
}

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

impl std::str::FromStr for ScheduleKind {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        by_name(s, ScheduleKind::ALL, ScheduleKind::name, "schedule")
    }
}

/// How to train: data, batch, steps, optimiser and schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrainConfig {
    /// The corpus file: verse (one poem per line), one item per line, or running text.
    pub corpus: String,
    /// What the corpus holds: "auto" (chosen from the file; a run saves what was chosen),
    /// "verse", "lines" or "text".
    pub corpus_kind: CorpusKind,
    /// Sequences per step.
    pub batch_size: usize,
    /// Optimiser steps in the whole run.
    pub max_iters: usize,
    /// Steps between validation passes (and checkpoints).
    pub eval_interval: usize,
    /// Validation batches averaged at each evaluation.
    pub eval_iters: usize,
    /// Peak learning rate; the cosine decays to a tenth of it.
    pub learning_rate: f64,
    /// Steps of linear warm-up.
    pub warmup_iters: usize,
    /// AdamW weight decay, applied to tensors of 2 or more dimensions only.
    pub weight_decay: f64,
    /// AdamW β1.
    pub beta1: f64,
    /// AdamW β2.
    pub beta2: f64,
    /// Gradients are rescaled when their global norm exceeds this (0 turns clipping off).
    pub grad_clip: f64,
    /// Seed of the initial weights, the batches and the dropout masks.
    pub seed: u64,
    /// The inputs of the training step's matmuls: "f32", or "bf16" (mixed precision on CPUs with
    /// AMX-BF16 or AVX512-BF16: bf16 products summed in f32, everything else in f32).
    pub dtype: Precision,
    /// "adamw", or "muon": Muon for the blocks' weight matrices, AdamW for the rest.
    pub optimizer: OptimizerKind,
    /// Muon's peak learning rate (on the same schedule as learning_rate). 0.005 by default: at
    /// the default's time it ties AdamW, where modded-nanogpt's 0.02 ends 0.14 nats above it
    /// (docs/experiments.md, section 6).
    pub muon_learning_rate: f64,
    /// Muon's momentum.
    pub muon_momentum: f64,
    /// After the warm-up: "cosine" (down to a tenth of the peak at max_iters) or "wsd" (the peak
    /// held, then a linear decay to a tenth over the last decay_fraction of the steps). A config
    /// that names none keeps the cosine, so that configs written before WSD give the results
    /// they gave; configs/default.toml names wsd (0.015 nats lower, docs/experiments.md,
    /// section 6).
    pub schedule: ScheduleKind,
    /// The share of the steps over which "wsd" decays.
    pub decay_fraction: f64,
    /// Plan max_iters for this many minutes of wall time, from the step rate measured over the
    /// warm-up steps (whose learning rates do not depend on max_iters), again at each evaluation
    /// from the pace since then until the last decay_fraction of the steps (`train::plan`); the
    /// plan is saved in the run's config.toml as its max_iters.
    pub minutes: Option<f64>,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            corpus: "data/poems.txt".into(),
            corpus_kind: CorpusKind::Auto,
            batch_size: 32,
            max_iters: 1000,
            eval_interval: 100,
            eval_iters: 20,
            learning_rate: 1e-3,
            warmup_iters: 50,
            weight_decay: 0.1,
            beta1: 0.9,
            beta2: 0.95,
            grad_clip: 1.0,
            seed: 1337,
            dtype: Precision::F32,
            optimizer: OptimizerKind::Adamw,
            muon_learning_rate: 0.005,
            muon_momentum: 0.95,
            schedule: ScheduleKind::Cosine,
            decay_fraction: 0.2,
            minutes: None,
        }
    }
}

impl TrainConfig {
    /// The kind of corpus a saved run was trained on: runs saved before the kinds existed say
    /// auto, and were all verse.
    pub fn trained_kind(&self) -> CorpusKind {
        match self.corpus_kind {
            CorpusKind::Auto => CorpusKind::Verse,
            kind => kind,
        }
    }

    /// Refuses `what` (something that needs regular verse) for a run trained on another kind.
    pub fn check_verse(&self, what: &str) -> Result<(), String> {
        match self.trained_kind() {
            CorpusKind::Verse => Ok(()),
            kind => Err(format!(
                "{what}, but this run was trained on {kind} ({}), not regular verse: use a run trained on verse",
                self.corpus
            )),
        }
    }

    /// Checks the values a run needs.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |m: String| Err(ConfigError::Invalid(m));
        for (name, value) in [
            ("batch_size", self.batch_size),
            ("max_iters", self.max_iters),
            ("eval_interval", self.eval_interval),
            ("eval_iters", self.eval_iters),
        ] {
            if value == 0 {
                return invalid(format!("{name} must be at least 1"));
            }
            check_toml_integer(name, value as u64)?;
        }
        check_toml_integer("warmup_iters", self.warmup_iters as u64)?;
        check_toml_integer("seed", self.seed)?;
        if !(self.learning_rate.is_finite() && self.learning_rate > 0.0) {
            return invalid(format!(
                "learning_rate {} must be a positive number",
                self.learning_rate
            ));
        }
        for (name, beta) in [("beta1", self.beta1), ("beta2", self.beta2)] {
            // The moments are float32: a β that rounds to 1 there never forgets, and the
            // bias correction 1 - β^t is 0 (the loss climbs without bound).
            if !((0.0..1.0).contains(&beta) && (beta as f32) < 1.0) {
                return invalid(format!(
                    "{name} {beta} must be in [0, 1) and below 1 in float32 (at most 0.99999994), e.g. 0.9 or 0.95"
                ));
            }
        }
        for (name, value) in [
            ("weight_decay", self.weight_decay),
            ("grad_clip", self.grad_clip),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                return invalid(format!(
                    "{name} {value} must be a finite number of at least 0 (0 turns it off)"
                ));
            }
        }
        if !(self.muon_learning_rate.is_finite() && self.muon_learning_rate > 0.0) {
            return invalid(format!(
                "muon_learning_rate {} must be a positive number, e.g. 0.005",
                self.muon_learning_rate
            ));
        }
        if !((0.0..1.0).contains(&self.muon_momentum)) {
            return invalid(format!(
                "muon_momentum {} must be in [0, 1), e.g. 0.95",
                self.muon_momentum
            ));
        }
        if !(self.decay_fraction > 0.0 && self.decay_fraction <= 1.0) {
            return invalid(format!(
                "decay_fraction {} must be in (0, 1], e.g. 0.2 (the last fifth of the steps)",
                self.decay_fraction
            ));
        }
        if let Some(minutes) = self.minutes {
            if !(minutes.is_finite() && minutes > 0.0) {
                return invalid(format!(
                    "minutes {minutes} must be a positive number, e.g. 10"
                ));
            }
            if self.warmup_iters < MIN_PLANNING_STEPS {
                return invalid(format!(
                    "minutes plans the run from the step rate of the warm-up, but warmup_iters is {}: \
                     give --warmup-iters {MIN_PLANNING_STEPS} or more",
                    self.warmup_iters
                ));
            }
        }
        if self.warmup_iters > self.max_iters {
            return invalid(format!(
                "warmup_iters {} is more than max_iters {}: the learning rate would never reach its peak; \
                 use fewer warm-up steps (--warmup-iters, e.g. a tenth of max_iters)",
                self.warmup_iters, self.max_iters
            ));
        }
        Ok(())
    }
}

/// The most steps a run can be planned for: the largest integer a config file holds.
pub const MAX_ITERS: usize = i64::MAX as usize;

/// The fewest warm-up steps over which `minutes` measures the step rate.
pub const MIN_PLANNING_STEPS: usize = 5;

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

/// A whole run's configuration, as stored in `configs/*.toml` and in each run directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RunConfig {
    /// The model.
    pub model: ModelConfig,
    /// The training.
    pub train: TrainConfig,
}

impl RunConfig {
    /// Reads and parses a TOML file (not yet validated: overrides may still change it). A file
    /// with neither a `[model]` nor a `[train]` table is refused: it would silently train the
    /// built-in defaults.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        Self::load_with(path, &[])
    }

    /// Parses TOML text (not yet validated); `origin` names it in error messages.
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| parse_error(origin, e))
    }

    /// The TOML text of this config.
    pub fn to_toml(&self) -> Result<String, ConfigError> {
        toml::to_string(self)
            .map_err(|e| ConfigError::Invalid(format!("cannot write the config as TOML: {e}")))
    }

    /// The settings of either table in which `other` differs, as [`ModelConfig::differences`].
    pub fn differences(&self, other: &RunConfig, names: [&str; 2]) -> Vec<String> {
        let mut all = differences(&self.model, &other.model, names);
        all.extend(differences(&self.train, &other.train, names));
        all
    }

    /// Validates both parts.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.model.validate()?;
        self.train.validate()
    }
}
