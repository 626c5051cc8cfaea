//! Prints training, forward and sampling speed and MFU for the default config's model
//! and the course's (the lesson's 4 layers, vocabulary 6,000), the latter also with RoPE, with
//! ALiBi and with dropout.

use anyhow::{bail, Context, Result};
use clap::Parser;
use serde::Serialize;
use shige::config::{ModelConfig, Position, RunConfig};
use shige::machine::Machine;
use shige::measure::{
    bench_model, bf16_matmul_ceiling, matmul_ceiling, op_timings, ModelBench, OpTiming,
};
use shige::ops::{bf16, Precision, WeightFormat};
use shige::{note, out, outln};
use std::path::Path;

/// Measure speed on this machine: matmul ceiling, then training, forward and sampling throughput.
#[derive(Parser)]
#[command(allow_negative_numbers = true)]
struct Args {
    /// Timed training steps per config (after 2 warm-up steps); the median is reported.
    #[arg(long, default_value_t = 10)]
    steps: usize,
    /// Sequences per step.
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    /// Also time each kernel of the training step alone (forward and backward) at the course model's sizes, its matmuls in --dtype (f32 by default)
    #[arg(long)]
    ops: bool,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Measure only this config (default, course, course-rope, course-alibi or course-dropout).
    #[arg(long)]
    only: Option<String>,
    /// Measure only this training precision (f32 or bf16); by default f32, and bf16 too where
    /// the CPU has AMX-BF16 or AVX512-BF16.
    #[arg(long)]
    dtype: Option<Precision>,
}

#[derive(Serialize)]
struct Report {
    machine: Machine,
    matmul_ceiling_gflops: f64,
    /// Where bf16 rows are measured.
    bf16_matmul_ceiling_gflops: Option<f64>,
    models: Vec<ModelBench>,
    ops: Vec<OpTiming>,
}

/// The measured configs, by name: configs/default.toml's model with the shipped corpus's
/// vocabulary (6,668), and the course's model (the lesson's 4 layers, vocabulary 6,000), also with
/// RoPE, ALiBi and dropout.
fn configs() -> Result<Vec<(&'static str, ModelConfig)>> {
    let mut default = RunConfig::load(Path::new("configs/default.toml"))
        .context("the bench measures configs/default.toml's model")?
        .model;
    if default.vocab_size == 0 {
        default.vocab_size = 6668;
    }
    let course = ModelConfig {
        vocab_size: 6000,
        ..Default::default()
    };
    // The course model with the positions that act inside attention.
    let with = |position| ModelConfig {
        position,
        ..course.clone()
    };
    let (rope, alibi) = (with(Position::Rope), with(Position::Alibi));
    let dropout = ModelConfig {
        dropout: 0.1,
        ..course.clone()
    };
    Ok(vec![
        ("default", default),
        ("course", course),
        ("course-rope", rope),
        ("course-alibi", alibi),
        ("course-dropout", dropout),
    ])
}

fn main() -> std::process::ExitCode {
    shige::cli::report(run())
}

fn run() -> Result<()> {
    shige::perf::init();
    let args: Args = shige::cli::parse();
    shige::cli::stdout_is_the_product("the measurements")?;
    if args.steps == 0 || args.batch_size == 0 {
        bail!("--steps and --batch-size must be at least 1 (a median needs a timed step)");
    }
    let configs = configs()?;
    if let Some(only) = &args.only {
        if !configs.iter().any(|(name, _)| name == only) {
            let names: Vec<_> = configs.iter().map(|(name, _)| *name).collect();
            bail!(
                "--only {only}: no such config; the configs are {}",
                names.join(", ")
            );
        }
    }
    let bf16_hardware = bf16::Hardware::detect();
    if args.dtype == Some(Precision::Bf16) && bf16_hardware.is_none() {
        bail!(
            "--dtype bf16: {}, so bf16 training is refused here; measure f32 (the default)",
            shige::machine::no_bf16_why()
        );
    }
    let device = candle_core::Device::Cpu;
    let ceiling = matmul_ceiling(&device)?;
    let bf16_ceiling = if bf16_hardware.is_some() && args.dtype != Some(Precision::F32) {
        Some(rayon::scope(|_| bf16_matmul_ceiling())?)
    } else {
        None
    };
    let dtypes: Vec<(Precision, f64)> = [
        (Precision::F32, Some(ceiling)),
        (Precision::Bf16, bf16_ceiling),
    ]
    .into_iter()
    .filter(|(dtype, _)| args.dtype.is_none_or(|only| only == *dtype))
    .filter_map(|(dtype, c)| Some((dtype, c?)))
    .collect();
    let mut models = Vec::new();
    let chosen = |name: &str| args.only.as_ref().is_none_or(|only| only == name);
    for (name, cfg) in configs.into_iter().filter(|(name, _)| chosen(name)) {
        for &(dtype, ceiling) in &dtypes {
            let name = match dtype {
                Precision::F32 => name.to_string(),
                Precision::Bf16 => format!("{name}-bf16"),
            };
            if !args.json {
                note!(
                    "measuring {name} ({} layers, n_embd {}, vocab {}) …",
                    cfg.n_layer,
                    cfg.n_embd,
                    cfg.vocab_size
                );
            }
            // On a worker of the thread pool, as `train` runs its loop: each op's parallel work
            // then starts on the calling thread instead of being handed over from outside the pool.
            let sizes = (args.batch_size, args.steps);
            models.push(rayon::scope(|_| {
                bench_model(&name, &cfg, dtype, sizes, ceiling)
            })?);
        }
    }
    let ops = if args.ops {
        rayon::scope(|_| op_timings(args.steps, args.dtype.unwrap_or_default()))?
    } else {
        Vec::new()
    };
    let report = Report {
        machine: Machine::detect(),
        matmul_ceiling_gflops: ceiling,
        bf16_matmul_ceiling_gflops: bf16_ceiling,
        models,
        ops,
    };
    if args.json {
        outln!(
            "{}",
            serde_json::to_string(&report).context("cannot write JSON")?
        )?;
        return Ok(());
    }
    out!("{}", text(&report, args.dtype.is_some()).join("\n") + "\n")
}

