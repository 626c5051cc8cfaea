//! AdamW, the learning-rate schedule and gradient clipping against PyTorch: the expected values
//! were computed once by `python bench/optim_reference.py` (torch.optim.AdamW with weight decay on
//! the matrix only, SequentialLR(LinearLR, CosineAnnealingLR), clip_grad_norm_ with max_norm 1, in
//! float64) and are written here.

use candle_core::{Device, Tensor, Var};
use shige::train::optim::{clip_scale, AdamW, AdamWParams};
use shige::train::schedule::learning_rate;
use std::collections::HashMap;

const PEAK: f64 = 0.01;
const WARMUP: usize = 2;
const MAX_ITERS: usize = 6;

/// PyTorch's learning rate at each step.
const LRS: [f64; 6] = [
    0.005,
    0.01,
    0.010000000000000002,
    0.008681980515339464,
    0.0055000000000000005,
    0.0023180194846605367,
];
/// PyTorch's gradient norm before clipping at each step.
const NORMS: [f64; 6] = [
    4.670385423067351,
    7.929375763576854,
    11.770077409355565,
    15.665447647609692,
    19.572237991604332,
    23.48255853938313,
];
/// The weights after the six steps.
const W: [f64; 6] = [
    0.45648783207137245,
    -0.2075235998699537,
    0.9544162964742099,
    0.08304148391421409,
    1.9502732252798842,
    -1.4523447573977737,
];
const B: [f64; 3] = [
    0.13141767692899423,
    -0.23141768011770655,
    0.26858231948370426,
];

fn values(t: &Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1().unwrap()
}

/// Asserts that `got` equals `expected` within 1e-5 of the largest expected magnitude.
fn assert_close(what: &str, got: &[f32], expected: &[f64]) {
    let scale = expected.iter().fold(0f64, |m, x| m.max(x.abs()));
    for (g, e) in got.iter().zip(expected) {
        assert!(
            (*g as f64 - e).abs() < 1e-5 * scale,
            "{what}: {got:?} vs {expected:?}"
        );
    }
}

#[test]
fn adamw_schedule_and_clipping_follow_pytorch() {
    let dev = Device::Cpu;
    let w = Var::new(&[[0.5f32, -0.25, 1.0], [0.125, 2.0, -1.5]], &dev).unwrap();
    let b = Var::new(&[0.1f32, -0.2, 0.3], &dev).unwrap();
    let vars = HashMap::from([("w".to_string(), w.clone()), ("b".to_string(), b.clone())]);
    let params = AdamWParams {
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-8,
        weight_decay: 0.1,
    };
    let mut opt = AdamW::new(vars, params).unwrap();
    for step in 0..MAX_ITERS {
        let k = (step + 1) as f64;
        let a =
            (Tensor::new(&[[1.0f32, -2.0, 0.5], [3.0, 0.25, -1.0]], &dev).unwrap() * k).unwrap();
        let c = (Tensor::new(&[-0.5f32, 1.5, 2.0], &dev).unwrap() / k).unwrap();
        let loss = ((w.as_tensor() * &a).unwrap().sum_all().unwrap()
            + (b.as_tensor() * &c).unwrap().sum_all().unwrap())
        .unwrap();
        let grads = opt.gradients(&loss.backward().unwrap()).unwrap();
        let lr = learning_rate(step, PEAK, WARMUP, MAX_ITERS);
        assert!(
            (lr - LRS[step]).abs() < 1e-12,
            "step {step}: lr {lr} vs {}",
            LRS[step]
        );
        let norm = grads.norm();
        assert!(
            (norm - NORMS[step]).abs() < 1e-6 * NORMS[step],
            "step {step}: norm {norm}"
        );
        opt.step(&grads, lr, clip_scale(norm, 1.0)).unwrap();
    }
    assert_close("w", &values(w.as_tensor()), &W);
    assert_close("b", &values(b.as_tensor()), &B);
}
