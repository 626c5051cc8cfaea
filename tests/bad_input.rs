//! The bad-input matrix: every case runs a binary as a user would and expects a non-zero exit,
//! one line `error: …` on stderr saying what is wrong, no panic or backtrace, and no file of an
//! existing run changed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const TRAIN: &str = env!("CARGO_BIN_EXE_train");
const SAMPLE: &str = env!("CARGO_BIN_EXE_sample");

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
                .map(|e| {
                    let mut h = std::collections::hash_map::DefaultHasher::new();
                    std::fs::read(e.path()).unwrap_or_default().hash(&mut h);
                    (e.path(), h.finish())
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Runs `bin` with `args` and checks the failure; `expect` are pieces of the message.
fn fails(case: &str, bin: &str, args: &[&str], expect: &[&str]) {
    let out = Command::new(bin)
        .args(args)
        .current_dir(root())
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{case}: exit 0\n{stderr}");
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
    let out = Command::new(TRAIN)
        .args(&args)
        .current_dir(root())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
"#;

#[test]
fn bad_configs_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let cases: [(&str, String, &[&str]); 12] = [
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
        (
            "binary corpus",
            write("binary.txt", &[0xff, 0xfe, 0x00, 0x9c, 0x80, 0x01]),
            &["not UTF-8"],
        ),
        (
            "no valid poem",
            write("prose.txt", b"hello world\nfoo bar\n"),
            &["no valid poem"],
        ),
        (
            "shorter than one block",
            write("short.txt", short.as_bytes()),
            &["fewer than block_size + 1"],
        ),
    ];
    for (i, (case, corpus, expect)) in cases.iter().enumerate() {
        let out = tmp.path().join(format!("out{i}"));
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
        assert!(!out.exists(), "{case}: the run directory was created");
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
    let cases: Vec<(&str, &str, Option<Vec<u8>>, &[&str])> = vec![
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
            &["shape"],
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
            &["shape"],
        ),
        (
            "malformed config",
            "config.toml",
            Some(b"[model\n".to_vec()),
            &["not valid"],
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
            &["\\u{7}"],
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
            "too few tokens for the form",
            vec!["--form", "qilv", "--max-new-tokens", "10"],
            &["raise it to 65"],
        ),
        (
            "not a number",
            vec!["--temperature", "warm"],
            &["invalid value", "--help"],
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
            &["no CUDA support", "--features cuda"],
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
        &["the loss became", "checkpoint", "intact", "--learning-rate"],
    );
    assert_eq!(snapshot(&run), before, "the last good checkpoint changed");
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
