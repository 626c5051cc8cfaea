//! The tonal templates of the four regulated forms.
//!
//! Every line of regulated verse is one of four five-character patterns, a seven-character line
//! putting two characters of the opposite tone in front:
//!
//! | | five | seven |
//! |---|---|---|
//! | A | 仄仄平平仄 | 平平仄仄平平仄 |
//! | B | 平平仄仄平 | 仄仄平平仄仄平 |
//! | C | 平平平仄仄 | 仄仄平平平仄仄 |
//! | D | 仄仄仄平平 | 平平仄仄仄平平 |
//!
//! A couplet is A B or C D (its lines 对, opposed), and a couplet's first line follows the tone of
//! the previous line's second character (粘): so a poem runs A B C D A B C D or C D A B C D A B,
//! a quatrain stopping after four lines. When the first line also rhymes (首句入韵) it ends on 平:
//! A becomes D, C becomes B. The even lines (and the first, when it rhymes) end on characters of
//! one 平声 rhyme group. That gives four templates per form, named by the second character of the
//! first line (平起 / 仄起) and whether the first line rhymes.
//!
//! The usual relaxation (一三五不论): the tones of the first, third and fifth characters of a
//! seven-character line, and of the first of a five-character line, are free.

use super::tables::Tone;
use crate::data::poem::Form;

/// What a position of a template asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    Ping,
    Ze,
    /// Either tone (a relaxed position).
    Free,
}

/// One template of a form: a slot per character, line by line, and the lines that rhyme.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    /// E.g. 仄起首句不入韵.
    pub name: String,
    pub lines: Vec<Vec<Slot>>,
    /// Indices of the lines whose last character rhymes.
    pub rhyming_lines: Vec<usize>,
}

/// The five-character patterns A, B, C, D.
const FIVE: [&str; 4] = ["仄仄平平仄", "平平仄仄平", "平平平仄仄", "仄仄仄平平"];
const A: usize = 0;
const B: usize = 1;
const C: usize = 2;
const D: usize = 3;

/// The pattern of a line, `pattern` being one of A–D, as written (no relaxation).
fn line(pattern: usize, chars: usize) -> String {
    let five = FIVE[pattern];
    if chars == 5 {
        return five.to_string();
    }
    let prefix = if five.starts_with('平') {
        "仄仄"
    } else {
        "平平"
    };
    format!("{prefix}{five}")
}

/// The slots of a line pattern written with 平 and 仄, relaxed at the free positions.
fn slots(pattern: &str) -> Vec<Slot> {
    let free: &[usize] = if pattern.chars().count() == 7 {
        &[0, 2, 4]
    } else {
        &[0]
    };
    pattern
        .chars()
        .enumerate()
        .map(|(i, c)| match c {
            _ if free.contains(&i) => Slot::Free,
            '平' => Slot::Ping,
            _ => Slot::Ze,
        })
        .collect()
}

/// The four templates of `form`, the most common (首句不入韵 for five-character lines, 首句入韵
/// for seven) first.
pub fn templates(form: Form) -> Vec<Template> {
    let (chars, lines) = form.shape();
    let mut all = Vec::new();
    for first_rhymes in [chars == 7, chars != 7] {
        for start in [A, C] {
            let sequence: Vec<usize> = (0..lines).map(|i| [A, B, C, D][(start + i) % 4]).collect();
            let mut patterns: Vec<String> = sequence.iter().map(|&p| line(p, chars)).collect();
            if first_rhymes {
                patterns[0] = line(if start == A { D } else { B }, chars);
            }
            let second = patterns[0].chars().nth(1).unwrap_or('平');
            let name = format!("{second}起首句{}入韵", if first_rhymes { "" } else { "不" });
            let mut rhyming_lines: Vec<usize> = (1..lines).step_by(2).collect();
            if first_rhymes {
                rhyming_lines.insert(0, 0);
            }
            all.push(Template {
                name,
                lines: patterns.iter().map(|p| slots(p)).collect(),
                rhyming_lines,
            });
        }
    }
    all
}

impl Slot {
    /// Whether a character of tone `tone` (`None`: unknown) may stand here.
    pub fn admits(self, tone: Option<Tone>) -> bool {
        matches!(
            (self, tone),
            (Slot::Free, _)
                | (_, Some(Tone::Both))
                | (Slot::Ping, Some(Tone::Ping))
                | (Slot::Ze, Some(Tone::Ze))
        )
    }
}

impl Template {
    /// The template written out, 平 and 仄 with ○ at the free positions, lines ended by ，and 。.
    pub fn written(&self) -> String {
        let mut text = String::new();
        for (i, line) in self.lines.iter().enumerate() {
            text.extend(line.iter().map(|s| match s {
                Slot::Ping => '平',
                Slot::Ze => '仄',
                Slot::Free => '○',
            }));
            text.push(if i % 2 == 0 { '，' } else { '。' });
        }
        text
    }
}
