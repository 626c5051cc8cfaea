//! Every fused CPU op against its composite reference (values), and the engine's backward kernels
//! against autograd through the reference (gradients).

use candle_core::{Device, Tensor, Var};
use rand::{Rng, SeedableRng};
use shige::ops::{activation, gelu, layer_norm, linear, qk_norm, relu2, softmax, Precision};

fn random(shape: &[usize], scale: f32, seed: u64) -> Var {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let n: usize = shape.iter().product();
    let values: Vec<f32> = (0..n)
        .map(|_| (rng.random::<f32>() * 2.0 - 1.0) * scale)
        .collect();
    Var::from_tensor(&Tensor::from_vec(values, shape, &Device::Cpu).unwrap()).unwrap()
}

/// max |a − b| / max(|b|, 1e-3): relative to the reference's scale.
fn rel_diff(a: &Tensor, b: &Tensor) -> f32 {
    let diff: f32 = (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar()
        .unwrap();
    let scale: f32 = b
        .abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar()
        .unwrap();
    diff / scale.max(1e-3)
}

/// The values of a tensor, flattened.
fn values(x: &Tensor) -> Vec<f32> {
    x.flatten_all().unwrap().to_vec1().unwrap()
}

/// The kernels' gradients of each input, given the output's gradient (flattened).
type KernelGrads<'a> = &'a dyn Fn(&[f32]) -> Vec<Vec<f32>>;

/// Compares the fused op's output with the reference's and, when given, the kernels' backward
/// pass with autograd through the reference, input by input, under a random upstream gradient.
fn check(
    name: &str,
    inputs: &[&Var],
    fused: Tensor,
    reference: Tensor,
    kernel_grads: Option<KernelGrads>,
) {
    assert_eq!(fused.dims(), reference.dims(), "{name}: shapes");
    let d = rel_diff(&fused, &reference);
    assert!(d < 1e-4, "{name}: values differ by {d}");
    let Some(kernel_grads) = kernel_grads else {
        return;
    };
    let upstream = random(reference.dims(), 1.0, 99);
    let expected = (reference * upstream.as_tensor())
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    let grads = kernel_grads(&values(&upstream));
    assert_eq!(grads.len(), inputs.len(), "{name}: one gradient per input");
    for (i, (x, grad)) in inputs.iter().zip(grads).enumerate() {
        let reference = expected.get(x.as_tensor()).expect("reference gradient");
        let grad = Tensor::from_vec(grad, reference.shape(), &Device::Cpu).unwrap();
        let d = rel_diff(&grad, reference);
        assert!(d < 1e-4, "{name}: gradient of input {i} differs by {d}");
    }
}

#[test]
fn fused_causal_softmax_matches_the_reference() {
    for (shape, causal) in [
        (vec![2, 3, 7, 7], true),
        (vec![2, 3, 3, 7], true),
        (vec![4, 9], false),
    ] {
        let x = random(&shape, 3.0, 1);
        // Its backward pass is part of attention's (below).
        check(
            &format!("softmax {shape:?} causal={causal}"),
            &[&x],
            softmax::softmax(&x, causal).unwrap(),
            softmax::softmax_reference(&x, causal).unwrap(),
            None,
        );
    }
}

/// QK-norm on a fused projection's rows (2 rows, 3 heads of 8): the engine's forward and
/// backward against the composite reference through autograd, on q and k; v untouched.
#[test]
fn qk_norm_matches_the_reference() {
    let (rows, heads, d) = (2, 3, 8);
    let c = heads * d;
    let x = random(&[rows, 3 * c], 2.0, 5);
    let (q, k) = (
        x.as_tensor().narrow(1, 0, c).unwrap(),
        x.as_tensor().narrow(1, c, c).unwrap(),
    );
    let by_head = |t: &Tensor| t.reshape((rows, heads, d)).unwrap();
    let reference = Tensor::cat(
        &[
            qk_norm::reference(&by_head(&q))
                .unwrap()
                .reshape((rows, c))
                .unwrap(),
            qk_norm::reference(&by_head(&k))
                .unwrap()
                .reshape((rows, c))
                .unwrap(),
            x.as_tensor().narrow(1, 2 * c, c).unwrap(),
        ],
        1,
    )
    .unwrap();
    let xs = values(&x);
    let mut normalized = xs.clone();
    let rms = qk_norm::forward_qkv(&mut normalized, c, d);
    let fused = Tensor::from_vec(normalized.clone(), (rows, 3 * c), &Device::Cpu).unwrap();
    check(
        "qk_norm",
        &[&x],
        fused,
        reference,
        Some(&|dy| {
            let mut dx = dy.to_vec();
            qk_norm::backward_qkv(&mut dx, &normalized, &rms, c, d);
            vec![dx]
        }),
    );
    // Each head has unit RMS, against the formula.
    for head in normalized.chunks(d).take(2 * heads) {
        let ms = head.iter().map(|v| v * v).sum::<f32>() / d as f32;
        assert!((ms - 1.0).abs() < 1e-4, "{ms}");
    }
}

#[test]
fn fused_relu2_matches_the_reference() {
    let x = random(&[3, 5, 40], 4.0, 3);
    let xs = values(&x);
    check(
        "relu2",
        &[&x],
        relu2::relu2(&x).unwrap(),
        relu2::relu2_reference(&x).unwrap(),
        Some(&|dy| {
            let mut slope = xs.clone();
            relu2::forward_keeping_slope(&mut slope);
            let mut dx = dy.to_vec();
            activation::backward_in_place(&slope, &mut dx);
            vec![dx]
        }),
    );
    let mut slope = xs.clone();
    assert_eq!(
        relu2::forward_keeping_slope(&mut slope),
        values(&relu2::relu2(&x).unwrap())
    );
    // Against the formula: 0 below zero, x² above.
    assert_eq!(relu2::relu2_value(-1.5), 0.0);
    assert_eq!(relu2::relu2_value(3.0), 9.0);
}

#[test]
fn fused_gelu_matches_the_reference() {
    let x = random(&[3, 5, 40], 4.0, 2);
    let xs = values(&x);
    check(
        "gelu",
        &[&x],
        gelu::gelu(&x).unwrap(),
        gelu::gelu_reference(&x).unwrap(),
        Some(&|dy| {
            let mut slope = xs.clone();
            gelu::forward_keeping_slope(&mut slope);
            let mut dx = dy.to_vec();
            activation::backward_in_place(&slope, &mut dx);
            vec![dx]
        }),
    );
    // The engine's forward gives the fused op's values to the bit.
    let mut slope = xs.clone();
    assert_eq!(
        gelu::forward_keeping_slope(&mut slope),
        values(&gelu::gelu(&x).unwrap())
    );
}

#[test]
fn fused_layer_norm_matches_the_reference() {
    let x = random(&[3, 70, 24], 2.0, 3);
    let w = random(&[24], 1.0, 4);
    let b = random(&[24], 1.0, 5);
    let (xs, ws) = (values(&x), values(&w));
    check(
        "layer_norm",
        &[&x, &w, &b],
        layer_norm::layer_norm(&x, &w, &b, 1e-5).unwrap(),
        layer_norm::layer_norm_reference(&x, &w, &b, 1e-5).unwrap(),
        Some(&|dy| {
            let mut dx = vec![0f32; xs.len()];
            let (dw, db) = layer_norm::backward_into(&xs, &ws, dy, 1e-5, &mut dx, false);
            vec![dx, dw, db]
        }),
    );
}

/// The Linear kernels' gradients (dx, dW and, with a bias, db) for x (.., in) and W (out, in).
fn linear_grads(x: &Var, w: &Var, with_bias: bool) -> impl Fn(&[f32]) -> Vec<Vec<f32>> {
    let (xs, ws, n_out) = (values(x), values(w), w.dim(0).unwrap());
    move |dy| {
        let (mut dx, mut dw, mut db) = (
            vec![0f32; xs.len()],
            vec![0f32; ws.len()],
            vec![0f32; n_out],
        );
        let bias = with_bias.then_some(&mut db[..]);
        linear::backward_into(
            (&xs, &ws, dy),
            n_out,
            &mut dx,
            &mut dw,
            bias,
            Precision::F32,
        );
        if with_bias {
            vec![dx, dw, db]
        } else {
            vec![dx, dw]
        }
    }
}

#[test]
fn fused_linear_matches_the_reference() {
    let x = random(&[3, 11, 24], 1.0, 7);
    let w = random(&[40, 24], 0.5, 8);
    let b = random(&[40], 0.5, 9);
    check(
        "linear+bias",
        &[&x, &w, &b],
        linear::linear(&x, &w, Some(&b)).unwrap(),
        linear::linear_reference(&x, &w, Some(&b)).unwrap(),
        Some(&linear_grads(&x, &w, true)),
    );
    check(
        "linear",
        &[&x, &w],
        linear::linear(&x, &w, None).unwrap(),
        linear::linear_reference(&x, &w, None).unwrap(),
        Some(&linear_grads(&x, &w, false)),
    );
    // A few rows (one token while generating) take the dot-product path; lengths that are not
    // multiples of the vector width or of four outputs exercise its tails.
    for rows in [1, 3] {
        let x = random(&[1, rows, 37], 1.0, 20 + rows as u64);
        let w = random(&[4099, 37], 0.5, 21);
        let b = random(&[4099], 0.5, 22);
        check(
            &format!("linear+bias, {rows} rows"),
            &[&x, &w, &b],
            linear::linear(&x, &w, Some(&b)).unwrap(),
            linear::linear_reference(&x, &w, Some(&b)).unwrap(),
            Some(&linear_grads(&x, &w, true)),
        );
    }
}

#[test]
fn fused_output_layer_and_loss_match_the_reference() {
    use shige::ops::lm_head_loss::{
        lm_head_cross_entropy, lm_head_cross_entropy_reference, loss_and_gradients,
    };
    // 1,100 rows: five chunks of 256, the last one partial, split between threads.
    let x = random(&[1100, 24], 1.0, 10);
    let w = random(&[53, 24], 0.5, 11);
    let targets = Tensor::from_vec(
        (0..1100u32).map(|i| i * 17 % 53).collect::<Vec<_>>(),
        1100,
        &Device::Cpu,
    )
    .unwrap();
    let (xs, ws, ids) = (values(&x), values(&w), targets.to_vec1::<u32>().unwrap());
    check(
        "lm_head + cross-entropy",
        &[&x, &w],
        lm_head_cross_entropy(&x, &w, &targets).unwrap(),
        lm_head_cross_entropy_reference(&x, &w, &targets).unwrap(),
        Some(&|upstream| {
            let (_, grads) = loss_and_gradients(&xs, &ws, &ids, 24, true, Precision::F32);
            let (dx, dw) = grads.expect("gradients");
            let scaled = |g: Vec<f32>| g.into_iter().map(|v| v * upstream[0]).collect();
            vec![scaled(dx), scaled(dw)]
        }),
    );
    let bad = Tensor::new(&[60u32; 1100], &Device::Cpu).unwrap();
    let err = lm_head_cross_entropy(&x, &w, &bad).unwrap_err().to_string();
    assert!(err.contains("outside the vocabulary"), "{err}");
}

/// max |a − b| / max |b|: a difference relative to the whole reference's scale.
fn scaled_diff(a: &[f32], b: &[f32]) -> f32 {
    let diff = a
        .iter()
        .zip(b)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    diff / b.iter().map(|b| b.abs()).fold(0f32, f32::max)
}

#[test]
fn output_layer_in_bf16_follows_f32() {
    use shige::ops::lm_head_loss::loss_and_gradients;
    // 300 rows: a group of 256 (four chunks of 64, their dW in one product) and a partial one of
    // 44; a vocabulary of 500 (16 blocks, one partial).
    let (xs, ws) = (
        values(&random(&[300, 40], 1.0, 12)),
        values(&random(&[500, 40], 0.5, 13)),
    );
    let ids: Vec<u32> = (0..300u32).map(|i| i * 37 % 500).collect();
    let (loss, grads) = loss_and_gradients(&xs, &ws, &ids, 40, true, Precision::F32);
    let (loss_bf16, grads_bf16) = loss_and_gradients(&xs, &ws, &ids, 40, true, Precision::Bf16);
    // Again after a product on other values: the packed operands reuse those buffers, so a
    // value the packing failed to write would show here.
    let other = values(&random(&[300, 40], 1.0, 17));
    let _ = loss_and_gradients(&other, &ws, &ids, 40, true, Precision::Bf16);
    let again = loss_and_gradients(&xs, &ws, &ids, 40, true, Precision::Bf16);
    assert!(
        again == (loss_bf16, grads_bf16.clone()),
        "bf16 results depend on reused buffers"
    );
    let ((dx, dw), (dx_bf16, dw_bf16)) = (grads.unwrap(), grads_bf16.unwrap());
    // bf16 keeps 8 bits of mantissa (relative rounding 2⁻⁹ ≈ 0.002); the sums are f32.
    assert!(
        (loss_bf16 - loss).abs() < 1e-2 * loss,
        "loss {loss_bf16} vs {loss}"
    );
    for (name, got, want) in [("dx", &dx_bf16, &dx), ("dW", &dw_bf16, &dw)] {
        let d = scaled_diff(got, want);
        assert!(
            d < 1e-2,
            "{name} in bf16 differs from f32 by {d} of its scale"
        );
        assert!(
            d > 0.0,
            "{name}: bf16 gave f32's values exactly: it did not round"
        );
    }
}

#[test]
fn output_layer_in_bf16_keeps_the_gradient_of_confident_rows() {
    use shige::ops::lm_head_loss::loss_and_gradients;
    // Each row of x points along its target's row of W, its logit 18 above the others' zero mean:
    // p(target) ≈ 0.9996, so that a row's gradient, (p − 1)·W[target] + Σ p·W[other], is under
    // a thousandth of W's scale. With the one-hot term subtracted apart from the rounded product,
    // the rounding of p·W[target] (up to 2⁻⁹ of W) stayed in every row's dx: 8.6 times the
    // gradient's scale. Folded into the row before rounding: within 2.2 % (dx), 2.7 % (dW).
    let (rows, c) = (128, 40);
    let ws = values(&random(&[500, c], 0.5, 18));
    let ids: Vec<u32> = (0..rows as u32).map(|i| i * 37 % 500).collect();
    let xs: Vec<f32> = ids
        .iter()
        .flat_map(|&t| {
            let w_t = &ws[t as usize * c..][..c];
            let norm2: f32 = w_t.iter().map(|w| w * w).sum();
            w_t.iter().map(move |w| w * 18.0 / norm2)
        })
        .collect();
    let (_, grads) = loss_and_gradients(&xs, &ws, &ids, c, true, Precision::F32);
    let (_, grads_bf16) = loss_and_gradients(&xs, &ws, &ids, c, true, Precision::Bf16);
    let ((dx, dw), (dx_bf16, dw_bf16)) = (grads.unwrap(), grads_bf16.unwrap());
    for (i, &t) in ids.iter().enumerate() {
        let t = t as usize;
        let cases = [
            ("dx", &dx_bf16[i * c..][..c], &dx[i * c..][..c]),
            ("dW[target]", &dw_bf16[t * c..][..c], &dw[t * c..][..c]),
        ];
        for (name, got, want) in cases {
            let d = scaled_diff(got, want);
            assert!(
                d < 5e-2,
                "row {i}: {name} in bf16 differs from f32 by {d} of its own scale"
            );
        }
    }
}

#[test]
fn linear_in_bf16_follows_f32() {
    // A widening layer (its weight gradient computed turned, xᵀ·dy) and a narrowing one; 150 rows
    // (blocks of 32, one partial), with a bias.
    for (n_in, n_out) in [(40, 100), (100, 40)] {
        let xs = values(&random(&[150, n_in], 1.0, 14));
        let (ws, dy) = (
            values(&random(&[n_out, n_in], 0.3, 15)),
            values(&random(&[150, n_out], 1.0, 16)),
        );
        let grads = |precision| {
            let (mut dx, mut dw, mut db) = (
                vec![0f32; xs.len()],
                vec![0f32; ws.len()],
                vec![0f32; n_out],
            );
            linear::backward_into(
                (&xs, &ws, &dy),
                n_out,
                &mut dx,
                &mut dw,
                Some(&mut db),
                precision,
            );
            [dx, dw, db]
        };
        let (full, mixed) = (grads(Precision::F32), grads(Precision::Bf16));
        for ((name, got), want) in ["dx", "dW", "db"].iter().zip(&mixed).zip(&full) {
            let d = scaled_diff(got, want);
            assert!(
                d < 1e-2,
                "{n_in}→{n_out}: {name} in bf16 differs from f32 by {d} of its scale"
            );
            if *name != "db" {
                assert!(
                    d > 0.0,
                    "{n_in}→{n_out}: {name} in bf16 gave f32's values exactly"
                );
            }
        }
    }
}

#[test]
fn fused_causal_attention_matches_the_reference() {
    use shige::ops::attention::{causal_attention, causal_attention_reference};
    let (q, k, v) = (
        random(&[2, 3, 75, 8], 1.5, 12),
        random(&[2, 3, 75, 8], 1.5, 13),
        random(&[2, 3, 75, 8], 1.0, 14),
    ); // 75 positions and head size 8: a partial last row tile (6 rows) and column tile (16
       // columns) in every product. Its backward pass is the engine's, on the qkv projection
       // (below).
    check(
        "causal attention",
        &[&q, &k, &v],
        causal_attention(&q, &k, &v, 0.35).unwrap(),
        causal_attention_reference(&q, &k, &v, 0.35).unwrap(),
        None,
    );
    // Fewer queries than keys, the queries being the last positions.
    for t_q in [1, 5, 40] {
        let q = random(&[2, 3, t_q, 8], 1.5, 15);
        let fused = causal_attention(&q, &k, &v, 0.35).unwrap();
        let reference = causal_attention_reference(&q, &k, &v, 0.35).unwrap();
        assert_eq!(fused.dims(), [2, 3, t_q, 8]);
        let d = rel_diff(&fused, &reference);
        assert!(
            d < 1e-4,
            "attention with {t_q} queries of 75 keys differs by {d}"
        );
    }
    // Keys and values that are views into a longer buffer: (T, D) slabs 30 positions apart.
    let (k_buf, v_buf) = (
        random(&[2, 3, 30, 8], 1.5, 16),
        random(&[2, 3, 30, 8], 1.0, 17),
    );
    let (k_view, v_view) = (
        k_buf.narrow(2, 0, 19).unwrap(),
        v_buf.narrow(2, 0, 19).unwrap(),
    );
    assert!(!k_view.is_contiguous());
    let q = random(&[2, 3, 1, 8], 1.5, 18);
    let fused = causal_attention(&q, &k_view, &v_view, 0.35).unwrap();
    let reference = causal_attention_reference(
        &q,
        &k_view.contiguous().unwrap(),
        &v_view.contiguous().unwrap(),
        0.35,
    )
    .unwrap();
    let d = rel_diff(&fused, &reference);
    assert!(d < 1e-4, "attention over views differs by {d}");
}

#[test]
fn fused_attention_on_the_qkv_projection_matches_the_reference() {
    use shige::ops::attention::{
        causal_attention_qkv, causal_attention_qkv_reference, qkv_backward, qkv_forward, Heads,
    };
    // Batch 2, 70 positions, 3 heads of 4 dims: q, k and v side by side in the last dimension.
    let qkv = random(&[2, 70, 3 * 12], 1.5, 21);
    let qkv_values = values(&qkv);
    let heads = Heads {
        n_head: 3,
        scale: 0.5,
        slopes: None,
        masks: None,
    };
    check(
        "qkv attention",
        &[&qkv],
        causal_attention_qkv(&qkv, 3, 0.5).unwrap(),
        causal_attention_qkv_reference(&qkv, 3, 0.5).unwrap(),
        Some(&|dy| {
            let (_, weights) = qkv_forward(&qkv_values, (70, 12), &heads);
            vec![qkv_backward(&qkv_values, dy, &weights, (70, 12), &heads)]
        }),
    );
    assert!(
        causal_attention_qkv(&qkv, 5, 0.5).is_err(),
        "36 is not 3 × 5 × D"
    );
}

#[test]
fn parameter_gradients_do_not_depend_on_the_thread_count() {
    // Sums over rows (LayerNorm's weight and bias, a Linear's bias) add per-chunk partial sums;
    // in a fixed order, a run repeats to the bit however the chunks were shared among threads.
    let x = random(&[4096, 64], 1.0, 31);
    let (w, b) = (random(&[64], 1.0, 32), random(&[64], 1.0, 33));
    let lw = random(&[48, 64], 0.2, 34);
    let upstream = random(&[4096, 48], 1.0, 36);
    let (xs, ws, lws, ups) = (values(&x), values(&w), values(&lw), values(&upstream));
    let gradients = |threads: usize| -> Vec<Vec<f32>> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let (mut dh, mut dx) = (vec![0f32; 4096 * 64], vec![0f32; 4096 * 64]);
            let (mut dlw, mut dlb) = (vec![0f32; 48 * 64], vec![0f32; 48]);
            let h = layer_norm::forward(&xs, &ws, &values(&b), 1e-5);
            let lb = Some(&mut dlb[..]);
            linear::backward_into((&h, &lws, &ups), 48, &mut dh, &mut dlw, lb, Precision::F32);
            let (dw, db) = layer_norm::backward_into(&xs, &ws, &dh, 1e-5, &mut dx, false);
            vec![dw, db, dlw, dlb]
        })
    };
    let one = gradients(1);
    for threads in [2, 3, 4] {
        assert!(
            one == gradients(threads),
            "gradients differ on {threads} threads"
        );
    }
}

