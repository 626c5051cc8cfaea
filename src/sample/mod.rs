//! Generating text from a model: the decoding loop (with or without the key/value cache), how
//! the next token is drawn, and form control.

pub mod ci_meter;
pub mod constraint;
pub mod draw;
pub mod meter;

pub use constraint::PoemConstraint;
pub use draw::Sampling;

use crate::config::{CorpusKind, DataConfig};
use crate::data::header::{
    without_header, HeaderRequest, Poets, CLOSE, MARKS, MAX_FIELD_CHARS, OPEN,
};
use crate::data::poem::{one_line, Form};
use crate::data::tokenizer::NEWLINE;
use crate::data::{CharTokenizer, DataError};
use crate::engine::CpuDecoder;
use crate::model::Gpt;
use crate::ops::WeightFormat;
use crate::verse::cilin::Cilin;
use crate::verse::tune_meters::{TuneMeter, TuneMeters};
use crate::verse::tunes::{tune_header, Tune, Tunes};
use crate::verse::Tables;
use candle_core::{bail, Result, Tensor};
use rand_chacha::ChaCha8Rng;
use std::sync::atomic::{AtomicBool, Ordering};

/// The longest text that `sample` and `score` give the model at once, a prompt or a poem to score,
/// in characters (a long poem has under 200; the attention of T characters takes T × T weights
/// per head).
pub const MAX_POEM_CHARS: usize = 1_000;

/// The most tokens of a header the model writes: its two fields and their marks (the header's
/// rule ends each field at [`MAX_FIELD_CHARS`]).
const HEADER_TOKENS: usize = 2 * (MAX_FIELD_CHARS + 1);

/// Sampling settings that cannot work, each with what to do instead.
#[derive(Debug, thiserror::Error)]
pub enum SampleError {
    /// A negative or non-finite temperature.
    #[error(
        "--temperature {0} must be 0 (always the most likely character) or a positive, finite number, e.g. 0.8"
    )]
    Temperature(f64),
    /// top-k of zero keeps nothing.
    #[error("--top-k 0 would keep no character: give 1 or more (1 is greedy), or leave it out")]
    TopK,
    /// top-p outside (0, 1].
    #[error("--top-p {0} must be in (0, 1], e.g. 0.9 (1 keeps every character)")]
    TopP(f64),
    /// A line break in the prompt, which would end the poem inside it (the message).
    #[error("{0}")]
    LineBreak(String),
    /// More acrostic characters than the form has lines.
    #[error("--acrostic {acrostic} has {} characters but a {form} has {lines} lines: shorten it or choose a longer form", .acrostic.chars().count())]
    AcrosticTooLong {
        /// The acrostic given.
        acrostic: String,
        /// The form's name.
        form: &'static str,
        /// Lines of the form.
        lines: usize,
    },
    /// Punctuation or whitespace in the acrostic.
    #[error("--acrostic may hold only characters that begin lines, not {}", crate::data::error::describe_char(*.0))]
    AcrosticMark(char),
    /// The vocabulary lacks a mark the form needs.
    #[error("the model's vocabulary has no `{}`, which forms need: train on the shipped corpus", .0.escape_debug())]
    MissingMark(char),
    /// The prompt breaks the form or the acrostic.
    #[error("the prompt does not fit {rules}: character {position} is {} where {expected} is needed", crate::data::error::describe_char(*.found))]
    PromptDoesNotFit {
        /// The rules, e.g. "wujue, acrostic 春夏秋冬".
        rules: String,
        /// 1-based position in the prompt (a tune's header, which the program writes, not
        /// counted).
        position: usize,
        /// The character found.
        found: char,
        /// What the rules ask for there.
        expected: String,
    },
    /// Not enough new tokens to finish the form.
    #[error("{shape} needs {needed} more characters after the prompt but --max-new-tokens is {given}: raise it to {needed} or more")]
    TooFewTokens {
        /// What is written: "a wujue", "a ci to the tune 浣溪沙".
        shape: String,
        /// Characters needed, the final newline included.
        needed: usize,
        /// --max-new-tokens.
        given: usize,
    },
    /// --meter without a form to take the templates from.
    #[error("--meter needs a form: add --form wujue, qijue, wulv or qilv (or an --acrostic)")]
    MeterWithoutForm,
    /// The rules leave no token for a place.
    #[error("{rules}: no character of the model's vocabulary fits character {position}; try another prompt or seed")]
    NothingFits {
        /// The rules, e.g. "wujue with its meter".
        rules: String,
        /// 1-based position in the prompt (a tune's header, which the program writes, not
        /// counted).
        position: usize,
    },
    /// A tune whose name the model's vocabulary cannot write.
    #[error("this run cannot write a ci to the tune {0} (it was not trained on ci after their tune's 【】, or its vocabulary lacks the tune's name): --tune needs a run trained on the Song ci, e.g. with configs/ci.toml")]
    TuneNotLearned(String),
    /// A header's field that cannot be written (the message).
    #[error("{0}")]
    Header(String),
    /// An unknown tune, or one without learned tones asked with its meter (the message).
    #[error("{0}")]
    Tune(String),
    /// A header asked of a run trained without them.
    #[error("this run was trained without headers (【poet·title】): --poet and --title need a run trained on data/titled.txt, e.g. with configs/titled.toml")]
    HeaderNotLearned,
    /// A character outside the vocabulary.
    #[error(transparent)]
    Data(#[from] DataError),
}

