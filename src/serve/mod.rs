//! The local web page (`cargo run --release --bin serve`): write poems and look inside the model.
//!
//! One axum router: the page itself (HTML, CSS and JS compiled into the binary, nothing fetched
//! from elsewhere), a poem streamed as server-sent events while it is drawn, each head's attention
//! and the next-character probabilities for a text, and the order experiment of `heads_positions`
//! for the loaded model and for untrained ones. Generation runs on blocking threads, one per
//! poem, at most [`Limits::poems`] at once; a client that goes away stops its poem. Bad
//! parameters get a 400 with a JSON error. Who may be answered, and for how long a connection
//! may hold its place, is [`http`]'s.

pub mod http;

use crate::config::CorpusKind;
use crate::data::poem::{one_line, Form};
use crate::data::tokenizer::NEWLINE;
use crate::experiments::attention_maps::attention_weights;
use crate::experiments::lesson::{self, order_diff, Report};
use crate::model::Mode;
use crate::sample::{context_start, poem_start, Generation, Generator, PoemConstraint, Sampling};
use crate::train::checkpoint::LoadedRun;
use crate::verse::{score_poem, Tables};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};

/// The most characters one poem may ask for.
pub const MAX_NEW_TOKENS: usize = 1_000;
/// The longest prompt, and the longest text to inspect, in characters.
pub const MAX_TEXT_CHARS: usize = 200;
// A text to inspect is drawn with the newline that opens it.
const _: () = assert!(MAX_TEXT_CHARS < crate::experiments::attention_maps::MAX_CHARS);
/// Next characters listed per position.
const TOP_NEXT: usize = 8;

/// How much work the server takes on at once, and how long connections may take.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Poems written at once; one more is answered 503 at once (2 cores share them).
    pub poems: usize,
    /// Looks inside the model (`/api/inspect`, `/api/order`) at once, apart from the poems, so
    /// that the page still answers while the poems are at their bound.
    pub looks: usize,
    /// How long a look waits for its turn before a 503.
    pub queue: Duration,
    /// Deadlines of every connection.
    pub deadlines: http::Deadlines,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            poems: 4,
            looks: 2,
            queue: Duration::from_secs(10),
            deadlines: http::Deadlines::default(),
        }
    }
}

/// What the server holds: one trained run, for the rest of the process, and one generator for
/// it, whose packed weights and threads every poem shares.
pub struct Served {
    pub run: &'static LoadedRun,
    generator: &'static Generator<'static>,
    /// The run's name, shown on the page.
    pub name: String,
    /// The order experiment on untrained models, computed on first request.
    untrained: OnceLock<Report>,
    limits: Limits,
    /// A permit per poem being written, and per look.
    poems: Arc<Semaphore>,
    looks: Arc<Semaphore>,
}

impl Served {
    /// `run` served with the default [`Limits`].
    pub fn new(run: LoadedRun, name: String) -> anyhow::Result<Self> {
        Self::with_limits(run, name, Limits::default())
    }

    /// `run` served within `limits`, its weights packed for generation once. The run and its
    /// generator are kept until the process ends (a server serves one run for its whole life),
    /// so that the generator can borrow the run and every poem's thread can borrow both.
    pub fn with_limits(run: LoadedRun, name: String, limits: Limits) -> anyhow::Result<Self> {
        let run: &'static LoadedRun = Box::leak(Box::new(run));
        let mut generator = Generator::new(&run.model);
        generator.prepare()?;
        let generator = Box::leak(Box::new(generator));
        Ok(Served {
            run,
            generator,
            name,
            untrained: OnceLock::new(),
            poems: Arc::new(Semaphore::new(limits.poems)),
            looks: Arc::new(Semaphore::new(limits.looks)),
            limits,
        })
    }

    /// A place among the poems being written, or a 503 that says the server is full.
    fn poem_permit(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        self.poems.clone().try_acquire_owned().map_err(|_| {
            ApiError(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the server is writing {} poems already, as many as it writes at once: try again when one ends",
                    self.limits.poems
                ),
            )
        })
    }

    /// A place among the looks inside the model, waiting up to [`Limits::queue`] for it.
    async fn look_permit(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        let wait = tokio::time::timeout(self.limits.queue, self.looks.clone().acquire_owned());
        match wait.await {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(ApiError(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the server is busy looking inside the model for {} other requests: try again in a moment",
                    self.limits.looks
                ),
            )),
        }
    }
}

/// The page and its API.
pub fn router(served: Arc<Served>) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/api/info", get(info))
        .route("/api/generate", get(generate))
        .route("/api/inspect", get(inspect))
        .route("/api/order", get(order))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(served)
}

