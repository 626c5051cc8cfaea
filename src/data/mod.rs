//! From text to batches: poems, the character tokenizer, the split and the batch loader.

pub mod batches;
pub mod corpus;
pub mod error;
pub mod header;
pub mod poem;
pub mod tokenizer;

pub use batches::{Split, Splits};
pub use corpus::{Corpus, CorpusKind};
pub use error::DataError;
pub use tokenizer::CharTokenizer;

/// The shipped corpus.
pub const DEFAULT_CORPUS: &str = "data/poems.txt";
/// The shipped corpus's poems after their headers `【poet·title】`.
pub const TITLED_CORPUS: &str = "data/titled.txt";

/// The 64-bit FNV-1a hash of `bytes`, as 16 hexadecimal digits: the fingerprints by which a run
/// knows its vocabulary and its corpus again.
pub fn fingerprint(bytes: impl IntoIterator<Item = u8>) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}