/// The start of a poem, checked: what the program writes before the model (the newline that
/// opens the poem, its header's given part, the prompt), and the rules the model keeps.
pub struct PoemStart {
    /// The newline and the header's given part (`【李白·秋夜】`, `【浣溪沙】`, or `【李白·` when
    /// the model writes the title): the tokens the model reads first.
    pub opening: Vec<u32>,
    /// The prompt's tokens: the poem's first characters, after the header.
    pub prompt: Vec<u32>,
    /// Where the model writes the rest of the header (a field left to it) before the prompt: the
    /// `】` it ends the header with.
    pub header_end: Option<u32>,
    /// The rules of form, acrostic, meter, tune and header; `None` without rules.
    pub constraint: Option<PoemConstraint>,
    /// Tokens the poem never holds (a header's marks, after its header).
    pub banned: Vec<u32>,
}

impl PoemStart {
    /// The opening's text, without its newline: what is shown before the first drawn character.
    pub fn opening_text(
        &self,
        tokenizer: &CharTokenizer,
    ) -> std::result::Result<String, DataError> {
        tokenizer.decode(&self.opening[1..])
    }

    /// The tokens the model reads before it draws, where the header is written whole: the opening,
    /// then the prompt.
    pub fn ids(&self) -> Vec<u32> {
        [&self.opening[..], &self.prompt].concat()
    }
}

/// The fields of the header a run writes before each poem (`data::header`): 2 for a run trained
/// on `【poet·title】`, 1 for one trained on ci after their `【tune】`, 0 for none. Recorded when
/// the run was trained; a run saved before that is read from its vocabulary (the header's marks)
/// and kind (running text writes none).
pub fn header_fields(tokenizer: &CharTokenizer, data: &DataConfig) -> usize {
    if let Some(fields) = data.header_fields {
        return fields;
    }
    let knows = |marks: &[char]| marks.iter().all(|&c| tokenizer.id(c).is_some());
    match data.trained_kind() {
        CorpusKind::Text => 0,
        _ if knows(&MARKS) => 2,
        _ if knows(&[OPEN, CLOSE]) => 1,
        _ => 0,
    }
}

/// Whether a run was trained on headers of poet and title (`【李白·静夜思】`).
pub fn has_headers(tokenizer: &CharTokenizer, data: &DataConfig) -> bool {
    header_fields(tokenizer, data) == 2 && knows_header_marks(tokenizer)
}

