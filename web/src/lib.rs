//! The static page's back end, compiled to wasm: a trained run loaded from the files the page
//! downloaded, answering what the local server answers ([`shige::page`]: a poem as a stream of
//! events, what the heads look at, the lesson's order experiment, a poem scored), and a tiny run
//! trained in the tab ([`shige::train::Session`]). The same decoder and training step as the CPU
//! build, on their portable path; web/worker.js runs it in a Web Worker.

use shige::config::{Override, RunConfig};
use shige::data::header::Poets;
use shige::data::CharTokenizer;
use shige::experiments::lesson::Report;
use shige::ops::WeightFormat;
use shige::page::{self, InspectParams, PoemEvent, PoemParams, PoemRequest, ScoreParams};
use shige::sample::Generator;
use shige::train::load::LoadedRun;
use shige::train::safetensors::parse_safetensors;
use shige::train::Session;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::OnceLock;
use wasm_bindgen::prelude::*;

self_cell::self_cell!(
    /// A run and the generator that borrows its model.
    struct Loaded {
        owner: LoadedRun,
        #[not_covariant]
        dependent: Generator,
    }
);

/// A trained run to write with.
#[wasm_bindgen]
pub struct Poet {
    name: String,
    loaded: Loaded,
    /// The poets of its corpus (run/poets.tsv), where it was trained on titled poems.
    poets: Option<Poets>,
    /// The order experiment on untrained models of its vocabulary, computed on first request.
    untrained: OnceLock<Report>,
}

#[wasm_bindgen]
impl Poet {
    /// The run `name` from its config.toml, tokenizer.json and model.safetensors, its weight
    /// matrices rounded to f16 for writing as `sample` rounds them on a CPU with F16C (so that
    /// the same seed writes the same poem), and the poets of its corpus (run/poets.tsv), if any.
    #[wasm_bindgen(constructor)]
    pub fn new(
        name: &str,
        config: &str,
        tokenizer: &str,
        model: &[u8],
        poets: Option<String>,
    ) -> Result<Poet, JsError> {
        let config = RunConfig::from_toml_str(config, "config.toml").map_err(error)?;
        let tokenizer = CharTokenizer::from_json(tokenizer, "tokenizer.json").map_err(error)?;
        let weights = parse_safetensors(model, Path::new("model.safetensors")).map_err(error)?;
        let run = LoadedRun::from_parts(
            (config, tokenizer),
            weights,
            name,
            &candle_core::Device::Cpu,
        )
        .map_err(error)?;
        let loaded = Loaded::try_new(run, |run| {
            let mut generator = Generator::with_weights(&run.model, WeightFormat::F16);
            generator.prepare()?;
            anyhow::Ok(generator)
        })
        .map_err(error)?;
        let poets = poets
            .map(|text| Poets::of_counts(&text))
            .filter(|p| !p.is_empty());
        Ok(Poet {
            name: name.to_string(),
            loaded,
            poets,
            untrained: OnceLock::new(),
        })
    }

    /// The page's `info` for this run (JSON), with the configs it can train from.
    pub fn info(&self, configs: Vec<String>) -> String {
        let run = page::run_info(&self.name, self.loaded.borrow_owner(), self.poets.as_ref());
        page::info(Some(run), None, &configs).to_string()
    }

    /// Writes the poem the query string asks for (the server's `/api/generate` parameters),
    /// calling `on_event(name, data)` for each event: `opening`, `token`, then `done` or `error`.
    pub fn write(&self, query: &str, on_event: &js_sys::Function) -> Result<(), JsError> {
        let p: PoemParams = page::parse_query(query).map_err(error)?;
        let run = self.loaded.borrow_owner();
        let request = PoemRequest::new(run, self.poets.as_ref(), p).map_err(error)?;
        let on_event = OneThread(on_event);
        let mut send = |event: PoemEvent| {
            let (name, data) = (JsValue::from(event.name()), JsValue::from(event.data()));
            // An exception in the page's handler is the page's to report; the poem goes on.
            let _ = on_event.0.call2(&JsValue::NULL, &name, &data);
        };
        let cancel = AtomicBool::new(false);
        self.loaded.with_dependent(|run, generator| {
            page::write_poem(run, generator, request, &cancel, &mut send)
        });
        Ok(())
    }

