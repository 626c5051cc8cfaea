//! The lesson's experiment: does attention see word order, and what do heads cost?

use anyhow::{Context, Result};
use clap::Parser;
use shige::data::{CharTokenizer, Corpus};
use shige::experiments::{attention_maps, lesson};
use shige::train::load::load_run;
use shige::{note, out, outln};
use std::path::{Path, PathBuf};

/// Compare "白日依山尽" with "山依日白尽" in untrained models of 1–3 layers and every positional
/// scheme, and show the shapes and parameter counts of multi-head attention. With --checkpoint,
/// ask the same of a trained model; with --plot, draw attention heatmaps and the sinusoidal table.
#[derive(Parser)]
#[command(allow_negative_numbers = true)]
struct Args {
    /// Seed of the random models.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Corpus whose characters make the vocabulary.
    #[arg(long, default_value = shige::data::DEFAULT_CORPUS)]
    corpus: PathBuf,
    /// A trained run directory to test instead of random models.
    #[arg(long)]
    checkpoint: Option<PathBuf>,
    /// Write SVG heatmaps into this directory: the sinusoidal table, and with --checkpoint each
    /// layer's attention weights over --poem.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// The poem whose attention --plot draws (with --checkpoint).
    #[arg(
        long,
        requires_all = ["plot", "checkpoint"],
        default_value = "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。"
    )]
    poem: String,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
}

fn main() -> std::process::ExitCode {
    shige::cli::report(run())
}

fn run() -> Result<()> {
    shige::perf::init();
    let args: Args = shige::cli::parse();
    shige::cli::stdout_is_the_product("the report")?;
    match &args.checkpoint {
        Some(checkpoint) => ask_trained(&args, checkpoint),
        None => ask_untrained(&args),
    }
}

/// The lesson's question asked of the trained run in `checkpoint`, with --plot its attention
/// maps over --poem. Nothing is written before the run and the poem are known to be good.
fn ask_trained(args: &Args, checkpoint: &Path) -> Result<()> {
    let run = load_run(checkpoint)?;
    let diff = lesson::order_diff(&run.model, &run.tokenizer)?;
    let (sentence, shuffled) = lesson::order_pair(&run.tokenizer)?;
    if let Some(dir) = &args.plot {
        let files = attention_maps::plot_files(Some(run.config.model.n_layer));
        attention_maps::check_plot_dir(dir, &files)?;
        let maps =
            attention_maps::write_attention_maps(&run.model, &run.tokenizer, &args.poem, dir)?;
        write_sinusoidal_map(dir)?;
        for path in maps {
            note!("wrote {}", path.display());
        }
    }
    let m = &run.config.model;
    if args.json {
        outln!(
            "{}",
            serde_json::json!({ "checkpoint": checkpoint, "n_layer": m.n_layer, "position": m.position, "sentence": sentence, "shuffled": shuffled, "diff": diff })
        )?;
    } else {
        outln!(
            "{} ({} layer{}, {} positions): max |logits({sentence}) − logits({shuffled})| at the last position = {diff:.2e}",
            checkpoint.display(),
            m.n_layer,
            if m.n_layer == 1 { "" } else { "s" },
            m.position
        )?;
    }
    Ok(())
}

/// The lesson's experiment on untrained models over the corpus's characters; with --plot the
/// sinusoidal table.
fn ask_untrained(args: &Args) -> Result<()> {
    if let Some(dir) = &args.plot {
        attention_maps::check_plot_dir(dir, &attention_maps::plot_files(None))?;
    }
    let corpus = Corpus::load(&args.corpus, shige::config::CorpusKind::Auto)?;
    let tokenizer = CharTokenizer::from_text(&corpus.text())?;
    let report = lesson::run(&tokenizer, args.seed)?;
    if let Some(dir) = &args.plot {
        write_sinusoidal_map(dir)?;
    }
    if args.json {
        outln!(
            "{}",
            serde_json::to_string(&report).context("cannot write JSON")?
        )?;
    } else {
        out!("{}", report.render())?;
    }
    Ok(())
}

/// Draws the sinusoidal table (64 positions × 128 dimensions) into `dir`/sinusoidal.svg.
fn write_sinusoidal_map(dir: &Path) -> Result<()> {
    let path = dir.join("sinusoidal.svg");
    shige::files::create_dir(dir, "--plot")?;
    attention_maps::write_sinusoidal_map(64, 128, &path)?;
    note!("wrote {}", path.display());
    Ok(())
}
