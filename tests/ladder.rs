//! The ladder's figures are its records': each rung's steps and whole-split loss are those of the
//! run its record keeps, its config is that run's recipe (the steps it planned as max_iters), and
//! each rung ends below the one under it.

use shige::config::RunConfig;
use shige::train::ladder::LADDER;
use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn each_rung_is_the_run_its_record_keeps() {
    for rung in LADDER {
        let text = std::fs::read_to_string(root().join(rung.record)).unwrap();
        let record: serde_json::Value = serde_json::from_str(&text).unwrap();
        let summary = &record["summary"];
        assert_eq!(
            summary["max_iters"].as_u64(),
            Some(rung.steps as u64),
            "{}",
            rung.record
        );
        let loss = summary["val_loss_whole"].as_f64().unwrap();
        assert!(
            (loss - rung.loss).abs() < 5e-5,
            "{}: {loss} against {}",
            rung.record,
            rung.loss
        );
        assert!(record["commit"].as_str().is_some_and(|c| c.len() == 40));
        // The config is the recipe that ran, with its planned steps and nothing else changed
        // (the corpus kind and vocabulary as the run completed them).
        let config = RunConfig::load(&root().join(rung.config)).unwrap();
        let ran: RunConfig = serde_json::from_value(record["config"].clone()).unwrap();
        let mut expected = ran.clone();
        expected.model.vocab_size = config.model.vocab_size;
        expected.data.kind = config.data.kind;
        expected.data.header_fields = config.data.header_fields;
        expected.train.minutes = None;
        assert_eq!(
            config.spelled_out(),
            expected.spelled_out(),
            "{}",
            rung.config
        );
        assert_eq!(config.train.max_iters, rung.steps, "{}", rung.config);
        assert_eq!(ran.model.vocab_size, rung.vocab_size, "{}", rung.config);
    }
}

/// `train` with `args`, one step into the run folder `out`, from the repository: (success, stderr).
fn train_one_step(args: &[&str], out: &Path) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_train"))
        .args(args)
        .args(["--stop-at", "1", "--out", out.to_str().unwrap()])
        .current_dir(root())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.success(), err)
}

/// `train --minutes M` without a config times the rungs here and runs the one it chose, said in
/// its notes; with a config, or a model setting of one's own, it plans that config's steps and
/// times no rung.
#[test]
fn minutes_without_a_config_run_the_rung_chosen_here() {
    let tmp = tempfile::tempdir().unwrap();
    let train = |args: &[&str], out: &Path| {
        let (ok, err) = train_one_step(args, out);
        assert!(ok, "{err}");
        err
    };
    // A budget no rung fits in on any machine: the smallest, said not to fit.
    let dir = tmp.path().join("climbed");
    let err = train(&["--minutes", "0.001"], &dir);
    assert!(err.contains("no recipe of the ladder fits"), "{err}");
    assert!(err.contains("expect a higher loss"), "{err}");
    assert!(err.contains(LADDER[0].config), "{err}");
    let saved = RunConfig::load(&dir.join("config.toml")).unwrap();
    let smallest = RunConfig::load(&root().join(LADDER[0].config)).unwrap();
    assert_eq!(saved.model.n_layer, smallest.model.n_layer);
    assert_eq!(saved.model.n_embd, smallest.model.n_embd);
    assert_eq!(saved.train.minutes, Some(0.001));
    // A folder that cannot take a new run is refused before any rung is timed.
    let taken = tmp.path().join("taken");
    std::fs::create_dir_all(&taken).unwrap();
    std::fs::write(taken.join("notes.txt"), "mine").unwrap();
    let (ok, err) = train_one_step(&["--minutes", "5"], &taken);
    assert!(!ok && !err.contains("ladder"), "{err}");
    assert!(
        err.contains("notes.txt") && err.lines().count() == 1,
        "{err}"
    );
    // A recipe of one's own (a model setting): the default config, planned for the minutes.
    let dir = tmp.path().join("own");
    let err = train(&["--minutes", "0.001", "--n-layer", "1"], &dir);
    assert!(
        err.contains("model.n_layer is given, so the ladder's recipes"),
        "{err}"
    );
    let saved = RunConfig::load(&dir.join("config.toml")).unwrap();
    let default = RunConfig::load(&root().join("configs/default.toml")).unwrap();
    assert_eq!(saved.model.n_layer, 1);
    assert_eq!(saved.model.n_embd, default.model.n_embd);
    let dir = tmp.path().join("given");
    let err = train(
        &["--config", "configs/tiny.toml", "--minutes", "0.01"],
        &dir,
    );
    assert!(!err.contains("ladder"), "{err}");
}
