//! Training on the tiny corpus: the loss falls, runs are reproducible, resume is exact,
//! checkpoints reload, and bad input is refused.

mod common;

use common::{curve, run, run_on_clock, tiny_config};
use shige::config::{OptimizerKind, RunConfig, ScheduleKind};
use shige::data::CharTokenizer;
use shige::model::{Gpt, Mode};
use shige::train::checkpoint::*;
use shige::train::load::*;
use shige::train::run_dir::*;
use shige::train::safetensors::read_safetensors;
use shige::train::TrainSummary;
use std::path::PathBuf;

#[test]
fn tiny_run_learns_and_writes_the_run_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let summary = run(&tiny_config(), &dir, false, None).unwrap();
    assert_eq!(summary.steps, 60);
    let c = curve(&dir);
    assert_eq!(c.len(), 3, "one row per evaluation");
    assert!(c[2].1 < c[0].1 - 0.3, "train loss did not fall: {c:?}");
    assert!(c[2].2 < c[0].2 - 0.3, "val loss did not fall: {c:?}");
    for file in [
        MODEL_FILE,
        STATE_FILE,
        CONFIG_FILE,
        TOKENIZER_FILE,
        METRICS_FILE,
        PLOT_FILE,
    ] {
        assert!(dir.join(file).exists(), "{file} missing");
    }
    assert!(std::fs::read_to_string(dir.join(PLOT_FILE))
        .unwrap()
        .contains("<svg"));
    assert_eq!(summary.samples.len(), 3);
    // The summary says what trained: the CPU engine, with the kernels this CPU selected.
    let gemm = format!("gemm {}", shige::machine::Machine::detect().gemm_kernels);
    assert!(
        summary.step_path.starts_with("CPU engine on") && summary.step_path.contains(&gemm),
        "{}",
        summary.step_path
    );
}

#[test]
fn same_seed_same_curve_and_resume_is_exact() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tiny_config();
    let (a, b, c) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("c"),
    );
    run(&cfg, &a, false, None).unwrap();
    run(&cfg, &b, false, None).unwrap();
    assert_eq!(curve(&a), curve(&b), "same config and seed, same curve");

    let stopped = run(&cfg, &c, false, Some(40)).unwrap();
    assert_eq!(stopped.steps, 40);
    let resumed = run(&cfg, &c, true, None).unwrap();
    assert_eq!(resumed.steps, 60);
    let (full, res) = (curve(&a), curve(&c));
    assert_eq!(full.len(), res.len());
    for (x, y) in full.iter().zip(&res) {
        assert_eq!(x.0, y.0);
        assert!(
            (x.1 - y.1).abs() < 1e-5 && (x.2 - y.2).abs() < 1e-5,
            "resumed {y:?} vs uninterrupted {x:?}"
        );
    }
    // Resuming a finished run runs no step and reports the figures of the invocation that
    // trained them: its losses and its pace.
    let again = run(&cfg, &c, true, None).unwrap();
    assert_eq!((again.steps, again.steps_trained), (60, 0));
    assert_eq!(again.tokens_per_s, resumed.tokens_per_s);
    // (read back from metrics.csv, which keeps 6 decimals)
    assert!((again.train_loss - resumed.train_loss).abs() < 1e-5);
    assert!((again.val_loss - resumed.val_loss).abs() < 1e-5);
}

/// summary.json and state.json keep every figure to the bit: serde_json's default parser read
/// 23013.128720249802 tokens/s back as 23013.1287202498 (a CI failure of the resume test above),
/// so the crate is built with its `float_roundtrip` feature.
#[test]
fn a_figure_written_to_json_reads_back_to_the_bit() {
    for x in [
        23013.128720249802_f64,
        4.241_527_311_325_073,
        1e-300,
        0.1 + 0.2,
    ] {
        let json = serde_json::to_string_pretty(&serde_json::json!({ "figure": x })).unwrap();
        let back: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(back["figure"].as_f64(), Some(x), "{json}");
    }
}

#[test]
fn a_run_gives_the_same_weights_on_1_2_and_3_threads() {
    // 20 sequences of 32 tokens: three units (8 + 8 + 4 sequences), whatever the threads; dropout
    // on, so that each unit's masks count too.
    let mut cfg = tiny_config();
    cfg.train.batch_size = 20;
    cfg.train.max_iters = 20;
    cfg.model.dropout = 0.1;
    let tmp = tempfile::tempdir().unwrap();
    let weights = |threads: usize| -> Vec<(String, Vec<u8>)> {
        let dir = tmp.path().join(format!("threads-{threads}"));
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| run(&cfg, &dir, false, None)).unwrap();
        let path = dir.join(MODEL_FILE);
        let tensors = candle_core::safetensors::load(&path, &candle_core::Device::Cpu).unwrap();
        let mut named: Vec<_> = tensors
            .into_iter()
            .map(|(name, t)| {
                let values = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                (name, values.iter().flat_map(|v| v.to_le_bytes()).collect())
            })
            .collect();
        named.sort();
        named
    };
    let one = weights(1);
    assert!(one.len() > 5);
    for threads in [2, 3] {
        assert!(
            weights(threads) == one,
            "the weights differ on {threads} threads"
        );
    }
}

