//! Bad model configs are rejected with a message that names the problem.

mod common;

use shige::config::{ModelConfig, Position, RunConfig};

fn error_of(toml: &str) -> String {
    match ModelConfig::from_toml_str(toml, "test.toml").and_then(|c| c.validate().map(|_| c)) {
        Ok(c) => panic!("accepted {toml:?} as {c:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_good_config_parses_with_defaults() {
    let cfg = ModelConfig::from_toml_str("vocab_size = 100\nposition = \"rope\"\nn_layer = 2", "t")
        .unwrap();
    cfg.validate().unwrap();
    assert_eq!(
        (cfg.position, cfg.n_layer, cfg.n_embd, cfg.n_head),
        (Position::Rope, 2, 128, 4)
    );
}

#[test]
fn bad_configs_are_rejected_before_any_tensor() {
    let cases = [
        (
            "vocab_size = 10\nn_embd = 30\nn_head = 4",
            "not divisible by n_head",
        ),
        (
            "vocab_size = 10\nn_embd = 12\nn_head = 4\nposition = \"rope\"",
            "odd",
        ),
        ("vocab_size = 10\nn_layer = 0", "n_layer must be at least 1"),
        ("vocab_size = 10\nn_embd = 0", "n_embd must be at least 1"),
        (
            "vocab_size = 10\nblock_size = 0",
            "block_size must be at least 1",
        ),
        ("vocab_size = 0", "vocab_size must be at least 1"),
        (
            "vocab_size = 10\nposition = \"absolute\"",
            "unknown variant `absolute`",
        ),
        ("vocab_size = 10\nn_heads = 4", "unknown field `n_heads`"),
        ("vocab_size = 10\nn_layer = -1", "n_layer"),
        ("vocab_size = 10\nn_layer = \"two\"", "n_layer"),
        ("vocab_size = 10\ndropout = 1.5", "dropout"),
        (
            "vocab_size = 10\nsinusoidal_scale = 0.0",
            "sinusoidal_scale 0 must be",
        ),
        (
            "vocab_size = 10\nsinusoidal_scale = nan",
            "sinusoidal_scale NaN must be",
        ),
        ("vocab_size = 10\nrope_base = inf", "rope_base inf must be"),
        (
            "vocab_size = 10\nadaptive_head = 10",
            "adaptive_head 10 must be below the vocabulary's 10 characters",
        ),
        ("vocab_size = 10\nn_layer = ", "test.toml"),
    ];
    for (toml, expected) in cases {
        let message = error_of(toml);
        assert!(
            message.contains(expected),
            "{toml:?}: expected {expected:?} in {message:?}"
        );
        assert!(!message.contains('\n'), "one-line message: {message:?}");
    }
}

#[test]
fn the_model_refuses_an_invalid_config() {
    let cfg = ModelConfig {
        vocab_size: 10,
        n_embd: 30,
        n_head: 4,
        ..Default::default()
    };
    let err = shige::model::Gpt::seeded(&cfg, 0, &candle_core::Device::Cpu)
        .err()
        .expect("refused");
    assert!(err.to_string().contains("not divisible"), "{err}");
}

#[test]
fn position_names_parse_and_unknown_ones_say_what_to_use() {
    for p in Position::ALL {
        assert_eq!(p.name().parse::<Position>().unwrap(), p);
    }
    let err = "absolute".parse::<Position>().unwrap_err().to_string();
    assert!(
        err.contains("none, learned, sinusoidal, rope, alibi"),
        "{err}"
    );
}

/// Whole numbers from small to the largest, where TOML's signed 64 bits end.
fn count() -> impl proptest::strategy::Strategy<Value = u64> {
    use proptest::prelude::*;
    prop_oneof![
        30 => 1u64..300,
        1 => Just(i64::MAX as u64),
        1 => Just(1u64 << 63),
        1 => Just(u64::MAX),
        1 => any::<u64>(),
    ]
}

/// Numbers of every kind: ordinary, tiny, huge, negative, subnormal, not finite.
fn number() -> impl proptest::strategy::Strategy<Value = f64> {
    use proptest::prelude::*;
    prop_oneof![
        0.0f64..1.0,
        any::<f64>(),
        Just(f64::MIN_POSITIVE / 3.0),
        Just(1e300)
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
    /// A run keeps its config as config.toml, which `sample`, `serve`, `score` and `--resume`
    /// read back: every config that validates must come back from that file as it went in.
    #[test]
    fn every_config_that_validates_reads_back_from_its_file(
        sizes in proptest::collection::vec(count(), 10),
        reals in proptest::collection::vec(number(), 9),
        flags in proptest::collection::vec(proptest::bool::ANY, 2),
        position in proptest::sample::select(Position::ALL.to_vec()),
        corpus in "\\PC{0,12}",
    ) {
        let size = |i: usize| usize::try_from(sizes[i]).unwrap_or(usize::MAX);
        let mut cfg = shige::config::RunConfig::default();
        let m = &mut cfg.model;
        (m.vocab_size, m.block_size, m.n_layer, m.n_head) = (size(0), size(1), size(2), size(3));
        m.n_embd = m.n_head.saturating_mul(size(4) % 8 * 2 + 2);
        (m.dropout, m.rope_base, m.sinusoidal_scale) = (reals[0], reals[1], reals[2]);
        (m.bias, m.tie_weights, m.position) = (flags[0], flags[1], position);
        let t = &mut cfg.train;
        (t.batch_size, t.max_iters, t.eval_interval, t.eval_iters) = (size(5), size(6), size(7), size(8));
        t.seed = sizes[9];
        cfg.schedule.warmup_iters = t.max_iters.min(size(9));
        let o = &mut cfg.optimizer;
        (o.learning_rate, o.beta1, o.beta2) = (reals[3], reals[4], reals[5]);
        (o.weight_decay, o.grad_clip) = (reals[6], reals[7]);
        if flags[0] {
            o.kind = shige::config::OptimizerKind::Muon;
            o.muon_learning_rate = Some(reals[8]);
        }
        cfg.data.corpus = corpus;
        if cfg.validate().is_ok() {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("config.toml");
            std::fs::write(&path, cfg.to_toml().unwrap()).unwrap();
            let back = shige::config::RunConfig::load(&path);
            let back = back.map_err(|e| e.to_string());
            proptest::prop_assert_eq!(back, Ok(cfg));
        }
    }
}

#[test]
fn every_shipped_config_loads_and_its_files_ship() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut seen = 0;
    let folders = ["configs", "configs/ladder"].map(|f| std::fs::read_dir(root.join(f)).unwrap());
    for entry in folders.into_iter().flatten() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let mut cfg = shige::config::RunConfig::load(&path).unwrap();
        cfg.model.vocab_size = 100; // set from the corpus's tokenizer when a run starts
        cfg.validate()
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        // data/tang_song.txt ships too: a fresh clone runs every rung of the ladder.
        let data = &cfg.data;
        let others = data.validation.iter().chain(&data.decay_corpus);
        for file in std::iter::once(&data.corpus).chain(others) {
            assert!(
                root.join(file).is_file(),
                "{}: {file} is in the repository",
                path.display(),
            );
        }
        seen += 1;
    }
    assert!(
        seen >= 10,
        "default, tiny, lesson, shakespeare, ci and the ladder's six: {seen}"
    );
}

/// Every config but configs/default.toml is a change to another: it names its base and holds only
/// the keys whose values differ from the base's (so that none drifts from the default it copies).
#[test]
fn every_config_names_its_base_and_holds_only_what_differs() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let folders = ["configs", "configs/ladder"].map(|f| std::fs::read_dir(root.join(f)).unwrap());
    let mut paths: Vec<_> = folders
        .into_iter()
        .flatten()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    paths.push(root.join("configs/ablations/base.toml"));
    for path in paths
        .iter()
        .filter(|p| !p.ends_with("configs/default.toml"))
    {
        let file: toml::Table = toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let Some(toml::Value::String(base)) = file.get("base") else {
            panic!("{} names no base", path.display());
        };
        let base = RunConfig::load(&root.join(base)).unwrap();
        let base: toml::Table = toml::from_str(&base.spelled_out().to_toml().unwrap()).unwrap();
        for (section, keys) in file.iter().filter_map(|(s, k)| Some((s, k.as_table()?))) {
            for (key, value) in keys {
                assert_ne!(
                    base.get(section).and_then(|s| s.get(key)),
                    Some(value),
                    "{}: {section}.{key} is its base's",
                    path.display()
                );
            }
        }
    }
}

