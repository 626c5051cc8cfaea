//! Speed measurements: training, forward and sampling throughput, and model FLOPs utilisation
//! against this machine's measured float32 matmul ceiling.

use crate::config::ModelConfig;
use crate::model::{Gpt, Mode};
use crate::ops::Precision;
use crate::ops::WeightFormat;
use crate::sample::{Generation, Generator, Sampling};
use crate::train::optim::{clip_scale, AdamWParams, Optimizer, Rates};
use crate::train::shards::Shards;
use crate::verse::inputs::Vocabulary;
use anyhow::Result;
use candle_core::{Device, Tensor};
use candle_nn::VarMap;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::time::Instant;

/// The median of some timings, in seconds (NaN when there are none).
pub fn median(mut times: Vec<f64>) -> f64 {
    times.sort_by(|a, b| a.total_cmp(b));
    times.get(times.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The shapes the matmul ceilings are measured on: square and the model's own.
const CEILING_SHAPES: [(usize, usize, usize); 4] = [
    (1024, 1024, 1024),
    (4096, 128, 512),
    (4096, 512, 128),
    (2048, 2048, 2048),
];

/// The best matmul rate of `product` (m, k, n → one product) in GFLOP/s over [`CEILING_SHAPES`].
fn ceiling(
    mut product: impl FnMut(usize, usize, usize) -> Result<Box<dyn FnMut() -> Result<()>>>,
) -> Result<f64> {
    let mut best: f64 = 0.0;
    for (m, k, n) in CEILING_SHAPES {
        let mut run = product(m, k, n)?;
        run()?;
        let times = (0..5)
            .map(|_| -> Result<f64> {
                let t = Instant::now();
                run()?;
                Ok(t.elapsed().as_secs_f64())
            })
            .collect::<Result<Vec<_>>>()?;
        best = best.max(2.0 * (m * k * n) as f64 / median(times) / 1e9);
    }
    Ok(best)
}

/// The best float32 matmul rate of this machine in GFLOP/s, over square and model-shaped products.
pub fn matmul_ceiling(device: &Device) -> Result<f64> {
    ceiling(|m, k, n| {
        let a = Tensor::randn(0f32, 1.0, (m, k), device)?;
        let b = Tensor::randn(0f32, 1.0, (k, n), device)?;
        Ok(Box::new(move || {
            a.matmul(&b)?;
            Ok(())
        }))
    })
}

/// The same for the bf16 matmuls of mixed-precision training (rounding and packing included).
pub fn bf16_matmul_ceiling() -> Result<f64> {
    use crate::ops::{bf16, matmul_f32::Operand};
    ceiling(|m, k, n| {
        let (a, b) = (vec![0.5f32; m * k], vec![0.25f32; k * n]);
        let mut dst = vec![0f32; m * n];
        let threads = rayon::current_num_threads();
        Ok(Box::new(move || {
            let (lhs, rhs) = (Operand::rows(&a, k), Operand::rows(&b, n));
            bf16::matmul(&mut dst, m, n, k, lhs, rhs, false, threads);
            Ok(())
        }))
    })
}

/// Training FLOPs per token, as nanoGPT's `estimate_mfu`: 6 per weight of the matmuls, plus the
/// attention's 12·n_layer·n_embd·block_size.
pub fn flops_per_token(cfg: &ModelConfig) -> f64 {
    let (c, l, v) = (cfg.n_embd as f64, cfg.n_layer as f64, cfg.vocab_size as f64);
    let weights = l * 12.0 * c * c + v * c;
    6.0 * weights + 12.0 * l * c * cfg.block_size as f64
}

/// The figures for one model config.
#[derive(Debug, Serialize)]
pub struct ModelBench {
    /// Which config.
    pub name: String,
    /// The inputs of the training step's matmuls.
    pub dtype: Precision,
    /// Sequences per step.
    pub batch_size: usize,
    /// The config measured.
    pub config: ModelConfig,
    /// Training tokens per second (median step: batch, forward, backward, clipping, AdamW).
    pub train_tokens_per_s: f64,
    /// Forward-only tokens per second (median, no backward). Evaluation and generation do not
    /// depend on the training precision, so bf16 rows leave this and the sampling figures out.
    pub forward_tokens_per_s: Option<f64>,
    /// Generated tokens per second over 200 tokens, recomputing the whole context each token
    /// (median of 7 rounds, alternating with the cached measurement).
    pub sample_tokens_per_s_no_cache: Option<f64>,
    /// Generated tokens per second over 200 tokens with the key/value cache, the weights packed
    /// in this CPU's fastest format, `Machine::decoder_weights` (median of 7 rounds; the packing
    /// of each generation included).
    pub sample_tokens_per_s_cached: Option<f64>,
    /// The same with the weights in f32, where the fastest format is another.
    pub sample_tokens_per_s_cached_f32: Option<f64>,
    /// Model FLOPs utilisation of training against the measured matmul ceiling of its precision.
    pub mfu: f64,
    /// Where the median training step's time goes, phase by phase.
    pub step_phases: StepPhases,
}

/// Median milliseconds of each phase of a training step: what runs in parallel (the units'
/// forward and backward passes) and what runs after them.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StepPhases {
    /// Drawing the batch.
    pub batch_ms: f64,
    /// Forward and backward over the units, the threads taking one unit at a time.
    pub units_ms: f64,
    /// The units' gradients summed (each chunk on one thread, over every unit in turn).
    pub sum_ms: f64,
    /// The gradients' global norm, for clipping.
    pub norm_ms: f64,
    /// The optimiser's update of every parameter.
    pub update_ms: f64,
}

impl StepPhases {
    /// The medians of each phase over `steps`.
    fn medians(steps: &[[f64; 5]]) -> Self {
        let phase = |k: usize| 1e3 * median(steps.iter().map(|s| s[k]).collect());
        StepPhases {
            batch_ms: phase(0),
            units_ms: phase(1),
            sum_ms: phase(2),
            norm_ms: phase(3),
            update_ms: phase(4),
        }
    }
}

/// Tokens generated in each sampling measurement.
const SAMPLED_TOKENS: usize = 200;

/// Alternating rounds of sampling without and with the cache; the medians are reported.
const SAMPLING_ROUNDS: usize = 7;

/// Random (B, T) batches of inputs and their next tokens.
struct RandomBatches {
    rng: ChaCha8Rng,
    batch_size: usize,
    block_size: usize,
    vocab_size: u32,
}

impl RandomBatches {
    fn next(&mut self) -> Result<(Tensor, Tensor)> {
        let (b, t) = (self.batch_size, self.block_size);
        let ids: Vec<u32> = (0..b * (t + 1))
            .map(|_| self.rng.random_range(0..self.vocab_size))
            .collect();
        let all = Tensor::from_vec(ids, (b, t + 1), &Device::Cpu)?;
        Ok((
            all.narrow(1, 0, t)?.contiguous()?,
            all.narrow(1, 1, t)?.contiguous()?,
        ))
    }
}

/// Median seconds of `steps` training steps (matmuls in `precision`) after 2 warm-up steps, and
/// the median of each of their phases.
fn train_step_time(
    (model, varmap): (&Gpt, &VarMap),
    precision: Precision,
    batches: &mut RandomBatches,
    steps: usize,
) -> Result<(f64, StepPhases)> {
    let vars = varmap.data().lock().expect("parameter map").clone();
    let mut opt = Optimizer::new(vars, AdamWParams::NANOGPT, None)?;
    let shape = (batches.batch_size, batches.block_size);
    let shards = Shards::for_device(model.device(), shape)?;
    let (mut times, mut phases) = (Vec::new(), Vec::new());
    for i in 0..steps + 2 {
        let start = Instant::now();
        let mut lap = {
            let mut last = start;
            move || {
                let now = Instant::now();
                (now - std::mem::replace(&mut last, now)).as_secs_f64()
            }
        };
        let (x, y) = batches.next()?;
        let batch = lap();
        let dropout = &mut ChaCha8Rng::seed_from_u64(0);
        let parts = shards.unit_gradients((model, &opt), (&x, &y), precision, dropout)?;
        let units = lap();
        let (_, grads) = shards.sum(parts);
        let sum = lap();
        let norm = grads.norm();
        let norm_time = lap();
        let lr = Rates {
            adamw: 1e-4,
            muon: 0.0,
        };
        opt.step(&grads, lr, clip_scale(norm, 1.0))?;
        let update = lap();
        if i >= 2 {
            times.push(start.elapsed().as_secs_f64());
            phases.push([batch, units, sum, norm_time, update]);
        }
    }
    Ok((median(times), StepPhases::medians(&phases)))
}

/// Tokens per second of inference: the forward pass, and sampling.
struct InferenceRates {
    forward: f64,
    no_cache: f64,
    cached: f64,
    /// `None` where f32 is the fastest format.
    cached_f32: Option<f64>,
}

/// Tokens per second of the forward pass, and of sampling without the cache and with it (the
/// weights in the fastest format, and in f32).
fn inference_rates(
    model: &Gpt,
    batches: &mut RandomBatches,
    steps: usize,
) -> Result<InferenceRates> {
    let mut forward_times = Vec::new();
    for _ in 0..steps.max(3) {
        let (x, _) = batches.next()?;
        let start = Instant::now();
        let _ = model.forward(&x, &mut Mode::Eval)?;
        forward_times.push(start.elapsed().as_secs_f64());
    }
    let tokens = (batches.batch_size * batches.block_size) as f64;
    let rng = &mut batches.rng;
    let fastest = WeightFormat::fastest();
    // A new generator each time: the weights are packed for each generation.
    let mut sample_rate = |use_cache, format| -> Result<f64> {
        let gen = Generation {
            use_cache,
            ..Generation::new(SAMPLED_TOKENS, Sampling::with_temperature(1.0), None)
        };
        let start = Instant::now();
        Generator::with_weights(model, format).generate(&[0], &gen, rng, &mut |_| {})?;
        Ok(SAMPLED_TOKENS as f64 / start.elapsed().as_secs_f64())
    };
    let (mut no_cache, mut cached, mut cached_f32) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..SAMPLING_ROUNDS {
        no_cache.push(sample_rate(false, fastest)?);
        cached.push(sample_rate(true, fastest)?);
        if fastest != WeightFormat::F32 {
            cached_f32.push(sample_rate(true, WeightFormat::F32)?);
        }
    }
    Ok(InferenceRates {
        forward: tokens / median(forward_times),
        no_cache: median(no_cache),
        cached: median(cached),
        cached_f32: (!cached_f32.is_empty()).then(|| median(cached_f32)),
    })
}

/// A vocabulary for random tokens, so that models with verse inputs run too: the newline, the
/// line-ending punctuation, then ideographs from U+4E00 on.
fn random_vocabulary(size: usize) -> Vocabulary {
    let ideographs = (0x4E00..).filter_map(char::from_u32);
    let chars = std::iter::once('\n')
        .chain(crate::data::poem::PUNCTUATION)
        .chain(ideographs);
    Vocabulary::new(chars.zip(0..size as u32))
}

/// Measures one config on random tokens: `steps` timed training steps after 2 warm-up steps with
/// the matmuls in `dtype`, then (f32 only) the forward pass and sampling. `ceiling_gflops` is the
/// matmul ceiling of `dtype`.
pub fn bench_model(
    name: &str,
    cfg: &ModelConfig,
    dtype: Precision,
    (batch_size, steps): (usize, usize),
    ceiling_gflops: f64,
) -> Result<ModelBench> {
    let vocabulary = random_vocabulary(cfg.vocab_size);
    let inputs = crate::verse::inputs::for_vocabulary(cfg, &vocabulary)?;
    let input_parameters = crate::model::inputs::parameters(&inputs, cfg.n_embd) as f64;
    cfg.check_training_memory(batch_size, input_parameters)?;
    let (model, varmap) = Gpt::seeded_with(cfg, inputs, 0, &Device::Cpu)?;
    let mut batches = RandomBatches {
        rng: ChaCha8Rng::seed_from_u64(0),
        batch_size,
        block_size: cfg.block_size,
        vocab_size: cfg.vocab_size as u32,
    };
    let (step_time, step_phases) = train_step_time((&model, &varmap), dtype, &mut batches, steps)?;
    let train_rate = (batch_size * cfg.block_size) as f64 / step_time;
    let inference = match dtype {
        Precision::F32 => Some(inference_rates(&model, &mut batches, steps)?),
        Precision::Bf16 => None,
    };
    Ok(ModelBench {
        name: name.to_string(),
        dtype,
        batch_size,
        config: cfg.clone(),
        train_tokens_per_s: train_rate,
        forward_tokens_per_s: inference.as_ref().map(|r| r.forward),
        sample_tokens_per_s_no_cache: inference.as_ref().map(|r| r.no_cache),
        sample_tokens_per_s_cached: inference.as_ref().map(|r| r.cached),
        sample_tokens_per_s_cached_f32: inference.as_ref().and_then(|r| r.cached_f32),
        mfu: train_rate * flops_per_token(cfg) / (ceiling_gflops * 1e9),
        step_phases,
    })
}

/// Forward + backward time of one op at the course model's sizes.
#[derive(Debug, Serialize)]
pub struct OpTiming {
    /// The op and its shape.
    pub op: String,
    /// Median milliseconds for forward and backward.
    pub ms: f64,
    /// How often one training step runs it.
    pub per_step: usize,
    /// The inputs of its matmuls.
    pub dtype: Precision,
}

/// Times each kernel of the engine's training step (forward and backward) alone, at batch 32 ×
/// 128 positions, n_embd 128, vocabulary 6,000, 4 heads, with the matmuls' inputs in `precision`.
pub fn op_timings(runs: usize, precision: Precision) -> Result<Vec<OpTiming>> {
    use crate::ops::attention::{qkv_backward, qkv_forward, Heads};
    use crate::ops::{gelu, layer_norm, linear, lm_head_loss};
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let mut random =
        |len: usize| -> Vec<f32> { (0..len).map(|_| rng.random::<f32>() * 2.0 - 1.0).collect() };
    let time = |f: &dyn Fn()| -> f64 {
        let mut times = Vec::new();
        for _ in 0..runs + 1 {
            let start = Instant::now();
            f();
            times.push(start.elapsed().as_secs_f64() * 1e3);
        }
        median(times[1..].to_vec())
    };
    let (n, c, v) = (32 * 128, 128, 6000);
    let (x, dy, x4, dy4) = (
        random(n * c),
        random(n * c),
        random(n * 4 * c),
        random(n * 4 * c),
    );
    let (w_fc, b_fc, w_head) = (random(4 * c * c), random(4 * c), random(v * c));
    let (ln_w, ln_b, qkv) = (random(c), random(c), random(n * 3 * c));
    let targets: Vec<u32> = (0..n as u32).map(|i| i * 13 % v as u32).collect();
    let heads = Heads {
        n_head: 4,
        scale: 0.17,
        slopes: None,
        masks: None,
    };
    Ok(vec![
        OpTiming {
            op: "linear 128→512 (c_fc)".into(),
            ms: time(&|| {
                let _y = linear::forward(&x, &w_fc, Some(&b_fc), 4 * c, precision);
                let (mut dx, mut dw, mut db) =
                    (vec![0.0; n * c], vec![0.0; 4 * c * c], vec![0.0; 4 * c]);
                linear::backward_into(
                    (&x, &w_fc, &dy4),
                    4 * c,
                    &mut dx,
                    &mut dw,
                    Some(&mut db),
                    precision,
                );
            }),
            per_step: 4,
            dtype: precision,
        },
        OpTiming {
            op: "lm_head + cross-entropy 128→6000".into(),
            ms: time(&|| {
                lm_head_loss::loss_and_gradients(&x, &w_head, &targets, c, true, precision);
            }),
            per_step: 1,
            dtype: precision,
        },
        OpTiming {
            op: "layer norm 4096×128".into(),
            ms: time(&|| {
                let _y = layer_norm::forward(&x, &ln_w, &ln_b, 1e-5);
                let mut dx = vec![0.0; n * c];
                layer_norm::backward_into(&x, &ln_w, &dy, 1e-5, &mut dx, false);
            }),
            per_step: 9,
            dtype: precision,
        },
        OpTiming {
            op: "gelu 4096×512".into(),
            ms: time(&|| {
                let mut slope = x4.clone();
                let _y = gelu::forward_keeping_slope(&mut slope);
                crate::ops::activation::backward_in_place(&slope, &mut dy4.clone());
            }),
            per_step: 4,
            dtype: precision,
        },
        OpTiming {
            op: "causal attention on qkv 32×128×384, 4 heads".into(),
            ms: time(&|| {
                let (_y, weights) = qkv_forward(&qkv, (128, c), &heads);
                qkv_backward(&qkv, &dy, &weights, (128, c), &heads);
            }),
            per_step: 4,
            dtype: precision,
        },
    ])
}