#[test]
fn a_checkpoint_reloads_to_identical_logits() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let mut cfg = tiny_config();
    cfg.model.tie_weights = true;
    run(&cfg, &dir, false, None).unwrap();
    let saved = RunConfig::load(&dir.join(CONFIG_FILE)).unwrap();
    let tokenizer = CharTokenizer::load(&dir.join(TOKENIZER_FILE)).unwrap();
    let ids = candle_core::Tensor::new(
        tokenizer.encode("白日依山尽").unwrap(),
        &candle_core::Device::Cpu,
    )
    .unwrap()
    .unsqueeze(0)
    .unwrap();
    let load = |seed| {
        let (model, varmap) = Gpt::seeded(&saved.model, seed, &candle_core::Device::Cpu).unwrap();
        let (tensors, _) = read_safetensors(&dir.join(MODEL_FILE)).unwrap();
        load_params(&varmap, &tensors, "", &dir.join(MODEL_FILE)).unwrap();
        model
            .forward(&ids, &mut Mode::Eval)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
    };
    assert_eq!(load(1), load(2), "weights come from the file, not the seed");
    let (tensors, _) = read_safetensors(&dir.join(MODEL_FILE)).unwrap();
    assert!(
        tensors.contains_key("lm_head.weight"),
        "tied lm_head is written for nanoGPT"
    );
    // A tensor the model does not use (a learned table loaded into a sinusoidal model, say)
    // means that the file belongs to another model; so does a tied lm_head that is not wte.
    let (_, varmap) = Gpt::seeded(&saved.model, 0, &candle_core::Device::Cpu).unwrap();
    let mut extra = tensors.clone();
    extra.insert(
        "transformer.wpe2.weight".into(),
        tensors["transformer.wpe.weight"].clone(),
    );
    let err = load_params(&varmap, &extra, "", &dir.join(MODEL_FILE)).unwrap_err();
    assert!(err.to_string().contains("transformer.wpe2.weight"), "{err}");
    let mut untied = tensors.clone();
    let head = (tensors["lm_head.weight"].clone() * 2.0).unwrap();
    untied.insert("lm_head.weight".into(), head);
    let err = load_params(&varmap, &untied, "", &dir.join(MODEL_FILE)).unwrap_err();
    assert!(err.to_string().contains("lm_head.weight"), "{err}");
}

fn error_of(result: anyhow::Result<TrainSummary>) -> String {
    format!("{:#}", result.expect_err("an error"))
}

#[test]
fn bad_training_input_gets_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tiny_config();
    let dir = tmp.path().join("run");
    run(&cfg, &dir, false, Some(20)).unwrap();

    assert!(error_of(run(&cfg, &dir, false, None)).contains("already holds a run"));
    let mut other = cfg.clone();
    other.model.n_layer = 3;
    assert!(error_of(run(&other, &dir, true, None)).contains("model config differs"));
    let none = tmp.path().join("none");
    assert!(error_of(run(&cfg, &none, true, None)).contains("no run to resume"));
    assert!(!none.exists(), "the directory to resume was made");
    std::fs::create_dir(&none).unwrap();
    assert!(error_of(run(&cfg, &none, true, None)).contains("no checkpoint to resume"));

    let mut bad = cfg.clone();
    bad.data.corpus = "/nonexistent.txt".into();
    assert!(error_of(run(&bad, &tmp.path().join("x"), false, None)).contains("cannot read corpus"));
    let mut bad = cfg.clone();
    bad.model.n_head = 3;
    assert!(error_of(run(&bad, &tmp.path().join("y"), false, None)).contains("not divisible"));
    let mut bad = cfg.clone();
    bad.train.batch_size = 0;
    assert!(error_of(run(&bad, &tmp.path().join("z"), false, None)).contains("batch_size"));

    let mut huge = cfg.clone();
    huge.optimizer.learning_rate = 1e6;
    huge.optimizer.grad_clip = 0.0;
    let err = error_of(run(&huge, &tmp.path().join("nan"), false, None));
    assert!(err.contains("the loss became"), "{err}");
    assert!(!err.contains("muon"), "{err}");
    // With Muon, the message names Muon's learning rate too (its matrices go NaN first).
    let mut muon = huge.clone();
    (muon.optimizer.kind, muon.optimizer.muon_learning_rate) = (OptimizerKind::Muon, Some(1e30));
    let err = error_of(run(&muon, &tmp.path().join("muon-nan"), false, None));
    assert!(err.contains("--muon-learning-rate (now 1e30)"), "{err}");

    let missing = RunConfig::load(&PathBuf::from("/nonexistent.toml"))
        .unwrap_err()
        .to_string();
    assert!(missing.contains("cannot read config file"), "{missing}");
    let bad_toml = tmp.path().join("bad.toml");
    std::fs::write(&bad_toml, "[model]\nn_layers = 2\n").unwrap();
    let err = RunConfig::load(&bad_toml).unwrap_err().to_string();
    assert!(err.contains("unknown field `n_layers`"), "{err}");
}

