//! Scores a poem as regulated verse: its form, its best-fitting template, the share of its tones
//! that fit, whether its rhyme positions share a 平声 group, and how much of it is copied from
//! the training text.

use super::tables::Tables;
use super::templates::{templates, Slot, Template};
use crate::data::header::without_header;
use crate::data::poem::{is_cjk_ideograph, regular_form, Form, PUNCTUATION};
use serde::Serialize;
use std::collections::HashSet;

/// How one poem scores.
#[derive(Debug, Clone, Serialize)]
pub struct VerseScore {
    /// The regular form (wujue, qijue, wulv, qilv), if the poem has one's shape.
    pub form: Option<&'static str>,
    /// The best-fitting template (most tones fitting, then rhyme), for a regular form.
    pub template: Option<String>,
    /// Tonal positions of that template checked: not free, and the character's tone known.
    pub tones_checked: usize,
    /// Of those, the positions whose character fits (a character of both tones fits either).
    pub tones_fitting: usize,
    /// Characters at strict positions whose tone the table does not know (not checked).
    pub tones_unknown: usize,
    /// Whether the last characters of the even lines share a 平声 rhyme group (a rhyming first
    /// line may borrow a neighbouring group, 首句借邻韵, and is not checked).
    pub rhymes: bool,
    /// That group (the first in the book's order if several).
    pub rhyme_group: Option<String>,
    /// Whether an even line's last character is missing from the rhyme table (a traditional
    /// form, a rare character): then whether the poem rhymes is not known.
    pub rhyme_unknown: bool,
    /// Whether two rhyming lines end on the same character (重韵, a fault poets avoid).
    pub repeated_rhyme: bool,
}

impl VerseScore {
    /// The share of checked positions that fit (0 with none checked).
    pub fn tone_fit(&self) -> f64 {
        self.tones_fitting as f64 / self.tones_checked.max(1) as f64
    }

    /// Whether every checked position fits the template.
    pub fn fits_template(&self) -> bool {
        self.form.is_some() && self.tones_fitting == self.tones_checked
    }
}

/// The lines of a poem (its sentences, without their punctuation).
pub fn lines(poem: &str) -> Vec<Vec<char>> {
    poem.split(|c| PUNCTUATION.contains(&c))
        .filter(|l| !l.is_empty())
        .map(|l| l.chars().collect())
        .collect()
}

/// How a poem's lines fit one template.
struct Fit {
    /// Tonal positions checked, those that fit, and those whose tone is unknown.
    checked: usize,
    fitting: usize,
    unknown: usize,
    /// The rhyme groups the even lines' last characters share.
    groups: Vec<u16>,
    /// Whether one of those characters is missing from the rhyme table.
    rhyme_unknown: bool,
    /// Whether two of the rhyming lines (the first among them where it rhymes) end on one
    /// character.
    repeated: bool,
}

/// How `lines` fit `template`.
fn fit(lines: &[Vec<char>], template: &Template, tables: &Tables) -> Fit {
    let (mut checked, mut fitting, mut unknown) = (0, 0, 0);
    for (line, slots) in lines.iter().zip(&template.lines) {
        for (&c, &slot) in line.iter().zip(slots) {
            let tone = match slot {
                Slot::Free => continue,
                _ => tables.tone(c),
            };
            match tone {
                None => unknown += 1,
                Some(tone) => {
                    checked += 1;
                    fitting += usize::from(slot.admits(Some(tone)));
                }
            }
        }
    }
    // The even lines must rhyme; a rhyming first line may borrow a neighbouring group (首句借
    // 邻韵), so its final is not checked.
    let finals: Vec<char> = template
        .rhyming_lines
        .iter()
        .filter(|&&i| i % 2 == 1)
        .filter_map(|&i| lines.get(i).and_then(|l| l.last().copied()))
        .collect();
    let mut rhyme_chars: Vec<char> = template
        .rhyming_lines
        .iter()
        .filter_map(|&i| lines.get(i).and_then(|l| l.last().copied()))
        .collect();
    let rhyme_count = rhyme_chars.len();
    rhyme_chars.sort_unstable();
    rhyme_chars.dedup();
    Fit {
        checked,
        fitting,
        unknown,
        groups: tables.shared_groups(&finals),
        rhyme_unknown: finals.iter().any(|&c| tables.rhyme_groups(c).is_empty()),
        repeated: rhyme_chars.len() < rhyme_count,
    }
}

