//! A corpus measured on another file's held-out items (`[data] validation`): runs on any corpus
//! are then measured on the same text (the default's 1,815 held-out Tang poems, every character of
//! them), so corpora and recipes compare. None of that text may be trained on: a corpus that holds
//! a held-out poem, or a poem sharing a line with one, is refused.
//!
//! What a line is depends on the held-out text's kind: in verse and lines, a sentence (between
//! ，。？！； and line ends) of [`SHORTEST_LINE`] characters or more; in running text, a whole
//! line of [`SHORTEST_TEXT_LINE`] or more that the file's own training text does not hold too (a
//! speaker's name, "Exeunt.", recur without a leak).

use crate::data::corpus::{text_lines, Corpus, CorpusKind};
use crate::data::error::DataError;
use crate::data::header::without_header;
use std::collections::HashSet;
use std::path::Path;

/// Sentences shorter than this are not compared (a ci's 三字句 such as 君不见 recurs in many
/// poems).
pub const SHORTEST_LINE: usize = 4;

/// Lines of running text shorter than this are not compared ("O, no!").
pub const SHORTEST_TEXT_LINE: usize = 8;

/// The lines of a held-out text, to find them in other text.
pub struct HeldLines {
    /// The held-out text's kind, which says what a line is.
    kind: CorpusKind,
    lines: HashSet<String>,
}

impl HeldLines {
    /// The lines of `text`, held-out text of the kind `kind`; in running text, those that
    /// `trained`, the training text of the same file, does not hold too.
    pub fn new(text: &str, kind: CorpusKind, trained: &str) -> Self {
        let mut lines: HashSet<String> = lines_of(text, kind).map(String::from).collect();
        if kind == CorpusKind::Text {
            for line in lines_of(trained, kind) {
                lines.remove(line);
            }
        }
        HeldLines { kind, lines }
    }

    /// The first line of `item` that the held-out text holds, if any (read as the held-out
    /// text's lines are).
    pub fn first_shared<'b>(&self, item: &'b str) -> Option<&'b str> {
        lines_of(item, self.kind).find(|line| self.lines.contains(*line))
    }

    /// Whether `item` holds a line of the held-out text.
    pub fn shares(&self, item: &str) -> bool {
        self.first_shared(item).is_some()
    }
}

/// The validation text a corpus is measured on, from another file.
#[derive(Debug, Clone)]
pub struct HeldOut {
    /// The file, as the config names it.
    pub path: String,
    /// Its kind, which says what its lines are.
    pub kind: CorpusKind,
    /// Its held-out text, as the model reads it (the second half of its own `Corpus::split_text`).
    pub text: String,
    /// Its whole text: every character of it is in the run's vocabulary, so that every
    /// character of the held-out text is scored.
    pub whole: String,
}

impl HeldOut {
    /// The held-out text of `path` (read as its kind is chosen from the file), checked against
    /// `corpus`: no line of it may be in the corpus.
    pub fn load(path: &str, corpus: &Corpus) -> Result<HeldOut, DataError> {
        let file =
            Corpus::load(Path::new(path), CorpusKind::Auto).map_err(|e| DataError::OtherFile {
                key: "data.validation",
                source: Box::new(e),
            })?;
        let (_, text) = file.split_text();
        let held_out = HeldOut {
            path: path.to_string(),
            kind: file.kind,
            text,
            whole: file.text(),
        };
        held_out.check_unseen(corpus)?;
        Ok(held_out)
    }

    /// Its lines, to find them in other text.
    pub fn lines(&self) -> HeldLines {
        HeldLines::new(&self.text, self.kind, self.trained())
    }

    /// The file's text before its held-out text (what its own split would train on).
    pub fn trained(&self) -> &str {
        self.whole.strip_suffix(self.text.as_str()).unwrap_or("")
    }

    /// Refuses a corpus that holds a line of the held-out text: its poems, and any poem that
    /// shares a line with one, would be trained on and then measured.
    fn check_unseen(&self, corpus: &Corpus) -> Result<(), DataError> {
        let held = self.lines();
        let mut leaks = corpus
            .items
            .iter()
            .filter_map(|item| held.first_shared(item));
        let Some(first) = leaks.next() else {
            return Ok(());
        };
        Err(DataError::Leak {
            corpus: corpus.path.clone(),
            validation: self.path.clone(),
            items: 1 + leaks.count(),
            example: first.chars().take(60).collect(),
        })
    }
}

/// The lines of a text's items, their headers left out, as held-out text of the kind `kind`
/// reads them: for verse and lines, the runs of characters between ，。？！； and line ends, of
/// at least [`SHORTEST_LINE`] characters (a line of English is one); for running text its lines,
/// trimmed, of at least [`SHORTEST_TEXT_LINE`].
pub fn lines_of(text: &str, kind: CorpusKind) -> Box<dyn Iterator<Item = &str> + '_> {
    match kind {
        CorpusKind::Text => Box::new(
            text_lines(text)
                .map(str::trim)
                .filter(|line| line.chars().count() >= SHORTEST_TEXT_LINE),
        ),
        _ => Box::new(text_lines(text).flat_map(|item| {
            without_header(item)
                .split(|c: char| "，。？！；".contains(c))
                .filter(|line| line.chars().count() >= SHORTEST_LINE)
        })),
    }
}
