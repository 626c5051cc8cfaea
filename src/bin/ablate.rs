//! Train the variants of an ablation and compare them:
//! `cargo run --release --bin ablate -- configs/ablations/heads.toml`.

use anyhow::{Context, Result};
use clap::Parser;
use shige::experiments::ablation::{self, AblationOptions, Spec};
use shige::experiments::report;
use shige::files::atomic_write;
use shige::{note, out, outln};
use std::path::PathBuf;
use std::time::Instant;

/// Train every variant of an ablation spec with the same seed and data (or once per seed of the
/// spec's `seeds`), then write a results table (Markdown and CSV) and the validation curves (SVG).
/// Finished runs are reused, and unfinished ones resumed, so an interrupted ablation continues
/// where it stopped.
#[derive(Parser)]
#[command(
    allow_negative_numbers = true,
    after_help = "Specs: configs/ablations/{heads,positions,layers,extrapolation,depth_batch,precision}.toml"
)]
struct Args {
    /// The ablation spec (TOML).
    spec: PathBuf,
    /// Shrink every variant to this many steps (for smoke runs).
    #[arg(long)]
    max_iters: Option<usize>,
    /// Replace the spec's base config (e.g. configs/tiny.toml for a quick check).
    #[arg(long)]
    base: Option<PathBuf>,
    /// Output directory (default checkpoints/ablations/<name>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print the results as JSON instead of Markdown.
    #[arg(long)]
    json: bool,
}

fn main() -> std::process::ExitCode {
    let outcome = run();
    let interrupted = outcome.is_err() && shige::train::interrupt::requested();
    let code = shige::cli::report(outcome);
    match shige::train::interrupt::signal().filter(|_| interrupted) {
        // 128 + the signal, as a shell reports a process that the signal ended (130 for Ctrl-C).
        Some(signal) => std::process::ExitCode::from((128 + signal) as u8),
        None => code,
    }
}

fn run() -> Result<()> {
    shige::perf::init();
    let args: Args = shige::cli::parse();
    let started = Instant::now();
    let mut spec = Spec::load(&args.spec)?;
    if let Some(base) = args.base {
        spec.base = base;
    }
    let out = args
        .out
        .unwrap_or_else(|| PathBuf::from("checkpoints/ablations").join(spec.dir_name()));
    let options = AblationOptions {
        spec,
        out: out.clone(),
        max_iters: args.max_iters,
        progress: !args.json,
    };
    // Ctrl-C or SIGTERM saves the variant in training, as `train` does, and ends the ablation.
    shige::train::interrupt::catch_ctrl_c();
    let results = rayon::scope(|_| ablation::run(&options))?;
    let spec = &options.spec;
    let table = report::markdown(spec, &results);
    let [md, csv, svg] = ablation::RESULT_FILES;
    atomic_write(&out.join(md), table.as_bytes())?;
    atomic_write(&out.join(csv), report::csv(spec, &results).as_bytes())?;
    let title = format!("ablation `{}`: validation loss", spec.name);
    atomic_write(
        &out.join(svg),
        report::curves_svg(&title, &results)?.as_bytes(),
    )?;
    if args.json {
        outln!(
            "{}",
            serde_json::to_string(&results).context("cannot write JSON")?
        )?;
    } else {
        out!("{table}")?;
        note!(
            "{} runs in {:.0} s; results.md, results.csv and curves.svg in {}",
            results.len(),
            started.elapsed().as_secs_f64(),
            out.display()
        );
    }
    Ok(())
}
