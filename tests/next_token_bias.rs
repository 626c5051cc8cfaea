//! A next-token bias (`model::inputs`): the engine's loss and gradients match autograd through the
//! candle graph, its bias gets a gradient where it applies, and the decoder's logits match the
//! graph's. The biases are the rhyme biases the verse gives (the input `rhyme_bias`,
//! `verse::inputs::rhymes`).

mod common;

use candle_core::{Device, Tensor};
use shige::config::{ModelConfig, Position};
use shige::data::CharTokenizer;
use shige::engine::{self, CpuDecoder};
use shige::model::{Gpt, Mode};
use shige::ops::Kernels;
use shige::ops::{Precision, WeightFormat};
use shige::train::optim::{AdamWParams, Optimizer};
use shige::verse::inputs;

/// A regulated poem of 8 lines (its third and fourth rhymes follow two that agree) and a quatrain.
const POEMS: &str = "国破山河在，城春草木深。感时花溅泪，恨别鸟惊心。烽火连三月，家书抵万金。白头搔更短，浑欲不胜簪。\n\
                     床前明月光，疑是地上霜。举头望明月，低头思故乡。\n";

/// A model with verse places and the rhyme biases, set to `biases` (repeated, rhyming).
fn model(tokenizer: &CharTokenizer, biases: [f32; 2]) -> (Gpt, Optimizer) {
    model_with_head(tokenizer, biases, 0)
}

/// [`model`] with an adaptive softmax of `adaptive_head` ids (0: none), its tail vector made
/// to count.
fn model_with_head(
    tokenizer: &CharTokenizer,
    biases: [f32; 2],
    adaptive_head: usize,
) -> (Gpt, Optimizer) {
    let cfg = ModelConfig {
        inputs: vec!["verse_places".into(), "rhyme_bias".into()],
        tie_weights: true,
        block_size: 64,
        adaptive_head,
        ..common::small_config(tokenizer.vocab_size(), 2, Position::Rope)
    };
    let (model, varmap) = Gpt::seeded_with(
        &cfg,
        inputs::for_tokenizer(&cfg, tokenizer).unwrap(),
        3,
        &Device::Cpu,
    )
    .unwrap();
    for (name, var) in varmap.data().lock().unwrap().iter() {
        if name == "transformer.brh.weight" {
            var.set(&Tensor::new(&biases, &Device::Cpu).unwrap())
                .unwrap();
        }
        if name == "transformer.wvp.weight" || name == "adaptive.tail" {
            var.set(&common::wavy_like(var.as_tensor(), 0.05)).unwrap();
        }
    }
    let opt = Optimizer::new(
        varmap.data().lock().unwrap().clone(),
        AdamWParams::NANOGPT,
        None,
    )
    .unwrap();
    (model, opt)
}

/// The poems as 2 sequences of 48 tokens (the first the whole regulated poem, the second from
/// its fifth line through the quatrain) and their next tokens.
fn batch(tokenizer: &CharTokenizer) -> (Tensor, Tensor) {
    let ids = tokenizer.encode(&format!("\n{POEMS}")).unwrap();
    let rows: Vec<u32> = [&ids[0..49], &ids[25..74]].concat();
    let all = Tensor::from_vec(rows, (2, 49), &Device::Cpu).unwrap();
    (
        all.narrow(1, 0, 48).unwrap().contiguous().unwrap(),
        all.narrow(1, 1, 48).unwrap().contiguous().unwrap(),
    )
}

#[test]
fn the_engine_trains_the_bias_as_autograd_does() {
    let tokenizer = CharTokenizer::from_text(POEMS).unwrap();
    let (model, opt) = model(&tokenizer, [0.7, 0.3]);
    let (x, y) = batch(&tokenizer);
    let (loss, grads) =
        engine::loss_and_gradients(&model, (&x, &y), Precision::F32, &mut Mode::Eval).unwrap();
    let graph = model.clone().with_kernels(Kernels::Composite);
    let reference = graph.loss(&x, &y, &mut Mode::Eval).unwrap();
    let expected = opt.gradients(&reference.backward().unwrap()).unwrap();
    let expected_loss = reference.to_scalar::<f32>().unwrap() as f64;
    // Both biases act in the batch (the regulated poem's third and fourth rhymes the second).
    let d_biases = grads
        .values()
        .find(|g| g.len() == 2)
        .expect("the biases' gradient (2)");
    assert!(d_biases.iter().all(|&d| d != 0.0), "{d_biases:?}");
    common::assert_same_loss_and_gradients(
        "rhyme_bias",
        (loss, &opt.gradients_from(grads)),
        (expected_loss, &expected),
    );
    // The biases count: without them (0) the loss is another.
    let (plain, _) = model_loss(&tokenizer, [0.0; 2]);
    assert!((plain - loss).abs() > 1e-4, "{plain} against {loss}");
}

