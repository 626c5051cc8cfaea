//! The 词谱 with tones and rhymes (`data/cipu_tones.tsv`, learned by `prepare_data` beside
//! `cipu.tsv`): for each form of a tune (its commonest pattern, and its 又一体) with at least
//! [`MIN_CI`] ci, each
//! position's tone where at least [`SURE_SHARE`] of those ci agree (平 or 仄; else either), and its
//! rhyme segments: the sentence ends that rhyme together, each segment in its own 部 of the 词林正韵
//! ([`super::cilin`]) and in the tone classes (平, 上去, 入) its ci take. Most tunes keep one rhyme
//! throughout; some change it (换韵): 菩萨蛮 rhymes 仄, 平, 仄, 平 in pairs, 清平乐 four 仄 then
//! three 平; 西江月 rhymes 平 and 仄 in one 部 (平仄通叶). Two sentence ends rhyme together where
//! they share a 部 (of any class) in at least [`CO_RHYME`] of the ci; a segment is the ends linked
//! so, and its classes those at least [`CLASS_SHARE`] of its rhymes take. A ci is scored against it
//! in [`super::ci_score`].

use super::cilin::{Cilin, RhymeClass};
use super::tables::{Tables, Tone};
use super::templates::Slot;
use super::tunes::{TunePattern, Tunes, CI_MARKS};
use std::collections::HashMap;
use std::sync::OnceLock;

/// Ci of a tune's pattern needed to learn its tones.
pub const MIN_CI: usize = 20;
/// The share of a position's ci (those of known tone there) that must agree for its tone to be
/// sure.
pub const SURE_SHARE: f64 = 0.8;

/// The share of a tune's ci in which two sentence ends must share a 部 to rhyme together.
pub const CO_RHYME: f64 = 0.6;
/// The share of a segment's rhymes (those in the 部 its ci's ends share most) a tone class must
/// take to be one of the segment's.
pub const CLASS_SHARE: f64 = 0.1;

/// The marker of a rhyming sentence end in `cipu_tones.tsv`, after its mark; the number of its
/// segment follows where the tune has more than one.
const RHYME: char = '韵';
/// What joins the segments' classes in `cipu_tones.tsv`.
const CLASS_JOIN: char = '、';
/// What joins the classes of one segment there.
const CLASS_OR: char = '/';

/// One tune's tones and rhymes.
#[derive(Debug, Clone, PartialEq)]
pub struct TuneMeter {
    pub name: String,
    /// The tune's form it is of (1: the commonest; [`super::tunes::Tune::forms`]).
    pub form: usize,
    /// Ci of its pattern it was learned from.
    pub ci: usize,
    /// The tone classes of each rhyme segment, in the order of their first sentences (one segment
    /// for a tune that keeps its rhyme; none for a tune whose ends agree too seldom).
    pub segments: Vec<Vec<RhymeClass>>,
    /// Per sentence: each character's tone (free where unsure), its mark, and the segment its end
    /// rhymes in (`None`: it does not rhyme).
    pub sentences: Vec<(Vec<Slot>, char, Option<usize>)>,
}

impl TuneMeter {
    /// The sentences' pattern: lengths and marks.
    pub fn pattern(&self) -> TunePattern {
        TunePattern {
            sentences: self
                .sentences
                .iter()
                .map(|(s, m, _)| (s.len(), *m))
                .collect(),
        }
    }

    /// The rhyme classes of sentence `s`'s end, if it rhymes.
    pub fn rhyme_classes(&self, s: usize) -> Option<&[RhymeClass]> {
        self.sentences[s]
            .2
            .map(|segment| &self.segments[segment][..])
    }

    /// The segments' classes as `cipu_tones.tsv` writes them: `平`, or `上去/入、平、上去/入、平`.
    pub fn classes(&self) -> String {
        let segments: Vec<String> = self
            .segments
            .iter()
            .map(|classes| {
                let names: Vec<&str> = classes.iter().map(|c| c.name()).collect();
                names.join(&CLASS_OR.to_string())
            })
            .collect();
        segments.join(&CLASS_JOIN.to_string())
    }

