//! Loading a corpus file of one of three kinds, and splitting it into train and validation text
//! (a run's text besides it, held out or decayed on from other files: `data::run_text`).
//!
//! - *verse*: one poem per line; lines that are not regular verse are left out;
//! - *lines*: one item per line (ci, couplets, a poet's lines), every non-empty line kept;
//! - *text*: running text (prose, drama, code), the whole file one token stream.
//!
//! Verse and lines hold out every `VAL_EVERY`-th item, so that the split never cuts one; running
//! text holds out its last tenth, as nanoGPT does, so that no window straddles the split.

use crate::data::error::DataError;
use crate::data::header::{split_header, without_header, SEPARATOR};
use crate::data::poem::regular_form;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// What a corpus file holds, which decides how it is read and split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CorpusKind {
    /// Chosen from the file when it is read (`data::Corpus::load` says which, and why).
    #[default]
    Auto,
    /// Regular verse: one poem per line, lines that are not 五绝, 七绝, 五律 or 七律 left out;
    /// every 20th poem held out for validation.
    Verse,
    /// One item per line (ci, couplets, 古体诗, any line collection), every non-empty line kept;
    /// every 20th line held out.
    Lines,
    /// Running text (prose, drama, code): the whole file one token stream, its last tenth held
    /// out, so that no window straddles the split.
    Text,
}

impl CorpusKind {
    /// Every kind, `auto` first.
    pub const ALL: [CorpusKind; 4] = [
        CorpusKind::Auto,
        CorpusKind::Verse,
        CorpusKind::Lines,
        CorpusKind::Text,
    ];

    /// The name used in config files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            CorpusKind::Auto => "auto",
            CorpusKind::Verse => "verse",
            CorpusKind::Lines => "lines",
            CorpusKind::Text => "text",
        }
    }
}

impl std::fmt::Display for CorpusKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for CorpusKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        CorpusKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = CorpusKind::ALL.into_iter().map(CorpusKind::name).collect();
                format!("unknown corpus kind `{s}`: use one of {}", names.join(", "))
            })
    }
}

/// One item in `VAL_EVERY` is held out for validation (5%), chosen by position so the split is
/// deterministic and never cuts an item.
pub const VAL_EVERY: usize = 20;

/// The share of running text held out for validation, at its end, in tenths: the characters
/// after the first ⌊9n/10⌋ of n, as nanoGPT's `prepare.py` cuts them.
pub const VAL_TENTHS: usize = 1;

/// A corpus of one kind: its items (poems or lines), or for running text the whole text as one.
#[derive(Debug, Clone)]
pub struct Corpus {
    /// The file it was read from, as given.
    pub path: String,
    /// Verse, lines or text (never auto).
    pub kind: CorpusKind,
    /// Why this kind: chosen from the file (and on what evidence), or asked for.
    pub why: String,
    /// The poems or lines in file order; for running text, one item: the whole text.
    pub items: Vec<String>,
    /// Non-empty lines that were not regular-form verse and were left out (verse only).
    pub skipped: usize,
}

impl Corpus {
    /// Reads a UTF-8 file of the given kind; `auto` chooses the kind from the file.
    pub fn load(path: &Path, kind: CorpusKind) -> Result<Corpus, DataError> {
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
        Corpus::parse(&text, path, kind)
    }

    /// Parses the text of a corpus; `path` names it in errors. A byte-order mark at the start
    /// (some Windows editors write one) is skipped, and every line ending becomes a line feed.
    pub fn parse(text: &str, path: &Path, kind: CorpusKind) -> Result<Corpus, DataError> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        if let Some((offset, c)) = text
            .char_indices()
            .find(|&(_, c)| c.is_control() && !matches!(c, '\n' | '\r' | '\t'))
        {
            return Err(DataError::Binary {
                path: path.into(),
                offset,
                char: c,
            });
        }
        let lines: Vec<&str> = text_lines(text)
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        if lines.is_empty() {
            return Err(DataError::Empty { path: path.into() });
        }
        let (kind, why) = match kind {
            CorpusKind::Auto => choose_kind(text, &lines),
            asked => (asked, "as the config asks".to_string()),
        };
        match kind {
            CorpusKind::Text => Ok(Corpus {
                path: path.display().to_string(),
                kind,
                why,
                items: vec![text_lines(text).collect::<Vec<_>>().join("\n")],
                skipped: 0,
            }),
            CorpusKind::Lines => Ok(Corpus {
                path: path.display().to_string(),
                kind,
                why,
                items: lines.iter().map(|l| l.to_string()).collect(),
                skipped: 0,
            }),
            _ => Corpus::verse(&lines, path, why),
        }
    }

    /// The regular-form poems among `lines` (after their headers, where they have them).
    fn verse(lines: &[&str], path: &Path, why: String) -> Result<Corpus, DataError> {
        let poems: Vec<String> = lines
            .iter()
            .filter(|l| regular_form(without_header(l)).is_some())
            .map(|l| l.to_string())
            .collect();
        if poems.is_empty() {
            return Err(DataError::NoValidPoem {
                path: path.into(),
                lines: lines.len(),
            });
        }
        Ok(Corpus {
            path: path.display().to_string(),
            kind: CorpusKind::Verse,
            why,
            skipped: lines.len() - poems.len(),
            items: poems,
        })
    }

    /// The fields of the header its items begin with (`data::header`): the field count most of
    /// them share when at least half of them begin with a header, else 0 (running text too).
    pub fn header_fields(&self) -> usize {
        if self.kind == CorpusKind::Text {
            return 0;
        }
        let mut counts = std::collections::BTreeMap::<usize, usize>::new();
        for item in &self.items {
            if let Some((inside, _)) = split_header(item) {
                *counts.entry(inside.split(SEPARATOR).count()).or_default() += 1;
            }
        }
        let headed: usize = counts.values().sum();
        match 2 * headed >= self.items.len() {
            true => counts
                .into_iter()
                .max_by_key(|&(fields, n)| (n, fields))
                .map_or(0, |(f, _)| f),
            false => 0,
        }
    }

    /// The whole corpus as the model reads it: items each followed by a newline, or the text.
    pub fn text(&self) -> String {
        match self.kind {
            CorpusKind::Text => self.items.concat(),
            _ => join_items(self.items.iter()),
        }
    }

    /// (train, val) items: every `VAL_EVERY`-th item (the last of each group) goes to
    /// validation. Running text is one item: see [`Corpus::split_text`]. (A run measured on
    /// another file's text trains every item: [`crate::data::RunText::split_text`].)
    pub fn split(&self) -> (Vec<&String>, Vec<&String>) {
        let (mut train, mut val) = (Vec::new(), Vec::new());
        for (i, item) in self.items.iter().enumerate() {
            if i % VAL_EVERY == VAL_EVERY - 1 {
                val.push(item);
            } else {
                train.push(item);
            }
        }
        (train, val)
    }

    /// (train, val) as the text the model reads: for verse and lines the items of each side
    /// joined, for running text its first nine tenths and its last tenth (cut between
    /// characters).
    pub fn split_text(&self) -> (String, String) {
        if self.kind != CorpusKind::Text {
            let (train, val) = self.split();
            return (join_items(train.into_iter()), join_items(val.into_iter()));
        }
        let text = self.text();
        let chars = text.chars().count();
        let cut = text
            .char_indices()
            .nth(chars * (10 - VAL_TENTHS) / 10)
            .map_or(text.len(), |(i, _)| i);
        (text[..cut].to_string(), text[cut..].to_string())
    }
}