/// The adaptive softmax's loss over x (N × C), W (V × C), the tail vector t (C) and the
/// next-token biases `bias` (each row's (token, index) pairs): the engine's kernel, and the
/// reference's (candle's ops on the full logits, to differentiate).
mod adaptive {
    use super::*;
    use shige::ops::adaptive_softmax::{log_probs, log_probs_reference, loss_and_gradients, Head};
    use shige::ops::lm_head_loss::LogitBias;

    /// The reference's mean loss: the cross-entropy of its log-probabilities with the biases
    /// added.
    pub fn reference(
        (x, w, t, b): (&Var, &Var, &Var, &Var),
        entries: &[Vec<(u32, usize)>],
        targets: &[u32],
        k: usize,
    ) -> Tensor {
        let (n, v) = (targets.len(), w.dims()[0]);
        // Each row's biases as a product: one (N·V × biases) matrix of ones times the biases.
        let mut picks = vec![0f32; n * v * b.dims()[0]];
        for (row, entries) in entries.iter().enumerate() {
            for &(token, index) in entries {
                picks[(row * v + token as usize) * b.dims()[0] + index] += 1.0;
            }
        }
        let picks = Tensor::from_vec(picks, (n * v, b.dims()[0]), &Device::Cpu).unwrap();
        let biases = picks
            .matmul(&b.as_tensor().unsqueeze(1).unwrap())
            .unwrap()
            .reshape((n, v))
            .unwrap();
        let logits = x.matmul(&w.t().unwrap()).unwrap(); // (N, V)
        let tail_logits = x.matmul(&t.as_tensor().unsqueeze(1).unwrap()).unwrap(); // (N, 1)
        let log_p = log_probs_reference(&logits, &tail_logits, k).unwrap();
        let targets = Tensor::new(targets, &Device::Cpu).unwrap();
        candle_nn::loss::cross_entropy(&(log_p + biases).unwrap(), &targets).unwrap()
    }

