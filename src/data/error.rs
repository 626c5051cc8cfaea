//! Errors of the data pipeline, each saying what is wrong and what to do.

use std::path::PathBuf;

/// What went wrong reading a corpus, building batches or encoding text.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// No corpus file was named (an empty name).
    #[error("no corpus file given (its name is empty): give one, one poem per line (the shipped corpus is {})", super::DEFAULT_CORPUS)]
    Unnamed,
    /// The corpus file could not be read.
    #[error("cannot read corpus {path}: {source}{}", shipped_corpus_hint(path))]
    Read {
        /// The file asked for.
        path: PathBuf,
        /// Why reading failed.
        source: std::io::Error,
    },
    /// The corpus is not UTF-8 text.
    #[error("corpus {path} is not UTF-8 text (invalid byte at offset {offset}): save it as UTF-8, one poem per line")]
    NotUtf8 {
        /// The file.
        path: PathBuf,
        /// Where the first invalid byte is.
        offset: usize,
    },
    /// The corpus holds control characters: a binary file, not text.
    #[error("corpus {path} looks like a binary file, not text: it holds the control character {} at byte {offset}; give a UTF-8 text file", describe_char(*.char))]
    Binary {
        /// The file.
        path: PathBuf,
        /// The byte offset of the first control character.
        offset: usize,
        /// That character.
        char: char,
    },
    /// The corpus has no line at all.
    #[error("corpus {path} is empty: it needs one poem per line, e.g. 白日依山尽，黄河入海流。欲穷千里目，更上一层楼。")]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// No line is a regular-form poem.
    #[error(
        "corpus {path} has no valid poem among its {lines} lines: a poem is one line of 4 or 8 sentences of 5 or 7 \
         Chinese characters, each ended by ，。？！or ；"
    )]
    NoValidPoem {
        /// The file.
        path: PathBuf,
        /// Non-empty lines read.
        lines: usize,
    },
    /// A split is too short for one training window.
    #[error(
        "the {split} split has {tokens} tokens, fewer than block_size + 1 = {needed}: it is {origin}, or a \
         smaller --block-size"
    )]
    TooShort {
        /// "train", "val" or "decay".
        split: &'static str,
        /// Where its text comes from, and how to make it longer ([`super::RunText::source_of`]).
        origin: String,
        /// Its length in tokens.
        tokens: usize,
        /// block_size + 1.
        needed: usize,
    },
    /// A corpus holds poems of the held-out text it is to be measured on.
    #[error("corpus {corpus} holds {items} item{} that share{} a line with the held-out text of {validation} (the first: \"{example}\"): a run would be measured on what it trained on; leave those items out of the corpus, or measure it on its own split (leave data.validation out)", if *.items == 1 { "" } else { "s" }, if *.items == 1 { "s" } else { "" })]
    Leak {
        /// The corpus file.
        corpus: String,
        /// The validation file.
        validation: String,
        /// How many of the corpus's items share a line with a held-out item.
        items: usize,
        /// The first line shared.
        example: String,
    },
    /// Every item of the decay's file shares a line with the held-out text.
    #[error("data.decay_corpus {path}: all {left_out} of its items (read as {kind}) share a line with the held-out text, so the decay would train on nothing: give a file of other text")]
    DecayEmpty {
        /// The file.
        path: String,
        /// Its items, all left out.
        left_out: usize,
        /// The kind it was read as.
        kind: String,
    },
    /// A file a run reads besides its corpus (`key`: data.validation, data.decay_corpus) failed.
    #[error("{key}: {source}")]
    OtherFile {
        /// The config key that names it.
        key: &'static str,
        /// What went wrong.
        source: Box<DataError>,
    },
    /// Text holds characters the tokenizer does not know.
    #[error("{} not in the vocabulary: {}; use only characters of the training corpus", if .0.len() == 1 { "this character is".to_string() } else { format!("these {} characters are", .0.len()) }, describe(.0))]
    UnknownChars(Vec<char>),
    /// The tokenizer file or library failed.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
}

/// Names the shipped corpus after an error about another one, or how to get the larger one back.
fn shipped_corpus_hint(path: &std::path::Path) -> String {
    let shipped = super::DEFAULT_CORPUS;
    if let Some(how) = super::how_to_build(path).filter(|_| !path.exists()) {
        return format!(" ({how})");
    }
    match path == std::path::Path::new(shipped) {
        true => String::new(),
        false => format!(" (the shipped corpus is {shipped})"),
    }
}

/// Names characters so that invisible ones are seen too (`'a' 'b' '\n' (U+000A) U+200B`), the
/// first ten of them and how many more there are.
fn describe(chars: &[char]) -> String {
    const SHOWN: usize = 10;
    let mut text = chars
        .iter()
        .take(SHOWN)
        .map(|&c| describe_char(c))
        .collect::<Vec<_>>()
        .join(" ");
    if chars.len() > SHOWN {
        text += &format!(" and {} more", chars.len() - SHOWN);
    }
    text
}

/// One character as a message shows it: `'白'`, or its code point when it cannot be seen
/// (control characters, spaces, zero-width and other format characters).
pub fn describe_char(c: char) -> String {
    if is_invisible(c) || c.is_whitespace() {
        format!("U+{:04X}", c as u32)
    } else {
        format!("'{c}'")
    }
}

/// Whether `c` shows nothing, or changes how the text around it shows (a control character, a
/// bidirectional override such as U+202E, a zero-width or filler character).
pub fn is_invisible(c: char) -> bool {
    c.is_control()
        || matches!(c as u32,
            0xAD | 0x34F | 0x61C | 0x115F..=0x1160 | 0x17B4..=0x17B5 | 0x180B..=0x180F
            | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x206F | 0x3164 | 0xFE00..=0xFE0F
            | 0xFEFF | 0xFFA0 | 0xFFF0..=0xFFFB | 0xE0000..=0xE0FFF)
}

/// `text` to print on a terminal: each invisible character ([`is_invisible`]) and each space
/// other than the plain one (U+3000, which looks like one) as `<U+202E>`, so that none of them
/// hides or reorders what is printed after it.
pub fn printable(text: &str) -> String {
    text.chars()
        .map(
            |c| match is_invisible(c) || (c.is_whitespace() && c != ' ') {
                true => format!("<U+{:04X}>", c as u32),
                false => c.to_string(),
            },
        )
        .collect()
}
