//! The character tokenizer: one token per character, newline included, stored as a standard
//! `tokenizer.json` that Python's `tokenizers.Tokenizer.from_file` loads and that gives the same ids.

use crate::data::error::DataError;
use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::models::wordlevel::WordLevel;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{SplitDelimiterBehavior, Tokenizer};

/// The token that separates poems.
pub const NEWLINE: char = '\n';

/// A tokenizer that maps each character of its vocabulary to one id.
pub struct CharTokenizer {
    inner: Tokenizer,
    ids: HashMap<char, u32>,
}

fn tok_err(e: impl std::fmt::Display) -> DataError {
    DataError::Tokenizer(e.to_string())
}

impl CharTokenizer {
    /// The vocabulary of `text`: newline first (id 0), then every other character in code-point order.
    pub fn from_text(text: &str) -> Result<Self, DataError> {
        let chars: BTreeSet<char> = text.chars().filter(|&c| c != NEWLINE).collect();
        Self::of_chars(std::iter::once(NEWLINE).chain(chars))
    }

    /// The vocabulary of `text` numbered by count: newline first (id 0), then every other
    /// character from the most frequent to the least (ties in code-point order), so that an
    /// adaptive softmax's head (`ops::adaptive_softmax`) is its first ids.
    pub fn by_count(text: &str) -> Result<Self, DataError> {
        let mut counts: HashMap<char, usize> = HashMap::new();
        for c in text.chars().filter(|&c| c != NEWLINE) {
            *counts.entry(c).or_default() += 1;
        }
        let mut chars: Vec<(char, usize)> = counts.into_iter().collect();
        chars.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        Self::of_chars(std::iter::once(NEWLINE).chain(chars.into_iter().map(|(c, _)| c)))
    }

    /// This vocabulary with the characters of `text` it lacks added after its own, in code-point
    /// order: every character keeps its id (a fine-tuned run's, `train --init-from`).
    pub fn extended(&self, text: &str) -> Result<Self, DataError> {
        let mut by_id: Vec<(u32, char)> = self.ids.iter().map(|(&c, &id)| (id, c)).collect();
        by_id.sort_unstable();
        let new: BTreeSet<char> = text.chars().filter(|c| !self.ids.contains_key(c)).collect();
        Self::of_chars(by_id.into_iter().map(|(_, c)| c).chain(new))
    }

