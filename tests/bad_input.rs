//! The bad-input matrix: every case runs a binary as a user would and expects a non-zero exit,
//! one line `error: …` on stderr saying what is wrong, no panic or backtrace, and no file of an
//! existing run changed.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

const TRAIN: &str = env!("CARGO_BIN_EXE_train");
const SAMPLE: &str = env!("CARGO_BIN_EXE_sample");
const HEADS: &str = env!("CARGO_BIN_EXE_heads_positions");
const ABLATE: &str = env!("CARGO_BIN_EXE_ablate");
const BENCH: &str = env!("CARGO_BIN_EXE_bench");
const SERVE: &str = env!("CARGO_BIN_EXE_serve");
const SCORE: &str = env!("CARGO_BIN_EXE_score");

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every file of a directory with a hash of its bytes, to see that nothing changed.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, u64> {
    use std::hash::{Hash, Hasher};
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.path().symlink_metadata().is_ok_and(|m| m.is_file()))
                .map(|e| {
                    let mut h = std::collections::hash_map::DefaultHasher::new();
                    std::fs::read(e.path()).unwrap_or_default().hash(&mut h);
                    (e.path(), h.finish())
                })
                .collect()
        })
        .unwrap_or_default()
}

/// How long a refused command may take: a case that hangs (a FIFO read, a huge allocation) fails.
const TIME_LIMIT: Duration = Duration::from_secs(120);

/// Runs `bin` with `args` in the repository, with a time limit; returns (success, stderr).
fn run_bin(case: &str, bin: &str, args: &[&str]) -> (bool, String) {
    run_bin_in(root(), case, bin, args)
}

/// [`run_bin`] in the folder `cwd`.
fn run_bin_in(cwd: &Path, case: &str, bin: &str, args: &[&str]) -> (bool, String) {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let err_path =
        std::env::temp_dir().join(format!("shige-bad-input-{}-{n}.err", std::process::id()));
    let mut child = common::binary(bin)
        .args(args)
        .current_dir(cwd)
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > TIME_LIMIT {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("{case}: still running after {TIME_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    let _ = std::fs::remove_file(&err_path);
    (status.success(), stderr)
}

/// Runs `bin` with `args` and checks the failure; `expect` are pieces of the message.
fn fails(case: &str, bin: &str, args: &[&str], expect: &[&str]) {
    fails_in(root(), case, bin, args, expect)
}

/// [`fails`] in the folder `cwd`.
fn fails_in(cwd: &Path, case: &str, bin: &str, args: &[&str], expect: &[&str]) {
    let (success, stderr) = run_bin_in(cwd, case, bin, args);
    assert!(!success, "{case}: exit 0\n{stderr}");
    assert!(
        !stderr.contains("panicked") && !stderr.contains("backtrace"),
        "{case}: panic or backtrace\n{stderr}"
    );
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error")).collect();
    assert_eq!(errors.len(), 1, "{case}: one error line expected\n{stderr}");
    assert_eq!(
        stderr.lines().rfind(|l| !l.trim().is_empty()),
        Some(errors[0]),
        "{case}: the error is the last line\n{stderr}"
    );
    for piece in expect {
        assert!(
            errors[0].contains(piece),
            "{case}: `{piece}` missing in\n{}",
            errors[0]
        );
    }
}

/// A tiny trained run in `tmp`/run, with no extra flags: its directory.
fn trained_tiny(tmp: &Path) -> PathBuf {
    let run = tmp.join("run");
    tiny_run(&run, &[]);
    run
}

/// A tiny trained run in `dir`, with extra flags.
fn tiny_run(dir: &Path, extra: &[&str]) {
    let mut args = vec![
        "--config",
        "configs/tiny.toml",
        "--max-iters",
        "10",
        "--eval-interval",
        "10",
        "--out",
        dir.to_str().unwrap(),
    ];
    args.extend(extra);
    common::train_ok(&args);
}

const BASE_CONFIG: &str = r#"[model]
block_size = 32
n_layer = 2
n_head = 2
n_embd = 32
position = "learned"

[train]
corpus = "data/tiny.txt"
batch_size = 8
max_iters = 5
eval_interval = 5
eval_iters = 1
warmup_iters = 1
"#;

#[test]
fn bad_configs_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let cases: Vec<(&str, String, &[&str])> = vec![
        (
            "malformed TOML",
            "[model\nn_layer = 2".into(),
            &["not valid", "line 1"],
        ),
        (
            "unknown key",
            format!("{BASE_CONFIG}colour = 3\n"),
            &["unknown field `colour`"],
        ),
        (
            "wrong type",
            BASE_CONFIG.replace("n_layer = 2", "n_layer = \"two\""),
            &["invalid type"],
        ),
        (
            "zero layers",
            BASE_CONFIG.replace("n_layer = 2", "n_layer = 0"),
            &["n_layer must be at least 1"],
        ),
        (
            "negative size",
            BASE_CONFIG.replace("n_embd = 32", "n_embd = -32"),
            &["-32"],
        ),
        (
            "heads do not divide",
            BASE_CONFIG.replace("n_head = 2", "n_head = 3"),
            &["not divisible by n_head 3"],
        ),
        (
            "odd head size with rope",
            BASE_CONFIG
                .replace("n_head = 2", "n_head = 32")
                .replace("\"learned\"", "\"rope\""),
            &["rope", "odd"],
        ),
        (
            "unknown position",
            BASE_CONFIG.replace("\"learned\"", "\"absolute\""),
            &["unknown variant `absolute`"],
        ),
        (
            "negative learning rate",
            format!("{BASE_CONFIG}learning_rate = -1.0\n"),
            &["learning_rate"],
        ),
        (
            "dropout of 1.5",
            BASE_CONFIG.replace(
                "position = \"learned\"",
                "position = \"learned\"\ndropout = 1.5",
            ),
            &["dropout 1.5"],
        ),
        (
            "batch of zero",
            BASE_CONFIG.replace("batch_size = 8", "batch_size = 0"),
            &["batch_size must be at least 1"],
        ),
        (
            "context longer than the corpus",
            BASE_CONFIG.replace("block_size = 32", "block_size = 100000"),
            &["fewer than block_size + 1", "--block-size"],
        ),
        (
            "empty file",
            String::new(),
            &[
                "none of the sections [model], [data], [train]",
                "configs/default.toml",
            ],
        ),
        (
            "beta2 that is 1 in float32",
            format!("{BASE_CONFIG}beta2 = 0.9999999999\n"),
            &["beta2 0.9999999999", "float32"],
        ),
        (
            "beta1 of 1",
            format!("{BASE_CONFIG}beta1 = 1.0\n"),
            &["beta1 1 must be in [0, 1)"],
        ),
        (
            "infinite weight decay",
            format!("{BASE_CONFIG}weight_decay = inf\n"),
            &["weight_decay inf must be a finite number"],
        ),
        (
            "grad_clip NaN",
            format!("{BASE_CONFIG}grad_clip = nan\n"),
            &["grad_clip NaN must be a finite number"],
        ),
        (
            "warm-up longer than the run",
            BASE_CONFIG.replace("warmup_iters = 1", "warmup_iters = 50"),
            &["warmup_iters 50 is more than max_iters 5"],
        ),
        (
            "a million-wide model",
            BASE_CONFIG.replace("n_embd = 32", "n_embd = 1000000"),
            &["weights alone take", "available"],
        ),
        (
            "a billion layers",
            BASE_CONFIG.replace("n_layer = 2", "n_layer = 1000000000"),
            &["weights alone take", "available"],
        ),
    ];
    for (i, (case, text, expect)) in cases.iter().enumerate() {
        let path = tmp.path().join(format!("{i}.toml"));
        std::fs::write(&path, text).unwrap();
        let out = tmp.path().join(format!("out{i}"));
        fails(
            case,
            TRAIN,
            &[
                "--config",
                path.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
            ],
            expect,
        );
        assert!(
            !out.join("train_state.safetensors").exists(),
            "{case}: a checkpoint was written"
        );
    }
    fails(
        "missing config",
        TRAIN,
        &["--config", "/nonexistent/run.toml"],
        &["cannot read config file"],
    );
}

#[test]
fn bad_corpora_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let path = tmp.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path.to_str().unwrap().to_string()
    };
    let poems = std::fs::read_to_string(root().join("data/tiny.txt")).unwrap();
    let short: String = poems.lines().take(3).map(|l| format!("{l}\n")).collect();
    let cases: Vec<(&str, String, &[&str])> = vec![
        (
            "missing corpus",
            "/nonexistent/poems.txt".into(),
            &["cannot read corpus"],
        ),
        ("empty corpus", write("empty.txt", b""), &["is empty"]),
        ("no corpus name", String::new(), &["no corpus file given"]),
        (
            "binary corpus",
            write("binary.txt", &[0xff, 0xfe, 0x00, 0x9c, 0x80, 0x01]),
            &["not UTF-8"],
        ),
        (
            "a text of two lines (running text) shorter than one block",
            write("prose.txt", b"hello world\nfoo bar\n"),
            &["fewer than block_size + 1"],
        ),
        (
            "a program's bytes",
            write("program.bin", b"\x7fELF\x02\x01\x01\x00\x00"),
            &["binary file", "U+007F"],
        ),
        (
            "shorter than one block",
            write("short.txt", short.as_bytes()),
            &["fewer than block_size + 1"],
        ),
    ];
    for (i, (case, corpus, expect)) in cases.iter().enumerate() {
        let parent = tmp.path().join(format!("new{i}"));
        let out = parent.join("run");
        fails(
            case,
            TRAIN,
            &[
                "--config",
                "configs/tiny.toml",
                "--corpus",
                corpus,
                "--out",
                out.to_str().unwrap(),
            ],
            expect,
        );
        assert!(!parent.exists(), "{case}: the run's new parent was left");
    }
}

