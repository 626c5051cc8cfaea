//! Data-parallel steps: a batch cut into units gives the whole batch's loss and gradients, and the
//! same bits on any number of threads.

mod common;

use candle_core::{Device, Tensor};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use shige::config::{ModelConfig, Position};
use shige::model::Gpt;
use shige::ops::Precision;
use shige::train::optim::{AdamWParams, Gradients, Optimizer};
use shige::train::shards::{Shards, UNIT_ROWS};

/// A batch of `rows` sequences of 16 tokens and the next tokens, over a vocabulary of 30.
fn batch(rows: usize) -> (Tensor, Tensor) {
    let ids: Vec<u32> = (0..rows * 17).map(|i| (i * 11 % 29) as u32).collect();
    let all = Tensor::from_vec(ids, (rows, 17), &Device::Cpu).unwrap();
    (
        all.narrow(1, 0, 16).unwrap().contiguous().unwrap(),
        all.narrow(1, 1, 16).unwrap().contiguous().unwrap(),
    )
}

/// Sequences of 16 tokens in a batch of three units: 16 + 16 + 8 (the last one smaller).
const ROWS: usize = 2 * UNIT_ROWS / 16 + UNIT_ROWS / 32;

fn loss_and_gradients(model: &Gpt, opt: &Optimizer, shards: &Shards) -> (f64, Gradients) {
    loss_and_gradients_of(ROWS, model, opt, shards)
}

/// One step's loss and gradients over a batch of `rows` sequences, dropout drawn from seed 0.
fn loss_and_gradients_of(
    rows: usize,
    model: &Gpt,
    opt: &Optimizer,
    shards: &Shards,
) -> (f64, Gradients) {
    let (x, y) = batch(rows);
    shards
        .loss_and_gradients(
            (model, opt),
            (&x, &y),
            Precision::F32,
            &mut ChaCha8Rng::seed_from_u64(0),
        )
        .unwrap()
}

/// A seeded model of `cfg` and an optimiser over its parameters.
fn model_and_optimiser(cfg: &ModelConfig) -> (Gpt, Optimizer) {
    let (model, varmap) = Gpt::seeded(cfg, 3, &Device::Cpu).unwrap();
    let opt = Optimizer::new(
        varmap.data().lock().unwrap().clone(),
        AdamWParams::NANOGPT,
        None,
    )
    .unwrap();
    (model, opt)
}

#[test]
fn units_give_the_whole_batch_loss_and_gradients() {
    // Positions inside attention (RoPE, ALiBi) and added to the embedding (learned).
    for position in [Position::Rope, Position::Alibi, Position::Learned] {
        let cfg = ModelConfig {
            dropout: 0.0,
            ..common::small_config(30, 2, position)
        };
        let (model, opt) = model_and_optimiser(&cfg);
        let (whole_loss, whole) = loss_and_gradients(&model, &opt, &Shards::whole());
        let (loss, grads) = loss_and_gradients(&model, &opt, &Shards::new(2, (ROWS, 16)).unwrap());
        let case = format!("{position:?}: three units against the whole batch");
        common::assert_same_loss_and_gradients(&case, (loss, &grads), (whole_loss, &whole));
        let (x, y) = batch(ROWS);
        let eval = Shards::new(2, (ROWS, 16))
            .unwrap()
            .loss(&model, &x, &y)
            .unwrap();
        let whole_eval = Shards::whole().loss(&model, &x, &y).unwrap();
        assert!((eval - whole_eval).abs() < 1e-5 * whole_eval, "{case}");
    }
}

/// A step over a batch of `rows` sequences with dropout on `threads` threads gives the loss and
/// gradients of 1 thread, bit for bit; each Shards asked for its threads holds that many.
fn assert_same_step_on(rows: usize, threads: &[usize]) -> Gpt {
    // Dropout on: each unit draws its masks from its own seed, whichever thread runs it.
    let cfg = ModelConfig {
        dropout: 0.2,
        ..common::small_config(30, 2, Position::Rope)
    };
    let (model, opt) = model_and_optimiser(&cfg);
    let step = |threads: usize| {
        let shards = Shards::new(threads, (rows, 16)).unwrap();
        assert_eq!(shards.threads(), threads);
        loss_and_gradients_of(rows, &model, &opt, &shards)
    };
    let (one_loss, one) = step(1);
    for &threads in threads {
        let (loss, grads) = step(threads);
        let case = format!("{rows} sequences on {threads} threads");
        assert_eq!(loss.to_bits(), one_loss.to_bits(), "loss: {case}");
        assert!(grads.values() == one.values(), "gradients: {case}");
    }
    model
}

#[test]
fn a_step_gives_the_same_bits_on_any_number_of_threads() {
    // Three units: on 4 threads, one of them gets a pool of two.
    let model = assert_same_step_on(ROWS, &[2, 3, 4]);
    let (x, y) = batch(ROWS);
    let eval = |threads: usize| {
        Shards::new(threads, (ROWS, 16))
            .unwrap()
            .loss(&model, &x, &y)
            .unwrap()
    };
    assert_eq!(
        eval(1).to_bits(),
        eval(3).to_bits(),
        "evaluation on 3 threads"
    );
}

#[test]
fn a_unit_split_over_several_threads_gives_the_same_bits() {
    // One unit (16 sequences of 16): on 2 and 3 threads it gets a pool of them, over which its
    // ops split their rows and the output layer its products and its rows of the loss.
    assert_same_step_on(UNIT_ROWS / 16, &[2, 3]);
}
