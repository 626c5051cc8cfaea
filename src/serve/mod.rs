//! The local web page (`cargo run --release --bin serve`): watch runs train and compare them,
//! write poems and look inside the model.
//!
//! One axum router: the page itself (HTML, CSS and JS compiled into the binary, nothing fetched
//! from elsewhere); the runs under the folder of runs with their curves ([`runs`]), and a run
//! trained by `train` started, watched and stopped from the page ([`training`]); for any run with
//! weights ([`open`]), a poem streamed as server-sent events while it is drawn, each head's
//! attention and the next-character probabilities for a text, and the order experiment of
//! `heads_positions` for it and for untrained models; a poem scored and set line by line with
//! its tones. Generation runs on blocking threads, one per poem, at most [`Limits::poems`] at
//! once; a client that goes away stops its poem. Bad parameters get a 4xx with a JSON error. Who
//! may be answered, and for how long a connection may hold its place, is [`http`]'s.

pub mod http;
mod open;
pub mod runs;
pub mod training;
mod write;

use crate::train::run_dir::MODEL_FILE;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::Query;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use open::{OpenRun, Shelf};
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use training::Trainer;

pub use crate::page::{MAX_NEW_TOKENS, MAX_TEXT_CHARS};

/// How much work the server takes on at once, and how long connections may take.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Poems written at once; one more is answered 503 at once (2 cores share them).
    pub poems: usize,
    /// Looks inside the model (`/api/inspect`, `/api/order`) at once, apart from the poems, so
    /// that the page still answers while the poems are at their bound.
    pub looks: usize,
    /// Pages following the training at once (`/api/train/events`); one more is answered 503.
    pub watchers: usize,
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
            watchers: 8,
            queue: Duration::from_secs(10),
            deadlines: http::Deadlines::default(),
        }
    }
}

/// Where the server finds runs, and how much it takes on.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The folder of runs (checkpoints/): listed, opened by name, and where runs trained from
    /// the page go.
    pub root: PathBuf,
    /// The run the page writes with when it names none (`--checkpoint`, else the newest).
    pub default_run: Option<PathBuf>,
    pub limits: Limits,
    /// The `train` program that the page's training runs; `None`: the page cannot train.
    pub train_exe: Option<PathBuf>,
}

/// What the server holds: the runs it has open, its one training, and its places for work.
pub struct Served {
    root: PathBuf,
    default_run: Option<PathBuf>,
    shelf: Shelf,
    trainer: Trainer,
    limits: Limits,
    /// A permit per poem being written, and per look.
    poems: Arc<Semaphore>,
    looks: Arc<Semaphore>,
    watchers: Arc<Semaphore>,
}

impl Served {
    pub fn new(options: ServeOptions) -> Self {
        let limits = options.limits;
        Served {
            trainer: Trainer::new(options.train_exe, options.root.clone()),
            root: options.root,
            default_run: options.default_run,
            shelf: Shelf::default(),
            poems: Arc::new(Semaphore::new(limits.poems)),
            looks: Arc::new(Semaphore::new(limits.looks)),
            watchers: Arc::new(Semaphore::new(limits.watchers)),
            limits,
        }
    }

    /// Stops the training started from the page, if one runs, and waits for it to save its
    /// checkpoint and end (see [`Trainer::finish`]).
    pub fn finish_training(&self) {
        self.trainer.finish();
    }

    /// The run named `name` (the default run when `None`), loaded or taken from the shelf; a
    /// 400 for a name that is no run with weights.
    async fn open(self: &Arc<Self>, name: Option<String>) -> Result<Arc<OpenRun>, ApiError> {
        let (name, dir) = match name.filter(|n| !n.is_empty()) {
            Some(name) => {
                let dir = runs::run_dir(&self.root, &name).map_err(ApiError::bad)?;
                (name, dir)
            }
            None => {
                let dir = self.default_run.clone().ok_or_else(|| {
                    ApiError::bad("there is no run to write with yet: train one (the page's Runs view), or name one with run=")
                })?;
                (runs::run_name(&self.root, &dir), dir)
            }
        };
        if !dir.join(MODEL_FILE).is_file() {
            return Err(ApiError::bad(format!(
                "run {name} has no weights to write with (yet: its first evaluation writes them): choose a run the list shows with a loss"
            )));
        }
        let served = self.clone();
        let load = move || served.shelf.get(&name, &dir).map_err(ApiError::bad);
        tokio::task::spawn_blocking(load)
            .await
            .map_err(ApiError::internal)?
    }