/// The template of `form` that `lines` fit best (the largest share of tones fitting, then
/// rhyme; the first wins ties), and how they fit it.
fn best_template(form: Form, lines: &[Vec<char>], tables: &Tables) -> Option<(Fit, Template)> {
    templates(form)
        .into_iter()
        .map(|t| (fit(lines, &t, tables), t))
        .max_by(|(a, _), (b, _)| {
            // Fit share a.fitting/a.checked against b's without division, then rhyme; the first
            // wins ties.
            (a.fitting * b.checked.max(1))
                .cmp(&(b.fitting * a.checked.max(1)))
                .then((!a.groups.is_empty()).cmp(&!b.groups.is_empty()))
                .then(std::cmp::Ordering::Greater)
        })
}

/// The template a regular poem's lines fit best, or `None` for a poem of no regular form.
pub fn best_fitting_template(poem: &str, tables: &Tables) -> Option<Template> {
    let form = regular_form(poem)?;
    best_template(form, &lines(poem), tables).map(|(_, template)| template)
}

/// Scores `poem` (one poem, lines ended by ，。？！；) with `tables`.
pub fn score_poem(poem: &str, tables: &Tables) -> VerseScore {
    let poem = without_header(poem);
    let form = regular_form(poem);
    let mut score = VerseScore {
        form: form.map(|f| f.name()),
        template: None,
        tones_checked: 0,
        tones_fitting: 0,
        tones_unknown: 0,
        rhymes: false,
        rhyme_group: None,
        rhyme_unknown: false,
        repeated_rhyme: false,
    };
    let Some(form) = form else {
        return score;
    };
    let lines = lines(poem);
    if let Some((fit, template)) = best_template(form, &lines, tables) {
        score.template = Some(template.name);
        score.tones_checked = fit.checked;
        score.tones_fitting = fit.fitting;
        score.tones_unknown = fit.unknown;
        score.rhymes = !fit.groups.is_empty();
        score.rhyme_group = fit
            .groups
            .first()
            .map(|&g| tables.group_name(g).to_string());
        score.rhyme_unknown = !score.rhymes && fit.rhyme_unknown;
        score.repeated_rhyme = fit.repeated;
    }
    score
}

/// What the training text holds, to tell how much of a poem is copied from it.
pub struct Novelty {
    /// The training poems, one per line.
    text: Vec<char>,
    /// The start of every suffix of `text`, in the suffixes' order.
    suffixes: Vec<u32>,
    /// Every line of every training poem.
    lines: HashSet<Vec<char>>,
}

impl Novelty {
    /// The index of `poems` (the training split).
    pub fn new<'a>(poems: impl IntoIterator<Item = &'a String>) -> Self {
        let mut text = Vec::new();
        let mut lines_seen = HashSet::new();
        for poem in poems.into_iter().map(|p| without_header(p)) {
            text.extend(poem.chars());
            text.push('\n');
            lines_seen.extend(lines(poem));
        }
        let mut suffixes: Vec<u32> = (0..text.len() as u32).collect();
        suffixes.sort_unstable_by(|&a, &b| text[a as usize..].cmp(&text[b as usize..]));
        Novelty {
            text,
            suffixes,
            lines: lines_seen,
        }
    }

    /// The length of the longest prefix of `query` found in the training text.
    fn longest_prefix_found(&self, query: &[char]) -> usize {
        let suffix = |i: usize| &self.text[self.suffixes[i] as usize..];
        let at = self
            .suffixes
            .partition_point(|&s| &self.text[s as usize..] < query);
        let common = |s: &[char]| s.iter().zip(query).take_while(|(a, b)| a == b).count();
        let before = at.checked_sub(1).map_or(0, |i| common(suffix(i)));
        let after = if at < self.suffixes.len() {
            common(suffix(at))
        } else {
            0
        };
        before.max(after)
    }

    /// The longest run of the poem's characters (punctuation may be inside it, but only
    /// characters are counted) that occurs in the training text.
    pub fn longest_copied_run(&self, poem: &str) -> usize {
        let chars: Vec<char> = without_header(poem).chars().collect();
        (0..chars.len())
            .map(|i| {
                let run = &chars[i..i + self.longest_prefix_found(&chars[i..])];
                run.iter().filter(|c| is_cjk_ideograph(**c)).count()
            })
            .max()
            .unwrap_or(0)
    }

    /// (lines of the poem found verbatim among the training poems' lines, lines).
    pub fn lines_verbatim(&self, poem: &str) -> (usize, usize) {
        let lines = lines(without_header(poem));
        let copied = lines.iter().filter(|l| self.lines.contains(*l)).count();
        (copied, lines.len())
    }
}

