//! Writing with a run: its poems streamed as they are drawn, what its heads look at, the order
//! experiment; and a poem scored and set line by line, with or without a run.

use super::open::OpenRun;
use super::{as_parameters, blocking, params, training, yes_or_no, ApiError, Served};
use crate::config::{CorpusKind, Position};
use crate::data::poem::{one_line, Form};
use crate::data::tokenizer::NEWLINE;
use crate::experiments::attention_maps::attention_weights;
use crate::experiments::lesson::{self, order_diff};
use crate::model::Mode;
use crate::sample::{
    ci_start, context_start, has_headers, header_request, poem_start, writes_ci, Generation,
    Generator, PoemStart, Sampling,
};
use crate::train::checkpoint::LoadedRun;
use crate::verse::tunes::score_ci;
use crate::verse::{mark_poem, score_poem, Tables, Tunes};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::Json;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};

/// The most characters one poem may ask for.
pub const MAX_NEW_TOKENS: usize = 1_000;
/// The longest prompt, and the longest text to inspect or score, in characters.
pub const MAX_TEXT_CHARS: usize = 200;
// A text to inspect is drawn with the newline that opens it.
const _: () = assert!(MAX_TEXT_CHARS < crate::experiments::attention_maps::MAX_CHARS);
/// Poets offered in the page's poet box (most poems first).
const LISTED_POETS: usize = 300;
/// Tunes offered in the page's tune box (most ci first).
const LISTED_TUNES: usize = 300;

/// Next characters listed per position.
const TOP_NEXT: usize = 8;

/// Which run: its name in the runs list; absent or empty for the server's default run.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunParams {
    run: Option<String>,
}

/// `GET /api/info?run=…`: the run the page writes with (`run` null and `no_run` saying why when
/// the server has none), the forms, the positional schemes and the configs the page can train
/// from.
pub async fn info(
    State(served): State<Arc<Served>>,
    query: Result<Query<RunParams>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let name = params(query)?.run;
    let asked = name.as_ref().is_some_and(|n| !n.is_empty());
    // Without a run asked for, the page still opens (to train one), saying why it has none.
    let (open, why_none) = match served.open(name).await {
        Ok(open) => (Some(open), None),
        Err(e) if !asked => (None, Some(e.1)),
        Err(e) => return Err(e),
    };
    let run = open.as_ref().map(|o| {
        let (run, kind) = (o.run(), o.run().config.data.trained_kind());
        let poets = o.poets().map(|p| {
            p.counts()
                .iter()
                .take(LISTED_POETS)
                .map(|(name, _)| name)
                .collect::<Vec<_>>()
        });
        json!({
            "name": o.name,
            "model": run.config.model,
            "corpus_kind": kind,
            "headers": has_headers(&run.tokenizer, kind),
            "poets": poets,
            "tunes": writes_ci(&run.tokenizer, kind).then(|| Tunes::shipped().all().iter().take(LISTED_TUNES).map(|t| t.name.as_str()).collect::<Vec<_>>()),
        })
    });
    Ok(Json(json!({
        "run": run,
        "no_run": why_none,
        "forms": Form::ALL.map(Form::name),
        "positions": Position::ALL.map(Position::name),
        "configs": training::shipped_configs(),
    })))
}

/// What a poem is asked for with.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoemParams {
    run: Option<String>,
    #[serde(default)]
    prompt: String,
    /// wujue, qijue, wulv or qilv; empty for none.
    #[serde(default)]
    form: String,
    #[serde(default)]
    acrostic: String,
    /// The poet and the title of the poem's header, for a run trained with headers; empty: left
    /// to the model.
    #[serde(default)]
    poet: String,
    #[serde(default)]
    title: String,
    /// A ci's tune (词牌), for a run trained on the Song ci; empty for none.
    #[serde(default)]
    tune: String,
    #[serde(default = "default_temperature")]
    temperature: f64,
    top_k: Option<usize>,
    top_p: Option<f64>,
    #[serde(default)]
    seed: u64,
    #[serde(default, deserialize_with = "yes_or_no")]
    meter: bool,
    #[serde(default = "default_max_new_tokens")]
    max_new_tokens: usize,
}

fn default_temperature() -> f64 {
    0.8
}

fn default_max_new_tokens() -> usize {
    120
}

/// A poem checked and ready to be drawn.
struct PoemRequest {
    start: PoemStart,
    sampling: Sampling,
    seed: u64,
    max_new_tokens: usize,
}

