//! Helpers shared by the integration tests: the tiny corpus and small models.
#![allow(dead_code)]

use candle_core::Tensor;
use shige::config::{ModelConfig, Position, RunConfig};
use shige::data::{CharTokenizer, Corpus};
use shige::train::metrics::from_csv;
use shige::train::optim::Gradients;
use shige::train::run_dir::{RunDir, METRICS_FILE};
use shige::train::{train, TrainOptions, TrainSummary};
use shige::verse::inputs::Vocabulary;
use std::path::Path;

/// A command that runs `program`, one of this package's binaries: under the emulator that
/// `SHIGE_TEST_RUNNER` names (with its arguments, split at spaces) where it is set, as .ci/run
/// sets it to qemu-user for the ARM Linux tests (no kernel here runs those binaries itself),
/// else directly.
pub fn binary(program: &str) -> std::process::Command {
    let words = binary_words(program);
    let mut command = std::process::Command::new(&words[0]);
    command.args(&words[1..]);
    command
}

/// The words of a command line that runs `program` as [`binary`] does (for a shell's `exec`).
pub fn binary_words(program: &str) -> Vec<String> {
    let runner = std::env::var("SHIGE_TEST_RUNNER").unwrap_or_default();
    let mut words: Vec<String> = runner.split_whitespace().map(String::from).collect();
    words.push(program.to_string());
    words
}

/// configs/tiny.toml with its corpus path made absolute.
pub fn tiny_config() -> RunConfig {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut cfg =
        RunConfig::load(&root.join("configs/tiny.toml")).expect("configs/tiny.toml loads");
    cfg.data.corpus = root.join("data/tiny.txt").display().to_string();
    cfg
}

/// A new run of `config` on the CPU with the fused kernels into `dir`, without a progress bar:
/// the options the tests change a field of.
pub fn options(config: RunConfig, dir: &Path) -> TrainOptions {
    TrainOptions {
        device: candle_core::Device::Cpu,
        config,
        run: RunDir::new(dir),
        resume: false,
        stop_at: None,
        progress: false,
        kernels: shige::ops::Kernels::Fused,
        parent: None,
        clock: None,
    }
}

/// Trains `cfg` on the CPU into `dir`, without a progress bar.
pub fn run(
    cfg: &RunConfig,
    dir: &Path,
    resume: bool,
    stop_at: Option<usize>,
) -> anyhow::Result<TrainSummary> {
    run_on_clock(cfg, dir, resume, stop_at, None)
}

/// [`run`], the time of `minutes` counted from `clock` (None: from the call).
pub fn run_on_clock(
    cfg: &RunConfig,
    dir: &Path,
    resume: bool,
    stop_at: Option<usize>,
    clock: Option<std::time::Instant>,
) -> anyhow::Result<TrainSummary> {
    train(TrainOptions {
        resume,
        stop_at,
        clock,
        ..options(cfg.clone(), dir)
    })
}

/// Fine-tunes from `parent` with `config` (its `Parent::config_for`) on the CPU into `dir`,
/// without a progress bar.
pub fn fine_tune(
    config: RunConfig,
    dir: &Path,
    parent: shige::train::parent::Parent,
) -> anyhow::Result<TrainSummary> {
    train(TrainOptions {
        parent: Some(parent),
        ..options(config, dir)
    })
}

/// (step, train loss, val loss) of each evaluation in a run directory's metrics.
pub fn curve(dir: &Path) -> Vec<(usize, f64, f64)> {
    let text = std::fs::read_to_string(dir.join(METRICS_FILE)).expect("metrics.csv reads");
    from_csv(&text)
        .expect("metrics.csv parses")
        .iter()
        .map(|r| (r.step, r.train_loss, r.val_loss))
        .collect()
}

/// The tiny corpus shipped for tests.
pub fn tiny_corpus() -> Corpus {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/data/tiny.txt");
    Corpus::load(Path::new(path), shige::config::CorpusKind::Auto).expect("data/tiny.txt loads")
}

/// The tokenizer of the tiny corpus.
pub fn tiny_tokenizer() -> CharTokenizer {
    CharTokenizer::from_text(&tiny_corpus().text()).expect("tokenizer builds")
}

/// Characters of four 平声 rhyme groups (一东, 一先, 十五删, 十二侵), one of two groups (还), of
/// two readings (中, 思, 看), of 仄 alone (日, 月, 白, 雪) and unknown to the tables (the
/// punctuation).
pub const SOUNDING_CHARS: &str = "东同中风空红天前年边然先山间闲还心深林金日月白雪思看，。";

