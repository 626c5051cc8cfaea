//! The schedule's decay trained on another file (`[data] decay_corpus`: Song and Tang first, Tang
//! last), its items that share a line with the run's held-out text left out.

use crate::data::corpus::{Corpus, CorpusKind};
use crate::data::error::DataError;
use crate::data::held_out::HeldLines;
use std::path::Path;

/// What the schedule's decay trains on, from another file.
#[derive(Debug, Clone)]
pub struct DecayText {
    /// The file, as the config names it.
    pub path: String,
    /// Its items that share no line with the run's held-out text, as the model reads them.
    pub text: String,
    /// How many items that is, and how many were left out (in running text, its lines).
    pub items: usize,
    pub left_out: usize,
}

impl DecayText {
    /// The items of `path` (read as its kind is chosen from the file; running text line by line)
    /// that share no line with `held_out`, the run's held-out text.
    pub fn load(path: &str, held_out: &HeldLines) -> Result<DecayText, DataError> {
        let file =
            Corpus::load(Path::new(path), CorpusKind::Auto).map_err(|e| DataError::OtherFile {
                key: "data.decay_corpus",
                source: Box::new(e),
            })?;
        let whole = file.text();
        let items: Vec<&str> = match file.kind {
            CorpusKind::Text => whole.split_inclusive('\n').collect(),
            _ => file.items.iter().map(String::as_str).collect(),
        };
        let (kept, left): (Vec<&str>, Vec<&str>) =
            items.into_iter().partition(|item| !held_out.shares(item));
        if kept.iter().all(|item| item.trim().is_empty()) {
            return Err(DataError::DecayEmpty {
                path: path.to_string(),
                left_out: left.len(),
                kind: file.kind.to_string(),
            });
        }
        let text = match file.kind {
            CorpusKind::Text => kept.concat(),
            _ => kept.iter().flat_map(|item| [*item, "\n"]).collect(),
        };
        Ok(DecayText {
            path: path.to_string(),
            text,
            items: kept.len(),
            left_out: left.len(),
        })
    }
}
