//! From text to batches: poems, the character tokenizer, the split and the batch loader.

pub mod batches;
pub mod corpus;
pub mod decay;
pub mod error;
pub mod header;
pub mod held_out;
pub mod poem;
pub mod run_text;
pub mod tokenizer;

pub use batches::{Split, Splits};
pub use corpus::{Corpus, CorpusKind};
pub use error::DataError;
pub use run_text::RunText;
pub use tokenizer::CharTokenizer;

/// The shipped corpus.
pub const DEFAULT_CORPUS: &str = "data/poems.txt";
/// The larger corpus, Tang and Song regular verse, shipped as `prepare_data --song` builds it.
pub const TANG_SONG_CORPUS: &str = "data/tang_song.txt";
/// How to build [`TANG_SONG_CORPUS`] again.
pub const TANG_SONG_BUILD: &str = "npm pack chinese-poetry@2.0.1 && tar xzf chinese-poetry-2.0.1.tgz && cargo run --release --features prepare --bin prepare_data -- --song --source package/dist/quantangshi";
/// How to get `path` back where it is the corpus that `prepare_data` builds besides the shipped
/// ones ([`TANG_SONG_CORPUS`], shipped too): from git, or its command, and where it is explained.
pub fn how_to_build(path: &std::path::Path) -> Option<String> {
    (path == std::path::Path::new(TANG_SONG_CORPUS))
        .then(|| format!("it ships with the repository: `git checkout -- {TANG_SONG_CORPUS}`, or build it again: {TANG_SONG_BUILD}; data/README.md"))
}

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

/// The share of the characters of `text` (line ends and spaces apart) that `seen` never holds.
pub fn unseen_share(text: &str, seen: &str) -> f64 {
    let known: std::collections::HashSet<char> = seen.chars().collect();
    let counted = text.chars().filter(|c| !c.is_whitespace());
    let (total, unseen) = counted.fold((0usize, 0usize), |(t, u), c| {
        (t + 1, u + usize::from(!known.contains(&c)))
    });
    match total {
        0 => 0.0,
        _ => unseen as f64 / total as f64,
    }
}