/// The report as lines of text: the machine, the ceilings, a row per config and the ops' timings.
fn text(report: &Report, one_dtype: bool) -> Vec<String> {
    let mut lines = Vec::new();
    lines.push(report.machine.describe());
    lines.push(format!(
        "float32 matmul ceiling {:.1} GFLOP/s",
        report.matmul_ceiling_gflops
    ));
    match report.bf16_matmul_ceiling_gflops {
        Some(c) => lines.push(format!("bf16 matmul ceiling ({}, packing included) {c:.1} GFLOP/s; bf16 rows: training only (evaluation and sampling do not depend on the training precision)", report.machine.bf16_kernels)),
        None if one_dtype => {}
        None => lines.push(format!("no bf16 rows: {}", shige::machine::no_bf16_why())),
    }
    let cached = format!("cache {}", report.machine.decoder_weights.name());
    lines.push(format!(
        "{:<20}{:>13}{:>11}{:>19}{:>11}{:>11}{:>7}{:>8}",
        "config",
        "train tok/s",
        "fwd tok/s",
        "sample, no cache",
        "cache f32",
        cached,
        "ratio",
        "MFU"
    ));
    let figure = |v: Option<f64>, width: usize| match v {
        Some(v) => format!("{v:>width$.0}"),
        None => format!("{:>width$}", "—"),
    };
    for m in &report.models {
        let ratio = m
            .sample_tokens_per_s_cached
            .zip(m.sample_tokens_per_s_no_cache);
        // Where f32 is the fastest format, its figure is the cached one.
        let cached_f32 = m.sample_tokens_per_s_cached_f32.or(m
            .sample_tokens_per_s_cached
            .filter(|_| report.machine.decoder_weights == WeightFormat::F32));
        lines.push(format!(
            "{:<20}{:>13.0}{}{}{}{}{}{:>7.1}%",
            m.name,
            m.train_tokens_per_s,
            figure(m.forward_tokens_per_s, 11),
            figure(m.sample_tokens_per_s_no_cache, 19),
            figure(cached_f32, 11),
            figure(m.sample_tokens_per_s_cached, 11),
            ratio.map_or(format!("{:>7}", "—"), |(c, n)| format!("{:>6.1}×", c / n)),
            100.0 * m.mfu
        ));
    }
    lines.push(format!(
        "\n{:<20}{:>10}{:>14}{:>10}{:>10}{:>10}",
        "step phases (ms)", "batch", "units' f + b", "sum", "norm", "update"
    ));
    for m in &report.models {
        let p = &m.step_phases;
        lines.push(format!(
            "{:<20}{:>10.2}{:>14.2}{:>10.2}{:>10.2}{:>10.2}",
            m.name, p.batch_ms, p.units_ms, p.sum_ms, p.norm_ms, p.update_ms
        ));
    }
    if !report.ops.is_empty() {
        lines.push(format!(
            "\n{:<46}{:>8}{:>10}{:>14}",
            "op (forward + backward), matmuls in", "ms", "per step", "ms per step"
        ));
        for o in &report.ops {
            lines.push(format!(
                "{:<46}{:>8.1}{:>10}{:>14.1}",
                format!("{} {}", o.op, o.dtype),
                o.ms,
                o.per_step,
                o.ms * o.per_step as f64
            ));
        }
    }
    lines
}
