//! Looking inside a run's model (what each head attends to, the next characters, the lesson's
//! order experiment), and a poem scored and set line by line, with or without a run.

use super::{Refusal, MAX_TEXT_CHARS};
use crate::data::poem::one_line;
use crate::data::tokenizer::NEWLINE;
use crate::experiments::attention_maps::attention_weights;
use crate::experiments::lesson::{self, order_diff, Report};
use crate::model::Mode;
use crate::sample::context_start;
use crate::train::load::LoadedRun;
use crate::verse::ci_score::score_ci;
use crate::verse::{mark_poem, score_poem, Tables, Tunes};
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::OnceLock;

/// Next characters listed per position.
const TOP_NEXT: usize = 8;

/// A text to look inside.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InspectParams {
    /// The run (the server's); absent or empty for the default one.
    pub run: Option<String>,
    text: String,
}

/// For the text after the newline that opens a poem, every layer's and head's attention weights
/// (`attention[layer][head][row]`, rows of the text's length + 1, zero after the row's own
/// position) and the most likely next characters at each position. Where a text outgrows the
/// block and generation crops the context, they are those of the context in which generation from
/// the opening newline reads the text's last character: `chars` from the text's character
/// `offset` on (0: the newline).
pub fn inspect(run: &LoadedRun, p: &InspectParams) -> Result<Value, Refusal> {
    let (model, tokenizer, text) = (&run.model, &run.tokenizer, &p.text);
    let length = text.chars().count();
    if !(1..=MAX_TEXT_CHARS).contains(&length) {
        return Err(Refusal::bad(format!(
            "text must have 1 to {MAX_TEXT_CHARS} characters, not {length}"
        )));
    }
    one_line(text, "text").map_err(Refusal::bad)?;
    let offset = context_start(model, length + 1);
    let full: String = std::iter::once(NEWLINE)
        .chain(text.chars())
        .skip(offset)
        .collect();
    let ids = tokenizer.encode(&full).map_err(Refusal::bad)?;
    let layers = attention_weights(model, tokenizer, &full).map_err(Refusal::bad)?;
    let t = ids.len();
    let n_head = model.config().n_head;
    let attention: Vec<Vec<Vec<&[f32]>>> = layers
        .iter()
        .map(|w| {
            (0..n_head)
                .map(|h| w[h * t * t..(h + 1) * t * t].chunks(t).collect())
                .collect()
        })
        .collect();
    let next = next_characters(run, &ids).map_err(Refusal::internal)?;
    let chars: Vec<String> = full.chars().map(|c| c.to_string()).collect();
    Ok(json!({ "chars": chars, "offset": offset, "attention": attention, "next": next }))
}

/// The [`TOP_NEXT`] most likely next characters after each position of `ids`, with their
/// probabilities.
fn next_characters(run: &LoadedRun, ids: &[u32]) -> anyhow::Result<Vec<Vec<(String, f32)>>> {
    let model = &run.model;
    let idx = candle_core::Tensor::new(ids, model.device())?.unsqueeze(0)?; // (1, T)
    let logits = model.forward(&idx, &mut Mode::Eval)?; // (1, T, V)
    let probs = candle_nn::ops::softmax_last_dim(&logits)?
        .squeeze(0)?
        .to_vec2::<f32>()?; // (T, V)
    probs
        .iter()
        .map(|row| {
            let mut order: Vec<usize> = (0..row.len()).collect();
            order.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
            order
                .into_iter()
                .take(TOP_NEXT)
                .map(|id| Ok((run.tokenizer.decode(&[id as u32])?, row[id])))
                .collect()
        })
        .collect()
}

/// The lesson's question, does a model tell 白日依山尽 from 山依日白尽, for the run's model and
/// for untrained models of 1–3 layers and every positional scheme (computed once into
/// `untrained`, for the run's vocabulary).
pub fn order(run: &LoadedRun, untrained: &OnceLock<Report>) -> Result<Value, Refusal> {
    let (model, tokenizer) = (&run.model, &run.tokenizer);
    let loaded = order_diff(model, tokenizer).map_err(Refusal::bad)?;
    let (sentence, shuffled) = lesson::order_pair(tokenizer).map_err(Refusal::bad)?;
    if untrained.get().is_none() {
        let report = lesson::run(tokenizer, 1337).map_err(Refusal::internal)?;
        let _ = untrained.set(report);
    }
    Ok(json!({
        "sentence": sentence,
        "shuffled": shuffled,
        "loaded": { "layers": model.config().n_layer, "position": model.config().position, "diff": loaded },
        "untrained": untrained.get().map(|r| &r.order_leak),
    }))
}

/// A poem to score.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScoreParams {
    text: String,
}

/// A poem typed or pasted in (one line), scored as regulated verse and set line by line with its
/// tones, as a written poem is; no run is needed.
pub fn score(p: &ScoreParams) -> Result<Value, Refusal> {
    let text = p.text.trim();
    let length = text.chars().count();
    if !(1..=MAX_TEXT_CHARS).contains(&length) {
        return Err(Refusal::bad(format!(
            "text must have 1 to {MAX_TEXT_CHARS} characters, not {length}: paste one poem"
        )));
    }
    one_line(text, "text").map_err(Refusal::bad)?;
    let marks = mark_poem(text, Tables::shipped());
    // A ci (`【tune】text`) is judged by its tune, as `score` judges it; its text set alone.
    if let Some(ci) = score_ci(text, Tunes::shipped()) {
        let said = ci.describe();
        return Ok(json!({ "text": text, "verse": null, "ci": ci, "said": said, "marks": marks }));
    }
    let verse = score_poem(text, Tables::shipped());
    Ok(json!({ "text": text, "verse": verse, "marks": marks }))
}
