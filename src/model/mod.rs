//! The GPT as a candle graph, smallest piece first: layers, positions, attention, blocks, the
//! whole model. It is the readable reference and the path of other devices; on the CPU, training
//! and generation run on [`crate::engine`]. Two optional inputs of verse are added to the token
//! embeddings: each character's sound (`sound`) and each position's place in its poem
//! (`places`); both read the characters behind the token ids (`vocabulary`).

pub mod attention;
pub mod block;
pub mod gpt;
pub mod init;
pub mod layers;
pub mod places;
pub mod position;
pub mod sound;
pub mod vocabulary;

pub use gpt::Gpt;
pub use layers::Mode;
