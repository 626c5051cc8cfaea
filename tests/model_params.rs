//! Parameters: counts, names, seeded initialisation and gradients for every positional scheme.

mod common;

use candle_core::{Device, Tensor};
use rand::SeedableRng;
use shige::config::{ModelConfig, Position};
use shige::model::{Gpt, Mode};
use shige::verse::inputs;

fn count(varmap: &candle_nn::VarMap, prefix: &str) -> usize {
    let data = varmap.data().lock().unwrap();
    data.iter()
        .filter(|(n, _)| n.starts_with(prefix))
        .map(|(_, v)| v.elem_count())
        .sum()
}

#[test]
fn attention_parameter_count_does_not_depend_on_heads() {
    for n_head in [1, 2, 4, 8] {
        let cfg = ModelConfig {
            vocab_size: 30,
            n_layer: 1,
            n_head,
            n_embd: 32,
            ..Default::default()
        };
        let (_, varmap) = Gpt::seeded(&cfg, 0, &Device::Cpu).unwrap();
        assert_eq!(
            count(&varmap, "transformer.h.0.attn.c_attn."),
            3168,
            "{n_head} heads"
        );
        assert_eq!(
            count(&varmap, "transformer.h.0.attn.c_proj."),
            1056,
            "{n_head} heads"
        );
    }
}

#[test]
fn parameter_names_follow_nanogpt() {
    let cfg = common::small_config(30, 2, Position::Learned);
    let (_, varmap) = Gpt::seeded(&cfg, 0, &Device::Cpu).unwrap();
    let data = varmap.data().lock().unwrap();
    let mut names: Vec<&String> = data.keys().collect();
    names.sort();
    for expected in [
        "transformer.wte.weight",
        "transformer.wpe.weight",
        "transformer.h.1.ln_1.weight",
        "transformer.h.1.attn.c_attn.bias",
        "transformer.h.1.attn.c_proj.weight",
        "transformer.h.1.mlp.c_fc.weight",
        "transformer.h.1.mlp.c_proj.bias",
        "transformer.ln_f.bias",
        "lm_head.weight",
    ] {
        assert!(
            data.contains_key(expected),
            "missing {expected} in {names:?}"
        );
    }
    assert_eq!(
        data["transformer.h.0.attn.c_attn.weight"].dims(),
        &[96, 32],
        "Linear weights are [out, in]"
    );
}

#[test]
fn every_parameter_gets_a_gradient_for_every_scheme() {
    for position in Position::ALL {
        for tie_weights in [false, true] {
            let cfg = ModelConfig {
                tie_weights,
                dropout: 0.1,
                inputs: match tie_weights {
                    true => vec!["sound".into()],
                    false => Vec::new(),
                },
                ..common::small_config(30, 2, position)
            };
            let vocabulary = common::vocabulary_of(30);
            let (model, varmap) = Gpt::seeded_with(
                &cfg,
                inputs::for_vocabulary(&cfg, &vocabulary).unwrap(),
                1,
                &Device::Cpu,
            )
            .unwrap();
            let model = model.with_kernels(shige::ops::Kernels::Composite); // differentiable
            let ids: Vec<u32> = (0..32).map(|i| (i * 11 % 30) as u32).collect();
            let x = Tensor::new(&ids[..16], &Device::Cpu)
                .unwrap()
                .reshape((1, 16))
                .unwrap();
            let y = Tensor::new(&ids[1..17], &Device::Cpu)
                .unwrap()
                .reshape((1, 16))
                .unwrap();
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
            let loss = model.loss(&x, &y, &mut Mode::Train(&mut rng)).unwrap();
            let grads = loss.backward().unwrap();
            for (name, var) in varmap.data().lock().unwrap().iter() {
                let grad = grads
                    .get(var.as_tensor())
                    .unwrap_or_else(|| panic!("{position}: no gradient for {name}"));
                let norm: f32 = grad.abs().unwrap().sum_all().unwrap().to_scalar().unwrap();
                assert!(
                    norm > 0.0,
                    "{position} tie={tie_weights}: zero gradient for {name}"
                );
            }
        }
    }
}

#[test]
fn one_seed_gives_identical_weights_and_logits_another_seed_different_ones() {
    let cfg = common::small_config(30, 2, Position::Rope);
    let ids = Tensor::new(&[[1u32, 2, 3, 4, 5]], &Device::Cpu).unwrap();
    let run = |seed| {
        let (model, varmap) = Gpt::seeded(&cfg, seed, &Device::Cpu).unwrap();
        let wte = varmap.data().lock().unwrap()["transformer.wte.weight"]
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let logits = model
            .forward(&ids, &mut Mode::Eval)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        (wte, logits)
    };
    let (a, b, c) = (run(5), run(5), run(6));
    assert_eq!(a, b, "same seed, same weights and logits");
    assert_ne!(a.0, c.0, "another seed, other weights");
    assert_ne!(a.1, c.1, "another seed, other logits");
}

