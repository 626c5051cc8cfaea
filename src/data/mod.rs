//! From text to batches: poems, the character tokenizer, the split and the batch loader.

pub mod batches;
pub mod corpus;
pub mod error;
pub mod poem;
pub mod prepare;
pub mod tokenizer;
pub mod verse_tables;

pub use batches::{Split, Splits};
pub use corpus::Corpus;
pub use error::DataError;
pub use tokenizer::CharTokenizer;
