//! The CPU engine computes the candle graph's model: one table of every positional scheme ×
//! bias × tied output layer × head count, each checked for the training step's loss and every
//! parameter's gradient (against autograd), and for generation's logits, prompt prefill and
//! cached steps past the block size (against the full forward pass); dropout checked with the
//! masks drawn from the same RNG. Tolerances are relative to each tensor's largest magnitude.

mod common;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarMap;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use shige::config::{Activation, ModelConfig, Position};
use shige::engine::{self, CpuDecoder};
use shige::model::{Gpt, Mode};
use shige::ops::{Kernels, Precision, WeightFormat};
use shige::train::optim::{AdamWParams, Gradients, Optimizer};
use shige::verse::inputs;

const VOCAB: usize = 40;
/// Several of the attention products' register tiles (6 rows × 16 columns), the last ones
/// partial, so that the tiles above the causal diagonal are skipped here too.
const BLOCK_SIZE: usize = 40;

/// (n_embd, n_head): heads of 32, 16 and 8 dims, and of 24 (the decoder's weighted sum runs in
/// strips of 16: one strip, then 8 more).
const SHAPES: [(usize, usize); 4] = [(32, 1), (32, 2), (32, 4), (48, 2)];

/// One layout of the table.
#[derive(Debug, Clone, Copy)]
struct Layout {
    position: Position,
    bias: bool,
    tie_weights: bool,
    n_embd: usize,
    n_head: usize,
    dropout: f64,
    /// The MLP's nonlinearity.
    activation: Activation,
    /// Whether q and k are scaled to unit RMS per head.
    qk_norm: bool,
    /// The inputs besides the tokens (`verse::inputs`): the characters' sounds, the positions'
    /// verse places, the rhymes so far.
    inputs: &'static [&'static str],
    /// The adaptive softmax's head (0: the full softmax).
    adaptive_head: usize,
}

/// The inputs the layouts take, alone and together: each kind of input the engine runs (a
/// token input, sequence inputs, two at once).
const INPUT_SETS: [&[&str]; 4] = [
    &["sound"],
    &["verse_places"],
    &["sound", "verse_places"],
    &["verse_places", "rhyme_memory"],
];

impl Layout {
    /// Every scheme × bias × tied × shape, without dropout; and every scheme × tied with each set
    /// of inputs.
    fn all() -> Vec<Layout> {
        let mut all = Vec::new();
        for position in Position::ALL {
            for tie_weights in [false, true] {
                for bias in [false, true] {
                    for (n_embd, n_head) in SHAPES {
                        all.push(Layout {
                            position,
                            bias,
                            tie_weights,
                            n_embd,
                            n_head,
                            dropout: 0.0,
                            activation: Activation::Gelu,
                            qk_norm: false,
                            inputs: &[],
                            adaptive_head: 0,
                        });
                    }
                }
                for inputs in INPUT_SETS {
                    all.push(Layout::with_inputs(position, tie_weights, inputs));
                }
            }
            // ReLU² in the MLP, and QK-norm, with the default's inputs.
            for (activation, qk_norm) in [(Activation::Relu2, false), (Activation::Gelu, true)] {
                all.push(Layout {
                    activation,
                    qk_norm,
                    ..Layout::with_inputs(position, true, &["verse_places"])
                });
            }
            // An adaptive softmax (the head 12 of the 40 ids), tied and not, with inputs.
            for (tie_weights, inputs) in [(false, &[][..]), (true, &["sound", "verse_places"][..])]
            {
                all.push(Layout {
                    adaptive_head: 12,
                    ..Layout::with_inputs(position, tie_weights, inputs)
                });
            }
        }
        all
    }

