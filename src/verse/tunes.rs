//! Song ci (宋词) and their tunes (词牌): a ci is written to a tune, and the tune fixes its
//! sentences' lengths and where they pause (，、) or stop (。). The 词谱 here is learned from the
//! corpus: each tune's most common pattern among its ci (`data/cipu.tsv`, written by
//! `prepare_data` beside `data/ci.txt`, compiled into the binary).
//!
//! A ci of the corpus is one line, its tune in brackets before it: `【浣溪沙】一曲新词酒一杯。…`.

use crate::data::header::{header, nearest_names, split_header, SEPARATOR};
use std::collections::HashMap;
use std::fmt;
use std::sync::OnceLock;

/// The marks that end a ci's sentences: a pause, a short pause (before a 领字's phrase), a stop.
pub const CI_MARKS: [char; 3] = ['，', '、', '。'];

/// The line's opening that names `tune`: `【tune】`.
pub fn tune_header(tune: &str) -> String {
    header(&[tune])
}

/// (tune, text) of a line that begins with a tune's header, e.g. `【浣溪沙】一曲新词酒一杯。…`
/// (a header of one field: a titled poem's `【poet·title】` is not a tune).
pub fn split_tune(line: &str) -> Option<(&str, &str)> {
    split_header(line).filter(|(tune, _)| !tune.contains(SEPARATOR))
}

/// A ci's shape: each sentence's length in characters and the mark that ends it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TunePattern {
    /// (characters, mark) per sentence, in order; the last mark is 。.
    pub sentences: Vec<(usize, char)>,
}

impl TunePattern {
    /// The pattern of `text` (a ci without its header): `None` unless it is sentences of at least
    /// one character, each ended by one of [`CI_MARKS`], the last by 。.
    pub fn of(text: &str) -> Option<TunePattern> {
        let mut sentences = Vec::new();
        let mut length = 0;
        for c in text.chars() {
            match CI_MARKS.contains(&c) {
                true if length == 0 => return None,
                true => {
                    sentences.push((length, c));
                    length = 0;
                }
                false => length += 1,
            }
        }
        let ends_with_stop = sentences.last().is_some_and(|&(_, m)| m == '。');
        (length == 0 && ends_with_stop).then_some(TunePattern { sentences })
    }

    /// Characters of a ci of this pattern, marks included.
    pub fn len(&self) -> usize {
        self.sentences.iter().map(|(n, _)| n + 1).sum()
    }

    /// Whether the pattern has no sentence (never, for a parsed one).
    pub fn is_empty(&self) -> bool {
        self.sentences.is_empty()
    }

    /// Where the first difference of `text` from the pattern is, in words, or `None` if it fits.
    pub fn misfit(&self, text: &str) -> Option<String> {
        let Some(found) = TunePattern::of(text) else {
            return Some("it is not sentences ended by ，、。 (the last by 。)".into());
        };
        let first_difference = self
            .sentences
            .iter()
            .zip(&found.sentences)
            .position(|(want, got)| want != got);
        match first_difference {
            Some(i) => {
                let ((n, m), (fn_, fm)) = (self.sentences[i], found.sentences[i]);
                Some(format!(
                    "sentence {} is {fn_} characters and {fm} where the tune has {n} and {m}",
                    i + 1
                ))
            }
            None if found.sentences.len() != self.sentences.len() => Some(format!(
                "it has {} sentences where the tune has {}",
                found.sentences.len(),
                self.sentences.len()
            )),
            None => None,
        }
    }
}

impl fmt::Display for TunePattern {
    /// `7。7。7。7，7。7。`: each sentence's length, then its mark.
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        for (n, mark) in &self.sentences {
            write!(f, "{n}{mark}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for TunePattern {
    type Err = String;
    /// The inverse of `Display`: `7。7。7。7，7。7。`.
    fn from_str(s: &str) -> Result<Self, String> {
        let mut sentences = Vec::new();
        let mut digits = String::new();
        for c in s.chars() {
            match c {
                '0'..='9' => digits.push(c),
                _ if CI_MARKS.contains(&c) => {
                    let n = digits.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                        format!("`{s}`: each mark must follow a length of 1 or more")
                    })?;
                    sentences.push((n, c));
                    digits.clear();
                }
                _ => return Err(format!("`{s}`: expected lengths and the marks ，、。")),
            }
        }
        match digits.is_empty() && sentences.last().is_some_and(|&(_, m)| m == '。') {
            true => Ok(TunePattern { sentences }),
            false => Err(format!("`{s}`: a pattern ends with a length and 。")),
        }
    }
}

/// One tune of the 词谱.
#[derive(Debug, Clone)]
pub struct Tune {
    pub name: String,
    /// The corpus's ci to this tune.
    pub ci: usize,
    /// Of those, the ones of [`Tune::pattern`].
    pub fitting: usize,
    /// The most common pattern of its ci.
    pub pattern: TunePattern,
}

