//! AdamW, the learning-rate schedule and gradient clipping against PyTorch: the expected values
//! were computed once by `python bench/optim_reference.py` (torch.optim.AdamW with weight decay on
//! the matrix only, SequentialLR(LinearLR, CosineAnnealingLR), clip_grad_norm_ with max_norm 1, in
//! float64), for nanoGPT's β2 and the default config's, and are written here.

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
/// PyTorch's weights after the six steps, for one β2.
struct Expected {
    beta2: f64,
    w: [f64; 6],
    b: [f64; 3],
}

/// nanoGPT's β2.
const BETA2_095: Expected = Expected {
    beta2: 0.95,
    w: [
        0.45648783207137245,
        -0.2075235998699537,
        0.9544162964742099,
        0.08304148391421409,
        1.9502732252798842,
        -1.4523447573977737,
    ],
    b: [
        0.13141767692899423,
        -0.23141768011770655,
        0.26858231948370426,
    ],
};

/// The default config's β2: after six steps its bias correction (1 − 0.999⁶) is still large. The
/// weights differ from β2 0.95's by about 1e-4, five times the tolerance of `assert_close`.
const BETA2_0999: Expected = Expected {
    beta2: 0.999,
    w: [
        0.4563880077064157,
        -0.2074237755008804,
        0.9543164721174862,
        0.0829416595437686,
        1.9501734009396265,
        -1.4522449330328167,
    ],
    b: [0.13072982092928506, -0.230729823955549, 0.26927017566616795],
};

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

/// Six steps of AdamW with the schedule and clipping on a linear loss, checked against PyTorch.
fn follows_pytorch(expected: &Expected) {
    let dev = Device::Cpu;
    let w = Var::new(&[[0.5f32, -0.25, 1.0], [0.125, 2.0, -1.5]], &dev).unwrap();
    let b = Var::new(&[0.1f32, -0.2, 0.3], &dev).unwrap();
    let vars = HashMap::from([("w".to_string(), w.clone()), ("b".to_string(), b.clone())]);
    let params = AdamWParams {
        beta1: 0.9,
        beta2: expected.beta2,
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
    assert_close("w", &values(w.as_tensor()), &expected.w);
    assert_close("b", &values(b.as_tensor()), &expected.b);
}

#[test]
fn adamw_schedule_and_clipping_follow_pytorch() {
    follows_pytorch(&BETA2_095);
}

#[test]
fn adamw_with_the_default_beta2_follows_pytorch() {
    follows_pytorch(&BETA2_0999);
}