    /// The tones and marks as one line of `cipu_tones.tsv`: 平, 仄 or 中 (either) per character,
    /// each sentence's mark after it, followed by 韵 where it rhymes (and its segment's number,
    /// from 1, where the tune has more than one).
    fn describe(&self) -> String {
        let mut out = String::new();
        for (slots, mark, segment) in &self.sentences {
            for slot in slots {
                out.push(match slot {
                    Slot::Ping => '平',
                    Slot::Ze => '仄',
                    Slot::Free => '中',
                });
            }
            out.push(*mark);
            match segment {
                Some(_) if self.segments.len() == 1 => out.push(RHYME),
                Some(n) => out += &format!("{RHYME}{}", n + 1),
                None => {}
            }
        }
        out
    }

    /// Parses [`TuneMeter::describe`]'s line for a tune of `segments` rhyme segments.
    fn parse_sentences(
        text: &str,
        segments: usize,
    ) -> Result<Vec<(Vec<Slot>, char, Option<usize>)>, String> {
        let mut sentences: Vec<(Vec<Slot>, char, Option<usize>)> = Vec::new();
        let mut slots = Vec::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '平' => slots.push(Slot::Ping),
                '仄' => slots.push(Slot::Ze),
                '中' => slots.push(Slot::Free),
                RHYME => {
                    let mut digits = String::new();
                    while let Some(d) = chars.next_if(char::is_ascii_digit) {
                        digits.push(d);
                    }
                    let segment = match digits.parse::<usize>() {
                        Ok(n @ 1..) if n <= segments => n - 1,
                        Err(_) if segments == 1 => 0,
                        _ => {
                            return Err(format!(
                                "{RHYME}{digits}: the tune has {segments} rhyme segments (a number from 1 follows {RHYME} where it has more than one)"
                            ))
                        }
                    };
                    match sentences.last_mut() {
                        Some(last) if slots.is_empty() => last.2 = Some(segment),
                        _ => return Err(format!("{RHYME} must follow a sentence's mark")),
                    }
                }
                m if CI_MARKS.contains(&m) && !slots.is_empty() => {
                    sentences.push((std::mem::take(&mut slots), m, None))
                }
                other => return Err(format!("{other} is not 平, 仄, 中, a mark or {RHYME}")),
            }
        }
        match slots.is_empty() && !sentences.is_empty() {
            true => Ok(sentences),
            false => Err("the tones must end with a sentence's mark".into()),
        }
    }
}

/// The tunes whose tones and rhymes were learned.
pub struct TuneMeters {
    meters: Vec<TuneMeter>,
    by_name: HashMap<(String, usize), usize>,
}

