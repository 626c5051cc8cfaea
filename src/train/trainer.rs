//! The training loop: batches, loss, backward, clipping, the optimiser (AdamW, or Muon with AdamW),
//! evaluation, checkpoints, progress, and the step count planned for `--minutes`.

use crate::config::{CorpusKind, OptimizerKind, RunConfig};
use crate::data::error::describe_char;
use crate::data::{tokenizer::NEWLINE, CharTokenizer, Corpus, DataError, Split, Splits};
use crate::files::atomic_write;
use crate::model::Gpt;
use crate::ops::Precision;
use crate::sample::{generate, Generation, Sampling};
use crate::train::checkpoint::*;
use crate::train::interrupt;
use crate::train::metrics::{
    plot_losses, read_metrics, read_samples, samples_to_jsonl, to_csv, EvalSample, MetricRow,
};
use crate::train::muon::MuonParams;
use crate::train::optim::{clip_scale, AdamWParams, Optimizer, Rates};
use crate::train::plan::{Budget, Planner};
use crate::train::schedule::rate_at;
use crate::train::shards::Shards;
use crate::train::state::{Interval, SavedState};
use anyhow::{bail, Context, Result};
use candle_core::Device;
use indicatif::{ProgressBar, ProgressStyle};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::path::Path;
use std::time::Instant;

/// What a run ended with.
#[derive(Debug, Clone, Serialize)]
pub struct TrainSummary {
    /// Steps done in total.
    pub steps: usize,
    /// Mean training loss over the last evaluation interval.
    pub train_loss: f64,
    /// Validation loss at the last evaluation: the mean over `eval_iters` fixed random batches,
    /// an estimate that training uses to pick its best weights.
    pub val_loss: f64,
    /// Validation loss of the final weights over the whole validation split, every token
    /// predicted once (windows of block_size): the exact figure to compare runs by.
    pub val_loss_whole: f64,
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
    /// Whether a second Ctrl-C asked to quit once that checkpoint was saved: the final
    /// evaluation (`val_loss_whole` is NaN) and samples were skipped.
    pub quit: bool,
    /// The steps the run is planned for (`--stop-at` may end it before).
    pub max_iters: usize,
    /// The process's peak resident memory so far, in bytes (0 where the system does not say).
    pub peak_memory_bytes: u64,
    /// What ran the training steps (see [`step_path`]), so that `tokens_per_s` names its machine.
    pub step_path: String,
    /// The machine (CPU model, cores, instruction sets), for the same reason.
    pub machine: String,
    /// When this invocation ended.
    pub finished: String,
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
    /// The fused kernels, or the composite ops other devices take.
    pub kernels: crate::ops::Kernels,
}

/// Everything a run trains with, set up once: config, data, tokenizer, model and optimiser.
struct Setup {
    cfg: RunConfig,
    run: RunDir,
    /// The fingerprint of the corpus's poems, saved with the training state.
    corpus: String,
    tokenizer: CharTokenizer,
    splits: Splits,
    model: Gpt,
    varmap: candle_nn::VarMap,
    opt: Optimizer,
    shards: Shards,
    device: Device,
}

/// Where a run stands: everything its checkpoint saves besides the tensors.
struct Progress {
    step: usize,
    best_val: f64,
    elapsed_s: f64,
    batch_rng: ChaCha8Rng,
    dropout_rng: ChaCha8Rng,
    interval: Interval,
    rows: Vec<MetricRow>,
    /// The poem drawn at each evaluation.
    samples: Vec<EvalSample>,
    /// The step of the checkpoint in the run directory, if there is one.
    saved_step: Option<usize>,
}

fn rng(seed: u64, stream: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(stream);
    rng
}

