//! What the page asks of a run, whichever back end answers it: the local server (`serve`, over
//! HTTP) or the static page's wasm module (in the browser). Both take the same query strings and
//! give the same JSON, so that the one page works with either.
//!
//! [`poem`] writes a poem as a stream of events; [`look`] looks inside a model (attention, next
//! characters, the lesson's order experiment) and scores a poem.

pub mod look;
pub mod poem;

use crate::config::Position;
use crate::data::header::Poets;
use crate::data::poem::Form;
use crate::sample::{has_headers, writes_ci};
use crate::train::load::LoadedRun;
use crate::verse::Tunes;
use serde::Deserialize;
use serde_json::{json, Value};

pub use look::{inspect, order, score, InspectParams, ScoreParams};
pub use poem::{write_poem, PoemEvent, PoemParams, PoemRequest, MAX_NEW_TOKENS};

/// The longest prompt, and the longest text to inspect or score, in characters.
pub const MAX_TEXT_CHARS: usize = 200;
// A text to inspect is drawn with the newline that opens it.
const _: () = assert!(MAX_TEXT_CHARS < crate::experiments::attention_maps::MAX_CHARS);
/// Poets offered in the page's poet box (most poems first).
const LISTED_POETS: usize = 300;
/// Tunes offered in the page's tune box (most ci first).
const LISTED_TUNES: usize = 300;

/// Why a request is not answered: the asker's mistake (the server's 400) or the program's (500).
#[derive(Debug)]
pub enum Refusal {
    Bad(String),
    Internal(String),
}

impl Refusal {
    pub fn bad(message: impl std::fmt::Display) -> Self {
        Refusal::Bad(message.to_string())
    }

    pub fn internal(message: impl std::fmt::Display) -> Self {
        Refusal::Internal(message.to_string())
    }

    /// A message of the sampling rules as the page's parameters name them ([`page_words`]).
    pub fn parameters(message: impl std::fmt::Display) -> Self {
        Refusal::Bad(page_words(&message.to_string()))
    }

    /// What it says.
    pub fn message(&self) -> &str {
        match self {
            Refusal::Bad(m) | Refusal::Internal(m) => m,
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

/// The command line's words in the library's messages, each with what the page calls it: the
/// Write form's fields (the query's parameters), the Train form's settings (`section.key` as its
/// settings box takes them), its start-from box and Resume button. Longer flags first, so that
/// none is read as the start of another.
const PAGE_WORDS: [(&str, &str); 38] = [
    (" (as flags or with --set)", ""),
    ("--set ", ""),
    ("--muon-learning-rate", "optimizer.muon_learning_rate"),
    ("--learning-rate", "optimizer.learning_rate"),
    ("--max-new-tokens", "max_new_tokens"),
    ("--eval-interval", "train.eval_interval"),
    ("--warmup-iters", "schedule.warmup_iters"),
    ("--corpus-kind", "data.kind"),
    ("--batch-size", "train.batch_size"),
    ("--block-size", "model.block_size"),
    ("--eval-iters", "train.eval_iters"),
    ("--init-from", "start from"),
    ("--max-iters", "max_iters"),
    ("--optimizer", "optimizer.kind"),
    ("--temperature", "temperature"),
    ("--acrostic", "acrostic"),
    ("--schedule", "schedule.kind"),
    ("--position", "position"),
    ("--checkpoint", "run"),
    ("--minutes", "train.minutes"),
    ("--dropout", "model.dropout"),
    ("--corpus", "data.corpus"),
    ("--n-layer", "n_layer"),
    ("--n-head", "n_head"),
    ("--n-embd", "model.n_embd"),
    ("--prompt", "prompt"),
    ("--resume", "Resume in the runs list"),
    ("--dtype", "train.dtype"),
    ("--top-k", "top_k"),
    ("--top-p", "top_p"),
    ("--title", "title"),
    ("--meter", "meter"),
    ("--seed", "seed"),
    ("--poet", "poet"),
    ("--tune-form", "the tune's form"),
    ("--tune", "tune"),
    ("--form", "form"),
    ("--out", "the run's name"),
];

/// `message` in the page's words: its first line (a backtrace after it is the terminal's), each
/// command-line flag in it, where it stands as a whole word, as the page names the field or
/// setting ([`PAGE_WORDS`]), so that the page never asks for a flag it has no place for.
pub fn page_words(message: &str) -> String {
    let first = message.lines().next().unwrap_or("");
    PAGE_WORDS
        .iter()
        .fold(first.to_string(), |text, (flag, field)| {
            replace_words(&text, flag, field)
        })
}

/// `text` with each `word` that no letter, digit or dash continues replaced by `by`.
fn replace_words(text: &str, word: &str, by: &str) -> String {
    let continues = |c: char| c.is_alphanumeric() || c == '-' || c == '_';
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(word) {
        let after = &rest[at + word.len()..];
        let before = rest[..at].chars().next_back().or(out.chars().next_back());
        let whole = !word.starts_with(continues) || !before.is_some_and(continues);
        let whole = whole && (word.ends_with(' ') || !after.starts_with(continues));
        out.push_str(&rest[..at]);
        out.push_str(if whole { by } else { word });
        rest = after;
    }
    out.push_str(rest);
    out
}

/// The parameters of a query string (`a=1&b=x`, without the `?`), or a refusal that says which
/// is not valid.
pub fn parse_query<T: serde::de::DeserializeOwned>(query: &str) -> Result<T, Refusal> {
    serde_urlencoded::from_str(query)
        .map_err(|e| Refusal::bad(format!("a parameter is not valid: {e}")))
}

/// A yes-or-no parameter: true, 1, on or yes; false, 0, off or no.
pub fn yes_or_no<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
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

/// The page's description of the run `name` it writes with: its model, the kind of text it was
/// trained on, and the boxes that text offers (poets and titles, tunes).
pub fn run_info(name: &str, run: &LoadedRun, poets: Option<&Poets>) -> Value {
    let kind = run.config.data.trained_kind();
    let poets = poets.map(|p| {
        p.counts()
            .iter()
            .take(LISTED_POETS)
            .map(|(name, _)| name)
            .collect::<Vec<_>>()
    });
    let tunes = writes_ci(&run.tokenizer, &run.config.data).then(|| {
        Tunes::shipped()
            .all()
            .iter()
            .take(LISTED_TUNES)
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>()
    });
    json!({
        "name": name,
        "model": run.config.model,
        "corpus_kind": kind,
        "headers": has_headers(&run.tokenizer, &run.config.data),
        "poets": poets,
        "tunes": tunes,
    })
}

/// The page's `info`: the run it writes with (`run_info`, or null with `no_run` saying why), the
/// forms, the positional schemes and the configs it can train from.
pub fn info(run: Option<Value>, no_run: Option<String>, configs: &[String]) -> Value {
    json!({
        "run": run,
        "no_run": no_run,
        "forms": Form::ALL.map(Form::name),
        "positions": Position::ALL.map(Position::name),
        "configs": configs,
    })
}

#[cfg(test)]
mod tests {
    use super::page_words;

    #[test]
    fn flags_become_the_pages_words_where_they_stand_whole() {
        assert_eq!(
            page_words("give --max-iters 5 or --seed 1 (as flags or with --set)"),
            "give max_iters 5 or seed 1"
        );
        // Inside a longer flag or a word, and after the first line, nothing is translated.
        assert_eq!(
            page_words("--seeds x--seed --corpus-kindly"),
            "--seeds x--seed --corpus-kindly"
        );
        assert_eq!(
            page_words("no --out here\nstack backtrace: --out"),
            "no the run's name here"
        );
    }
}