/// Whether `tokenizer`'s vocabulary has the marks of a poet-and-title header: 【, · and 】.
fn knows_header_marks(tokenizer: &CharTokenizer) -> bool {
    MARKS.iter().all(|&c| tokenizer.id(c).is_some())
}

/// Whether a run writes ci by tune: it was trained on ci after their tune's header `【tune】`.
pub fn writes_ci(tokenizer: &CharTokenizer, data: &DataConfig) -> bool {
    let brackets = [OPEN, CLOSE].iter().all(|&c| tokenizer.id(c).is_some());
    brackets && header_fields(tokenizer, data) == 1
}

/// Refuses `what` (something that needs regular verse: a form, an acrostic, a meter) for a run
/// trained on another kind of text.
pub fn check_trained_on_verse(data: &DataConfig, what: &str) -> std::result::Result<(), String> {
    match data.trained_kind() {
        CorpusKind::Verse => Ok(()),
        kind => Err(format!(
            "{what}, but this run was trained on {kind} ({}), not regular verse: use a run trained on verse",
            data.corpus
        )),
    }
}

/// What stands before a run's poem, as the run was trained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opening {
    /// Nothing: a run trained without headers, whose poems never hold a header's marks.
    Plain,
    /// A header of poet and title (each given or left to the model), then the poem without marks.
    Header(HeaderRequest),
    /// What the model writes itself: a ci run writing free (its tune's header first), running
    /// text.
    Own,
}

impl Opening {
    /// The header asked for, if any.
    pub fn header(&self) -> Option<&HeaderRequest> {
        match self {
            Opening::Header(header) => Some(header),
            _ => None,
        }
    }
}

/// What a run's poem opens with: a header of the poet and title asked (each left to the model
/// where not asked) for a run trained on them, the model's own for a ci run or running text, else
/// nothing. Refused: a field that cannot stand in a header, a header asked of a run without
/// headers, and a poet not among `poets` (those of the run's corpus, where known), with the
/// nearest names.
pub fn header_request(
    tokenizer: &CharTokenizer,
    data: &DataConfig,
    (poet, title): (Option<String>, Option<String>),
    poets: Option<&Poets>,
) -> std::result::Result<Opening, SampleError> {
    let request = HeaderRequest { poet, title };
    if request.fields().iter().all(Option::is_none) {
        return Ok(match has_headers(tokenizer, data) {
            true => Opening::Header(request),
            false if writes_ci(tokenizer, data) || data.trained_kind() == CorpusKind::Text => {
                Opening::Own
            }
            false => Opening::Plain,
        });
    }
    request.check().map_err(SampleError::Header)?;
    if !has_headers(tokenizer, data) {
        return Err(SampleError::HeaderNotLearned);
    }
    if let (Some(poet), Some(poets)) = (&request.poet, poets) {
        poets.check(poet).map_err(SampleError::Header)?;
    }
    Ok(Opening::Header(request))
}