/// The kind of a file read with `auto`, and why: verse when at least half its non-empty lines
/// are regular-form poems; one item per line when it has at least `VAL_EVERY` lines and no
/// blank line among them; else running text (blank lines between paragraphs or speeches say
/// that its line breaks are part of the text).
fn choose_kind(text: &str, lines: &[&str]) -> (CorpusKind, String) {
    let poems = lines
        .iter()
        .filter(|l| regular_form(without_header(l)).is_some())
        .count();
    if 2 * poems >= lines.len() {
        let why = format!("{poems} of its {} lines are regular verse", lines.len());
        return (CorpusKind::Verse, why);
    }
    let blank = text_lines(text.trim())
        .filter(|l| l.trim().is_empty())
        .count();
    if blank == 0 && lines.len() >= VAL_EVERY {
        let why = format!(
            "{} lines, {poems} of them regular verse, and no blank line between them",
            lines.len()
        );
        return (CorpusKind::Lines, why);
    }
    let why = match blank {
        0 => format!("only {} lines", lines.len()),
        _ => format!("{blank} blank lines between its {} lines", lines.len()),
    };
    (CorpusKind::Text, why)
}

/// The lines of `text`, ended by a line feed, a carriage return and line feed (Windows), or a
/// lone carriage return (classic Mac OS), which `str::lines` would leave inside one line.
pub fn text_lines(text: &str) -> impl Iterator<Item = &str> {
    text.split('\n')
        .flat_map(|line| line.strip_suffix('\r').unwrap_or(line).split('\r'))
}

/// Items (poems or lines) joined into one text, each followed by a newline.
pub fn join_items<'a>(items: impl Iterator<Item = &'a String>) -> String {
    items.flat_map(|p| [p.as_str(), "\n"]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn parse(text: &str) -> Corpus {
        Corpus::parse(text, &PathBuf::from("t.txt"), CorpusKind::Auto).unwrap()
    }

    #[test]
    fn auto_chooses_verse_lines_or_text_from_the_file() {
        let poem = "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。";
        assert_eq!(
            parse(&format!("{poem}\n{poem}\n随便\n")).kind,
            CorpusKind::Verse
        );
        let ci = "明月几时有，把酒问青天。\n".repeat(VAL_EVERY);
        assert_eq!(parse(&ci).kind, CorpusKind::Lines);
        let drama = "ROMEO:\nBut soft!\n\nJULIET:\nAy me!\n".repeat(10);
        assert_eq!(parse(&drama).kind, CorpusKind::Text);
        assert_eq!(parse("one line of prose").kind, CorpusKind::Text);
    }

    #[test]
    fn running_text_keeps_its_text_and_holds_out_its_last_tenth() {
        let text = "a\r\nb\rc\n\n  d\te\n".repeat(7);
        let corpus = Corpus::parse(&text, &PathBuf::from("t"), CorpusKind::Text).unwrap();
        let want = "a\nb\nc\n\n  d\te\n".repeat(7);
        assert_eq!(corpus.text(), want);
        let (train, val) = corpus.split_text();
        assert_eq!(format!("{train}{val}"), want);
        let n = want.chars().count();
        assert_eq!(val.chars().count(), n - n * 9 / 10);
    }

    #[test]
    fn a_binary_file_is_refused() {
        let err = Corpus::parse("abc\0def", &PathBuf::from("t"), CorpusKind::Auto).unwrap_err();
        assert!(err.to_string().contains("binary"), "{err}");
    }
}
