//! Train a GPT on the poetry corpus: `cargo run --release --bin train`.

use anyhow::{bail, Context, Result};
use clap::Parser;
use shige::config::{CorpusKind, OptimizerKind, Override, Position, RunConfig, ScheduleKind};
use shige::train::{parent::Parent, run_dir::RunDir, train, TrainOptions};
use std::path::PathBuf;

/// Train a character-level GPT on classical Chinese poems.
///
/// With no arguments: the default config (configs/default.toml) on the shipped corpus, written to
/// checkpoints/default-<time>/. Flags override single values of the config file.
#[derive(Parser)]
#[command(
    allow_negative_numbers = true,
    after_help = "Examples:\n  cargo run --release --bin train\n  \
cargo run --release --bin train -- --config configs/tiny.toml --out checkpoints/tiny\n  \
cargo run --release --bin train -- --resume checkpoints/tiny --max-iters 400"
)]
struct Args {
    /// Config file (TOML with [model], [data], [train], [optimizer] and [schedule] tables; or
    /// `base = "configs/default.toml"` and only the keys it changes, bases up to 8 deep).
    /// Default: configs/default.toml, or the saved config of the run given to --resume.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Run directory to write. Default: checkpoints/<config name>-<date>-<time>.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Continue the run in this directory from its last checkpoint.
    #[arg(long, conflicts_with = "out")]
    resume: Option<PathBuf>,
    /// Stop after this step with a checkpoint, as if interrupted (resume later with --resume).
    #[arg(long)]
    stop_at: Option<usize>,
    /// Print one JSON object with the results at the end (progress goes to stderr).
    #[arg(long)]
    json: bool,
    /// Print the config the run would train, whole (its base's keys and the flags applied), as
    /// TOML, and train nothing.
    #[arg(long, conflicts_with_all = ["out", "stop_at", "json", "init_from", "resume"])]
    print_config: bool,
    /// Total optimiser steps.
    #[arg(long)]
    max_iters: Option<usize>,
    /// Steps between evaluations and checkpoints.
    #[arg(long)]
    eval_interval: Option<usize>,
    /// Steps of linear learning-rate warm-up (at most --max-iters).
    #[arg(long)]
    warmup_iters: Option<usize>,
    /// Validation batches per evaluation.
    #[arg(long)]
    eval_iters: Option<usize>,
    /// Sequences per step.
    #[arg(long)]
    batch_size: Option<usize>,
    /// Peak learning rate.
    #[arg(long)]
    learning_rate: Option<f64>,
    /// Seed of the weights, batches and dropout.
    #[arg(long)]
    seed: Option<u64>,
    /// Corpus file: verse (one poem per line), one item per line, or running text.
    #[arg(long)]
    corpus: Option<String>,
    /// What the corpus holds: auto (chosen from the file), verse, lines or text.
    #[arg(long)]
    corpus_kind: Option<CorpusKind>,
    /// Context length in characters.
    #[arg(long)]
    block_size: Option<usize>,
    /// Transformer blocks.
    #[arg(long)]
    n_layer: Option<usize>,
    /// Attention heads.
    #[arg(long)]
    n_head: Option<usize>,
    /// Width of the residual stream.
    #[arg(long)]
    n_embd: Option<usize>,
    /// Positional scheme.
    #[arg(long, value_parser = position_names())]
    position: Option<Position>,
    /// Dropout probability.
    #[arg(long)]
    dropout: Option<f64>,
    /// Device: cpu, cuda, cuda:N or metal (GPUs need a build with `--features cuda` or `metal`).
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Matmul inputs of the training step: f32, or bf16 (mixed precision; CPUs with AMX-BF16 or AVX512-BF16).
    #[arg(long)]
    dtype: Option<shige::ops::Precision>,
    /// Use candle's composite ops instead of the fused CPU kernels (the path GPUs take; slower).
    #[arg(long)]
    no_fused: bool,
    /// Optimiser: adamw, or muon (Muon for the blocks' weight matrices, AdamW for the rest).
    #[arg(long)]
    optimizer: Option<OptimizerKind>,
    /// Muon's peak learning rate.
    #[arg(long)]
    muon_learning_rate: Option<f64>,
    /// Learning-rate schedule after the warm-up: wsd (held, then a linear decay over the last
    /// decay_fraction of the steps; the default config's), or cosine.
    #[arg(long)]
    schedule: Option<ScheduleKind>,
    /// Train for this many minutes of wall time: the step count is planned from the step rate of
    /// the warm-up, re-planned at each evaluation until the schedule's last stretch, and saved in
    /// the run as its max_iters (best with wsd, whose held peak does not depend on it). Without
    /// --config: the largest recipe of the ladder (configs/ladder/) whose steps this machine runs
    /// in that time, each timed here on a few steps, with the loss it reached.
    #[arg(long, conflicts_with = "max_iters")]
    minutes: Option<f64>,
    /// Start from the weights of this trained run (fine-tuning): a new run at step 0, on this
    /// run's corpus and recipe, with the parent's model and its vocabulary extended by the new
    /// corpus's characters.
    #[arg(long, value_name = "RUN", conflicts_with = "resume")]
    init_from: Option<PathBuf>,
    /// Save a checkpoint and stop, as Ctrl-C does, when standard input closes: the page's server
    /// starts its runs so, so that a run is saved whichever way the server ends.
    #[arg(long)]
    stop_with_parent: bool,
    /// Change any setting of the config: section.key=value, e.g. --set optimizer.weight_decay=0.05
    /// --set model.position=alibi --set 'model.inputs=["verse_places"]' (the model's inputs
    /// besides its tokens, a list that replaces the config's) (repeatable; applied after the flags above, which are
    /// shortcuts for their keys).
    #[arg(long, value_name = "SECTION.KEY=VALUE")]
    set: Vec<String>,
    /// The switches of the model's inputs before they were a list (refused, saying how).
    #[arg(long = "sound", hide = true, num_args = 0..=1)]
    old_sound: Option<Option<String>>,
    #[arg(long = "verse-places", hide = true, num_args = 0..=1)]
    old_verse_places: Option<Option<String>>,
    #[arg(long = "rhyme-memory", hide = true, num_args = 0..=1)]
    old_rhyme_memory: Option<Option<String>>,
    #[arg(long = "rhyme-bias", hide = true, num_args = 0..=1)]
    old_rhyme_bias: Option<Option<String>>,
}