    pub fn kernel(
        (x, w, t, b): (&[f32], &[f32], &[f32], &[f32]),
        entries: &[Vec<(u32, usize)>],
        targets: &[u32],
        k: usize,
        precision: Precision,
    ) -> (f64, Vec<Vec<f32>>) {
        let bias = LogitBias { entries, weight: b };
        let head = Head { w, tail: t, k };
        let c = t.len();
        let (loss, grads, d_bias) =
            loss_and_gradients((x, head, Some(&bias)), targets, c, true, precision);
        let (dx, dw, dt) = grads.expect("gradients");
        let (without_grad, _, _) =
            loss_and_gradients((x, head, Some(&bias)), targets, c, false, precision);
        assert_eq!(loss.to_bits(), without_grad.to_bits(), "the loss alone");
        (loss, vec![dx, dw, dt, d_bias])
    }

    /// Log-probabilities that the decoder's row function and the reference agree on.
    pub fn row_log_probs(logits: &[f32], tail_logit: f32, k: usize) -> (Vec<f32>, Vec<f32>) {
        let mut row = logits.to_vec();
        log_probs(&mut row, tail_logit, k);
        let v = logits.len();
        let full = Tensor::from_slice(logits, (1, v), &Device::Cpu).unwrap();
        let tail = Tensor::new(&[[tail_logit]], &Device::Cpu).unwrap();
        let reference = log_probs_reference(&full, &tail, k).unwrap();
        (row, values(&reference))
    }
}

