//! The GPT as a candle graph, smallest piece first: layers, positions, attention, blocks, the
//! whole model. It is the readable reference and the path of other devices; on the CPU, training
//! and generation run on [`crate::engine`]. It knows tokens, not what they stand for: what is
//! modelled may add [`inputs`] to the token embeddings (verse's are in `verse::inputs`).

pub mod attention;
pub mod block;
pub mod gpt;
pub mod init;
pub mod inputs;
pub mod layers;
pub mod position;

pub use gpt::Gpt;
pub use layers::Mode;