/// Refuses the old switches of the model's inputs, saying how to give them now: the list of the
/// config that would run, with the input added (or, for `false`, taken out).
fn refuse_old_switches(a: &Args) -> Result<()> {
    let switches = [
        ("sound", &a.old_sound),
        ("verse_places", &a.old_verse_places),
        ("rhyme_memory", &a.old_rhyme_memory),
        ("rhyme_bias", &a.old_rhyme_bias),
    ];
    let Some((name, given)) = switches.iter().find(|(_, given)| given.is_some()) else {
        return Ok(());
    };
    let flag = format!("--{}", name.replace('_', "-"));
    let on = !matches!(given, Some(Some(value)) if value == "false");
    let path = config_path(a).unwrap_or_else(|_| PathBuf::from("configs/default.toml"));
    let Ok(cfg) = RunConfig::load(&path) else {
        bail!("{flag} is no flag now: the model's inputs are a list, [model] inputs, e.g. --set 'model.inputs=[\"verse_places\", \"{name}\"]' (it replaces the config's list)");
    };
    let mut inputs = cfg.model.inputs.clone();
    let holds = inputs.iter().any(|i| i == name);
    if holds == on {
        bail!(
            "{flag} is no flag now, and {} has {name} {} already: leave {flag} out",
            path.display(),
            if on {
                "among its inputs"
            } else {
                "out of its inputs"
            }
        );
    }
    match on {
        true => inputs.push(name.to_string()),
        false => inputs.retain(|i| i != name),
    }
    let list: Vec<String> = inputs.iter().map(|i| format!("\"{i}\"")).collect();
    bail!(
        "{flag} is no flag now: the model's inputs are a list, [model] inputs; for {}'s with {name} {}: --set 'model.inputs=[{}]'",
        path.display(),
        if on { "added" } else { "taken out" },
        list.join(", ")
    )
}

/// A run name from the config file's stem and the current UTC time: `default-20261129-130501`.
fn default_run_dir(config: &std::path::Path) -> PathBuf {
    let stem = config.file_stem().and_then(|s| s.to_str()).unwrap_or("run");
    let now = shige::clock::UtcTime::now().compact();
    PathBuf::from("checkpoints").join(format!("{stem}-{now}"))
}

/// Prints the config `args` give, whole, as TOML (its values checked as the run reads them, with
/// the corpus; the ladder's choice needs timing: without --config it is the default's).
fn print_config(args: &Args, overrides: &[Override]) -> Result<()> {
    let cfg = RunConfig::load_with(&config_path(args)?, overrides)?.spelled_out();
    let mut checked = cfg.clone();
    if checked.model.vocab_size == 0 {
        checked.model.vocab_size = 1; // taken from the corpus when the run starts
    }
    checked.validate()?;
    if args.config.is_none() && cfg.train.minutes.is_some() {
        shige::note!("note: without --config, `train --minutes` trains the ladder's rung it times here (configs/ladder/); this is configs/default.toml with the minutes");
    }
    shige::cli::stdout_is_the_product("the config")?;
    shige::outln!("{}", cfg.to_toml()?.trim_end())?;
    Ok(())
}

