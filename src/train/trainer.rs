//! The training loop: batches, loss, backward, clipping, AdamW, evaluation, checkpoints, progress.

use crate::config::RunConfig;
use crate::data::{tokenizer::NEWLINE, CharTokenizer, Corpus, Split, Splits};
use crate::model::Gpt;
use crate::sample::{generate, Generation, Sampling};
use crate::train::checkpoint::*;
use crate::train::interrupt;
use crate::train::metrics::{from_csv, plot_losses, to_csv, MetricRow};
use crate::train::optim::{clip_scale, AdamW, AdamWParams};
use crate::train::schedule::learning_rate;
use crate::train::shards::Shards;
use anyhow::{bail, Context, Result};
use candle_core::Device;
use indicatif::{ProgressBar, ProgressStyle};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

/// What a run ended with.
#[derive(Debug, Clone, Serialize)]
pub struct TrainSummary {
    /// Steps done in total.
    pub steps: usize,
    /// Mean training loss over the last evaluation interval.
    pub train_loss: f64,
    /// Validation loss at the last evaluation.
    pub val_loss: f64,
    /// Best validation loss (the weights in model.safetensors).
    pub best_val_loss: f64,
    /// Training tokens per second over this invocation.
    pub tokens_per_s: f64,
    /// Wall time of this invocation in seconds.
    pub wall_s: f64,
    /// The run directory.
    pub checkpoint: String,
    /// A few poems sampled at temperature 0.8 from the final weights.
    pub samples: Vec<String>,
    /// Whether Ctrl-C stopped the run early (after saving a checkpoint).
    pub interrupted: bool,
}

/// How a run is started.
pub struct TrainOptions {
    /// The whole config (after command-line overrides).
    pub config: RunConfig,
    /// Where the run lives.
    pub run: RunDir,
    /// Continue the run in `run` instead of starting a new one.
    pub resume: bool,
    /// Stop (with a checkpoint) once this step is reached, as if interrupted.
    pub stop_at: Option<usize>,
    /// Draw a progress bar on stderr.
    pub progress: bool,
    /// Where the model runs (see [`crate::device::open`]).
    pub device: Device,
}

/// Training state that is not in tensors.
struct Counters {
    step: usize,
    best_val: f64,
    elapsed_s: f64,
}

fn rng(seed: u64, stream: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(stream);
    rng
}

/// Mean validation loss over `eval_iters` batches drawn from a fixed RNG, so every evaluation
/// (and a resumed run) sees the same batches.
fn evaluate(
    model: &Gpt,
    shards: &Shards,
    splits: &Splits,
    cfg: &RunConfig,
    device: &Device,
) -> Result<f64> {
    let mut rng = rng(cfg.train.seed, 3);
    let mut total = 0.0;
    for _ in 0..cfg.train.eval_iters {
        let (x, y) = splits.batch(
            Split::Val,
            cfg.train.batch_size,
            cfg.model.block_size,
            &mut rng,
            device,
        )?;
        total += shards.loss(model, &x, &y)?;
    }
    Ok(total / cfg.train.eval_iters as f64)
}

/// The vocabulary: the run's saved tokenizer when resuming, else one built from the corpus.
fn tokenizer_for(run: &RunDir, corpus: &Corpus, resume: bool) -> Result<CharTokenizer> {
    if resume {
        return Ok(CharTokenizer::load(&run.file(TOKENIZER_FILE))?);
    }
    Ok(CharTokenizer::from_text(&corpus.text())?)
}

/// Checks that a resume asks for the model saved in the run directory.
fn check_resume(run: &RunDir, cfg: &RunConfig) -> Result<()> {
    let saved = RunConfig::load(&run.file(CONFIG_FILE))?;
    let as_table = |m: &crate::config::ModelConfig| toml::Table::try_from(m).unwrap_or_default();
    let (saved_t, asked_t) = (as_table(&saved.model), as_table(&cfg.model));
    let differences: Vec<String> = saved_t
        .iter()
        .filter(|(k, v)| asked_t.get(*k) != Some(v))
        .map(|(k, v)| {
            format!(
                "{k}: saved {v}, asked {}",
                asked_t.get(k).map_or("nothing".into(), |a| a.to_string())
            )
        })
        .collect();
    if !differences.is_empty() {
        bail!(
            "the model config differs from the one saved in {} ({}): resume with the saved model settings",
            run.path.display(),
            differences.join("; ")
        );
    }
    Ok(())
}