/// The defaults that differ between the code and configs/default.toml, pinned on both sides: a
/// config naming no schedule keeps the cosine (older configs give what they gave), the default
/// config names WSD; Muon's learning rate is the one the study chose.
#[test]
fn the_code_defaults_and_the_default_config_are_pinned() {
    use shige::config::{OptimizerKind, ScheduleKind};
    let code = RunConfig::default();
    assert_eq!(code.schedule.kind, ScheduleKind::Cosine);
    assert_eq!(code.schedule.decay_fraction(), 0.2);
    assert_eq!(code.optimizer.muon_learning_rate(), 0.005);
    assert_eq!(code.optimizer.kind, OptimizerKind::Adamw);
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/configs/default.toml");
    let file = RunConfig::load(std::path::Path::new(path)).unwrap();
    assert_eq!(file.schedule.kind, ScheduleKind::Wsd);
    assert_eq!(file.optimizer.kind, OptimizerKind::Adamw);
    assert_eq!(
        file.model.inputs(),
        ["verse_places", "rhyme_bias", "lead_rhymes"]
    );
    assert_eq!((file.train.max_iters, file.train.batch_size), (12_000, 8));
}

/// `--set section.key=value` reaches every setting: from a file of the code's defaults, each
/// key is set to another value (numbers moved, switches flipped, names changed) and the config
/// read is the one those values describe.
#[test]
fn set_changes_every_setting() {
    use shige::config::Override;
    let tmp = tempfile::tempdir().unwrap();
    let defaults = tmp.path().join("defaults.toml");
    std::fs::write(&defaults, RunConfig::default().to_toml().unwrap()).unwrap();
    // The names, and the settings that only a kind has (absent from the defaults).
    let names = [
        ("model.position", "\"alibi\""),
        ("model.activation", "\"relu2\""),
        ("data.corpus", "\"data/ci.txt\""),
        ("data.kind", "\"lines\""),
        ("train.dtype", "\"bf16\""),
        ("optimizer.kind", "\"muon\""),
        ("optimizer.muon_learning_rate", "0.01"),
        ("optimizer.muon_momentum", "0.9"),
        ("schedule.kind", "\"wsd\""),
        ("schedule.decay_fraction", "0.3"),
        ("train.minutes", "2.5"),
        ("model.inputs", "[\"verse_places\", \"rhyme_bias\"]"),
    ];
    let table: toml::Table = toml::from_str(&RunConfig::default().to_toml().unwrap()).unwrap();
    let mut sets: Vec<String> = names.iter().map(|(k, v)| format!("{k}={v}")).collect();
    // A step count and minutes are two ways of saying how long: max_iters is set below.
    let by_minutes = |section: &str, key: &str| (section, key) == ("train", "max_iters");
    for (section, values) in &table {
        for (key, value) in values.as_table().unwrap() {
            if by_minutes(section, key) {
                continue;
            }
            let other = match value {
                toml::Value::Integer(i) => (i + 1).to_string(),
                toml::Value::Float(f) => (f * 0.5 + 0.25).to_string(),
                toml::Value::Boolean(b) => (!b).to_string(),
                _ => continue, // the names above
            };
            sets.push(format!("{section}.{key}={other}"));
        }
    }
    let overrides: Vec<Override> = sets.iter().map(|s| Override::parse(s).unwrap()).collect();
    let set = RunConfig::load_with(&defaults, &overrides).unwrap();
    let mut expected = table.clone();
    for o in &overrides {
        let (section, key) = o.key.split_once('.').unwrap();
        expected[section]
            .as_table_mut()
            .unwrap()
            .insert(key.into(), o.value.clone());
    }
    let expected: RunConfig = toml::Value::Table(expected).try_into().unwrap();
    assert_eq!(set, expected);
    // Every field moved: nothing is left at the code's default.
    let after: toml::Table = toml::from_str(&set.to_toml().unwrap()).unwrap();
    for (section, values) in &table {
        for (key, value) in values.as_table().unwrap().iter() {
            if by_minutes(section, key) {
                continue;
            }
            assert_ne!(
                &after[section][key], value,
                "{section}.{key} did not change"
            );
        }
    }
    assert_eq!(set.train.minutes, Some(2.5));
    assert_eq!(set.optimizer.muon_learning_rate(), 0.01);
    assert_eq!(set.schedule.decay_fraction(), 0.3);
    // A key of the old layout names the setting it is now.
    let old = Override::parse("train.learning_rate=0.125").unwrap();
    assert_eq!(old.key, "optimizer.learning_rate");
    let read = RunConfig::load_with(&defaults, &[old]).unwrap();
    assert_eq!(read.optimizer.learning_rate, 0.125);
    // A setting of a kind not chosen is refused, saying which kind it belongs to.
    for (set, kind) in [
        ("optimizer.muon_learning_rate=0.01", "add --optimizer muon"),
        ("schedule.decay_fraction=0.3", "add --schedule wsd"),
    ] {
        let o = Override::parse(set).unwrap();
        let cfg = RunConfig::load_with(&defaults, &[o]).unwrap();
        let checked = cfg
            .optimizer
            .validate()
            .and(cfg.schedule.validate(&cfg.train));
        let err = checked.unwrap_err().to_string();
        assert!(err.contains(kind), "{set}: {err}");
    }

    let steps = Override::parse("train.max_iters=7").unwrap();
    let read = RunConfig::load_with(&defaults, std::slice::from_ref(&steps)).unwrap();
    assert_eq!(read.train.max_iters, 7);

    for (bad, says) in [
        ("model.verse_places=true", "model.inputs now"),
        ("optimizer.lerning_rate=1", "unknown field `lerning_rate`"),
        ("training.seed=1", "unknown field `training`"),
        ("train.max_iters=many", "expected usize"),
        ("n_layer=2", "section.key"),
        ("model.n_layer", "section.key=value"),
    ] {
        let err = Override::parse(bad).unwrap_err().to_string();
        assert!(err.contains(says) && err.contains("--set"), "{bad}: {err}");
    }
}