    /// The vocabulary whose ids are `chars`' positions.
    fn of_chars(chars: impl Iterator<Item = char>) -> Result<Self, DataError> {
        let vocab = chars.enumerate().map(|(i, c)| (c.to_string(), i as u32));
        let model = WordLevel::builder()
            .vocab(vocab.collect())
            .unk_token("[UNK]".into())
            .build()
            .map_err(tok_err)?;
        // Every character, newline included, becomes its own piece.
        let split = Split::new(
            SplitPattern::Regex(r"[\s\S]".into()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(tok_err)?;
        let mut inner = Tokenizer::new(model);
        inner
            .with_pre_tokenizer(Some(split))
            .with_decoder(Some(Fuse::new()));
        Ok(Self::wrap(inner))
    }

    fn wrap(inner: Tokenizer) -> Self {
        let ids = inner
            .get_vocab(false)
            .into_iter()
            .filter_map(|(token, id)| {
                let mut chars = token.chars();
                match (chars.next(), chars.next()) {
                    (Some(c), None) => Some((c, id)),
                    _ => None,
                }
            })
            .collect();
        CharTokenizer { inner, ids }
    }

    /// Loads a `tokenizer.json`, checking that it is a character vocabulary whose ids are
    /// 0, 1, … without gaps (a model has one output per id).
    pub fn load(path: &Path) -> Result<Self, DataError> {
        let text = crate::files::read_text_limited(path, crate::files::SMALL_FILE_LIMIT)
            .map_err(|e| DataError::Tokenizer(format!("cannot load {}: {e}", path.display())))?;
        Self::from_json(&text, &path.display().to_string())
    }

    /// [`CharTokenizer::load`] of the text of a `tokenizer.json`; `origin` names it in errors.
    pub fn from_json(text: &str, origin: &str) -> Result<Self, DataError> {
        let cannot = |e: String| DataError::Tokenizer(format!("cannot load {origin}: {e}"));
        // The syntax first: tokenizers 0.23 panics ("Helper") on a syntax error inside the
        // "decoder" object instead of returning its error.
        serde_json::from_str::<serde::de::IgnoredAny>(text)
            .map_err(|e| cannot(format!("it is not valid JSON ({e})")))?;
        let inner: Tokenizer = text.parse().map_err(|e| {
            cannot(format!(
                "it is JSON but no tokenizer of this program ({e}): give the tokenizer.json that train wrote with the run"
            ))
        })?;
        let vocab = inner.get_vocab(false);
        let tokenizer = Self::wrap(inner);
        if tokenizer.ids.len() != vocab.len() {
            return Err(cannot(
                "it has tokens of more than one character: it was not written by this program"
                    .into(),
            ));
        }
        let mut seen = vec![false; vocab.len()];
        for &id in tokenizer.ids.values() {
            match seen.get_mut(id as usize) {
                Some(s) if !*s => *s = true,
                _ => return Err(cannot(format!(
                    "its ids are not 0..{} without gaps or repeats (id {id}): it was not written by this program",
                    vocab.len()
                ))),
            }
        }
        // Every character alone, in id order, must come back as 0, 1, …: a file whose
        // normalizer or pre-tokenizer merges or changes characters would give other ids.
        let mut by_id = vec![NEWLINE; vocab.len()];
        for (c, id) in tokenizer.chars() {
            by_id[id as usize] = c; // every id is below vocab.len(), checked above
        }
        let every: String = by_id.into_iter().collect();
        let expected: Vec<u32> = (0..vocab.len() as u32).collect();
        if tokenizer.encode_with_pipeline(&every).ok() != Some(expected) {
            return Err(cannot(
                "its normalizer or pre-tokenizer does not give each character its own id: it was not written by this program"
                    .into(),
            ));
        }
        Ok(tokenizer)
    }

    /// A fingerprint of the vocabulary (FNV-1a over the characters in id order): two tokenizers
    /// with the same characters under other ids differ.
    pub fn fingerprint(&self) -> String {
        let mut by_id: Vec<(u32, char)> = self.ids.iter().map(|(&c, &id)| (id, c)).collect();
        by_id.sort_unstable();
        super::fingerprint(
            by_id
                .into_iter()
                .flat_map(|(_, c)| (c as u32).to_le_bytes()),
        )
    }

    /// Writes the standard `tokenizer.json` text.
    pub fn to_json(&self) -> Result<String, DataError> {
        self.inner.to_string(true).map_err(tok_err)
    }

    /// Number of tokens.
    pub fn vocab_size(&self) -> usize {
        self.ids.len()
    }

    /// The id of one character, if known.
    pub fn id(&self, c: char) -> Option<u32> {
        self.ids.get(&c).copied()
    }

    /// Every (character, id) pair of the vocabulary, in no particular order.
    pub fn chars(&self) -> impl Iterator<Item = (char, u32)> + '_ {
        self.ids.iter().map(|(&c, &id)| (c, id))
    }

    /// The characters of `text` outside the vocabulary, each once, in order of appearance.
    pub fn unknown_chars(&self, text: &str) -> Vec<char> {
        let mut unknown: Vec<char> = Vec::new();
        for c in text.chars().filter(|c| !self.ids.contains_key(c)) {
            if !unknown.contains(&c) {
                unknown.push(c);
            }
        }
        unknown
    }

    /// One id per character; characters outside the vocabulary are an error that names them.
    ///
    /// Looked up in the vocabulary, character by character: the ids that `tokenizers`' pipeline
    /// gives ([`CharTokenizer::load`] checks that it splits every character alone), without the
    /// hundreds of bytes per character of its `Encoding` (about 640 MB for the shipped corpus).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, DataError> {
        text.chars()
            .map(|c| self.id(c))
            .collect::<Option<Vec<u32>>>()
            .ok_or_else(|| DataError::UnknownChars(self.unknown_chars(text)))
    }

    /// [`CharTokenizer::encode`] through `tokenizers`' own pipeline (pre-tokenizer and model).
    fn encode_with_pipeline(&self, text: &str) -> Result<Vec<u32>, DataError> {
        let encoding = self.inner.encode(text, false).map_err(tok_err)?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The text of `ids`.
    pub fn decode(&self, ids: &[u32]) -> Result<String, DataError> {
        self.inner.decode(ids, false).map_err(tok_err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vocabulary_lookup_gives_the_ids_of_tokenizers_own_pipeline() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(root.join("data/tiny.txt")).unwrap();
        let tokenizer = CharTokenizer::from_text(&text).unwrap();
        let ids = tokenizer.encode(&text).unwrap();
        assert_eq!(ids.len(), text.chars().count());
        assert_eq!(ids, tokenizer.encode_with_pipeline(&text).unwrap());
        let reloaded = tokenizer.to_json().unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tokenizer.json"), reloaded).unwrap();
        let loaded = CharTokenizer::load(&dir.path().join("tokenizer.json")).unwrap();
        assert_eq!(loaded.encode(&text).unwrap(), ids);
    }

    #[test]
    fn numbered_by_count_the_most_frequent_come_first() {
        let tokenizer = CharTokenizer::by_count("山日日白\n白日山依\n").unwrap();
        // 日 3, 山 2, 白 2 (山 before 白 by code point), 依 1; newline first as always.
        let ids = tokenizer.encode("\n日山白依").unwrap();
        assert_eq!(ids, [0, 1, 2, 3, 4]);
        assert_eq!(tokenizer.vocab_size(), 5);
    }

    #[test]
    fn a_file_whose_pipeline_merges_characters_is_refused() {
        let tokenizer = CharTokenizer::from_text("白日依山尽\n").unwrap();
        let json = tokenizer.to_json().unwrap();
        // Whitespace-split pieces instead of single characters: 白日依山尽 would be one unknown piece.
        let mut value: serde_json::Value = serde_json::from_str(&json).unwrap();
        value["pre_tokenizer"] = serde_json::json!({ "type": "Whitespace" });
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokenizer.json");
        std::fs::write(&path, value.to_string()).unwrap();
        let err = CharTokenizer::load(&path).err().expect("refused");
        assert!(err.to_string().contains("its own id"), "{err}");
    }
}