/// The start of a poem after `opening` (a header of its poet and title, each given or left to
/// the model; nothing; or the model's own), checked against the rules of `--form`, `--acrostic`
/// and `--meter` (and that `max_new_tokens` can finish the form), with the constraint that keeps
/// those rules while it is written (`None` without rules: any text, verse or not). Unless the
/// opening is the model's own, the poem holds no header mark.
pub fn poem_start(
    tokenizer: &CharTokenizer,
    opening: &Opening,
    prompt: &str,
    (form, acrostic, meter): (Option<Form>, &str, bool),
    max_new_tokens: usize,
) -> std::result::Result<PoemStart, SampleError> {
    let header = opening.header();
    if let Some(header) = header {
        header.check().map_err(SampleError::Header)?;
        if !knows_header_marks(tokenizer) {
            return Err(SampleError::HeaderNotLearned);
        }
        if let Some(c) = prompt.chars().find(|c| MARKS.contains(c)) {
            return Err(SampleError::Header(format!(
                "the prompt holds {c}, which marks a header: give the poem's beginning as the prompt, and its poet and title in their own fields (--poet, --title)"
            )));
        }
    }
    let header_left = header.is_some_and(|h| h.fields().contains(&None));
    let given = header.map(HeaderRequest::given_prefix).unwrap_or_default();
    let mut start = checked_start(tokenizer, &given, prompt)?;
    start.header_end = tokenizer.id(CLOSE).filter(|_| header_left);
    if *opening != Opening::Own {
        start.banned = MARKS.iter().filter_map(|&c| tokenizer.id(c)).collect();
    }
    if form.is_none() && acrostic.is_empty() && !meter && !header_left {
        return Ok(start);
    }
    let mut constraint = PoemConstraint::new(tokenizer, form, acrostic)?;
    if meter {
        constraint = constraint.with_meter(Tables::shipped())?;
    }
    if let (true, Some(header)) = (header_left, header) {
        constraint = constraint.with_header(tokenizer, header)?;
    }
    constraint.check_start(
        &[&start.opening[..1], &start.prompt].concat(),
        max_new_tokens,
    )?;
    start.constraint = Some(constraint);
    Ok(start)
}

/// The most characters per poem where none is asked for: 120 (a regular poem is under 100), or for
/// a ci to the tune `name` in the form `form` asks for (`--tune-form`), what that form needs (its
/// characters and marks, and the newline that ends it) where that is more. A tune or form that does
/// not exist is refused later, with the names.
pub fn default_max_new_tokens(tune: Option<(&str, &str)>) -> usize {
    let needed = tune.and_then(|(name, form)| {
        let tune = Tunes::shipped().get(name).ok()?;
        let pattern = tune.form(tune.choose_form(form).ok()?).ok()?;
        Some(pattern.len() + 1)
    });
    needed.map_or(120, |needed| needed.max(120))
}

/// The start of a ci to the tune named `name` (`--tune`, the page's tune box) in the form `form`
/// asks for (`--tune-form`: a number or a pattern; empty: the commonest) for a run with this
/// vocabulary, trained on `data`, with the form's tones and rhymes if `meter`: [`tune_start`] once
/// the tune is known (else the nearest names) and has that form, the run writes ci, and the form
/// has learned tones.
pub fn ci_start(
    (tokenizer, data): (&CharTokenizer, &DataConfig),
    (name, form, meter): (&str, &str, bool),
    prompt: &str,
    max_new_tokens: usize,
) -> std::result::Result<PoemStart, SampleError> {
    let tune = Tunes::shipped().get(name).map_err(SampleError::Tune)?;
    let form = tune.choose_form(form).map_err(SampleError::Tune)?;
    if !writes_ci(tokenizer, data) {
        return Err(SampleError::TuneNotLearned(name.to_string()));
    }
    let meter = match meter {
        true => Some(
            TuneMeters::shipped()
                .meter_of(name, form)
                .map_err(SampleError::Tune)?,
        ),
        false => None,
    };
    let start = tune_start(tokenizer, (tune, form, meter), prompt, max_new_tokens);
    match start {
        Err(e) if !prompt.is_empty() => {
            let asked = (tune, form, meter.is_some());
            Err(other_form_hint(tokenizer, asked, prompt, e))
        }
        start => start,
    }
}

/// `e`, the error of a ci to `tune`'s form `form` (with its meter where `meter`) after `prompt`,
/// with the form the prompt fits where it fits another and not this one.
fn other_form_hint(
    tokenizer: &CharTokenizer,
    (tune, form, meter): (&Tune, usize, bool),
    prompt: &str,
    e: SampleError,
) -> SampleError {
    let fits = |n: usize| tune_start(tokenizer, (tune, n, None), prompt, usize::MAX / 2).is_ok();
    if fits(form) {
        return e; // the prompt fits: something else is wrong
    }
    let Some(n) = tune.forms().map(|f| f.0).find(|&n| n != form && fits(n)) else {
        return e;
    };
    let toned = TuneMeters::shipped().get_form(&tune.name, n).is_some();
    let what = match (meter && !toned, form) {
        (true, _) => format!("give --tune-form {n} without --meter (its tones were not learned)"),
        (false, 1) => format!("add --tune-form {n}"),
        (false, _) => format!("give --tune-form {n}"),
    };
    SampleError::Tune(format!(
        "{e}; the prompt fits form {n} of {}: {what}",
        tune.name
    ))
}