/// Whether a config is valid does not depend on the machine: a model of a billion layers is a
/// valid config, and refused only where a model would be built on this machine.
#[test]
fn validity_is_the_configs_and_memory_is_the_machines() {
    let huge = ModelConfig {
        vocab_size: 100,
        n_layer: 1_000_000_000,
        ..Default::default()
    };
    huge.validate().unwrap();
    let err = huge.check_weights_fit(0.0).unwrap_err().to_string();
    assert!(
        err.contains("weights alone take") && err.contains("available"),
        "{err}"
    );
    let vb = candle_nn::VarBuilder::zeros(candle_core::DType::F32, &candle_core::Device::Cpu);
    let err = shige::model::Gpt::new(vb, &huge).err().unwrap().to_string();
    assert!(err.contains("weights alone take"), "{err}");
}

/// Configs of the layout before the sections (all but the model in `[train]`), as runs saved
/// them and as configs/default.toml was, read as the configs they were: the old default as
/// today's file, an old run's config.toml with each key in its section and the settings of the
/// kinds it did not use (Muon's under AdamW, WSD's under the cosine) left out.
#[test]
fn configs_of_the_old_layout_read_as_they_were_meant() {
    let old_default = "[model]\nblock_size = 128\nn_layer = 2\nn_head = 4\nn_embd = 128\n\
        position = \"rope\"\ndropout = 0.05\nbias = true\ntie_weights = true\nverse_places = true\n\n\
        [train]\ncorpus = \"data/poems.txt\"\nbatch_size = 8\nmax_iters = 12000\neval_interval = 400\n\
        eval_iters = 20\nlearning_rate = 2e-3\nwarmup_iters = 30\nschedule = \"wsd\"\nbeta2 = 0.999\n";
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/configs/default.toml");
    let mut today = RunConfig::load(std::path::Path::new(path)).unwrap();
    today
        .model
        .inputs
        .retain(|name| !["rhyme_bias", "lead_rhymes"].contains(&name.as_str())); // added since
    let old = RunConfig::from_toml_str(old_default, "old").unwrap();
    assert_eq!(
        old.spelled_out(),
        today,
        "the same recipe, today's file spelling it out"
    );

    let old_run = "[model]\nvocab_size = 2197\nposition = \"rope\"\nsound = true\n\n[train]\n\
        corpus = \"data/tiny.txt\"\ncorpus_kind = \"verse\"\nbatch_size = 8\nmax_iters = 60\n\
        eval_interval = 20\neval_iters = 4\nlearning_rate = 0.003\nwarmup_iters = 10\n\
        weight_decay = 0.1\nbeta1 = 0.9\nbeta2 = 0.95\ngrad_clip = 1.0\nseed = 1337\ndtype = \"f32\"\n\
        optimizer = \"adamw\"\nmuon_learning_rate = 0.005\nmuon_momentum = 0.95\n\
        schedule = \"cosine\"\ndecay_fraction = 0.2\n";
    let read = RunConfig::from_toml_str(old_run, "old run").unwrap();
    read.validate().unwrap();
    let expected = "[model]\nvocab_size = 2197\nposition = \"rope\"\nsound = true\n\n\
        [data]\ncorpus = \"data/tiny.txt\"\nkind = \"verse\"\n\n\
        [train]\nbatch_size = 8\nmax_iters = 60\neval_interval = 20\neval_iters = 4\nseed = 1337\n\
        dtype = \"f32\"\n\n[optimizer]\nkind = \"adamw\"\nlearning_rate = 0.003\nweight_decay = 0.1\n\
        beta1 = 0.9\nbeta2 = 0.95\ngrad_clip = 1.0\n\n[schedule]\nkind = \"cosine\"\nwarmup_iters = 10\n";
    assert_eq!(read, RunConfig::from_toml_str(expected, "new").unwrap());
    assert_eq!(
        (
            read.optimizer.muon_learning_rate,
            read.schedule.decay_fraction
        ),
        (None, None)
    );
}