#[test]
fn bad_checkpoints_are_refused_and_left_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let (run, wide, other_vocab) = (
        tmp.path().join("run"),
        tmp.path().join("wide"),
        tmp.path().join("vocab"),
    );
    tiny_run(&run, &[]);
    tiny_run(&wide, &["--n-embd", "48"]);
    let corpus = tmp.path().join("corpus.txt");
    let poems = std::fs::read_to_string(root().join("data/tiny.txt")).unwrap();
    std::fs::write(
        &corpus,
        poems
            .lines()
            .skip(100)
            .map(|l| format!("{l}\n"))
            .collect::<String>(),
    )
    .unwrap();
    tiny_run(&other_vocab, &["--corpus", corpus.to_str().unwrap()]);

    // A broken copy of the good run for each case: (case, file, new bytes, message pieces).
    let model = std::fs::read(run.join("model.safetensors")).unwrap();
    type Case<'a> = (&'a str, &'a str, Option<Vec<u8>>, &'a [&'a str]);
    let cases: Vec<Case> = vec![
        (
            "missing weights",
            "model.safetensors",
            None,
            &["has no model.safetensors"],
        ),
        (
            "missing tokenizer",
            "tokenizer.json",
            None,
            &["has no tokenizer.json"],
        ),
        (
            "missing config",
            "config.toml",
            None,
            &["has no config.toml"],
        ),
        (
            "truncated weights",
            "model.safetensors",
            Some(model[..model.len() / 2].to_vec()),
            &["model.safetensors"],
        ),
        (
            "corrupted weights",
            "model.safetensors",
            Some(b"\x10\x00\x00\x00\x00\x00\x00\x00{garbage}{{{{{{".to_vec()),
            &["model.safetensors"],
        ),
        (
            "weights of another shape",
            "model.safetensors",
            Some(std::fs::read(wide.join("model.safetensors")).unwrap()),
            &["n_embd: weights trained with 48, config.toml says 32"],
        ),
        (
            "tokenizer of another run",
            "tokenizer.json",
            Some(std::fs::read(other_vocab.join("tokenizer.json")).unwrap()),
            &["different runs"],
        ),
        (
            "config of another run",
            "config.toml",
            Some(std::fs::read(wide.join("config.toml")).unwrap()),
            &["n_embd: weights trained with 32, config.toml says 48"],
        ),
        (
            "malformed config",
            "config.toml",
            Some(b"[model\n".to_vec()),
            &["not valid"],
        ),
        (
            // A syntax error inside "decoder" is where tokenizers 0.23 panics.
            "tokenizer with a syntax error in its decoder",
            "tokenizer.json",
            Some(
                std::fs::read_to_string(run.join("tokenizer.json"))
                    .unwrap()
                    .replacen("\"Fuse\"", "\"Fuse\"1", 1)
                    .into_bytes(),
            ),
            &["tokenizer.json", "not valid JSON"],
        ),
    ];
    for (i, (case, file, bytes, expect)) in cases.into_iter().enumerate() {
        let broken = tmp.path().join(format!("broken{i}"));
        std::fs::create_dir(&broken).unwrap();
        for entry in std::fs::read_dir(&run).unwrap().flatten() {
            std::fs::copy(entry.path(), broken.join(entry.file_name())).unwrap();
        }
        match bytes {
            Some(b) => std::fs::write(broken.join(file), b).unwrap(),
            None => std::fs::remove_file(broken.join(file)).unwrap(),
        }
        let before = snapshot(&broken);
        fails(
            case,
            SAMPLE,
            &[
                "--checkpoint",
                broken.to_str().unwrap(),
                "--num-samples",
                "1",
            ],
            expect,
        );
        assert_eq!(snapshot(&broken), before, "{case}: files changed");
    }
    fails(
        "missing run directory",
        SAMPLE,
        &["--checkpoint", "/nonexistent/run"],
        &["cargo run --release --bin train"],
    );
}

#[test]
fn bad_prompts_and_flags_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    tiny_run(&run, &[]);
    let before = snapshot(&run);
    let dir = run.to_str().unwrap();
    let long = "白".repeat(2000);
    let cases: Vec<(&str, Vec<&str>, &[&str])> = vec![
        (
            "Latin letters",
            vec!["--prompt", "hello"],
            &["not in the vocabulary", "'h'"],
        ),
        ("emoji", vec!["--prompt", "白日😀"], &["😀"]),
        (
            "control character",
            vec!["--prompt", "白\u{7}日"],
            &["U+0007"],
        ),
        (
            "invisible character",
            vec!["--prompt", "白\u{200b}日"],
            &["U+200B"],
        ),
        (
            "very long prompt",
            vec!["--prompt", &long],
            &["2000 characters"],
        ),
        (
            "negative temperature",
            vec!["--temperature", "-1"],
            &["--temperature -1"],
        ),
        ("top-p of 0", vec!["--top-p", "0"], &["--top-p 0"]),
        ("top-p above 1", vec!["--top-p", "1.5"], &["(0, 1]"]),
        ("top-k of 0", vec!["--top-k", "0"], &["--top-k 0"]),
        (
            "huge max-new-tokens",
            vec!["--max-new-tokens", "1000000000000"],
            &["--max-new-tokens"],
        ),
        (
            "unknown form",
            vec!["--form", "sonnet"],
            &["wujue, qijue, wulv or qilv"],
        ),
        (
            "empty acrostic",
            vec!["--acrostic", ""],
            &["--acrostic is empty"],
        ),
        (
            "acrostic longer than the form",
            vec!["--form", "wujue", "--acrostic", "春夏秋冬山"],
            &["4 lines"],
        ),
        (
            "prompt against the form",
            vec!["--form", "wujue", "--prompt", "白日依山尽。"],
            &["character 6"],
        ),
        (
            "no new character",
            vec!["--max-new-tokens", "0"],
            &["--max-new-tokens 0", "1 to"],
        ),
        ("no poem", vec!["--num-samples", "0"], &["--num-samples 0"]),
        (
            "a tune's form without a tune, beside a form of verse",
            vec!["--tune-form", "2", "--form", "wujue"],
            &["--tune-form chooses a form of the tune --tune names"],
        ),
        (
            "a blank tune form",
            vec!["--tune", "水调歌头", "--tune-form", " "],
            &["--tune-form is empty"],
        ),
        (
            "too few tokens for the form",
            vec!["--form", "qilv", "--max-new-tokens", "10"],
            &["raise it to 65"],
        ),
        (
            "not a number",
            vec!["--temperature", "warm"],
            &["invalid value", "--help"],
        ),
        (
            "f32 weights without the cache",
            vec!["--no-cache", "--f32-weights"],
            &["'--no-cache' cannot be used with '--f32-weights'"],
        ),
    ];
    for (case, flags, expect) in cases {
        let mut args = vec!["--checkpoint", dir];
        args.extend(flags);
        fails(case, SAMPLE, &args, expect);
    }
    // Training flags against an existing run.
    fails(
        "--out on an existing run",
        TRAIN,
        &["--config", "configs/tiny.toml", "--out", dir],
        &["already holds a run", "--resume"],
    );
    fails(
        "resume with another model",
        TRAIN,
        &["--resume", dir, "--n-layer", "3"],
        &["n_layer: saved 2, asked 3"],
    );
    for (flag, expect) in [
        ("--seed", "seed differs from the one saved"),
        ("--eval-iters", "eval_iters differs from the one saved"),
    ] {
        let case = format!("resume with another {flag}");
        fails(&case, TRAIN, &["--resume", dir, flag, "7"], &[expect]);
    }
    fails(
        "resume and out together",
        TRAIN,
        &["--resume", dir, "--out", "/tmp/elsewhere"],
        &["cannot be used with"],
    );
    fails(
        "resume of nothing",
        TRAIN,
        &["--resume", tmp.path().join("none").to_str().unwrap()],
        &["no run to resume"],
    );
    let none = tmp.path().join("none");
    fails(
        "resume of nothing, with a config",
        TRAIN,
        &[
            "--config",
            "configs/tiny.toml",
            "--resume",
            none.to_str().unwrap(),
        ],
        &["no run to resume"],
    );
    assert!(!none.exists(), "resume of nothing made its directory");
    // A run's file given where its directory belongs, through each binary that reads a run.
    let weights = run.join("model.safetensors");
    let weights = weights.to_str().unwrap();
    let expect: &[&str] = &["is a file, not a run directory", dir];
    fails("resume of a file", TRAIN, &["--resume", weights], expect);
    let with_config = ["--config", "configs/tiny.toml", "--resume", weights];
    fails(
        "resume of a file, with a config",
        TRAIN,
        &with_config,
        expect,
    );
    for (bin, extra) in [
        (SAMPLE, None),
        (HEADS, None),
        (SERVE, None),
        (SCORE, Some("--val")),
    ] {
        let args: Vec<&str> = ["--checkpoint", weights].into_iter().chain(extra).collect();
        fails(&format!("a file as the run of {bin}"), bin, &args, expect);
    }
    // Devices this build cannot drive.
    fails(
        "unknown device",
        TRAIN,
        &["--resume", dir, "--device", "gpu"],
        &["unknown device `gpu`", "cuda"],
    );
    if !cfg!(feature = "cuda") {
        fails(
            "cuda without the feature",
            SAMPLE,
            &["--checkpoint", dir, "--device", "cuda"],
            &["no CUDA support", "--features cuda --bin sample --"],
        );
    }
    assert_eq!(snapshot(&run), before, "the run's files changed");
}

#[test]
fn a_loss_that_explodes_stops_the_run_and_keeps_the_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    tiny_run(&run, &[]);
    let before = snapshot(&run);
    let resume_it = format!("--resume {}", run.display());
    // Resumed with a huge learning rate, the loss turns NaN within a few steps.
    fails(
        "huge learning rate",
        TRAIN,
        &[
            "--resume",
            run.to_str().unwrap(),
            "--max-iters",
            "60",
            "--learning-rate",
            "1e30",
        ],
        &[
            "the loss became",
            "checkpoint",
            "intact",
            "--learning-rate",
            &resume_it,
        ],
    );
    assert_eq!(snapshot(&run), before, "the last good checkpoint changed");
    // An update that explodes right before an evaluation is not checkpointed either: the
    // message is true, and the run resumes and trains from its last good state.
    let run_arg = run.to_str().unwrap();
    fails(
        "an exploded update at an evaluation",
        TRAIN,
        &[
            "--resume",
            run_arg,
            "--max-iters",
            "60",
            "--learning-rate",
            "1e30",
            "--eval-interval",
            "1",
        ],
        &["checkpoint of step 10", "intact", "--learning-rate"],
    );
    assert_eq!(snapshot(&run), before, "the last good checkpoint changed");
    let (ok, stderr) = run_bin(
        "resumed after the explosion",
        TRAIN,
        &[
            "--resume",
            run_arg,
            "--max-iters",
            "30",
            "--learning-rate",
            "1e-3",
        ],
    );
    assert!(ok, "{stderr}");
    let fresh = tmp.path().join("fresh1");
    fails(
        "an exploded update at the first evaluation",
        TRAIN,
        &[
            "--config",
            "configs/tiny.toml",
            "--out",
            fresh.to_str().unwrap(),
            "--learning-rate",
            "1e30",
            "--eval-interval",
            "1",
        ],
        &["no checkpoint was written yet"],
    );
    assert!(!fresh.exists(), "a directory without a checkpoint was left");
    let fresh = tmp.path().join("fresh");
    fails(
        "huge learning rate from the start",
        TRAIN,
        &[
            "--config",
            "configs/tiny.toml",
            "--out",
            fresh.to_str().unwrap(),
            "--learning-rate",
            "1e30",
        ],
        &["the loss became", "no checkpoint was written yet"],
    );
}