/// The start of a ci to `tune` in its form `form` (`--tune`, `--tune-form`): the newline, the
/// tune's header `【tune】` and the prompt's tokens, checked against the form's pattern (and its tones and rhymes with `meter`,
/// `--meter`) and that `max_new_tokens` can finish it, with the constraint that keeps them while
/// it is written.
pub fn tune_start(
    tokenizer: &CharTokenizer,
    (tune, form, meter): (&Tune, usize, Option<&TuneMeter>),
    prompt: &str,
    max_new_tokens: usize,
) -> std::result::Result<PoemStart, SampleError> {
    let pattern = tune.form(form).map_err(SampleError::Tune)?;
    if let Some(meter) = meter.filter(|m| m.pattern() != *pattern) {
        return Err(SampleError::Tune(format!(
            "the meter of {}'s form {} is not of its form {form}: give the meter of the form asked for",
            meter.name, meter.form
        )));
    }
    let mut constraint = PoemConstraint::for_tune(tokenizer, &tune.name, pattern)?;
    if let Some(meter) = meter {
        constraint = constraint.with_tune_meter(meter, Tables::shipped(), Cilin::shipped());
    }
    let mut start = checked_start(tokenizer, "", prompt)?;
    start.opening.extend(
        tokenizer
            .encode(&tune_header(&tune.name))
            .map_err(|_| SampleError::TuneNotLearned(tune.name.clone()))?,
    );
    constraint.check_start(&start.ids(), max_new_tokens)?;
    start.constraint = Some(constraint);
    start.banned = [OPEN, CLOSE]
        .iter()
        .filter_map(|&c| tokenizer.id(c))
        .collect();
    Ok(start)
}

/// The newline that opens a poem and the tokens of `header` (the header's given part), then
/// the prompt's (one line), without rules yet.
fn checked_start(
    tokenizer: &CharTokenizer,
    header: &str,
    prompt: &str,
) -> std::result::Result<PoemStart, SampleError> {
    one_line(prompt, "the prompt").map_err(SampleError::LineBreak)?;
    let newline = tokenizer
        .id(NEWLINE)
        .ok_or(SampleError::MissingMark(NEWLINE))?;
    let header_ids = tokenizer.encode(header).map_err(|e| {
        SampleError::Header(format!("this run cannot write the header {header}: {e}"))
    })?;
    Ok(PoemStart {
        opening: [&[newline][..], &header_ids].concat(),
        prompt: tokenizer.encode(prompt)?,
        header_end: None,
        constraint: None,
        banned: Vec::new(),
    })
}

/// What to generate and how.
#[derive(Clone, Copy)]
pub struct Generation<'a> {
    /// Most tokens to add.
    pub max_new_tokens: usize,
    /// How each token is drawn.
    pub sampling: Sampling,
    /// Stop after this token (the newline that ends a poem), if given.
    pub stop: Option<u32>,
    /// Form and acrostic rules, if any.
    pub constraint: Option<&'a PoemConstraint>,
    /// Keep keys and values between steps (true) or recompute the whole context each step.
    pub use_cache: bool,
    /// Stop early when this is set (a client that went away), if given.
    pub cancel: Option<&'a AtomicBool>,
    /// Tokens never drawn.
    pub banned: &'a [u32],
}