fn main() -> std::process::ExitCode {
    shige::cli::report(run())
}

fn run() -> Result<()> {
    let started = std::time::Instant::now(); // the clock of --minutes
    shige::perf::init();
    let args: Args = shige::cli::parse();
    refuse_old_switches(&args)?;
    if cfg!(debug_assertions) {
        shige::note!("note: debug build (optimised, with overflow checks); the README's figures come from `cargo run --release --bin train`");
    }
    let device = shige::device::open(&args.device)?;
    let kernels = match args.no_fused {
        true => shige::ops::Kernels::Composite,
        false => shige::ops::Kernels::Fused,
    };
    let overrides = overrides(&args)?;
    if args.print_config {
        return print_config(&args, &overrides);
    }
    let given_config = args.config.is_some() || args.resume.is_some() || args.init_from.is_some();
    let config_path = match shige::train::ladder::applies(given_config, &overrides) {
        Some((minutes, dtype)) => {
            // Refused before the rungs are timed: a folder that cannot take a new run.
            if let Some(out) = &args.out {
                let out = RunDir::new(out.clone());
                out.check_not_in_use("another --out")?;
                out.check_fresh()?;
            }
            PathBuf::from(shige::train::ladder::config_for_minutes(
                minutes, dtype, &device, kernels,
            )?)
        }
        None => config_path(&args)?,
    };
    let parent = args.init_from.as_deref().map(Parent::open).transpose();
    let parent = parent.context("--init-from needs a trained run")?;
    let cfg = match &parent {
        Some(parent) => parent.config_for(&config_path, &overrides)?,
        None => RunConfig::load_with(&config_path, &overrides)?,
    };
    let eval_iters = cfg.train.eval_iters;
    let options = TrainOptions {
        config: cfg,
        run: RunDir::new(
            args.resume
                .clone()
                .or(args.out.clone())
                .unwrap_or_else(|| default_run_dir(&config_path)),
        ),
        resume: args.resume.is_some(),
        stop_at: args.stop_at,
        progress: true,
        device,
        kernels,
        parent,
        clock: Some(started),
    };
    shige::train::interrupt::catch_ctrl_c();
    if args.stop_with_parent {
        std::thread::spawn(|| {
            // Nothing is sent: the read ends when the parent closes the pipe or is gone.
            let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
            shige::train::interrupt::request(shige::train::interrupt::SIGTERM);
        });
    }
    // On a worker of the thread pool, the ops' parallel loops start without a hand-over.
    let summary = rayon::scope(|_| train(options))?;
    report(&summary, args.json, eval_iters)?;
    if summary.interrupted {
        // 128 + the signal, as a shell reports a process that the signal ended (130 for Ctrl-C).
        let signal = shige::train::interrupt::signal().unwrap_or(shige::train::interrupt::SIGINT);
        std::process::exit(128 + signal);
    }
    Ok(())
}

/// The config file to read: --config, else the saved config of the run to --resume, else the
/// default one.
fn config_path(args: &Args) -> Result<PathBuf> {
    let dir = match (&args.config, &args.resume) {
        (Some(path), _) => return Ok(path.clone()),
        (None, None) => return Ok(PathBuf::from("configs/default.toml")),
        (None, Some(dir)) => dir,
    };
    let file = shige::train::run_dir::CONFIG_FILE;
    RunDir::new(dir).check_present()?;
    if !dir.join(file).exists() {
        bail!(
            "{} holds no run to resume (no {file}): start one with --out {}",
            dir.display(),
            shige::cli::shell_word(dir)
        );
    }
    shige::files::check_replaceable(&dir.join(file))?; // the run writes it again
    Ok(dir.join(file))
}