/// Setting up the shipped corpus once took 700 MB (its 1.6 M characters went through
/// `tokenizers`' pipeline, hundreds of bytes each): the default model's run now peaks near
/// 320 MB on 2 cores (260 MB before the lead rhymes' biases), and must stay well under the old
/// figure.
#[test]
fn a_run_on_the_shipped_corpus_needs_no_memory_per_character_of_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let out = common::binary(env!("CARGO_BIN_EXE_train"))
        .args([
            "--max-iters",
            "1",
            "--eval-interval",
            "1",
            "--warmup-iters",
            "0",
        ])
        .args([
            "--eval-iters",
            "1",
            "--json",
            "--out",
            dir.to_str().unwrap(),
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let peak = summary["peak_memory_bytes"].as_u64().unwrap();
    if cfg!(target_os = "linux") {
        assert!(peak > 0 && peak < 400_000_000, "peak memory {peak} bytes");
    } else {
        eprintln!("note: peak memory is read on Linux only: not checked here");
    }
}

#[test]
fn muon_on_the_wsd_schedule_learns_and_resumes_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = tiny_config();
    cfg.optimizer.kind = OptimizerKind::Muon;
    cfg.schedule.kind = ScheduleKind::Wsd;
    let (whole, half, adamw) = (
        tmp.path().join("whole"),
        tmp.path().join("half"),
        tmp.path().join("adamw"),
    );
    run(&cfg, &whole, false, None).unwrap();
    run(&cfg, &half, false, Some(30)).unwrap();
    run(&cfg, &half, true, None).unwrap();
    assert_eq!(
        curve(&whole),
        curve(&half),
        "a resumed Muon run trains as an uninterrupted one"
    );
    let (tensors, _) = read_safetensors(&whole.join(STATE_FILE)).unwrap();
    let names: Vec<&String> = tensors.keys().collect();
    assert!(
        names
            .iter()
            .any(|n| n.starts_with("momentum.transformer.h.0.mlp.c_fc"))
            && names.iter().any(|n| *n == "m.transformer.wte.weight"),
        "Muon's buffers for the blocks' matrices, AdamW's moments for the embedding: {names:?}"
    );
    let losses = curve(&whole);
    assert!(
        losses.last().unwrap().2 < losses[0].2 - 0.3,
        "the loss falls: {losses:?}"
    );

    cfg.optimizer.kind = OptimizerKind::Adamw;
    run(&cfg, &adamw, false, None).unwrap();
    assert_ne!(curve(&adamw), losses, "the optimizer changes the run");
    // A resume keeps its optimizer (its moments are of one kind).
    let err = error_of(run(&cfg, &half, true, Some(59)));
    assert!(err.contains("keeps its optimizer"), "{err}");
}

#[test]
fn minutes_plans_a_step_count_that_the_run_saves_and_keeps() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = tiny_config();
    cfg.train.minutes = Some(0.05); // 3 seconds
    cfg.schedule.kind = ScheduleKind::Wsd; // re-plans leave its rates before the decay alike
    let planned_dir = tmp.path().join("planned");
    let summary = run(&cfg, &planned_dir, false, None).unwrap();
    let saved = RunConfig::load(&planned_dir.join(CONFIG_FILE)).unwrap();
    assert_eq!(
        saved.train.max_iters, summary.steps,
        "the plan is saved as max_iters"
    );
    assert_eq!(saved.train.minutes, Some(0.05));
    assert!(summary.steps >= cfg.schedule.warmup_iters);

    // The plan is nothing but a step count, however often it was re-planned before the decay:
    // the same run with that max_iters trains alike.
    let mut fixed = cfg.clone();
    (fixed.train.minutes, fixed.train.max_iters) = (None, summary.steps);
    let fixed_dir = tmp.path().join("fixed");
    run(&fixed, &fixed_dir, false, None).unwrap();
    assert_eq!(curve(&planned_dir), curve(&fixed_dir));

    // A resume keeps the plan: another budget is refused.
    let mut other = saved.clone();
    other.train.minutes = Some(1.0);
    let err = error_of(run(&other, &planned_dir, true, None));
    assert!(
        err.contains("planned its steps for 0.05 minutes when it started")
            && err.contains("keeps its step count"),
        "{err}"
    );
    // A run of a fixed step count is said to be one, not to have planned.
    let mut fixed_then_minutes = fixed.clone();
    fixed_then_minutes.train.minutes = Some(1.0);
    let err = error_of(run(&fixed_then_minutes, &fixed_dir, true, None));
    assert!(err.contains("was given its steps when it started"), "{err}");
    let mut short = tiny_config();
    (short.train.minutes, short.schedule.warmup_iters) = (Some(1.0), 2);
    let err = error_of(run(&short, &tmp.path().join("short"), false, None));
    assert!(err.contains("--warmup-iters 5 or more"), "{err}");
}