/// The 词谱: every tune of the corpus, most ci first.
pub struct Tunes {
    tunes: Vec<Tune>,
    by_name: HashMap<String, usize>,
}

/// The tune name of the corpus's ci whose tune is lost (失调名): not a tune.
pub const TUNE_LOST: &str = "失调名";

impl Tunes {
    /// The 词谱 shipped in `data/cipu.tsv`.
    pub fn shipped() -> &'static Tunes {
        static TUNES: OnceLock<Tunes> = OnceLock::new();
        TUNES.get_or_init(|| {
            Tunes::parse(include_str!("../../data/cipu.tsv"))
                .expect("the shipped 词谱 parses (tests/tunes.rs checks it)")
        })
    }

    /// Learns the 词谱 from `ci` (tune, text): each tune's most common pattern (the first met of
    /// equally common ones), tunes ordered by their number of ci, then by name; ci whose text is
    /// not a pattern and the lost tune ([`TUNE_LOST`]) are left out.
    pub fn learn<'a>(ci: impl IntoIterator<Item = (&'a str, &'a str)>) -> Tunes {
        // For each tune: its patterns in the order first met, with their counts.
        let mut counts: HashMap<&str, Vec<(TunePattern, usize)>> = HashMap::new();
        for (tune, text) in ci {
            let Some(pattern) = TunePattern::of(text).filter(|_| tune != TUNE_LOST) else {
                continue;
            };
            let patterns = counts.entry(tune).or_default();
            match patterns.iter_mut().find(|(p, _)| *p == pattern) {
                Some((_, n)) => *n += 1,
                None => patterns.push((pattern, 1)),
            }
        }
        let mut tunes: Vec<Tune> = counts
            .into_iter()
            .filter_map(|(name, patterns)| {
                let ci = patterns.iter().map(|(_, n)| n).sum();
                // max_by_key keeps the last of equals: reversed, the first met.
                let (pattern, fitting) = patterns.into_iter().rev().max_by_key(|(_, n)| *n)?;
                Some(Tune {
                    name: name.to_string(),
                    ci,
                    fitting,
                    pattern,
                })
            })
            .collect();
        tunes.sort_by(|a, b| b.ci.cmp(&a.ci).then_with(|| a.name.cmp(&b.name)));
        Tunes::from_list(tunes)
    }

    fn from_list(tunes: Vec<Tune>) -> Tunes {
        let by_name = tunes
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Tunes { tunes, by_name }
    }

    /// The table's text: a comment line, then one tune per line: name, ci, fitting, pattern.
    pub fn to_tsv(&self) -> String {
        let mut text = String::from("# tune\tci\tci of the pattern\tpattern\n");
        for t in &self.tunes {
            text += &format!("{}\t{}\t{}\t{}\n", t.name, t.ci, t.fitting, t.pattern);
        }
        text
    }

    /// The inverse of [`Tunes::to_tsv`].
    pub fn parse(text: &str) -> Result<Tunes, String> {
        let mut tunes = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            let fields: Vec<&str> = line.split('\t').collect();
            let &[name, ci, fitting, pattern] = fields.as_slice() else {
                return Err(format!(
                    "cipu line {}: expected 4 tab-separated fields",
                    i + 1
                ));
            };
            let number = |s: &str| {
                s.parse()
                    .map_err(|_| format!("cipu line {}: `{s}` is not a count", i + 1))
            };
            tunes.push(Tune {
                name: name.to_string(),
                ci: number(ci)?,
                fitting: number(fitting)?,
                pattern: pattern
                    .parse()
                    .map_err(|e| format!("cipu line {}: {e}", i + 1))?,
            });
        }
        Ok(Tunes::from_list(tunes))
    }

    /// Every tune, most ci first.
    pub fn all(&self) -> &[Tune] {
        &self.tunes
    }

    /// The tune named `name`, or an error that names the nearest tunes.
    pub fn get(&self, name: &str) -> Result<&Tune, String> {
        match self.by_name.get(name) {
            Some(&i) => Ok(&self.tunes[i]),
            None => Err(format!(
                "no tune {} in the 词谱 (data/cipu.tsv, {} tunes); the nearest: {}",
                crate::data::error::printable(name),
                self.tunes.len(),
                self.nearest(name, 5).join(", ")
            )),
        }
    }

    /// The `n` tune names nearest to `name`: fewest character edits first (a name that holds
    /// `name`, such as an alias pair 望江南・忆江南 for 忆江南, counts as one edit), then most ci.
    pub fn nearest(&self, name: &str, n: usize) -> Vec<&str> {
        nearest_names(self.tunes.iter().map(|t| t.name.as_str()), name, n)
    }
}