/// A vocabulary of `vocab` tokens: the newline, then [`SOUNDING_CHARS`] over and over.
pub fn vocabulary_of(vocab: usize) -> Vocabulary {
    let chars = std::iter::once('\n').chain(SOUNDING_CHARS.chars().cycle());
    Vocabulary::new(chars.zip(0..vocab as u32))
}

/// A tensor of `like`'s shape holding amplitude × sin(i) for its i-th value: deterministic and
/// non-zero.
pub fn wavy_like(like: &Tensor, amplitude: f64) -> Tensor {
    let values: Vec<f32> = (0..like.elem_count())
        .map(|i| (amplitude * (i as f64).sin()) as f32)
        .collect();
    Tensor::from_vec(values, like.shape(), like.device()).expect("same shape")
}

/// A small model config for fast tests.
pub fn small_config(vocab_size: usize, n_layer: usize, position: Position) -> ModelConfig {
    ModelConfig {
        vocab_size,
        block_size: 16,
        n_layer,
        n_head: 4,
        n_embd: 32,
        position,
        ..Default::default()
    }
}

/// Asserts that two losses agree within 1e-5 and two sets of gradients within 1e-4 of each
/// parameter's largest, every parameter having a non-zero gradient; `case` names the comparison.
pub fn assert_same_loss_and_gradients(
    case: &str,
    (loss, grads): (f64, &Gradients),
    (expected_loss, expected): (f64, &Gradients),
) {
    assert!(
        (loss - expected_loss).abs() < 1e-5 * expected_loss,
        "{case}: loss {loss} vs {expected_loss}"
    );
    assert_eq!(grads.values().len(), expected.values().len());
    for (g, e) in grads.values().iter().zip(expected.values()) {
        let scale = e.iter().fold(0f32, |m, x| m.max(x.abs()));
        assert!(scale > 0.0, "{case}: a parameter got no gradient");
        let worst = g.iter().zip(e).fold(0f32, |m, (g, e)| m.max((g - e).abs()));
        assert!(
            worst < 1e-4 * scale,
            "{case}: gradient off by {worst} (largest {scale})"
        );
    }
}

/// Each row of the candle graph's logits (T, V) for the context `ids`.
pub fn full_logits(model: &shige::model::Gpt, ids: &[u32]) -> Vec<Vec<f32>> {
    use candle_core::{Device, Tensor};
    let idx = Tensor::new(ids, &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap(); // (1, T)
    let logits = model.forward(&idx, &mut shige::model::Mode::Eval).unwrap(); // (1, T, V)
    logits.squeeze(0).unwrap().to_vec2().unwrap()
}

/// A server with `options` on 127.0.0.1 at an ephemeral port, on a thread of its own; its base
/// URL.
#[cfg(feature = "serve")]
pub fn serve_in_thread(options: shige::serve::ServeOptions) -> String {
    let served = std::sync::Arc::new(shige::serve::Served::new(options));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            shige::serve::serve(listener, served).await.unwrap();
        })
    });
    format!("http://{address}")
}

/// Runs the `train` binary with `args` in the repository to its end; panics with its stderr if
/// it fails.
pub fn train_ok(args: &[&str]) {
    train_output(args);
}

/// [`train_ok`], returning what `train` printed.
pub fn train_output(args: &[&str]) -> std::process::Output {
    let out = binary(env!("CARGO_BIN_EXE_train"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Polls `ready` every 10 ms until it holds, for at most a minute.
pub fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let started = std::time::Instant::now();
    while !ready() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "waited a minute for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// The `serve` binary started in `cwd` with `args` on any free port: the process (its stderr
/// piped) and the page's address, read from its first line.
#[cfg(feature = "serve")]
pub fn serve_binary(cwd: &Path, args: &[&str]) -> (std::process::Child, String) {
    use std::io::BufRead;
    use std::process::Stdio;
    let mut server = binary(env!("CARGO_BIN_EXE_serve"))
        .args(args)
        .args(["--port", "0"])
        .current_dir(cwd)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let address = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();
    (server, format!("http://{address}"))
}

/// The text of a file of the repository, by its path from the root (`data/ci.txt`).
pub fn root_file(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

/// An untrained 1-layer model of 2 heads × 8 dimensions over `tokenizer`'s vocabulary, its weights
/// drawn from `seed`: a sampler's rules, not its taste, decide what it writes.
pub fn random_model(tokenizer: &CharTokenizer, seed: u64) -> shige::model::Gpt {
    let cfg = ModelConfig {
        vocab_size: tokenizer.vocab_size(),
        block_size: 64,
        n_layer: 1,
        n_head: 2,
        n_embd: 16,
        ..Default::default()
    };
    shige::model::Gpt::seeded(&cfg, seed, &candle_core::Device::Cpu)
        .unwrap()
        .0
}