/// Checks `p` against the run's vocabulary (and its corpus's poets) and the rules of header,
/// form, acrostic and meter.
fn poem_request(open: &OpenRun, p: PoemParams) -> Result<PoemRequest, ApiError> {
    let run = open.run();
    let sampling = Sampling {
        temperature: p.temperature,
        top_k: p.top_k,
        top_p: p.top_p,
    };
    sampling.validate().map_err(as_parameters)?;
    if !(1..=MAX_NEW_TOKENS).contains(&p.max_new_tokens) {
        return Err(ApiError::bad(format!(
            "max_new_tokens must be 1 to {MAX_NEW_TOKENS} (a poem is under 100 characters)"
        )));
    }
    if p.prompt.chars().count() > MAX_TEXT_CHARS {
        return Err(ApiError::bad(format!(
            "the prompt has more than {MAX_TEXT_CHARS} characters: give the beginning of one poem"
        )));
    }
    let start = match p.tune.is_empty() {
        true => poem_start_of(open, &p)?,
        false => ci_start_of(run, &p)?,
    };
    Ok(PoemRequest {
        start,
        sampling,
        seed: p.seed,
        max_new_tokens: p.max_new_tokens,
    })
}

/// The start of the poem `p` asks for: its header, form, acrostic and meter checked against the
/// run's vocabulary (and its corpus's poets).
fn poem_start_of(open: &OpenRun, p: &PoemParams) -> Result<PoemStart, ApiError> {
    let run = open.run();
    let form = match p.form.as_str() {
        "" => None,
        name => Some(name.parse::<Form>().map_err(as_parameters)?),
    };
    if form.is_some() || !p.acrostic.is_empty() || p.meter {
        run.config
            .data
            .check_verse("form, acrostic and meter write regulated verse")
            .map_err(ApiError::bad)?;
    }
    let rules = (form, p.acrostic.as_str(), p.meter);
    let asked = |field: &String| (!field.is_empty()).then(|| field.clone());
    let poets = (!p.poet.is_empty()).then(|| open.poets()).flatten();
    let header = header_request(
        &run.tokenizer,
        run.config.data.trained_kind(),
        (asked(&p.poet), asked(&p.title)),
        poets,
    )
    .map_err(as_parameters)?;
    poem_start(
        &run.tokenizer,
        header.as_ref(),
        &p.prompt,
        rules,
        p.max_new_tokens,
    )
    .map_err(as_parameters)
}

/// The start of the ci to `p.tune` (with its tones and rhymes where `p.meter`), checked as
/// `sample --tune` checks it; form, acrostic and header are not for a ci.
fn ci_start_of(run: &LoadedRun, p: &PoemParams) -> Result<PoemStart, ApiError> {
    if !(p.form.is_empty() && p.acrostic.is_empty() && p.poet.is_empty() && p.title.is_empty()) {
        return Err(ApiError::bad(
            "a ci takes its tune's shape: leave form, acrostic, poet and title empty",
        ));
    }
    let kind = run.config.data.trained_kind();
    ci_start(
        (&run.tokenizer, kind),
        (&p.tune, p.meter),
        &p.prompt,
        p.max_new_tokens,
    )
    .map_err(as_parameters)
}

/// `GET /api/generate?prompt=…&form=…`: the poem as server-sent events: `opening` (the header's
/// part the program writes, if any), `token` (one character) as each is drawn or, for the
/// prompt's, written, then `done` (`{"text", "verse"}`, the whole poem and its score) or `error`.
/// The same parameters and seed give what `sample` gives.
pub async fn generate(
    State(served): State<Arc<Served>>,
    query: Result<Query<PoemParams>, QueryRejection>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let mut p = params(query)?;
    let open = served.open(p.run.take()).await?;
    let request = poem_request(&open, p)?;
    let permit = served.poem_permit()?;
    let (events, received) = mpsc::channel(64);
    tokio::task::spawn_blocking(move || {
        open.with_generator(|run, generator| write_poem(run, generator, request, events));
        drop(permit);
    });
    let stream = ReceiverStream::new(received).map(Ok);
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// Draws the poem of `request`, sending each character to `events`; stops when nobody listens.
fn write_poem(
    run: &LoadedRun,
    generator: &Generator,
    request: PoemRequest,
    events: mpsc::Sender<Event>,
) {
    let cancel = AtomicBool::new(false);
    let verse = run.config.data.trained_kind() == CorpusKind::Verse;
    // Running text goes on past its newlines, which are part of it.
    let running = run.config.data.trained_kind() == CorpusKind::Text;
    let newline = request.start.opening[0];
    let stop = (!running).then_some(newline);
    let gen = Generation {
        cancel: Some(&cancel),
        ..Generation::new(request.max_new_tokens, request.sampling, stop)
    };
    let mut rng = ChaCha8Rng::seed_from_u64(request.seed);
    let send = |event: Event| {
        if events.blocking_send(event).is_err() {
            cancel.store(true, Ordering::Relaxed);
        }
    };
    let mut on_token = |id: u32| {
        if Some(id) != stop {
            send(
                Event::default()
                    .event("token")
                    .data(run.tokenizer.decode(&[id]).unwrap_or_default()),
            );
        }
    };
    let opening = request
        .start
        .opening_text(&run.tokenizer)
        .unwrap_or_default();
    if !opening.is_empty() {
        send(Event::default().event("opening").data(&opening));
    }
    let drawn = generator.write_prepared(&request.start, &gen, &mut rng, &mut on_token);
    let last = drawn.map_err(|e| e.to_string()).and_then(|ids| {
        let new = run.tokenizer.decode(&ids).map_err(|e| e.to_string())?;
        let text = format!("{opening}{}", new.trim_end_matches(NEWLINE));
        let verse = verse.then(|| score_poem(&text, Tables::shipped()));
        let marks = (!running).then(|| mark_poem(&text, Tables::shipped()));
        let ci = score_ci(&text, Tunes::shipped());
        let said = ci.as_ref().map(|c| c.describe());
        Event::default()
            .event("done")
            .json_data(
                json!({ "text": text, "verse": verse, "marks": marks, "ci": ci, "said": said }),
            )
            .map_err(|e| e.to_string())
    });
    send(last.unwrap_or_else(|message| Event::default().event("error").data(message)));
}

/// A text to look inside.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InspectParams {
    run: Option<String>,
    text: String,
}