impl TuneMeters {
    /// The 词谱 with tones shipped in `data/`.
    pub fn shipped() -> &'static TuneMeters {
        static METERS: OnceLock<TuneMeters> = OnceLock::new();
        METERS.get_or_init(|| {
            TuneMeters::parse(include_str!("../../data/cipu_tones.tsv"))
                .expect("the shipped cipu_tones.tsv parses (tests/tune_meters.rs checks it)")
        })
    }

    fn from_list(meters: Vec<TuneMeter>) -> TuneMeters {
        let by_name = meters
            .iter()
            .enumerate()
            .map(|(i, m)| ((m.name.clone(), m.form), i))
            .collect();
        TuneMeters { meters, by_name }
    }

    /// Every meter: the tunes most ci first, each tune's forms in order.
    pub fn all(&self) -> &[TuneMeter] {
        &self.meters
    }

    /// The meters of the tunes' commonest forms, most ci first.
    pub fn commonest(&self) -> impl Iterator<Item = &TuneMeter> {
        self.meters.iter().filter(|m| m.form == 1)
    }

    /// The meter of the commonest form of the tune named `name`, if it was learned.
    pub fn get(&self, name: &str) -> Option<&TuneMeter> {
        self.get_form(name, 1)
    }

    /// The meter of form `form` of the tune named `name`, if it was learned.
    pub fn get_form(&self, name: &str, form: usize) -> Option<&TuneMeter> {
        let key = (name.to_string(), form);
        self.by_name.get(&key).map(|&i| &self.meters[i])
    }

    /// The meter of the form of the tune `name` that `text` (a ci without its header) has.
    pub fn for_text<'a>(&'a self, name: &'a str, text: &str) -> Option<&'a TuneMeter> {
        let pattern = TunePattern::of(text)?;
        self.forms_of(name).find(|m| m.pattern() == pattern)
    }

    /// The meters of the tune `name`'s forms, in order.
    pub fn forms_of<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a TuneMeter> {
        self.meters.iter().filter(move |m| m.name == name)
    }

    /// The meter of form `form` of the tune named `name`, or an error that says which have one.
    pub fn meter_of(&self, name: &str, form: usize) -> Result<&TuneMeter, String> {
        if let Some(meter) = self.get_form(name, form) {
            return Ok(meter);
        }
        let learned: Vec<String> = self.forms_of(name).map(|m| m.form.to_string()).collect();
        if form > 1 && !learned.is_empty() {
            return Err(format!(
                "the 词谱 has no tones for form {form} of {name} (it learns them for forms with at least {MIN_CI} ci; {name} has them for form {}): leave out --meter, or choose one of those",
                learned.join(", ")
            ));
        }
        let names: Vec<&str> = self.commonest().take(8).map(|m| m.name.as_str()).collect();
        Err(format!(
            "the 词谱 has no tones for the tune {name} (it learns them for tunes with at least {MIN_CI} ci of one pattern, {} tunes): leave out --meter, or choose one of them, e.g. {}",
            self.commonest().count(),
            names.join(", ")
        ))
    }

    /// Learns the meters from the ci `(tune, text)` of `tunes`' tunes, with the tones of `tables`
    /// and the rhymes of `cilin`.
    pub fn learn<'a>(
        ci: impl IntoIterator<Item = (&'a str, &'a str)>,
        tunes: &Tunes,
        (tables, cilin): (&Tables, &Cilin),
    ) -> TuneMeters {
        let mut by_form: HashMap<(&str, usize), Vec<Vec<Vec<char>>>> = HashMap::new();
        for (tune, text) in ci {
            let Some(form) = tunes.get(tune).ok().and_then(|t| t.form_of(text)) else {
                continue;
            };
            by_form
                .entry((tune, form))
                .or_default()
                .push(sentences(text));
        }
        let meters = tunes
            .all()
            .iter()
            .flat_map(|tune| tune.forms().map(move |form| (tune, form)))
            .filter_map(|(tune, (form, pattern, _))| {
                let ci = by_form.get(&(tune.name.as_str(), form))?;
                (ci.len() >= MIN_CI).then(|| TuneMeter {
                    form,
                    ..learn_one(&tune.name, pattern, ci, (tables, cilin))
                })
            })
            .collect();
        TuneMeters::from_list(meters)
    }

    /// The text of `cipu_tones.tsv`: a comment, then `tune<TAB>form<TAB>ci<TAB>classes<TAB>tones`
    /// per form of a tune.
    pub fn to_tsv(&self) -> String {
        let mut out = format!(
            "# tune\tform (1: the commonest)\tci of its pattern\trhyme class of each segment\ttones: 平, 仄 or 中 (either: under {:.0} % agree) per character, each sentence's mark, {RHYME} after a rhyming one (with its segment's number where there are more than one: ends sharing a 部 in at least {:.0} % of the ci rhyme together)\n",
            SURE_SHARE * 100.0,
            CO_RHYME * 100.0
        );
        for m in &self.meters {
            out.push_str(&format!(
                "{}\t{}\t{}\t{}\t{}\n",
                m.name,
                m.form,
                m.ci,
                m.classes(),
                m.describe()
            ));
        }
        out
    }

    /// The meters from the text of `cipu_tones.tsv`.
    pub fn parse(text: &str) -> Result<TuneMeters, String> {
        let mut meters = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let what = |e: String| format!("cipu_tones line {}: {e}", i + 1);
            let fields: Vec<&str> = line.split('\t').collect();
            let [name, form, ci, class, tones] = fields[..] else {
                return Err(what("not 5 tab-separated fields".into()));
            };
            let segments = match class {
                "" => Vec::new(),
                _ => class
                    .split(CLASS_JOIN)
                    .map(|segment| {
                        segment
                            .split(CLASS_OR)
                            .map(|c| {
                                RhymeClass::parse(c).ok_or_else(|| {
                                    what(format!(
                                        "{c} is not 平, 上去 or 入 (a segment's classes are joined by {CLASS_OR}, the segments by {CLASS_JOIN})"
                                    ))
                                })
                            })
                            .collect::<Result<Vec<_>, String>>()
                    })
                    .collect::<Result<Vec<_>, String>>()?,
            };
            meters.push(TuneMeter {
                name: name.to_string(),
                form: form
                    .parse()
                    .ok()
                    .filter(|&f| f >= 1)
                    .ok_or_else(|| what(format!("{form} is not a form's number (from 1)")))?,
                ci: ci
                    .parse()
                    .map_err(|_| what(format!("{ci} is not a count")))?,
                sentences: TuneMeter::parse_sentences(tones, segments.len()).map_err(what)?,
                segments,
            });
        }
        Ok(TuneMeters::from_list(meters))
    }
}

