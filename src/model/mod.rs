//! The GPT, smallest piece first: layers, positions, attention, blocks, the whole model; then its
//! one-position decoder for generation on the CPU.

pub mod attention;
pub mod block;
pub mod cache;
pub mod decoder;
pub mod gpt;
pub mod init;
pub mod layers;
pub mod position;
pub(crate) mod team;

pub use cache::GenerationCache;
pub use decoder::{CpuDecoder, DecodeState};
pub use gpt::Gpt;
pub use layers::Mode;