/// The scores of a set of poems, summed up.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub poems: usize,
    /// Poems of a regular form's shape.
    pub regular: usize,
    /// Regular poems whose every checked tone fits their best template.
    pub fitting_a_template: usize,
    /// The mean over regular poems of the share of checked tones that fit.
    pub mean_tone_fit: f64,
    /// Regular poems whose rhyming lines end in one 平声 group.
    pub rhyming: usize,
    /// Regular poems two of whose rhyming lines end on the same character (重韵).
    pub repeated_rhyme: usize,
    /// Regular poems that rhyme with a different character at every rhyming line.
    pub rhyming_distinct: usize,
    /// The median and the largest over all poems of the longest run copied from the training text
    /// (characters), if the training text was given.
    pub copied_run_median: Option<usize>,
    pub copied_run_max: Option<usize>,
    /// The share of all lines found verbatim in the training poems, if given.
    pub lines_verbatim: Option<f64>,
}

impl Summary {
    /// Scores every poem of `poems`; novelty against `training` if given.
    pub fn of(
        poems: &[String],
        tables: &Tables,
        training: Option<&Novelty>,
    ) -> (Self, Vec<VerseScore>) {
        let scores: Vec<VerseScore> = poems.iter().map(|p| score_poem(p, tables)).collect();
        let regular: Vec<&VerseScore> = scores.iter().filter(|s| s.form.is_some()).collect();
        let mut runs: Vec<usize> = training
            .map(|n| poems.iter().map(|p| n.longest_copied_run(p)).collect())
            .unwrap_or_default();
        runs.sort_unstable();
        let verbatim = training.map(|n| {
            let (copied, all) = poems
                .iter()
                .map(|p| n.lines_verbatim(p))
                .fold((0, 0), |(c, a), (pc, pa)| (c + pc, a + pa));
            copied as f64 / all.max(1) as f64
        });
        let summary = Summary {
            poems: poems.len(),
            regular: regular.len(),
            fitting_a_template: regular.iter().filter(|s| s.fits_template()).count(),
            // Folded from +0.0: an empty f64 sum is −0.0, which would print as "-0.0 %".
            mean_tone_fit: regular.iter().fold(0.0, |sum, s| sum + s.tone_fit())
                / regular.len().max(1) as f64,
            rhyming: regular.iter().filter(|s| s.rhymes).count(),
            repeated_rhyme: regular.iter().filter(|s| s.repeated_rhyme).count(),
            rhyming_distinct: regular
                .iter()
                .filter(|s| s.rhymes && !s.repeated_rhyme)
                .count(),
            copied_run_median: runs.get(runs.len() / 2).copied(),
            copied_run_max: runs.last().copied(),
            lines_verbatim: verbatim,
        };
        (summary, scores)
    }

    /// One paragraph for people: counts and shares.
    pub fn describe(&self) -> String {
        let mut text = if self.regular == 0 {
            format!("{}, none of a regular form", self.poem_count())
        } else {
            self.describe_regular()
        };
        if let (Some(median), Some(max), Some(verbatim)) = (
            self.copied_run_median,
            self.copied_run_max,
            self.lines_verbatim,
        ) {
            text += &format!(
                "; longest run copied from the training poems: median {median}, max {max} characters; \
                 lines found verbatim there: {:.1} %",
                100.0 * verbatim
            );
        }
        text
    }

    /// "1 poem", "3 poems".
    fn poem_count(&self) -> String {
        match self.poems {
            1 => "1 poem".into(),
            n => format!("{n} poems"),
        }
    }

    /// The counts and shares of the regular poems' tones and rhymes.
    fn describe_regular(&self) -> String {
        let share = |n: usize, of: usize| 100.0 * n as f64 / of as f64; // of ≥ 1 here
        format!(
            "{}, {} of a regular form ({:.0} %); of those, {} fit a tonal template in every checked \
             position ({:.0} %; mean share of fitting tones {:.1} %) and {} rhyme ({:.0} %); \
             {} repeat a rhyme character ({:.0} %), so {} rhyme with distinct ones ({:.0} %)",
            self.poem_count(),
            self.regular,
            share(self.regular, self.poems),
            self.fitting_a_template,
            share(self.fitting_a_template, self.regular),
            100.0 * self.mean_tone_fit,
            self.rhyming,
            share(self.rhyming, self.regular),
            self.repeated_rhyme,
            share(self.repeated_rhyme, self.regular),
            self.rhyming_distinct,
            share(self.rhyming_distinct, self.regular),
        )
    }
}
