//! The hand-written training step gives autograd's loss and gradients for every positional
//! scheme, and steps aside for dropout.

mod common;

use candle_core::{Device, Tensor};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use shige::config::{ModelConfig, Position};
use shige::model::{Gpt, Mode};
use shige::train::backprop;
use shige::train::optim::{AdamW, AdamWParams};

const PARAMS: AdamWParams = AdamWParams {
    beta1: 0.9,
    beta2: 0.95,
    eps: 1e-8,
    weight_decay: 0.1,
};

/// 3 sequences of 16 tokens and the next tokens, over a vocabulary of 30.
fn batch() -> (Tensor, Tensor) {
    let ids: Vec<u32> = (0..3 * 17).map(|i| (i * 7 % 29) as u32).collect();
    let all = Tensor::from_vec(ids, (3, 17), &Device::Cpu).unwrap();
    (
        all.narrow(1, 0, 16).unwrap().contiguous().unwrap(),
        all.narrow(1, 1, 16).unwrap().contiguous().unwrap(),
    )
}

#[test]
fn hand_written_step_matches_autograd() {
    let variants = [
        (Position::Learned, true, false, 4),
        (Position::Learned, false, true, 2),
        (Position::Sinusoidal, true, true, 1),
        (Position::None, false, false, 4),
        (Position::Rope, true, false, 4),
        (Position::Rope, false, true, 1),
        (Position::Alibi, true, false, 4),
        (Position::Alibi, false, true, 2),
    ];
    for (position, bias, tie_weights, n_head) in variants {
        let cfg = ModelConfig {
            bias,
            tie_weights,
            n_head,
            dropout: 0.0,
            ..common::small_config(30, 2, position)
        };
        let (model, varmap) = Gpt::seeded(&cfg, 5, &Device::Cpu).unwrap();
        let opt = AdamW::new(varmap.data().lock().unwrap().clone(), PARAMS).unwrap();
        let (x, y) = batch();
        assert!(backprop::supports(&model));

        let (loss, grads) = backprop::loss_and_gradients(&model, &x, &y).unwrap();
        let grads = opt.gradients_from(grads);
        let reference = model
            .loss(&x, &y, &mut Mode::Train(&mut ChaCha8Rng::seed_from_u64(0)))
            .unwrap();
        let expected = opt.gradients(&reference.backward().unwrap()).unwrap();
        let expected_loss = reference.to_scalar::<f32>().unwrap() as f64;

        let case = format!("{position:?}, bias {bias}, tied {tie_weights}, {n_head} heads");
        common::assert_same_loss_and_gradients(&case, (loss, &grads), (expected_loss, &expected));
    }
}

#[test]
fn other_models_are_left_to_autograd() {
    let left_out = [Position::Learned, Position::Rope].map(|position| ModelConfig {
        dropout: 0.1,
        ..common::small_config(30, 1, position)
    });
    for cfg in left_out {
        let (model, _) = Gpt::seeded(&cfg, 5, &Device::Cpu).unwrap();
        assert!(!backprop::supports(&model), "{cfg:?}");
        let (x, y) = batch();
        let err = backprop::loss_and_gradients(&model, &x, &y).unwrap_err();
        assert!(err.to_string().contains("autograd"), "{err}");
    }
}

#[test]
fn token_ids_outside_the_vocabulary_are_an_error() {
    let cfg = ModelConfig {
        dropout: 0.0,
        ..common::small_config(30, 1, Position::Learned)
    };
    let (model, _) = Gpt::seeded(&cfg, 5, &Device::Cpu).unwrap();
    let (x, _) = batch();
    let bad = Tensor::from_vec(vec![30u32; 48], (3, 16), &Device::Cpu).unwrap();
    let err = backprop::loss_and_gradients(&model, &x, &bad).unwrap_err();
    assert!(err.to_string().contains("outside the vocabulary"), "{err}");
}
