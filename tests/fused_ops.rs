//! Every fused CPU kernel against its composite reference: values and gradients.

use candle_core::{Device, Tensor, Var};
use rand::{Rng, SeedableRng};
use shige::ops::{gelu, layer_norm, linear, softmax};

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

/// Compares outputs and the gradients of every input under a random upstream gradient.
fn check(name: &str, inputs: &[&Var], fused: impl Fn() -> Tensor, reference: impl Fn() -> Tensor) {
    let (a, b) = (fused(), reference());
    assert_eq!(a.dims(), b.dims(), "{name}: shapes");
    let d = rel_diff(&a, &b);
    assert!(d < 1e-4, "{name}: values differ by {d}");
    let weights = random(a.dims(), 1.0, 99);
    let ga = (a * weights.as_tensor())
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    let gb = (b * weights.as_tensor())
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    for (i, x) in inputs.iter().enumerate() {
        let (da, db) = (
            ga.get(x.as_tensor()).expect("fused gradient"),
            gb.get(x.as_tensor()).expect("reference gradient"),
        );
        let d = rel_diff(da, db);
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
        check(
            &format!("softmax {shape:?} causal={causal}"),
            &[&x],
            || softmax::softmax(&x, causal).unwrap(),
            || softmax::softmax_reference(&x, causal).unwrap(),
        );
    }
}

#[test]
fn fused_gelu_matches_the_reference() {
    let x = random(&[3, 5, 40], 4.0, 2);
    check(
        "gelu",
        &[&x],
        || gelu::gelu(&x).unwrap(),
        || gelu::gelu_reference(&x).unwrap(),
    );
}

#[test]
fn fused_layer_norm_matches_the_reference() {
    let x = random(&[3, 70, 24], 2.0, 3);
    let w = random(&[24], 1.0, 4);
    let b = random(&[24], 1.0, 5);
    check(
        "layer_norm",
        &[&x, &w, &b],
        || layer_norm::layer_norm(&x, &w, &b, 1e-5).unwrap(),
        || layer_norm::layer_norm_reference(&x, &w, &b, 1e-5).unwrap(),
    );
}

#[test]
fn fused_linear_matches_the_reference() {
    let x = random(&[3, 11, 24], 1.0, 7);
    let w = random(&[40, 24], 0.5, 8);
    let b = random(&[40], 0.5, 9);
    check(
        "linear+bias",
        &[&x, &w, &b],
        || linear::linear(&x, &w, Some(&b)).unwrap(),
        || linear::linear_reference(&x, &w, Some(&b)).unwrap(),
    );
    check(
        "linear",
        &[&x, &w],
        || linear::linear(&x, &w, None).unwrap(),
        || linear::linear_reference(&x, &w, None).unwrap(),
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
            || linear::linear(&x, &w, Some(&b)).unwrap(),
            || linear::linear_reference(&x, &w, Some(&b)).unwrap(),
        );
    }
}

#[test]
fn fused_output_layer_and_loss_match_the_reference() {
    use shige::ops::lm_head_loss::{lm_head_cross_entropy, lm_head_cross_entropy_reference};
    // 1,100 rows: five chunks of 256, the last one partial, split between threads.
    let x = random(&[1100, 24], 1.0, 10);
    let w = random(&[53, 24], 0.5, 11);
    let targets = Tensor::from_vec(
        (0..1100u32).map(|i| i * 17 % 53).collect::<Vec<_>>(),
        1100,
        &Device::Cpu,
    )
    .unwrap();
    check(
        "lm_head + cross-entropy",
        &[&x, &w],
        || lm_head_cross_entropy(&x, &w, &targets, true).unwrap(),
        || lm_head_cross_entropy_reference(&x, &w, &targets).unwrap(),
    );
    let eval = lm_head_cross_entropy(&x, &w, &targets, false).unwrap();
    let d = rel_diff(
        &eval,
        &lm_head_cross_entropy_reference(&x, &w, &targets).unwrap(),
    );
    assert!(d < 1e-4, "evaluation loss differs by {d}");
    // Straight from the loss (an upstream gradient of 1, as in training).
    let fused = lm_head_cross_entropy(&x, &w, &targets, true)
        .unwrap()
        .backward()
        .unwrap();
    let reference = lm_head_cross_entropy_reference(&x, &w, &targets)
        .unwrap()
        .backward()
        .unwrap();
    for v in [&x, &w] {
        let d = rel_diff(
            fused.get(v.as_tensor()).unwrap(),
            reference.get(v.as_tensor()).unwrap(),
        );
        assert!(d < 1e-4, "gradient from the loss differs by {d}");
    }
    let bad = Tensor::new(&[60u32; 1100], &Device::Cpu).unwrap();
    let err = lm_head_cross_entropy(&x, &w, &bad, true)
        .unwrap_err()
        .to_string();
    assert!(err.contains("outside the vocabulary"), "{err}");
}

#[test]
fn fused_causal_attention_matches_the_reference() {
    use shige::ops::attention::{causal_attention, causal_attention_reference};
    let (q, k, v) = (
        random(&[2, 3, 19, 8], 1.5, 12),
        random(&[2, 3, 19, 8], 1.5, 13),
        random(&[2, 3, 19, 8], 1.0, 14),
    );
    check(
        "causal attention",
        &[&q, &k, &v],
        || causal_attention(&q, &k, &v, 0.35).unwrap(),
        || causal_attention_reference(&q, &k, &v, 0.35).unwrap(),
    );
    // Fewer queries than keys (the later keys come from a cache while generating): values only.
    for t_q in [1, 5] {
        let q = random(&[2, 3, t_q, 8], 1.5, 15);
        let fused = causal_attention(&q, &k, &v, 0.35).unwrap();
        let reference = causal_attention_reference(&q, &k, &v, 0.35).unwrap();
        assert_eq!(fused.dims(), [2, 3, t_q, 8]);
        let d = rel_diff(&fused, &reference);
        assert!(
            d < 1e-4,
            "attention with {t_q} queries of 19 keys differs by {d}"
        );
    }
    // Keys and values read in place from a longer buffer, as from the cache: (T, D) slabs that
    // are contiguous but stand 30 positions apart.
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
    assert!(d < 1e-4, "attention over cache views differs by {d}");
}

#[test]
fn fused_attention_on_the_qkv_projection_matches_the_reference() {
    use shige::ops::attention::{causal_attention_qkv, causal_attention_qkv_reference};
    // Batch 2, 19 positions, 3 heads of 4 dims: q, k and v side by side in the last dimension.
    let qkv = random(&[2, 19, 3 * 12], 1.5, 21);
    check(
        "qkv attention",
        &[&qkv],
        || causal_attention_qkv(&qkv, 3, 0.5).unwrap(),
        || causal_attention_qkv_reference(&qkv, 3, 0.5).unwrap(),
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
    let (lw, lb) = (random(&[48, 64], 0.2, 34), random(&[48], 1.0, 35));
    let upstream = random(&[4096, 48], 1.0, 36);
    let gradients = |threads: usize| -> Vec<Vec<f32>> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let h = layer_norm::layer_norm(&x, &w, &b, 1e-5).unwrap();
            let y = linear::linear(&h, &lw, Some(&lb)).unwrap();
            let grads = (y * upstream.as_tensor())
                .unwrap()
                .sum_all()
                .unwrap()
                .backward()
                .unwrap();
            [&w, &b, &lw, &lb]
                .iter()
                .map(|v| {
                    let g = grads.get(v.as_tensor()).expect("gradient");
                    g.flatten_all().unwrap().to_vec1().unwrap()
                })
                .collect()
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
