//! AdamW, the learning-rate schedules, gradient clipping and Muon against PyTorch: the expected
//! values were computed once by `python bench/optim_reference.py` (torch.optim.AdamW with weight
//! decay on the matrix only, SequentialLR(LinearLR, CosineAnnealingLR), clip_grad_norm_ with
//! max_norm 1, in float64, for nanoGPT's β2 and the default config's; then Muon written out from
//! its published description beside AdamW, on a LambdaLR of warm-up, stable and decay), and are
//! written here.

use candle_core::{Device, Tensor, Var};
use shige::train::muon::{orthogonalise, MuonParams};
use shige::train::optim::{clip_scale, AdamWParams, Optimizer, Rates};
use shige::train::schedule::{learning_rate, wsd_learning_rate};
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
    let mut opt = Optimizer::new(vars, params, None).unwrap();
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
        let lr = Rates {
            adamw: lr,
            muon: 0.0,
        };
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

/// PyTorch's (Muon, AdamW) learning rates of the six steps: warm-up 2, decay over the last 3.
const WSD_LRS: [(f64, f64); 6] = [
    (0.01, 0.005),
    (0.02, 0.01),
    (0.02, 0.01),
    (0.02, 0.01),
    (0.013999999999999999, 0.006999999999999999),
    (0.008, 0.004),
];
const MUON_TALL: [f64; 12] = [
    0.45825905092396874,
    -0.1698273076779079,
    0.9476198492329356,
    0.030126409799671485,
    1.986786190880404,
    -1.4687071028387395,
    0.3024709014360439,
    0.05984378892343391,
    -0.7928282242043019,
    1.0722483962968843,
    -0.3919490819646136,
    0.17133089176326438,
];
const MUON_WIDE: [f64; 6] = [
    0.17528143464564727,
    -0.9307583090662622,
    0.5594584309515961,
    0.8389623806460098,
    0.35286069353370436,
    -0.27637655451672327,
];
const MUON_BIAS: [f64; 3] = [
    0.13240823421161535,
    -0.23240823825755808,
    0.2675917612366991,
];
/// PyTorch's five Newton–Schulz steps of a 3 × 4 matrix (see `orthogonalisation_follows_pytorch`).
const NEWTON_SCHULZ_3X4: [f64; 12] = [
    0.15749561294133696,
    0.6366690542796636,
    0.17974495911869848,
    -0.39748819304496974,
    0.09070641301955518,
    -0.19297523568596567,
    0.9213749703256489,
    0.5014014629263046,
    0.7895298105571016,
    -0.15939361299263782,
    -0.42437573336393875,
    0.4214245959096077,
];

#[test]
fn orthogonalisation_follows_pytorch_both_ways_round() {
    let g = [
        1.0f32, 2.0, 0.5, -1.0, 0.25, -0.5, 3.0, 1.5, 2.0, 0.0, -1.0, 0.75,
    ]; // (3, 4)
    assert_close("3 × 4", &orthogonalise(&g, 3, 4), &NEWTON_SCHULZ_3X4);
    // The transpose (4, 3) goes through the wide orientation and back: the transposed result.
    let gt: Vec<f32> = (0..12).map(|i| g[(i % 3) * 4 + i / 3]).collect();
    let expected: Vec<f64> = (0..12)
        .map(|i| NEWTON_SCHULZ_3X4[(i % 3) * 4 + i / 3])
        .collect();
    assert_close("4 × 3", &orthogonalise(&gt, 4, 3), &expected);
}

/// Six steps of Muon (two block matrices, one tall and one wide) beside AdamW (a norm's bias,
/// no decay) on the WSD schedule with clipping, checked against PyTorch.
#[test]
fn muon_beside_adamw_on_the_wsd_schedule_follows_pytorch() {
    let dev = Device::Cpu;
    let tall_init = [
        [0.5f32, -0.25, 1.0],
        [0.125, 2.0, -1.5],
        [0.3, 0.1, -0.7],
        [1.1, -0.4, 0.2],
    ];
    let tall = Var::new(&tall_init, &dev).unwrap();
    let wide = Var::new(&[[0.2f32, -1.0, 0.6], [0.9, 0.4, -0.3]], &dev).unwrap();
    let bias = Var::new(&[0.1f32, -0.2, 0.3], &dev).unwrap();
    let vars = HashMap::from([
        (
            "transformer.h.0.attn.c_attn.weight".to_string(),
            tall.clone(),
        ),
        ("transformer.h.0.mlp.c_fc.weight".to_string(), wide.clone()),
        ("transformer.h.0.ln_1.bias".to_string(), bias.clone()),
    ]);
    let adamw = AdamWParams {
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.0,
    };
    let muon = MuonParams { momentum: 0.95 };
    let mut opt = Optimizer::new(vars, adamw, Some(muon)).unwrap();
    for (step, &(muon_lr, adamw_lr)) in WSD_LRS.iter().enumerate() {
        let k = (step + 1) as f64;
        let a = [
            [1.0f32, -2.0, 0.5],
            [3.0, 0.25, -1.0],
            [-0.5, 1.5, 2.0],
            [0.7, -0.1, 0.4],
        ];
        let a = (Tensor::new(&a, &dev).unwrap() * k).unwrap();
        let b = (Tensor::new(&[[0.3f32, 1.2, -0.8], [-1.1, 0.6, 0.2]], &dev).unwrap() / k).unwrap();
        let c = (Tensor::new(&[-0.5f32, 1.5, 2.0], &dev).unwrap() / k).unwrap();
        let w = wide.as_tensor();
        let loss = ((tall.as_tensor() * &a).unwrap().sum_all().unwrap()
            + (w * &b).unwrap().sum_all().unwrap()
            + ((w * w).unwrap().sum_all().unwrap() * k).unwrap()
            + (bias.as_tensor() * &c).unwrap().sum_all().unwrap())
        .unwrap();
        let grads = opt.gradients(&loss.backward().unwrap()).unwrap();
        let lr = Rates {
            muon: wsd_learning_rate(step, 0.02, WARMUP, MAX_ITERS, 0.5),
            adamw: wsd_learning_rate(step, 0.01, WARMUP, MAX_ITERS, 0.5),
        };
        assert!(
            (lr.muon - muon_lr).abs() < 1e-12 && (lr.adamw - adamw_lr).abs() < 1e-12,
            "step {step}: {lr:?}"
        );
        opt.step(&grads, lr, clip_scale(grads.norm(), 1.0)).unwrap();
    }
    assert_close("tall", &values(tall.as_tensor()), &MUON_TALL);
    assert_close("wide", &values(wide.as_tensor()), &MUON_WIDE);
    assert_close("bias", &values(bias.as_tensor()), &MUON_BIAS);
}
