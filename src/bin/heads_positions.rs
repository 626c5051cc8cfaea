//! The lesson's experiment: does attention see word order, and what do heads cost?

use anyhow::{Context, Result};
use clap::Parser;
use shige::data::{CharTokenizer, Corpus};
use shige::experiments::heads_positions;
use std::path::PathBuf;

/// Compare "白日依山尽" with "山依日白尽" in untrained models of 1–3 layers and every positional
/// scheme, and show the shapes and parameter counts of multi-head attention.
#[derive(Parser)]
struct Args {
    /// Seed of the random models.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Corpus whose characters make the vocabulary.
    #[arg(long, default_value = shige::data::corpus::DEFAULT_CORPUS)]
    corpus: PathBuf,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
}

fn main() -> std::process::ExitCode {
    shige::cli::report(run())
}

fn run() -> Result<()> {
    shige::perf::init();
    let args = Args::parse();
    let corpus = Corpus::load(&args.corpus)?;
    let tokenizer = CharTokenizer::from_text(&corpus.text())?;
    let report = heads_positions::run(&tokenizer, args.seed)?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&report).context("cannot write JSON")?
        );
    } else {
        print!("{}", report.render());
    }
    Ok(())
}