fn model_loss(tokenizer: &CharTokenizer, biases: [f32; 2]) -> (f64, Gpt) {
    let (model, _) = model(tokenizer, biases);
    let (x, y) = batch(tokenizer);
    let (loss, _) =
        engine::loss_and_gradients(&model, (&x, &y), Precision::F32, &mut Mode::Eval).unwrap();
    (loss, model)
}

/// Asserts that the decoder's `row` at `position` is the graph's within 1e-4 of its largest
/// magnitude.
fn assert_close(position: usize, row: &[f32], graph: &[f32]) {
    let scale = graph.iter().fold(0f32, |m, x| m.max(x.abs()));
    for (a, b) in row.iter().zip(graph) {
        assert!(
            (a - b).abs() < 1e-4 * scale,
            "position {position}: {a} against {b}"
        );
    }
}

#[test]
fn the_decoder_adds_the_bias_where_the_graph_does() {
    let tokenizer = CharTokenizer::from_text(POEMS).unwrap();
    let (model, _) = model(&tokenizer, [-2.0, 0.5]);
    let ids = tokenizer
        .encode("\n国破山河在，城春草木深。感时花溅泪，恨别鸟惊心。烽火连三月，家书抵万")
        .unwrap();
    let graph = common::full_logits(&model, &ids);
    let decoder = CpuDecoder::new(&model, WeightFormat::F32).unwrap().unwrap();
    let mut state = decoder.new_state();
    let mut biased = 0;
    for (i, &id) in ids.iter().enumerate() {
        let logits = decoder.forward(&[id], &mut state).unwrap();
        assert_close(i, &logits, &graph[i]);
        // Before 心 (after 惊, 22), the lines so far ended on 在, 深 and 泪: each lowered by 2;
        // one rhyme (深) raises nothing. Before 金 (after 万, 34), 心 and 月 ended lines too, and
        // two rhymes agree on 侵: 深, 心, 金 and 簪 raised by 0.5; 春 neither.
        let expected: &[(char, f32)] = match i {
            22 => &[('在', -2.0), ('深', -2.0), ('泪', -2.0), ('心', 0.0)],
            34 => &[
                ('在', -2.0),
                ('深', -1.5),
                ('泪', -2.0),
                ('心', -1.5),
                ('月', -2.0),
                ('金', 0.5),
                ('簪', 0.5),
                ('春', 0.0),
            ],
            _ => &[],
        };
        if !expected.is_empty() {
            let (_, plain) = model_loss(&tokenizer, [0.0; 2]);
            let unbiased = common::full_logits(&plain, &ids)[i].clone();
            for &(c, expected) in expected {
                let t = tokenizer.id(c).unwrap() as usize;
                let moved = logits[t] - unbiased[t];
                assert!((moved - expected).abs() < 1e-4, "{c}: moved by {moved}");
                biased += usize::from(expected != 0.0);
            }
        }
    }
    assert_eq!(biased, 3 + 7);
}

#[test]
fn with_an_adaptive_softmax_the_engine_and_the_decoder_add_the_bias_as_the_graph_does() {
    // The vocabulary numbered by count, its 12 most frequent characters (newline first) in the
    // head, the other 50 in the tail; the biases raise and lower ids of both.
    let tokenizer = CharTokenizer::by_count(POEMS).unwrap();
    let (model, opt) = model_with_head(&tokenizer, [0.7, -0.3], 12);
    let (x, y) = batch(&tokenizer);
    let in_tail = y
        .flatten_all()
        .unwrap()
        .to_vec1::<u32>()
        .unwrap()
        .iter()
        .filter(|&&t| t >= 12)
        .count();
    assert!(in_tail > 20, "{in_tail} targets in the tail");
    let (loss, grads) =
        engine::loss_and_gradients(&model, (&x, &y), Precision::F32, &mut Mode::Eval).unwrap();
    let graph = model.clone().with_kernels(Kernels::Composite);
    let reference = graph.loss(&x, &y, &mut Mode::Eval).unwrap();
    let expected = opt.gradients(&reference.backward().unwrap()).unwrap();
    let expected_loss = reference.to_scalar::<f32>().unwrap() as f64;
    common::assert_same_loss_and_gradients(
        "adaptive softmax with rhyme_bias",
        (loss, &opt.gradients_from(grads)),
        (expected_loss, &expected),
    );
    assert!((engine::loss(&model, (&x, &y)).unwrap() - loss).abs() < 1e-6 * loss);
    // The decoder's log-probabilities with the biases are the graph's, position by position.
    let ids = tokenizer
        .encode("\n国破山河在，城春草木深。感时花溅泪，恨别鸟惊心。烽火连三月，家书抵万")
        .unwrap();
    let full = common::full_logits(&model, &ids);
    let decoder = CpuDecoder::new(&model, WeightFormat::F32).unwrap().unwrap();
    let mut state = decoder.new_state();
    for (i, &id) in ids.iter().enumerate() {
        let log_p = decoder.forward(&[id], &mut state).unwrap();
        assert_close(i, &log_p, &full[i]);
    }
}
