//! Mixed-precision training (bf16 matmul inputs summed in f32): it tracks f32 training of the
//! tiny config, on the CPU's bf16 instructions (AMX tiles or AVX512-BF16) where it has them and
//! through the widened emulation (the same rounded inputs multiplied by the f32 kernels)
//! elsewhere; the trainer takes `dtype = "bf16"` only where the CPU multiplies bf16, and says so
//! otherwise.

mod common;

use candle_core::Device;
use common::{run, tiny_config};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use shige::data::{CharTokenizer, Corpus, RunText, Split, Splits};
use shige::experiments::ablation::{self, AblationOptions, Spec};
use shige::model::Gpt;
use shige::ops::{bf16, Precision};
use shige::train::optim::{clip_scale, AdamWParams, Optimizer, Rates};
use shige::train::shards::Shards;
use std::path::Path;

/// Steps of each run: the tiny model's loss falls from about 6.5 to below 5 in them.
const STEPS: usize = 150;

/// The loss of each of [`STEPS`] training steps of configs/tiny.toml's model on its corpus, with
/// the matmuls in `precision` (same seeds, batches and learning rate for both precisions).
fn losses(precision: Precision) -> Vec<f64> {
    let cfg = tiny_config();
    let corpus = Corpus::load(Path::new(&cfg.data.corpus), cfg.data.kind).unwrap();
    let tokenizer = CharTokenizer::from_text(&corpus.text()).unwrap();
    let model_cfg = shige::config::ModelConfig {
        vocab_size: tokenizer.vocab_size(),
        ..cfg.model.clone()
    };
    let t = model_cfg.block_size;
    let splits = Splits::new(&RunText::from(corpus.clone()), &tokenizer, t).unwrap();
    let (model, varmap) = Gpt::seeded(&model_cfg, 1, &Device::Cpu).unwrap();
    let mut opt = Optimizer::new(
        varmap.data().lock().unwrap().clone(),
        AdamWParams::NANOGPT,
        None,
    )
    .unwrap();
    let shards = Shards::new(2, (8, t)).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    (0..STEPS)
        .map(|_| {
            let (x, y) = splits
                .batch(Split::Train, 8, t, &mut rng, &Device::Cpu)
                .unwrap();
            let dropout = &mut ChaCha8Rng::seed_from_u64(0);
            let (loss, grads) = shards
                .loss_and_gradients((&model, &opt), (&x, &y), precision, dropout)
                .unwrap();
            opt.step(
                &grads,
                Rates {
                    adamw: 3e-3,
                    muon: 0.0,
                },
                clip_scale(grads.norm(), 1.0),
            )
            .unwrap();
            loss
        })
        .collect()
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

#[test]
fn bf16_training_tracks_the_f32_loss_curve() {
    eprintln!(
        "bf16 products on {}",
        match bf16::Hardware::detect() {
            Some(hardware) => hardware.name(),
            None => "the f32 kernels (emulation: this CPU has no AMX-BF16 or AVX512-BF16)",
        }
    );
    let (full, mixed) = (losses(Precision::F32), losses(Precision::Bf16));
    let gaps: Vec<f64> = full
        .iter()
        .zip(&mixed)
        .map(|(a, b)| (a - b).abs())
        .collect();
    let widest = gaps.iter().cloned().fold(0.0, f64::max);
    let tail = STEPS - 20;
    let (end_full, end_mixed) = (mean(&full[tail..]), mean(&mixed[tail..]));
    eprintln!("f32 {end_full:.4}, bf16 {end_mixed:.4} (mean of the last 20 steps); widest step gap {widest:.4}");
    assert!(
        end_full < full[0] - 1.0,
        "the f32 run did not learn: {} → {end_full}",
        full[0]
    );
    // The stated tolerance: the last 20 steps' mean loss within 0.02, every step within 0.05.
    assert!(
        (end_full - end_mixed).abs() < 0.02,
        "bf16 ends at {end_mixed:.4}, f32 at {end_full:.4}"
    );
    assert!(widest < 0.05, "a step's losses differ by {widest:.4}");
    // And the rounding really took place.
    assert!(widest > 1e-5, "bf16 gave the f32 losses exactly");
}

#[test]
fn the_trainer_takes_bf16_only_where_the_cpu_multiplies_bf16() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = tiny_config();
    cfg.train.dtype = Precision::Bf16;
    cfg.train.max_iters = 20;
    cfg.schedule.warmup_iters = 5;
    let result = run(&cfg, &dir.path().join("run"), false, None);
    if let Some(hardware) = bf16::Hardware::detect() {
        let summary =
            result.unwrap_or_else(|e| panic!("bf16 training on {}: {e:#}", hardware.name()));
        assert!(summary.val_loss_whole.is_finite());
        let saved = std::fs::read_to_string(dir.path().join("run/config.toml")).unwrap();
        assert!(
            saved.contains("dtype = \"bf16\""),
            "the run's config does not record its dtype"
        );
        // The command says which instructions multiply.
        let out = common::binary(env!("CARGO_BIN_EXE_train"))
            .args(["--config", "configs/tiny.toml", "--dtype", "bf16"])
            .args(["--max-iters", "2", "--warmup-iters", "0", "--out"])
            .arg(dir.path().join("command"))
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let named = format!("bf16 matmuls on {}", hardware.name());
        assert!(out.status.success() && stderr.contains(&named), "{stderr}");
        assert!(summary.step_path.contains(&named), "{}", summary.step_path);
    } else {
        let message = format!(
            "{:#}",
            result.expect_err("bf16 refused without bf16 hardware")
        );
        assert!(
            message.contains("AVX512-BF16") && message.contains("--dtype f32"),
            "{message}"
        );
        assert!(
            !dir.path().join("run").exists(),
            "a refused run left a directory"
        );
        // An ablation with a bf16 variant is refused before its f32 variant trains.
        let spec = dir.path().join("precision.toml");
        std::fs::write(
            &spec,
            "name = \"p\"\nbase = \"configs/tiny.toml\"\n[[variant]]\nname = \"f32\"\n[[variant]]\nname = \"bf16\"\ntrain = { dtype = \"bf16\" }\n",
        )
        .unwrap();
        let out = dir.path().join("ablation");
        let options = AblationOptions {
            spec: Spec::load(&spec).unwrap(),
            out: out.clone(),
            max_iters: Some(2),
            progress: false,
        };
        let message = format!(
            "{:#}",
            ablation::run(&options).expect_err("bf16 variant refused")
        );
        assert!(
            message.contains("variant `bf16`") && message.contains("AVX512-BF16"),
            "{message}"
        );
        assert!(
            !out.exists(),
            "a refused ablation trained or made its directory"
        );
    }
}
