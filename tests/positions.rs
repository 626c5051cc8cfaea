//! The positional schemes against their formulas.

use candle_core::{Device, Tensor};
use shige::config::{ModelConfig, Position};
use shige::model::position::{alibi_slopes, sinusoidal_table, PositionEncoding};

/// RoPE for one head of `dim` dimensions.
fn rope_of_one_head(dim: usize) -> PositionEncoding {
    let cfg = ModelConfig {
        vocab_size: 10,
        n_head: 1,
        n_embd: dim,
        position: Position::Rope,
        ..Default::default()
    };
    let vb = candle_nn::VarBuilder::zeros(candle_core::DType::F32, &Device::Cpu);
    PositionEncoding::new(vb, &cfg).unwrap()
}

#[test]
fn rope_scores_depend_only_on_relative_position() {
    let rope = rope_of_one_head(8);
    let q = Tensor::new(&[0.3f32, -1.2, 0.7, 0.1, 2.0, -0.4, 0.9, 0.5], &Device::Cpu)
        .unwrap()
        .reshape((1, 1, 1, 8))
        .unwrap();
    let k = Tensor::new(
        &[1.1f32, 0.2, -0.6, 0.8, -0.3, 1.5, 0.4, -1.0],
        &Device::Cpu,
    )
    .unwrap()
    .reshape((1, 1, 1, 8))
    .unwrap();
    let score = |m: usize, n: usize| -> f32 {
        let qm = rope.rotate(&q, m).unwrap();
        let kn = rope.rotate(&k, n).unwrap();
        (qm * kn).unwrap().sum_all().unwrap().to_scalar().unwrap()
    };
    let unrotated: f32 = (&q * &k).unwrap().sum_all().unwrap().to_scalar().unwrap();
    for (m, n) in [(3, 1), (7, 2), (5, 5)] {
        for s in [1, 10, 100] {
            let (a, b) = (score(m, n), score(m + s, n + s));
            assert!(
                (a - b).abs() < 1e-4,
                "score at ({m},{n}) = {a}, at +{s} = {b}"
            );
        }
    }
    assert!(
        (score(4, 4) - unrotated).abs() < 1e-5,
        "equal positions give the plain dot product"
    );
    assert!(
        (score(4, 1) - unrotated).abs() > 1e-3,
        "a distance changes the score"
    );
}

/// RoPE of a known vector at a known position against the rotation worked out by hand: the
/// interleaved pairs (2i, 2i+1) of RoFormer, angles m·10000^(-2i/d). A half-split pairing (i,
/// i+d/2) or another base passes the test above but not this one.
#[test]
fn rope_turns_a_known_vector_by_the_angles_worked_out_by_hand() {
    let rope = rope_of_one_head(4);
    let x = Tensor::new(&[1.0f32, 2.0, 3.0, 4.0], &Device::Cpu)
        .unwrap()
        .reshape((1, 1, 1, 4))
        .unwrap();
    let turned: Vec<f32> = rope
        .rotate(&x, 2)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    // d = 4, position m = 2: pair (x0, x1) turns by 2 rad, pair (x2, x3) by 2 / 100 rad.
    let (c0, s0) = (2f64.cos(), 2f64.sin()); // -0.416147, 0.909297
    let (c1, s1) = (0.02f64.cos(), 0.02f64.sin()); // 0.999800, 0.019999
    let expected = [
        1.0 * c0 - 2.0 * s0, // -2.234742
        1.0 * s0 + 2.0 * c0, // 0.077004
        3.0 * c1 - 4.0 * s1, // 2.919405
        3.0 * s1 + 4.0 * c1, // 4.059196
    ];
    assert!((expected[0] + 2.234742).abs() < 1e-6 && (expected[3] - 4.059196).abs() < 1e-6);
    for (got, want) in turned.iter().zip(expected) {
        assert!(
            (*got as f64 - want).abs() < 1e-5 * want.abs().max(1.0),
            "{turned:?} against {expected:?}"
        );
    }
}

#[test]
fn sinusoidal_table_equals_its_formula() {
    let (len, dim) = (50, 16);
    let table = sinusoidal_table(0, len, dim, 1.0);
    let scaled = sinusoidal_table(0, len, dim, 0.03);
    for pos in 0..len {
        for i in 0..dim / 2 {
            let angle = pos as f64 / 10000f64.powf((2 * i) as f64 / dim as f64);
            let (sin, cos) = (pos * dim + 2 * i, pos * dim + 2 * i + 1);
            assert!((table[sin] as f64 - angle.sin()).abs() < 1e-6);
            assert!((table[cos] as f64 - angle.cos()).abs() < 1e-6);
            assert!((scaled[sin] as f64 - 0.03 * angle.sin()).abs() < 1e-8);
            assert!((scaled[cos] as f64 - 0.03 * angle.cos()).abs() < 1e-8);
        }
    }
    assert_eq!(
        sinusoidal_table(7, 3, dim, 1.0),
        table[7 * dim..10 * dim].to_vec(),
        "an offset table is a slice of the full one"
    );
}

#[test]
fn alibi_slopes_are_the_papers() {
    let eight: Vec<f64> = (1..=8).map(|i| 1.0 / 2f64.powi(i)).collect();
    assert_eq!(alibi_slopes(8), eight);
    let four: Vec<f64> = (1..=4).map(|i| 1.0 / 4f64.powi(i)).collect();
    assert_eq!(alibi_slopes(4), four);
    // Not a power of two: the 4-head slopes, then every other slope of the 8-head ones.
    assert_eq!(
        alibi_slopes(6),
        vec![0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125]
    );
}

#[test]
fn alibi_bias_penalises_distance() {
    let cfg = ModelConfig {
        vocab_size: 10,
        n_head: 2,
        n_embd: 8,
        position: Position::Alibi,
        ..Default::default()
    };
    let vb = candle_nn::VarBuilder::zeros(candle_core::DType::F32, &Device::Cpu);
    let alibi = PositionEncoding::new(vb, &cfg).unwrap();
    let like = Tensor::zeros(1, candle_core::DType::F32, &Device::Cpu).unwrap();
    let bias = alibi
        .score_bias(3, 3, &like)
        .unwrap()
        .unwrap()
        .to_vec3::<f32>()
        .unwrap();
    // 2 heads: slopes 1/16 and 1/256; query 2 against keys 0, 1, 2.
    assert_eq!(bias[0][2], vec![-2.0 / 16.0, -1.0 / 16.0, 0.0]);
    assert_eq!(bias[1][2], vec![-2.0 / 256.0, -1.0 / 256.0, 0.0]);
}