/// Reads the corpus, saying on stderr which kind it is read as, and why, and how many of its
/// lines were left out.
fn load_corpus(cfg: &RunConfig, progress: bool) -> Result<Corpus> {
    let t = &cfg.train;
    let corpus = Corpus::load(Path::new(&t.corpus), t.corpus_kind)?;
    if progress {
        crate::note!("{}", corpus.describe(&t.corpus));
    }
    if progress && corpus.skipped > 0 {
        crate::note!(
            "note: {} of {} lines of {} are not regular verse (4 or 8 lines of 5 or 7 characters, each ended by ，。？！；) and were left out; to keep every line, train with --corpus-kind lines",
            corpus.skipped,
            corpus.skipped + corpus.items.len(),
            t.corpus
        );
    }
    Ok(corpus)
}

/// The vocabulary: the run's saved tokenizer when resuming, else one built from the corpus.
fn tokenizer_for(run: &RunDir, corpus: &Corpus, resume: bool) -> Result<CharTokenizer> {
    if resume {
        return Ok(CharTokenizer::load(&run.file(TOKENIZER_FILE))?);
    }
    Ok(CharTokenizer::from_text(&corpus.text())?)
}

/// Checks that a resume asks for the model saved in the run directory, and for the seed and
/// eval_iters that fix its validation batches; notes a new batch size (it redraws them).
fn check_resume(run: &RunDir, cfg: &RunConfig, progress: bool) -> Result<()> {
    let saved = RunConfig::load(&run.file(CONFIG_FILE))?;
    let differences = saved.model.differences(&cfg.model, ["saved", "asked"]);
    if !differences.is_empty() {
        bail!(
            "the model config differs from the one saved in {} ({}): resume with the saved model settings",
            run.path.display(),
            differences.join("; ")
        );
    }
    // These change nothing a resumed run trains on (its random state is saved), only what it
    // measures: the fixed validation batches (and the final samples) are drawn from the seed, and
    // a curve whose losses came from other batches would compare them to pick the best weights.
    let (t, saved) = (&cfg.train, &saved.train);
    for (name, flag, saved, asked) in [
        ("seed", "--seed", saved.seed, t.seed),
        (
            "eval_iters",
            "--eval-iters",
            saved.eval_iters as u64,
            t.eval_iters as u64,
        ),
    ] {
        if saved != asked {
            bail!(
                "{name} differs from the one saved in {} (saved {saved}, asked {asked}): a resumed run keeps it, \
                 since its validation batches are drawn from it; leave {flag} out (or start a new run with --out)",
                run.path.display()
            );
        }
    }
    if saved.optimizer != t.optimizer {
        bail!(
            "the optimizer is {} but the run in {} was trained with {}: a resumed run keeps its optimizer, \
             whose moments it saved; leave --optimizer out (or start a new run with --out)",
            t.optimizer.name(),
            run.path.display(),
            saved.optimizer.name()
        );
    }
    // A step count given for a run planned by minutes ends the plan (minutes is then None).
    if t.minutes.is_some() && saved.minutes != t.minutes {
        bail!(
            "--minutes: the run in {} planned its steps when it started (max_iters {}): a resumed run keeps its plan; \
             leave --minutes out, and give --max-iters to train longer",
            run.path.display(),
            saved.max_iters
        );
    }
    if (saved.schedule, saved.decay_fraction) != (t.schedule, t.decay_fraction) {
        bail!(
            "the schedule is {} (decay_fraction {}) but the run in {} was trained with {} (decay_fraction {}): a resumed run keeps \
             its schedule, since a new one would jump its learning rate mid-run; leave --schedule out (or start a new run with --out)",
            t.schedule.name(),
            t.decay_fraction,
            run.path.display(),
            saved.schedule.name(),
            saved.decay_fraction
        );
    }
    if saved.trained_kind() != t.corpus_kind {
        bail!(
            "the corpus is read as {} but the run in {} was trained on it as {}: a resumed run keeps its kind, \
             since the kind decides the validation split; leave --corpus-kind out (or start a new run with --out)",
            t.corpus_kind,
            run.path.display(),
            saved.trained_kind()
        );
    }
    if progress && saved.batch_size != t.batch_size {
        crate::note!(
            "note: batch_size {} → {}: the fixed validation batches are drawn at the new size from here on, \
             so the validation losses before this resume and after it come from different batches",
            saved.batch_size,
            t.batch_size
        );
    }
    Ok(())
}

