//! Property-based fuzzing of the places where raw user bytes enter: config files, ablation specs,
//! prompts (with the form rules) and the files of a run directory. Nothing may panic; errors must
//! be errors.
//! `PROPTEST_CASES=N` runs more cases than the default 256 (the README gives a longer run).

mod common;

use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use shige::config::RunConfig;
use shige::data::poem::Form;
use shige::data::CharTokenizer;
use shige::sample::PoemConstraint;
use shige::train::load::load_run;
use shige::train::run_dir::{CONFIG_FILE, MODEL_FILE, TOKENIZER_FILE};
use std::path::Path;
use std::sync::OnceLock;

fn tokenizer() -> &'static CharTokenizer {
    static TOKENIZER: OnceLock<CharTokenizer> = OnceLock::new();
    TOKENIZER.get_or_init(common::tiny_tokenizer)
}

/// A TOML value for a config field: numbers of every sign and size, strings, booleans, arrays.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|v| v.to_string()),
        (-5i64..300).prop_map(|v| v.to_string()),
        any::<f64>().prop_map(|v| format!("{v:?}")),
        "[a-z]{0,8}".prop_map(|s| format!("{s:?}")),
        Just("\"learned\"".to_string()),
        Just("\"rope\"".to_string()),
        Just("true".to_string()),
        Just("[1, 2]".to_string()),
        Just("nan".to_string()),
        Just("inf".to_string()),
    ]
}

const MODEL_KEYS: [&str; 9] = [
    "vocab_size",
    "block_size",
    "n_layer",
    "n_head",
    "n_embd",
    "dropout",
    "bias",
    "tie_weights",
    "position",
];
const TRAIN_KEYS: [&str; 10] = [
    "batch_size",
    "max_iters",
    "eval_interval",
    "eval_iters",
    "learning_rate",
    "warmup_iters",
    "weight_decay",
    "grad_clip",
    "seed",
    "corpus",
];

/// The shipped default config's text.
const DEFAULT_CONFIG: &str = include_str!("../configs/default.toml");

/// A config whose keys are real (and sometimes not) and whose values are anything.
fn config_text() -> impl Strategy<Value = String> {
    let model = proptest::collection::vec((prop::sample::select(&MODEL_KEYS[..]), value()), 0..8);
    let train = proptest::collection::vec((prop::sample::select(&TRAIN_KEYS[..]), value()), 0..8);
    (model, train, proptest::option::of("[a-z_]{1,8}")).prop_map(|(m, t, extra)| {
        let mut text = String::from("[model]\n");
        let mut seen = std::collections::HashSet::new();
        for (k, v) in m.iter().filter(|(k, _)| seen.insert(("m", *k))) {
            text += &format!("{k} = {v}\n");
        }
        text += "[train]\n";
        for (k, v) in t.iter().filter(|(k, _)| seen.insert(("t", *k))) {
            text += &format!("{k} = {v}\n");
        }
        if let Some(key) = extra {
            text += &format!("{key} = 1\n");
        }
        text
    })
}

/// An ablation spec over configs/tiny.toml whose variants override real (and sometimes not)
/// keys with any values, with any context lengths.
fn ablation_spec() -> impl Strategy<Value = String> {
    let overrides = |keys: &'static [&'static str]| {
        proptest::collection::vec((prop::sample::select(keys), value()), 0..4)
    };
    let variant = (
        "[a-z0-9 ]{0,6}",
        overrides(&MODEL_KEYS[..]),
        overrides(&TRAIN_KEYS[..]),
    );
    let contexts = proptest::collection::vec(0usize..100, 0..3);
    (proptest::collection::vec(variant, 0..3), contexts).prop_map(|(variants, contexts)| {
        let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/tiny.toml");
        let mut text = format!(
            "name = \"fuzz\"\nbase = {:?}\ncontexts = {contexts:?}\n",
            base
        );
        for (name, model, train) in variants {
            let table = |pairs: Vec<(&str, String)>| {
                let mut seen = std::collections::HashSet::new();
                let pairs: Vec<String> = pairs
                    .into_iter()
                    .filter(|(k, _)| seen.insert(*k))
                    .map(|(k, v)| format!("{k} = {v}"))
                    .collect();
                format!("{{ {} }}", pairs.join(", "))
            };
            text += &format!(
                "[[variant]]\nname = {name:?}\nmodel = {}\ntrain = {}\n",
                table(model),
                table(train)
            );
        }
        text
    })
}