    /// A place among the poems being written, or a 503 that says the server is full.
    fn poem_permit(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        place_now(&self.poems, || {
            format!(
                "the server is writing {} poems already, as many as it writes at once: try again when one ends",
                self.limits.poems
            )
        })
    }

    /// A place among the pages following the training, or a 503 that says the server is full.
    fn watcher_permit(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        place_now(&self.watchers, || {
            format!(
                "{} pages are following the training already, as many as the server streams it to: close one",
                self.limits.watchers
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

/// A place of `places` at once, or a 503 with `message`.
fn place_now(
    places: &Arc<Semaphore>,
    message: impl FnOnce() -> String,
) -> Result<OwnedSemaphorePermit, ApiError> {
    places
        .clone()
        .try_acquire_owned()
        .map_err(|_| ApiError(StatusCode::SERVICE_UNAVAILABLE, message()))
}

/// The page and its API.
pub fn router(served: Arc<Served>) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/api/info", get(write::info))
        .route("/api/generate", get(write::generate))
        .route("/api/inspect", get(write::inspect))
        .route("/api/order", get(write::order))
        .route("/api/score", get(write::score))
        .route("/api/runs", get(runs::list))
        .route("/api/run", get(runs::detail))
        .route("/api/train", get(training::status).post(training::start))
        .route("/api/train/stop", post(training::stop))
        .route("/api/train/events", get(training::events))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(served)
}

/// What the API answers: shown by the 404 and the 405.
const API: &str = "GET /api/info, /api/generate, /api/inspect, /api/order, /api/score, /api/runs, /api/run, /api/train and /api/train/events; POST /api/train and /api/train/stop";

/// A method a path does not take.
async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{method} {}: the page's API answers {API}", uri.path()),
    )
}

/// Any other path: a 404 that names what there is.
async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError(
        StatusCode::NOT_FOUND,
        format!(
            "nothing at {}: the page is at / and its API at {API}",
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
    /// A 400 with `message` in the page's words ([`crate::page::page_words`]).
    fn bad(message: impl std::fmt::Display) -> Self {
        ApiError(
            StatusCode::BAD_REQUEST,
            crate::page::page_words(&message.to_string()),
        )
    }

    /// A 409 (the request is good, the runs' state refuses it) in the page's words.
    fn conflict(message: impl std::fmt::Display) -> Self {
        ApiError(
            StatusCode::CONFLICT,
            crate::page::page_words(&message.to_string()),
        )
    }

    fn internal(message: impl std::fmt::Display) -> Self {
        ApiError(StatusCode::INTERNAL_SERVER_ERROR, message.to_string())
    }
}

impl From<crate::page::Refusal> for ApiError {
    fn from(refusal: crate::page::Refusal) -> Self {
        match refusal {
            crate::page::Refusal::Bad(message) => ApiError::bad(message),
            crate::page::Refusal::Internal(message) => ApiError::internal(message),
        }
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

/// A JSON body, or a 400 (415 without the JSON content type) that says what is wrong with it.
fn body<T>(body: Result<Json<T>, JsonRejection>) -> Result<T, ApiError> {
    body.map(|Json(b)| b).map_err(|e| {
        ApiError(
            e.status(),
            format!("the request's body is not valid: {}", e.body_text()),
        )
    })
}

/// Runs `work` on a blocking thread (model work is CPU-bound) once a look's place is free.
async fn blocking<T: Send + 'static>(
    served: &Served,
    work: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let permit = served.look_permit().await?;
    let outcome = tokio::task::spawn_blocking(work).await;
    drop(permit);
    outcome.map_err(ApiError::internal)?
}

async fn page() -> Html<&'static str> {
    Html(include_str!("page.html"))
}