/// A method other than GET on one of the page's paths.
async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError(
        StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "{method} {}: the page and its API answer GET only",
            uri.path()
        ),
    )
}

/// Any other path or method: a 404 that names what there is.
async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError(
        StatusCode::NOT_FOUND,
        format!(
            "nothing at {}: the page is at / and its API at GET /api/info, /api/generate, /api/inspect and /api/order",
            uri.path()
        ),
    )
}

/// Serves `served` on `listener` until the process ends, to its own host names and page only.
pub async fn serve(listener: tokio::net::TcpListener, served: Arc<Served>) -> std::io::Result<()> {
    let deadlines = served.limits.deadlines;
    http::serve_connections(listener, router(served), deadlines).await
}

/// An answer other than 200: its status and a JSON body `{"error": message}`.
pub struct ApiError(StatusCode, String);

impl ApiError {
    fn bad(message: impl std::fmt::Display) -> Self {
        ApiError(StatusCode::BAD_REQUEST, message.to_string())
    }

    fn internal(message: impl std::fmt::Display) -> Self {
        ApiError(StatusCode::INTERNAL_SERVER_ERROR, message.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(json!({ "error": self.1 }))).into_response()
    }
}

/// The query's parameters, or a 400 that says what is wrong with them.
fn params<T>(query: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    query.map(|Query(p)| p).map_err(|e| {
        let text = e.body_text();
        let what = text.strip_prefix("Failed to deserialize query string: ");
        ApiError::bad(format!(
            "a parameter is not valid: {}",
            what.unwrap_or(&text)
        ))
    })
}

/// A message of the sampling rules as the API gives it: their command-line flags (`--top-k`)
/// named as the query's parameters (`top_k`).
fn as_parameters(message: impl std::fmt::Display) -> ApiError {
    let mut text = message.to_string();
    for flag in [
        "temperature",
        "top-k",
        "top-p",
        "max-new-tokens",
        "form",
        "acrostic",
        "meter",
    ] {
        text = text.replace(&format!("--{flag}"), &flag.replace('-', "_"));
    }
    ApiError::bad(text)
}

/// A yes-or-no parameter: true, 1, on or yes; false, 0, off or no.
fn yes_or_no<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    let text = String::deserialize(d)?;
    match text.to_ascii_lowercase().as_str() {
        "true" | "1" | "on" | "yes" => Ok(true),
        "false" | "0" | "off" | "no" => Ok(false),
        _ => Err(serde::de::Error::custom(format!(
            "`{}` is neither true nor false (1 or 0)",
            text.escape_debug()
        ))),
    }
}

/// Runs `work` on a blocking thread (model work is CPU-bound) once a look's place is free.
async fn blocking<T: Send + 'static>(
    served: Arc<Served>,
    work: impl FnOnce(&Served) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let permit = served.look_permit().await?;
    let outcome = tokio::task::spawn_blocking(move || work(&served)).await;
    drop(permit);
    outcome.map_err(ApiError::internal)?
}

async fn page() -> Html<&'static str> {
    Html(include_str!("page.html"))
}

async fn info(State(served): State<Arc<Served>>) -> Json<Value> {
    let cfg = &served.run.config.model;
    Json(json!({
        "run": served.name,
        "model": cfg,
        "corpus_kind": served.run.config.train.trained_kind(),
        "forms": Form::ALL.map(Form::name),
    }))
}

/// What a poem is asked for with.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoemParams {
    #[serde(default)]
    prompt: String,
    /// wujue, qijue, wulv or qilv; empty for none.
    #[serde(default)]
    form: String,
    #[serde(default)]
    acrostic: String,
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
    prompt: String,
    ids: Vec<u32>,
    constraint: Option<PoemConstraint>,
    sampling: Sampling,
    seed: u64,
    max_new_tokens: usize,
}

/// Checks `p` against the run's vocabulary and the rules of form, acrostic and meter.
fn poem_request(served: &Served, p: PoemParams) -> Result<PoemRequest, ApiError> {
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
    let form = match p.form.as_str() {
        "" => None,
        name => Some(name.parse::<Form>().map_err(as_parameters)?),
    };
    if form.is_some() || !p.acrostic.is_empty() || p.meter {
        let train = &served.run.config.train;
        train
            .check_verse("form, acrostic and meter write regulated verse")
            .map_err(ApiError::bad)?;
    }
    let rules = (form, p.acrostic.as_str(), p.meter);
    let (ids, constraint) = poem_start(&served.run.tokenizer, &p.prompt, rules, p.max_new_tokens)
        .map_err(as_parameters)?;
    Ok(PoemRequest {
        prompt: p.prompt,
        ids,
        constraint,
        sampling,
        seed: p.seed,
        max_new_tokens: p.max_new_tokens,
    })
}