/// The flags given, each as the setting it is a shortcut for, then `--set`'s.
fn overrides(a: &Args) -> Result<Vec<Override>> {
    let mut all = Vec::new();
    push(&mut all, "train.max_iters", &a.max_iters)?;
    push(&mut all, "train.eval_interval", &a.eval_interval)?;
    push(&mut all, "train.eval_iters", &a.eval_iters)?;
    push(&mut all, "schedule.warmup_iters", &a.warmup_iters)?;
    push(&mut all, "train.batch_size", &a.batch_size)?;
    push(&mut all, "optimizer.learning_rate", &a.learning_rate)?;
    push(&mut all, "train.seed", &a.seed)?;
    push(&mut all, "train.dtype", &a.dtype)?;
    push(&mut all, "data.corpus", &a.corpus)?;
    push(&mut all, "data.kind", &a.corpus_kind)?;
    push(&mut all, "optimizer.kind", &a.optimizer)?;
    push(
        &mut all,
        "optimizer.muon_learning_rate",
        &a.muon_learning_rate,
    )?;
    push(&mut all, "schedule.kind", &a.schedule)?;
    push(&mut all, "train.minutes", &a.minutes)?;
    push(&mut all, "model.block_size", &a.block_size)?;
    push(&mut all, "model.n_layer", &a.n_layer)?;
    push(&mut all, "model.n_head", &a.n_head)?;
    push(&mut all, "model.n_embd", &a.n_embd)?;
    push(&mut all, "model.position", &a.position)?;
    push(&mut all, "model.dropout", &a.dropout)?;
    let flags = all.len();
    for text in &a.set {
        let set = Override::parse(text)?;
        if all[..flags].iter().any(|o| o.key == set.key) {
            bail!(
                "{} is given twice, by its flag and by --set {text}: give it once",
                set.key
            );
        }
        all.push(set);
    }
    Ok(all)
}

/// Adds the setting `key` = `value` to `all` when the flag was given.
fn push<T: serde::Serialize>(all: &mut Vec<Override>, key: &str, value: &Option<T>) -> Result<()> {
    if let Some(value) = value {
        all.push(Override::of(key, value)?);
    }
    Ok(())
}

/// Prints the run's results: one JSON object, or lines for a reader with a few samples.
fn report(summary: &shige::train::TrainSummary, json: bool, eval_iters: usize) -> Result<()> {
    let resume = shige::cli::shell_word(std::path::Path::new(&summary.checkpoint));
    let finished = !summary.interrupted && summary.steps >= summary.max_iters;
    if summary.interrupted && summary.quit && summary.steps == summary.max_iters {
        shige::note!(
            "interrupted after the run's last step: its {} steps are saved in {}; --resume {resume} completes its final evaluation (no step is trained again)",
            summary.steps,
            summary.checkpoint,
        );
        return Ok(());
    } else if summary.interrupted {
        shige::note!(
            "interrupted at step {}: checkpoint saved in {}; continue with --resume {resume}",
            summary.steps,
            summary.checkpoint,
        );
    } else if !finished {
        shige::note!(
            "stopped at step {} of {} (--stop-at): checkpoint saved in {}; continue with --resume {resume}",
            summary.steps,
            summary.max_iters,
            summary.checkpoint,
        );
    }
    if summary.quit {
        shige::note!("quit without the final evaluation and samples: a resumed run ends with them");
        return Ok(());
    }
    if summary.ended_before && summary.steps_trained == 0 {
        shige::note!(
            "no step was left to run: the run had reached max_iters; give a larger --max-iters to train on"
        );
    } else if summary.steps_trained == 0 && !summary.interrupted {
        shige::note!(
            "the run's {} steps were trained before: this completed its final evaluation",
            summary.steps
        );
    }
    if json {
        let line = serde_json::to_string(summary).context("cannot write JSON")?;
        shige::say!("{line}");
        return Ok(());
    }
    let val = match summary.val_loss.is_finite() {
        true => format!(
            "val loss {:.4} (best {:.4}; {eval_iters} fixed batches)",
            summary.val_loss, summary.best_val_loss
        ),
        false => "no evaluation yet".into(),
    };
    let headline = match finished {
        true => format!("done: {} steps", summary.steps),
        false => format!("stopped at step {}", summary.steps),
    };
    let expected = match summary.expected_val_loss_whole {
        Some(loss) if finished => format!(
            " (the ladder's records of this recipe expected {loss:.3} at {} steps)",
            summary.steps
        ),
        _ => String::new(),
    };
    shige::say!(
        "{headline}, train loss {:.4}, {val}, {:.0} tokens/s, {:.0} s, peak memory {}\n\
         val loss of the final weights over the whole validation split: {:.4}{expected}\ncheckpoint: {}\nsamples:",
        summary.train_loss, summary.tokens_per_s, summary.wall_s,
        shige::machine::human_bytes(summary.peak_memory_bytes as f64), summary.val_loss_whole, summary.checkpoint
    );
    for s in &summary.samples {
        shige::say!("  {}", s.replace('\n', "\n  "));
    }
    Ok(())
}

/// The names `--position` accepts, those of config files, listed by `--help`.
fn position_names() -> impl clap::builder::TypedValueParser<Value = Position> {
    use clap::builder::TypedValueParser;
    let names = Position::ALL.map(Position::name);
    clap::builder::PossibleValuesParser::new(names).try_map(|name| name.parse::<Position>())
}