/// Characters from the vocabulary, punctuation, Latin, emoji and control characters.
fn prompt_char() -> impl Strategy<Value = char> {
    prop_oneof![
        prop::sample::select(
            "白日依山尽黄河入海流春夏秋冬，。？！；"
                .chars()
                .collect::<Vec<_>>()
        ),
        any::<char>(),
        Just('\n'),
        Just('\u{7}'),
        Just('😀'),
    ]
}

proptest! {
    /// The shipped default config with a few characters replaced, inserted or cut: TOML that
    /// mostly still parses, so that the values reach `validate`. Whatever comes out is a config
    /// that validates and reads back from its own TOML, or one error on one line naming a key.
    #[test]
    fn a_damaged_default_config_is_valid_or_refused_in_one_line(
        edits in proptest::collection::vec((0.0f64..1.0, 0usize..3, prompt_char()), 1..4),
    ) {
        let mut text: Vec<char> = DEFAULT_CONFIG.chars().collect();
        for (at, kind, c) in edits {
            let i = ((at * text.len() as f64) as usize).min(text.len() - 1);
            match kind {
                0 => text[i] = c,
                1 => text.insert(i, c),
                _ => drop(text.remove(i)),
            }
        }
        let text: String = text.into_iter().collect();
        let checked = RunConfig::from_toml_str(&text, "fuzz")
            .and_then(|cfg| cfg.validate().map(|()| cfg));
        match checked {
            Ok(cfg) => {
                let again = RunConfig::from_toml_str(&cfg.to_toml().unwrap(), "again");
                prop_assert_eq!(again.ok(), Some(cfg));
            }
            Err(e) => {
                let message = e.to_string();
                prop_assert!(!message.is_empty() && !message.contains('\n'), "{message}");
            }
        }
    }

    #[test]
    fn structured_configs_parse_or_err_and_valid_ones_round_trip(text in config_text()) {
        match RunConfig::from_toml_str(&text, "fuzz") {
            Ok(cfg) => {
                if cfg.validate().is_ok() {
                    let again = RunConfig::from_toml_str(&cfg.to_toml().unwrap(), "again").unwrap();
                    prop_assert_eq!(again.to_toml().unwrap(), cfg.to_toml().unwrap());
                }
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    #[test]
    fn ablation_specs_load_or_err(text in ablation_spec()) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spec.toml");
        std::fs::write(&path, &text).unwrap();
        if let Ok(spec) = shige::experiments::ablation::Spec::load(&path) {
            if let Ok(configs) = spec.configs() {
                prop_assert_eq!(configs.len(), spec.variant.len());
            }
        }
    }

    #[test]
    fn prompts_encode_exactly_or_name_what_is_unknown(chars in proptest::collection::vec(prompt_char(), 0..40)) {
        let text: String = chars.into_iter().collect();
        let tok = tokenizer();
        let unknown = tok.unknown_chars(&text);
        match tok.encode(&text) {
            Ok(ids) => {
                prop_assert!(unknown.is_empty());
                prop_assert_eq!(ids.len(), text.chars().count());
                prop_assert_eq!(tok.decode(&ids).unwrap(), text);
            }
            Err(e) => {
                prop_assert!(!unknown.is_empty());
                let message = e.to_string();
                // The first ten are named, the rest counted.
                for &c in unknown.iter().take(10) {
                    let named = message.contains(&format!("'{c}'"))
                        || message.contains(&format!("U+{:04X}", c as u32));
                    prop_assert!(named, "{} misses {:?}", message, c);
                }
                if unknown.len() > 10 {
                    let counted = format!("and {} more", unknown.len() - 10);
                    prop_assert!(message.contains(&counted), "{} lacks {}", message, counted);
                }
            }
        }
    }

    /// Prompts cut from the tiny corpus's real poems, some with one character replaced by any
    /// other: a prompt that fits leaves a character possible next, and an exact start of a real
    /// poem always fits its own form.
    #[test]
    fn forms_accept_or_refuse_any_prompt_and_acrostic(
        form in proptest::option::of(prop::sample::select(Form::ALL.to_vec())),
        acrostic in proptest::collection::vec(prompt_char(), 0..3),
        (poem, cut) in (any::<prop::sample::Index>(), 0usize..70),
        damage in proptest::option::of((any::<prop::sample::Index>(), prompt_char())),
        max_new in 0usize..100,
        logits_seed in any::<u64>(),
    ) {
        let tok = tokenizer();
        let acrostic: String = acrostic.into_iter().collect();
        let Ok(constraint) = PoemConstraint::new(tok, form, &acrostic) else { return Ok(()) };
        let poems = tiny_poems();
        let poem = poem.get(poems);
        let mut prompt: Vec<char> = poem.chars().take(cut).collect();
        if let (Some((at, c)), false) = (&damage, prompt.is_empty()) {
            let at = at.index(prompt.len());
            prompt[at] = *c;
        }
        let prompt: String = prompt.into_iter().collect();
        let Ok(mut context) = tok.encode(&prompt) else { return Ok(()) };
        context.insert(0, 0);
        match constraint.check_start(&context, max_new) {
            Ok(()) => {
                let mut logits: Vec<f32> = (0..tok.vocab_size())
                    .map(|i| ((i as u64).wrapping_mul(logits_seed | 1) % 1000) as f32 / 100.0)
                    .collect();
                constraint.mask(&context, &mut logits).unwrap();
                prop_assert!(logits.iter().any(|l| l.is_finite()));
            }
            Err(e) => {
                let own_form = shige::data::poem::regular_form(poem) == form && form.is_some();
                let exact = damage.is_none() && acrostic.is_empty() && own_form;
                prop_assert!(
                    !(exact && matches!(e, shige::sample::SampleError::PromptDoesNotFit { .. })),
                    "{:?} of its own form refused: {}", prompt, e
                );
            }
        }
    }
}

/// The poems of the tiny corpus, one a line.
fn tiny_poems() -> &'static [String] {
    static POEMS: OnceLock<Vec<String>> = OnceLock::new();
    POEMS.get_or_init(|| {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/data/tiny.txt"));
        text.unwrap().lines().map(str::to_string).collect()
    })
}

/// One damage to a file's bytes: which edit, where (a fraction of the length, or of the first
/// `HEAD` bytes, where the structure of JSON and safetensors headers lies) and which byte.
#[derive(Debug, Clone)]
struct Damage {
    edit: u8,
    in_head: bool,
    at: f64,
    byte: u8,
}

/// Bytes from the start of a file that a damage `in_head` falls in: tokenizer.json's settings
/// and decoder, model.safetensors's length and first tensor entries.
const HEAD: usize = 400;

fn damage() -> impl Strategy<Value = Damage> {
    (0u8..4, any::<bool>(), 0.0..1.0f64, any::<u8>()).prop_map(|(edit, in_head, at, byte)| Damage {
        edit,
        in_head,
        at,
        byte,
    })
}

impl Damage {
    fn apply(&self, bytes: &mut Vec<u8>) {
        let span = if self.in_head {
            HEAD.min(bytes.len())
        } else {
            bytes.len()
        };
        let i = ((self.at * span as f64) as usize).min(bytes.len().saturating_sub(1));
        match self.edit {
            _ if bytes.is_empty() => bytes.push(self.byte), // nothing left to remove, change or cut
            0 => drop(bytes.remove(i)),
            1 => bytes.insert(i, self.byte),
            2 => bytes[i] = self.byte,
            _ => bytes.truncate(i),
        }
    }
}

#[test]
fn damaged_run_files_load_or_are_refused() {
    let run = tempfile::tempdir().unwrap();
    let mut cfg = common::tiny_config();
    (
        cfg.train.max_iters,
        cfg.train.eval_interval,
        cfg.schedule.warmup_iters,
    ) = (2, 2, 1);
    common::run(&cfg, run.path(), false, None).unwrap();
    let files = [CONFIG_FILE, TOKENIZER_FILE, MODEL_FILE];
    let read = |f: &str| std::fs::read(run.path().join(f)).unwrap();
    let originals: Vec<Vec<u8>> = files.iter().map(|f| read(f)).collect();
    let copy = tempfile::tempdir().unwrap();
    let write = |dir: &Path, f: &str, bytes: &[u8]| std::fs::write(dir.join(f), bytes).unwrap();
    for (f, bytes) in files.iter().zip(&originals) {
        write(copy.path(), f, bytes);
    }
    assert!(load_run(copy.path()).is_ok(), "the undamaged run loads");
    let case = (0..files.len(), proptest::collection::vec(damage(), 1..4));
    TestRunner::default()
        .run(&case, |(file, damages)| {
            let mut bytes = originals[file].clone();
            damages.iter().for_each(|d| d.apply(&mut bytes));
            write(copy.path(), files[file], &bytes);
            let loaded = load_run(copy.path());
            write(copy.path(), files[file], &originals[file]);
            if let Err(e) = loaded {
                prop_assert!(!e.to_string().is_empty());
            }
            Ok(())
        })
        .unwrap();
}
