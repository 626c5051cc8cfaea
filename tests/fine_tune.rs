//! Fine-tuning (`train --init-from RUN`): a new run starts from a trained run's weights, with its
//! vocabulary extended by the new corpus's characters; shapes other than the parent's are refused.

mod common;

use candle_core::Device;
use shige::config::Override;
use shige::data::CharTokenizer;
use shige::model::Gpt;
use shige::train::checkpoint::ParentRecord;
use shige::train::parent::Parent;
use shige::train::run_dir::PARENT_FILE;
use shige::train::run_dir::{MODEL_FILE, TOKENIZER_FILE};
use shige::train::safetensors::read_safetensors;
use shige::train::setup::{complete_config, Setup};
use std::path::Path;

/// A corpus of real poems most of whose characters the tiny corpus lacks: 300 poems of
/// data/poems.txt that data/tiny.txt (every 100th poem) does not hold.
fn new_corpus(dir: &Path) -> String {
    let poems = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/data/poems.txt"));
    let lines: Vec<&str> = poems.as_ref().unwrap().lines().skip(1).take(300).collect();
    let path = dir.join("new.txt");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path.display().to_string()
}

/// Trains the tiny config into `dir` (60 steps).
fn parent_run(dir: &Path) {
    common::run(&common::tiny_config(), dir, false, None).unwrap();
}

/// A parent trained into `tmp`/parent, the new corpus's path, and configs/tiny.toml's.
fn parent_and_corpus(tmp: &Path) -> (std::path::PathBuf, String, std::path::PathBuf) {
    let parent_dir = tmp.join("parent");
    parent_run(&parent_dir);
    let tiny = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/tiny.toml");
    (parent_dir, new_corpus(tmp), tiny)
}

#[test]
fn a_fine_tune_keeps_the_parents_weights_and_ids_and_draws_the_new_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let (parent_dir, corpus, tiny) = parent_and_corpus(tmp.path());
    let parent = Parent::open(&parent_dir).unwrap();
    let set = |key: &str, value: &str| Override::parse(&format!("{key}={value}")).unwrap();
    let cfg = parent
        .config_for(
            &tiny,
            &[
                set("data.corpus", &format!("\"{corpus}\"")),
                set("train.seed", "7"),
            ],
        )
        .unwrap();

    // The vocabulary: every character of the parent under its id, then the new ones in
    // code-point order.
    let text = std::fs::read_to_string(&corpus).unwrap();
    let tokenizer = parent.tokenizer_for(&text).unwrap();
    let old = CharTokenizer::load(&parent_dir.join(TOKENIZER_FILE)).unwrap();
    for (c, id) in old.chars() {
        assert_eq!(tokenizer.id(c), Some(id), "{c} keeps its id");
    }
    let mut new: Vec<char> = text.chars().filter(|&c| old.id(c).is_none()).collect();
    new.sort_unstable();
    new.dedup();
    assert!(
        new.len() > 100,
        "the new corpus adds characters: {}",
        new.len()
    );
    for (i, &c) in new.iter().enumerate() {
        assert_eq!(tokenizer.id(c), Some((old.vocab_size() + i) as u32));
    }

    // The weights the run's own set-up starts from: the parent's tensors, and for the new
    // characters' rows a new model's draws from the run's seed.
    let corpus = shige::data::Corpus::load(Path::new(&corpus), cfg.data.kind).unwrap();
    let run_text = shige::data::RunText::from(corpus);
    let cfg = complete_config(cfg, &run_text, &tokenizer).unwrap();
    let devices = (&Device::Cpu, shige::ops::Kernels::Fused);
    let setup = Setup::new(cfg.clone(), &run_text, tokenizer, Some(&parent), devices).unwrap();
    let varmap = setup.varmap;
    let drawn = Gpt::seeded_with(&cfg.model, Vec::new(), 7, &Device::Cpu)
        .unwrap()
        .1;
    let (saved, _) = read_safetensors(&parent_dir.join(MODEL_FILE)).unwrap();
    let values = |t: &candle_core::Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let drawn = drawn.data().lock().unwrap().clone();
    for (name, var) in varmap.data().lock().unwrap().iter() {
        let (got, theirs) = (values(var.as_tensor()), values(&saved[name]));
        assert_eq!(
            got[..theirs.len()],
            theirs[..],
            "{name}: the parent's values"
        );
        let drawn = values(drawn[name].as_tensor());
        assert_eq!(
            got[theirs.len()..],
            drawn[theirs.len()..],
            "{name}: fresh rows"
        );
        if name == "transformer.wte.weight" || name == "lm_head.weight" {
            assert!(got.len() > theirs.len(), "{name} grew with the vocabulary");
        }
    }
}

