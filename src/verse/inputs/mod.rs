//! What the GPT is told of verse beyond its characters: the inputs it adds to its token
//! embeddings or its logits (`model::inputs`), each in its own file, each named in a config's
//! `[model] inputs` list:
//!
//! - [`sound`] (`"sound"`): each character's rhyme groups and tone, a token input;
//! - [`places`] (`"verse_places"`): where each position stands in its poem, a sequence input;
//! - [`rhymes`] (`"rhyme_memory"`): before a rhyme, the characters that ended the poem's earlier
//!   lines, a sequence input; (`"rhyme_bias"`) biases on the next token before a rhyme, for those
//!   characters and, once two rhymes agree, for those that rhyme with them;
//! - [`lead_rhymes`] (`"lead_rhymes"`): biases at a poem's first two rhymes, fitted to the trained
//!   model;
//! - [`ci_places`] (`"ci_places"`): where each position of a ci stands in the tune its header
//!   names, its rhymes' segments and classes, a sequence input; (`"ci_rhyme_bias"`) biases before
//!   a ci's rhyme, for its segment's earlier rhymes and what shares their 部;
//!
//! all read the characters behind the token ids ([`vocabulary`]). Adding an input of a kind the
//! model takes is its file here (what it reads, its rows, its tests) and its line in [`INPUTS`];
//! the config names it, and the graph, the training step and the decoder take it as they take
//! these.

pub mod ci_places;
pub mod lead_rhymes;
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
struct InputEntry {
    name: &'static str,
    tensor: &'static str,
    /// Rows of its W (or its biases) for a model of this many tokens.
    rows: fn(usize) -> usize,
    kind: Kind,
    /// What it reads, for a vocabulary and a model of this many tokens.
    reads: fn(&Vocabulary, usize) -> Reads,
}

/// What an input's parameter is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Rows of n_embd added to the token embeddings, a fixed number of them.
    Rows,
    /// Rows of n_embd, one per token: they grow with the vocabulary.
    TokenRows,
    /// Next-token biases, single numbers, trained with the model.
    Bias,
    /// Next-token biases fitted to the trained model after the last step
    /// ([`crate::train::fit`]) instead of trained with it.
    FittedBias,
}

/// Every input, by config name.
const INPUTS: [InputEntry; 7] = [
    InputEntry {
        name: "sound",
        tensor: "wse",
        rows: |_| sound::rows(),
        kind: Kind::Rows,
        reads: |vocabulary, _| sound::reads(vocabulary),
    },
    InputEntry {
        name: "verse_places",
        tensor: "wvp",
        rows: |_| places::ROWS,
        kind: Kind::Rows,
        reads: |vocabulary, _| places::reads(vocabulary),
    },
    InputEntry {
        name: "rhyme_memory",
        tensor: "wrm",
        rows: |vocab_size| vocab_size,
        kind: Kind::TokenRows,
        reads: rhymes::reads,
    },
    InputEntry {
        name: "rhyme_bias",
        tensor: "brh",
        rows: |_| 2,
        kind: Kind::Bias,
        reads: |vocabulary, _| rhymes::rhyme_bias(vocabulary),
    },
    InputEntry {
        name: "lead_rhymes",
        tensor: "blr",
        rows: |_| lead_rhymes::BIASES,
        kind: Kind::FittedBias,
        reads: |vocabulary, _| lead_rhymes::reads(vocabulary),
    },
    InputEntry {
        name: "ci_places",
        tensor: "wcp",
        rows: |_| ci_places::ROWS,
        kind: Kind::Rows,
        reads: |vocabulary, _| ci_places::reads(vocabulary),
    },
    InputEntry {
        name: "ci_rhyme_bias",
        tensor: "bcr",
        rows: |_| ci_places::BIASES,
        kind: Kind::Bias,
        reads: |vocabulary, _| ci_places::rhyme_bias(vocabulary),
    },
];

/// The input named `name` in the config, or an error that lists the names known.
fn known(name: &str) -> Result<&'static InputEntry> {
    match INPUTS.iter().find(|known| known.name == name) {
        Some(known) => Ok(known),
        None => {
            let names: Vec<String> = INPUTS
                .iter()
                .map(|known| format!("\"{}\"", known.name))
                .collect();
            bail!(
                "no input \"{}\" in [model] inputs: the inputs known are {}",
                crate::data::error::printable(name),
                names.join(", ")
            )
        }
    }
}

