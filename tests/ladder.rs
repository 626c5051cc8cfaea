//! The ladder's figures are its records': each rung's steps and whole-split loss are those of the
//! run its record keeps, its config is that run's recipe (the steps it planned as max_iters), and
//! each rung ends below the one under it.

mod common;

use shige::config::RunConfig;
use shige::train::ladder::LADDER;
use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn each_rung_is_the_run_its_record_keeps() {
    for rung in LADDER {
        // Its figures read from its record (compiled in), the record a run of this program.
        let recorded = rung.recorded().unwrap();
        let text = std::fs::read_to_string(root().join(rung.record)).unwrap();
        let record: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert!(record["commit"].as_str().is_some_and(|c| c.len() == 40));
        // The config is the recipe that ran, with its steps as max_iters: the check `train
        // --minutes` makes passes it (an edited rung is passed over: tests below).
        let config = RunConfig::load(&root().join(rung.config)).unwrap();
        assert_eq!(
            rung.edited(&config, &recorded.config),
            None,
            "{}",
            rung.config
        );
        assert_eq!(config.train.max_iters, recorded.steps, "{}", rung.config);
    }
}

/// `train` with `args`, one step into the run folder `out`, from the repository: (success, stderr).
fn train_one_step(args: &[&str], out: &Path) -> (bool, String) {
    let out = common::binary(env!("CARGO_BIN_EXE_train"))
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
    // A budget no rung fits in on any machine: the smallest is named, and the default config
    // planned for the minutes, with no recorded loss promised.
    let dir = tmp.path().join("climbed");
    let err = train(&["--minutes", "0.001"], &dir);
    // (A rung that reads data/tang_song.txt, where it is not built, is passed over first.)
    assert!(
        err.lines().any(
            |l| l.starts_with("0.001 minutes and no config: no recipe of the ladder fits here")
        ),
        "{err}"
    );
    assert!(err.contains(LADDER[0].config), "{err}");
    assert!(
        err.contains("configs/default.toml is planned for the minutes"),
        "{err}"
    );
    assert!(!err.contains("whole-split"), "{err}");
    let saved = RunConfig::load(&dir.join("config.toml")).unwrap();
    let default = RunConfig::load(&root().join("configs/default.toml")).unwrap();
    assert_eq!(saved.model.inputs, default.model.inputs);
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

/// A folder holding the repository's configs and the data `train` reads, to change in a test.
fn copy_of_the_repository(tmp: &Path) -> std::path::PathBuf {
    let copy = tmp.join("repo");
    for dir in ["configs", "configs/ladder", "data"] {
        std::fs::create_dir_all(copy.join(dir)).unwrap();
    }
    for file in ["configs/default.toml", "data/poems.txt", "data/tiny.txt"] {
        std::fs::copy(root().join(file), copy.join(file)).unwrap();
    }
    for rung in LADDER {
        std::fs::copy(root().join(rung.config), copy.join(rung.config)).unwrap();
    }
    copy
}

/// `train --minutes M --stop-at 1` in the folder `cwd` with `extra` flags: (success, stderr).
fn minutes_in(cwd: &Path, minutes: &str, extra: &[&str]) -> (bool, String) {
    let out = common::binary(env!("CARGO_BIN_EXE_train"))
        .args(["--minutes", minutes, "--stop-at", "1", "--out", "run"])
        .args(extra)
        .current_dir(cwd)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(cwd.join("run"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What the ladder does with corpora it did not expect (#78): a rung whose corpus is not the one
/// it ran on, cannot be read as it reads it, or is missing is passed over, saying why; where none
/// runs here, the default config is planned for the minutes and no recorded loss is promised.
#[test]
fn a_rung_is_run_only_where_it_runs_as_its_record_ran() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = copy_of_the_repository(tmp.path());
    let poems = std::fs::read_to_string(root().join("data/poems.txt")).unwrap();
    let lines: Vec<&str> = poems.lines().collect();
    // data/tang_song.txt unusable in three ways: the Song rungs are passed over and a rung of
    // data/poems.txt runs.
    let held_out: String = lines
        .iter()
        .skip(19)
        .step_by(20)
        .take(30)
        .map(|p| format!("{p}\n"))
        .collect();
    let tang_song = repo.join("data/tang_song.txt");
    for (case, make) in [
        (
            "empty",
            Box::new(|| std::fs::write(&tang_song, "").unwrap()) as Box<dyn Fn()>,
        ),
        (
            "a folder",
            Box::new(|| std::fs::create_dir(&tang_song).unwrap()),
        ),
        (
            "held-out poems",
            Box::new(|| std::fs::write(&tang_song, &held_out).unwrap()),
        ),
        (
            "300 poems",
            Box::new(|| std::fs::write(&tang_song, lines[..300].join("\n")).unwrap()),
        ),
    ] {
        make();
        let (ok, err) = minutes_in(&repo, "60", &[]);
        assert!(ok, "{case}: {err}");
        for rung in [
            "configs/ladder/30min_bf16.toml",
            "configs/ladder/60min.toml",
        ] {
            assert!(
                err.contains(&format!("{rung}: not here: ")),
                "{case}: {err}"
            );
        }
        assert!(
            !err.contains("no recipe of the ladder runs here"),
            "{case}: {err}"
        );
        let _ = std::fs::remove_file(&tang_song).or_else(|_| std::fs::remove_dir(&tang_song));
    }
    // data/poems.txt cut to 5,000 poems: no rung is measured on it; the default config is run.
    std::fs::write(repo.join("data/poems.txt"), lines[..5000].join("\n") + "\n").unwrap();
    let (ok, err) = minutes_in(&repo, "0.01", &[]);
    assert!(ok, "{err}");
    assert!(
        err.contains("configs/ladder/1min.toml: not here: data/poems.txt (data.corpus) is not the text it was measured on"),
        "{err}"
    );
    assert!(
        err.contains(
            "no recipe of the ladder runs here as its record ran: configs/default.toml is planned"
        ),
        "{err}"
    );
    assert!(
        !err.contains("ended at whole-split"),
        "no recorded loss promised: {err}"
    );
    // Missing: the same, and the default config's corpus is missing too.
    std::fs::remove_file(repo.join("data/poems.txt")).unwrap();
    let (ok, err) = minutes_in(&repo, "0.01", &[]);
    assert!(!ok, "{err}");
    assert!(err.contains("no recipe of the ladder runs here"), "{err}");
    assert!(
        err.trim_end()
            .lines()
            .last()
            .unwrap()
            .starts_with("error: cannot read corpus data/poems.txt"),
        "{err}"
    );
}

/// An edited rung is passed over, naming what changed (#78: it was promised its record's loss);
/// `--dtype` narrows the ladder to the rungs of that precision instead of leaving it.
#[test]
fn an_edited_rung_is_passed_over_and_a_precision_narrows_the_ladder() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = copy_of_the_repository(tmp.path());
    let rung = repo.join("configs/ladder/30min.toml");
    let text = std::fs::read_to_string(&rung).unwrap();
    let edited = text
        .replace("n_layer = 4", "n_layer = 1")
        .replace("n_embd = 256", "n_embd = 64");
    assert_ne!(edited, text);
    std::fs::write(&rung, edited).unwrap();
    let (ok, err) = minutes_in(&repo, "100", &["--dtype", "f32"]);
    assert!(ok, "{err}");
    assert!(
        err.contains("configs/ladder/30min.toml: not here: configs/ladder/30min.toml is not the recipe its record ran (model.n_embd: recorded 256, now 64; model.n_layer: recorded 4, now 1)"),
        "{err}"
    );
    assert!(
        !err.contains("30min_bf16") && !err.contains("60min"),
        "only the f32 rungs are tried: {err}"
    );
    assert!(
        err.contains("and no config: configs/ladder/10min.toml"),
        "{err}"
    );
}

/// The loss to expect of a ladder recipe at the steps planned here comes from its records (#79):
/// each rung's own steps give its recorded loss, the records of one recipe are found together
/// (the 1-, 3- and 10-minute rungs; the bf16 30- and 60-minute ones), and a run of a rung says
/// it with its plan and keeps it in its summary; a recipe of one's own expects nothing.
#[test]
fn a_rungs_run_expects_the_loss_its_records_give_at_its_steps() {
    use shige::train::expect::Expected;
    let mut family_sizes = Vec::new();
    for rung in LADDER {
        let recorded = rung.recorded().unwrap();
        let config = RunConfig::load(&root().join(rung.config)).unwrap();
        let expected = Expected::of(&config, &recorded.texts).unwrap().unwrap();
        assert_eq!(
            expected.at(recorded.steps),
            Some(recorded.loss),
            "{}",
            rung.config
        );
        family_sizes.push(
            expected
                .describe(recorded.steps)
                .matches(" steps: ")
                .count(),
        );
        let mut other = config.clone();
        other.model.dropout += 0.01;
        assert_eq!(Expected::of(&other, &recorded.texts).unwrap(), None);
        assert_eq!(Expected::of(&config, "data.corpus=0").unwrap(), None);
    }
    assert_eq!(family_sizes, [3, 3, 3, 1, 2, 2]);

    let tmp = tempfile::tempdir().unwrap();
    let summary = |dir: &Path| -> serde_json::Value {
        let text = std::fs::read_to_string(dir.join("summary.json")).unwrap();
        serde_json::from_str(&text).unwrap()
    };
    // Its own steps: its record's loss.
    let dir = tmp.path().join("rung");
    let (ok, err) = train_one_step(&["--config", "configs/ladder/1min.toml"], &dir);
    assert!(ok, "{err}");
    let first = LADDER[0].recorded().unwrap().loss;
    assert_eq!(summary(&dir)["expected_val_loss_whole"], first);
    // Planned for minutes: said with the first plan, at the warm-up's end (step 30).
    let dir = tmp.path().join("planned");
    let out = common::binary(env!("CARGO_BIN_EXE_train"))
        .args(["--config", "configs/ladder/1min.toml", "--minutes", "10"])
        .args(["--stop-at", "31", "--out", dir.to_str().unwrap()])
        .current_dir(root())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let planned = RunConfig::load(&dir.join("config.toml"))
        .unwrap()
        .train
        .max_iters;
    let said = (err.lines())
        .find(|l| l.starts_with("expect whole-split about "))
        .expect(&err);
    assert!(said.contains(&format!("at {planned} steps")), "{said}");
    assert!(said.contains("docs/results/ladder_10min.json"), "{said}");
    let expected = summary(&dir)["expected_val_loss_whole"].as_f64().unwrap();
    assert!(said.contains(&format!("{expected:.3}")), "{said}");
    assert!(
        expected < 4.7406,
        "{planned} steps, more than 1,793: {expected}"
    );
    // A recipe of one's own: nothing to expect.
    let dir = tmp.path().join("own");
    let (ok, err) = train_one_step(
        &["--config", "configs/ladder/1min.toml", "--dropout", "0.2"],
        &dir,
    );
    assert!(ok, "{err}");
    assert_eq!(
        summary(&dir)["expected_val_loss_whole"],
        serde_json::Value::Null
    );
}

/// Where bf16 matmuls cannot run (a CPU without AMX-BF16 or AVX512-BF16, or this build capped at
/// AVX2 and f32), the bf16 rungs are passed over, saying why, and an f32 rung runs with the loss
/// its records expect. CI runs it in the capped build; the default build on x86 can run bf16 on
/// the CPUs that have it, so there it is left to that run.
#[test]
#[cfg_attr(
    all(target_arch = "x86_64", feature = "avx512"),
    ignore = "needs a build without bf16: CI runs it capped at AVX2 (no avx512 feature)"
)]
fn without_bf16_the_bf16_rungs_are_passed_over_and_an_f32_rung_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let (ok, err) = train_one_step(&["--minutes", "30"], &tmp.path().join("run"));
    assert!(ok, "{err}");
    for rung in [
        "configs/ladder/60min.toml",
        "configs/ladder/30min_bf16.toml",
    ] {
        let passed_over =
            format!("{rung}: not here: dtype bf16 needs a CPU with AMX-BF16 or AVX512-BF16");
        assert!(err.contains(&passed_over), "{err}");
    }
    let chosen = err
        .lines()
        .find(|l| l.starts_with("30 minutes and no config: configs/ladder/"))
        .expect(&err);
    assert!(!chosen.contains("bf16"), "{chosen}");
    let saved = RunConfig::load(&tmp.path().join("run/config.toml")).unwrap();
    assert_eq!(saved.train.dtype, shige::ops::Precision::F32);
}
