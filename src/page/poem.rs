//! A poem asked for with the page's parameters, checked against the run, and drawn as a stream of
//! events: the opening, each character, then the whole poem scored and set.

use super::{yes_or_no, Refusal, MAX_TEXT_CHARS};
use crate::config::CorpusKind;
use crate::data::header::Poets;
use crate::data::poem::Form;
use crate::data::tokenizer::NEWLINE;
use crate::sample::{
    check_trained_on_verse, ci_start, default_max_new_tokens, header_request, poem_start,
    Generation, Generator, PoemStart, Sampling,
};
use crate::train::load::LoadedRun;
use crate::verse::ci_score::score_ci;
use crate::verse::{mark_poem, score_poem, Tables, Tunes};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::atomic::AtomicBool;

/// The most characters one poem may ask for.
pub const MAX_NEW_TOKENS: usize = 1_000;

/// What a poem is asked for with.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoemParams {
    /// The run to write with (the server's); absent or empty for the default one.
    pub run: Option<String>,
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
    /// The tune's form (又一体): its number or pattern; empty for the commonest.
    #[serde(default)]
    tune_form: String,
    #[serde(default = "default_temperature")]
    temperature: f64,
    top_k: Option<usize>,
    top_p: Option<f64>,
    #[serde(default)]
    seed: u64,
    #[serde(default, deserialize_with = "yes_or_no")]
    meter: bool,
    /// Absent: 120, or what the tune's form needs ([`default_max_new_tokens`]).
    max_new_tokens: Option<usize>,
}

fn default_temperature() -> f64 {
    0.8
}

/// A poem checked and ready to be drawn.
pub struct PoemRequest {
    start: PoemStart,
    sampling: Sampling,
    seed: u64,
    max_new_tokens: usize,
}

impl PoemRequest {
    /// Checks `p` against the run's vocabulary (and `poets`, its corpus's) and the rules of
    /// header, form, acrostic and meter.
    pub fn new(run: &LoadedRun, poets: Option<&Poets>, p: PoemParams) -> Result<Self, Refusal> {
        let sampling = Sampling {
            temperature: p.temperature,
            top_k: p.top_k,
            top_p: p.top_p,
        };
        sampling.validate().map_err(Refusal::parameters)?;
        let tune = (!p.tune.is_empty()).then(|| (p.tune.as_str(), p.tune_form.as_str()));
        let max_new_tokens = p
            .max_new_tokens
            .unwrap_or_else(|| default_max_new_tokens(tune));
        if !(1..=MAX_NEW_TOKENS).contains(&max_new_tokens) {
            return Err(Refusal::bad(format!(
                "max_new_tokens must be 1 to {MAX_NEW_TOKENS} (a regular poem is under 100 characters, a ci under 250)"
            )));
        }
        if p.prompt.chars().count() > MAX_TEXT_CHARS {
            return Err(Refusal::bad(format!(
                "the prompt has more than {MAX_TEXT_CHARS} characters: give the beginning of one poem"
            )));
        }
        let start = match p.tune.is_empty() {
            true => poem_start_of(run, poets, &p, max_new_tokens)?,
            false => ci_start_of(run, &p, max_new_tokens)?,
        };
        Ok(PoemRequest {
            start,
            sampling,
            seed: p.seed,
            max_new_tokens,
        })
    }
}

/// The start of the poem `p` asks for: its header, form, acrostic and meter checked against the
/// run's vocabulary (and its corpus's poets).
fn poem_start_of(
    run: &LoadedRun,
    poets: Option<&Poets>,
    p: &PoemParams,
    max_new_tokens: usize,
) -> Result<PoemStart, Refusal> {
    let form = match p.form.as_str() {
        "" => None,
        name => Some(name.parse::<Form>().map_err(Refusal::parameters)?),
    };
    if form.is_some() || !p.acrostic.is_empty() || p.meter {
        check_trained_on_verse(
            &run.config.data,
            "form, acrostic and meter write regulated verse",
        )
        .map_err(Refusal::bad)?;
    }
    let rules = (form, p.acrostic.as_str(), p.meter);
    let asked = |field: &String| (!field.is_empty()).then(|| field.clone());
    let poets = poets.filter(|_| !p.poet.is_empty());
    let header = header_request(
        &run.tokenizer,
        &run.config.data,
        (asked(&p.poet), asked(&p.title)),
        poets,
    )
    .map_err(Refusal::parameters)?;
    poem_start(&run.tokenizer, &header, &p.prompt, rules, max_new_tokens)
        .map_err(Refusal::parameters)
}