/// Refuses bf16 where the CPU engine cannot run it: on other devices, with the composite ops, or
/// on a CPU without bf16 instructions (AMX-BF16 or AVX512-BF16).
pub fn check_precision(
    dtype: Precision,
    device: &Device,
    kernels: crate::ops::Kernels,
) -> Result<()> {
    if dtype == Precision::F32 {
        return Ok(());
    }
    if !device.is_cpu() || kernels != crate::ops::Kernels::Fused {
        bail!("dtype bf16 is the CPU engine's mixed precision: train on the CPU with the fused kernels (no --device, no --no-fused), or in f32 (--dtype f32)")
    }
    if crate::ops::bf16::Hardware::detect().is_none() {
        bail!(
            "dtype bf16 needs a CPU with AMX-BF16 or AVX512-BF16 (Intel Xeon of the 4th generation or later, AMD Zen 4 or later); this one ({}) has neither: train in f32 (--dtype f32, the default)",
            crate::machine::Machine::detect().cpu_model
        )
    }
    Ok(())
}

/// Config, data, tokenizer and a freshly initialised model, with the run directory checked
/// (a new run needs a directory without a run in it, a resume one with a checkpoint) and the
/// temporary files of killed processes cleared. Call it holding the directory's lock.
fn set_up(opts: &TrainOptions) -> Result<Setup> {
    let (run, mut cfg) = (opts.run.clone(), opts.config.clone());
    match opts.resume {
        true => run.check_resumable()?,
        false => run.check_fresh()?,
    }
    run.remove_temporary_files();
    let corpus = load_corpus(&cfg, opts.progress)?;
    cfg.train.corpus_kind = corpus.kind; // saved with the run: a resume reads it the same way
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
        check_resume(&run, &cfg, opts.progress)?;
    }
    let splits = match Splits::new(&corpus, &tokenizer, cfg.model.block_size) {
        Err(DataError::UnknownChars(chars)) if opts.resume => bail!(
            "{} has {} characters that the run's vocabulary lacks (such as {}): a run keeps the vocabulary of the corpus it started on, so resume with that corpus, or start a new run with --out",
            cfg.train.corpus,
            chars.len(),
            chars.iter().take(3).map(|&c| describe_char(c)).collect::<Vec<_>>().join(" ")
        ),
        splits => splits?,
    };
    cfg.model.check_training_memory(cfg.train.batch_size)?;
    let t = &cfg.train;
    let (model, varmap) = Gpt::seeded_for(&cfg.model, &tokenizer, t.seed, &opts.device)?;
    check_precision(t.dtype, &opts.device, opts.kernels)?;
    let model = model.with_kernels(opts.kernels);
    let params = AdamWParams {
        beta1: t.beta1,
        beta2: t.beta2,
        eps: 1e-8,
        weight_decay: t.weight_decay,
    };
    let muon = (t.optimizer == OptimizerKind::Muon).then_some(MuonParams {
        momentum: t.muon_momentum,
    });
    let vars = varmap.data().lock().expect("parameter map").clone();
    let opt = Optimizer::new(vars, params, muon)?;
    Ok(Setup {
        shards: Shards::for_device(&opts.device)?,
        device: opts.device.clone(),
        cfg,
        run,
        corpus: corpus.fingerprint(),
        tokenizer,
        splits,
        model,
        varmap,
        opt,
    })
}

