//! Meter control (`--meter`): the tones and rhymes of regulated verse, as a mask over token ids.
//!
//! At each position of a poem of the chosen form, a character may come next if at least one of
//! the form's templates ([`crate::verse::templates()`]) still fits the poem so far and also fits
//! the poem with that character: its tone fits the template's slot (a character of both tones
//! fits either; one of unknown tone only a free slot), and at the end of a rhyming line it shares
//! a 平声 rhyme group with the earlier rhyming line ends and ends no earlier line (no 重韵, a
//! rhyme by repeating a character, whichever template the poem is later read by: a character of
//! two tones may end a first line that one template rhymes and another does not). So the prompt
//! and the first characters choose between 平起 and 仄起, and the first rhyme chooses the group.

use crate::data::poem::Form;
use crate::verse::tables::common_groups;
use crate::verse::{templates, Slot, Tables, Template, Tone};

/// A meter as form control asks it: which tokens may stand at a (line or sentence, column) of the
/// poem so far, the ids after its header (marks included).
pub trait MeterRule: Send + Sync {
    /// For each token, whether it may stand at `position` after `poem`.
    fn allowed(&self, poem: &[u32], position: (usize, usize)) -> Vec<bool>;
    /// Whether `next` may stand at `position` after `poem`.
    fn allows(&self, poem: &[u32], position: (usize, usize), next: u32) -> bool;
    /// What the meter asks for at `position` after `poem`, in words.
    fn expected(&self, poem: &[u32], position: (usize, usize)) -> String;
}

/// The meter of one form over a vocabulary.
pub struct Meter {
    templates: Vec<Template>,
    /// Characters per line.
    chars: usize,
    /// Each token's tone (`None`: not in the table, or not a character).
    tones: Vec<Option<Tone>>,
    /// Each token's 平声 rhyme groups.
    groups: Vec<Vec<u16>>,
}

/// A template that still fits the poem, and the groups its rhyme may still take.
struct Open<'m> {
    template: &'m Template,
    /// `None` before the first rhyming line end.
    groups: Option<Vec<u16>>,
}

impl Meter {
    /// The meter of `form` for a vocabulary whose token i is the character `names[i]`.
    pub fn new(form: Form, names: &[char], tables: &Tables) -> Self {
        Meter {
            templates: templates(form),
            chars: form.shape().0,
            tones: names.iter().map(|&c| tables.tone(c)).collect(),
            groups: names
                .iter()
                .map(|&c| tables.rhyme_groups(c).to_vec())
                .collect(),
        }
    }

    /// The token at (line, col) of `poem` (the ids after the last newline, with punctuation).
    fn at(&self, poem: &[u32], line: usize, col: usize) -> u32 {
        poem[line * (self.chars + 1) + col]
    }

    /// Whether `template` rhymes at (line, col).
    fn rhymes_at(&self, template: &Template, line: usize, col: usize) -> bool {
        col + 1 == self.chars && template.rhyming_lines.contains(&line)
    }

    /// The templates that fit every character of `poem` up to (line, col), exclusive.
    fn open(&self, poem: &[u32], (line, col): (usize, usize)) -> Vec<Open<'_>> {
        let positions = (0..=line).flat_map(|l| {
            let end = if l == line { col } else { self.chars };
            (0..end).map(move |c| (l, c))
        });
        let positions: Vec<(usize, usize)> = positions.collect();
        let mut open = Vec::new();
        'templates: for template in &self.templates {
            let mut groups: Option<Vec<u16>> = None;
            for &(l, c) in &positions {
                let id = self.at(poem, l, c) as usize;
                if !template.lines[l][c].admits(self.tones[id]) {
                    continue 'templates;
                }
                if self.rhymes_at(template, l, c) {
                    let shared = common_groups(groups.as_deref(), &self.groups[id]);
                    if shared.is_empty() {
                        continue 'templates;
                    }
                    groups = Some(shared);
                }
            }
            open.push(Open { template, groups });
        }
        open
    }

    /// Whether `next` may stand at (line, col) after `poem`, given the templates still `open`.
    /// The tokens that end the lines of `poem` before `line`.
    fn finals(&self, poem: &[u32], line: usize) -> Vec<u32> {
        (0..line)
            .map(|l| self.at(poem, l, self.chars - 1))
            .collect()
    }

    /// Whether `next` may stand at (line, col), given the templates still `open` and the
    /// `finals` of the lines before.
    fn admits(
        &self,
        open: &[Open],
        finals: &[u32],
        (line, col): (usize, usize),
        next: u32,
    ) -> bool {
        let rhymes = |o: &Open| {
            !finals.contains(&next)
                && !common_groups(o.groups.as_deref(), &self.groups[next as usize]).is_empty()
        };
        open.iter().any(|o| {
            o.template.lines[line][col].admits(self.tones[next as usize])
                && (!self.rhymes_at(o.template, line, col) || rhymes(o))
        })
    }
}

impl MeterRule for Meter {
    fn allowed(&self, poem: &[u32], position: (usize, usize)) -> Vec<bool> {
        let (open, finals) = (self.open(poem, position), self.finals(poem, position.0));
        (0..self.tones.len() as u32)
            .map(|id| self.admits(&open, &finals, position, id))
            .collect()
    }

    fn allows(&self, poem: &[u32], position: (usize, usize), next: u32) -> bool {
        let (open, finals) = (self.open(poem, position), self.finals(poem, position.0));
        self.admits(&open, &finals, position, next)
    }

    fn expected(&self, poem: &[u32], position: (usize, usize)) -> String {
        let open = self.open(poem, position);
        if open.is_empty() {
            return "nothing: no template fits the characters before it".into();
        }
        let (line, col) = position;
        let slots: Vec<Slot> = open.iter().map(|o| o.template.lines[line][col]).collect();
        let tone = if slots.iter().all(|s| *s == Slot::Ping) {
            "a 平 (level-tone) character"
        } else if slots.iter().all(|s| *s == Slot::Ze) {
            "a 仄 (oblique-tone) character"
        } else {
            "a character of known tone"
        };
        if open.iter().any(|o| self.rhymes_at(o.template, line, col)) {
            format!("{tone} that rhymes (平水韵) with the earlier rhyming line ends and ends no earlier line")
        } else {
            tone.to_string()
        }
    }
}
