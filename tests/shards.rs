//! Data-parallel steps: a batch split into shards gives the whole batch's loss and gradients.

mod common;

use candle_core::{Device, Tensor};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use shige::config::{ModelConfig, Position};
use shige::model::Gpt;
use shige::ops::Precision;
use shige::train::optim::{AdamWParams, Gradients, Optimizer};
use shige::train::shards::Shards;

const PARAMS: AdamWParams = AdamWParams {
    beta1: 0.9,
    beta2: 0.95,
    eps: 1e-8,
    weight_decay: 0.1,
};

/// A batch of `rows` sequences of 16 tokens and the next tokens, over a vocabulary of 30.
fn batch(rows: usize) -> (Tensor, Tensor) {
    let ids: Vec<u32> = (0..rows * 17).map(|i| (i * 11 % 29) as u32).collect();
    let all = Tensor::from_vec(ids, (rows, 17), &Device::Cpu).unwrap();
    (
        all.narrow(1, 0, 16).unwrap().contiguous().unwrap(),
        all.narrow(1, 1, 16).unwrap().contiguous().unwrap(),
    )
}

fn loss_and_gradients(
    model: &Gpt,
    opt: &Optimizer,
    shards: usize,
    rows: usize,
) -> (f64, Gradients) {
    let (x, y) = batch(rows);
    Shards::new(shards)
        .unwrap()
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
    let opt = Optimizer::new(varmap.data().lock().unwrap().clone(), PARAMS, None).unwrap();
    (model, opt)
}

#[test]
fn shards_give_the_whole_batch_loss_and_gradients() {
    // Positions inside attention (RoPE, ALiBi) and added to the embedding (learned).
    for position in [Position::Rope, Position::Alibi, Position::Learned] {
        let cfg = ModelConfig {
            dropout: 0.0,
            ..common::small_config(30, 2, position)
        };
        shards_match_the_whole_batch(&cfg);
    }
}

fn shards_match_the_whole_batch(cfg: &ModelConfig) {
    let (model, opt) = model_and_optimiser(cfg);
    // 5 sequences: shards of 3 + 2, and of 2 + 2 + 1, weighted by their sizes.
    let (whole_loss, whole) = loss_and_gradients(&model, &opt, 1, 5);
    for shards in [2, 3, 8] {
        let (loss, grads) = loss_and_gradients(&model, &opt, shards, 5);
        let case = format!("{shards} shards");
        common::assert_same_loss_and_gradients(&case, (loss, &grads), (whole_loss, &whole));
        let (x, y) = batch(5);
        let eval = Shards::new(shards).unwrap().loss(&model, &x, &y).unwrap();
        let whole_eval = Shards::new(1).unwrap().loss(&model, &x, &y).unwrap();
        assert!((eval - whole_eval).abs() < 1e-5 * whole_eval);
    }
}

#[test]
fn sharded_steps_with_dropout_repeat_exactly() {
    let cfg = ModelConfig {
        dropout: 0.2,
        ..common::small_config(30, 1, Position::Learned)
    };
    let (model, opt) = model_and_optimiser(&cfg);
    let (loss_a, a) = loss_and_gradients(&model, &opt, 2, 4);
    let (loss_b, b) = loss_and_gradients(&model, &opt, 2, 4);
    assert_eq!(loss_a, loss_b);
    assert_eq!(a.values(), b.values());
}