    /// 2 heads of 16 dims with biases and `inputs`, without dropout: the layouts of the inputs.
    fn with_inputs(
        position: Position,
        tie_weights: bool,
        inputs: &'static [&'static str],
    ) -> Layout {
        Layout {
            position,
            bias: true,
            tie_weights,
            n_embd: 32,
            n_head: 2,
            dropout: 0.0,
            activation: Activation::Gelu,
            qk_norm: false,
            inputs,
            adaptive_head: 0,
        }
    }

    /// A 2-layer model of this layout whose biases (zero at initialisation) are made to count.
    fn model(&self) -> (Gpt, Optimizer) {
        let (model, varmap) = self.model_and_variables();
        let opt = Optimizer::new(
            varmap.data().lock().unwrap().clone(),
            AdamWParams::NANOGPT,
            None,
        )
        .unwrap();
        (model, opt)
    }

    /// The same model with the weight matrices that the decoder packs (those of the blocks' and
    /// the output layer's Linear layers) rounded to f16 by candle: what the f16 decoder computes.
    /// Only for an untied output layer (tied, the embedding table would be rounded too).
    fn model_with_f16_matrices(&self) -> Gpt {
        assert!(!self.tie_weights);
        let (model, varmap) = self.model_and_variables();
        for (name, var) in varmap.data().lock().unwrap().iter() {
            let packed = ["c_attn", "c_proj", "c_fc", "lm_head"]
                .iter()
                .any(|layer| name.ends_with(&format!("{layer}.weight")));
            if packed {
                let rounded = var.as_tensor().to_dtype(DType::F16).unwrap();
                var.set(&rounded.to_dtype(DType::F32).unwrap()).unwrap();
            }
        }
        model
    }

    /// The model of [`Self::model`] and its variables.
    fn model_and_variables(&self) -> (Gpt, VarMap) {
        let cfg = ModelConfig {
            bias: self.bias,
            tie_weights: self.tie_weights,
            n_embd: self.n_embd,
            n_head: self.n_head,
            dropout: self.dropout,
            activation: self.activation,
            qk_norm: self.qk_norm,
            // Not 1: both sides must apply the scale.
            sinusoidal_scale: 0.5,
            block_size: BLOCK_SIZE,
            inputs: self.inputs.iter().map(|name| name.to_string()).collect(),
            adaptive_head: self.adaptive_head,
            ..common::small_config(VOCAB, 2, self.position)
        };
        let vocabulary = common::vocabulary_of(VOCAB);
        let (model, varmap) = Gpt::seeded_with(
            &cfg,
            inputs::for_vocabulary(&cfg, &vocabulary).unwrap(),
            12,
            &Device::Cpu,
        )
        .unwrap();
        for (name, var) in varmap.data().lock().unwrap().iter() {
            if name.ends_with("bias") {
                var.set(&(var.as_tensor() + 0.1).unwrap()).unwrap();
            }
            // Zero at initialisation: made to count.
            let zero_at_start = ["wse", "wvp", "wrm"].map(|t| format!("transformer.{t}.weight"));
            if zero_at_start.contains(name) || name == "adaptive.tail" {
                var.set(&common::wavy_like(var.as_tensor(), 0.05)).unwrap();
            }
        }
        (model, varmap)
    }
}

/// 3 sequences of BLOCK_SIZE tokens and the next tokens.
fn batch() -> (Tensor, Tensor) {
    let ids: Vec<u32> = (0..3 * (BLOCK_SIZE + 1))
        .map(|i| (i * 7 % (VOCAB - 1)) as u32)
        .collect();
    let all = Tensor::from_vec(ids, (3, BLOCK_SIZE + 1), &Device::Cpu).unwrap();
    (
        all.narrow(1, 0, BLOCK_SIZE).unwrap().contiguous().unwrap(),
        all.narrow(1, 1, BLOCK_SIZE).unwrap().contiguous().unwrap(),
    )
}

/// The engine's loss and gradients, and autograd's through the candle graph of composite ops,
/// each with dropout masks drawn from an RNG seeded with `seed`.
fn both_steps(model: &Gpt, opt: &Optimizer, seed: u64) -> ((f64, Gradients), (f64, Gradients)) {
    let (x, y) = batch();
    let rng = || ChaCha8Rng::seed_from_u64(seed);
    let (loss, grads) = engine::loss_and_gradients(
        model,
        (&x, &y),
        Precision::F32,
        &mut Mode::Train(&mut rng()),
    )
    .unwrap();
    let graph = model.clone().with_kernels(Kernels::Composite);
    let reference = graph.loss(&x, &y, &mut Mode::Train(&mut rng())).unwrap();
    let expected = opt.gradients(&reference.backward().unwrap()).unwrap();
    (
        (loss, opt.gradients_from(grads)),
        (reference.to_scalar::<f32>().unwrap() as f64, expected),
    )
}

/// Asserts that `row` equals `expected` within 1e-4 of the latter's largest magnitude.
fn assert_close(case: &str, row: &[f32], expected: &[f32]) {
    assert_eq!(row.len(), expected.len(), "{case}");
    let scale = expected.iter().fold(0f32, |m, x| m.max(x.abs()));
    let worst = row
        .iter()
        .zip(expected)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(
        scale > 0.0 && worst <= 1e-4 * scale,
        "{case}: off by {worst} (largest {scale})"
    );
}

