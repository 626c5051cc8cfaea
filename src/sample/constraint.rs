//! Form control: masking the logits so that every poem has an exact regular form (`--form`), its
//! lines begin with given characters (`--acrostic`, 藏头诗), its tones and rhymes keep a
//! template of regulated verse (`--meter`, [`super::meter`]), or a ci has its tune's sentences
//! (`--tune`, the 词谱 of [`crate::verse::tunes`]). A form and a tune are both a [`Shape`]. A
//! line's header (`【李白·静夜思】`, `【浣溪沙】`) is not part of the poem: the rules hold after its
//! `】`, and inside it the fields a request leaves to the model ([`HeaderRule`]).

use super::ci_meter::CiMeter;
use super::meter::{Meter, MeterRule};
use crate::data::header::{HeaderRequest, CLOSE, MARKS, MAX_FIELD_CHARS, OPEN, SEPARATOR};
use crate::data::poem::{is_cjk_ideograph, Form, PUNCTUATION};
use crate::data::tokenizer::NEWLINE;
use crate::data::CharTokenizer;
use crate::sample::SampleError;
use crate::verse::cilin::Cilin;
use crate::verse::tune_meters::TuneMeter;
use crate::verse::tunes::TunePattern;
use crate::verse::Tables;

/// What the next character of a poem may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// Anything.
    Free,
    /// A character of the poem's text: an ideograph (no punctuation, no newline).
    Content,
    /// Exactly this token.
    Exactly(u32),
    /// A character of a header's field (anything but a line break or the header's own marks), or
    /// the mark that ends the field if given.
    Field(Option<u32>),
}

/// A poem's places: sentences of fixed lengths, each ended by its mark, then the newline.
struct Shape {
    /// (characters, the mark's id) per sentence.
    sentences: Vec<(usize, u32)>,
    /// For messages: "a wujue", "a ci to the tune 浣溪沙".
    name: String,
}

/// The place of a poem's next character in its [`Shape`].
enum Place {
    /// A character of the text: its sentence and column.
    Text(usize, usize),
    /// The mark that ends a sentence: this token.
    Mark(u32),
    /// After the last sentence.
    End,
}

impl Shape {
    /// The shape of a regular `form`: its lines ended alternately by ，and 。.
    fn of_form(form: Form, (comma, period): (u32, u32)) -> Shape {
        let (chars, lines) = form.shape();
        let marks = [comma, period].into_iter().cycle();
        Shape {
            sentences: marks.take(lines).map(|mark| (chars, mark)).collect(),
            name: format!("a {}", form.name()),
        }
    }

    /// Tokens of a whole poem of this shape, without the newline that ends it.
    fn len(&self) -> usize {
        self.sentences.iter().map(|(n, _)| n + 1).sum::<usize>()
    }

    /// The place of the character after the first `written` ones.
    fn place(&self, written: usize) -> Place {
        let mut offset = written;
        for (sentence, &(chars, mark)) in self.sentences.iter().enumerate() {
            match offset.cmp(&chars) {
                std::cmp::Ordering::Less => return Place::Text(sentence, offset),
                std::cmp::Ordering::Equal => return Place::Mark(mark),
                std::cmp::Ordering::Greater => offset -= chars + 1,
            }
        }
        Place::End
    }
}

/// The fields of a header that a request leaves to the model (`--title` without `--poet`, or
/// `--poet` alone): given fields are written as given, the others by the model, each of 1 to
/// [`MAX_FIELD_CHARS`] characters and ended by its mark (`·` between fields, `】` after the last).
struct HeaderRule {
    /// Each field's tokens where given, `None` where the model writes it.
    fields: Vec<Option<Vec<u32>>>,
    separator: u32,
}

impl HeaderRule {
    /// The slot after `written`, the header's tokens after its `【`.
    fn slot(&self, written: &[u32], close: u32) -> Slot {
        let field = written.iter().filter(|&&id| id == self.separator).count();
        let so_far = written.len()
            - written
                .iter()
                .rposition(|&id| id == self.separator)
                .map_or(0, |i| i + 1);
        let end = match field + 1 < self.fields.len() {
            true => self.separator,
            false => close,
        };
        match self.fields.get(field) {
            Some(Some(given)) => Slot::Exactly(given.get(so_far).copied().unwrap_or(end)),
            Some(None) if so_far == 0 => Slot::Field(None),
            Some(None) if so_far < MAX_FIELD_CHARS => Slot::Field(Some(end)),
            Some(None) => Slot::Exactly(end),
            None => Slot::Exactly(close),
        }
    }
}