/// A decay on another file under `minutes` (how the Song rungs run): it begins where the final
/// plan puts it, however often the run was re-planned before, so that the planned run trains as the
/// run given its final step count; and its last stretch reads the decay's file, not the corpus.
#[test]
fn a_decay_on_another_file_follows_the_plan_that_minutes_made() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = tiny_config();
    let tiny = std::fs::read_to_string(&cfg.data.corpus).unwrap();
    let decay = tmp.path().join("decay.txt");
    let first_poems: String = tiny.lines().take(100).map(|l| format!("{l}\n")).collect();
    std::fs::write(&decay, first_poems).unwrap();
    cfg.train.minutes = Some(0.05); // 3 seconds
    cfg.schedule.kind = ScheduleKind::Wsd;
    cfg.data.decay_corpus = Some(decay.display().to_string());
    let planned = tmp.path().join("planned");
    let steps = run(&cfg, &planned, false, None).unwrap().steps;
    let mut fixed = cfg.clone();
    (fixed.train.minutes, fixed.train.max_iters) = (None, steps);
    let fixed_dir = tmp.path().join("fixed");
    run(&fixed, &fixed_dir, false, None).unwrap();
    assert_eq!(curve(&planned), curve(&fixed_dir));
    // Without the decay's file, the same up to the decay and other in it.
    let mut own = fixed.clone();
    own.data.decay_corpus = None;
    let own_dir = tmp.path().join("own");
    run(&own, &own_dir, false, None).unwrap();
    let start = shige::train::schedule::decay_start(
        steps,
        cfg.schedule.warmup_iters,
        cfg.schedule.decay_fraction(),
    );
    let (with, without) = (curve(&fixed_dir), curve(&own_dir));
    for (a, b) in with.iter().zip(&without) {
        match a.0 <= start {
            true => assert_eq!(a, b, "before the decay at {start}"),
            false => assert_ne!(a.1, b.1, "in the decay from {start}"),
        }
    }
}

/// The time of `minutes` counts from the clock `train` gives (the process's start), so that what
/// the process did before the run (the ladder timing its rungs: #79, a 30-minute run ended late)
/// is spent of it: a budget already spent trains the warm-up alone.
#[test]
fn minutes_count_from_the_clock_given() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = tiny_config();
    cfg.train.minutes = Some(0.02); // 1.2 seconds
    let now = run_on_clock(&cfg, &tmp.path().join("now"), false, None, None).unwrap();
    assert!(now.steps > cfg.schedule.warmup_iters, "{}", now.steps);
    let earlier = std::time::Instant::now() - std::time::Duration::from_secs(2);
    let late = tmp.path().join("late");
    let spent = run_on_clock(&cfg, &late, false, None, Some(earlier)).unwrap();
    assert_eq!(spent.steps, cfg.schedule.warmup_iters);
    assert!(
        spent.wall_s >= 2.0,
        "counted from the clock: {}",
        spent.wall_s
    );
}

#[test]
fn a_run_with_sounds_and_verse_places_learns_them_resumes_exactly_and_loads() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = tiny_config();
    cfg.model.inputs = vec!["sound".into(), "verse_places".into()];
    cfg.model.tie_weights = true;
    let (whole, half) = (tmp.path().join("whole"), tmp.path().join("half"));
    run(&cfg, &whole, false, None).unwrap();
    run(&cfg, &half, false, Some(30)).unwrap();
    run(&cfg, &half, true, None).unwrap();
    assert_eq!(
        curve(&whole),
        curve(&half),
        "a resumed run with sounds and places trains as an uninterrupted one"
    );
    // The rows were learned (they start at zero) and are saved with the model.
    let (tensors, _) = read_safetensors(&whole.join(MODEL_FILE)).unwrap();
    for name in ["transformer.wse.weight", "transformer.wvp.weight"] {
        let rows = tensors[name].abs().unwrap();
        let largest: f32 = rows.max_all().unwrap().to_scalar().unwrap();
        assert!(largest > 1e-3, "{name} stayed at {largest}");
    }
    let loaded = load_run(&whole).unwrap();
    assert_eq!(loaded.config.model.inputs(), ["sound", "verse_places"]);
    cfg.model.inputs.clear();
    let plain = tmp.path().join("plain");
    run(&cfg, &plain, false, None).unwrap();
    assert_ne!(
        curve(&plain),
        curve(&whole),
        "sounds and places change the run"
    );
}

