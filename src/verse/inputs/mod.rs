//! What the GPT is told of verse beyond its characters: the inputs it adds to its token
//! embeddings (`model::inputs`), each in its own file:
//!
//! - [`sound`] (`sound = true`): each character's rhyme groups and tone, a token input;
//! - [`places`] (`verse_places = true`): where each position stands in its poem, a sequence input;
//! - [`rhymes`] (`rhyme_memory = true`): before a rhyme, the characters that ended the poem's
//!   earlier lines, a sequence input; (`rhyme_bias = true`) biases on the next token before a
//!   rhyme, for those characters and, once two rhymes agree, for those that rhyme with them;
//!
//! all read the characters behind the token ids ([`vocabulary`]). Adding an input touches its
//! file here (what it reads, its rows, its tests), its switch in the config (a field of
//! `ModelConfig` and its name in `ModelConfig::inputs`) and its line in [`INPUTS`]; the graph, the
//! training step and the decoder take it as they take these.

pub mod places;
pub mod rhymes;
pub mod sound;
pub mod vocabulary;

use crate::config::ModelConfig;
use crate::data::CharTokenizer;
use crate::model::inputs::{Input, Reads};
use candle_core::{bail, Result};
pub use vocabulary::Vocabulary;

/// An input: its config name, its parameter, its rows and what it reads from a vocabulary.
struct Known {
    name: &'static str,
    tensor: &'static str,
    /// Rows of its W (or its biases) for a model of this many tokens.
    rows: fn(usize) -> usize,
    /// Whether its rows are the tokens' (one per token): they grow with the vocabulary.
    per_token: bool,
    /// Whether it is a next-token bias, whose rows are single numbers (else rows of n_embd).
    bias: bool,
    /// What it reads, for a vocabulary and a model of this many tokens.
    reads: fn(&Vocabulary, usize) -> Reads,
}

/// Every input, by config name.
const INPUTS: [Known; 4] = [
    Known {
        name: "sound",
        tensor: "wse",
        rows: |_| sound::rows(),
        per_token: false,
        bias: false,
        reads: |vocabulary, _| sound::reads(vocabulary),
    },
    Known {
        name: "verse_places",
        tensor: "wvp",
        rows: |_| places::ROWS,
        per_token: false,
        bias: false,
        reads: |vocabulary, _| places::reads(vocabulary),
    },
    Known {
        name: "rhyme_memory",
        tensor: "wrm",
        rows: |vocab_size| vocab_size,
        per_token: true,
        bias: false,
        reads: rhymes::reads,
    },
    Known {
        name: "rhyme_bias",
        tensor: "brh",
        rows: |_| 2,
        per_token: false,
        bias: true,
        reads: |vocabulary, _| rhymes::rhyme_bias(vocabulary),
    },
];

/// The input named `name` in the config.
fn known(name: &str) -> &'static Known {
    INPUTS
        .iter()
        .find(|known| known.name == name)
        .unwrap_or_else(|| panic!("ModelConfig::inputs names {name}, which verse::inputs lacks"))
}

/// Rows of the learned matrix (or biases) of the input named `name` in the config, for a model
/// of `vocab_size` tokens.
pub fn rows(name: &str, vocab_size: usize) -> usize {
    (known(name).rows)(vocab_size)
}

/// Learned parameters of the input named `name` in the config, for a model of `vocab_size`
/// tokens and `n_embd` dimensions.
pub fn parameters(name: &str, vocab_size: usize, n_embd: usize) -> usize {
    let width = if known(name).bias { 1 } else { n_embd };
    rows(name, vocab_size) * width
}

/// The parameters of the inputs `cfg` switches on whose rows are the tokens': a model with a
/// larger vocabulary (a fine-tune on new characters) has more of them.
pub fn per_token_tensors(cfg: &ModelConfig) -> Vec<String> {
    cfg.inputs()
        .into_iter()
        .map(known)
        .filter(|known| known.per_token)
        .map(|known| format!("transformer.{}.weight", known.tensor))
        .collect()
}

/// The inputs `cfg` switches on, for tokens that are the characters of `vocabulary`.
pub fn for_vocabulary(cfg: &ModelConfig, vocabulary: &Vocabulary) -> Result<Vec<Input>> {
    if vocabulary.len() > cfg.vocab_size {
        bail!(
            "the vocabulary names {} tokens but the model has {}: they come from different runs",
            vocabulary.len(),
            cfg.vocab_size
        )
    }
    let input = |known: &'static Known| Input {
        name: known.name,
        tensor: known.tensor,
        reads: (known.reads)(vocabulary, cfg.vocab_size),
    };
    Ok(cfg.inputs().into_iter().map(known).map(input).collect())
}

/// The inputs `cfg` switches on, for the vocabulary of `tokenizer`: what training and loading a run
/// build.
pub fn for_tokenizer(cfg: &ModelConfig, tokenizer: &CharTokenizer) -> Result<Vec<Input>> {
    for_vocabulary(cfg, &Vocabulary::new(tokenizer.chars()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_input_a_config_can_name_is_known_and_built_in_its_order() {
        let cfg = ModelConfig {
            vocab_size: 4,
            sound: true,
            verse_places: true,
            ..ModelConfig::default()
        };
        let vocabulary = Vocabulary::new("\n，东日".chars().zip(0..));
        let inputs = for_vocabulary(&cfg, &vocabulary).expect("inputs");
        let names: Vec<&str> = inputs.iter().map(|input| input.name).collect();
        assert_eq!(names, ["sound", "verse_places"]);
        assert_eq!(rows("verse_places", 4), places::ROWS);
        // A vocabulary larger than the model's comes from another run.
        let small = ModelConfig {
            vocab_size: 3,
            ..cfg
        };
        let err = for_vocabulary(&small, &vocabulary).err().expect("refused");
        assert!(
            err.to_string()
                .contains("names 4 tokens but the model has 3"),
            "{err}"
        );
    }
}