/// `GET /api/inspect?text=…`: for the text after the newline that opens a poem, every layer's and
/// head's attention weights (`attention[layer][head][row]`, rows of the text's length + 1, zero
/// after the row's own position) and the most likely next characters at each position. Where a
/// text outgrows the block and generation crops the context, they are those of the context in which
/// generation from the opening newline reads the text's last character: `chars` from the text's
/// character `offset` on (0: the newline).
pub async fn inspect(
    State(served): State<Arc<Served>>,
    query: Result<Query<InspectParams>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let mut p = params(query)?;
    let open = served.open(p.run.take()).await?;
    blocking(&served, move || look_inside(open.run(), &p.text))
        .await
        .map(Json)
}

fn look_inside(run: &LoadedRun, text: &str) -> Result<Value, ApiError> {
    let (model, tokenizer) = (&run.model, &run.tokenizer);
    let length = text.chars().count();
    if !(1..=MAX_TEXT_CHARS).contains(&length) {
        return Err(ApiError::bad(format!(
            "text must have 1 to {MAX_TEXT_CHARS} characters, not {length}"
        )));
    }
    one_line(text, "text").map_err(ApiError::bad)?;
    let offset = context_start(model, length + 1);
    let full: String = std::iter::once(NEWLINE)
        .chain(text.chars())
        .skip(offset)
        .collect();
    let ids = tokenizer.encode(&full).map_err(ApiError::bad)?;
    let layers = attention_weights(model, tokenizer, &full).map_err(ApiError::bad)?;
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
    let next = next_characters(run, &ids).map_err(ApiError::internal)?;
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

/// `GET /api/order?run=…`: the lesson's question, does a model tell 白日依山尽 from 山依日白尽,
/// for the run's model and for untrained models of 1–3 layers and every positional scheme.
pub async fn order(
    State(served): State<Arc<Served>>,
    query: Result<Query<RunParams>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let open = served.open(params(query)?.run).await?;
    blocking(&served, move || {
        let (model, tokenizer) = (&open.run().model, &open.run().tokenizer);
        let loaded = order_diff(model, tokenizer).map_err(ApiError::bad)?;
        let (sentence, shuffled) = lesson::order_pair(tokenizer).map_err(ApiError::bad)?;
        if open.untrained.get().is_none() {
            let report = lesson::run(tokenizer, 1337).map_err(ApiError::internal)?;
            let _ = open.untrained.set(report);
        }
        Ok(Json(json!({
            "sentence": sentence,
            "shuffled": shuffled,
            "loaded": { "layers": model.config().n_layer, "position": model.config().position, "diff": loaded },
            "untrained": open.untrained.get().map(|r| &r.order_leak),
        })))
    })
    .await
}

/// A poem to score.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScoreParams {
    text: String,
}

/// `GET /api/score?text=…`: a poem typed or pasted in (one line), scored as regulated verse and
/// set line by line with its tones, as a written poem is; no run is needed.
pub async fn score(
    query: Result<Query<ScoreParams>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let text = params(query)?.text.trim().to_string();
    let length = text.chars().count();
    if !(1..=MAX_TEXT_CHARS).contains(&length) {
        return Err(ApiError::bad(format!(
            "text must have 1 to {MAX_TEXT_CHARS} characters, not {length}: paste one poem"
        )));
    }
    one_line(&text, "text").map_err(ApiError::bad)?;
    // A ci (`【tune】text`) is judged by its tune, as `score` judges it; its text set alone.
    if let Some(ci) = score_ci(&text, Tunes::shipped()) {
        let marks = mark_poem(&text, Tables::shipped());
        let said = ci.describe();
        return Ok(Json(
            json!({ "text": text, "verse": null, "ci": ci, "said": said, "marks": marks }),
        ));
    }
    let (verse, marks) = (
        score_poem(&text, Tables::shipped()),
        mark_poem(&text, Tables::shipped()),
    );
    Ok(Json(
        json!({ "text": text, "verse": verse, "marks": marks }),
    ))
}