/// The old switches of the inputs are answered with a list that runs, the default's list with
/// the input added or taken out, or with "leave it out" where the list already says so.
#[test]
fn the_old_input_switches_suggest_a_command_that_runs() {
    let tmp = tempfile::tempdir().unwrap();
    for (switch, expect) in [
        (
            vec!["--rhyme-bias"],
            "rhyme_bias among its inputs already: leave --rhyme-bias out",
        ),
        (
            vec!["--sound", "false"],
            "sound out of its inputs already: leave --sound out",
        ),
        (vec!["--sound"], "--set 'model.inputs="),
        (vec!["--rhyme-bias", "false"], "--set 'model.inputs="),
    ] {
        let out = tmp.path().join("run");
        let mut args = switch.clone();
        args.extend(["--stop-at", "1", "--out", out.to_str().unwrap()]);
        let (ok, stderr) = run_bin("a switch", TRAIN, &args);
        assert!(!ok && stderr.contains(expect), "{switch:?}: {stderr}");
        let Some(list) = stderr.split("--set 'model.inputs=").nth(1) else {
            continue;
        };
        let list = list.trim_end().trim_end_matches('\'');
        let set = format!("model.inputs={list}");
        let (ok, stderr) = run_bin(
            "the suggested list",
            TRAIN,
            &[
                "--set",
                &set,
                "--stop-at",
                "1",
                "--out",
                out.to_str().unwrap(),
            ],
        );
        assert!(ok, "{switch:?}: {set}: {stderr}");
        std::fs::remove_dir_all(&out).unwrap();
    }
}

#[test]
fn training_flags_that_cannot_work_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let out = out.to_str().unwrap();
    let tiny = ["--config", "configs/tiny.toml", "--out", out];
    let cases: Vec<(&str, Vec<&str>, &[&str])> = vec![
        (
            "an input's switch of the old flags",
            vec!["--sound", "true"],
            &["--sound is no flag now", "--set 'model.inputs=[\"sound\"]'"],
        ),
        (
            "an input's switch of the old flags, without a value",
            vec!["--verse-places"],
            &[
                "--verse-places is no flag now",
                "model.inputs=[\"verse_places\"]",
            ],
        ),
        (
            "a setting given by its flag and by --set",
            vec![
                "--learning-rate",
                "0.01",
                "--set",
                "optimizer.learning_rate=0.02",
            ],
            &["optimizer.learning_rate is given twice", "give it once"],
        ),
        (
            "a block of 60,000 characters",
            vec!["--block-size", "60000", "--corpus", "data/poems.txt"],
            &["needs about", "available", "batch_size"],
        ),
        (
            "the largest batch",
            vec!["--batch-size", "18446744073709551615"],
            &[
                "batch_size 18446744073709551615",
                "largest integer a config file can hold",
            ],
        ),
        (
            "a batch beyond the memory",
            vec!["--batch-size", "1000000000000"],
            &["needs about", "available"],
        ),
        (
            "a seed no config file can hold",
            vec!["--seed", "9223372036854775808"],
            &[
                "seed 9223372036854775808",
                "largest integer a config file can hold",
            ],
        ),
        (
            "stop at step 0",
            vec!["--stop-at", "0"],
            &["--stop-at 0", "already at step 0"],
        ),
        (
            "fewer steps than the warm-up",
            vec!["--max-iters", "5"],
            &["warmup_iters 10 is more than max_iters 5", "--warmup-iters"],
        ),
        // A negative number is a value, not an unknown flag: the message says what is wrong.
        (
            "a negative learning rate",
            vec!["--learning-rate", "-1"],
            &["learning_rate -1 must be a positive, finite number"],
        ),
        (
            "a negative dropout",
            vec!["--dropout", "-0.1"],
            &["dropout -0.1 must be in [0, 1)"],
        ),
        (
            "--set of a setting that does not exist",
            vec!["--set", "train.lerning_rate=1e-3"],
            &[
                "--set train.lerning_rate",
                "unknown field `lerning_rate`",
                "learning_rate",
            ],
        ),
        (
            "--set without a section",
            vec!["--set", "dropout=0.1"],
            &["--set dropout", "section.key"],
        ),
        (
            "--set of a value the setting cannot take",
            vec!["--set", "model.dropout=-0.1"],
            &["dropout -0.1 must be in [0, 1)"],
        ),
    ];
    for (case, flags, expect) in cases {
        let args: Vec<&str> = tiny.iter().copied().chain(flags).collect();
        fails(case, TRAIN, &args, expect);
        assert!(
            !Path::new(out).exists(),
            "{case}: the run directory was left behind"
        );
    }
}

#[test]
fn other_binaries_refuse_what_would_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    tiny_run(&run, &[]);
    let plots = tmp.path().join("plots");
    let run_arg = run.to_str().unwrap();
    // Nothing is drawn, not even the sinusoidal table, until the whole request is known to work.
    let (plot, missing) = (plots.to_str().unwrap(), tmp.path().join("missing"));
    let missing = missing.to_str().unwrap();
    let too_long = "白".repeat(257);
    let cases: [(&str, &[&str], &str); 5] = [
        (
            "empty poem to plot",
            &["--poem", ""],
            "the poem to draw is empty",
        ),
        (
            "unknown poem to plot",
            &["--poem", "ABC"],
            "cannot draw the attention over --poem: these 3 characters are not in the vocabulary",
        ),
        (
            "a poem too long to draw",
            &["--poem", &too_long],
            "at most 256",
        ),
        (
            "no run to plot",
            &["--checkpoint", missing],
            "no run directory",
        ),
        (
            "no corpus to plot",
            &["--corpus", missing],
            "cannot read corpus",
        ),
    ];
    for (case, flags, expect) in cases {
        let mut args = vec!["--plot", plot];
        if !flags.contains(&"--checkpoint") && !flags.contains(&"--corpus") {
            args.extend(["--checkpoint", run_arg]);
        }
        args.extend(flags);
        fails(case, HEADS, &args, &[expect]);
        assert!(!plots.exists(), "{case}: the --plot directory was made");
    }
    // A poem is only drawn for a trained run: without both flags it would be ignored.
    let poem = ["--poem", "山依日白尽"];
    let expect = ["not provided: --plot <PLOT> --checkpoint <CHECKPOINT>"];
    fails("a poem and nothing to draw", HEADS, &poem, &expect);
    let untrained = [&poem[..], &["--plot", plot]].concat();
    fails(
        "a poem for untrained models",
        HEADS,
        &untrained,
        &["--checkpoint"],
    );
    assert!(
        !plots.exists(),
        "a poem for untrained models: --plot was made"
    );
    fails(
        "bench without steps",
        BENCH,
        &["--steps", "0"],
        &["--steps"],
    );
    fails(
        "bench with batches beyond the memory",
        BENCH,
        &["--batch-size", "1000000", "--only", "course"],
        &["training this config needs about", "lower batch_size"],
    );
    fails(
        "bench with empty batches",
        BENCH,
        &["--batch-size", "0"],
        &["--batch-size"],
    );

    let spec = |name: &str, text: &str| {
        let path = tmp.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_string()
    };
    let variant = "[[variant]]\nname = \"1 head\"\nmodel = { n_head = 1 }\n";
    let cases: Vec<(&str, String, &[&str])> = vec![
        (
            "a context of 0",
            spec("zero.toml", &format!("name = \"z\"\nbase = \"configs/tiny.toml\"\ncontexts = [0]\n{variant}")),
            &["contexts = [0]", "at least 1"],
        ),
        (
            "a context beyond the memory",
            spec("long.toml", &format!("name = \"l\"\nbase = \"configs/tiny.toml\"\ncontexts = [128, 100000]\n{variant}")),
            &["holds 100000", "the longest context evaluated is 4096"],
        ),
        (
            "two variants in one directory",
            spec(
                "same.toml",
                &format!("name = \"s\"\nbase = \"configs/tiny.toml\"\n{variant}[[variant]]\nname = \"1-head\"\n"),
            ),
            &["`1 head` and `1-head`", "share the directory"],
        ),
        (
            "an unknown key",
            spec("key.toml", &format!("name = \"k\"\nbase = \"configs/tiny.toml\"\ncolour = 1\n{variant}")),
            &["unknown field `colour`"],
        ),
        (
            "a variant that cannot be built",
            spec(
                "bad.toml",
                "name = \"b\"\nbase = \"configs/tiny.toml\"\n[[variant]]\nname = \"3 heads\"\nmodel = { n_head = 3 }\n",
            ),
            &["variant `3 heads`", "not divisible by n_head 3"],
        ),
        (
            "a variant whose corpus is not there",
            spec(
                "no-corpus.toml",
                "name = \"c\"\nbase = \"configs/tiny.toml\"\n[[variant]]\nname = \"a\"\ntrain = { corpus = \"nope.txt\" }\n",
            ),
            &["variant `a`", "cannot read corpus nope.txt"],
        ),
        (
            "a seed listed twice",
            spec("twice.toml", &format!("name = \"t\"\nbase = \"configs/tiny.toml\"\nseeds = [1, 2, 1]\n{variant}")),
            &["`seeds` lists 1 twice"],
        ),
        (
            "a variant's seed beside the spec's seeds",
            spec(
                "seed.toml",
                "name = \"s\"\nbase = \"configs/tiny.toml\"\nseeds = [1, 2]\n[[variant]]\nname = \"a\"\ntrain = { seed = 3 }\n",
            ),
            &["variant `a`", "sets `seed` while the spec lists `seeds`", "remove one"],
        ),
        (
            "a seed no config file can hold",
            spec("huge.toml", &format!("name = \"h\"\nbase = \"configs/tiny.toml\"\nseeds = [18446744073709551615]\n{variant}")),
            &["18446744073709551615", "largest integer a config file can hold"],
        ),
        (
            "a name with nothing to name a directory by",
            spec("empty-name.toml", &format!("name = \"../\"\nbase = \"configs/tiny.toml\"\n{variant}")),
            &["name `../` needs letters or digits"],
        ),
        (
            "a seed listed twice among many",
            spec(
                "many.toml",
                &format!(
                    "name = \"m\"\nbase = \"configs/tiny.toml\"\nseeds = [{}, 7]\n{variant}",
                    (0..120_000).map(|s| s.to_string()).collect::<Vec<_>>().join(", ")
                ),
            ),
            &["`seeds` lists 7 twice"],
        ),
    ];
    let out = tmp.path().join("ablation");
    for (case, path, expect) in cases {
        fails(
            case,
            ABLATE,
            &[&path, "--out", out.to_str().unwrap()],
            expect,
        );
        assert!(!out.exists(), "{case}: the output directory was made");
    }
    let good_spec = spec(
        "good.toml",
        &format!("name = \"g\"\nbase = \"configs/tiny.toml\"\n{variant}"),
    );
    let zero = [
        &good_spec,
        "--out",
        out.to_str().unwrap(),
        "--max-iters",
        "0",
    ];
    fails("no step", ABLATE, &zero, &["--max-iters 0"]);
    assert!(!out.exists(), "no step: the output directory was made");
    // An --out that holds what no ablation wrote: nothing there is written over or mixed in.
    for (case, file) in [("notes", "notes.txt"), ("results", "results.md")] {
        let theirs = tmp.path().join(case);
        std::fs::create_dir(&theirs).unwrap();
        std::fs::write(theirs.join(file), "kept").unwrap();
        let args = [&good_spec, "--out", theirs.to_str().unwrap()];
        fails(
            &format!("an --out with {case} of its own"),
            ABLATE,
            &args,
            &[file],
        );
        let entries = std::fs::read_dir(&theirs).unwrap().count();
        assert_eq!(entries, 1, "{case}: something was added");
        assert_eq!(std::fs::read_to_string(theirs.join(file)).unwrap(), "kept");
    }
    // An output directory that is a file, through each binary that writes one.
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "kept").unwrap();
    let file_arg = file.to_str().unwrap();
    let cases: [(&str, &[&str], &str); 3] = [
        (
            TRAIN,
            &["--config", "configs/tiny.toml", "--out", file_arg],
            "--out",
        ),
        (ABLATE, &[&good_spec, "--out", file_arg], "--out"),
        (
            HEADS,
            &["--checkpoint", run_arg, "--plot", file_arg],
            "--plot",
        ),
    ];
    for (bin, args, flag) in cases {
        let expect = ["is a file, not a directory", flag];
        fails(&format!("{bin} into a file"), bin, args, &expect);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "kept");
    }
}

