//! A corpus trained whole and measured on another file's held-out items (`[data] validation`):
//! runs on any corpus are then measured on the same text (the default's 1,815 held-out Tang
//! poems, every character of them), so corpora and recipes compare. None of that text may be
//! trained on: a corpus that holds a held-out poem, or a poem sharing a line with one, is refused.
//! And the schedule's decay trained on another file (`[data] decay_corpus`: Song and Tang first,
//! Tang last), its items that share a line with the held-out text left out.
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

/// The files a corpus is read with besides itself: the held-out text it is measured on, what its
/// decay trains on (a run's `[data] validation` and `decay_corpus`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Others<'a> {
    pub validation: Option<&'a str>,
    pub decay: Option<&'a str>,
}

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

/// The validation text a corpus is measured on, from another file.
#[derive(Debug, Clone)]
pub struct HeldOut {
    /// The file, as the config names it.
    pub path: String,
    /// Its kind, which says what its lines are.
    pub kind: CorpusKind,
    /// Its held-out text, as the model reads it (`Corpus::split_text`'s second half).
    pub text: String,
    /// Its whole text: every character of it is in the run's vocabulary, so that every
    /// character of the held-out text is scored.
    pub whole: String,
}

impl HeldOut {
    /// The held-out text of `path` (read as its kind is chosen from the file), checked against
    /// `corpus`: no line of it may be in the corpus.
    pub fn load(path: &str, corpus: &Corpus, corpus_path: &str) -> Result<HeldOut, DataError> {
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
        held_out.check_unseen(corpus, corpus_path)?;
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
    fn check_unseen(&self, corpus: &Corpus, corpus_path: &str) -> Result<(), DataError> {
        let held = self.lines();
        let mut leaks = corpus
            .items
            .iter()
            .filter_map(|item| held.first_shared(item));
        let Some(first) = leaks.next() else {
            return Ok(());
        };
        Err(DataError::Leak {
            corpus: corpus_path.to_string(),
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::data::corpus::VAL_EVERY;
    use crate::data::{CharTokenizer, Splits};

    /// The `n`th poem of four lines of five characters, its characters its own (no two of them
    /// share a line): for the tests of the held-out lines here and in `prepare::song`.
    pub(crate) fn poem_of(n: u32) -> String {
        let line = |l: u32| -> String {
            (0..5)
                .map(|k| char::from_u32(0x4E00 + n * 20 + l * 5 + k).unwrap())
                .collect()
        };
        format!("{}，{}。{}，{}。", line(0), line(1), line(2), line(3))
    }

    /// `poems` one per line, written to `name` in `dir`; its path.
    fn write(dir: &Path, name: &str, poems: &[String]) -> String {
        let path = dir.join(name);
        let text: String = poems.iter().map(|p| format!("{p}\n")).collect();
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_string()
    }

    #[test]
    fn a_corpus_measured_on_another_file_trains_whole_on_the_vocabulary_of_both() {
        let dir = tempfile::tempdir().unwrap();
        let held: Vec<String> = (0..2 * VAL_EVERY as u32).map(poem_of).collect();
        let validation = write(dir.path(), "val.txt", &held);
        let own: Vec<String> = (100..130).map(poem_of).collect();
        let corpus_path = write(dir.path(), "corpus.txt", &own);
        let others = Others {
            validation: Some(&validation),
            decay: None,
        };
        let corpus = Corpus::load_with(&corpus_path, CorpusKind::Auto, others).unwrap();
        let (train, val) = corpus.split_text();
        // Every item trains; the held-out text is the validation file's 20th and 40th poems.
        assert_eq!(
            train,
            own.iter().map(|p| format!("{p}\n")).collect::<String>()
        );
        assert_eq!(
            val,
            format!("{}\n{}\n", held[VAL_EVERY - 1], held[2 * VAL_EVERY - 1])
        );
        // Every character of the validation file is in the vocabulary, its held-out ones too.
        let tokenizer = CharTokenizer::from_text(&corpus.vocabulary_text()).unwrap();
        let splits = Splits::new(&corpus, &tokenizer, 8).unwrap();
        assert_eq!(splits.val, tokenizer.encode(&val).unwrap());
        assert!(tokenizer.encode(&held.concat()).is_ok());
        // Measured on another text, it is another corpus to a resume.
        let alone = Corpus::load(Path::new(&corpus_path), CorpusKind::Auto).unwrap();
        assert_ne!(alone.fingerprint(), corpus.fingerprint());
        assert!(corpus
            .describe("c")
            .contains(&format!("held-out text of {validation}")));
    }

    #[test]
    fn a_corpus_holding_a_line_of_the_held_out_poems_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let held: Vec<String> = (0..VAL_EVERY as u32).map(poem_of).collect();
        let validation = write(dir.path(), "val.txt", &held);
        let held_line: String = held[VAL_EVERY - 1].chars().skip(12).take(5).collect();
        let mut own: Vec<String> = (100..130).map(poem_of).collect();
        own[7] = own[7].replacen(&own[7].chars().take(5).collect::<String>(), &held_line, 1);
        own[9] = held[VAL_EVERY - 1].clone();
        own[11] = held[3].clone(); // a training poem of the validation file may be trained on
        let corpus_path = write(dir.path(), "corpus.txt", &own);
        let others = Others {
            validation: Some(&validation),
            decay: None,
        };
        let err = Corpus::load_with(&corpus_path, CorpusKind::Auto, others)
            .unwrap_err()
            .to_string();
        assert!(err.contains("holds 2 items that share a line"), "{err}");
        assert!(
            err.contains(&format!("(the first: \"{held_line}\")")),
            "{err}"
        );
        // A decay of held-out poems alone would train on nothing; a missing file is named by its key.
        let decay = write(dir.path(), "decay.txt", &held[VAL_EVERY - 1..]);
        let corpus_path = write(dir.path(), "fine.txt", &own[12..]);
        let others = |decay| Others {
            validation: Some(&validation),
            decay: Some(decay),
        };
        let load = |decay| Corpus::load_with(&corpus_path, CorpusKind::Auto, others(decay));
        let err = load(&decay).unwrap_err().to_string();
        assert!(
            err.contains("all 1 of its items (read as") && err.contains("share a line"),
            "{err}"
        );
        let err = load("no/such.txt").unwrap_err().to_string();
        assert!(
            err.starts_with("data.decay_corpus: cannot read corpus no/such.txt"),
            "{err}"
        );
        // A line shorter than SHORTEST_LINE characters is not compared.
        let short = lines_of("君不见，黄河之水天上来。", CorpusKind::Verse).collect::<Vec<_>>();
        assert_eq!(short, ["黄河之水天上来"]);
    }

    #[test]
    fn the_text_that_changed_is_named_by_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let poems: Vec<String> = (0..2 * VAL_EVERY as u32).map(poem_of).collect();
        let validation = write(dir.path(), "val.txt", &poems);
        let corpus_path = write(
            dir.path(),
            "corpus.txt",
            &(100..130).map(poem_of).collect::<Vec<_>>(),
        );
        let others = Others {
            validation: Some(&validation),
            decay: Some(&validation),
        };
        let load = || Corpus::load_with(&corpus_path, CorpusKind::Auto, others).unwrap();
        let saved = load().fingerprints();
        assert_eq!(load().changed_text(&saved), None);
        let mut swapped = poems.clone();
        swapped.swap(0, VAL_EVERY - 1); // another poem held out
        write(dir.path(), "val.txt", &swapped);
        assert_eq!(
            load().changed_text(&saved),
            Some(("data.validation", validation.clone()))
        );
        // A fingerprint saved without the file: the file is new.
        assert_eq!(
            load().changed_text("data.corpus=0"),
            Some(("data.corpus", corpus_path.clone()))
        );
    }

    /// `n` lines of running text, the `i`th naming `i` (each longer than SHORTEST_TEXT_LINE),
    /// each speech after a speaker's name and a blank line.
    fn prose(from: usize, n: usize) -> String {
        (from..from + n)
            .map(|i| format!("Speaker:\nThis is line number {i} of a long stretch of prose.\n\n"))
            .collect()
    }

    #[test]
    fn running_text_is_compared_by_its_whole_lines() {
        let dir = tempfile::tempdir().unwrap();
        let validation = dir.path().join("val.txt");
        std::fs::write(&validation, prose(0, 50)).unwrap();
        let validation = validation.to_str().unwrap();
        // Words and a speaker's name that recur in both texts are no shared line.
        let corpus_path = dir.path().join("corpus.txt");
        std::fs::write(&corpus_path, prose(100, 50)).unwrap();
        let corpus_path = corpus_path.to_str().unwrap();
        let others = Others {
            validation: Some(validation),
            decay: None,
        };
        let corpus = Corpus::load_with(corpus_path, CorpusKind::Auto, others).unwrap();
        assert_eq!(corpus.held_out.as_ref().unwrap().kind, CorpusKind::Text);
        // A whole line of the held-out text (the validation file's last tenth) is one.
        let leaking = dir.path().join("leaking.txt");
        std::fs::write(&leaking, prose(100, 50) + &prose(48, 1)).unwrap();
        let err = Corpus::load_with(leaking.to_str().unwrap(), CorpusKind::Auto, others)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("holds 1 item that shares a line")
                && err.contains(
                    "(the first: \"This is line number 48 of a long stretch of prose.\")"
                ),
            "{err}"
        );
        // A running-text decay keeps its lines that are not held out, in their order.
        let decay = dir.path().join("decay.txt");
        std::fs::write(&decay, prose(200, 3) + &prose(49, 1) + &prose(300, 1)).unwrap();
        let others = Others {
            validation: Some(validation),
            decay: decay.to_str(),
        };
        let corpus = Corpus::load_with(corpus_path, CorpusKind::Auto, others).unwrap();
        let decay = corpus.decay.unwrap();
        assert_eq!(decay.left_out, 1);
        assert_eq!(
            decay.text,
            (prose(200, 3) + &prose(49, 1) + &prose(300, 1))
                .replace("This is line number 49 of a long stretch of prose.\n", "")
        );
        // The held-out text itself as the decay: every line of it that its training text does
        // not hold is left out (#78: only those of 32 characters or more were).
        let held = dir.path().join("held.txt");
        let short: String = (0..50)
            .map(|i| format!("Speaker:\nO, no, {i}!\n\n"))
            .collect();
        std::fs::write(&held, prose(0, 45) + &short).unwrap();
        let own = Corpus::load(&held, CorpusKind::Auto).unwrap();
        let held_text = own.split_text().1;
        let tail = dir.path().join("tail.txt");
        std::fs::write(&tail, &held_text).unwrap();
        let others = Others {
            validation: None,
            decay: tail.to_str(),
        };
        let corpus = Corpus::load_with(held.to_str().unwrap(), CorpusKind::Auto, others).unwrap();
        let decay = corpus.decay.unwrap();
        assert!(
            decay.left_out > 10 && !decay.text.contains("O, no"),
            "{decay:?}"
        );
        assert!(
            decay.text.lines().all(|l| l.is_empty() || l == "Speaker:"),
            "{decay:?}"
        );
    }

    /// Lines of English, one item a line, are compared whole: a word they share with the
    /// corpus is no shared line (#78: "have" refused a file of other sentences).
    #[test]
    fn a_file_of_english_lines_is_compared_by_its_lines() {
        let dir = tempfile::tempdir().unwrap();
        let lines: String = (0..40)
            .map(|i| format!("We have a little poem, number {i}, that rolls along\n"))
            .collect();
        let validation = dir.path().join("val.txt");
        std::fs::write(&validation, &lines).unwrap();
        let corpus_path = dir.path().join("corpus.txt");
        std::fs::write(&corpus_path, prose(0, 40).replace("This", "We have")).unwrap();
        let others = Others {
            validation: validation.to_str(),
            decay: None,
        };
        let corpus = Corpus::load_with(corpus_path.to_str().unwrap(), CorpusKind::Auto, others);
        let held = corpus.unwrap().held_out.unwrap();
        assert_eq!(held.kind, CorpusKind::Lines);
        // The same line in the corpus is one.
        std::fs::write(
            &corpus_path,
            prose(0, 40) + "We have a little poem, number 19, that rolls along\n",
        )
        .unwrap();
        let err =
            Corpus::load_with(corpus_path.to_str().unwrap(), CorpusKind::Auto, others).unwrap_err();
        assert!(err.to_string().contains("number 19"), "{err}");
    }
}