/// Where the next token of a line goes: inside its header (the tokens after `【` so far), or in
/// its poem (the tokens after the header, or after the newline where it has none).
enum Part<'a> {
    Header(&'a [u32]),
    Poem(&'a [u32]),
}

/// The rules of `--form`, `--acrostic`, `--tune` and a header's fields, over token ids. The poem
/// being written is everything after the last newline of the context and after its header.
pub struct PoemConstraint {
    shape: Option<Shape>,
    /// The regular form, for the meter.
    form: Option<Form>,
    acrostic: Vec<u32>,
    newline: u32,
    /// For each token id, whether it may stand in a poem's text: an ideograph (not punctuation,
    /// the newline or a tune's brackets).
    is_text: Vec<bool>,
    names: Vec<char>,
    meter: Option<Box<dyn MeterRule>>,
    /// The ids of the header's brackets, where the vocabulary has them.
    brackets: Option<(u32, u32)>,
    /// The header's fields, where some are left to the model.
    header: Option<HeaderRule>,
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
            .find(|c| PUNCTUATION.contains(c) || c.is_whitespace() || MARKS.contains(c))
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
        let shape = match form {
            Some(form) => Some(Shape::of_form(form, (id('，')?, id('。')?))),
            None => None,
        };
        Ok(PoemConstraint {
            shape,
            form,
            acrostic,
            newline: id(NEWLINE)?,
            is_text: names.iter().map(|&c| is_cjk_ideograph(c)).collect(),
            names,
            meter: None,
            brackets: tokenizer.id(OPEN).zip(tokenizer.id(CLOSE)),
            header: None,
        })
    }

    /// The rules of a ci to `tune` in the form `pattern` (after its header): its sentences and marks.
    pub fn for_tune(
        tokenizer: &CharTokenizer,
        tune: &str,
        pattern: &TunePattern,
    ) -> Result<Self, SampleError> {
        let mut constraint = PoemConstraint::new(tokenizer, None, "")?;
        let id = |c: char| tokenizer.id(c).ok_or(SampleError::MissingMark(c));
        let sentences = pattern.sentences.iter();
        constraint.shape = Some(Shape {
            sentences: sentences
                .map(|&(chars, mark)| Ok((chars, id(mark)?)))
                .collect::<Result<_, SampleError>>()?,
            name: format!("a ci to the tune {tune}"),
        });
        Ok(constraint)
    }

    /// The same rules after a header whose fields `request` gives or leaves to the model (the
    /// rule applies where it leaves one; a header given whole is written by the program).
    pub fn with_header(
        mut self,
        tokenizer: &CharTokenizer,
        request: &HeaderRequest,
    ) -> Result<Self, SampleError> {
        let fields = request.fields();
        if fields.iter().all(Option::is_some) {
            return Ok(self);
        }
        let encode = |field: Option<&str>| field.map(|f| tokenizer.encode(f)).transpose();
        self.header = Some(HeaderRule {
            fields: fields.into_iter().map(encode).collect::<Result<_, _>>()?,
            separator: tokenizer
                .id(SEPARATOR)
                .ok_or(SampleError::MissingMark(SEPARATOR))?,
        });
        Ok(self)
    }

    /// The rules of a tune, and its tones and rhymes (`--tune X --meter`): `meter`, by `tables`
    /// and `cilin`.
    pub fn with_tune_meter(mut self, meter: &TuneMeter, tables: &Tables, cilin: &Cilin) -> Self {
        self.meter = Some(Box::new(CiMeter::new(meter, &self.names, (tables, cilin))));
        self
    }

    /// The same rules, and the tones and rhymes of the form's templates (`--meter`) by `tables`.
    pub fn with_meter(mut self, tables: &Tables) -> Result<Self, SampleError> {
        let Some(form) = self.form else {
            return Err(SampleError::MeterWithoutForm);
        };
        self.meter = Some(Box::new(Meter::new(form, &self.names, tables)));
        Ok(self)
    }

    /// The (line, column) of the character after `poem` in the shape, if it is one of the text.
    fn position(&self, poem: &[u32]) -> Option<(usize, usize)> {
        match self.shape.as_ref()?.place(poem.len()) {
            Place::Text(line, column) => Some((line, column)),
            _ => None,
        }
    }

    /// Where the token after `context` goes: in the header of its line, or in its poem.
    fn part<'c>(&self, context: &'c [u32]) -> Part<'c> {
        let start = context
            .iter()
            .rposition(|&id| id == self.newline)
            .map_or(0, |i| i + 1);
        let line = &context[start..];
        let Some((_, close)) = self
            .brackets
            .filter(|&(open, _)| line.first() == Some(&open))
        else {
            return Part::Poem(line);
        };
        match line.iter().position(|&id| id == close) {
            Some(end) => Part::Poem(&line[end + 1..]),
            None => Part::Header(&line[1..]),
        }
    }

    /// The slot for the token after `written` of the header of the line (after its `【`).
    fn header_slot(&self, written: &[u32]) -> Slot {
        let close = self.brackets.map_or(self.newline, |(_, close)| close);
        match &self.header {
            Some(rule) => rule.slot(written, close),
            None => Slot::Field(Some(close)),
        }
    }

    /// The slot for the character after `poem` (the ids after the line's header).
    fn slot(&self, poem: &[u32]) -> Slot {
        let Some(shape) = &self.shape else {
            return Slot::Free;
        };
        match shape.place(poem.len()) {
            Place::Mark(id) => Slot::Exactly(id),
            Place::Text(line, 0) if line < self.acrostic.len() => {
                Slot::Exactly(self.acrostic[line])
            }
            Place::Text(..) => Slot::Content,
            Place::End => Slot::Exactly(self.newline),
        }
    }

    /// Whether `next` fits `slot` (the meter aside).
    fn allows(&self, slot: Slot, next: u32) -> bool {
        match slot {
            Slot::Free => true,
            Slot::Content => self.is_text[next as usize],
            Slot::Exactly(id) => next == id,
            Slot::Field(end) => {
                Some(next) == end
                    || !matches!(
                        self.names[next as usize],
                        NEWLINE | OPEN | CLOSE | SEPARATOR
                    )
            }
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
        let poem = match self.part(context) {
            Part::Header(written) => {
                let slot = self.header_slot(written);
                for (id, l) in logits.iter_mut().enumerate() {
                    if !self.allows(slot, id as u32) {
                        *l = f32::NEG_INFINITY;
                    }
                }
                return Ok(());
            }
            Part::Poem(poem) => poem,
        };
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

    /// Checks that the poem begun in `context` (its ids after the last newline and its header,
    /// which the program writes) fits the form and the acrostic, and that `max_new_tokens` can
    /// finish it; the error says where it does not.
    pub fn check_start(&self, context: &[u32], max_new_tokens: usize) -> Result<(), SampleError> {
        let poem = match self.part(context) {
            Part::Poem(poem) => poem,
            Part::Header(_) => &[],
        };
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
                            (Some(meter), Some(position)) if self.is_text[id as usize] => {
                                meter.expected(&poem[..i], position)
                            }
                            _ => "a character of the text, not punctuation".into(),
                        },
                        Slot::Free | Slot::Field(_) => "the poem to go on".into(),
                    },
                });
            }
        }
        if let Some(shape) = &self.shape {
            let needed = shape.len() + 1 - poem.len();
            if max_new_tokens < needed {
                return Err(SampleError::TooFewTokens {
                    shape: shape.name.clone(),
                    needed,
                    given: max_new_tokens,
                });
            }
        }
        Ok(())
    }

    /// The rules in words, for messages: "wujue, acrostic 春夏秋冬", "a ci to the tune 浣溪沙".
    fn describe(&self) -> String {
        let meter = if self.meter.is_some() {
            " with its meter"
        } else {
            ""
        };
        if let (None, Some(shape)) = (self.form, &self.shape) {
            return format!("{}{meter}", shape.name);
        }
        let acrostic: String = self
            .acrostic
            .iter()
            .map(|&id| self.names[id as usize])
            .collect();
        match (self.form, acrostic.is_empty()) {
            (Some(f), true) => format!("{}{meter}", f.name()),
            (Some(f), false) => format!("{}{meter}, acrostic {acrostic}", f.name()),
            (None, _) => "no form".to_string(),
        }
    }
}