#[test]
#[cfg(unix)] // FIFOs and /dev/zero
fn files_that_are_not_regular_are_refused_without_reading() {
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("fifo");
    let path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo reads a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    let fifo = fifo.to_str().unwrap();
    let out = tmp.path().join("out");
    let out = out.to_str().unwrap();
    for (case, source) in [
        ("a FIFO", fifo),
        ("/dev/zero", "/dev/zero"),
        ("/dev/urandom", "/dev/urandom"),
    ] {
        fails(
            &format!("{case} as corpus"),
            TRAIN,
            &[
                "--config",
                "configs/tiny.toml",
                "--corpus",
                source,
                "--out",
                out,
            ],
            &["cannot read corpus", "not a regular file"],
        );
        fails(
            &format!("{case} as config"),
            TRAIN,
            &["--config", source, "--out", out],
            &["cannot read config file", "not a regular file"],
        );
    }
    let run = tmp.path().join("run");
    tiny_run(&run, &[]);
    std::fs::remove_file(run.join("model.safetensors")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", run.join("model.safetensors")).unwrap();
    fails(
        "/dev/zero as weights",
        SAMPLE,
        &["--checkpoint", run.to_str().unwrap()],
        &["model.safetensors", "not a regular file"],
    );
}

#[test]
fn a_new_run_never_writes_over_files_it_did_not_make() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    tiny_run(&run, &[]);
    // A run copied for sampling: weights, config and tokenizer, no training state.
    let copy = tmp.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    for file in ["model.safetensors", "config.toml", "tokenizer.json"] {
        std::fs::copy(run.join(file), copy.join(file)).unwrap();
    }
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("notes.txt"), "mine").unwrap();
    for (case, dir, expect) in [
        (
            "a run without its state",
            &copy,
            &["no training state", "another --out"][..],
        ),
        (
            "a folder of other files",
            &other,
            &["notes.txt", "not a run's"][..],
        ),
    ] {
        let before = snapshot(dir);
        fails(
            case,
            TRAIN,
            &[
                "--config",
                "configs/tiny.toml",
                "--out",
                dir.to_str().unwrap(),
            ],
            expect,
        );
        assert_eq!(snapshot(dir), before, "{case}: files changed");
    }
    // What a killed run leaves before its first checkpoint (its lock and a temporary file) is
    // no obstacle, and the temporary file is cleared.
    let left = tmp.path().join("left");
    std::fs::create_dir(&left).unwrap();
    std::fs::write(left.join(".lock"), shige::train::run_dir::LOCK_MARK).unwrap();
    std::fs::write(left.join(".model.safetensors.999999999.0.tmp"), "partial").unwrap();
    tiny_run(&left, &[]);
    assert!(!left.join(".model.safetensors.999999999.0.tmp").exists());
}

#[test]
fn a_users_hidden_files_are_never_taken_for_leftovers() {
    let tmp = tempfile::tempdir().unwrap();
    // Hidden files ending in .tmp that this program did not name: a new run refuses the folder
    // and removes nothing.
    let dir = tmp.path().join("d");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join(".notes.tmp"), "my notes").unwrap();
    std::fs::write(dir.join(".a.1.2.tmp"), "mine too").unwrap();
    std::fs::write(dir.join(".model.safetensors.x.1.tmp"), "and this").unwrap();
    let before = snapshot(&dir);
    fails(
        "hidden .tmp files",
        TRAIN,
        &[
            "--config",
            "configs/tiny.toml",
            "--out",
            dir.to_str().unwrap(),
        ],
        &[
            ".a.1.2.tmp, .model.safetensors.x.1.tmp, .notes.tmp",
            "not a run's",
        ],
    );
    assert_eq!(snapshot(&dir), before, "files changed");
    // Names as this program gives its own, in a folder no run of it locked, or whose lock is
    // the user's: theirs too (#78: deleted).
    for (case, files) in [
        ("no lock", vec![(".model.safetensors.123.0.tmp", "m4")]),
        (
            "the user's lock",
            vec![(".lock", "mine"), (".metrics.csv.999999999.3.tmp", "m5")],
        ),
        (
            "an empty lock",
            vec![(".lock", ""), (".metrics.csv.999999999.1.tmp", "m6")],
        ),
    ] {
        let dir = tmp.path().join(case);
        std::fs::create_dir(&dir).unwrap();
        for (name, text) in &files {
            std::fs::write(dir.join(name), text).unwrap();
        }
        let before = snapshot(&dir);
        let args = [
            "--config",
            "configs/tiny.toml",
            "--out",
            dir.to_str().unwrap(),
        ];
        fails(case, TRAIN, &args, &["not a run's"]);
        assert_eq!(snapshot(&dir), before, "{case}: files changed");
    }
    // A run resumed keeps a user's file beside its own, and a half-written file of a process
    // that still runs (this test's), and clears its own leftovers (of a process long gone).
    let run = trained_tiny(tmp.path());
    std::fs::write(run.join(".mybackup.tmp"), "precious").unwrap();
    std::fs::write(run.join(".summary.json.999999999.3.tmp"), "half").unwrap();
    let running = format!(".model.safetensors.{}.0.tmp", std::process::id());
    std::fs::write(run.join(&running), "being written").unwrap();
    let resumed = ["--resume", run.to_str().unwrap(), "--max-iters", "20"];
    let (success, stderr) = run_bin("resume", TRAIN, &resumed);
    assert!(success, "{stderr}");
    let read = |name: &str| std::fs::read(run.join(name)).unwrap();
    assert_eq!(read(".mybackup.tmp"), b"precious");
    assert_eq!(read(&running), b"being written");
    assert!(!run.join(".summary.json.999999999.3.tmp").exists());
    // Without the program's lock before the resume (none, or an empty one), nothing is removed
    // and an empty lock is left empty.
    for lock in [None, Some("")] {
        match lock {
            None => std::fs::remove_file(run.join(".lock")).unwrap(),
            Some(text) => std::fs::write(run.join(".lock"), text).unwrap(),
        }
        std::fs::write(run.join(".summary.json.999999999.4.tmp"), "mine?").unwrap();
        let more = ["--resume", run.to_str().unwrap(), "--max-iters", "30"];
        let (success, stderr) = run_bin("resume without the lock", TRAIN, &more);
        assert!(success, "{stderr}");
        assert_eq!(read(".summary.json.999999999.4.tmp"), b"mine?", "{lock:?}");
        if lock.is_some() {
            assert_eq!(read(".lock"), b"", "the user's empty lock");
        }
        std::fs::remove_file(run.join(".summary.json.999999999.4.tmp")).unwrap();
    }
}

/// A child process that is killed when this goes out of scope, even when a test fails.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_second_training_process_cannot_write_the_same_run() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let dir_arg = dir.to_str().unwrap();
    // The first process evaluates only at the end: it holds the directory with nothing written
    // yet, the moment at which two runs used to write the same files.
    let start_first = || {
        common::binary(TRAIN)
            .args(["--config", "configs/tiny.toml", "--max-iters", "1000000"])
            .args(["--eval-interval", "1000000", "--out", dir_arg])
            .current_dir(root())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let first = KillOnDrop(start_first());
    let started = Instant::now();
    while !dir.join(".lock").exists() {
        assert!(started.elapsed() < TIME_LIMIT, "no lock");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300));
    let other_corpus = [
        "--config",
        "configs/tiny.toml",
        "--corpus",
        "data/poems.txt",
        "--out",
        dir_arg,
    ];
    fails(
        "a second --out",
        TRAIN,
        &other_corpus,
        &["being written by another training process"],
    );
    fails(
        "a --resume meanwhile",
        TRAIN,
        &["--config", "configs/tiny.toml", "--resume", dir_arg],
        &["being written by another training process"],
    );
    drop(first);
    // Once the first process is gone, what it left (its lock file) is no obstacle.
    let (ok, stderr) = run_bin(
        "a new run after the first ended",
        TRAIN,
        &[
            "--config",
            "configs/tiny.toml",
            "--max-iters",
            "10",
            "--out",
            dir_arg,
        ],
    );
    assert!(ok, "{stderr}");
}