#[test]
fn init_follows_gpt2() {
    let cfg = ModelConfig {
        vocab_size: 500,
        n_layer: 4,
        n_embd: 64,
        ..Default::default()
    };
    let (_, varmap) = Gpt::seeded(&cfg, 0, &Device::Cpu).unwrap();
    let data = varmap.data().lock().unwrap();
    let std = |name: &str| {
        let v = data[name].flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let mean = v.iter().sum::<f32>() / v.len() as f32;
        (v.iter().map(|x| (x - mean).powi(2)).sum::<f32>() / v.len() as f32).sqrt()
    };
    assert!((std("transformer.wte.weight") - 0.02).abs() < 0.001);
    assert!((std("transformer.h.0.mlp.c_fc.weight") - 0.02).abs() < 0.001);
    let residual = 0.02 / (8f32).sqrt();
    assert!((std("transformer.h.0.attn.c_proj.weight") - residual).abs() < 0.0005);
    assert!((std("transformer.h.3.mlp.c_proj.weight") - residual).abs() < 0.0005);
    assert_eq!(std("transformer.h.0.attn.c_attn.bias"), 0.0);
}

/// The count a config gives before any model is built (the GPT's formula and its inputs' rows as
/// `verse::inputs` declares them) is the built model's: every tensor allocated, each input's own
/// (as its reader sizes it) counted apart.
#[test]
fn the_parameter_count_is_the_built_models_with_and_without_inputs() {
    let all = [
        "sound",
        "verse_places",
        "rhyme_memory",
        "rhyme_bias",
        "lead_rhymes",
        "ci_places",
        "ci_rhyme_bias",
    ];
    let cases: [(bool, &[&str], Position); 4] = [
        (false, &[], Position::Learned),
        (true, &all, Position::Rope),
        (false, &["sound"], Position::Learned),
        (false, &["verse_places", "rhyme_memory"], Position::Alibi),
    ];
    for (tie_weights, names, position) in cases {
        let cfg = ModelConfig {
            tie_weights,
            inputs: names.iter().map(|n| n.to_string()).collect(),
            ..common::small_config(30, 2, position)
        };
        let vocabulary = common::vocabulary_of(30);
        let built = inputs::for_vocabulary(&cfg, &vocabulary).unwrap();
        let (_, varmap) = Gpt::seeded_with(&cfg, built.clone(), 0, &Device::Cpu).unwrap();
        let declared = inputs::parameters(&cfg).unwrap();
        assert_eq!(
            cfg.parameter_count() + declared as f64,
            count(&varmap, "") as f64,
            "tie={tie_weights} inputs={names:?}"
        );
        for input in &built {
            let tensor = count(&varmap, &format!("transformer.{}.", input.tensor));
            assert_eq!(input.parameters(cfg.n_embd), tensor, "{}", input.name);
        }
    }
}

#[test]
fn a_new_model_with_sounds_and_places_is_the_model_without_them() {
    // Their rows start at zero and draw nothing from the seed: the same weights, the same logits.
    let ids = Tensor::new(&[[0u32, 2, 3, 27, 5, 6]], &Device::Cpu).unwrap();
    let logits = |with_inputs: bool| {
        let cfg = ModelConfig {
            inputs: match with_inputs {
                true => vec!["sound".into(), "verse_places".into()],
                false => Vec::new(),
            },
            tie_weights: true,
            ..common::small_config(30, 2, Position::Rope)
        };
        let vocabulary = common::vocabulary_of(30);
        let (model, _) = Gpt::seeded_with(
            &cfg,
            inputs::for_vocabulary(&cfg, &vocabulary).unwrap(),
            5,
            &Device::Cpu,
        )
        .unwrap();
        let logits = model.forward(&ids, &mut Mode::Eval).unwrap();
        logits.flatten_all().unwrap().to_vec1::<f32>().unwrap()
    };
    assert_eq!(logits(true), logits(false));
    // Without its vocabulary, a model with sounds is refused with what to do.
    let cfg = ModelConfig {
        inputs: vec!["sound".into()],
        ..common::small_config(30, 2, Position::Rope)
    };
    let err = Gpt::seeded(&cfg, 5, &Device::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("verse::inputs::for_tokenizer"), "{err}");
}

/// Zero-initialised projections (#81): the attention's and the MLP's `c_proj` start at zero (so
/// a block starts as the identity), and every
/// other weight is the one the same seed draws without them.
#[test]
fn zero_initialised_projections_start_at_zero_and_change_nothing_else() {
    let cfg = common::small_config(30, 2, Position::Rope);
    let zero = ModelConfig {
        zero_init_projections: true,
        ..cfg.clone()
    };
    let (_, plain) = Gpt::seeded(&cfg, 5, &Device::Cpu).unwrap();
    let (_, zeroed) = Gpt::seeded(&zero, 5, &Device::Cpu).unwrap();
    let (plain, zeroed) = (plain.data().lock().unwrap(), zeroed.data().lock().unwrap());
    assert_eq!(plain.len(), zeroed.len());
    let mut projections = 0;
    for (name, var) in plain.iter() {
        let values = |v: &candle_core::Var| {
            v.as_tensor()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap()
        };
        let (drawn, other) = (values(var), values(&zeroed[name]));
        if name.ends_with("c_proj.weight") {
            projections += 1;
            assert!(other.iter().all(|&x| x == 0.0), "{name}");
            assert!(drawn.iter().any(|&x| x != 0.0), "{name}");
        } else {
            assert_eq!(drawn, other, "{name}");
        }
    }
    assert_eq!(projections, 4, "two blocks, two projections each");
}
