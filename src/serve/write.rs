//! Writing with a run over HTTP: its poems streamed as they are drawn, what its heads look at, the
//! order experiment; and a poem scored and set line by line, with or without a run. What each
//! answers is [`crate::page`]'s, which the static page's wasm module answers too.

use super::{blocking, params, training, ApiError, Served};
use crate::page::{self, InspectParams, PoemEvent, PoemParams, PoemRequest, ScoreParams};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::Json;
use serde::Deserialize;
use serde_json::Value;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};

/// Which run: its name in the runs list; absent or empty for the server's default run.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunParams {
    run: Option<String>,
}

/// `GET /api/info?run=…`: [`page::info`] for the run asked for (the default one when none is;
/// `run` null and `no_run` saying why when the server has none), with the configs the page can
/// train from.
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
    let run = open
        .as_ref()
        .map(|o| page::run_info(&o.name, o.run(), o.poets()));
    Ok(Json(page::info(
        run,
        why_none,
        &training::shipped_configs(),
    )))
}

/// `GET /api/generate?prompt=…&form=…`: the poem as server-sent events ([`PoemEvent`]): `opening`,
/// `token` as each character is drawn, then `done` or `error`. The same parameters and seed give
/// what `sample` gives.
pub async fn generate(
    State(served): State<Arc<Served>>,
    query: Result<Query<PoemParams>, QueryRejection>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let mut p = params(query)?;
    let open = served.open(p.run.take()).await?;
    let request = PoemRequest::new(open.run(), open.poets(), p)?;
    let permit = served.poem_permit()?;
    let (events, received) = mpsc::channel(64);
    tokio::task::spawn_blocking(move || {
        let cancel = AtomicBool::new(false);
        let mut send = |event: PoemEvent| {
            let sse = Event::default().event(event.name()).data(event.data());
            if events.blocking_send(sse).is_err() {
                cancel.store(true, Ordering::Relaxed); // nobody listens
            }
        };
        open.with_generator(|run, generator| {
            page::write_poem(run, generator, request, &cancel, &mut send)
        });
        drop(permit);
    });
    let stream = ReceiverStream::new(received).map(Ok);
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// `GET /api/inspect?text=…`: [`page::inspect`].
pub async fn inspect(
    State(served): State<Arc<Served>>,
    query: Result<Query<InspectParams>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let mut p = params(query)?;
    let open = served.open(p.run.take()).await?;
    blocking(&served, move || Ok(page::inspect(open.run(), &p)?))
        .await
        .map(Json)
}

/// `GET /api/order?run=…`: [`page::order`].
pub async fn order(
    State(served): State<Arc<Served>>,
    query: Result<Query<RunParams>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let open = served.open(params(query)?.run).await?;
    blocking(&served, move || {
        Ok(page::order(open.run(), &open.untrained)?)
    })
    .await
    .map(Json)
}

/// `GET /api/score?text=…`: [`page::score`]; no run is needed.
pub async fn score(
    query: Result<Query<ScoreParams>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(page::score(&params(query)?)?))
}
