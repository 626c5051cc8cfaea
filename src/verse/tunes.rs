//! Song ci (宋词) and their tunes (词牌): a ci is written to a tune, and the tune fixes its
//! sentences' lengths and where they pause (，、) or stop (。). The 词谱 here is learned from the
//! corpus: each tune's most common pattern among its ci, and its other forms (又一体) that at
//! least [`FORM_SHARE`] of its ci (and [`MIN_FORM_CI`]) take (`data/cipu.tsv`, written by
//! `prepare_data` beside `data/ci.txt`, compiled into the binary). Form 1 is the commonest.
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

/// The share of a tune's ci a pattern other than its commonest must have to be one of its forms
/// (又一体).
pub const FORM_SHARE: f64 = 0.1;
/// The ci a pattern other than the commonest must have to be a form.
pub const MIN_FORM_CI: usize = 5;

/// One tune of the 词谱.
#[derive(Debug, Clone)]
pub struct Tune {
    pub name: String,
    /// The corpus's ci to this tune.
    pub ci: usize,
    /// Of those, the ones of [`Tune::pattern`].
    pub fitting: usize,
    /// The most common pattern of its ci: its form 1.
    pub pattern: TunePattern,
    /// Its other forms (又一体), forms 2, 3, …: each pattern with its ci, most ci first.
    pub other_forms: Vec<(TunePattern, usize)>,
}

impl Tune {
    /// Its forms: (number from 1, pattern, ci of it), the commonest first.
    pub fn forms(&self) -> impl Iterator<Item = (usize, &TunePattern, usize)> {
        let first = std::iter::once((&self.pattern, self.fitting));
        let others = self.other_forms.iter().map(|(p, n)| (p, *n));
        first
            .chain(others)
            .enumerate()
            .map(|(i, (p, n))| (i + 1, p, n))
    }

    /// Its form `n` (from 1), or an error that lists its forms.
    pub fn form(&self, n: usize) -> Result<&TunePattern, String> {
        match self.forms().find(|f| f.0 == n) {
            Some((_, pattern, _)) => Ok(pattern),
            None => Err(format!(
                "{n} is not a form of {}: {}",
                self.name,
                self.forms_in_words()
            )),
        }
    }

    /// The form asked for by `asked`: its number, or its pattern as the 词谱 writes it (with or
    /// without its `×ci`); empty: the commonest, 1. An error lists the forms.
    pub fn choose_form(&self, asked: &str) -> Result<usize, String> {
        let asked = asked.trim();
        if asked.is_empty() {
            return Ok(1);
        }
        let unsigned = asked.trim_start_matches(['+', '-']);
        let found = if !unsigned.is_empty() && unsigned.chars().all(|c| c.is_ascii_digit()) {
            let forms = 1..=self.other_forms.len() + 1;
            asked.parse::<usize>().ok().filter(|n| forms.contains(n))
        } else {
            let pattern = match asked.split_once(FORM_COUNT) {
                None => asked,
                Some((pattern, n)) if !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()) => {
                    pattern
                }
                Some(_) => "",
            };
            let Ok(pattern) = pattern.parse::<TunePattern>() else {
                return Err(format!(
                    "the form {} is neither a number nor a pattern (each sentence's length and mark, e.g. 7。7。7。7，7。7。): {}",
                    shown(asked),
                    self.forms_in_words()
                ));
            };
            self.forms().find(|f| *f.1 == pattern).map(|f| f.0)
        };
        found.ok_or_else(|| {
            let (asked, name) = (shown(asked), &self.name);
            format!("{asked} is not a form of {name}: {}", self.forms_in_words())
        })
    }

    /// Its forms, and what to give, in words.
    fn forms_in_words(&self) -> String {
        match self.other_forms.len() {
            0 => format!(
                "{} has one form in the 词谱 (data/cipu.tsv), {} ({} ci): give 1 or leave the form out",
                self.name, self.pattern, self.fitting
            ),
            n => format!(
                "{} has {} forms in the 词谱 (data/cipu.tsv): {}; give a number from 1 to {} or a form's pattern",
                self.name,
                n + 1,
                self.describe_forms(),
                n + 1
            ),
        }
    }

    /// The number of the form `text` (a ci without its header) has, if it has one.
    pub fn form_of(&self, text: &str) -> Option<usize> {
        let found = TunePattern::of(text)?;
        self.forms().find(|f| *f.1 == found).map(|f| f.0)
    }

    /// Its forms in words: `1: 5，5。6，5。… (227 ci), 2: …`.
    pub fn describe_forms(&self) -> String {
        let forms: Vec<String> = self
            .forms()
            .map(|(n, pattern, ci)| format!("{n}: {pattern} ({ci} ci)"))
            .collect();
        forms.join(", ")
    }
}