#[test]
fn checkpoints_that_do_not_belong_together_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    tiny_run(&run, &[]);
    let config = std::fs::read_to_string(run.join("config.toml")).unwrap();
    let tokenizer = std::fs::read_to_string(run.join("tokenizer.json")).unwrap();
    let (swap_a, swap_b) = ("\"，\": ", "\"。\": ");
    let id_of = |key: &str| -> String {
        let start = tokenizer.find(key).unwrap() + key.len();
        tokenizer[start..]
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .to_string()
    };
    let (a, b) = (id_of(swap_a), id_of(swap_b));
    let permuted = tokenizer
        .replace(&format!("{swap_a}{a}"), "@A")
        .replace(&format!("{swap_b}{b}"), &format!("{swap_b}{a}"))
        .replace("@A", &format!("{swap_a}{b}"));
    let beyond = tokenizer.replace(&format!("{swap_a}{a}"), &format!("{swap_a}99999"));
    let nan_weights = {
        use shige::train::safetensors::{read_safetensors, to_safetensors};
        let (tensors, metadata) = read_safetensors(&run.join("model.safetensors")).unwrap();
        let mut named: Vec<(String, candle_core::Tensor)> = tensors.into_iter().collect();
        let ln = named
            .iter_mut()
            .find(|(n, _)| n == "transformer.ln_f.weight")
            .unwrap();
        ln.1 = (ln.1.clone() * f64::NAN).unwrap();
        to_safetensors(&named, metadata).unwrap()
    };
    let cases: Vec<(&str, &str, Vec<u8>, &[&str])> = vec![
        (
            "fewer layers",
            "config.toml",
            config.replace("n_layer = 2", "n_layer = 1").into(),
            &["n_layer"],
        ),
        (
            "a hundred million layers",
            "config.toml",
            config.replace("n_layer = 2", "n_layer = 100000000").into(),
            &["n_layer", "100000000"],
        ),
        (
            "another head count",
            "config.toml",
            config.replace("n_head = 2", "n_head = 4").into(),
            &["n_head"],
        ),
        (
            "sinusoidal instead of learned",
            "config.toml",
            config.replace("\"learned\"", "\"sinusoidal\"").into(),
            &["position"],
        ),
        (
            "no biases",
            "config.toml",
            config.replace("bias = true", "bias = false").into(),
            &["bias"],
        ),
        (
            "tied weights",
            "config.toml",
            config
                .replace("tie_weights = false", "tie_weights = true")
                .into(),
            &["tie_weights"],
        ),
        (
            "permuted ids",
            "tokenizer.json",
            permuted.into(),
            &["not the vocabulary the weights were trained with"],
        ),
        (
            "an id beyond the vocabulary",
            "tokenizer.json",
            beyond.into(),
            &["99999", "without gaps"],
        ),
        (
            "NaN weights",
            "model.safetensors",
            nan_weights,
            &["transformer.ln_f.weight", "NaN"],
        ),
    ];
    for (i, (case, file, bytes, expect)) in cases.into_iter().enumerate() {
        let broken = tmp.path().join(format!("broken{i}"));
        std::fs::create_dir(&broken).unwrap();
        for entry in std::fs::read_dir(&run).unwrap().flatten() {
            std::fs::copy(entry.path(), broken.join(entry.file_name())).unwrap();
        }
        std::fs::write(broken.join(file), bytes).unwrap();
        for extra in [&[][..], &["--form", "wujue"][..]] {
            let mut args = vec![
                "--checkpoint",
                broken.to_str().unwrap(),
                "--num-samples",
                "1",
            ];
            args.extend(extra);
            fails(case, SAMPLE, &args, expect);
        }
    }
    // A training state without one of its optimiser moments cannot be resumed.
    let broken = tmp.path().join("no-moment");
    std::fs::create_dir(&broken).unwrap();
    for entry in std::fs::read_dir(&run).unwrap().flatten() {
        std::fs::copy(entry.path(), broken.join(entry.file_name())).unwrap();
    }
    {
        use shige::train::safetensors::{read_safetensors, to_safetensors};
        let state = broken.join("train_state.safetensors");
        let (mut tensors, metadata) = read_safetensors(&state).unwrap();
        assert!(tensors.remove("m.transformer.ln_f.weight").is_some());
        let named: Vec<(String, candle_core::Tensor)> = tensors.into_iter().collect();
        std::fs::write(&state, to_safetensors(&named, metadata).unwrap()).unwrap();
    }
    let before = snapshot(&broken);
    fails(
        "a missing optimiser moment",
        TRAIN,
        &["--resume", broken.to_str().unwrap(), "--max-iters", "80"],
        &[
            "train_state.safetensors",
            "cannot be resumed",
            "m.transformer.ln_f.weight",
        ],
    );
    assert_eq!(snapshot(&broken), before, "a missing moment: files changed");
}

#[test]
fn messages_name_the_file_and_stay_short() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let subset = tmp.path().join("subset.txt");
    let poems = std::fs::read_to_string(root().join("data/tiny.txt")).unwrap();
    std::fs::write(
        &subset,
        poems
            .lines()
            .take(120)
            .map(|l| format!("{l}\n"))
            .collect::<String>(),
    )
    .unwrap();
    tiny_run(&run, &["--corpus", subset.to_str().unwrap()]);
    let dir = run.to_str().unwrap();
    // Lines left out of a corpus are counted on stderr.
    let mixed = tmp.path().join("mixed.txt");
    std::fs::write(&mixed, format!("{poems}hello\n白日依山尽\n")).unwrap();
    let mixed_run = tmp.path().join("mixed");
    let (ok, stderr) = run_bin(
        "a corpus with two stray lines",
        TRAIN,
        &[
            "--config",
            "configs/tiny.toml",
            "--max-iters",
            "10",
            "--corpus",
            mixed.to_str().unwrap(),
            "--out",
            mixed_run.to_str().unwrap(),
        ],
    );
    let lines = poems.lines().count() + 2;
    assert!(
        ok && stderr.contains(&format!("note: 2 of {lines} lines")),
        "{stderr}"
    );
    // Resuming on a corpus with thousands of new characters counts them, names three and says
    // which corpus the run can go on with.
    let (_, stderr) = run_bin(
        "new characters",
        TRAIN,
        &[
            "--resume",
            dir,
            "--corpus",
            "data/poems.txt",
            "--max-iters",
            "20",
        ],
    );
    let error = stderr
        .lines()
        .find(|l| l.starts_with("error"))
        .unwrap_or_default();
    assert!(error.len() < 300, "{error}");
    for piece in [
        "data/poems.txt has ",
        "characters that the run's vocabulary lacks",
        "resume with that file as it was",
    ] {
        assert!(error.contains(piece), "`{piece}` missing in {error}");
    }
    // A damaged metrics.csv is named.
    std::fs::write(run.join("metrics.csv"), "step,train_loss\n10,abc\n").unwrap();
    fails(
        "damaged metrics",
        TRAIN,
        &["--resume", dir, "--max-iters", "20"],
        &["metrics.csv", "damaged"],
    );
}

#[test]
fn commands_run_from_a_subfolder_say_where_the_shipped_files_are() {
    // `cargo run` works from any folder of the repository, but relative paths start from there.
    let docs = root().join("docs");
    let repo = root().to_str().unwrap();
    let hint = ["exists: run from", repo];
    fails_in(&docs, "default config", TRAIN, &[], &hint);
    fails_in(&docs, "default corpus", HEADS, &[], &hint);
    fails_in(&docs, "scorer's corpus", SCORE, &["--val"], &hint);
    fails_in(&docs, "bench's config", BENCH, &["--steps", "1"], &hint);
    fails_in(
        &docs,
        "the page's newest run",
        SERVE,
        &["--port", "0"],
        &hint,
    );
    let spec = "configs/ablations/heads.toml";
    fails_in(&docs, "ablation spec", ABLATE, &[spec], &hint);
    let tiny = root().join("configs/tiny.toml");
    let tiny = ["--config", tiny.to_str().unwrap(), "--max-iters", "1"];
    fails_in(
        &docs,
        "config's corpus",
        TRAIN,
        &tiny,
        &["data/tiny.txt", hint[0]],
    );
    // A path that the repository does not have either says only where it was looked for.
    let looked = format!("checkpoints/none in {}", docs.display());
    let none = ["--checkpoint", "checkpoints/none"];
    fails_in(&docs, "missing run", SAMPLE, &none, &[&looked]);
    let none = ["--resume", "checkpoints/none"];
    fails_in(&docs, "missing resume", TRAIN, &none, &[&looked]);
    let (_, stderr) = run_bin_in(
        &docs,
        "no hint",
        SAMPLE,
        &["--checkpoint", "checkpoints/none"],
    );
    assert!(!stderr.contains("exists"), "{stderr}");
    // A clone elsewhere, run from its own subfolder: the hint names that clone (#78: it named
    // the tree the program was built in).
    let tmp = tempfile::tempdir().unwrap();
    let clone = tmp.path().join("clone");
    std::fs::create_dir_all(clone.join("configs")).unwrap();
    std::fs::create_dir_all(clone.join("docs")).unwrap();
    std::fs::copy(
        root().join("configs/default.toml"),
        clone.join("configs/default.toml"),
    )
    .unwrap();
    let hint = format!("exists: run from {}", clone.display());
    fails_in(
        &clone.join("docs"),
        "a clone's config",
        TRAIN,
        &[],
        &[&hint],
    );
}