/// The progress of a new run, or of the checkpoint a resume continues (whose weights and
/// moments it loads into the model and optimiser).
fn restore(s: &mut Setup, resume: bool) -> Result<Progress> {
    let seed = s.cfg.train.seed;
    let mut p = Progress {
        step: 0,
        best_val: f64::INFINITY,
        elapsed_s: 0.0,
        batch_rng: rng(seed, 1),
        dropout_rng: rng(seed, 2),
        interval: Interval::default(),
        rows: Vec::new(),
        samples: Vec::new(),
        saved_step: None,
    };
    if !resume {
        return Ok(p);
    }
    let path = s.run.file(STATE_FILE);
    let (tensors, metadata) = read_safetensors(&path)?;
    load_params(&s.varmap, &tensors, "param.", &path)?; // checks the weights are finite
    let moments = tensors.iter().filter(|(n, _)| !n.starts_with("param."));
    if let Some(name) = first_non_finite(moments.map(|(n, t)| (n.as_str(), t)))? {
        bail!(
            "{}: {name} holds NaN or infinite values: this checkpoint cannot be resumed",
            path.display()
        );
    }
    let saved = SavedState::from_metadata(&metadata, &path)?;
    // Checkpoints of earlier versions have no fingerprint of their corpus.
    if let Some(corpus) = &saved.corpus {
        if *corpus != s.corpus {
            bail!(
                "{} is not the corpus this run was trained on (its poems or their order changed), so other poems would be held out for validation and the old ones trained on: \
                 resume with the corpus the run started on, or start a new run with --out",
                s.cfg.train.corpus
            );
        }
    }
    p.step = saved.step;
    p.best_val = saved.best_val_loss;
    p.elapsed_s = saved.elapsed_s;
    p.batch_rng.set_word_pos(saved.batch_rng_pos);
    p.dropout_rng.set_word_pos(saved.dropout_rng_pos);
    p.interval = saved.interval.unwrap_or_default();
    s.opt.load_state(&tensors, p.step).with_context(|| {
        format!(
            "{}: its optimiser moments do not fit this model, so it cannot be resumed (start a new run with --out)",
            path.display()
        )
    })?;
    p.saved_step = Some(p.step);
    if s.run.file(METRICS_FILE).exists() {
        p.rows = read_metrics(&s.run.file(METRICS_FILE))?;
        p.rows.retain(|r| r.step <= p.step);
    }
    if s.run.file(SAMPLES_FILE).exists() {
        p.samples = read_samples(&s.run.file(SAMPLES_FILE))?;
        p.samples.retain(|r| r.step <= p.step);
    }
    Ok(p)
}

/// Mean validation loss over `eval_iters` batches drawn from a fixed RNG, so every evaluation
/// (and a resumed run) sees the same batches; `None` when Ctrl-C or SIGTERM cut it short.
fn evaluate(s: &Setup) -> Result<Option<f64>> {
    let (cfg, mut rng) = (&s.cfg, rng(s.cfg.train.seed, 3));
    let mut total = 0.0;
    for _ in 0..cfg.train.eval_iters {
        if interrupt::requested() {
            return Ok(None);
        }
        let (x, y) = s.splits.batch(
            Split::Val,
            cfg.train.batch_size,
            cfg.model.block_size,
            &mut rng,
            &s.device,
        )?;
        total += s.shards.loss(&s.model, &x, &y)?;
    }
    Ok(Some(total / cfg.train.eval_iters as f64))
}

/// Windows of the whole validation split per batch in [`whole_split_loss`].
const WHOLE_EVAL_BATCH: usize = 32;

/// The mean cross-entropy of `model` over the whole validation split, every token but the first
/// predicted once, each in a window of block_size consecutive tokens.
pub fn whole_split_loss(
    model: &Gpt,
    shards: &Shards,
    splits: &Splits,
    device: &Device,
) -> Result<f64> {
    let block_size = model.config().block_size;
    let windows = splits.windows(Split::Val, WHOLE_EVAL_BATCH, block_size, device)?;
    let (mut total, mut count) = (0.0, 0);
    for (x, y) in &windows {
        let tokens = x.elem_count();
        total += shards.loss(model, x, y)? * tokens as f64;
        count += tokens;
    }
    Ok(total / count as f64)
}