/// Three runs of `cfg` with the verse places and the rhyme biases in `dir`: "plain" without the
/// lead rhymes, "whole" with them, and "half" with them stopped after step 30 and resumed. The
/// config with the lead rhymes, and the three runs' folders.
fn runs_with_lead_rhymes(mut cfg: RunConfig, dir: &std::path::Path) -> (RunConfig, [PathBuf; 3]) {
    cfg.model.inputs = vec!["verse_places".into(), "rhyme_bias".into()];
    let [plain, whole, half] = ["plain", "whole", "half"].map(|name| dir.join(name));
    run(&cfg, &plain, false, None).unwrap();
    cfg.model.inputs.push("lead_rhymes".into());
    run(&cfg, &whole, false, None).unwrap();
    run(&cfg, &half, false, Some(30)).unwrap();
    run(&cfg, &half, true, None).unwrap();
    (cfg, [plain, whole, half])
}

/// A fitted input (the lead rhymes) leaves the training as it is, step for step, and is fitted
/// after the last step, before its evaluation: its biases saved with the model; a run stopped
/// before the end and resumed fits them the same.
#[test]
fn fitted_biases_leave_the_training_as_it_is_and_are_fitted_after_the_last_step() {
    let tmp = tempfile::tempdir().unwrap();
    let (cfg, [plain, whole, half]) = runs_with_lead_rhymes(tiny_config(), tmp.path());
    let (without, with) = (curve(&plain), curve(&whole));
    let last = with.len() - 1;
    assert_eq!(
        without[..last],
        with[..last],
        "the same evaluations until the last step"
    );
    assert_eq!(without[last].1, with[last].1, "the same training loss");
    assert!(
        with[last].2 < without[last].2,
        "the fit lowers the last evaluation: {} against {}",
        with[last].2,
        without[last].2
    );
    assert_eq!(
        curve(&half),
        with,
        "a resumed run fits as an uninterrupted one"
    );
    // A run stopped before its end cannot be ended where it stands, unfitted: it is refused, and
    // nothing of it is written.
    let early = tmp.path().join("early");
    run(&cfg, &early, false, Some(30)).unwrap();
    let metrics = std::fs::read(early.join(METRICS_FILE)).unwrap();
    let mut ended = cfg.clone();
    ended.train.max_iters = 30;
    let err = run(&ended, &early, true, None).unwrap_err().to_string();
    assert!(
        err.contains("not yet fitted") && err.contains("--max-iters 31"),
        "{err}"
    );
    assert_eq!(std::fs::read(early.join(METRICS_FILE)).unwrap(), metrics);
    // A finished run may be ended again where it stands: its fit is the same.
    run(&cfg, &whole, true, None).unwrap();
    assert_eq!(curve(&whole), with);
    // So with checkpoints of an earlier version, which do not say whether they were fitted: their
    // biases tell (zero: never fitted).
    forget_fitted_flag(&early);
    let err = run(&ended, &early, true, None).unwrap_err().to_string();
    assert!(err.contains("not yet fitted"), "{err}");
    forget_fitted_flag(&whole);
    run(&cfg, &whole, true, None).unwrap();
    assert_eq!(curve(&whole), with);
    let biases = |dir: &std::path::Path| -> Vec<f32> {
        let (tensors, _) = read_safetensors(&dir.join(MODEL_FILE)).unwrap();
        tensors["transformer.blr.weight"].to_vec1().unwrap()
    };
    let fitted = biases(&whole);
    assert_eq!(fitted.len(), 3);
    // Each raises its rhyme set: a model trained without the input gives the sets less than the
    // share of positions whose next character is in them.
    assert!(fitted.iter().all(|&b| b > 0.5), "fitted: {fitted:?}");
    assert_eq!(biases(&half), fitted);
    // A finished run given more steps trains them without its fitted biases (as the run without
    // the input does) and fits them again at its new end.
    let mut longer = cfg.clone();
    longer.train.max_iters = cfg.train.max_iters * 2;
    run(&longer, &whole, true, None).unwrap();
    let mut plain_longer = longer.clone();
    plain_longer.model.inputs.pop();
    run(&plain_longer, &plain, true, None).unwrap();
    let (extended, without) = (curve(&whole), curve(&plain));
    let rows = extended.len();
    for (i, (with, without)) in extended.iter().zip(&without).enumerate() {
        match i == last || i == rows - 1 {
            true => assert_eq!(with.1, without.1, "the same training loss"),
            false => assert_eq!(with, without, "row {i}: trained as without the input"),
        }
    }
    assert_ne!(biases(&whole), fitted, "fitted again at the new end");
}

