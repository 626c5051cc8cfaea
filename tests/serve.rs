//! The web page's server over HTTP: started on an ephemeral port inside the test, called as a
//! browser would. The streamed poem is `sample`'s for the same seed, the attention rows are
//! causal and sum to 1, bad parameters get a 400 with a JSON error, and several poems stream at
//! once.

mod common;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use shige::data::poem::Form;
use shige::sample::{generate, poem_start, Generation, Sampling};
use shige::serve::{serve, Served};
use shige::train::checkpoint::load_run;
use std::io::BufRead;
use std::sync::Arc;

/// A tiny trained run served on 127.0.0.1 at an ephemeral port; its base URL.
fn start_server(dir: &std::path::Path) -> String {
    let mut cfg = common::tiny_config();
    cfg.train.max_iters = 20;
    common::run(&cfg, dir, false, None).unwrap();
    let served = Arc::new(Served::new(load_run(dir).unwrap(), "tiny".into()));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            serve(listener, served).await.unwrap();
        })
    });
    format!("http://{address}")
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

/// GET `path` with `query`: (status, body).
fn get(base: &str, path: &str, query: &[(&str, &str)]) -> (u16, String) {
    let mut request = agent().get(format!("{base}{path}"));
    for (k, v) in query {
        request = request.query(*k, *v);
    }
    let mut response = request.call().unwrap();
    let status = response.status().as_u16();
    (status, response.body_mut().read_to_string().unwrap())
}

/// The events of a server-sent stream: (event, data) in order.
fn events(base: &str, query: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut request = agent().get(format!("{base}/api/generate"));
    for (k, v) in query {
        request = request.query(*k, *v);
    }
    let mut response = request.call().unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let reader = std::io::BufReader::new(response.body_mut().as_reader());
    let (mut all, mut event) = (Vec::new(), String::new());
    for line in reader.lines() {
        let line = line.unwrap();
        if let Some(name) = line.strip_prefix("event: ") {
            event = name.to_string();
        } else if let Some(data) = line.strip_prefix("data: ") {
            all.push((event.clone(), data.to_string()));
        } else if line == "data:" {
            all.push((event.clone(), String::new()));
        }
    }
    all
}

/// The poem `sample` writes with the same settings: `--form` and `--seed` only.
fn sampled(dir: &std::path::Path, form: Form, seed: u64) -> String {
    let run = load_run(dir).unwrap();
    let (ids, constraint) = poem_start(&run.tokenizer, "", (Some(form), "", false), 120).unwrap();
    let gen = Generation {
        constraint: Some(&constraint),
        ..Generation::new(120, Sampling::with_temperature(0.8), Some(ids[0]))
    };
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let new = generate(&run.model, &ids, &gen, &mut rng, &mut |_| {}).unwrap();
    run.tokenizer.decode(&new).unwrap().trim_end().to_string()
}

