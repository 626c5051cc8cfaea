//! The 词谱 with tones and rhymes (`data/cipu_tones.tsv`, learned by `prepare_data` beside
//! `cipu.tsv`): for each tune with at least [`MIN_CI`] ci of its most common pattern, each
//! position's tone where at least [`SURE_SHARE`] of those ci agree (平 or 仄; else either), the
//! sentence ends where most of them rhyme, and the tone class of their rhyme (平, 上去 or 入, by the
//! 词林正韵: [`super::cilin`]). A ci is scored against it in [`super::ci_score`].

use super::cilin::{Bu, Cilin, RhymeClass};
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

/// The marker of a rhyming sentence end in `cipu_tones.tsv`, after its mark.
const RHYME: char = '韵';

/// One tune's tones and rhymes.
#[derive(Debug, Clone, PartialEq)]
pub struct TuneMeter {
    pub name: String,
    /// Ci of its pattern it was learned from.
    pub ci: usize,
    /// The tone class its rhymes take.
    pub class: RhymeClass,
    /// Per sentence: each character's tone (free where unsure), its mark, and whether its end
    /// rhymes.
    pub sentences: Vec<(Vec<Slot>, char, bool)>,
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

    /// The tones and marks as one line of `cipu_tones.tsv`: 平, 仄 or 中 (either) per character,
    /// each sentence's mark after it, followed by 韵 where it rhymes.
    fn describe(&self) -> String {
        let mut out = String::new();
        for (slots, mark, rhymes) in &self.sentences {
            for slot in slots {
                out.push(match slot {
                    Slot::Ping => '平',
                    Slot::Ze => '仄',
                    Slot::Free => '中',
                });
            }
            out.push(*mark);
            if *rhymes {
                out.push(RHYME);
            }
        }
        out
    }