#[test]
fn a_fine_tuned_run_starts_at_step_0_learns_sooner_and_names_its_parent() {
    let tmp = tempfile::tempdir().unwrap();
    let (parent_dir, corpus, tiny) = parent_and_corpus(tmp.path());
    let overrides = [Override::parse(&format!("data.corpus=\"{corpus}\"")).unwrap()];
    let parent = Parent::open(&parent_dir).unwrap();
    let record = parent.record.clone();
    let tuned_cfg = parent.config_for(&tiny, &overrides).unwrap();
    let (tuned, scratch) = (tmp.path().join("tuned"), tmp.path().join("scratch"));
    common::fine_tune(tuned_cfg.clone(), &tuned, parent).unwrap();
    let mut scratch_cfg = tuned_cfg.clone();
    scratch_cfg.model = common::tiny_config().model;
    common::run(&scratch_cfg, &scratch, false, None).unwrap();
    let (tuned_curve, scratch_curve) = (common::curve(&tuned), common::curve(&scratch));
    assert_eq!(
        tuned_curve[0].0, 20,
        "a new run: its first evaluation at eval_interval"
    );
    assert!(
        tuned_curve[0].2 < scratch_curve[0].2 - 0.1,
        "the parent's weights help from the start: {tuned_curve:?} against {scratch_curve:?}"
    );
    let written: ParentRecord =
        serde_json::from_str(&std::fs::read_to_string(tuned.join(PARENT_FILE)).unwrap()).unwrap();
    assert_eq!(written, record);
    assert!(!scratch.join(PARENT_FILE).exists());
    // A fine-tuned run resumes as any run does, from its own files.
    common::run(
        &shige::config::RunConfig {
            train: shige::config::TrainConfig {
                max_iters: 80,
                ..tuned_cfg.train.clone()
            },
            ..shige::config::RunConfig::load(&tuned.join("config.toml")).unwrap()
        },
        &tuned,
        true,
        None,
    )
    .unwrap();
    assert_eq!(common::curve(&tuned).last().unwrap().0, 80);
}

#[test]
fn a_fine_tune_refuses_another_shape_a_resume_and_a_missing_run() {
    let tmp = tempfile::tempdir().unwrap();
    let parent_dir = tmp.path().join("parent");
    parent_run(&parent_dir);
    let parent = parent_dir.display().to_string();
    let out = tmp.path().join("child").display().to_string();
    let fails = |args: &[&str], says: &[&str]| {
        let output = common::binary(env!("CARGO_BIN_EXE_train"))
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} succeeded");
        for s in says {
            assert!(err.contains(s), "{args:?}: {err}");
        }
        assert!(!Path::new(&out).exists(), "{args:?} wrote {out}");
    };
    let base = [
        "--config",
        "configs/tiny.toml",
        "--init-from",
        &parent,
        "--out",
        &out,
    ];
    fails(
        &[&base[..], &["--n-layer", "3"]].concat(),
        &["a fine-tune takes the model's shape", "n_layer 2"],
    );
    fails(
        &[&base[..], &["--set", "model.position=\"rope\""]].concat(),
        &["position \"learned\""],
    );
    fails(
        &["--init-from", &parent, "--resume", &parent],
        &["--init-from", "--resume"],
    );
    let missing = tmp.path().join("nothing").display().to_string();
    fails(
        &[
            "--config",
            "configs/tiny.toml",
            "--init-from",
            &missing,
            "--out",
            &out,
        ],
        &["--init-from needs a trained run", "no run directory"],
    );
    // Dropout may change.
    common::train_ok(&[&base[..], &["--dropout", "0.1", "--max-iters", "20"]].concat());
    let saved = shige::config::RunConfig::load(&Path::new(&out).join("config.toml")).unwrap();
    assert_eq!(saved.model.dropout, 0.1);
}

