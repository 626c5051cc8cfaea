//! Sample poems from a trained run: `cargo run --release --bin sample -- --checkpoint DIR --prompt 白日`.

use anyhow::{bail, Context, Result};
use clap::Parser;
use rand::SeedableRng;
use shige::data::tokenizer::NEWLINE;
use shige::sample::{generate, is_well_formed};
use shige::train::checkpoint::load_run;
use std::io::Write;
use std::path::PathBuf;

/// Write poems with a trained model, streaming characters as they are drawn.
#[derive(Parser)]
#[command(
    after_help = "Example:\n  cargo run --release --bin sample -- --checkpoint checkpoints/<run> --prompt 白日"
)]
struct Args {
    /// Run directory written by `train`.
    #[arg(long)]
    checkpoint: PathBuf,
    /// Beginning of the poem (empty: a new poem).
    #[arg(long, default_value = "")]
    prompt: String,
    /// Number of poems.
    #[arg(long, default_value_t = 3)]
    num_samples: usize,
    /// Most characters generated per poem.
    #[arg(long, default_value_t = 120)]
    max_new_tokens: usize,
    /// Sampling temperature (0 = always the most likely character).
    #[arg(long, default_value_t = 0.8)]
    temperature: f64,
    /// Seed: the same seed gives the same text.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Keep going past the end of a poem (by default a newline ends it).
    #[arg(long)]
    no_stop_at_newline: bool,
    /// One JSON object per line per sample, instead of plain text.
    #[arg(long)]
    json: bool,
}

fn main() -> Result<()> {
    shige::perf::keep_freed_memory();
    let args = Args::parse();
    if !(args.temperature >= 0.0 && args.temperature.is_finite()) {
        bail!(
            "--temperature {} must be 0 (greedy) or positive",
            args.temperature
        );
    }
    let run = load_run(&args.checkpoint)?;
    let tokenizer = &run.tokenizer;
    let newline = tokenizer
        .id(NEWLINE)
        .context("the run's tokenizer has no newline token")?;
    let mut prompt = vec![newline];
    prompt.extend(
        tokenizer
            .encode(&args.prompt)
            .context("the prompt cannot be encoded")?,
    );
    let stop = if args.no_stop_at_newline {
        None
    } else {
        Some(newline)
    };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(args.seed);
    let mut well_formed = 0;
    let stdout = std::io::stdout();
    for _ in 0..args.num_samples {
        if !args.json {
            print!("{}", args.prompt);
        }
        let mut stream = |id: u32| {
            if !args.json && Some(id) != stop {
                if let Ok(text) = tokenizer.decode(&[id]) {
                    let mut out = stdout.lock();
                    let _ = write!(out, "{text}");
                    let _ = out.flush();
                }
            }
        };
        let ids = generate(
            &run.model,
            &prompt,
            args.max_new_tokens,
            args.temperature,
            stop,
            &mut rng,
            &mut stream,
        )?;
        let text = format!(
            "{}{}",
            args.prompt,
            tokenizer.decode(&ids)?.trim_end_matches(NEWLINE)
        );
        let ok = is_well_formed(&text);
        well_formed += usize::from(ok);
        if args.json {
            println!("{}", serde_json::json!({ "text": text, "well_formed": ok }));
        } else {
            println!();
        }
    }
    if !args.json && args.num_samples > 1 {
        eprintln!("well-formed verse: {well_formed} of {}", args.num_samples);
    }
    Ok(())
}