/// The characters of each sentence of `text` (a ci without its header), marks left out.
pub fn sentences(text: &str) -> Vec<Vec<char>> {
    text.split(|c| CI_MARKS.contains(&c))
        .filter(|s| !s.is_empty())
        .map(|s| s.chars().collect())
        .collect()
}

/// The 部 (its number) that the most of `finals` share in one of `classes` (any class where
/// `None`), and how many share it (the smallest number on a tie; `None` when none has a 部 there).
pub(super) fn shared_number(
    finals: &[char],
    classes: Option<&[RhymeClass]>,
    cilin: &Cilin,
) -> Option<(u8, usize)> {
    let mut counts: HashMap<u8, usize> = HashMap::new();
    for &c in finals {
        // A character of one number in two classes counts once.
        for n in cilin.numbers_in(c, classes.unwrap_or(&RhymeClass::ALL)) {
            *counts.entry(n).or_default() += 1;
        }
    }
    counts
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
}

/// The meter of one tune from its `ci` (each its sentences' characters, of `pattern`).
fn learn_one(
    name: &str,
    pattern: &TunePattern,
    ci: &[Vec<Vec<char>>],
    (tables, cilin): (&Tables, &Cilin),
) -> TuneMeter {
    // finals[c][s]: the character that ends sentence s of ci c.
    let finals: Vec<Vec<char>> = ci
        .iter()
        .map(|s| {
            s.iter()
                .map(|s| *s.last().expect("sentences are not empty"))
                .collect()
        })
        .collect();
    let (of_sentence, members) = rhyme_segments(&finals, cilin);
    let segments = members
        .iter()
        .map(|ends| segment_classes(ends, &finals, cilin))
        .collect();
    let sentences = pattern
        .sentences
        .iter()
        .enumerate()
        .map(|(s, &(length, mark))| {
            let slots = (0..length)
                .map(|col| sure_tone(ci.iter().map(|c| c[s][col]), tables))
                .collect();
            (slots, mark, of_sentence[s])
        })
        .collect();
    TuneMeter {
        name: name.to_string(),
        form: 1,
        ci: ci.len(),
        segments,
        sentences,
    }
}