impl Generation<'_> {
    /// `max_new_tokens` tokens drawn with `sampling`, stopping after `stop`, with the cache.
    pub fn new(max_new_tokens: usize, sampling: Sampling, stop: Option<u32>) -> Self {
        Generation {
            max_new_tokens,
            sampling,
            stop,
            constraint: None,
            use_cache: true,
            cancel: None,
            banned: &[],
        }
    }
}

/// Continues `prompt` (at least one token) by up to `gen.max_new_tokens` tokens. Each new token is
/// passed to `on_token` as soon as it is drawn (for streaming); all of them are returned.
///
/// A context that outgrows block_size is cropped, as nanoGPT does, but in jumps: to its last
/// block_size/2 tokens, so that the cache is rebuilt once per half block rather than at every
/// step (each crop moves every token's position). Every scheme crops, so that the model never
/// sees a context longer than it was trained on and each new token costs the same however long
/// the text grows. Cached and uncached decoding crop alike.
///
/// On the CPU the cached steps read the weight matrices in [`WeightFormat::fastest`] (f16 where
/// the CPU converts it in hardware, each logit within about 10⁻³ of the exact one, so a draw
/// close to a boundary may come out differently); [`Generator::with_weights`] chooses.
/// To generate several times from one model, a [`Generator`] packs the weights only once.
pub fn generate(
    model: &Gpt,
    prompt: &[u32],
    gen: &Generation,
    rng: &mut ChaCha8Rng,
    on_token: &mut (dyn FnMut(u32) + Send),
) -> Result<Vec<u32>> {
    Generator::new(model).generate(prompt, gen, rng, on_token)
}

/// Generates from one model again and again, keeping the CPU decoder's packed weights from one
/// generation to the next. Once [prepared](Generator::prepare), several threads may generate
/// with it at once ([`Generator::generate_prepared`]; the decoder's phases take turns). The
/// model's weights must not change while it lives.
pub struct Generator<'m> {
    model: &'m Gpt,
    /// Made by [`Generator::prepare`]; `Some(None)` when the model does not take the CPU path.
    decoder: Option<Option<CpuDecoder<'m>>>,
    /// How the CPU decoder stores its weight matrices.
    format: WeightFormat,
}

impl<'m> Generator<'m> {
    /// A generator for `model` with the fastest weight format of this CPU; the weights are packed
    /// by the first generation that needs them.
    pub fn new(model: &'m Gpt) -> Self {
        Self::with_weights(model, WeightFormat::fastest())
    }

    /// A generator whose cached steps on the CPU read the weight matrices in `format`
    /// ([`WeightFormat::F32`]: the exact products of the model's weights).
    pub fn with_weights(model: &'m Gpt, format: WeightFormat) -> Self {
        Generator {
            model,
            decoder: None,
            format,
        }
    }

    /// Packs the weights for the CPU decoder, once.
    pub fn prepare(&mut self) -> Result<()> {
        if self.decoder.is_none() {
            self.decoder = Some(CpuDecoder::new(self.model, self.format)?);
        }
        Ok(())
    }

    /// As [`generate`].
    pub fn generate(
        &mut self,
        prompt: &[u32],
        gen: &Generation,
        rng: &mut ChaCha8Rng,
        on_token: &mut (dyn FnMut(u32) + Send),
    ) -> Result<Vec<u32>> {
        self.prepared_for(gen)?
            .generate_prepared(prompt, gen, rng, on_token)
    }

    /// Writes the poem that `start` begins, under its rules (`gen.constraint` is `start`'s): the
    /// header's fields left to the model (ended by its `】`), the prompt, then the poem. Returns
    /// the tokens after the opening, each passed to `on_token` as it is drawn or, for the prompt's,
    /// written. With the header given whole, the same as [`generate`] from [`PoemStart::ids`].
    pub fn write(
        &mut self,
        start: &PoemStart,
        gen: &Generation,
        rng: &mut ChaCha8Rng,
        on_token: &mut (dyn FnMut(u32) + Send),
    ) -> Result<Vec<u32>> {
        self.prepared_for(gen)?
            .write_prepared(start, gen, rng, on_token)
    }