/// `GET /api/generate?prompt=…&form=…`: the poem as server-sent events, `token` (one character)
/// as each is drawn, then `done` (`{"text", "verse"}`, the whole poem and its score) or `error`.
/// The same parameters and seed give what `sample` gives.
async fn generate(
    State(served): State<Arc<Served>>,
    query: Result<Query<PoemParams>, QueryRejection>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let request = poem_request(&served, params(query)?)?;
    let permit = served.poem_permit()?;
    let (events, received) = mpsc::channel(64);
    tokio::task::spawn_blocking(move || {
        write_poem(&served, request, events);
        drop(permit);
    });
    let stream = ReceiverStream::new(received).map(Ok);
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// Draws the poem of `request`, sending each character to `events`; stops when nobody listens.
fn write_poem(served: &Served, request: PoemRequest, events: mpsc::Sender<Event>) {
    let (run, cancel) = (&served.run, AtomicBool::new(false));
    let verse = run.config.train.trained_kind() == CorpusKind::Verse;
    // Running text goes on past its newlines, which are part of it.
    let running = run.config.train.trained_kind() == CorpusKind::Text;
    let newline = request.ids[0];
    let stop = (!running).then_some(newline);
    let gen = Generation {
        constraint: request.constraint.as_ref(),
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
    let drawn = served
        .generator
        .generate_prepared(&request.ids, &gen, &mut rng, &mut on_token);
    let last = drawn.map_err(|e| e.to_string()).and_then(|ids| {
        let new = run.tokenizer.decode(&ids).map_err(|e| e.to_string())?;
        let text = format!("{}{}", request.prompt, new.trim_end_matches(NEWLINE));
        let verse = verse.then(|| score_poem(&text, Tables::shipped()));
        Event::default()
            .event("done")
            .json_data(json!({ "text": text, "verse": verse }))
            .map_err(|e| e.to_string())
    });
    send(last.unwrap_or_else(|message| Event::default().event("error").data(message)));
}

/// A text to look inside.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InspectParams {
    text: String,
}

/// `GET /api/inspect?text=…`: for the text after the newline that opens a poem, every layer's and
/// head's attention weights (`attention[layer][head][row]`, rows of the text's length + 1, zero
/// after the row's own position) and the most likely next characters at each position. Where a
/// text outgrows the block and generation crops the context, they are those of the context in which
/// generation from the opening newline reads the text's last character: `chars` from the text's
/// character `offset` on (0: the newline).
async fn inspect(
    State(served): State<Arc<Served>>,
    query: Result<Query<InspectParams>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let p = params(query)?;
    blocking(served, move |served| look_inside(served, &p.text))
        .await
        .map(Json)
}

fn look_inside(served: &Served, text: &str) -> Result<Value, ApiError> {
    let (model, tokenizer) = (&served.run.model, &served.run.tokenizer);
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
    let next = next_characters(served, &ids).map_err(ApiError::internal)?;
    let chars: Vec<String> = full.chars().map(|c| c.to_string()).collect();
    Ok(json!({ "chars": chars, "offset": offset, "attention": attention, "next": next }))
}

/// The [`TOP_NEXT`] most likely next characters after each position of `ids`, with their
/// probabilities.
fn next_characters(served: &Served, ids: &[u32]) -> anyhow::Result<Vec<Vec<(String, f32)>>> {
    let model = &served.run.model;
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
                .map(|id| Ok((served.run.tokenizer.decode(&[id as u32])?, row[id])))
                .collect()
        })
        .collect()
}

/// `GET /api/order`: the lesson's question, does a model tell 白日依山尽 from 山依日白尽, for the
/// loaded model and for untrained models of 1–3 layers and every positional scheme.
async fn order(State(served): State<Arc<Served>>) -> Result<Json<Value>, ApiError> {
    blocking(served, |served| {
        let (model, tokenizer) = (&served.run.model, &served.run.tokenizer);
        let loaded = order_diff(model, tokenizer).map_err(ApiError::bad)?;
        let (sentence, shuffled) = lesson::order_pair(tokenizer).map_err(ApiError::bad)?;
        if served.untrained.get().is_none() {
            let report = lesson::run(tokenizer, 1337).map_err(ApiError::internal)?;
            let _ = served.untrained.set(report);
        }
        Ok(Json(json!({
            "sentence": sentence,
            "shuffled": shuffled,
            "loaded": { "layers": model.config().n_layer, "position": model.config().position, "diff": loaded },
            "untrained": served.untrained.get().map(|r| &r.order_leak),
        })))
    })
    .await
}