/// The decoder's logits, its weights in `format`, for a prompt of 6 positions at once, then one
/// position at a time up to `ids.len()`, each against the row of `reference`'s full forward pass.
fn check_decoder(case: &str, model: &Gpt, format: WeightFormat, reference: &Gpt, ids: &[u32]) {
    let full = common::full_logits(reference, ids);
    let decoder = CpuDecoder::new(model, format)
        .unwrap()
        .expect("f32 on the CPU");
    assert_eq!(decoder.weight_format(), format, "{case}");
    let mut state = decoder.new_state();
    let prefill = decoder.forward(&ids[..6], &mut state).unwrap();
    assert_close(&format!("{case}, prefill"), &prefill, &full[5]);
    for (i, &id) in ids.iter().enumerate().skip(6) {
        let row = decoder.forward(&[id], &mut state).unwrap();
        assert_close(&format!("{case}, cached step at {i}"), &row, &full[i]);
    }
    assert_eq!(state.len(), ids.len(), "{case}");
}

/// How many tokens the decoder is checked over: the learned table ends at the block size; the
/// other schemes go past it.
fn decoded_length(position: Position) -> usize {
    match position {
        Position::Learned => BLOCK_SIZE,
        _ => BLOCK_SIZE + 8,
    }
}

#[test]
fn the_engine_computes_the_candle_graphs_model_for_every_layout() {
    for layout in Layout::all() {
        let case = format!("{layout:?}");
        let (model, opt) = layout.model();
        assert!(engine::supports(&model), "{case}");
        let (step, reference) = both_steps(&model, &opt, 0);
        common::assert_same_loss_and_gradients(
            &case,
            (step.0, &step.1),
            (reference.0, &reference.1),
        );
        // The evaluation's loss: the engine's forward pass alone, against the graph's.
        let (x, y) = batch();
        let graph = model.clone().with_kernels(Kernels::Composite);
        let expected = graph.loss(&x, &y, &mut Mode::Eval).unwrap();
        let expected = expected.to_scalar::<f32>().unwrap() as f64;
        let loss = engine::loss(&model, (&x, &y)).unwrap();
        assert!(
            (loss - expected).abs() < 1e-5 * expected,
            "{case}: evaluation loss {loss} against the graph's {expected}"
        );
        let len = decoded_length(layout.position);
        let ids: Vec<u32> = (0..len).map(|i| (i * 5 % VOCAB) as u32).collect();
        check_decoder(&case, &model, WeightFormat::F32, &model, &ids);
    }
}

#[test]
#[cfg_attr(
    not(cpu_f16c),
    ignore = "this CPU does not convert f16 in hardware (F16C)"
)]
fn the_f16_decoder_computes_the_model_with_its_matrices_rounded() {
    assert!(
        WeightFormat::f16_converts_here(),
        "built on a CPU with F16C, but this one lacks it: `cargo clean` and test again"
    );
    // An untied output layer: a tied one is the embedding, which stays f32.
    for layout in Layout::all().into_iter().filter(|l| !l.tie_weights) {
        let (model, _) = layout.model();
        let len = decoded_length(layout.position);
        let ids: Vec<u32> = (0..len).map(|i| (i * 5 % VOCAB) as u32).collect();
        let rounded = layout.model_with_f16_matrices();
        check_decoder(
            &format!("{layout:?}, f16"),
            &model,
            WeightFormat::F16,
            &rounded,
            &ids,
        );
    }
}

#[test]
fn dropout_in_the_engine_draws_the_candle_graphs_masks() {
    for position in Position::ALL {
        let cases: [(bool, bool, usize, &[&str]); 2] = [
            (true, false, 2, &[]),
            (false, true, 4, &["sound", "verse_places"]),
        ];
        for (bias, tie_weights, n_head, inputs) in cases {
            let layout = Layout {
                position,
                bias,
                tie_weights,
                n_embd: 32,
                n_head,
                dropout: 0.2,
                activation: Activation::Gelu,
                qk_norm: position == Position::Rope,
                inputs,
                adaptive_head: 0,
            };
            let case = format!("{layout:?}");
            let (model, opt) = layout.model();
            let (step, reference) = both_steps(&model, &opt, 7);
            common::assert_same_loss_and_gradients(
                &case,
                (step.0, &step.1),
                (reference.0, &reference.1),
            );
            // The masks did something: without them the gradients are others.
            let (x, y) = batch();
            let (_, plain) =
                engine::loss_and_gradients(&model, (&x, &y), Precision::F32, &mut Mode::Eval)
                    .unwrap();
            let plain = opt.gradients_from(plain);
            let parted = plain.values().iter().zip(step.1.values()).any(|(a, b)| {
                let scale = b.iter().fold(0f32, |m, x| m.max(x.abs()));
                a.iter().zip(b).any(|(a, b)| (a - b).abs() > 0.1 * scale)
            });
            assert!(parted, "{case}: dropout changed nothing");
        }
    }
}