fn save_state(
    run: &RunDir,
    varmap: &candle_nn::VarMap,
    opt: &AdamW,
    rngs: [&ChaCha8Rng; 2],
    c: &Counters,
) -> Result<()> {
    let mut tensors: Vec<_> = named_params(varmap, false)
        .into_iter()
        .map(|(n, t)| (format!("param.{n}"), t))
        .collect();
    tensors.extend(opt.state()?);
    let metadata = HashMap::from([
        ("step".to_string(), c.step.to_string()),
        (
            "batch_rng_pos".to_string(),
            rngs[0].get_word_pos().to_string(),
        ),
        (
            "dropout_rng_pos".to_string(),
            rngs[1].get_word_pos().to_string(),
        ),
        ("best_val_loss".to_string(), c.best_val.to_string()),
        ("elapsed_s".to_string(), c.elapsed_s.to_string()),
    ]);
    atomic_write(&run.file(STATE_FILE), &to_safetensors(&tensors, metadata)?)
}

fn meta<T: std::str::FromStr>(
    metadata: &HashMap<String, String>,
    key: &str,
    path: &Path,
) -> Result<T> {
    metadata
        .get(key)
        .and_then(|v| v.parse().ok())
        .with_context(|| {
            format!(
                "{} has no valid `{key}` entry: it is not a checkpoint of this program",
                path.display()
            )
        })
}