/// Rewrites the training state of `dir` as a version before the `fitted` flag wrote it.
fn forget_fitted_flag(dir: &std::path::Path) {
    let path = dir.join(STATE_FILE);
    let (tensors, mut metadata) = read_safetensors(&path).unwrap();
    assert!(
        metadata.remove("fitted").is_some(),
        "the state says whether it is fitted"
    );
    let tensors: Vec<_> = tensors.into_iter().collect();
    let bytes = shige::train::safetensors::to_safetensors(&tensors, metadata).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// A run whose last evaluation is not its best keeps the weights of its best, and those are
/// fitted too (they were saved before the fit, with the biases at zero).
#[test]
fn the_kept_weights_of_an_earlier_best_are_fitted_too() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = tiny_config();
    cfg.model.inputs = vec![
        "verse_places".into(),
        "rhyme_bias".into(),
        "lead_rhymes".into(),
    ];
    // Sixty poems read many times over: the model learns them by heart, and its last evaluation
    // on the held-out three is not its best.
    let text = std::fs::read_to_string(&cfg.data.corpus).unwrap();
    let few: Vec<&str> = text.lines().take(60).collect();
    let corpus = tmp.path().join("few.txt");
    std::fs::write(&corpus, few.join("\n") + "\n").unwrap();
    cfg.data.corpus = corpus.display().to_string();
    cfg.train.max_iters = 120;
    cfg.optimizer.learning_rate = 0.01;
    let dir = tmp.path().join("run");
    run(&cfg, &dir, false, None).unwrap();
    let rows = curve(&dir);
    let best = rows.iter().map(|r| r.2).fold(f64::INFINITY, f64::min);
    assert!(rows.last().unwrap().2 > best, "{rows:?}");
    let (tensors, metadata) = read_safetensors(&dir.join(MODEL_FILE)).unwrap();
    assert!(metadata["step"].parse::<usize>().unwrap() < cfg.train.max_iters);
    let kept: Vec<f32> = tensors["transformer.blr.weight"].to_vec1().unwrap();
    assert!(kept.iter().any(|&b| b != 0.0), "unfitted: {kept:?}");
}

/// The resume of a run refuses what would change its course silently or lose what it saved: a
/// new schedule (the learning rate would jump), a step count below the step reached (its summary
/// would be written over with nothing trained); `--max-iters` wins over `minutes`.
#[test]
fn a_resume_that_would_change_the_schedule_or_go_back_is_refused_before_writing() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tiny_config(); // the cosine
    let dir = tmp.path().join("run");
    run(&cfg, &dir, false, Some(60)).unwrap();
    let summary = std::fs::read(dir.join(SUMMARY_FILE)).unwrap();

    let mut wsd = cfg.clone();
    wsd.schedule.kind = ScheduleKind::Wsd;
    let err = error_of(run(&wsd, &dir, true, None));
    assert!(err.contains("keeps its schedule"), "{err}");
    let mut decay = cfg.clone();
    decay.schedule.decay_fraction = Some(0.5); // a setting of WSD alone
    assert!(error_of(run(&decay, &dir, true, None))
        .contains("decay_fraction is a setting of the wsd schedule"));

    let mut short = cfg.clone();
    (short.train.max_iters, short.schedule.warmup_iters) = (30, 10);
    let err = error_of(run(&short, &dir, true, None));
    assert!(
        err.contains("max_iters 30 is below the step the run in") && err.contains("(60)"),
        "{err}"
    );
    assert_eq!(std::fs::read(dir.join(SUMMARY_FILE)).unwrap(), summary);
    let saved = RunConfig::load(&dir.join(CONFIG_FILE)).unwrap();
    assert_eq!(saved.schedule.kind, ScheduleKind::Cosine);
    assert_eq!(saved.train.max_iters, cfg.train.max_iters);
}

/// A plan of `minutes` so long that its step count would pass what a config file holds
/// saturates there: the run saves a count it can read back, and resumes.
#[test]
fn a_plan_of_ages_is_saved_as_a_count_the_run_reads_back() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = tiny_config();
    (cfg.train.minutes, cfg.schedule.kind) = (Some(6e14), ScheduleKind::Wsd);
    let dir = tmp.path().join("ages");
    let summary = run(&cfg, &dir, false, Some(20)).unwrap();
    assert_eq!(summary.steps, 20);
    let saved = RunConfig::load(&dir.join(CONFIG_FILE)).unwrap();
    // Saturated at the warm-up's plan, re-planned at step 20 from the pace since: billions of
    // years of steps, but a count a config file holds.
    let planned = saved.train.max_iters;
    assert!(
        planned > 1e17 as usize && planned <= i64::MAX as usize,
        "{planned}"
    );
    let resumed = run(&saved, &dir, true, Some(30)).unwrap();
    assert_eq!(resumed.steps, 30);
    let mut wrapped = cfg.clone();
    wrapped.train.minutes = Some(1e300);
    let summary = run(&wrapped, &tmp.path().join("1e300"), false, Some(12)).unwrap();
    assert_eq!((summary.steps, summary.max_iters), (12, i64::MAX as usize));
}

