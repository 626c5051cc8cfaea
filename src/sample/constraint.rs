//! Form control: masking the logits so that every poem has an exact regular form (`--form`), its
//! lines begin with given characters (`--acrostic`, 藏头诗), and its tones and rhymes keep a
//! template of regulated verse (`--meter`, [`super::meter`]).

use super::meter::Meter;
use crate::data::poem::{Form, PUNCTUATION};
use crate::data::tokenizer::NEWLINE;
use crate::data::CharTokenizer;
use crate::sample::SampleError;
use crate::verse::Tables;

/// What the next character of a poem may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// Anything.
    Free,
    /// A character of the poem's text: no punctuation, no newline.
    Content,
    /// Exactly this token.
    Exactly(u32),
}

/// The rules of `--form` and `--acrostic`, over token ids. The poem being written is everything
/// after the last newline of the context.
pub struct PoemConstraint {
    form: Option<Form>,
    acrostic: Vec<u32>,
    newline: u32,
    comma: u32,
    period: u32,
    /// For each token id, whether it is punctuation or the newline (not poem text).
    is_mark: Vec<bool>,
    names: Vec<char>,
    meter: Option<Meter>,
}

impl PoemConstraint {
    /// The constraint for an optional `form` and an `acrostic` (empty: none) over `tokenizer`'s
    /// vocabulary. The acrostic may have at most as many characters as the form has lines; without
    /// a form, an acrostic of up to 4 characters makes a qijue and one of up to 8 a qilv.
    pub fn new(
        tokenizer: &CharTokenizer,
        form: Option<Form>,
        acrostic: &str,
    ) -> Result<Self, SampleError> {
        let chars: Vec<char> = acrostic.chars().collect();
        let form = match (form, chars.len()) {
            (Some(form), _) => Some(form),
            (None, 0) => None,
            (None, 1..=4) => Some(Form::Qijue),
            (None, _) => Some(Form::Qilv),
        };
        if let Some(form) = form {
            let lines = form.shape().1;
            if chars.len() > lines {
                return Err(SampleError::AcrosticTooLong {
                    acrostic: acrostic.to_string(),
                    form: form.name(),
                    lines,
                });
            }
        }
        if let Some(&c) = chars
            .iter()
            .find(|c| PUNCTUATION.contains(c) || c.is_whitespace())
        {
            return Err(SampleError::AcrosticMark(c));
        }
        let acrostic = tokenizer.encode(acrostic)?;
        let vocab = tokenizer.vocab_size();
        let mut names = vec!['\u{FFFD}'; vocab];
        for (c, id) in tokenizer.chars() {
            names[id as usize] = c;
        }
        let id = |c: char| tokenizer.id(c).ok_or(SampleError::MissingMark(c));
        Ok(PoemConstraint {
            form,
            acrostic,
            newline: id(NEWLINE)?,
            comma: id('，')?,
            period: id('。')?,
            is_mark: names
                .iter()
                .map(|c| PUNCTUATION.contains(c) || *c == NEWLINE)
                .collect(),
            names,
            meter: None,
        })
    }

    /// The same rules, and the tones and rhymes of the form's templates (`--meter`) by `tables`.
    pub fn with_meter(mut self, tables: &Tables) -> Result<Self, SampleError> {
        let Some(form) = self.form else {
            return Err(SampleError::MeterWithoutForm);
        };
        self.meter = Some(Meter::new(form, &self.names, tables));
        Ok(self)
    }

    /// The (line, column) of the character after `poem` in the form's shape.
    fn position(&self, poem: &[u32]) -> Option<(usize, usize)> {
        let (chars, _) = self.form?.shape();
        Some((poem.len() / (chars + 1), poem.len() % (chars + 1)))
    }

    /// The slot for the character after `poem` (the ids after the last newline).
    fn slot(&self, poem: &[u32]) -> Slot {
        let Some(form) = self.form else {
            return Slot::Free;
        };
        let (chars, lines) = form.shape();
        let (line, col) = (poem.len() / (chars + 1), poem.len() % (chars + 1));
        if line >= lines {
            Slot::Exactly(self.newline)
        } else if col == chars {
            Slot::Exactly(if line % 2 == 0 {
                self.comma
            } else {
                self.period
            })
        } else if col == 0 && line < self.acrostic.len() {
            Slot::Exactly(self.acrostic[line])
        } else {
            Slot::Content
        }
    }