/// Trains as `opts` says and returns the summary. The run directory always holds a loadable
/// checkpoint from the first evaluation on.
pub fn train(opts: TrainOptions) -> Result<TrainSummary> {
    let started = Instant::now();
    let device = opts.device.clone();
    let mut cfg = opts.config;
    let run = opts.run;
    if opts.resume && !run.file(STATE_FILE).exists() {
        bail!("{} holds no checkpoint to resume ({STATE_FILE} is missing): start a new run with --out", run.path.display());
    }
    if !opts.resume && run.holds_run() {
        bail!(
            "{} already holds a run: continue it with --resume {0}, or choose another --out",
            run.path.display()
        );
    }
    let corpus = Corpus::load(Path::new(&cfg.train.corpus))?;
    let tokenizer = tokenizer_for(&run, &corpus, opts.resume)?;
    match cfg.model.vocab_size {
        0 => cfg.model.vocab_size = tokenizer.vocab_size(),
        v if v != tokenizer.vocab_size() => bail!(
            "vocab_size {v} in the config differs from the tokenizer's {}: remove vocab_size from the config",
            tokenizer.vocab_size()
        ),
        _ => {}
    }
    cfg.validate()?;
    if opts.resume {
        check_resume(&run, &cfg)?;
    }
    let splits = Splits::new(&corpus, &tokenizer, cfg.model.block_size)?;
    if opts.progress {
        eprintln!(
            "training {} layers × {} heads × {} dims, {} positions, on {} → {}",
            cfg.model.n_layer,
            cfg.model.n_head,
            cfg.model.n_embd,
            cfg.model.position,
            cfg.train.corpus,
            run.path.display()
        );
    }
    let t = &cfg.train;
    let (model, varmap) = Gpt::seeded(&cfg.model, t.seed, &device)?;
    let params = AdamWParams {
        beta1: t.beta1,
        beta2: t.beta2,
        eps: 1e-8,
        weight_decay: t.weight_decay,
    };
    let mut opt = AdamW::new(varmap.data().lock().expect("parameter map").clone(), params)?;
    let shards = Shards::for_device(&device)?;
    let (mut batch_rng, mut dropout_rng) = (rng(t.seed, 1), rng(t.seed, 2));
    let mut counters = Counters {
        step: 0,
        best_val: f64::INFINITY,
        elapsed_s: 0.0,
    };
    let mut rows = Vec::new();

    if opts.resume {
        let path = run.file(STATE_FILE);
        let (tensors, metadata) = read_safetensors(&path)?;
        load_params(&varmap, &tensors, "param.", &path)?;
        counters.step = meta(&metadata, "step", &path)?;
        counters.best_val = meta(&metadata, "best_val_loss", &path)?;
        counters.elapsed_s = meta(&metadata, "elapsed_s", &path)?;
        opt.load_state(&tensors, counters.step)?;
        batch_rng.set_word_pos(meta(&metadata, "batch_rng_pos", &path)?);
        dropout_rng.set_word_pos(meta(&metadata, "dropout_rng_pos", &path)?);
        if let Ok(text) = std::fs::read_to_string(run.file(METRICS_FILE)) {
            rows = from_csv(&text)?
                .into_iter()
                .filter(|r| r.step <= counters.step)
                .collect();
        }
    } else {
        std::fs::create_dir_all(&run.path)
            .with_context(|| format!("cannot create {}", run.path.display()))?;
        atomic_write(&run.file(TOKENIZER_FILE), tokenizer.to_json()?.as_bytes())?;
    }

    let t = &cfg.train;
    let end = opts.stop_at.map_or(t.max_iters, |s| s.min(t.max_iters));
    let bar = if opts.progress {
        ProgressBar::new(t.max_iters as u64)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{bar:28.cyan/blue} {pos}/{len} {msg} [{elapsed_precise} < {eta_precise}]",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_position(counters.step as u64);
    let tokens_per_step = (t.batch_size * cfg.model.block_size) as f64;
    let (mut interval_loss, mut interval_steps, mut interval_time) = (0.0, 0usize, 0.0);
    let (mut run_tokens, mut run_time) = (0.0, 0.0);
    // A resumed run starts from its last recorded losses (all of them, if no step is left to run).
    let (mut last_train, mut last_val) =
        rows.last().map_or((f64::NAN, f64::NAN), |r: &MetricRow| {
            (r.train_loss, r.val_loss)
        });

    while counters.step < end {
        let step_start = Instant::now();
        let lr = learning_rate(counters.step, t.learning_rate, t.warmup_iters, t.max_iters);
        let (x, y) = splits.batch(
            Split::Train,
            t.batch_size,
            cfg.model.block_size,
            &mut batch_rng,
            &device,
        )?;
        let (loss_value, grads) =
            shards.loss_and_gradients(&model, &opt, &x, &y, &mut dropout_rng)?;
        if !loss_value.is_finite() {
            let kept = if run.holds_run() {
                format!("the last good checkpoint in {} is intact; lower --learning-rate (now {}) and resume, or restart", run.path.display(), t.learning_rate)
            } else {
                format!(
                    "no checkpoint was written yet; restart with a lower --learning-rate (now {})",
                    t.learning_rate
                )
            };
            bail!(
                "the loss became {loss_value} at step {}: training stopped; {kept}",
                counters.step + 1
            );
        }
        opt.step(&grads, lr, clip_scale(grads.norm(), t.grad_clip))?;
        counters.step += 1;
        let dt = step_start.elapsed().as_secs_f64();
        (interval_loss, interval_steps, interval_time) = (
            interval_loss + loss_value,
            interval_steps + 1,
            interval_time + dt,
        );
        (run_tokens, run_time) = (run_tokens + tokens_per_step, run_time + dt);
        counters.elapsed_s += dt;
        bar.set_position(counters.step as u64);
        bar.set_message(format!(
            "loss {loss_value:.3} | val {last_val:.3} | lr {lr:.1e} | {:.0} tok/s",
            tokens_per_step * interval_steps as f64 / interval_time
        ));

        let stopping = counters.step == end || interrupt::requested();
        if counters.step.is_multiple_of(t.eval_interval) || stopping {
            last_train = interval_loss / interval_steps as f64;
            last_val = evaluate(&model, &shards, &splits, &cfg, &device)?;
            rows.push(MetricRow {
                step: counters.step,
                train_loss: last_train,
                val_loss: last_val,
                lr,
                tokens_per_s: tokens_per_step * interval_steps as f64 / interval_time,
                elapsed_s: counters.elapsed_s,
            });
            (interval_loss, interval_steps, interval_time) = (0.0, 0, 0.0);
            if last_val < counters.best_val {
                counters.best_val = last_val;
                let meta = HashMap::from([
                    ("step".to_string(), counters.step.to_string()),
                    ("val_loss".to_string(), last_val.to_string()),
                ]);
                atomic_write(
                    &run.file(MODEL_FILE),
                    &to_safetensors(&named_params(&varmap, cfg.model.tie_weights), meta)?,
                )?;
            }
            // The state last: a run directory is resumable once it exists, and everything it
            // points to is written by then.
            atomic_write(&run.file(METRICS_FILE), to_csv(&rows).as_bytes())?;
            atomic_write(&run.file(CONFIG_FILE), cfg.to_toml()?.as_bytes())?;
            save_state(&run, &varmap, &opt, [&batch_rng, &dropout_rng], &counters)?;
            plot_losses(
                &rows,
                &format!("loss of {}", run.path.display()),
                &run.file(PLOT_FILE),
            )?;
            bar.suspend(|| {
                eprintln!(
                    "step {:>6}: train {last_train:.4}, val {last_val:.4}, lr {lr:.2e}",
                    counters.step
                )
            });
            if stopping {
                break;
            }
        }
    }
    bar.finish_and_clear();

    let newline = tokenizer
        .id(NEWLINE)
        .context("the tokenizer has no newline token")?;
    let mut sample_rng = rng(t.seed, 4);
    let samples = (0..3)
        .map(|_| -> Result<String> {
            let gen = Generation::new(100, Sampling::with_temperature(0.8), Some(newline));
            let ids = generate(&model, &[newline], &gen, &mut sample_rng, &mut |_| {})?;
            Ok(tokenizer.decode(&ids)?.trim_end().to_string())
        })
        .collect::<Result<_>>()?;
    Ok(TrainSummary {
        steps: counters.step,
        train_loss: last_train,
        val_loss: last_val,
        best_val_loss: counters.best_val,
        tokens_per_s: if run_time > 0.0 {
            run_tokens / run_time
        } else {
            0.0
        },
        wall_s: started.elapsed().as_secs_f64(),
        checkpoint: run.path.display().to_string(),
        samples,
        interrupted: counters.step < end,
    })
}
