//! Helpers shared by the integration tests: the tiny corpus and small models.
#![allow(dead_code)]

use shige::config::{ModelConfig, Position};
use shige::data::{CharTokenizer, Corpus};
use std::path::Path;

/// The tiny corpus shipped for tests.
pub fn tiny_corpus() -> Corpus {
    Corpus::load(Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/data/tiny.txt"
    )))
    .expect("data/tiny.txt loads")
}

/// The tokenizer of the tiny corpus.
pub fn tiny_tokenizer() -> CharTokenizer {
    CharTokenizer::from_text(&tiny_corpus().text()).expect("tokenizer builds")
}

/// A small model config for fast tests.
pub fn small_config(vocab_size: usize, n_layer: usize, position: Position) -> ModelConfig {
    ModelConfig {
        vocab_size,
        block_size: 16,
        n_layer,
        n_head: 4,
        n_embd: 32,
        position,
        ..Default::default()
    }
}
