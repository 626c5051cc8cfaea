//! The text a run reads: its corpus, and besides it the held-out text it is measured on
//! (`[data] validation`, `data::held_out`) and what its decay trains on (`[data] decay_corpus`,
//! `data::decay`); its vocabulary, its fingerprints, its split.

use crate::data::corpus::{Corpus, CorpusKind, VAL_EVERY};
use crate::data::decay::DecayText;
use crate::data::error::DataError;
use crate::data::held_out::{HeldLines, HeldOut};
use std::path::Path;

/// The files a corpus is read with besides itself: the held-out text it is measured on, what its
/// decay trains on (a run's `[data] validation` and `decay_corpus`).
#[derive(Debug, Clone, Copy, Default)]
pub struct OtherFiles<'a> {
    pub validation: Option<&'a str>,
    pub decay: Option<&'a str>,
}

/// A run's text: its corpus, measured on its own held-out items or on another file's, its decay
/// trained on its own text or on another file's.
#[derive(Debug, Clone)]
pub struct RunText {
    pub corpus: Corpus,
    /// Where the validation text comes from another file (`[data] validation`): then every item
    /// of the corpus trains.
    pub held_out: Option<HeldOut>,
    /// What the schedule's decay trains on instead, from another file (`[data] decay_corpus`).
    pub decay: Option<DecayText>,
}

impl From<Corpus> for RunText {
    /// A corpus read alone: measured on its own held-out items, its decay on its own text.
    fn from(corpus: Corpus) -> Self {
        RunText {
            corpus,
            held_out: None,
            decay: None,
        }
    }
}

impl RunText {
    /// The corpus `path` of the kind `kind` ([`Corpus::load`]) measured on the held-out text of
    /// `others.validation` when one is given (every item of it trained on; refused when it holds
    /// a line of that text), its decay trained on `others.decay`'s items when one is given.
    pub fn load(path: &str, kind: CorpusKind, others: OtherFiles) -> Result<RunText, DataError> {
        RunText::new(Corpus::load(Path::new(path), kind)?, others)
    }

    /// [`RunText::load`] of a corpus read already.
    pub fn new(corpus: Corpus, others: OtherFiles) -> Result<RunText, DataError> {
        let held_out = match others.validation {
            Some(validation) => Some(HeldOut::load(validation, &corpus)?),
            None => None,
        };
        let decay = match others.decay {
            Some(decay) => {
                let held = match &held_out {
                    Some(held) => held.lines(),
                    None => {
                        let (trained, held) = corpus.split_text();
                        HeldLines::new(&held, corpus.kind, &trained)
                    }
                };
                Some(DecayText::load(decay, &held)?)
            }
            None => None,
        };
        Ok(RunText {
            corpus,
            held_out,
            decay,
        })
    }

    /// (train, val) as the text the model reads: the corpus's own split
    /// ([`Corpus::split_text`]), or where it is measured on another file's held-out text, every
    /// item of it trained on and that text held out.
    pub fn split_text(&self) -> (String, String) {
        match &self.held_out {
            Some(held_out) => (self.corpus.text(), held_out.text.clone()),
            None => self.corpus.split_text(),
        }
    }

    /// The text the vocabulary is built from: the corpus's, a validation file's whole text (so
    /// that every character of its held-out text is scored), and the decay's.
    pub fn vocabulary_text(&self) -> String {
        let mut text = self.corpus.text();
        if let Some(held_out) = &self.held_out {
            text += &held_out.whole;
        }
        if let Some(decay) = &self.decay {
            text += &decay.text;
        }
        text
    }

    /// A fingerprint of the text in its order (FNV-1a), and of a validation file's held-out text
    /// and the decay's: a run resumed on a corpus whose text changed would hold other text out.
    pub fn fingerprint(&self) -> String {
        let held_out = self.held_out.iter().flat_map(|h| h.text.bytes());
        let decay = self.decay.iter().flat_map(|d| d.text.bytes());
        crate::data::fingerprint(self.corpus.text().bytes().chain(held_out).chain(decay))
    }

    /// The fingerprint of each text it reads, by the config key that names its file (the corpus,
    /// then the held-out text of `[data] validation` and the decay's, where given), as
    /// `data.corpus=…;data.validation=…`: a resume that finds the whole [`RunText::fingerprint`]
    /// changed names the file whose text did.
    pub fn fingerprints(&self) -> String {
        let mut parts = vec![format!(
            "data.corpus={}",
            crate::data::fingerprint(self.corpus.text().bytes())
        )];
        if let Some(held_out) = &self.held_out {
            let print = crate::data::fingerprint(held_out.text.bytes());
            parts.push(format!("data.validation={print}"));
        }
        if let Some(decay) = &self.decay {
            let print = crate::data::fingerprint(decay.text.bytes());
            parts.push(format!("data.decay_corpus={print}"));
        }
        parts.join(";")
    }

    /// The first text whose fingerprint differs from `saved` (fingerprints as
    /// [`RunText::fingerprints`] writes them): its key and its file. None where every text is as
    /// saved.
    pub fn changed_text(&self, saved: &str) -> Option<(&'static str, String)> {
        let print = |texts: &str, key: &str| {
            texts.split(';').find_map(|part| {
                part.strip_prefix(key)?
                    .strip_prefix('=')
                    .map(str::to_string)
            })
        };
        let now = self.fingerprints();
        let files = [
            ("data.corpus", Some(self.corpus.path.clone())),
            (
                "data.validation",
                self.held_out.as_ref().map(|h| h.path.clone()),
            ),
            (
                "data.decay_corpus",
                self.decay.as_ref().map(|d| d.path.clone()),
            ),
        ];
        files.into_iter().find_map(|(key, path)| {
            let differs = print(saved, key) != print(&now, key);
            differs.then(|| (key, path.unwrap_or_else(|| "(none given)".into())))
        })
    }