/// A step count and minutes are refused together however they are spelled (`train --max-iters 7
/// --set train.minutes=0.05` as `--minutes 0.05 --max-iters 7`), and a refused `--set` says what
/// is wrong with it alone: an integer past what a file holds as such, an invisible character
/// named, no hint about other sections unless the key is unknown.
#[test]
fn set_refuses_in_one_line_what_it_cannot_take() {
    use shige::config::Override;
    let tmp = tempfile::tempdir().unwrap();
    let defaults = tmp.path().join("defaults.toml");
    std::fs::write(&defaults, RunConfig::default().to_toml().unwrap()).unwrap();
    let both = ["train.max_iters=7", "train.minutes=0.05"];
    for order in [both, [both[1], both[0]]] {
        let overrides: Vec<Override> = order.iter().map(|s| Override::parse(s).unwrap()).collect();
        let err = RunConfig::load_with(&defaults, &overrides)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("both given") && err.contains("give one"),
            "{order:?}: {err}"
        );
    }
    let hint = "[optimizer]";
    for (bad, says) in [
        ("train.batch_size=1e20", "expected usize"),
        ("train.max_iters=-5", "expected usize"),
        ("train.seed=1.5", "expected u64"),
        (
            "train.seed=73786976294956232704",
            "73786976294956232704 is more than 9223372036854775807",
        ),
        ("data.corpus=a=b.txt\n", "its value holds U+000A"),
        ("train.max_iters=1e308", "floating point `1e308`"),
        (
            "optimizer.learning_rate=1e999",
            "1e999 is beyond the numbers a config file can hold",
        ),
        ("data.corpus=a\u{200b}.txt", "its value holds U+200B"),
        ("optimizer.learning_rate=.002", "write 0.002"),
        ("optimizer.learning_rate=2.", "write 2.0"),
        ("train.max_iters=--1", "expected usize"),
    ] {
        let err = Override::parse(bad).unwrap_err().to_string();
        assert!(err.contains(says), "{bad}: {err}");
        assert!(!err.contains(hint) && !err.contains('\n'), "{bad}: {err}");
        assert!(
            !err.contains("00000000000000000"),
            "{bad}: a wall of digits: {err}"
        );
    }
    let err = Override::parse("train.lerning_rate=1")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(hint),
        "an unknown key of [train] says where settings moved: {err}"
    );
}

