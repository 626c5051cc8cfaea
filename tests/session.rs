//! A run trained in memory (the static page's Train button, `train::Session`) is the run `train`
//! trains: the same metrics, poems and weights for the same config and text.

mod common;

use common::tiny_config;
use shige::train::metrics::{from_csv, read_samples};
use shige::train::run_dir::{RunDir, METRICS_FILE, SAMPLES_FILE, STATE_FILE};
use shige::train::safetensors::read_safetensors;
use shige::train::Session;

#[test]
fn a_run_in_memory_trains_what_train_trains() {
    let mut cfg = tiny_config();
    (cfg.train.max_iters, cfg.train.eval_interval) = (24, 8);
    cfg.model.dropout = 0.1; // the masks' draws too
    trains_in_memory_what_train_trains(&cfg);
}

/// With a fitted input (the lead rhymes, as the default has) the tab fits its biases after the
/// last step as `train` does: the same last evaluation, the same fitted biases.
#[test]
fn a_run_in_memory_fits_as_train_fits() {
    let mut cfg = tiny_config();
    (cfg.train.max_iters, cfg.train.eval_interval) = (24, 8);
    cfg.model.inputs = ["verse_places", "rhyme_bias", "lead_rhymes"]
        .map(String::from)
        .to_vec();
    let parameters = trains_in_memory_what_train_trains(&cfg);
    let fitted = &parameters["transformer.blr.weight"];
    assert!(fitted.iter().all(|&b| b > 0.5), "not fitted: {fitted:?}");
}

/// Trains `cfg` with `train` and in memory, and checks that both give the same metrics, poems
/// and weights (to the bit); the weights by name.
fn trains_in_memory_what_train_trains(
    cfg: &shige::config::RunConfig,
) -> std::collections::HashMap<String, Vec<f32>> {
    let dir = tempfile::tempdir().unwrap();
    common::run(cfg, dir.path(), false, None).unwrap();
    let run = RunDir::new(dir.path());
    let want_rows = from_csv(&std::fs::read_to_string(run.file(METRICS_FILE)).unwrap()).unwrap();
    let want_samples = read_samples(&run.file(SAMPLES_FILE)).unwrap();

    let text = std::fs::read_to_string(&cfg.data.corpus).unwrap();
    let mut session = Session::new(cfg.clone(), &text, "data/tiny.txt").unwrap();
    let mut losses = Vec::new();
    while !session.is_done() {
        losses.push(session.train_step().unwrap());
        if session.evaluates_now() {
            session.evaluate(1.0).unwrap();
        }
    }
    assert_eq!(session.step(), 24);
    assert!(
        losses.iter().all(|l| l.is_finite()) && losses[23] < losses[0],
        "{losses:?}"
    );
    let rows = session.rows();
    assert_eq!(rows.len(), want_rows.len());
    for (got, want) in rows.iter().zip(&want_rows) {
        // metrics.csv keeps the losses to its printed digits.
        assert_eq!(got.step, want.step);
        for (a, b) in [
            (got.train_loss, want.train_loss),
            (got.val_loss, want.val_loss),
        ] {
            assert!(
                (a - b).abs() <= 1e-6 * b.abs(),
                "step {}: {a} vs {b}",
                got.step
            );
        }
    }
    let texts = |s: &[shige::train::metrics::EvalSample]| {
        s.iter().map(|s| s.text.clone()).collect::<Vec<_>>()
    };
    assert_eq!(texts(session.samples()), texts(&want_samples));
    // The weights: the run directory's last checkpoint against the session's model.
    let (saved, _) = read_safetensors(&run.file(STATE_FILE)).unwrap();
    let ours = session.parameters();
    assert!(!ours.is_empty());
    let mut by_name = std::collections::HashMap::new();
    for (name, tensor) in ours {
        let theirs = &saved[&format!("param.{name}")];
        let (a, b) = (
            tensor.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            theirs.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        );
        assert_eq!(a.len(), b.len(), "{name}: its shape");
        assert!(
            a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
            "{name} differs"
        );
        by_name.insert(name, a);
    }
    by_name
}

/// What a run in memory (the browser tab) cannot honour is refused in one line, not silently
/// ignored: a corpus file, a plan by minutes and a validation file; a model too large for the memory at hand is
/// refused with its estimate before anything is allocated, as `train` refuses it.
#[test]
fn a_run_in_memory_refuses_what_it_cannot_honour() {
    use shige::config::Override;
    let set = |s: &str| Override::parse(s).unwrap();
    for (setting, says) in [
        (
            "data.corpus=data/poems.txt",
            "data.corpus: not possible for a run trained in memory",
        ),
        (
            "train.minutes=0.05",
            "train.minutes: not possible for a run trained in memory",
        ),
        (
            "data.validation=data/poems.txt",
            "data.validation: not possible for a run trained in memory",
        ),
    ] {
        let err = Session::check_settings(&[set("train.max_iters=9"), set(setting)])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(says) && !err.contains('\n'),
            "{setting}: {err}"
        );
    }
    assert!(Session::check_settings(&[set("model.n_layer=3")]).is_ok());
    let text = std::fs::read_to_string(tiny_config().data.corpus).unwrap();
    let mut minutes = tiny_config();
    minutes.train.minutes = Some(1.0);
    let err = Session::new(minutes, &text, "tiny")
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("train.minutes: not possible"), "{err}");
    let mut validated = tiny_config();
    validated.data.validation = Some("data/poems.txt".into());
    let err = Session::new(validated, &text, "tiny")
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("data.validation: not possible"), "{err}");
    let huge: [(fn(&mut shige::config::RunConfig), &str); 2] = [
        (|c| c.model.n_layer = 10_000_000, "weights alone take"),
        (
            |c| c.train.batch_size = 100_000_000,
            "training this config needs about",
        ),
    ];
    for (make_huge, says) in huge {
        let mut cfg = tiny_config();
        make_huge(&mut cfg);
        let err = Session::new(cfg, &text, "tiny").err().unwrap().to_string();
        assert!(err.contains(says), "{err}");
    }
}