    /// Where the text of `split` comes from and what makes it longer, for an error saying it is
    /// too short for a window: `"the held-out text of val.txt (every 20th of its poems or lines:
    /// give at least 20 …)"`.
    pub fn source_of(&self, split: &str) -> String {
        let decay = self.decay.as_ref().filter(|_| split == "decay");
        let (what, path, kind) = match (&self.held_out, decay) {
            (_, Some(decay)) => ("the decay text", decay.path.as_str(), CorpusKind::Lines),
            (Some(held), None) if split == "val" => {
                ("the held-out text", held.path.as_str(), held.kind)
            }
            _ if split == "val" => (
                "the held-out text",
                self.corpus.path.as_str(),
                self.corpus.kind,
            ),
            _ => (
                "the training text",
                self.corpus.path.as_str(),
                self.corpus.kind,
            ),
        };
        let longer = match (split, kind) {
            ("val", CorpusKind::Text) => "its last tenth is held out: give a longer text",
            ("val", _) => "every 20th of its poems or lines is held out: give at least 20, the held-out ones longer than a window",
            _ => "give a longer file",
        };
        format!("{what} of {path} ({longer})")
    }

    /// One line for `train`'s start: the kind, why, and how to choose another.
    pub fn describe(&self, path: &str) -> String {
        let (what, own_split) = match self.corpus.kind {
            CorpusKind::Verse => (
                "regular verse, one poem per line",
                format!("every {VAL_EVERY}th held out"),
            ),
            CorpusKind::Lines => ("one item per line", format!("every {VAL_EVERY}th held out")),
            _ => (
                "running text, one token stream",
                "its last tenth held out".to_string(),
            ),
        };
        let split = match &self.held_out {
            Some(held_out) => format!(
                "every item trained on, measured on the held-out text of {}",
                held_out.path
            ),
            None => own_split,
        };
        let decay = match &self.decay {
            Some(decay) => format!(
                ", its decay trained on {} items of {} ({} sharing a line with the held-out text left out)",
                decay.items, decay.path, decay.left_out
            ),
            None => String::new(),
        };
        let what = format!("{what}, {split}{decay}");
        format!(
            "corpus {path}: {what} ({}); another kind: kind = \"verse\", \"lines\" or \"text\" in [data], or --corpus-kind",
            self.corpus.why
        )
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::data::held_out::lines_of;
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
        let others = OtherFiles {
            validation: Some(&validation),
            decay: None,
        };
        let corpus = RunText::load(&corpus_path, CorpusKind::Auto, others).unwrap();
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
        let alone = RunText::from(Corpus::load(Path::new(&corpus_path), CorpusKind::Auto).unwrap());
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
        let others = OtherFiles {
            validation: Some(&validation),
            decay: None,
        };
        let err = RunText::load(&corpus_path, CorpusKind::Auto, others)
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
        let others = |decay| OtherFiles {
            validation: Some(&validation),
            decay: Some(decay),
        };
        let load = |decay| RunText::load(&corpus_path, CorpusKind::Auto, others(decay));
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
        let others = OtherFiles {
            validation: Some(&validation),
            decay: Some(&validation),
        };
        let load = || RunText::load(&corpus_path, CorpusKind::Auto, others).unwrap();
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
        let others = OtherFiles {
            validation: Some(validation),
            decay: None,
        };
        let corpus = RunText::load(corpus_path, CorpusKind::Auto, others).unwrap();
        assert_eq!(corpus.held_out.as_ref().unwrap().kind, CorpusKind::Text);
        // A whole line of the held-out text (the validation file's last tenth) is one.
        let leaking = dir.path().join("leaking.txt");
        std::fs::write(&leaking, prose(100, 50) + &prose(48, 1)).unwrap();
        let err = RunText::load(leaking.to_str().unwrap(), CorpusKind::Auto, others)
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
        let others = OtherFiles {
            validation: Some(validation),
            decay: decay.to_str(),
        };
        let corpus = RunText::load(corpus_path, CorpusKind::Auto, others).unwrap();
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
        let others = OtherFiles {
            validation: None,
            decay: tail.to_str(),
        };
        let corpus = RunText::load(held.to_str().unwrap(), CorpusKind::Auto, others).unwrap();
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
        let others = OtherFiles {
            validation: validation.to_str(),
            decay: None,
        };
        let corpus = RunText::load(corpus_path.to_str().unwrap(), CorpusKind::Auto, others);
        let held = corpus.unwrap().held_out.unwrap();
        assert_eq!(held.kind, CorpusKind::Lines);
        // The same line in the corpus is one.
        std::fs::write(
            &corpus_path,
            prose(0, 40) + "We have a little poem, number 19, that rolls along\n",
        )
        .unwrap();
        let err =
            RunText::load(corpus_path.to_str().unwrap(), CorpusKind::Auto, others).unwrap_err();
        assert!(err.to_string().contains("number 19"), "{err}");
    }
}