/// A resume keeps every setting of the run's recipe but how long it trains, how often it
/// evaluates, its batch, its precision, where its corpus is and its peak rate: a new warm-up,
/// β, decay or clip would change its course mid-run, as a new schedule would. Each refusal names the setting
/// and writes nothing.
#[test]
fn a_resume_refuses_every_change_of_its_recipe_and_names_the_setting() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tiny_config(); // the cosine
    let dir = tmp.path().join("run");
    run(&cfg, &dir, false, Some(30)).unwrap();
    let state = std::fs::read(dir.join(STATE_FILE)).unwrap();
    let changed: [(&str, fn(&mut RunConfig)); 5] = [
        ("schedule.warmup_iters differs (saved 10, asked 50)", |c| {
            c.schedule.warmup_iters = 50
        }),
        ("optimizer.beta1 differs (saved 0.9, asked 0.8)", |c| {
            c.optimizer.beta1 = 0.8
        }),
        ("optimizer.grad_clip differs (saved 1.0, asked 0.5)", |c| {
            c.optimizer.grad_clip = 0.5
        }),
        ("optimizer.beta2 differs (saved 0.95, asked 0.99)", |c| {
            c.optimizer.beta2 = 0.99
        }),
        (
            "optimizer.weight_decay differs (saved 0.1, asked 0.0)",
            |c| c.optimizer.weight_decay = 0.0,
        ),
    ];
    for (says, change) in changed {
        let mut asked = cfg.clone();
        change(&mut asked);
        let err = error_of(run(&asked, &dir, true, None));
        assert!(
            err.contains(says) && err.contains("keeps its recipe"),
            "{says}: {err}"
        );
        assert_eq!(std::fs::read(dir.join(STATE_FILE)).unwrap(), state);
    }
    // A schedule is named as it is: a cosine has no decay_fraction.
    let mut wsd = cfg.clone();
    wsd.schedule.kind = ScheduleKind::Wsd;
    let err = error_of(run(&wsd, &dir, true, None));
    assert!(
        err.contains("the schedule is wsd (decay_fraction 0.2) but")
            && err.contains("trained with cosine:"),
        "{err}"
    );
    // What a resume may change: how long, how often it evaluates, and its peak rate (to go on
    // from a checkpoint kept when the loss exploded, as that message advises).
    let mut longer = cfg.clone();
    (longer.train.max_iters, longer.train.eval_interval) = (80, 40);
    longer.optimizer.learning_rate = 1e-3;
    let summary = run(&longer, &dir, true, None).unwrap();
    assert_eq!(summary.steps, 80);
}

/// The same run gives the same bytes in every process: the weights and the training state hold
/// their metadata in one order (safetensors writes it in a hash map's), so `cmp` holds for the
/// weights where the README says byte-identical, and a child's parent.json records one
/// fingerprint. The state differs only in its two clocks (the seconds trained).
#[test]
fn the_same_run_writes_the_same_bytes_in_two_processes() {
    let tmp = tempfile::tempdir().unwrap();
    let dirs = [tmp.path().join("a"), tmp.path().join("b")];
    for dir in &dirs {
        let dir = dir.to_str().unwrap();
        let args = [
            "--config",
            "configs/tiny.toml",
            "--max-iters",
            "20",
            "--out",
            dir,
        ];
        common::train_ok(&args);
    }
    let [a, b] = dirs
        .clone()
        .map(|d| std::fs::read(d.join(MODEL_FILE)).unwrap());
    assert!(a == b, "{MODEL_FILE} differs between two identical runs");
    let clocks = ["elapsed_s", "interval_s"];
    let [a, b] = dirs.clone().map(|d| {
        let bytes = std::fs::read(d.join(STATE_FILE)).unwrap();
        let length = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let mut header = String::from_utf8(bytes[8..8 + length].to_vec()).unwrap();
        let parsed: serde_json::Value = serde_json::from_str(&header).unwrap();
        let metadata = parsed["__metadata__"].as_object().unwrap();
        // The metadata's keys in sorted order.
        let places: Vec<usize> = metadata
            .keys()
            .map(|k| header.find(&format!("\"{k}\":")).unwrap())
            .collect();
        assert!(places.len() > 5 && places.is_sorted(), "{header}");
        for clock in clocks {
            let value = metadata[clock].as_str().unwrap();
            header = header.replacen(&format!("\"{clock}\":\"{value}\""), clock, 1);
        }
        (header.trim_end().to_string(), bytes[8 + length..].to_vec())
    });
    assert!(
        a.0 == b.0,
        "the state's header, but for its clocks: {} against {}",
        a.0,
        b.0
    );
    assert!(a.1 == b.1, "the state's tensors");
}