/// Refuses a config whose inputs name one that is not known, with the names known.
pub fn check(cfg: &ModelConfig) -> Result<()> {
    cfg.inputs()
        .into_iter()
        .try_for_each(|name| known(name).map(|_| ()))
}

/// The learned parameters of the inputs `cfg` names, for a model of its vocabulary and width
/// (what its memory is checked with before a vocabulary is at hand).
pub fn parameters(cfg: &ModelConfig) -> Result<usize> {
    cfg.inputs().into_iter().try_fold(0, |sum, name| {
        let known = known(name)?;
        let width = match known.kind {
            Kind::Bias | Kind::FittedBias => 1,
            Kind::Rows | Kind::TokenRows => cfg.n_embd,
        };
        Ok(sum + (known.rows)(cfg.vocab_size) * width)
    })
}

/// The parameters of the inputs `cfg` switches on whose rows are the tokens': a model with a
/// larger vocabulary (a fine-tune on new characters) has more of them.
pub fn per_token_tensors(cfg: &ModelConfig) -> Result<Vec<String>> {
    tensors_where(cfg, Kind::TokenRows)
}

/// The parameters of the inputs `cfg` names whose biases are fitted after training, not trained.
pub fn fitted_tensors(cfg: &ModelConfig) -> Result<Vec<String>> {
    tensors_where(cfg, Kind::FittedBias)
}

/// The parameters of the inputs `cfg` names that are of the kind `kind`.
fn tensors_where(cfg: &ModelConfig, kind: Kind) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for name in cfg.inputs() {
        let known = known(name)?;
        if known.kind == kind {
            names.push(format!("transformer.{}.weight", known.tensor));
        }
    }
    Ok(names)
}

/// The inputs `cfg` names, in its order, for tokens that are the characters of `vocabulary`.
pub fn for_vocabulary(cfg: &ModelConfig, vocabulary: &Vocabulary) -> Result<Vec<Input>> {
    if vocabulary.len() > cfg.vocab_size {
        bail!(
            "the vocabulary names {} tokens but the model has {}: they come from different runs",
            vocabulary.len(),
            cfg.vocab_size
        )
    }
    let input = |known: &'static InputEntry| Input {
        name: known.name,
        tensor: known.tensor,
        reads: (known.reads)(vocabulary, cfg.vocab_size),
    };
    cfg.inputs()
        .into_iter()
        .map(|name| known(name).map(input))
        .collect()
}

/// The inputs `cfg` names, for the vocabulary of `tokenizer`: what training and loading a run
/// build.
pub fn for_tokenizer(cfg: &ModelConfig, tokenizer: &CharTokenizer) -> Result<Vec<Input>> {
    for_vocabulary(cfg, &Vocabulary::new(tokenizer.chars()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_input_of_the_table_is_built_by_its_name_in_the_configs_order() {
        let vocabulary = Vocabulary::new("\n，。东日".chars().zip(0..));
        let mut names: Vec<String> = INPUTS.iter().map(|k| k.name.to_string()).collect();
        names.reverse(); // the config's order, not the table's
        let cfg = ModelConfig {
            vocab_size: 5,
            inputs: names.clone(),
            ..ModelConfig::default()
        };
        let inputs = for_vocabulary(&cfg, &vocabulary).expect("inputs");
        let built: Vec<&str> = inputs.iter().map(|input| input.name).collect();
        assert_eq!(
            built, names,
            "each input the table holds, in the config's order"
        );
        for (input, known) in inputs.iter().zip(INPUTS.iter().rev()) {
            assert_eq!(input.tensor, known.tensor);
        }
        // A name that is not known is refused with the names.
        let unknown = ModelConfig {
            inputs: vec!["sounds".into()],
            ..cfg.clone()
        };
        let err = check(&unknown).unwrap_err().to_string();
        assert!(
            err.contains("no input \"sounds\"")
                && err.contains(r#""sound", "verse_places", "rhyme_memory", "rhyme_bias", "lead_rhymes", "ci_places", "ci_rhyme_bias""#),
            "{err}"
        );
        assert!(for_vocabulary(&unknown, &vocabulary).is_err());
        // A vocabulary larger than the model's comes from another run.
        let small = ModelConfig {
            vocab_size: 3,
            ..cfg
        };
        let err = for_vocabulary(&small, &vocabulary).err().expect("refused");
        assert!(
            err.to_string()
                .contains("names 5 tokens but the model has 3"),
            "{err}"
        );
    }
}
