//! The model's section of a config: the GPT's shape, its positional scheme and the names of its
//! inputs (what they are is the text's: `verse::inputs` for poems).

use super::{check_count, differences, shown, ConfigError};
pub use crate::ops::activation::Activation;
use serde::{Deserialize, Serialize};

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

named_setting!(Position, "position scheme");

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
    /// An adaptive softmax's head (`ops::adaptive_softmax`): the first K ids of the vocabulary
    /// (numbered by count) and one vector for all the others, whose own softmax runs only where
    /// the target is one of them. 0: the full softmax.
    pub adaptive_head: usize,
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
    /// The MLP's nonlinearity: "gelu" (GPT-2's) or "relu2" (ReLU squared).
    pub activation: Activation,
    /// Whether each head's query and key are scaled to unit RMS before RoPE and the scores
    /// (QK-norm, modded-nanogpt's), which keeps the scores bounded at higher learning rates.
    pub qk_norm: bool,
    /// Whether the output projections of the attention and the MLP start at zero (each block
    /// then starts as the identity; modded-nanogpt's) instead of GPT-2's N(0, 0.02/√(2·n_layer)).
    pub zero_init_projections: bool,
    /// The inputs the text gives the model besides its tokens, by name, in the order the model
    /// takes them: `["verse_places", "rhyme_bias", "lead_rhymes"]` in the default (what each one is, and the
    /// names known: `verse::inputs`); empty for a plain GPT.
    pub inputs: Vec<String>,
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
            adaptive_head: 0,
            position: Position::Learned,
            rope_base: 10_000.0,
            sinusoidal_scale: 1.0,
            activation: Activation::Gelu,
            qk_norm: false,
            zero_init_projections: false,
            inputs: Vec::new(),
        }
    }
}

impl ModelConfig {
    /// Parses a TOML string (of the old layout too); `origin` names it in error messages.
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let mut table: toml::Table =
            toml::from_str(text).map_err(|e| super::parse_error(origin, e))?;
        super::legacy::upgraded_model(&mut table, origin)?;
        toml::Value::Table(table)
            .try_into()
            .map_err(|e| super::parse_error(origin, e))
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

    /// The names of the inputs the model takes besides its tokens, in its order.
    pub fn inputs(&self) -> Vec<&str> {
        self.inputs.iter().map(String::as_str).collect()
    }

    /// The number of parameters of the GPT itself (its inputs' are counted where they are built:
    /// `model::inputs`), as a float so that absurd sizes cannot overflow.
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
        let head = head + if self.adaptive_head > 0 { c } else { 0.0 };
        v * c + table + l * block + (1.0 + biases) * c + head
    }

    /// Bytes a training step needs, roughly: weights, gradients and AdamW's two moments, and the
    /// activations kept for the backward pass of `batch` sequences of block_size (each layer's
    /// ~20 vectors of n_embd per position and its attention weights, n_head × block_size per
    /// position), plus the output layer's logits in chunks of 256 rows per thread.
    pub fn training_bytes(&self, batch: usize, input_parameters: f64) -> f64 {
        let (c, l, t) = (
            self.n_embd as f64,
            self.n_layer as f64,
            self.block_size as f64,
        );
        let per_position = l * (20.0 * c + 2.0 * self.n_head as f64 * t) + 4.0 * c;
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let logits = threads * 256.0 * self.vocab_size as f64;
        let parameters = self.parameter_count() + input_parameters;
        4.0 * (4.0 * parameters + batch as f64 * t * per_position + logits)
    }

    /// Refuses this model, with its inputs' `input_parameters`, where its weights alone need more
    /// memory than the machine has available: a fact about the machine, checked where a model is
    /// built ([`crate::model::Gpt::new`]), not part of the config's validity.
    pub fn check_weights_fit(&self, input_parameters: f64) -> Result<(), ConfigError> {
        let available = crate::machine::available_memory();
        let parameters = self.parameter_count() + input_parameters;
        let needed = 4.0 * parameters;
        if needed > available as f64 {
            return Err(ConfigError::Invalid(format!(
                "the model's weights alone take {} ({:.3e} parameters) but this machine has {} available: \
                 choose fewer layers, a smaller n_embd or a smaller block_size",
                crate::machine::human_bytes(needed),
                parameters,
                crate::machine::human_bytes(available as f64)
            )));
        }
        Ok(())
    }

    /// Refuses a training step of `batch` sequences that needs more memory than the machine has
    /// available ([`ModelConfig::training_bytes`]), before anything is allocated: checked where
    /// a run starts (and by the page before it starts one), weights first.
    pub fn check_training_memory(
        &self,
        batch: usize,
        input_parameters: f64,
    ) -> Result<(), ConfigError> {
        self.check_weights_fit(input_parameters)?;
        let needed = self.training_bytes(batch, input_parameters);
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
            check_count(name, value)?;
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
            return invalid(format!("dropout {} must be in [0, 1)", shown(self.dropout)));
        }
        if !(self.sinusoidal_scale.is_finite() && self.sinusoidal_scale > 0.0) {
            return invalid(format!(
                "sinusoidal_scale {} must be a finite number above 0",
                shown(self.sinusoidal_scale)
            ));
        }
        for (i, name) in self.inputs.iter().enumerate() {
            if self.inputs[..i].contains(name) {
                return invalid(format!("inputs names {name} twice: name each input once"));
            }
        }
        if self.adaptive_head > 0 && self.vocab_size > 0 && self.adaptive_head >= self.vocab_size {
            return invalid(format!(
                "adaptive_head {} must be below the vocabulary's {} characters: choose fewer, or 0 for the full softmax",
                self.adaptive_head, self.vocab_size
            ));
        }
        if !(self.rope_base.is_finite() && self.rope_base > 1.0) {
            return invalid(format!(
                "rope_base {} must be a finite number above 1",
                shown(self.rope_base)
            ));
        }
        Ok(())
    }
}