/// `[data] decay_corpus`: WSD's decay trains on another file's poems. On the corpus itself it
/// trains bit for bit as without one (its held-out poems, and any poem sharing a line with them,
/// left out: data/tiny.txt has none of the latter); on other poems the run is the same up to the
/// decay's first step and differs after it, and a resume inside the decay trains as an
/// uninterrupted run.
#[test]
fn the_decay_trains_on_its_own_poems_from_its_first_step() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = tiny_config();
    cfg.schedule.kind = ScheduleKind::Wsd;
    cfg.schedule.decay_fraction = Some(0.5); // the decay from step 30 of 60; evaluations at 20, 40, 60
    let weights = |dir: &PathBuf| std::fs::read(dir.join(MODEL_FILE)).unwrap();
    let plain = tmp.path().join("plain");
    run(&cfg, &plain, false, None).unwrap();
    let mut itself = cfg.clone();
    itself.data.decay_corpus = Some(cfg.data.corpus.clone());
    let on_itself = tmp.path().join("itself");
    run(&itself, &on_itself, false, None).unwrap();
    assert!(
        weights(&plain) == weights(&on_itself),
        "a decay on the corpus's own training poems"
    );
    // The decay on the first 100 poems of data/tiny.txt (characters of its vocabulary alone).
    let text = std::fs::read_to_string(&cfg.data.corpus).unwrap();
    let first: String = text.lines().take(100).map(|l| format!("{l}\n")).collect();
    let decay_file = tmp.path().join("first.txt");
    std::fs::write(&decay_file, first).unwrap();
    let mut other = cfg.clone();
    other.data.decay_corpus = Some(decay_file.display().to_string());
    let (whole, resumed) = (tmp.path().join("whole"), tmp.path().join("resumed"));
    run(&other, &whole, false, None).unwrap();
    let (before, after) = (curve(&plain), curve(&whole));
    assert_eq!(before[0], after[0], "step 20, before the decay");
    assert!(
        before[1].1 != after[1].1 && before[2].1 != after[2].1,
        "{before:?} {after:?}"
    );
    run(&other, &resumed, false, Some(45)).unwrap();
    run(&other, &resumed, true, None).unwrap();
    assert!(
        weights(&whole) == weights(&resumed),
        "a resume inside the decay"
    );
}

/// A run with an adaptive softmax (`model.adaptive_head`) and the default's inputs, the lead
/// rhymes fitted among them: its vocabulary numbered by count, stopped and resumed it trains and
/// fits as an uninterrupted run, its fit lowers its last evaluation, and `sample` writes with it.
#[test]
fn an_adaptive_softmax_trains_resumes_fits_and_samples() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = tiny_config();
    cfg.model.adaptive_head = 24;
    let (cfg, [plain, whole, half]) = runs_with_lead_rhymes(cfg, tmp.path());
    let with = curve(&whole);
    assert_eq!(
        curve(&half),
        with,
        "a resumed run trains and fits as an uninterrupted one"
    );
    let (without, last) = (curve(&plain), with.len() - 1);
    assert_eq!(
        without[..last],
        with[..last],
        "the same evaluations until the fit"
    );
    assert!(
        with[last].2 < without[last].2,
        "the fit lowers the last evaluation"
    );
    // The most frequent character of the corpus (after the newline) has id 1.
    let text = std::fs::read_to_string(&cfg.data.corpus).unwrap();
    let mut counts = std::collections::HashMap::new();
    text.chars()
        .filter(|&c| c != '\n')
        .for_each(|c| *counts.entry(c).or_insert(0usize) += 1);
    let most = counts
        .iter()
        .max_by_key(|&(c, n)| (n, std::cmp::Reverse(*c)))
        .unwrap();
    let tokenizer = CharTokenizer::load(&whole.join(TOKENIZER_FILE)).unwrap();
    assert_eq!(tokenizer.id(*most.0), Some(1), "{most:?}");
    let out = common::binary(env!("CARGO_BIN_EXE_sample"))
        .args(["--checkpoint", whole.to_str().unwrap(), "--prompt", "白日"])
        .args([
            "--num-samples",
            "2",
            "--max-new-tokens",
            "24",
            "--seed",
            "3",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.matches("白日").count() >= 2, "{stdout}");
}