/// What to say about the run directory when training must stop on a non-finite number.
fn what_is_kept(s: &Setup, p: &Progress) -> String {
    let t = &s.cfg.train;
    let lower = match t.optimizer {
        OptimizerKind::Muon => format!(
            "lower Muon's --muon-learning-rate (now {}) or AdamW's --learning-rate (now {})",
            t.muon_learning_rate, t.learning_rate
        ),
        OptimizerKind::Adamw => format!("lower --learning-rate (now {})", t.learning_rate),
    };
    match p.saved_step {
        Some(step) => format!(
            "the checkpoint of step {step} in {} is intact; {lower} and --resume {}",
            s.run.path.display(),
            crate::cli::shell_word(&s.run.path)
        ),
        None => format!("no checkpoint was written yet; restart and {lower}"),
    }
}

/// One optimiser step; returns its training loss.
fn train_step(s: &mut Setup, p: &mut Progress) -> Result<f64> {
    let t = &s.cfg.train;
    let lr = Rates {
        adamw: rate_at(t, p.step, t.learning_rate),
        muon: rate_at(t, p.step, t.muon_learning_rate),
    };
    let (x, y) = s.splits.batch(
        Split::Train,
        t.batch_size,
        s.cfg.model.block_size,
        &mut p.batch_rng,
        &s.device,
    )?;
    let (loss, grads) = s.shards.loss_and_gradients(
        (&s.model, &s.opt),
        (&x, &y),
        s.cfg.train.dtype,
        &mut p.dropout_rng,
    )?;
    if !loss.is_finite() {
        bail!(
            "the loss became {loss} at step {}: training stopped; {}",
            p.step + 1,
            what_is_kept(s, p)
        );
    }
    s.opt
        .step(&grads, lr, clip_scale(grads.norm(), t.grad_clip))?;
    p.step += 1;
    Ok(loss)
}

/// Writes a checkpoint: at an evaluation (`val` given) its metrics row and, when it is the best
/// so far, the weights for sampling; always the config, the tokenizer and the training state
/// (last, so that everything it points to exists once it does). Nothing is written when a weight,
/// a moment or the validation loss is not finite: the previous checkpoint stays.
fn save_checkpoint(s: &Setup, p: &mut Progress, val: Option<f64>) -> Result<()> {
    let params = named_params(&s.varmap, false);
    let moments = s.opt.state()?;
    let all = params.iter().chain(&moments).map(|(n, t)| (n.as_str(), t));
    if let Some(name) = first_non_finite(all)? {
        bail!(
            "the update of step {} made {name} NaN or infinite: training stopped; {}",
            p.step,
            what_is_kept(s, p)
        );
    }
    if let Some(val) = val {
        if !val.is_finite() {
            bail!(
                "the validation loss became {val} at step {}: training stopped; {}",
                p.step,
                what_is_kept(s, p)
            );
        }
        if val < p.best_val {
            p.best_val = val;
            let mut metadata = model_metadata(&s.cfg.model, &s.tokenizer)?;
            metadata.insert("step".into(), p.step.to_string());
            metadata.insert("val_loss".into(), val.to_string());
            let weights = named_params(&s.varmap, s.cfg.model.tie_weights);
            atomic_write(
                &s.run.file(MODEL_FILE),
                &to_safetensors(&weights, metadata)?,
            )?;
        }
        atomic_write(&s.run.file(METRICS_FILE), to_csv(&p.rows).as_bytes())?;
        let samples = samples_to_jsonl(&p.samples)?;
        atomic_write(&s.run.file(SAMPLES_FILE), samples.as_bytes())?;
    }
    if !s.run.file(TOKENIZER_FILE).exists() {
        atomic_write(
            &s.run.file(TOKENIZER_FILE),
            s.tokenizer.to_json()?.as_bytes(),
        )?;
    }
    atomic_write(&s.run.file(CONFIG_FILE), s.cfg.to_toml()?.as_bytes())?;
    let mut tensors: Vec<_> = params
        .into_iter()
        .map(|(n, t)| (format!("param.{n}"), t))
        .collect();
    tensors.extend(moments);
    let metadata = SavedState {
        corpus: Some(s.corpus.clone()),
        step: p.step,
        batch_rng_pos: p.batch_rng.get_word_pos(),
        dropout_rng_pos: p.dropout_rng.get_word_pos(),
        best_val_loss: p.best_val,
        elapsed_s: p.elapsed_s,
        interval: Some(p.interval),
    }
    .to_metadata();
    atomic_write(
        &s.run.file(STATE_FILE),
        &to_safetensors(&tensors, metadata)?,
    )?;
    p.saved_step = Some(p.step);
    if val.is_some() {
        let title = format!("loss of {}", s.run.path.display());
        plot_losses(&p.rows, &title, &s.run.file(PLOT_FILE))?;
    }
    Ok(())
}

