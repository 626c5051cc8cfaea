//! A minimal, trainable, character-level GPT on classical Chinese poetry, in Rust on candle.

// Inside an unsafe fn, each unsafe operation still stands in its own block with its SAFETY comment.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod cli;
pub mod clock;
pub mod config;
pub mod data;
pub mod device;
pub mod engine;
pub mod experiments;
pub mod files;
pub mod machine;
pub mod measure;
pub mod model;
pub mod ops;
pub mod page;
pub mod perf;
pub mod prepare;
pub mod random;
pub mod sample;
#[cfg(feature = "serve")]
pub mod serve;
pub mod train;
pub mod verse;
