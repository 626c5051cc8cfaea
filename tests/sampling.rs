//! Loading a trained run and sampling from it.

use rand::SeedableRng;
use shige::config::RunConfig;
use shige::sample::{generate, is_well_formed};
use shige::train::checkpoint::{load_run, RunDir, TOKENIZER_FILE};
use shige::train::{train, TrainOptions};
use std::path::Path;

fn tiny_run(dir: &Path) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut cfg = RunConfig::load(&root.join("configs/tiny.toml")).unwrap();
    cfg.train.corpus = root.join("data/tiny.txt").display().to_string();
    cfg.train.max_iters = 20;
    train(TrainOptions {
        config: cfg,
        run: RunDir::new(dir),
        resume: false,
        stop_at: None,
        progress: false,
    })
    .unwrap();
}

#[test]
fn one_seed_gives_the_same_text_and_tokens_stream_in_order() {
    let tmp = tempfile::tempdir().unwrap();
    tiny_run(tmp.path());
    let run = load_run(tmp.path()).unwrap();
    let prompt = run.tokenizer.encode("\n白日").unwrap();
    let draw = |seed| {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut streamed = Vec::new();
        let ids = generate(&run.model, &prompt, 30, 0.8, None, &mut rng, &mut |id| {
            streamed.push(id)
        })
        .unwrap();
        assert_eq!(ids, streamed, "every token is streamed, in order");
        ids
    };
    assert_eq!(draw(3), draw(3));
    assert_ne!(draw(3), draw(4));
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    let greedy = generate(&run.model, &prompt, 10, 0.0, None, &mut rng, &mut |_| {}).unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    assert_eq!(
        greedy,
        generate(&run.model, &prompt, 10, 0.0, None, &mut rng, &mut |_| {}).unwrap(),
        "greedy ignores the seed"
    );
}

#[test]
fn a_missing_or_mismatched_run_is_refused_with_what_to_do() {
    let err = load_run(Path::new("/nonexistent/run"))
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("cargo run --release --bin train"), "{err}");
    let tmp = tempfile::tempdir().unwrap();
    tiny_run(tmp.path());
    let other = shige::data::CharTokenizer::from_text("白日依山尽，黄河入海流。\n").unwrap();
    std::fs::write(tmp.path().join(TOKENIZER_FILE), other.to_json().unwrap()).unwrap();
    let err = load_run(tmp.path()).err().unwrap().to_string();
    assert!(err.contains("different runs"), "{err}");
}

#[test]
fn well_formed_verse_is_recognised() {
    assert!(is_well_formed(
        "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。"
    ));
    assert!(
        !is_well_formed("白日依山尽，黄河入海流。欲穷千里目，更上一层。"),
        "unequal lines"
    );
    assert!(
        !is_well_formed("白日依山尽。黄河入海流，欲穷千里目，更上一层楼。"),
        "punctuation out of turn"
    );
    assert!(!is_well_formed("白日依山尽，黄河入海流。"), "two lines");
}