/// configs/default.toml sets every setting a run reads, so that nothing of the default recipe
/// hides in the code's defaults: each key of the code's config that has a value (the settings of
/// the kinds it chooses spelled out) is in the file; the optional ones: the next test.
#[test]
fn the_default_config_sets_every_setting() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/configs/default.toml");
    let file: toml::Table = toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let read = RunConfig::load(std::path::Path::new(path)).unwrap();
    let mut code = RunConfig::default();
    (code.schedule.kind, code.optimizer.kind) = (read.schedule.kind, read.optimizer.kind);
    let code: toml::Table = toml::from_str(&code.spelled_out().to_toml().unwrap()).unwrap();
    let mut missing = Vec::new();
    for (section, keys) in &code {
        for key in keys.as_table().unwrap().keys() {
            let set = file.get(section).and_then(|s| s.get(key)).is_some();
            if !set {
                missing.push(format!("{section}.{key}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "configs/default.toml leaves to the code: {missing:?}"
    );
    assert_eq!(
        read,
        read.spelled_out(),
        "the file spells its kinds' settings out"
    );
}

/// A kind chosen with `--set` (or `--schedule`, `--optimizer`) leaves the file's settings of the
/// kind it replaces behind, keeps those of the kind it names, and keeps what `--set` asks for.
#[test]
fn a_kind_set_from_outside_drops_the_files_settings_of_other_kinds() {
    use shige::config::Override;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(
        &path,
        "[optimizer]\nkind = \"muon\"\nmuon_learning_rate = 0.05\n\n\
         [schedule]\nkind = \"wsd\"\ndecay_fraction = 0.3\n",
    )
    .unwrap();
    let set = |pairs: &[&str]| {
        let overrides: Vec<Override> = pairs.iter().map(|p| Override::parse(p).unwrap()).collect();
        let cfg = RunConfig::load_with(&path, &overrides).unwrap();
        cfg.optimizer.validate().unwrap();
        cfg.schedule.validate(&cfg.train).unwrap();
        cfg
    };
    let other = set(&["schedule.kind=cosine", "optimizer.kind=adamw"]);
    assert_eq!(other.schedule.decay_fraction, None);
    assert_eq!(other.optimizer.muon_learning_rate, None);
    let same = set(&["schedule.kind=wsd", "optimizer.kind=muon"]);
    assert_eq!(same.schedule.decay_fraction, Some(0.3));
    assert_eq!(same.optimizer.muon_learning_rate, Some(0.05));
    let asked = set(&["schedule.kind=wsd", "schedule.decay_fraction=0.4"]);
    assert_eq!(asked.schedule.decay_fraction, Some(0.4));
}

/// With minutes the step count is planned after the warm-up: a warm-up longer than the file's
/// max_iters is no fault then, and still one without minutes.
#[test]
fn a_warm_up_is_checked_against_max_iters_only_when_the_steps_are_given() {
    let mut cfg = RunConfig::default();
    cfg.train.max_iters = 20;
    cfg.schedule.warmup_iters = 100;
    assert!(cfg.schedule.validate(&cfg.train).is_err());
    cfg.train.minutes = Some(5.0);
    cfg.schedule.validate(&cfg.train).unwrap();
}

/// `train --print-config` prints a config whole (its base's keys, its kinds' settings spelled
/// out), checked as a run checks it; the printed config loads again as the same config; a base
/// is found from the config's folders when the config is named from inside configs/.
#[test]
fn print_config_prints_the_whole_config_that_loads_again() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let train = |cwd: &std::path::Path, args: &[&str]| {
        let out = common::binary(env!("CARGO_BIN_EXE_train"))
            .args(args)
            .current_dir(cwd)
            .output()
            .unwrap();
        let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
        (out.status.success(), text(out.stdout), text(out.stderr))
    };
    let tmp = tempfile::tempdir().unwrap();
    for config in ["configs/tiny.toml", "configs/ladder/60min.toml"] {
        let (ok, printed, err) = train(root, &["--config", config, "--print-config"]);
        assert!(ok, "{err}");
        let copy = tmp.path().join("printed.toml");
        std::fs::write(&copy, &printed).unwrap();
        let again = RunConfig::load(&copy).unwrap();
        assert_eq!(
            again,
            RunConfig::load(&root.join(config)).unwrap().spelled_out()
        );
        assert!(!printed.lines().any(|l| l.starts_with("base")), "{printed}");
    }
    // Named from inside configs/, a rung finds its base above it.
    let (ok, printed, err) = train(
        &root.join("configs"),
        &["--config", "ladder/1min.toml", "--print-config"],
    );
    assert!(ok && printed.contains("max_iters = 1793"), "{err}");
    // A value the run would refuse is refused here too, in one line.
    let (ok, _, err) = train(
        root,
        &[
            "--config",
            "configs/tiny.toml",
            "--print-config",
            "--n-layer",
            "0",
        ],
    );
    assert!(
        !ok && err.trim().lines().count() == 1 && err.contains("n_layer"),
        "{err}"
    );
}

/// A decay on another corpus needs a schedule with a decay: WSD's, not the cosine.
#[test]
fn a_decay_corpus_is_refused_with_a_schedule_that_has_no_decay() {
    let mut cfg = RunConfig::default();
    cfg.model.vocab_size = 100; // a vocabulary's, as the corpus gives it
    cfg.data.decay_corpus = Some("data/poems.txt".into());
    cfg.schedule.kind = shige::config::ScheduleKind::Wsd;
    cfg.validate().unwrap();
    cfg.schedule.kind = shige::config::ScheduleKind::Cosine;
    let err = cfg.validate().unwrap_err().to_string();
    assert!(
        err.contains("data.decay_corpus") && err.contains("choose wsd"),
        "{err}"
    );
}

/// Every key a config may hold, the optional ones too (toml writes no key for `None`, so the walk
/// above cannot see them), is in configs/default.toml: set, or shown in a comment where it has no
/// value to give in the default (`# key = …`). The keys are serde's own list, from the error for an
/// unknown one.
#[test]
fn the_default_config_shows_every_key_the_optional_ones_too() {
    use shige::config::{DataConfig, ModelConfig, OptimizerConfig, ScheduleConfig, TrainConfig};
    fn keys<T: serde::de::DeserializeOwned + std::fmt::Debug>() -> Vec<String> {
        let err = toml::from_str::<T>("no_such_key = 1")
            .unwrap_err()
            .to_string();
        let (_, expected) = err.split_once("expected one of").expect(&err);
        let names = expected.split(',').map(|n| n.trim().trim_matches('`'));
        names
            .map(|n| n.split('`').next().unwrap().to_string())
            .collect()
    }
    let sections = [
        ("model", keys::<ModelConfig>()),
        ("data", keys::<DataConfig>()),
        ("train", keys::<TrainConfig>()),
        ("optimizer", keys::<OptimizerConfig>()),
        ("schedule", keys::<ScheduleConfig>()),
    ];
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/configs/default.toml");
    let text = std::fs::read_to_string(path).unwrap();
    let mut missing = Vec::new();
    for (section, keys) in &sections {
        assert!(keys.len() >= 3, "[{section}]: {keys:?}");
        let start = text.find(&format!("[{section}]\n")).expect(section);
        let body = text[start..].split("\n[").next().unwrap();
        for key in keys {
            let shown = body.lines().any(|line| {
                let line = line.trim_start_matches(['#', ' ']);
                line.starts_with(&format!("{key} = ")) || line.contains(&format!(" or {key} = "))
            });
            if !shown && key != "header_fields" {
                missing.push(format!("{section}.{key}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "configs/default.toml does not show {missing:?}"
    );
}