#[test]
fn the_page_and_the_scorer_refuse_what_cannot_work() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("missing");
    let missing = missing.to_str().unwrap();
    fails(
        "serve on an address other machines reach",
        SERVE,
        &["--host", "0.0.0.0", "--checkpoint", missing],
        &["--allow-remote"],
    );
    fails(
        "serve a run that is not there",
        SERVE,
        &["--checkpoint", missing],
        &["no run directory", "train"],
    );
    let file = tmp.path().join("runs.txt");
    std::fs::write(&file, "not a folder").unwrap();
    fails(
        "serve runs from a file",
        SERVE,
        &["--runs", file.to_str().unwrap()],
        &["is a file", "give the folder"],
    );
    // Without --checkpoint, in a directory with no checkpoints/ at all.
    let out = common::binary(SERVE)
        .current_dir(tmp.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("no folder checkpoints in") && stderr.contains("--checkpoint"),
        "{stderr}"
    );
    // A port already taken.
    let run = tmp.path().join("run");
    tiny_run(&run, &[]);
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    fails(
        "serve on a port already taken",
        SERVE,
        &["--checkpoint", run.to_str().unwrap(), "--port", &port],
        &["cannot listen", "--port"],
    );
    fails("score nothing", SCORE, &[], &["nothing to score"]);
    fails(
        "score a missing file",
        SCORE,
        &[missing],
        &["cannot read the poems", "missing"],
    );
    fails(
        "score a file and --val",
        SCORE,
        &[missing, "--val"],
        &["not both"],
    );
    let blank = tmp.path().join("blank.txt");
    std::fs::write(&blank, "\n\n# a comment\n").unwrap();
    fails(
        "score blank lines",
        SCORE,
        &[blank.to_str().unwrap()],
        &[
            "no poem to score",
            "blank.txt has no line that is neither blank nor a # comment",
        ],
    );
    fails(
        "score an empty standard input",
        SCORE,
        &["-"],
        &["no poem to score", "standard input has no line"],
    );
    let few = tmp.path().join("few.txt");
    std::fs::write(&few, "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。\n").unwrap();
    fails(
        "score the held-out poems of a corpus that holds none out",
        SCORE,
        &["--val", "--corpus", few.to_str().unwrap()],
        &["has 1 poem, too few to hold any out", "score a FILE"],
    );
    let json = tmp.path().join("other.jsonl");
    std::fs::write(
        &json,
        "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。\n{\"poem\": 1}\n",
    )
    .unwrap();
    fails(
        "score JSON that sample did not print",
        SCORE,
        &[json.to_str().unwrap()],
        &["line 2 of", "not a line of `sample --json`"],
    );
    // A line far longer than a poem: its likelihood would need T × T attention weights per head.
    let long = tmp.path().join("long.txt");
    std::fs::write(&long, format!("白日依山尽。\n{}\n", "白".repeat(1001))).unwrap();
    let (long, run) = (long.to_str().unwrap(), run.to_str().unwrap());
    fails(
        "score a line too long for a likelihood",
        SCORE,
        &[long, "--checkpoint", run],
        &["poem 2 has 1001 characters", "at most 1000"],
    );
}

/// Spawns `bin` with `args` with its stdout (and, with `close_stderr`, its stderr) a pipe whose
/// reading end is closed at once; otherwise stderr goes to a file. Returns (status, stderr).
#[cfg(unix)]
fn run_into_closed_pipe(
    bin: &str,
    args: &[&str],
    close_stderr: bool,
) -> (std::process::ExitStatus, String) {
    let err_path =
        std::env::temp_dir().join(format!("shige-closed-pipe-{}.err", std::process::id()));
    let stderr = match close_stderr {
        true => Stdio::piped(),
        false => std::fs::File::create(&err_path).unwrap().into(),
    };
    let mut child = common::binary(bin)
        .args(args)
        .current_dir(root())
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    drop(child.stderr.take());
    let status = child.wait().unwrap();
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    let _ = std::fs::remove_file(&err_path);
    (status, stderr)
}

#[test]
#[cfg(unix)]
fn closed_pipes_end_output_quietly_and_training_goes_on() {
    use std::os::unix::process::ExitStatusExt;
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    // `train … 2>&1 | head -1`: the run still trains to its end and writes every checkpoint.
    let run_arg = run.to_str().unwrap();
    let args = [
        "--config",
        "configs/tiny.toml",
        "--max-iters",
        "20",
        "--out",
        run_arg,
    ];
    let (status, _) = run_into_closed_pipe(TRAIN, &args, true);
    assert!(status.success(), "train into closed pipes: {status:?}");
    let metrics = std::fs::read_to_string(run.join("metrics.csv")).unwrap();
    assert!(
        metrics.lines().last().unwrap().starts_with("20,"),
        "{metrics}"
    );
    // `ablate … 2>&1 | head -1`: the ablation trains to its end and writes its results.
    let spec = tmp.path().join("spec.toml");
    std::fs::write(
        &spec,
        "name = \"piped\"\nbase = \"configs/tiny.toml\"\n[[variant]]\nname = \"a\"\n",
    )
    .unwrap();
    let ablation = tmp.path().join("ablation");
    let args = [
        spec.to_str().unwrap(),
        "--max-iters",
        "4",
        "--out",
        ablation.to_str().unwrap(),
    ];
    let (status, _) = run_into_closed_pipe(ABLATE, &args, true);
    assert!(status.success(), "ablate into closed pipes: {status:?}");
    assert!(ablation.join("results.md").exists(), "no results.md");
    // `sample | head -1`, `score | head -1`: ended by SIGPIPE, as `cat` is, not by a panic. Each
    // writes more than a pipe holds (64 KiB: 300 poems, data/poems.txt's held-out poems scored),
    // so it cannot finish before the pipe is closed, however slowly this test closes it.
    let cases: [(&str, &[&str]); 2] = [
        (SAMPLE, &["--checkpoint", run_arg, "--num-samples", "300"]),
        (SCORE, &["--val", "--corpus", "data/poems.txt"]),
    ];
    for (bin, args) in cases {
        let (status, stderr) = run_into_closed_pipe(bin, args, false);
        assert!(!stderr.contains("panicked"), "{bin}: {stderr}");
        assert_eq!(
            status.signal(),
            Some(libc::SIGPIPE),
            "{bin}: {status:?} {stderr}"
        );
    }
}

#[test]
fn a_changed_corpus_is_refused_on_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("corpus.txt");
    let poems: Vec<String> = std::fs::read_to_string(root().join("data/tiny.txt"))
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    let write = |lines: &[String]| std::fs::write(&corpus, lines.join("\n") + "\n").unwrap();
    write(&poems);
    let run = tmp.path().join("run");
    tiny_run(&run, &["--corpus", corpus.to_str().unwrap()]);
    let before = snapshot(&run);
    let resume = ["--resume", run.to_str().unwrap(), "--max-iters", "20"];
    // Two poems swapped: the validation split would hold other poems.
    let mut swapped = poems.clone();
    swapped.swap(0, 19);
    // One character changed for another of the vocabulary.
    let mut edited = poems.clone();
    let (first, second) = (
        poems[0].chars().next().unwrap(),
        poems[1].chars().next().unwrap(),
    );
    edited[0] = edited[0].replacen(first, &second.to_string(), 1);
    assert_ne!(edited[0], poems[0]);
    for (case, lines) in [
        ("two poems swapped", &swapped),
        ("one character changed", &edited),
    ] {
        write(lines);
        fails(
            case,
            TRAIN,
            &resume,
            &[
                "is not the corpus this run was trained on",
                "resume with the files the run started on",
            ],
        );
        assert_eq!(snapshot(&run), before, "{case}: files changed");
    }
    write(&poems);
    let (ok, stderr) = run_bin("the same corpus", TRAIN, &resume);
    assert!(ok, "{stderr}");
}

#[test]
fn a_changed_validation_or_decay_file_is_named_on_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let poems: Vec<String> = std::fs::read_to_string(root().join("data/tiny.txt"))
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    let (corpus, validation, decay) = (
        tmp.path().join("corpus.txt"),
        tmp.path().join("val.txt"),
        tmp.path().join("decay.txt"),
    );
    let write =
        |path: &Path, lines: &[String]| std::fs::write(path, lines.join("\n") + "\n").unwrap();
    // The corpus's own poems and the validation file's are apart: no line shared.
    write(&corpus, &poems[..200]);
    write(&validation, &poems[200..]);
    write(&decay, &poems[..100]);
    let run = tmp.path().join("run");
    let set_validation = format!("data.validation={}", validation.display());
    let set_decay = format!("data.decay_corpus={}", decay.display());
    tiny_run(
        &run,
        &[
            "--corpus",
            corpus.to_str().unwrap(),
            "--schedule",
            "wsd",
            "--set",
            &set_validation,
            "--set",
            &set_decay,
        ],
    );
    let before = snapshot(&run);
    let resume = ["--resume", run.to_str().unwrap(), "--max-iters", "20"];
    let mut other = poems[200..].to_vec();
    other.swap(0, 19); // another poem held out
    write(&validation, &other);
    let named = format!(
        "{} (data.validation) is not the file this run was measured on",
        validation.display()
    );
    fails("the validation file changed", TRAIN, &resume, &[&named]);
    assert_eq!(snapshot(&run), before, "files changed");
    write(&validation, &poems[200..]);
    write(&decay, &poems[1..100]);
    let named = format!(
        "{} (data.decay_corpus) is not the file this run's decay was trained on",
        decay.display()
    );
    fails("the decay file changed", TRAIN, &resume, &[&named]);
    assert_eq!(snapshot(&run), before, "files changed");
    write(&decay, &poems[..100]);
    // A validation file given characters the run's vocabulary lacks is named for them.
    let mut strange = poems[200..].to_vec();
    strange[19] = "龘龘龘龘龘，龘龘龘龘龘。龘龘龘龘龘，龘龘龘龘龘。".into(); // held out
    write(&validation, &strange);
    let named = format!(
        "{} (data.validation) has 1 characters that the run's vocabulary lacks",
        validation.display()
    );
    fails(
        "new characters in the validation file",
        TRAIN,
        &resume,
        &[&named],
    );
    write(&validation, &poems[200..]);
    let (ok, stderr) = run_bin("the same files", TRAIN, &resume);
    assert!(ok, "{stderr}");
}

