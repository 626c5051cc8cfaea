//! What attention can and cannot see of word order.

mod common;

use candle_core::{Device, Tensor};
use shige::config::Position;
use shige::experiments::lesson;
use shige::model::{Gpt, Mode};

fn last_logits(model: &Gpt, ids: &[u32]) -> Tensor {
    let x = Tensor::new(ids, &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    model
        .forward(&x, &mut Mode::Eval)
        .unwrap()
        .get(0)
        .unwrap()
        .get(ids.len() - 1)
        .unwrap()
}

fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar()
        .unwrap()
}

const PERMUTATIONS: [[usize; 4]; 4] = [[1, 0, 2, 3], [3, 2, 1, 0], [2, 0, 3, 1], [1, 3, 0, 2]];

/// How far the last position's logits move when the first four of five tokens are permuted.
fn permutation_diffs(n_layer: usize) -> Vec<f32> {
    let cfg = common::small_config(50, n_layer, Position::None);
    let (model, _) = Gpt::seeded(&cfg, 7, &Device::Cpu).unwrap();
    let ids = [3u32, 17, 29, 41, 5];
    let reference = last_logits(&model, &ids);
    PERMUTATIONS
        .iter()
        .map(|perm| {
            let mut shuffled: Vec<u32> = perm.iter().map(|&i| ids[i]).collect();
            shuffled.push(ids[4]);
            max_diff(&reference, &last_logits(&model, &shuffled))
        })
        .collect()
}

#[test]
fn one_layer_without_positions_ignores_the_order_of_earlier_tokens() {
    let diffs = permutation_diffs(1);
    assert!(
        diffs.iter().all(|&d| d < 1e-5),
        "1-layer no-position output moved: {diffs:?}"
    );
}

#[test]
fn two_layers_without_positions_see_order_through_the_causal_mask() {
    let diffs = permutation_diffs(2);
    assert!(
        diffs.iter().all(|&d| d > 1e-4),
        "2-layer no-position output barely moved: {diffs:?}"
    );
}

#[test]
fn no_position_sees_the_future() {
    for position in Position::ALL {
        let cfg = common::small_config(50, 2, position);
        let (model, _) = Gpt::seeded(&cfg, 3, &Device::Cpu).unwrap();
        let ids: Vec<u32> = (0..10).map(|i| (i * 7 % 50) as u32).collect();
        let run = |ids: &[u32]| {
            let x = Tensor::new(ids, &Device::Cpu)
                .unwrap()
                .unsqueeze(0)
                .unwrap();
            model.forward(&x, &mut Mode::Eval).unwrap().get(0).unwrap()
        };
        let base = run(&ids);
        for j in [1usize, 5, 9] {
            let mut changed = ids.clone();
            changed[j] = (changed[j] + 1) % 50;
            let out = run(&changed);
            let before = max_diff(
                &base.narrow(0, 0, j).unwrap(),
                &out.narrow(0, 0, j).unwrap(),
            );
            assert_eq!(
                before, 0.0,
                "{position}: changing token {j} changed earlier outputs by {before}"
            );
            let at = max_diff(
                &base.narrow(0, j, 1).unwrap(),
                &out.narrow(0, j, 1).unwrap(),
            );
            assert!(
                at > 0.0,
                "{position}: changing token {j} did not change its own output"
            );
        }
    }
}

#[test]
fn heads_positions_reproduces_the_lesson() {
    let tokenizer = common::tiny_tokenizer();
    let report = lesson::run(&tokenizer, 0).unwrap();
    assert_eq!(report.order_leak.len(), 15);
    for leak in &report.order_leak {
        match (leak.layers, leak.position) {
            (1, Position::None) => assert!(leak.diff < 1e-6, "1 layer, none: {}", leak.diff),
            (_, Position::None) => assert!(
                leak.diff > 1e-4,
                "{} layers, none: {}",
                leak.layers,
                leak.diff
            ),
            (_, p) => assert!(
                leak.diff > 1e-6,
                "{} layers, {p}: {}",
                leak.layers,
                leak.diff
            ),
        }
    }
    assert_eq!(report.shapes.q, vec![1, 5, 32]);
    assert_eq!(report.shapes.q_heads, vec![1, 4, 5, 8]);
    assert_eq!(report.shapes.scores, vec![1, 4, 5, 5]);
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["order_leak"][0]["position"], "none");
    assert_eq!(json["order_leak"][0]["layers"], 1);
    assert!(json["order_leak"][0]["diff"].is_number());
    assert_eq!(json["attention_params"].as_array().unwrap().len(), 4);
}