/// The start of the ci to `p.tune` (with its tones and rhymes where `p.meter`), checked as
/// `sample --tune` checks it; form, acrostic and header are not for a ci.
fn ci_start_of(
    run: &LoadedRun,
    p: &PoemParams,
    max_new_tokens: usize,
) -> Result<PoemStart, Refusal> {
    if !(p.form.is_empty() && p.acrostic.is_empty() && p.poet.is_empty() && p.title.is_empty()) {
        return Err(Refusal::bad(
            "a ci takes its tune's shape: leave form, acrostic, poet and title empty",
        ));
    }
    ci_start(
        (&run.tokenizer, &run.config.data),
        (&p.tune, &p.tune_form, p.meter),
        &p.prompt,
        max_new_tokens,
    )
    .map_err(Refusal::parameters)
}

/// What the page is told while a poem is drawn.
pub enum PoemEvent {
    /// The header's part the program writes, if any.
    Opening(String),
    /// One character, as it is drawn or, for the prompt's, written.
    Token(String),
    /// The whole poem, scored and set: `{"text", "verse", "marks", "ci", "said"}`.
    Done(Value),
    /// Why it could not be drawn.
    Error(String),
}

impl PoemEvent {
    /// Its name in the page's stream of events.
    pub fn name(&self) -> &'static str {
        match self {
            PoemEvent::Opening(_) => "opening",
            PoemEvent::Token(_) => "token",
            PoemEvent::Done(_) => "done",
            PoemEvent::Error(_) => "error",
        }
    }

    /// Its data: the text, or the JSON of `done`.
    pub fn data(&self) -> String {
        match self {
            PoemEvent::Opening(text) | PoemEvent::Token(text) | PoemEvent::Error(text) => {
                text.clone()
            }
            PoemEvent::Done(value) => value.to_string(),
        }
    }
}

/// Draws the poem of `request` with `generator`, telling `send` each event; stops early once
/// `cancel` is set (nobody listens). The same request and seed give what `sample` gives.
pub fn write_poem(
    run: &LoadedRun,
    generator: &Generator,
    request: PoemRequest,
    cancel: &AtomicBool,
    send: &mut (dyn FnMut(PoemEvent) + Send),
) {
    let verse = run.config.data.trained_kind() == CorpusKind::Verse;
    // Running text goes on past its newlines, which are part of it.
    let running = run.config.data.trained_kind() == CorpusKind::Text;
    let newline = request.start.opening[0];
    let stop = (!running).then_some(newline);
    let gen = Generation {
        cancel: Some(cancel),
        ..Generation::new(request.max_new_tokens, request.sampling, stop)
    };
    let mut rng = ChaCha8Rng::seed_from_u64(request.seed);
    let opening = request
        .start
        .opening_text(&run.tokenizer)
        .unwrap_or_default();
    if !opening.is_empty() {
        send(PoemEvent::Opening(opening.clone()));
    }
    let mut on_token = |id: u32| {
        if Some(id) != stop {
            send(PoemEvent::Token(
                run.tokenizer.decode(&[id]).unwrap_or_default(),
            ));
        }
    };
    let drawn = generator.write_prepared(&request.start, &gen, &mut rng, &mut on_token);
    let last = drawn.map_err(|e| e.to_string()).and_then(|ids| {
        let new = run.tokenizer.decode(&ids).map_err(|e| e.to_string())?;
        let text = format!("{opening}{}", new.trim_end_matches(NEWLINE));
        let verse = verse.then(|| score_poem(&text, Tables::shipped()));
        let marks = (!running).then(|| mark_poem(&text, Tables::shipped()));
        let ci = score_ci(&text, Tunes::shipped());
        let said = ci.as_ref().map(|c| c.describe());
        Ok(json!({ "text": text, "verse": verse, "marks": marks, "ci": ci, "said": said }))
    });
    send(match last {
        Ok(done) => PoemEvent::Done(done),
        Err(message) => PoemEvent::Error(message),
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page::parse_query;

    #[test]
    fn the_tune_form_and_an_absent_max_new_tokens_are_read_from_the_query() {
        let p: PoemParams = parse_query("tune=水调歌头&tune_form=3").unwrap();
        assert_eq!((p.tune.as_str(), p.tune_form.as_str()), ("水调歌头", "3"));
        assert_eq!(p.max_new_tokens, None);
        let tune = Some((p.tune.as_str(), p.tune_form.as_str()));
        assert_eq!(
            default_max_new_tokens(tune),
            120,
            "95 characters, 19 marks, a newline"
        );
        assert_eq!(default_max_new_tokens(Some(("沁园春", ""))), 140);
        assert_eq!(default_max_new_tokens(None), 120);
        assert_eq!(default_max_new_tokens(Some(("无此调", ""))), 120);
    }
}
