//! The ablation runner at tiny size, and the pictures of a trained model.

use shige::experiments::ablation::{self, AblationOptions, Spec};
use shige::experiments::{attention_maps, report};
use shige::train::load::load_run;
use shige::train::run_dir::{RunDir, STATE_FILE};
use shige::train::{train, TrainOptions};
use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn a_specs_name_gives_a_directory_under_checkpoints_and_nothing_else() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = |name: &str| {
        let path = tmp.path().join("spec.toml");
        let text = format!(
            "name = {}\nbase = \"configs/tiny.toml\"\n[[variant]]\nname = \"a\"\n",
            toml::Value::String(name.into())
        );
        std::fs::write(&path, text).unwrap();
        Spec::load(&path)
    };
    for (name, dir) in [
        ("heads", "heads"),
        ("../../../escaped", "escaped"),
        ("/abs/path", "abs-path"),
        ("two\nlines", "two-lines"),
        ("C:\\Users", "c-users"),
    ] {
        assert_eq!(spec(name).unwrap().dir_name(), dir, "{name:?}");
    }
    for name in ["", "..", "/", "\n"] {
        let refused = spec(name).unwrap_err().to_string();
        assert!(
            refused.contains("needs letters or digits"),
            "{name:?}: {refused}"
        );
    }
}

#[test]
fn heads_ablation_at_tiny_size_gives_one_finite_row_per_variant() {
    std::env::set_current_dir(root()).unwrap();
    let mut spec = Spec::load(Path::new("configs/ablations/heads.toml")).unwrap();
    spec.base = "configs/tiny.toml".into();
    let tmp = tempfile::tempdir().unwrap();
    let options = AblationOptions {
        spec,
        out: tmp.path().to_path_buf(),
        max_iters: Some(8),
        progress: false,
    };
    let results = ablation::run(&options).unwrap();
    let names: Vec<&str> = results.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["1 head", "4 heads", "8 heads"]);
    for r in &results {
        assert_eq!(r.steps, 8, "{}", r.name);
        assert!(
            r.val_loss.is_finite() && r.train_loss.is_finite(),
            "{}",
            r.name
        );
        // 8 tiny steps take milliseconds: their time is kept finely enough to give a rate.
        assert!(
            r.tokens_per_s > 0.0,
            "{}: {} tokens/s",
            r.name,
            r.tokens_per_s
        );
    }
    assert!(
        results
            .windows(2)
            .all(|w| w[0].parameters == w[1].parameters),
        "the head count does not change the parameter count"
    );
    let table = report::markdown(&options.spec, &results);
    let rows: Vec<&str> = table
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| variant"))
        .collect();
    assert_eq!(rows.len(), 3, "{table}");
    assert_eq!(report::csv(&options.spec, &results).lines().count(), 4);
    assert!(report::curves_svg("heads", &results)
        .unwrap()
        .contains("<svg"));

    // A second run reuses the finished variants instead of training again: their files are
    // not written again.
    let written = |dir: &str| {
        std::fs::metadata(Path::new(dir).join(STATE_FILE))
            .unwrap()
            .modified()
            .unwrap()
    };
    let before: Vec<_> = results.iter().map(|r| written(&r.dir)).collect();
    let again = ablation::run(&options).unwrap();
    let after: Vec<_> = again.iter().map(|r| written(&r.dir)).collect();
    assert_eq!(before, after, "a finished variant was trained again");
    assert_eq!(again[0].val_loss, results[0].val_loss);
    // A variant whose config changed is not reused: the stale run is named, not reported.
    let mut edited = options.spec.clone();
    edited.variant[0]
        .train
        .insert("learning_rate".into(), toml::Value::Float(0.01));
    let edited = AblationOptions {
        spec: edited,
        out: options.out.clone(),
        max_iters: Some(8),
        progress: false,
    };
    let err = format!("{:#}", ablation::run(&edited).unwrap_err());
    assert!(
        err.contains("another config") && err.contains("learning_rate"),
        "{err}"
    );

    // Pictures of a trained variant: one heatmap per head per layer, and the sinusoidal table.
    let run = load_run(Path::new(&results[1].dir)).unwrap();
    let poem = "白日依山尽，黄河入海流。";
    let files =
        attention_maps::write_attention_maps(&run.model, &run.tokenizer, poem, tmp.path()).unwrap();
    assert_eq!(files.len(), 2, "one file per layer");
    let svg = std::fs::read_to_string(&files[0]).unwrap();
    let cells = svg.matches("<rect x=").count();
    assert_eq!(cells, 4 * 12 * 12, "4 heads × 12 × 12 cells");
    let table_path = tmp.path().join("sinusoidal.svg");
    attention_maps::write_sinusoidal_map(16, 8, &table_path).unwrap();
    assert_eq!(
        std::fs::read_to_string(&table_path)
            .unwrap()
            .matches("<rect x=")
            .count(),
        16 * 8
    );
}

#[test]
fn an_ablation_with_seeds_trains_each_variant_once_per_seed_and_gives_their_mean() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("seeds.toml");
    let variants = "[[variant]]\nname = \"lr 1e-3\"\ntrain = { learning_rate = 1e-3 }\n\
                    [[variant]]\nname = \"lr 3e-3\"\ntrain = { learning_rate = 3e-3 }\n";
    let text =
        format!("name = \"seeds\"\nbase = \"configs/tiny.toml\"\nseeds = [3, 4]\n{variants}");
    std::fs::write(&path, text).unwrap();
    let options = AblationOptions {
        spec: Spec::load(&path).unwrap(),
        out: tmp.path().join("out"),
        max_iters: Some(6),
        progress: false,
    };
    let results = ablation::run(&options).unwrap();
    let labels: Vec<&str> = results.iter().map(|r| r.label.as_str()).collect();
    assert_eq!(
        labels,
        [
            "lr 1e-3, seed 3",
            "lr 1e-3, seed 4",
            "lr 3e-3, seed 3",
            "lr 3e-3, seed 4"
        ]
    );
    for (r, seed) in results.iter().zip([3, 4, 3, 4]) {
        let saved = load_run(Path::new(&r.dir)).unwrap().config;
        assert_eq!((saved.train.seed, r.seed), (seed, seed), "{}", r.label);
        assert!(r.dir.ends_with(&format!("-seed-{seed}")), "{}", r.dir);
    }
    let (a, b) = (results[0].val_loss_whole, results[1].val_loss_whole);
    assert_ne!(a, b, "the two seeds trained the same run");
    // The whole-split loss is that of the final weights, as `train` ends with.
    let alone = train(TrainOptions {
        device: candle_core::Device::Cpu,
        config: load_run(Path::new(&results[0].dir)).unwrap().config,
        run: RunDir::new(tmp.path().join("alone")),
        resume: false,
        stop_at: None,
        progress: false,
        kernels: shige::ops::Kernels::Fused,
        parent: None,
        clock: None,
    })
    .unwrap();
    assert_eq!(alone.val_loss_whole, a);
    let table = report::markdown(&options.spec, &results);
    let row = format!(
        "| lr 1e-3 | {:.3} | {:.3} | {:.3} |",
        (a + b) / 2.0,
        a.min(b),
        a.max(b)
    );
    assert!(
        table.contains("Over the seeds [3, 4]") && table.contains(&row),
        "{row} not in\n{table}"
    );
    let csv = report::csv(&options.spec, &results);
    assert!(
        csv.lines().nth(2).unwrap().starts_with("lr 1e-3,4,"),
        "{csv}"
    );
}
