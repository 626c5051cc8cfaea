//! Loading a corpus file and splitting it into train and validation poems.

use crate::data::error::DataError;
use crate::data::poem::regular_form;
use std::path::{Path, PathBuf};

/// One poem in `VAL_EVERY` is held out for validation (5%), chosen by position so the split is
/// deterministic and never cuts a poem.
pub const VAL_EVERY: usize = 20;

/// The poems of a corpus file: its lines that are regular-form verse.
#[derive(Debug, Clone)]
pub struct Corpus {
    /// Valid poems, in file order.
    pub poems: Vec<String>,
    /// Non-empty lines that were not regular-form verse and were left out.
    pub skipped: usize,
}

impl Corpus {
    /// Reads a UTF-8 file of one poem per line.
    pub fn load(path: &Path) -> Result<Corpus, DataError> {
        if path.as_os_str().is_empty() {
            return Err(DataError::Unnamed);
        }
        let bytes =
            crate::files::read_limited(path, crate::files::CORPUS_LIMIT).map_err(|source| {
                DataError::Read {
                    path: path.into(),
                    source,
                }
            })?;
        let text = String::from_utf8(bytes).map_err(|e| DataError::NotUtf8 {
            path: path.into(),
            offset: e.utf8_error().valid_up_to(),
        })?;
        Corpus::parse(&text, path)
    }

    /// Parses the text of a corpus; `path` names it in errors. A byte-order mark at the start
    /// (some Windows editors write one) is skipped.
    pub fn parse(text: &str, path: &Path) -> Result<Corpus, DataError> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let lines: Vec<&str> = text_lines(text)
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        if lines.is_empty() {
            return Err(DataError::Empty {
                path: PathBuf::from(path),
            });
        }
        let poems: Vec<String> = lines
            .iter()
            .filter(|l| regular_form(l).is_some())
            .map(|l| l.to_string())
            .collect();
        if poems.is_empty() {
            return Err(DataError::NoValidPoem {
                path: path.into(),
                lines: lines.len(),
            });
        }
        Ok(Corpus {
            skipped: lines.len() - poems.len(),
            poems,
        })
    }

    /// The whole corpus as text, each poem followed by a newline.
    pub fn text(&self) -> String {
        join_poems(self.poems.iter())
    }

    /// A fingerprint of the poems in their order (FNV-1a over the text): a run resumed on a
    /// corpus whose poems changed would hold other poems out for validation.
    pub fn fingerprint(&self) -> String {
        super::fingerprint(self.poems.iter().flat_map(|p| p.bytes().chain([b'\n'])))
    }

    /// (train, val) poems: every `VAL_EVERY`-th poem (the last of each group) goes to validation.
    pub fn split(&self) -> (Vec<&String>, Vec<&String>) {
        let (mut train, mut val) = (Vec::new(), Vec::new());
        for (i, poem) in self.poems.iter().enumerate() {
            if i % VAL_EVERY == VAL_EVERY - 1 {
                val.push(poem);
            } else {
                train.push(poem);
            }
        }
        (train, val)
    }
}

/// The lines of `text`, ended by a line feed, a carriage return and line feed (Windows), or a
/// lone carriage return (classic Mac OS), which `str::lines` would leave inside one line.
pub fn text_lines(text: &str) -> impl Iterator<Item = &str> {
    text.split('\n')
        .flat_map(|line| line.strip_suffix('\r').unwrap_or(line).split('\r'))
}

/// Poems joined into one text, each followed by a newline.
pub fn join_poems<'a>(poems: impl Iterator<Item = &'a String>) -> String {
    poems.flat_map(|p| [p.as_str(), "\n"]).collect()
}