/// The rhyme segments of ci whose sentence ends are `finals` (one row per ci): each sentence's
/// segment (`None`: its end rhymes with no other), and each segment's sentences. Two ends rhyme
/// together where they share a 部 (by its number: 平仄通叶 is one rhyme) in at least
/// [`CO_RHYME`] of the ci; a segment is the ends so linked, numbered in the order of their first
/// sentences.
fn rhyme_segments(finals: &[Vec<char>], cilin: &Cilin) -> (Vec<Option<usize>>, Vec<Vec<usize>>) {
    let n = finals.first().map_or(0, Vec::len);
    let share = |a: char, b: char| {
        let numbers = |c: char| cilin.numbers_in(c, &RhymeClass::ALL);
        numbers(a).iter().any(|n| numbers(b).contains(n))
    };
    let together = |i: usize, j: usize| {
        let shared = finals.iter().filter(|f| share(f[i], f[j])).count();
        shared as f64 >= CO_RHYME * finals.len() as f64
    };
    // Each sentence's link to the first earlier one it rhymes with makes a forest; its roots
    // (the first sentences of the segments) are met in order.
    let mut root: Vec<usize> = (0..n).collect();
    for j in 0..n {
        for i in 0..j {
            if together(i, j) {
                let (a, b) = (find(&root, i), find(&root, j));
                root[a.max(b)] = a.min(b);
            }
        }
    }
    let mut of_sentence = vec![None; n];
    let mut members: Vec<Vec<usize>> = Vec::new();
    for s in 0..n {
        let r = find(&root, s);
        let alone = (0..n).all(|t| t == s || find(&root, t) != r);
        if alone {
            continue;
        }
        let segment = match of_sentence[r] {
            Some(segment) => segment,
            None => {
                members.push(Vec::new());
                members.len() - 1
            }
        };
        of_sentence[s] = Some(segment);
        members[segment].push(s);
    }
    (of_sentence, members)
}

/// The root of `i` in the forest `root`.
fn find(root: &[usize], mut i: usize) -> usize {
    while root[i] != i {
        i = root[i];
    }
    i
}

/// The classes the segment of sentences `ends` rhymes in: per ci, the class of each end in the 部
/// most of its ends share (where it has one); those of at least [`CLASS_SHARE`] of them, in [`RhymeClass::ALL`]'s
/// order (平 where none has a 部).
fn segment_classes(ends: &[usize], finals: &[Vec<char>], cilin: &Cilin) -> Vec<RhymeClass> {
    let mut classes: HashMap<RhymeClass, usize> = HashMap::new();
    for f in finals {
        let chars: Vec<char> = ends.iter().map(|&s| f[s]).collect();
        let Some((number, _)) = shared_number(&chars, None, cilin) else {
            continue;
        };
        for c in chars {
            // An end read in two classes of the 部 (a character of two tones) says neither.
            let mut of_number = cilin.bu(c).iter().filter(|b| b.0 == number);
            if let (Some(bu), None) = (of_number.next(), of_number.next()) {
                *classes.entry(bu.1).or_default() += 1;
            }
        }
    }
    let rhymes: usize = classes.values().sum();
    let kept: Vec<RhymeClass> = RhymeClass::ALL
        .into_iter()
        .filter(|c| {
            classes
                .get(c)
                .is_some_and(|&n| n as f64 >= CLASS_SHARE * rhymes as f64)
        })
        .collect();
    match kept.is_empty() {
        true => vec![RhymeClass::Ping],
        false => kept,
    }
}

/// The tone most of `chars` (one position of every ci) agree on, if at least [`SURE_SHARE`] of
/// those of one known tone do; else free.
fn sure_tone(chars: impl Iterator<Item = char>, tables: &Tables) -> Slot {
    let (mut ping, mut ze) = (0usize, 0usize);
    for c in chars {
        match tables.tone(c) {
            Some(Tone::Ping) => ping += 1,
            Some(Tone::Ze) => ze += 1,
            _ => {}
        }
    }
    let known = (ping + ze).max(1) as f64;
    if ping as f64 >= SURE_SHARE * known && ping > 0 {
        Slot::Ping
    } else if ze as f64 >= SURE_SHARE * known && ze > 0 {
        Slot::Ze
    } else {
        Slot::Free
    }
}