#[test]
fn a_dropout_mask_is_its_words_against_p_in_order() {
    use rand::RngCore;
    // 100,000: many blocks of words.
    for (p, len) in [
        (0.05, 5000),
        (0.5, 1025),
        (0.2, 1),
        (0.3, 0),
        (0.1, 100_000),
    ] {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        rng.next_u32(); // not at a block's start
        let mut reference = rng.clone();
        let mask = shige::model::layers::dropout_mask(p, len, &mut rng);
        let scale = (1.0 / (1.0 - p)) as f32;
        for (i, &m) in mask.iter().enumerate() {
            let word = reference.next_u32() as f64 / 2f64.powi(32);
            assert_eq!(m, if word < p { 0.0 } else { scale }, "p {p}, element {i}");
        }
        assert_eq!(mask.len(), len);
        assert_eq!(
            rng.get_word_pos(),
            reference.get_word_pos(),
            "p {p}: words used"
        );
        assert_eq!(
            rng.next_u64(),
            reference.next_u64(),
            "p {p}: the next words"
        );
        if len >= 1000 {
            // Dropped with probability p: within 4 standard deviations.
            let dropped = mask.iter().filter(|&&m| m == 0.0).count() as f64;
            let sd = (len as f64 * p * (1.0 - p)).sqrt();
            assert!(
                (dropped - len as f64 * p).abs() < 4.0 * sd,
                "p {p}: {dropped} dropped"
            );
        }
    }
}

#[test]
fn what_the_engine_cannot_run_is_an_error() {
    let (model, _) = Layout {
        position: Position::Learned,
        bias: true,
        tie_weights: false,
        n_embd: 32,
        n_head: 4,
        dropout: 0.0,
        activation: Activation::Gelu,
        qk_norm: false,
        inputs: &[],
        adaptive_head: 0,
    }
    .model();
    let (x, y) = batch();
    // Token ids outside the vocabulary, as inputs and as targets.
    let bad = Tensor::from_vec(
        vec![VOCAB as u32; 3 * BLOCK_SIZE],
        (3, BLOCK_SIZE),
        &Device::Cpu,
    )
    .unwrap();
    for (x, y) in [(&x, &bad), (&bad, &y)] {
        let err = engine::loss_and_gradients(&model, (x, y), Precision::F32, &mut Mode::Eval)
            .unwrap_err();
        assert!(err.to_string().contains("outside the vocabulary"), "{err}");
    }
    let decoder = CpuDecoder::new(&model, WeightFormat::F32).unwrap().unwrap();
    let err = decoder
        .forward(&[VOCAB as u32], &mut decoder.new_state())
        .unwrap_err();
    assert!(err.to_string().contains("outside the vocabulary"), "{err}");
    // Past the learned table.
    let err = decoder
        .forward(&[0; BLOCK_SIZE + 1], &mut decoder.new_state())
        .unwrap_err();
    assert!(err.to_string().contains("crop the context"), "{err}");
    drop(decoder);
    // The fused ops are forward-only: training them through autograd is refused.
    let err = model
        .loss(&x, &y, &mut Mode::Train(&mut ChaCha8Rng::seed_from_u64(0)))
        .unwrap_err();
    assert!(err.to_string().contains("no backward pass"), "{err}");
    // A model on the composite ops (the path of other devices) runs on candle's graph.
    let composite = model.with_kernels(Kernels::Composite);
    assert!(!engine::supports(&composite));
    let err = engine::loss_and_gradients(&composite, (&x, &y), Precision::F32, &mut Mode::Eval)
        .unwrap_err();
    assert!(err.to_string().contains("autograd"), "{err}");
    assert!(CpuDecoder::new(&composite, WeightFormat::fastest())
        .unwrap()
        .is_none());
}