    /// This generator, its weights packed if `gen` uses the cache.
    fn prepared_for(&mut self, gen: &Generation) -> Result<&Self> {
        if gen.use_cache {
            self.prepare()?;
        }
        Ok(self)
    }

    /// As [`Generator::write`], from a generator that [`Generator::prepare`] has packed (if the
    /// cache is used).
    pub fn write_prepared(
        &self,
        start: &PoemStart,
        gen: &Generation,
        rng: &mut ChaCha8Rng,
        on_token: &mut (dyn FnMut(u32) + Send),
    ) -> Result<Vec<u32>> {
        let gen = Generation {
            constraint: start.constraint.as_ref(),
            banned: &start.banned,
            ..*gen
        };
        let mut written = Vec::new();
        if let Some(end) = start.header_end {
            let header = Generation {
                max_new_tokens: HEADER_TOKENS,
                stop: Some(end),
                banned: &[],
                ..gen
            };
            written = self.generate_prepared(&start.opening, &header, rng, on_token)?;
        }
        start.prompt.iter().for_each(|&id| on_token(id));
        written.extend(&start.prompt);
        let context = [&start.opening[..], &written].concat();
        written.extend(self.generate_prepared(&context, &gen, rng, on_token)?);
        Ok(written)
    }

    /// As [`generate`], from a generator that [`Generator::prepare`] has packed (if the cache
    /// is used).
    pub fn generate_prepared(
        &self,
        prompt: &[u32],
        gen: &Generation,
        rng: &mut ChaCha8Rng,
        on_token: &mut (dyn FnMut(u32) + Send),
    ) -> Result<Vec<u32>> {
        if prompt.is_empty() {
            bail!("generation needs at least one token to start from (the newline that begins a poem)")
        }
        if gen.use_cache && self.decoder.is_none() {
            bail!("the generator's weights are not packed: call Generator::prepare first")
        }
        let decoder = self.decoder.as_ref().and_then(Option::as_ref);
        // The loop runs on a worker of the thread pool, so that the ops' parallel loops start
        // there instead of each handing its work over from the main thread (which costs more than
        // a one-token step).
        rayon::scope(|_| decode(self.model, decoder, prompt, gen, rng, on_token))
    }
}

/// The decoding loop of [`generate`], with the CPU decoder if the model has one.
fn decode(
    model: &Gpt,
    decoder: Option<&CpuDecoder>,
    prompt: &[u32],
    gen: &Generation,
    rng: &mut ChaCha8Rng,
    on_token: &mut (dyn FnMut(u32) + Send),
) -> Result<Vec<u32>> {
    let window = context_window(model);
    let mut context = prompt.to_vec();
    let mut start = 0; // the first token of the context the model sees

    // The CPU decoder's keys and values of the context so far; other devices recompute.
    let mut cache = decoder
        .filter(|_| gen.use_cache)
        .map(|decoder| (decoder, decoder.new_state()));
    let mut new = Vec::new();
    for _ in 0..gen.max_new_tokens {
        if gen.cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
            break;
        }
        let cropped = crop(start, context.len(), window);
        if cropped != start {
            start = cropped;
            if let Some((_, state)) = &mut cache {
                state.clear();
            }
        }
        let mut logits = match &mut cache {
            Some((decoder, state)) => decoder.forward(&context[start + state.len()..], state)?,
            None => next_logits(model, &context[start..])?,
        };
        if let Some(constraint) = gen.constraint {
            constraint
                .mask(&context, &mut logits)
                .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
        }
        for &id in gen.banned {
            logits[id as usize] = f32::NEG_INFINITY;
        }
        let next = gen.sampling.draw(&logits, rng);
        context.push(next);
        new.push(next);
        on_token(next);
        if Some(next) == gen.stop {
            break;
        }
    }
    Ok(new)
}