/// A parent with a table of a row per token (rhyme_memory) fine-tuned on new characters: that
/// table grows with the vocabulary as the token table does, the parent's rows kept; a setting
/// asked as the parent has it is no change of shape, however it is written (10000 is 10000.0).
#[test]
fn every_table_of_a_row_per_token_grows_and_a_setting_is_compared_by_value() {
    let tmp = tempfile::tempdir().unwrap();
    let parent_dir = tmp.path().join("parent");
    let mut cfg = common::tiny_config();
    cfg.model.inputs = vec!["rhyme_memory".into()];
    cfg.model.position = shige::config::Position::Rope;
    cfg.train.max_iters = 20;
    common::run(&cfg, &parent_dir, false, None).unwrap();
    let corpus = new_corpus(tmp.path());
    let tiny = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/tiny.toml");
    let set = |text: &str| Override::parse(text).unwrap();
    let overrides = [
        set(&format!("data.corpus=\"{corpus}\"")),
        set("train.max_iters=20"),
        set("model.rope_base=10000"),
    ];
    let parent = Parent::open(&parent_dir).unwrap();
    let tuned_cfg = parent.config_for(&tiny, &overrides).unwrap();
    let tuned = tmp.path().join("tuned");
    common::fine_tune(tuned_cfg, &tuned, parent).unwrap();
    let name = "transformer.wrm.weight";
    let (old, _) = read_safetensors(&parent_dir.join(MODEL_FILE)).unwrap();
    let (new, _) = read_safetensors(&tuned.join(MODEL_FILE)).unwrap();
    let vocab = CharTokenizer::load(&tuned.join(TOKENIZER_FILE))
        .unwrap()
        .vocab_size();
    assert_eq!(
        new[name].dims(),
        [vocab, 32],
        "{name} grew to the new vocabulary"
    );
    assert!(old[name].dims()[0] < vocab);
    // A setting the parent does not have is still refused.
    let parent = Parent::open(&parent_dir).unwrap();
    let err = parent
        .config_for(&tiny, &[set("model.rope_base=500")])
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("rope_base 10000.0"), "{err}");
}

#[test]
fn the_new_characters_are_credited_to_the_files_that_hold_them() {
    let tmp = tempfile::tempdir().unwrap();
    let (parent_dir, _, _) = parent_and_corpus(tmp.path());
    // The parent's own corpus again, measured on poems that share no line with it: every new
    // character comes from the validation file.
    let tiny = common::root_file("data/tiny.txt");
    let lines = |poem: &str| -> Vec<String> {
        poem.split(['，', '。'])
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect()
    };
    let tiny_lines: std::collections::HashSet<String> = tiny.lines().flat_map(lines).collect();
    let poems = common::root_file("data/poems.txt");
    let apart: Vec<&str> = poems
        .lines()
        .filter(|p| lines(p).iter().all(|l| !tiny_lines.contains(l)))
        .take(300)
        .collect();
    let new = tmp.path().join("apart.txt").display().to_string();
    std::fs::write(&new, apart.join("\n") + "\n").unwrap();
    let set = format!("data.validation={new}");
    let tuned = tmp.path().join("tuned");
    let out = common::train_output(&[
        "--init-from",
        parent_dir.to_str().unwrap(),
        "--config",
        "configs/tiny.toml",
        "--max-iters",
        "1",
        "--warmup-iters",
        "1",
        "--set",
        &set,
        "--out",
        tuned.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr
        .lines()
        .find(|l| l.starts_with("fine-tuning from"))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(
        line.ends_with(&format!("new ones of {new} (data.validation)")),
        "{line}"
    );
}

/// A fine-tune from a parent whose lead-rhyme biases were fitted trains without them, as `train`
/// trains any run (they are set to zero before its first step), and fits its own after its last:
/// it trains as the fine-tune of the same parent without the input, evaluation for evaluation,
/// but for the last, which its fit lowers.
#[test]
fn a_fine_tune_of_a_fitted_parent_trains_without_its_fit_and_fits_its_own() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = new_corpus(tmp.path());
    let tiny = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/tiny.toml");
    let overrides = [Override::parse(&format!("data.corpus=\"{corpus}\"")).unwrap()];
    let mut curves = Vec::new();
    for (name, inputs) in [
        ("fitted", vec!["verse_places", "rhyme_bias", "lead_rhymes"]),
        ("plain", vec!["verse_places", "rhyme_bias"]),
    ] {
        let mut cfg = common::tiny_config();
        cfg.model.inputs = inputs.iter().map(|s| s.to_string()).collect();
        let parent_dir = tmp.path().join(format!("{name}-parent"));
        common::run(&cfg, &parent_dir, false, None).unwrap();
        let parent = Parent::open(&parent_dir).unwrap();
        let config = parent.config_for(&tiny, &overrides).unwrap();
        assert_eq!(config.model.inputs, cfg.model.inputs, "the parent's inputs");
        let dir = tmp.path().join(format!("{name}-child"));
        common::fine_tune(config, &dir, parent).unwrap();
        curves.push(common::curve(&dir));
    }
    let (fitted, plain) = (&curves[0], &curves[1]);
    let last = fitted.len() - 1;
    assert_eq!(
        fitted[..last],
        plain[..last],
        "trained as without the input"
    );
    assert_eq!(fitted[last].1, plain[last].1, "the same training loss");
    assert!(
        fitted[last].2 < plain[last].2,
        "its own fit lowers its last evaluation: {fitted:?} against {plain:?}"
    );
}