/// Evaluates, records the interval's metrics row and writes the checkpoint. An evaluation cut
/// short by a signal saves the training state without it, for the resumed run to evaluate.
fn evaluate_and_save(s: &Setup, p: &mut Progress, bar: &ProgressBar) -> Result<()> {
    let Some(val) = evaluate(s)? else {
        return save_checkpoint(s, p, None);
    };
    let t = &s.cfg.train;
    let lr = rate_at(t, p.step - 1, t.learning_rate);
    let tokens = (t.batch_size * s.cfg.model.block_size * p.interval.steps) as f64;
    p.rows.push(MetricRow {
        step: p.step,
        train_loss: p.interval.mean_loss(),
        val_loss: val,
        lr,
        tokens_per_s: tokens / p.interval.seconds,
        elapsed_s: p.elapsed_s,
    });
    p.interval = Interval::default();
    // Its own seed per step, so that a resumed run draws what an uninterrupted one does.
    let text = eval_sample(s, &mut rng(s.cfg.train.seed.wrapping_add(p.step as u64), 5))?;
    p.samples.push(EvalSample { step: p.step, text });
    save_checkpoint(s, p, Some(val))?;
    let (row, sample) = (&p.rows[p.rows.len() - 1], &p.samples[p.samples.len() - 1]);
    bar.suspend(|| {
        crate::note!(
            "step {:>6}: train {:.4}, val {val:.4}, lr {lr:.2e}  {}",
            p.step,
            row.train_loss,
            shortened(&sample.text.replace('\n', " "), SHOWN_SAMPLE_CHARS)
        )
    });
    Ok(())
}

/// The most characters of an evaluation's sample shown on its progress line.
const SHOWN_SAMPLE_CHARS: usize = 64;