    /// What each head looks at in a text, and the next characters (the server's `/api/inspect`).
    pub fn inspect(&self, query: &str) -> Result<String, JsError> {
        let p: InspectParams = page::parse_query(query).map_err(error)?;
        let answer = page::inspect(self.loaded.borrow_owner(), &p).map_err(error)?;
        Ok(answer.to_string())
    }

    /// The lesson's order experiment for this run and untrained models (`/api/order`).
    pub fn order(&self) -> Result<String, JsError> {
        let answer = page::order(self.loaded.borrow_owner(), &self.untrained).map_err(error)?;
        Ok(answer.to_string())
    }
}

/// A poem scored and set line by line (the server's `/api/score`); no run is needed.
#[wasm_bindgen]
pub fn score(query: &str) -> Result<String, JsError> {
    let p: ScoreParams = page::parse_query(query).map_err(error)?;
    Ok(page::score(&p).map_err(error)?.to_string())
}

/// A new run trained in the tab, step by step.
#[wasm_bindgen]
pub struct Training {
    session: Session,
}

#[wasm_bindgen]
impl Training {
    /// A run of the config `config` (a config file's text, named `name`, with `set`'s
    /// `section.key=value` overrides) on `text`.
    #[wasm_bindgen(constructor)]
    pub fn new(
        name: &str,
        config: &str,
        set: Vec<String>,
        text: &str,
    ) -> Result<Training, JsError> {
        let overrides = set
            .iter()
            .map(|s| Override::parse(s))
            .collect::<Result<Vec<_>, _>>()
            .map_err(error)?;
        Session::check_settings(&overrides).map_err(error)?;
        let config = RunConfig::from_toml_with(config, name, &overrides).map_err(error)?;
        let session = Session::new(config, text, "the text to train on").map_err(error)?;
        Ok(Training { session })
    }

    /// The run's whole config (JSON, as the server's runs give it).
    pub fn config(&self) -> String {
        serde_json::to_string(self.session.config()).unwrap_or_default()
    }

    /// Steps done.
    pub fn step(&self) -> usize {
        self.session.step()
    }

    /// The steps it is planned for.
    pub fn max_iters(&self) -> usize {
        self.session.config().train.max_iters
    }

    pub fn is_done(&self) -> bool {
        self.session.is_done()
    }

    /// One optimiser step; its training loss.
    pub fn train_step(&mut self) -> Result<f64, JsError> {
        self.session.train_step().map_err(error)
    }

    /// Whether the run evaluates after the step just done.
    pub fn evaluates_now(&self) -> bool {
        self.session.evaluates_now()
    }

    /// Evaluates after the interval's steps, which took `seconds`: `{"row", "sample"}` (JSON,
    /// a row of the server's metrics and an evaluation's poem).
    pub fn evaluate(&mut self, seconds: f64) -> Result<String, JsError> {
        let (row, sample) = self.session.evaluate(seconds).map_err(error)?;
        Ok(serde_json::json!({ "row": row, "sample": sample }).to_string())
    }
}

/// An error as the page shows it: its message, causes included, in the page's words.
fn error(e: impl std::fmt::Display) -> JsError {
    JsError::new(&page::page_words(&format!("{e:#}")))
}

/// The page's event handler, called from inside the generator's loop, whose callback is `Send`.
struct OneThread<'a>(&'a js_sys::Function);

// SAFETY: this module is built for wasm32-unknown-unknown without the atomics feature, where
// there is one thread: the handler is never sent to, nor called from, another.
#[cfg(all(target_family = "wasm", not(target_feature = "atomics")))]
unsafe impl Send for OneThread<'_> {}

/// A config file's text as JSON (as the server's runs give their configs).
#[wasm_bindgen]
pub fn config_json(text: &str) -> Result<String, JsError> {
    let config = RunConfig::from_toml_str(text, "config.toml").map_err(error)?;
    serde_json::to_string(&config).map_err(error)
}
