//! Generating text from a model: the decoding loop (with or without the key/value cache), how
//! the next token is drawn, and form control.

pub mod constraint;
pub mod draw;
pub mod meter;

pub use constraint::PoemConstraint;
pub use draw::Sampling;

use crate::data::poem::{one_line, Form};
use crate::data::tokenizer::NEWLINE;
use crate::data::{CharTokenizer, DataError};
use crate::engine::CpuDecoder;
use crate::model::Gpt;
use crate::ops::WeightFormat;
use crate::verse::tunes::{tune_header, Tune};
use crate::verse::Tables;
use candle_core::{bail, Result, Tensor};
use rand_chacha::ChaCha8Rng;
use std::sync::atomic::{AtomicBool, Ordering};

/// The longest text that `sample` and `score` give the model at once, a prompt or a poem to score,
/// in characters (a long poem has under 200; the attention of T characters takes T × T weights
/// per head).
pub const MAX_POEM_CHARS: usize = 1_000;

/// Sampling settings that cannot work, each with what to do instead.
#[derive(Debug, thiserror::Error)]
pub enum SampleError {
    /// A negative or non-finite temperature.
    #[error(
        "--temperature {0} must be 0 (always the most likely character) or positive, e.g. 0.8"
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
    #[error("this model cannot write the tune {0}'s name (a character or the brackets 【】 are not in its vocabulary): --tune needs a run trained on the Song ci, e.g. with configs/ci.toml")]
    TuneNotLearned(String),
    /// A character outside the vocabulary.
    #[error(transparent)]
    Data(#[from] DataError),
}

/// The start of a poem: the newline that opens it and the prompt's tokens, checked against the
/// rules of `--form`, `--acrostic` and `--meter` (and that `max_new_tokens` can finish the form),
/// with the constraint that keeps those rules while it is written (`None` without rules: any
/// text, verse or not).
pub fn poem_start(
    tokenizer: &CharTokenizer,
    prompt: &str,
    (form, acrostic, meter): (Option<Form>, &str, bool),
    max_new_tokens: usize,
) -> std::result::Result<(Vec<u32>, Option<PoemConstraint>), SampleError> {
    let ids = start_ids(tokenizer, "", prompt)?;
    if form.is_none() && acrostic.is_empty() && !meter {
        return Ok((ids, None));
    }
    let mut constraint = PoemConstraint::new(tokenizer, form, acrostic)?;
    if meter {
        constraint = constraint.with_meter(Tables::shipped())?;
    }
    constraint.check_start(&ids, max_new_tokens)?;
    Ok((ids, Some(constraint)))
}

/// The start of a ci to `tune` (`--tune`): the newline, the tune's header `【tune】` and the
/// prompt's tokens, checked against the tune's pattern (and that `max_new_tokens` can finish it),
/// with the constraint that keeps the pattern while it is written.
pub fn tune_start(
    tokenizer: &CharTokenizer,
    tune: &Tune,
    prompt: &str,
    max_new_tokens: usize,
) -> std::result::Result<(Vec<u32>, PoemConstraint), SampleError> {
    let constraint = PoemConstraint::for_tune(tokenizer, tune)?;
    let ids = start_ids(tokenizer, &tune_header(&tune.name), prompt)?;
    constraint.check_start(&ids, max_new_tokens)?;
    Ok((ids, constraint))
}

/// The newline that opens a poem, then the tokens of `opening` and `prompt` (one line).
fn start_ids(
    tokenizer: &CharTokenizer,
    opening: &str,
    prompt: &str,
) -> std::result::Result<Vec<u32>, SampleError> {
    one_line(prompt, "the prompt").map_err(SampleError::LineBreak)?;
    let newline = tokenizer
        .id(NEWLINE)
        .ok_or(SampleError::MissingMark(NEWLINE))?;
    let mut ids = vec![newline];
    ids.extend(tokenizer.encode(opening)?);
    ids.extend(tokenizer.encode(prompt)?);
    Ok(ids)
}

/// What to generate and how.
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
        if gen.use_cache {
            self.prepare()?;
        }
        self.generate_prepared(prompt, gen, rng, on_token)
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
    if ids.len() < 2 {
        bail!("a likelihood needs at least one token after the first")
    }
    // Target t is predicted from ids[starts[t - 1]..t]; runs of equal starts share a forward pass.
    let starts: Vec<usize> = context_starts(model, ids.len() - 1).collect();
    let (mut total, mut first) = (0.0, 1);
    for run in starts.chunk_by(|a, b| a == b) {
        let (start, targets) = (run[0], first..first + run.len());
        first = targets.end;
        let x = Tensor::new(&ids[start..targets.end - 1], model.device())?.unsqueeze(0)?; // (1, T)
        let logits = model
            .forward(&x, &mut crate::model::Mode::Eval)?
            .squeeze(0)?; // (T, V)
        let log_p: Vec<Vec<f32>> = candle_nn::ops::log_softmax(&logits, 1)?.to_vec2()?; // (T, V)
        for target in targets {
            total -= f64::from(log_p[target - 1 - start][ids[target] as usize]);
        }
    }
    Ok(total / (ids.len() - 1) as f64)
}

/// Logits (V,) after `context`, recomputing every position (nanoGPT's way).
fn next_logits(model: &Gpt, context: &[u32]) -> Result<Vec<f32>> {
    let idx = Tensor::new(context, model.device())?.unsqueeze(0)?; // (1, T)
    model.forward_last(&idx)?.get(0)?.to_vec1() // (V,)
}

/// Whether `poem` is well-formed verse: a regular form (4 or 8 lines, all of 5 or all of 7
/// characters) whose lines end alternately with ，and 。.
pub fn is_well_formed(poem: &str) -> bool {
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