#[test]
fn the_page_streams_poems_and_shows_attention() {
    let tmp = tempfile::tempdir().unwrap();
    let base = start_server(tmp.path());

    let (status, page) = get(&base, "/", &[]);
    assert_eq!(status, 200);
    assert!(page.contains("<canvas id=\"heatmap\""), "the page");

    // The streamed poem: one `token` per character, then `done` with the whole text and its
    // score; the same text as `sample` with that seed.
    let streamed = events(&base, &[("form", "wujue"), ("seed", "3")]);
    let (last, tokens) = streamed.split_last().unwrap();
    assert_eq!(last.0, "done", "{streamed:?}");
    let done: serde_json::Value = serde_json::from_str(&last.1).unwrap();
    let text = done["text"].as_str().unwrap();
    assert!(tokens.iter().all(|(e, _)| e == "token"));
    assert_eq!(
        tokens.iter().map(|(_, d)| d.as_str()).collect::<String>(),
        text
    );
    assert_eq!(text, sampled(tmp.path(), Form::Wujue, 3));
    assert_eq!(done["verse"]["form"], "wujue");

    // Inside: every layer's and head's rows are causal and sum to 1.
    let (status, body) = get(&base, "/api/inspect", &[("text", text)]);
    assert_eq!(status, 200, "{body}");
    let inside: serde_json::Value = serde_json::from_str(&body).unwrap();
    let t = text.chars().count() + 1; // the opening newline
    assert_eq!(inside["chars"].as_array().unwrap().len(), t);
    assert_eq!(inside["offset"], 0);
    let layers = inside["attention"].as_array().unwrap();
    assert_eq!(layers.len(), common::tiny_config().model.n_layer);
    for heads in layers {
        assert_eq!(
            heads.as_array().unwrap().len(),
            common::tiny_config().model.n_head
        );
        for rows in heads.as_array().unwrap() {
            for (i, row) in rows.as_array().unwrap().iter().enumerate() {
                let row: Vec<f64> = row
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_f64().unwrap())
                    .collect();
                assert_eq!(row.len(), t);
                assert!(
                    (row.iter().sum::<f64>() - 1.0).abs() < 1e-5,
                    "row {i}: {row:?}"
                );
                assert!(
                    row[i + 1..].iter().all(|&w| w == 0.0),
                    "row {i} looks ahead"
                );
            }
        }
    }
    let next = inside["next"].as_array().unwrap();
    assert_eq!(next.len(), t);
    let first: f64 = next[0][0][1].as_f64().unwrap();
    assert!(first > 0.0 && first <= 1.0);

    // Past the learned table's 32 positions, the context generation read the last character in:
    // at 33 tokens it was cropped to the last 16, so for 49 (a newline and 48 characters) it
    // starts at token 17.
    assert_eq!(common::tiny_config().model.block_size, 32);
    let corpus = std::fs::read_to_string(common::tiny_config().train.corpus).unwrap();
    let long: String = corpus.lines().flat_map(str::chars).take(48).collect();
    let (status, body) = get(&base, "/api/inspect", &[("text", &long)]);
    assert_eq!(status, 200, "{body}");
    let inside: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(inside["offset"], 17);
    let chars: String = inside["chars"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(chars, long.chars().skip(16).collect::<String>());
    let rows = inside["attention"][0][0].as_array().unwrap();
    assert_eq!(
        (rows.len(), inside["next"].as_array().unwrap().len()),
        (32, 32)
    );

    // The lesson's experiment.
    let (status, body) = get(&base, "/api/order", &[]);
    assert_eq!(status, 200, "{body}");
    let order: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(order["untrained"].as_array().unwrap().len(), 15);
}

#[test]
fn bad_parameters_get_a_json_error() {
    let tmp = tempfile::tempdir().unwrap();
    let base = start_server(tmp.path());
    // (path, query, a piece of the error)
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 11] = [
        ("/api/generate", &[("temperature", "-1")], "--temperature"),
        (
            "/api/generate",
            &[("temperature", "hot")],
            "a parameter is not valid: temperature",
        ),
        ("/api/generate", &[("top_k", "0")], "top-k"),
        ("/api/generate", &[("top_p", "2")], "top-p"),
        ("/api/generate", &[("form", "sonnet")], "unknown form"),
        (
            "/api/generate",
            &[("meter", "true")],
            "--meter needs a form",
        ),
        (
            "/api/generate",
            &[("prompt", "hello")],
            "not in the vocabulary",
        ),
        (
            "/api/generate",
            &[("max_new_tokens", "0")],
            "max_new_tokens",
        ),
        ("/api/generate", &[("colour", "red")], "colour"),
        ("/api/inspect", &[("text", "")], "1 to"),
        ("/api/inspect", &[], "text"),
    ];
    for (path, query, expected) in cases {
        let (status, body) = get(&base, path, query);
        assert_eq!(status, 400, "{path} {query:?}: {body}");
        let error: serde_json::Value =
            serde_json::from_str(&body).unwrap_or_else(|_| panic!("{body}"));
        let message = error["error"].as_str().unwrap();
        assert!(message.contains(expected), "{path} {query:?}: {message}");
    }
    // A path that is not there gets a 404 that names those that are.
    let (status, body) = get(&base, "/api/poem", &[]);
    assert_eq!(status, 404, "{body}");
    let error: serde_json::Value = serde_json::from_str(&body).unwrap();
    let message = error["error"].as_str().unwrap();
    assert!(
        message.contains("/api/poem") && message.contains("/api/generate"),
        "{message}"
    );
    // The server is still there.
    assert_eq!(get(&base, "/api/info", &[]).0, 200);
}

#[test]
fn several_poems_stream_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let base = start_server(tmp.path());
    let poems: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|seed| {
                let base = &base;
                scope.spawn(move || {
                    let seed = seed.to_string();
                    let all = events(base, &[("form", "qijue"), ("seed", seed.as_str())]);
                    all.last().unwrap().1.clone()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (seed, done) in poems.iter().enumerate() {
        let done: serde_json::Value = serde_json::from_str(done).unwrap();
        assert_eq!(done["text"], sampled(tmp.path(), Form::Qijue, seed as u64));
    }
}