/// The 词谱: every tune of the corpus, most ci first.
pub struct Tunes {
    tunes: Vec<Tune>,
    by_name: HashMap<String, usize>,
}

/// `text` as an error shows it: at most 24 characters, invisible ones named.
fn shown(text: &str) -> String {
    let short: String = match text.chars().count() > 24 {
        true => text.chars().take(24).chain(['…']).collect(),
        false => text.to_string(),
    };
    crate::data::error::printable(&short)
}

/// What joins a form's pattern and its count of ci in `cipu.tsv`.
const FORM_COUNT: char = '×';

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
            .filter_map(|(name, mut patterns)| {
                let ci: usize = patterns.iter().map(|(_, n)| n).sum();
                // Most ci first; a stable sort keeps equals in the order first met.
                patterns.sort_by(|a, b| b.1.cmp(&a.1));
                let mut patterns = patterns.into_iter();
                let (pattern, fitting) = patterns.next()?;
                let is_form = |n: usize| n >= MIN_FORM_CI && n as f64 >= FORM_SHARE * ci as f64;
                Some(Tune {
                    name: name.to_string(),
                    ci,
                    fitting,
                    pattern,
                    other_forms: patterns.take_while(|(_, n)| is_form(*n)).collect(),
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

    /// The table's text: a comment line, then one tune per line: name, ci, fitting, pattern,
    /// and its other forms (又一体), each `pattern×ci`, space-separated.
    pub fn to_tsv(&self) -> String {
        let mut text = format!(
            "# tune\tci\tci of the pattern\tpattern\tother forms (又一体: at least {:.0} % of the tune's ci and {MIN_FORM_CI}), each pattern×ci\n",
            FORM_SHARE * 100.0
        );
        for t in &self.tunes {
            let others: Vec<String> = t
                .other_forms
                .iter()
                .map(|(p, n)| format!("{p}{FORM_COUNT}{n}"))
                .collect();
            text += &format!(
                "{}\t{}\t{}\t{}\t{}\n",
                t.name,
                t.ci,
                t.fitting,
                t.pattern,
                others.join(" ")
            );
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
            let &[name, ci, fitting, pattern, others] = fields.as_slice() else {
                return Err(format!(
                    "cipu line {}: expected 5 tab-separated fields",
                    i + 1
                ));
            };
            let number = |s: &str| {
                s.parse()
                    .map_err(|_| format!("cipu line {}: `{s}` is not a count", i + 1))
            };
            let pattern_of = |s: &str| {
                s.parse::<TunePattern>()
                    .map_err(|e| format!("cipu line {}: {e}", i + 1))
            };
            let other_forms = others
                .split_whitespace()
                .map(|form| match form.split_once(FORM_COUNT) {
                    Some((pattern, n)) => Ok((pattern_of(pattern)?, number(n)?)),
                    None => Err(format!(
                        "cipu line {}: `{form}` is not a pattern{FORM_COUNT}ci",
                        i + 1
                    )),
                })
                .collect::<Result<_, String>>()?;
            tunes.push(Tune {
                name: name.to_string(),
                ci: number(ci)?,
                fitting: number(fitting)?,
                pattern: pattern_of(pattern)?,
                other_forms,
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
        if name.trim().is_empty() {
            return Err("the tune's name is empty: give one, e.g. 水调歌头".into());
        }
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
