//! From text to batches: poems, the character tokenizer, the split and the batch loader.

pub mod poem;
pub mod prepare;