#[test]
fn plot_directories_keep_files_they_did_not_draw() {
    let tmp = tempfile::tempdir().unwrap();
    let run = trained_tiny(tmp.path());
    let run_arg = run.to_str().unwrap();
    for (case, name, args) in [
        ("a table of the user's", "sinusoidal.svg", vec![]),
        (
            "a heatmap of the user's",
            "attention-layer1.svg",
            vec!["--checkpoint", run_arg],
        ),
        (
            "a table beside a model",
            "sinusoidal.svg",
            vec!["--checkpoint", run_arg],
        ),
    ] {
        let dir = tmp.path().join(format!("plots-{}", case.replace(' ', "-")));
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join(name), "mine").unwrap();
        let mut all = args.clone();
        all.extend(["--plot", dir.to_str().unwrap()]);
        fails(
            case,
            HEADS,
            &all,
            &[name, "is not a drawing of this program"],
        );
        assert_eq!(std::fs::read_to_string(dir.join(name)).unwrap(), "mine");
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            1,
            "{case}: a file was added"
        );
    }
    // Its own drawings are drawn again.
    let own = tmp.path().join("own");
    let args = ["--checkpoint", run_arg, "--plot", own.to_str().unwrap()];
    for time in ["first", "second"] {
        let (ok, stderr) = run_bin(&format!("drawn a {time} time"), HEADS, &args);
        assert!(ok, "{time}: {stderr}");
    }
}

#[test]
fn line_breaks_inside_a_prompt_or_a_poem_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let run = trained_tiny(tmp.path());
    let run_arg = run.to_str().unwrap();
    for prompt in ["白\n日", "白\r日", "白\u{2028}日"] {
        fails(
            &format!("sample --prompt {prompt:?}"),
            SAMPLE,
            &["--checkpoint", run_arg, "--prompt", prompt],
            &["the prompt holds a line break", "one line"],
        );
    }
    let plot = tmp.path().join("plot");
    fails(
        "heads_positions --poem with a newline",
        HEADS,
        &[
            "--checkpoint",
            run_arg,
            "--plot",
            plot.to_str().unwrap(),
            "--poem",
            "白日依山尽，\n黄河入海流。",
        ],
        &["--poem holds a line break (U+000A)"],
    );
    assert!(!plot.exists(), "the plot directory was made");
}

/// Runs `bin` with `args`, its standard input the bytes of `input` (written from a thread, as
/// long as `bin` reads), standard output to `stdout`; returns (success, stdout text, stderr).
fn run_with_input(bin: &str, args: &[&str], input: Vec<u8>) -> (bool, String, String) {
    let mut child = common::binary(bin)
        .args(args)
        .current_dir(root())
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        let _ = stdin.write_all(&input); // the reader may stop early: a broken pipe is fine
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

#[test]
fn the_scorer_reads_no_more_than_its_limit_and_shows_what_it_reads() {
    // 100 MiB of NUL bytes on standard input: refused at the limit, not read to the end.
    let (ok, _, stderr) = run_with_input(SCORE, &["-"], vec![0u8; 100 << 20]);
    assert!(!ok, "{stderr}");
    assert!(stderr.contains("more than the 67108864 bytes"), "{stderr}");
    // A line of NULs is no poem.
    let (ok, _, stderr) = run_with_input(SCORE, &["-"], b"\0\0\0\0\0\n".to_vec());
    assert!(
        !ok && stderr.contains("control character U+0000"),
        "{stderr}"
    );
    // Lines ended by lone carriage returns are separate poems.
    let qijue = "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。";
    let text = format!("{qijue}\r{qijue}\r{qijue}\r");
    let (ok, stdout, stderr) = run_with_input(SCORE, &["-"], text.into_bytes());
    assert!(ok, "{stderr}");
    assert!(stdout.contains("3 poems, 3 of a regular form"), "{stdout}");
    // A bidirectional override is shown, not obeyed.
    let text = format!("{qijue}\u{202e}abc\n");
    let (ok, stdout, stderr) = run_with_input(SCORE, &["-"], text.into_bytes());
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("<U+202E>abc") && !stdout.contains('\u{202e}'),
        "{stdout}"
    );
    // A rhyme character the table lacks (the traditional 樓 for 楼): unknown, not "no rhyme".
    let traditional = qijue.replace('楼', "樓");
    let (ok, stdout, stderr) = run_with_input(SCORE, &["-"], traditional.into_bytes());
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("rhyme unknown") && !stdout.contains("does not rhyme"),
        "{stdout}"
    );
}

#[test]
#[cfg(unix)]
fn standard_output_that_cannot_be_written_is_an_error_not_a_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let run = trained_tiny(tmp.path());
    let run_arg = run.to_str().unwrap();
    let spec = tmp.path().join("spec.toml");
    std::fs::write(
        &spec,
        "name = \"full\"\nbase = \"configs/tiny.toml\"\n[[variant]]\nname = \"a\"\n",
    )
    .unwrap();
    let ablation = tmp.path().join("ablation");
    let cases: [(&str, &[&str]); 6] = [
        (SAMPLE, &["--checkpoint", run_arg]),
        (SAMPLE, &["--checkpoint", run_arg, "--json"]),
        (SCORE, &["--val", "--corpus", "data/tiny.txt"]),
        (HEADS, &["--checkpoint", run_arg]),
        (HEADS, &["--corpus", "data/tiny.txt", "--json"]),
        (
            ABLATE,
            &[
                spec.to_str().unwrap(),
                "--max-iters",
                "2",
                "--json",
                "--out",
                ablation.to_str().unwrap(),
            ],
        ),
    ];
    // `> /dev/full`: a full disk.
    for (bin, args) in cases {
        let out = common::binary(bin)
            .args(args)
            .current_dir(root())
            .env("RUST_BACKTRACE", "1")
            .stdout(
                std::fs::OpenOptions::new()
                    .write(true)
                    .open("/dev/full")
                    .unwrap(),
            )
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bin} {args:?}: exit 0");
        assert!(!stderr.contains("panicked"), "{bin} {args:?}: {stderr}");
        let last = stderr.lines().last().unwrap_or_default();
        assert!(
            last.starts_with("error: cannot write to standard output: No space left on device"),
            "{bin} {args:?}: {stderr}"
        );
    }
    // `2> /dev/full`: the poems are written, the summary that cannot be is skipped.
    let out = common::binary(SAMPLE)
        .args(["--checkpoint", run_arg])
        .stdout(Stdio::piped())
        .stderr(
            std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/full")
                .unwrap(),
        )
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}", out.status);
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 3);
    // `>&-`: the poems would be lost, so nothing is drawn.
    let out = std::process::Command::new("sh")
        .args(["-c", "exec \"$@\" >&-", "sh"])
        .args(common::binary_words(SAMPLE))
        .args(["--checkpoint", run_arg])
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("standard output is closed"), "{stderr}");
    // `> /dev/null` is a choice, not a closed output.
    let out = common::binary(SAMPLE)
        .args(["--checkpoint", run_arg])
        .stdout(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[cfg(unix)]
fn links_to_nowhere_and_runs_that_never_saved_get_messages_that_agree() {
    let tmp = tempfile::tempdir().unwrap();
    let nowhere = tmp.path().join("nowhere");
    // `--out` a link to nothing, and checkpoints/ a link to nothing.
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&nowhere, &link).unwrap();
    fails(
        "--out a link to nothing",
        TRAIN,
        &[
            "--config",
            "configs/tiny.toml",
            "--out",
            link.to_str().unwrap(),
        ],
        &["is a symbolic link to", "which does not exist"],
    );
    let cwd = tmp.path().join("cwd");
    std::fs::create_dir(&cwd).unwrap();
    std::os::unix::fs::symlink(&nowhere, cwd.join("checkpoints")).unwrap();
    let config = root().join("configs/tiny.toml");
    let corpus = root().join("data/tiny.txt");
    fails_in(
        &cwd,
        "checkpoints/ a link to nothing",
        TRAIN,
        &[
            "--config",
            config.to_str().unwrap(),
            "--corpus",
            corpus.to_str().unwrap(),
        ],
        &["checkpoints is a symbolic link to", "which does not exist"],
    );
    assert!(!nowhere.exists());
    // A run that stopped before its first checkpoint (a full disk, say): --out and --resume
    // say the same thing, not each the other's flag.
    let run = tmp.path().join("my run");
    tiny_run(&run, &[]);
    for entry in std::fs::read_dir(&run).unwrap().flatten() {
        if entry.file_name() != "config.toml" && entry.file_name() != "tokenizer.json" {
            std::fs::remove_file(entry.path()).unwrap();
        }
    }
    let run_arg = run.to_str().unwrap();
    let expect = ["stopped before its first checkpoint", "remove its files"];
    fails("--resume it", TRAIN, &["--resume", run_arg], &expect);
    fails(
        "--out it",
        TRAIN,
        &["--config", "configs/tiny.toml", "--out", run_arg],
        &expect,
    );
    // A path with a space is given quoted, ready to paste.
    std::fs::remove_dir_all(&run).unwrap();
    tiny_run(&run, &[]);
    fails(
        "--out over a run",
        TRAIN,
        &["--config", "configs/tiny.toml", "--out", run_arg],
        &[&format!("--resume '{run_arg}'")],
    );
}

/// The server passes over a newest run whose weights do not load (NaN) for one that does, and,
/// started outside the repository, says where the configs it trains from are.
#[test]
fn the_server_writes_with_a_run_that_loads_and_says_where_configs_are() {
    use shige::train::run_dir::MODEL_FILE;
    use shige::train::safetensors::{read_safetensors, to_safetensors};
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    tiny_run(&runs.join("older"), &[]);
    tiny_run(&runs.join("newer"), &[]);
    let weights = runs.join("newer").join(MODEL_FILE);
    let (tensors, metadata) = read_safetensors(&weights).unwrap();
    let poisoned: Vec<(String, candle_core::Tensor)> = tensors
        .into_iter()
        .map(|(name, t)| {
            let nan = (t.ones_like().unwrap() * f64::NAN).unwrap();
            (name, nan)
        })
        .collect();
    std::fs::write(&weights, to_safetensors(&poisoned, metadata).unwrap()).unwrap();
    let runs_arg = runs.to_str().unwrap();
    let (mut server, _) = common::serve_binary(root(), &["--runs", runs_arg]);
    server.kill().unwrap();
    let out = server.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("not writing with") && stderr.contains("newer"),
        "{stderr}"
    );

    // Outside the repository: the page writes with a run, and says why it cannot train.
    let (mut server, base) = common::serve_binary(tmp.path(), &["--runs", runs_arg]);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut answer = agent
        .post(format!("{base}/api/train"))
        .header("Content-Type", "application/json")
        .send(r#"{"config":"tiny"}"#)
        .unwrap();
    let text = answer.body_mut().read_to_string().unwrap();
    server.kill().unwrap();
    let _ = server.wait();
    assert_eq!(answer.status().as_u16(), 400, "{text}");
    assert!(
        text.contains("finds no configs/ folder")
            && text.contains("start `serve` in the repository"),
        "{text}"
    );
}