#[test]
fn the_adaptive_softmax_matches_autograd_through_its_reference() {
    // 600 rows (without biases three shares of 256, the last partial), 53 ids of which the head
    // takes 20;
    // targets in the tail at a third of the rows, or at none (the tail's pass then runs on no
    // row); three biases, on ids of the head and of the tail (a target's too), at three rows of
    // four, or at none.
    let (n, c, v, k) = (600, 24, 53, 20);
    let x = random(&[n, c], 1.0, 40);
    let w = random(&[v, c], 0.5, 41);
    let t = random(&[c], 0.5, 42);
    let b = random(&[3], 1.0, 43);
    let some: Vec<Vec<(u32, usize)>> = (0..n)
        .map(|i| match i % 4 {
            0 => vec![(3, 0), (40, 1)],
            1 => vec![(25, 2), (i as u32 * 17 % 31 + i as u32 % 3 * 11, 0)],
            2 => vec![(7, 1), (7, 2)],
            _ => vec![],
        })
        .collect();
    let none = vec![Vec::new(); n];
    let in_tail: Vec<u32> = (0..n as u32).map(|i| i * 17 % 31 + i % 3 * 11).collect();
    let in_head: Vec<u32> = (0..n as u32).map(|i| i * 7 % k as u32).collect();
    for (case, targets, entries) in [
        ("a third in the tail", &in_tail, &some),
        ("none in the tail", &in_head, &some),
        ("a third in the tail, no biases", &in_tail, &none),
    ] {
        let entries = &entries[..];
        let in_tail = targets.iter().filter(|&&t| t as usize >= k).count();
        assert!(targets.iter().all(|&t| (t as usize) < v));
        assert_eq!(in_tail == 0, case == "none in the tail");
        let targets = &targets[..];
        let inputs = (&x, &w, &t, &b);
        let reference = adaptive::reference(inputs, &entries, &targets, k);
        let kernel_inputs = (
            &values(&x)[..],
            &values(&w)[..],
            &values(&t)[..],
            &values(&b)[..],
        );
        let (loss, _) = adaptive::kernel(kernel_inputs, &entries, &targets, k, Precision::F32);
        check(
            &format!("adaptive softmax, {case}"),
            &[&x, &w, &t, &b],
            Tensor::new(loss as f32, &Device::Cpu).unwrap(),
            reference,
            Some(&|upstream| {
                let (_, grads) =
                    adaptive::kernel(kernel_inputs, &entries, &targets, k, Precision::F32);
                let scaled = |g: Vec<f32>| g.into_iter().map(|v| v * upstream[0]).collect();
                grads.into_iter().map(scaled).collect()
            }),
        );
    }
}