/// `text` cut to `n` characters, with … where it was cut.
fn shortened(text: &str, n: usize) -> String {
    match text.char_indices().nth(n) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

/// The sample of an evaluation: the first of up to three draws that is not empty (an early
/// model often ends its poem at once).
fn eval_sample(s: &Setup, rng: &mut ChaCha8Rng) -> Result<String> {
    let mut text = String::new();
    for _ in 0..3 {
        text = draw_sample(s, rng)?;
        if !text.is_empty() {
            break;
        }
    }
    Ok(text)
}

/// A poem drawn at temperature 0.8 from the model as it is (a poem or a line ends at its
/// newline; running text goes on for a few lines).
fn draw_sample(s: &Setup, rng: &mut ChaCha8Rng) -> Result<String> {
    let newline = s
        .tokenizer
        .id(NEWLINE)
        .context("the tokenizer has no newline token")?;
    let (length, stop) = match s.cfg.train.corpus_kind {
        CorpusKind::Text => (200, None),
        _ => (100, Some(newline)),
    };
    let gen = Generation::new(length, Sampling::with_temperature(0.8), stop);
    let ids = generate(&s.model, &[newline], &gen, rng, &mut |_| {})?;
    Ok(s.tokenizer.decode(&ids)?.trim_end().to_string())
}

/// Three poems drawn at temperature 0.8 from the final weights.
fn final_samples(s: &Setup) -> Result<Vec<String>> {
    let mut sample_rng = rng(s.cfg.train.seed, 4);
    (0..3).map(|_| draw_sample(s, &mut sample_rng)).collect()
}

fn progress_bar(show: bool, len: usize, position: usize) -> ProgressBar {
    let bar = if show {
        ProgressBar::new(len as u64)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{bar:28.cyan/blue} {pos}/{len} {msg} [{elapsed_precise} < {eta_precise}]",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_position(position as u64);
    bar
}

/// Trains as `opts` says and returns the summary. The run directory is locked for the whole run
/// and holds a loadable checkpoint from the first evaluation on. A run stopped between two
/// evaluations (`stop_at`, Ctrl-C, SIGTERM) saves its training state without evaluating, so that
/// its resumption gives exactly the metrics of an uninterrupted run.
pub fn train(opts: TrainOptions) -> Result<TrainSummary> {
    // Checked before the lock too, so that no lock file or directory is left where refused.
    match opts.resume {
        true => opts.run.check_present()?,
        false => opts.run.check_fresh()?,
    }
    let (made, had_lock) = (
        crate::files::missing_dirs(&opts.run.path),
        opts.run.file(LOCK_FILE).exists(),
    );
    let lock = opts.run.lock()?;
    let outcome = train_locked(&opts);
    if outcome.is_err() {
        drop(lock);
        opts.run.tidy_after_failure(&made, had_lock);
    }
    outcome
}

/// Whether the run evaluates after `step`.
fn evaluates_at(s: &Setup, step: usize) -> bool {
    step.is_multiple_of(s.cfg.train.eval_interval) || step == s.cfg.train.max_iters
}

/// Whether a resumed run stands at a step whose evaluation a signal cut short (or that a new
/// eval_interval adds), so that it evaluates there before its next step.
fn evaluation_pending(s: &Setup, p: &Progress) -> bool {
    p.step > 0 && evaluates_at(s, p.step) && p.rows.last().map(|r| r.step) != Some(p.step)
}

/// [`train`] with the run directory locked.
fn train_locked(opts: &TrainOptions) -> Result<TrainSummary> {
    let started = Instant::now();
    let mut s = set_up(opts)?;
    let mut p = restore(&mut s, opts.resume)?;
    let max_iters = s.cfg.train.max_iters;
    check_steps_left(&s.run.path, p.step, max_iters)?;
    let mut end = opts.stop_at.map_or(max_iters, |stop| stop.min(max_iters));
    if let Some(stop) = opts.stop_at.filter(|&stop| stop <= p.step) {
        bail!(
            "--stop-at {stop}: the run is already at step {}; give a later step",
            p.step
        );
    }
    let path = step_path(&s); // the header's second line, and the summary's
    if opts.progress {
        let m = &s.cfg.model;
        crate::note!(
            "training {} layers × {} heads × {} dims, {} positions, on {} → {}\n{}",
            m.n_layer,
            m.n_head,
            m.n_embd,
            m.position,
            s.cfg.train.corpus,
            s.run.path.display(),
            path
        );
    }
    let bar = progress_bar(opts.progress, max_iters, p.step);
    if evaluation_pending(&s, &p) {
        evaluate_and_save(&s, &mut p, &bar)?;
    }
    let tokens_per_step = (s.cfg.train.batch_size * s.cfg.model.block_size) as f64;
    let (mut run_tokens, mut run_time) = (0.0, 0.0);
    let mut planner = s.cfg.train.minutes.map(|minutes| {
        let val_batches = s.splits.tokens(Split::Val).len() as f64 / tokens_per_step;
        Planner::new(Budget::new(&s.cfg.train, minutes, val_batches))
    });
    while p.step < end {
        let step_start = Instant::now();
        let loss = train_step(&mut s, &mut p)?;
        let dt = step_start.elapsed().as_secs_f64();
        let i = &mut p.interval;
        (i.loss, i.steps, i.seconds) = (i.loss + loss, i.steps + 1, i.seconds + dt);
        (run_tokens, run_time) = (run_tokens + tokens_per_step, run_time + dt);
        p.elapsed_s += dt;
        if let Some(planner) = planner.as_mut() {
            // The wall time of this process, and the training time of the runs it resumes.
            let spent = started.elapsed().as_secs_f64() + p.elapsed_s - run_time;
            let planned = s.cfg.train.max_iters;
            if let Some(plan) = planner.after_step(p.step, dt, spent, planned) {
                let minutes = s.cfg.train.minutes.unwrap_or_default();
                bar.suspend(|| crate::note!("{}", plan.describe(minutes)));
                s.cfg.train.max_iters = plan.steps;
                end = opts.stop_at.map_or(plan.steps, |stop| stop.min(plan.steps));
                bar.set_length(plan.steps as u64);
            }
        }
        bar.set_position(p.step as u64);
        bar.set_message(format!(
            "loss {loss:.3} | {:.0} tok/s",
            tokens_per_step * i.steps as f64 / i.seconds
        ));
        if evaluates_at(&s, p.step) {
            evaluate_and_save(&s, &mut p, &bar)?;
        } else if p.step == end || interrupt::requested() {
            save_checkpoint(&s, &mut p, None)?;
        }
        if interrupt::requested() {
            break;
        }
    }
    bar.finish_and_clear();
    // A second signal during the stop's save asked to quit once it was on disk.
    let quit = interrupt::requested() && interrupt::checkpoint_saved();
    let last = p.rows.last();
    let summary = TrainSummary {
        steps: p.step,
        train_loss: match p.interval.steps {
            0 => last.map_or(f64::NAN, |r| r.train_loss),
            _ => p.interval.mean_loss(),
        },
        val_loss: last.map_or(f64::NAN, |r| r.val_loss),
        val_loss_whole: match quit {
            true => f64::NAN,
            false => whole_split_loss(&s.model, &s.shards, &s.splits, &s.device)?,
        },
        best_val_loss: p.best_val,
        tokens_per_s: if run_time > 0.0 {
            run_tokens / run_time
        } else {
            0.0
        },
        wall_s: started.elapsed().as_secs_f64(),
        checkpoint: s.run.path.display().to_string(),
        samples: match quit {
            true => Vec::new(),
            false => final_samples(&s)?,
        },
        interrupted: p.step < end || evaluation_pending(&s, &p),
        quit,
        max_iters: s.cfg.train.max_iters,
        peak_memory_bytes: crate::machine::peak_memory(),
        step_path: path,
        machine: crate::machine::Machine::detect().describe(),
        finished: crate::clock::UtcTime::now().to_string(),
    };
    let json = serde_json::to_string_pretty(&summary)?;
    atomic_write(&s.run.file(SUMMARY_FILE), json.as_bytes())?;
    Ok(summary)
}

/// What runs the training step: the CPU engine with the kernels chosen for this CPU (its model
/// and vector extensions, gemm's kernels or the bf16 unit, the loops' instruction set, the shards),
/// or candle's graph, on a GPU or with `--no-fused`.
fn step_path(s: &Setup) -> String {
    if !crate::engine::supports(&s.model) {
        let device = match s.device.location() {
            candle_core::DeviceLocation::Cpu => "the CPU (--no-fused)".to_string(),
            other => format!("{other:?}"),
        };
        return format!("candle's graph on {device}");
    }
    let m = crate::machine::Machine::detect();
    let matmuls = match s.cfg.train.dtype {
        Precision::Bf16 => format!("bf16 matmuls on {}", m.bf16_kernels),
        Precision::F32 => format!("f32 matmuls by gemm {}", m.gemm_kernels),
    };
    format!(
        "CPU engine on {} ({}): {matmuls}, loops {}, {}",
        m.cpu_model,
        m.isa_shown(),
        crate::ops::isa::Isa::detected().name(),
        match s.shards.count() {
            1 => "1 shard".to_string(),
            n => format!("{n} shards (one per thread)"),
        }
    )
}