    /// Parses [`TuneMeter::describe`]'s line.
    fn parse_sentences(text: &str) -> Result<Vec<(Vec<Slot>, char, bool)>, String> {
        let mut sentences: Vec<(Vec<Slot>, char, bool)> = Vec::new();
        let mut slots = Vec::new();
        for c in text.chars() {
            match c {
                '平' => slots.push(Slot::Ping),
                '仄' => slots.push(Slot::Ze),
                '中' => slots.push(Slot::Free),
                RHYME => match sentences.last_mut() {
                    Some(last) if slots.is_empty() => last.2 = true,
                    _ => return Err(format!("{RHYME} must follow a sentence's mark")),
                },
                m if CI_MARKS.contains(&m) && !slots.is_empty() => {
                    sentences.push((std::mem::take(&mut slots), m, false))
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
    by_name: HashMap<String, usize>,
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
            .map(|(i, m)| (m.name.clone(), i))
            .collect();
        TuneMeters { meters, by_name }
    }

    /// Every tune's meter, most ci first.
    pub fn all(&self) -> &[TuneMeter] {
        &self.meters
    }

    /// The meter of the tune named `name`, if it was learned.
    pub fn get(&self, name: &str) -> Option<&TuneMeter> {
        self.by_name.get(name).map(|&i| &self.meters[i])
    }

    /// The meter of the tune named `name`, or an error that says which tunes have one.
    pub fn meter_of(&self, name: &str) -> Result<&TuneMeter, String> {
        self.get(name).ok_or_else(|| {
            let names: Vec<&str> = self.meters.iter().take(8).map(|m| m.name.as_str()).collect();
            format!(
                "the 词谱 has no tones for the tune {name} (it learns them for tunes with at least {MIN_CI} ci of one pattern, {} tunes): leave out --meter, or choose one of them, e.g. {}",
                self.meters.len(),
                names.join(", ")
            )
        })
    }

    /// Learns the meters from the ci `(tune, text)` of `tunes`' tunes, with the tones of `tables`
    /// and the rhymes of `cilin`.
    pub fn learn<'a>(
        ci: impl IntoIterator<Item = (&'a str, &'a str)>,
        tunes: &Tunes,
        (tables, cilin): (&Tables, &Cilin),
    ) -> TuneMeters {
        let mut by_tune: HashMap<&str, Vec<Vec<Vec<char>>>> = HashMap::new();
        for (tune, text) in ci {
            let Ok(known) = tunes.get(tune) else { continue };
            if TunePattern::of(text).as_ref() == Some(&known.pattern) {
                by_tune.entry(tune).or_default().push(sentences(text));
            }
        }
        let meters = tunes
            .all()
            .iter()
            .filter_map(|tune| {
                let ci = by_tune.get(tune.name.as_str())?;
                (ci.len() >= MIN_CI)
                    .then(|| learn_one(&tune.name, &tune.pattern, ci, (tables, cilin)))
            })
            .collect();
        TuneMeters::from_list(meters)
    }

    /// The text of `cipu_tones.tsv`: a comment, then `tune<TAB>ci<TAB>class<TAB>tones` per tune.
    pub fn to_tsv(&self) -> String {
        let mut out = format!(
            "# tune\tci of its pattern\trhyme class\ttones: 平, 仄 or 中 (either: under {:.0} % agree) per character, each sentence's mark, {RHYME} after a rhyming one\n",
            SURE_SHARE * 100.0
        );
        for m in &self.meters {
            out.push_str(&format!(
                "{}\t{}\t{}\t{}\n",
                m.name,
                m.ci,
                m.class.name(),
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
            let [name, ci, class, tones] = fields[..] else {
                return Err(what("not 4 tab-separated fields".into()));
            };
            meters.push(TuneMeter {
                name: name.to_string(),
                ci: ci
                    .parse()
                    .map_err(|_| what(format!("{ci} is not a count")))?,
                class: RhymeClass::parse(class)
                    .ok_or_else(|| what(format!("{class} is not 平, 上去 or 入")))?,
                sentences: TuneMeter::parse_sentences(tones).map_err(what)?,
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

/// The 部 of `class` that the most of `finals` share, and how many share it (the smallest
/// number on a tie; `None` when none has a 部 of the class).
pub(super) fn shared_bu(
    finals: &[char],
    class: Option<RhymeClass>,
    cilin: &Cilin,
) -> Option<(Bu, usize)> {
    let mut counts: HashMap<Bu, usize> = HashMap::new();
    for &c in finals {
        for &bu in cilin
            .bu(c)
            .iter()
            .filter(|b| class.is_none_or(|k| b.1 == k))
        {
            *counts.entry(bu).or_default() += 1;
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
    // Each ci's own rhyme: the 部 most of its sentence ends share.
    let finals: Vec<Vec<char>> = ci
        .iter()
        .map(|s| {
            s.iter()
                .map(|s| *s.last().expect("sentences are not empty"))
                .collect()
        })
        .collect();
    let rhymes: Vec<Option<Bu>> = finals
        .iter()
        .map(|f| shared_bu(f, None, cilin).map(|b| b.0))
        .collect();
    let mut classes: HashMap<RhymeClass, usize> = HashMap::new();
    rhymes
        .iter()
        .flatten()
        .for_each(|b| *classes.entry(b.1).or_default() += 1);
    let class = classes
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
        .map_or(RhymeClass::Ping, |c| c.0);
    let sentences = pattern
        .sentences
        .iter()
        .enumerate()
        .map(|(s, &(length, mark))| {
            let slots = (0..length)
                .map(|col| sure_tone(ci.iter().map(|c| c[s][col]), tables))
                .collect();
            let rhyming = finals
                .iter()
                .zip(&rhymes)
                .filter(|(f, bu)| bu.is_some_and(|bu| cilin.bu(f[s]).contains(&bu)))
                .count();
            (slots, mark, 2 * rhyming > ci.len())
        })
        .collect();
    TuneMeter {
        name: name.to_string(),
        ci: ci.len(),
        class,
        sentences,
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