#[test]
fn the_adaptive_softmax_gives_the_same_bits_on_any_thread_count() {
    // Rows with biases (taking every id) and without, in the head and the tail.
    let (n, c, v, k) = (700, 16, 41, 9);
    let (x, w, t, b) = (
        values(&random(&[n, c], 1.0, 50)),
        values(&random(&[v, c], 0.5, 51)),
        values(&random(&[c], 0.5, 52)),
        values(&random(&[2], 1.0, 53)),
    );
    let entries: Vec<Vec<(u32, usize)>> = (0..n)
        .map(|i| match i % 5 {
            0 => vec![(2, 0), (30, 1)],
            _ => vec![],
        })
        .collect();
    let targets: Vec<u32> = (0..n as u32).map(|i| i * 13 % v as u32).collect();
    let on = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let inputs = (&x[..], &w[..], &t[..], &b[..]);
            adaptive::kernel(inputs, &entries, &targets, k, Precision::F32)
        })
    };
    let (loss, grads) = on(1);
    for threads in [2, 3] {
        let (other_loss, other_grads) = on(threads);
        assert_eq!(loss.to_bits(), other_loss.to_bits(), "{threads} threads");
        assert!(
            grads == other_grads,
            "gradients differ on {threads} threads"
        );
    }
}

#[test]
fn the_adaptive_softmax_defines_one_distribution_over_every_id() {
    // The decoder's log-probabilities of one row: the reference's, and they sum to 1 (each id
    // of the tail takes its share of the tail's probability).
    let logits: Vec<f32> = (0..53)
        .map(|i| ((i * 37 % 11) as f32 - 5.0) * 0.7)
        .collect();
    for (tail_logit, k) in [(0.3, 20), (-4.0, 20), (6.0, 1), (0.0, 52)] {
        let (row, reference) = adaptive::row_log_probs(&logits, tail_logit, k);
        let d = scaled_diff(&row, &reference);
        assert!(d < 1e-6, "k {k}: log-probabilities differ by {d}");
        let total: f64 = row.iter().map(|&l| f64::from(l).exp()).sum();
        assert!((total - 1.0).abs() < 1e-5, "k {k}: they sum to {total}");
    }
}
