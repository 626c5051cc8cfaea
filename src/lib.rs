//! A minimal, trainable, character-level GPT on classical Chinese poetry, in Rust on candle.

pub mod config;
pub mod model;
pub mod data;