/// `--max-iters` on the command line wins over `minutes` in the config file.
#[test]
fn a_step_count_given_wins_over_minutes_in_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("minutes.toml");
    let text = BASE_CONFIG.replace("warmup_iters = 1", "warmup_iters = 5\nminutes = 10.0");
    std::fs::write(&config, text.replace("max_iters = 5", "max_iters = 9")).unwrap();
    let dir = tmp.path().join("run");
    let (config, out) = (config.to_str().unwrap(), dir.to_str().unwrap());
    let args = [
        "--config",
        config,
        "--max-iters",
        "30",
        "--out",
        out,
        "--json",
    ];
    let out = common::train_output(&args);
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["steps"], 30);
    let saved = std::fs::read_to_string(dir.join("config.toml")).unwrap();
    assert!(
        saved.contains("max_iters = 30") && !saved.contains("minutes"),
        "{saved}"
    );
}

/// Huge values are shown as numbers, not walls of digits: a rate of 1e308 in the message of the
/// loss it blew up, 1e300 minutes in the plan's note.
#[test]
fn huge_values_are_shown_short() {
    let tmp = tempfile::tempdir().unwrap();
    let long_digits = |text: &str| {
        text.split(|c: char| !c.is_ascii_digit())
            .any(|digits| digits.len() > 20)
    };
    let out = tmp.path().join("rate");
    let args = [
        "--config",
        "configs/tiny.toml",
        "--out",
        out.to_str().unwrap(),
        "--set",
        "optimizer.learning_rate=1e308",
    ];
    fails("a rate of 1e308", TRAIN, &args, &["(now 1e308)"]);
    let (_, stderr) = run_bin("a rate of 1e308", TRAIN, &args);
    assert!(!long_digits(&stderr), "{stderr}");
    let out = tmp.path().join("ages");
    let args = [
        "--config",
        "configs/tiny.toml",
        "--out",
        out.to_str().unwrap(),
        "--set",
        "train.minutes=1e300",
        "--set",
        "schedule.kind=\"wsd\"",
        "--stop-at",
        "12",
    ];
    let (ok, stderr) = run_bin("1e300 minutes", TRAIN, &args);
    assert!(ok && stderr.contains("for 1e300 minutes"), "{stderr}");
    assert!(!long_digits(&stderr), "{stderr}");
    for (setting, says) in [
        (
            "optimizer.learning_rate=-1e300",
            "learning_rate -1e300 must be",
        ),
        ("optimizer.beta1=1e300", "beta1 1e300 must be"),
        ("model.dropout=1e300", "dropout 1e300 must be"),
    ] {
        let out = tmp.path().join("refused");
        let args = [
            "--config",
            "configs/tiny.toml",
            "--out",
            out.to_str().unwrap(),
            "--set",
            setting,
        ];
        fails(setting, TRAIN, &args, &[says]);
    }
}

/// A refusal that comes after the corpus is read is still one line: what the corpus is read as is
/// said once the run is open, not before a refusal.
#[test]
fn a_refusal_after_reading_the_corpus_is_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    for set in [
        "model.n_head=3",
        "data.header_fields=2",
        "model.inputs=[\"sounds\"]",
    ] {
        let args = [
            "--config",
            "configs/tiny.toml",
            "--out",
            out.to_str().unwrap(),
            "--set",
            set,
        ];
        let (ok, stderr) = run_bin(set, TRAIN, &args);
        assert!(!ok && stderr.lines().count() == 1, "{set}: {stderr}");
        assert!(stderr.starts_with("error: "), "{set}: {stderr}");
    }
}

/// A run measured on another file's held-out poems (`[data] validation`) trained on every poem of
/// its corpus: `score --val` on that corpus would score training poems as held out, and is
/// refused; on the validation file it scores the poems the run held out.
#[test]
fn score_refuses_held_out_poems_of_a_corpus_trained_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let tiny = std::fs::read_to_string(root().join("data/tiny.txt")).unwrap();
    let training: String = tiny
        .lines()
        .enumerate()
        .filter(|(i, _)| i % 20 != 19)
        .map(|(_, l)| format!("{l}\n"))
        .collect();
    let corpus = tmp.path().join("train.txt");
    std::fs::write(&corpus, training).unwrap();
    let (run, corpus) = (tmp.path().join("run"), corpus.to_str().unwrap());
    let validation = ["--corpus", corpus, "--set", "data.validation=data/tiny.txt"];
    tiny_run(&run, &validation);
    let run = run.to_str().unwrap();
    fails(
        "score --val on the corpus trained whole",
        SCORE,
        &["--val", "--checkpoint", run, "--corpus", corpus],
        &["trained on every poem of", "give --corpus data/tiny.txt"],
    );
    let args = ["--val", "--checkpoint", run, "--corpus", "data/tiny.txt"];
    let (ok, err) = run_bin("score --val on the validation file", SCORE, &args);
    assert!(ok, "{err}");
}

/// A path or a key holding a line end or a direction-changing character is shown escaped, on
/// the error's one line (#78: the message was cut at the line end, U+202E printed as it is).
#[test]
fn hidden_characters_in_paths_and_keys_are_shown_escaped() {
    for (case, args, expect) in [
        (
            "a config path with a line end",
            vec!["--config", "configs/a\nb.toml"],
            if cfg!(windows) {
                r"cannot read config file configs/a\nb.toml: the file system allows no such name"
            } else {
                r"cannot read config file configs/a\nb.toml: no such file"
            },
        ),
        (
            "a key with U+202E",
            vec!["--set", "model.n_la\u{202e}yer=3"],
            r"--set model.n_la\u{202e}yer is not valid: its key holds U+202E",
        ),
        (
            "a corpus path with a tab",
            vec!["--config", "configs/tiny.toml", "--corpus", "data/a\tb.txt"],
            r"cannot read corpus data/a\tb.txt",
        ),
        (
            "a key with a line end",
            vec!["--set", "train.seed\n=3"],
            "its key holds U+000A",
        ),
    ] {
        let (ok, stderr) = run_bin(case, TRAIN, &args);
        assert!(!ok, "{case}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{case}: {stderr}");
        assert!(stderr.contains(expect), "{case}: {stderr}");
        assert!(!stderr.contains('\u{202e}'), "{case}: {stderr}");
    }
    // An output folder named so is refused before anything is made.
    let tmp = tempfile::tempdir().unwrap();
    for name in ["a\nb", "a\u{202e}b", "a\u{200b}b"] {
        let out = tmp.path().join(name);
        let args = [
            "--config",
            "configs/tiny.toml",
            "--out",
            out.to_str().unwrap(),
        ];
        fails(
            name,
            TRAIN,
            &args,
            &["which a name should not", "give --out a name without it"],
        );
        assert!(!out.exists(), "{name}");
    }
}

/// What stands where a run writes a file and is not the run's to replace (a folder, a link, a
/// read-only file) is found before the run trains (#78: after training, in a raw error) and left
/// as it is.
#[cfg(unix)]
#[test]
fn a_resume_refuses_at_once_what_it_may_not_write_over() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let run = trained_tiny(tmp.path());
    let resume = ["--resume", run.to_str().unwrap(), "--max-iters", "20"];
    let metrics = std::fs::read(run.join("metrics.csv")).unwrap();
    std::fs::write(tmp.path().join("mine.csv"), &metrics).unwrap();
    for (case, file, make, expect) in [
        ("a folder", "loss.svg", 0, "is a folder"),
        (
            "a link to the same bytes",
            "metrics.csv",
            1,
            "is a symbolic link",
        ),
        ("a read-only file", "summary.json", 2, "is read-only"),
    ] {
        let path = run.join(file);
        let saved = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        match make {
            0 => std::fs::create_dir(&path).unwrap(),
            1 => std::os::unix::fs::symlink(tmp.path().join("mine.csv"), &path).unwrap(),
            _ => {
                std::fs::write(&path, &saved).unwrap();
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
            }
        }
        let before = snapshot(&run);
        fails(case, TRAIN, &resume, &[file, expect, "move it away"]);
        assert_eq!(snapshot(&run), before, "{case}: files changed");
        let _ = std::fs::remove_dir(&path).or_else(|_| std::fs::remove_file(&path));
        std::fs::write(&path, &saved).unwrap();
    }
    let (ok, stderr) = run_bin("all put back", TRAIN, &resume);
    assert!(ok, "{stderr}");
}

/// A run stopped before its first evaluation has no weights to sample: `sample` says how to get
/// them (#78: it said only what a run writes).
#[test]
fn sampling_a_run_stopped_before_its_first_evaluation_says_how_to_go_on() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("early");
    let out = run.to_str().unwrap();
    let args = [
        "--config",
        "configs/tiny.toml",
        "--stop-at",
        "5",
        "--out",
        out,
    ];
    let (ok, stderr) = run_bin("stopped early", TRAIN, &args);
    assert!(ok, "{stderr}");
    let resume = format!("`train --resume {out}` trains on to its next evaluation");
    fails(
        "sample",
        SAMPLE,
        &["--checkpoint", out],
        &["has no model.safetensors", &resume],
    );
}

/// Names Windows refuses as a folder (a device, a reserved name with an extension, a colon, a
/// wildcard) are refused as --out in one line that says to choose another, and nothing is made.
#[cfg(windows)]
#[test]
fn names_windows_refuses_are_refused_as_out_in_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let tiny = root().join("configs/tiny.toml");
    let corpus = root().join("data/tiny.txt");
    for out in ["CON", "aux.txt", "a:b", "x?y"] {
        let args = [
            "--config",
            tiny.to_str().unwrap(),
            "--corpus",
            corpus.to_str().unwrap(),
            "--max-iters",
            "1",
            "--out",
            out,
        ];
        fails_in(
            tmp.path(),
            out,
            TRAIN,
            &args,
            &["cannot create", "choose another --out"],
        );
    }
    let made: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert!(made.is_empty(), "{made:?}");
}