    /// Whether `next` fits `slot` (the meter aside).
    fn allows(&self, slot: Slot, next: u32) -> bool {
        match slot {
            Slot::Free => true,
            Slot::Content => !self.is_mark[next as usize],
            Slot::Exactly(id) => next == id,
        }
    }

    /// Whether `next` may come after `poem`: its slot, and the meter at a character's place.
    fn allows_after(&self, poem: &[u32], next: u32) -> bool {
        let slot = self.slot(poem);
        self.allows(slot, next)
            && match (&self.meter, self.position(poem), slot) {
                (Some(meter), Some(position), Slot::Content) => meter.allows(poem, position, next),
                _ => true,
            }
    }

    /// Sets to −∞ the logits (V,) of every token that may not come next after `context`; an error
    /// if that leaves none (the meter can find no character for the place).
    pub fn mask(&self, context: &[u32], logits: &mut [f32]) -> Result<(), SampleError> {
        let poem = poem_of(context, self.newline);
        let slot = self.slot(poem);
        let metered = match (&self.meter, self.position(poem), slot) {
            (Some(meter), Some(position), Slot::Content) => Some(meter.allowed(poem, position)),
            _ => None,
        };
        for (id, l) in logits.iter_mut().enumerate() {
            let meter_allows = metered.as_ref().is_none_or(|m| m[id]);
            if !(meter_allows && self.allows(slot, id as u32)) {
                *l = f32::NEG_INFINITY;
            }
        }
        if logits.iter().all(|l| *l == f32::NEG_INFINITY) {
            return Err(SampleError::NothingFits {
                rules: self.describe(),
                position: poem.len() + 1,
            });
        }
        Ok(())
    }

    /// Checks that the poem begun in `context` (its ids after the last newline) fits the form and
    /// the acrostic, and that `max_new_tokens` can finish it; the error says where it does not.
    pub fn check_start(&self, context: &[u32], max_new_tokens: usize) -> Result<(), SampleError> {
        let poem = poem_of(context, self.newline);
        for (i, &id) in poem.iter().enumerate() {
            let slot = self.slot(&poem[..i]);
            if !self.allows_after(&poem[..i], id) {
                return Err(SampleError::PromptDoesNotFit {
                    rules: self.describe(),
                    position: i + 1,
                    found: self.names[id as usize],
                    expected: match slot {
                        Slot::Exactly(e) if e == self.newline => "the end of the poem".into(),
                        Slot::Exactly(e) => format!("`{}`", self.names[e as usize]),
                        Slot::Content => match (&self.meter, self.position(&poem[..i])) {
                            (Some(meter), Some(position)) if !self.is_mark[id as usize] => {
                                meter.expected(&poem[..i], position)
                            }
                            _ => "a character of the text, not punctuation".into(),
                        },
                        Slot::Free => "the poem to go on".into(),
                    },
                });
            }
        }
        if let Some(form) = self.form {
            let (chars, lines) = form.shape();
            let needed = (chars + 1) * lines + 1 - poem.len();
            if max_new_tokens < needed {
                return Err(SampleError::TooFewTokens {
                    form: form.name(),
                    needed,
                    given: max_new_tokens,
                });
            }
        }
        Ok(())
    }

    /// The rules in words, for messages: "wujue, acrostic 春夏秋冬".
    fn describe(&self) -> String {
        let acrostic: String = self
            .acrostic
            .iter()
            .map(|&id| self.names[id as usize])
            .collect();
        let meter = if self.meter.is_some() {
            " with its meter"
        } else {
            ""
        };
        match (self.form, acrostic.is_empty()) {
            (Some(f), true) => format!("{}{meter}", f.name()),
            (Some(f), false) => format!("{}{meter}, acrostic {acrostic}", f.name()),
            (None, _) => "no form".to_string(),
        }
    }
}

/// The ids after the last newline of `context`: the poem being written.
fn poem_of(context: &[u32], newline: u32) -> &[u32] {
    let start = context
        .iter()
        .rposition(|&id| id == newline)
        .map_or(0, |i| i + 1);
    &context[start..]
}