/// The most tokens the model sees at once in generation: the block it was trained on.
fn context_window(model: &Gpt) -> usize {
    model.config().block_size
}

/// Where the context the model sees starts, for a text of `len` tokens whose context started at
/// `start`: where it outgrows `window`, its last window/2 tokens (generation's crop, in jumps).
fn crop(start: usize, len: usize, window: usize) -> usize {
    match len - start > window {
        true => len - (window / 2).max(1),
        false => start,
    }
}

/// For each length 1..=n of a text generated from its first token, where the context that the
/// model sees begins (generation's [`crop`]).
fn context_starts(model: &Gpt, n: usize) -> impl Iterator<Item = usize> {
    let window = context_window(model);
    (1..=n).scan(0, move |start, len| {
        *start = crop(*start, len, window);
        Some(*start)
    })
}

/// Where the context begins that the model saw the last of `len` tokens in, when they were
/// generated from the first: 0 unless it outgrew the block, and generation cropped it.
pub fn context_start(model: &Gpt, len: usize) -> usize {
    context_starts(model, len).last().unwrap_or(0)
}

/// The model's mean negative log-likelihood (nats per token) of `ids[1..]`, each token given the
/// ones before it: how likely the model finds a text (the first token, e.g. the newline that
/// opens a poem, is given). Past the block size each token is given the context
/// that generation would have given it (see [`crop`]).
pub fn mean_nll(model: &Gpt, ids: &[u32]) -> Result<f64> {
    mean_nll_after(model, ids, 1)
}

/// The model's mean negative log-likelihood of `ids[given..]`, each token given the ones before
/// it: the first `given` tokens (at least one: the newline that opens a poem, and a header) are
/// read but not counted. As [`mean_nll`] past the block size.
pub fn mean_nll_after(model: &Gpt, ids: &[u32], given: usize) -> Result<f64> {
    if given == 0 || ids.len() <= given {
        bail!("a likelihood needs at least one token after the {given} given")
    }
    // Target t is predicted from ids[starts[t - 1]..t]; runs of equal starts share a forward pass.
    let starts: Vec<usize> = context_starts(model, ids.len() - 1).collect();
    let (mut total, mut first) = (0.0, 1);
    for run in starts.chunk_by(|a, b| a == b) {
        let (start, targets) = (run[0], first..first + run.len());
        first = targets.end;
        if targets.end <= given {
            continue; // only given tokens: nothing to count
        }
        let x = Tensor::new(&ids[start..targets.end - 1], model.device())?.unsqueeze(0)?; // (1, T)
        let logits = model
            .forward(&x, &mut crate::model::Mode::Eval)?
            .squeeze(0)?; // (T, V)
        let log_p: Vec<Vec<f32>> = candle_nn::ops::log_softmax(&logits, 1)?.to_vec2()?; // (T, V)
        for target in targets.filter(|&t| t >= given) {
            total -= f64::from(log_p[target - 1 - start][ids[target] as usize]);
        }
    }
    Ok(total / (ids.len() - given) as f64)
}

/// Logits (V,) after `context`, recomputing every position (nanoGPT's way).
fn next_logits(model: &Gpt, context: &[u32]) -> Result<Vec<f32>> {
    let idx = Tensor::new(context, model.device())?.unsqueeze(0)?; // (1, T)
    model.forward_last(&idx)?.get(0)?.to_vec1() // (V,)
}

/// Whether `poem` is well-formed verse: a regular form (4 or 8 lines, all of 5 or all of 7
/// characters) whose lines end alternately with ，and 。.
pub fn is_well_formed(poem: &str) -> bool {
    let poem = without_header(poem);
    if crate::data::poem::regular_form(poem).is_none() {
        return false;
    }
    let marks: Vec<char> = poem
        .chars()
        .filter(|c| crate::data::poem::PUNCTUATION.contains(c))
        .collect();
    marks
        .iter()
        .enumerate()
        .all(|(i, &c)| c == if i % 2 == 0 { '，' } else { '。' })
}
