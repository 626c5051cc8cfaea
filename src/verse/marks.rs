//! A poem set as a poem: its sentences one under another, each character's tone (平, 仄, or 两
//! for a character of both readings) against the slot of the template the poem fits best, and
//! the rhyme positions with their characters' 平声 groups. The page draws what this gives.

use super::cilin::Cilin;
use super::score::best_fitting_template;
use super::tables::{Tables, Tone};
use super::templates::Slot;
use super::tune_meters::TuneMeters;
use super::tunes::{split_tune, CI_MARKS};
use crate::data::header::split_header;
use crate::data::poem::PUNCTUATION;
use serde::Serialize;

/// A poem's lines and the template they were marked against.
#[derive(Debug, Clone, Serialize)]
pub struct MarkedPoem {
    /// The header the poem's line begins with, inside its brackets (`李白·静夜思`, `浣溪沙`).
    pub header: Option<String>,
    /// The best-fitting template's name (e.g. 仄起首句入韵), or a ci's tune with its rhyme class;
    /// `None` for a poem of no regular form.
    pub template: Option<String>,
    pub lines: Vec<MarkedLine>,
}

/// One sentence of a poem.
#[derive(Debug, Clone, Serialize)]
pub struct MarkedLine {
    pub chars: Vec<MarkedChar>,
    /// The punctuation that ends it ("" for a last sentence without one).
    pub end: String,
}

/// One character and what the tables and the template say of it.
#[derive(Debug, Clone, Serialize)]
pub struct MarkedChar {
    pub c: char,
    /// 平, 仄 or 两 (both readings); `None` where the tone table does not know the character.
    pub tone: Option<&'static str>,
    /// What the template asks here, 平 or 仄; `None` at a free position or without a template.
    pub slot: Option<&'static str>,
    /// Whether the character's tone fits the slot; `None` where nothing is checked (no slot, or
    /// an unknown tone).
    pub fits: Option<bool>,
    /// At a rhyme position: the character's 平声 groups (for a ci, its 部 of the tune's rhyme
    /// class; empty for none).
    pub rhyme: Option<Vec<String>>,
}

/// `poem` (one poem, sentences ended by ，。？！；, after a header or not) split into its
/// sentences and marked: against the regular template it fits best, or, for a ci of its tune's
/// pattern whose tune has learned tones (`【tune】text`), against its tune's tones and rhymes.
pub fn mark_poem(poem: &str, tables: &Tables) -> MarkedPoem {
    let line = poem;
    let (header, poem) = split_header(poem).map_or((None, poem), |(h, p)| (Some(h.to_string()), p));
    let meter =
        split_tune(line).and_then(|(tune, text)| TuneMeters::shipped().for_text(tune, text));
    let template = meter
        .is_none()
        .then(|| best_fitting_template(poem, tables))
        .flatten();
    // Per sentence: its tones and whether it rhymes, and what a rhyme there may share.
    let layout: Vec<(Option<&[Slot]>, bool)> = match (meter, &template) {
        (Some(m), _) => m
            .sentences
            .iter()
            .map(|(s, _, r)| (Some(&s[..]), r.is_some()))
            .collect(),
        (None, Some(t)) => (0..t.lines.len())
            .map(|i| (Some(&t.lines[i][..]), t.rhyming_lines.contains(&i)))
            .collect(),
        (None, None) => Vec::new(),
    };
    let rhyme_of = |sentence: usize, c: char| -> Vec<String> {
        match meter.and_then(|m| m.rhyme_classes(sentence)) {
            Some(classes) => Cilin::shipped()
                .bu(c)
                .iter()
                .filter(|b| classes.contains(&b.1))
                .map(|(n, class)| format!("第{n}部{}", class.name()))
                .collect(),
            None => tables
                .rhyme_groups(c)
                .iter()
                .map(|&g| tables.group_name(g).to_string())
                .collect(),
        }
    };
    let lines = sentences(poem, meter.is_some())
        .into_iter()
        .enumerate()
        .map(|(i, (chars, end))| {
            let (slots, rhymes) = layout.get(i).copied().unwrap_or((None, false));
            let last = chars.len().saturating_sub(1);
            let chars = chars
                .iter()
                .enumerate()
                .map(|(j, &c)| {
                    let slot = slots.and_then(|s| s.get(j)).copied();
                    mark_char(
                        c,
                        slot,
                        (rhymes && j == last).then(|| rhyme_of(i, c)),
                        tables,
                    )
                })
                .collect();
            MarkedLine { chars, end }
        })
        .collect();
    MarkedPoem {
        header,
        template: match meter {
            Some(m) if m.form > 1 => Some(format!(
                "{}, form {} (又一体) ({} rhymes)",
                m.name,
                m.form,
                m.classes()
            )),
            Some(m) => Some(format!("{} ({} rhymes)", m.name, m.classes())),
            None => template.map(|t| t.name),
        },
        lines,
    }
}

/// The sentences of `poem`: each one's characters and the punctuation that ends it (for a ci,
/// its marks ，、。 too).
fn sentences(poem: &str, ci: bool) -> Vec<(Vec<char>, String)> {
    let mut all = Vec::new();
    let mut current = Vec::new();
    for c in poem.chars() {
        if PUNCTUATION.contains(&c) || (ci && CI_MARKS.contains(&c)) {
            all.push((std::mem::take(&mut current), c.to_string()));
        } else {
            current.push(c);
        }
    }
    if !current.is_empty() {
        all.push((current, String::new()));
    }
    all
}

/// `c` at a position of slot `slot` (`None`: no template), with what it may rhyme on at a rhyme
/// position.
fn mark_char(
    c: char,
    slot: Option<Slot>,
    rhyme: Option<Vec<String>>,
    tables: &Tables,
) -> MarkedChar {
    let tone = tables.tone(c);
    let asked = match slot {
        Some(Slot::Ping) => Some("平"),
        Some(Slot::Ze) => Some("仄"),
        Some(Slot::Free) | None => None,
    };
    MarkedChar {
        c,
        tone: tone.map(|t| match t {
            Tone::Ping => "平",
            Tone::Ze => "仄",
            Tone::Both => "两",
        }),
        slot: asked,
        fits: slot
            .filter(|_| asked.is_some() && tone.is_some())
            .map(|s| s.admits(tone)),
        rhyme,
    }
}
