//! The training loop: batches, loss, backward, clipping, the optimiser (AdamW, or Muon with AdamW),
//! evaluation, progress, and the step count planned for `--minutes`. The run it trains is opened
//! (set up, restored, locked) and saved by [`super::run`].

use crate::config::count;
use crate::config::{CorpusKind, RunConfig, ScheduleKind};
use crate::data::{tokenizer::NEWLINE, Split, Splits};
use crate::files::atomic_write;
use crate::model::Gpt;
use crate::ops::Precision;
use crate::random::{rng, Stream};
use crate::sample::{generate, Generation, Sampling};
use crate::train::checkpoint::{save_checkpoint, what_is_kept};
use crate::train::expect::Expected;
use crate::train::interrupt;
use crate::train::metrics::{EvalSample, MetricRow};
use crate::train::optim::{clip_scale, Rates};
use crate::train::plan::{Budget, Plan, Planner};
use crate::train::run::{OpenRun, TrainOptions};
use crate::train::run_dir::{RunDir, SUMMARY_FILE};
use crate::train::schedule::{decay_start, rate_at};
use crate::train::setup::Setup;
use crate::train::shards::{Shards, UNIT_ROWS};
use crate::train::state::{Interval, Progress};
use anyhow::{bail, Context, Result};
use candle_core::Device;
use indicatif::{ProgressBar, ProgressStyle};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::time::Instant;

/// What a run ended with.
#[derive(Debug, Clone, Serialize)]
pub struct TrainSummary {
    /// Steps done in total, and by this invocation.
    pub steps: usize,
    pub steps_trained: usize,
    /// Mean training loss over the last evaluation interval.
    pub train_loss: f64,
    /// Validation loss at the last evaluation: the mean over `eval_iters` fixed random batches,
    /// an estimate that training uses to pick its best weights.
    pub val_loss: f64,
    /// Validation loss of the final weights over the whole validation split, every token
    /// predicted once (windows of block_size): the exact figure to compare runs by.
    pub val_loss_whole: f64,
    /// The whole-split loss that the ladder's records of this recipe expect at `max_iters`
    /// steps (see [`crate::train::expect`]): none where no rung ran the recipe.
    pub expected_val_loss_whole: Option<f64>,
    /// Best validation loss (the weights in model.safetensors).
    pub best_val_loss: f64,
    /// Training tokens per second over this invocation.
    pub tokens_per_s: f64,
    /// Wall time of this invocation in seconds (from the process's start where its options
    /// give that clock, as `train` does).
    pub wall_s: f64,
    /// The run directory.
    pub checkpoint: String,
    /// A few poems sampled at temperature 0.8 from the final weights.
    pub samples: Vec<String>,
    /// Whether Ctrl-C stopped the run early (after saving a checkpoint).
    pub interrupted: bool,
    /// Whether a signal ended the run once that checkpoint was saved: the final
    /// evaluation (`val_loss_whole` is NaN) and samples were skipped.
    pub quit: bool,
    /// The steps the run is planned for (`--stop-at` may end it before).
    pub max_iters: usize,
    /// Whether the run had ended before this invocation, its final evaluation done (a finished
    /// run resumed: nothing trained, its end evaluated again).
    pub ended_before: bool,
    /// The process's peak resident memory so far, in bytes (0 where the system does not say).
    pub peak_memory_bytes: u64,
    /// What ran the training steps (see [`step_path`]), so that `tokens_per_s` names its machine.
    pub step_path: String,
    /// The machine (CPU model, cores, instruction sets), for the same reason.
    pub machine: String,
    /// When this invocation ended.
    pub finished: String,
}

/// Mean validation loss over `eval_iters` batches drawn from a fixed RNG, so every evaluation
/// (and a resumed run) sees the same batches; `None` when Ctrl-C or SIGTERM cut it short.
pub(super) fn evaluate(s: &Setup) -> Result<Option<f64>> {
    let (cfg, mut rng) = (&s.cfg, rng(s.cfg.train.seed, Stream::Validation));
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
pub const WHOLE_EVAL_BATCH: usize = 32;

/// The mean cross-entropy of `model` over the whole validation split, every token but the first
/// predicted once, each in a window of block_size consecutive tokens.
pub fn whole_split_loss(
    model: &Gpt,
    shards: &Shards,
    splits: &Splits,
    device: &Device,
) -> Result<f64> {
    let never = || false;
    let loss = whole_split_loss_until(model, shards, splits, device, &never)?;
    Ok(loss.expect("never cut short"))
}

/// [`whole_split_loss`], or None where `cut_short` says so before a batch.
fn whole_split_loss_until(
    model: &Gpt,
    shards: &Shards,
    splits: &Splits,
    device: &Device,
    cut_short: &dyn Fn() -> bool,
) -> Result<Option<f64>> {
    let block_size = model.config().block_size;
    let windows = splits.windows(Split::Val, WHOLE_EVAL_BATCH, block_size, device)?;
    let (mut total, mut count) = (0.0, 0);
    for (x, y) in &windows {
        if cut_short() {
            return Ok(None);
        }
        let tokens = x.elem_count();
        total += shards.loss(model, x, y)? * tokens as f64;
        count += tokens;
    }
    Ok(Some(total / count as f64))
}

/// A loss that became NaN or infinite: training cannot go on (what is kept of the run is said by
/// whoever holds it).
#[derive(Debug, thiserror::Error)]
#[error("the loss became {loss} at step {step}: training stopped")]
pub(super) struct LossNotFinite {
    loss: f64,
    step: usize,
}

/// What step `step` trains on: the decay's text from WSD's first step of decay (the training
/// text where the run has none of its own).
fn training_split(cfg: &RunConfig, step: usize) -> Split {
    let s = &cfg.schedule;
    let decays = s.kind == ScheduleKind::Wsd
        && step >= decay_start(cfg.train.max_iters, s.warmup_iters, s.decay_fraction());
    match decays {
        true => Split::Decay,
        false => Split::Train,
    }
}

/// One optimiser step, counted in the evaluation interval; returns its training loss.
pub(super) fn train_step(s: &mut Setup, p: &mut Progress) -> Result<f64> {
    let (cfg, t) = (&s.cfg, &s.cfg.train);
    let lr = Rates {
        adamw: rate_at(cfg, p.step, cfg.optimizer.learning_rate),
        muon: rate_at(cfg, p.step, cfg.optimizer.muon_learning_rate()),
    };
    let (x, y) = s.splits.batch(
        training_split(cfg, p.step),
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
        return Err(LossNotFinite {
            loss,
            step: p.step + 1,
        }
        .into());
    }
    s.opt.step(
        &grads,
        lr,
        clip_scale(grads.norm(), cfg.optimizer.grad_clip),
    )?;
    p.step += 1;
    let i = &mut p.interval;
    (i.loss, i.steps) = (i.loss + loss, i.steps + 1);
    Ok(loss)
}

/// Evaluates, records the interval's metrics row and writes the checkpoint; returns the seconds
/// the evaluation's forward passes took. An evaluation cut short by a signal saves the training
/// state without it, for the resumed run to evaluate.
fn evaluate_and_save(
    run: &RunDir,
    s: &Setup,
    p: &mut Progress,
    bar: &ProgressBar,
) -> Result<Option<f64>> {
    let started = Instant::now();
    let Some(val) = evaluate(s)? else {
        save_checkpoint(run, s.state(), p, None)?;
        return Ok(None);
    };
    let forward_s = started.elapsed().as_secs_f64();
    record_evaluation(s, p, val)?;
    save_checkpoint(run, s.state(), p, Some(val))?;
    let (row, sample) = (&p.rows[p.rows.len() - 1], &p.samples[p.samples.len() - 1]);
    bar.suspend(|| {
        crate::note!(
            "step {:>6}: train {:.4}, val {val:.4}, lr {:.2e}  {}",
            p.step,
            row.train_loss,
            row.lr,
            shortened(&sample.text.replace('\n', " "), SHOWN_SAMPLE_CHARS)
        )
    });
    Ok(Some(forward_s))
}

/// The seconds of a forward pass over one validation batch (drawn from a stream of its own: the
/// run's batches are not disturbed), for `--minutes` to plan its evaluations and its end: the
/// fastest of three, the first paying for what a pass allocates once.
fn time_forward(s: &Setup) -> Result<f64> {
    let (cfg, mut rng) = (&s.cfg, rng(s.cfg.train.seed, Stream::Validation));
    let (t, block) = (cfg.train.batch_size, cfg.model.block_size);
    let (x, y) = s.splits.batch(Split::Val, t, block, &mut rng, &s.device)?;
    let mut fastest = f64::INFINITY;
    for _ in 0..3 {
        let started = Instant::now();
        s.shards.loss(&s.model, &x, &y)?;
        fastest = fastest.min(started.elapsed().as_secs_f64());
    }
    Ok(fastest)
}

/// Records the validation loss `val` of the current step: the interval's metrics row, and a poem
/// drawn from the model as it is.
pub(super) fn record_evaluation(s: &Setup, p: &mut Progress, val: f64) -> Result<()> {
    let t = &s.cfg.train;
    let lr = rate_at(&s.cfg, p.step - 1, s.cfg.optimizer.learning_rate);
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
    let seed = s.cfg.train.seed.wrapping_add(p.step as u64);
    let text = eval_sample(s, &mut rng(seed, Stream::EvalSample))?;
    p.samples.push(EvalSample { step: p.step, text });
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
    let (length, stop) = match s.cfg.data.kind {
        CorpusKind::Text => (200, None),
        _ => (100, Some(newline)),
    };
    let gen = Generation::new(length, Sampling::with_temperature(0.8), stop);
    let ids = generate(&s.model, &[newline], &gen, rng, &mut |_| {})?;
    Ok(s.tokenizer.decode(&ids)?.trim_end().to_string())
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
    let started = opts.clock.unwrap_or_else(Instant::now);
    let mut run = OpenRun::open(&opts)?;
    match train_open(&opts, &mut run, started) {
        Ok(summary) => Ok(summary),
        Err(e) => {
            run.abandon();
            Err(e)
        }
    }
}

/// Whether the run evaluates after `step`.
pub(super) fn evaluates_at(s: &Setup, step: usize) -> bool {
    step.is_multiple_of(s.cfg.train.eval_interval) || step == s.cfg.train.max_iters
}

/// Whether a resumed run stands at a step whose evaluation a signal cut short (or that a new
/// eval_interval adds), so that it evaluates there before its next step.
fn evaluation_pending(s: &Setup, p: &Progress) -> bool {
    p.step > 0 && evaluates_at(s, p.step) && p.rows.last().map(|r| r.step) != Some(p.step)
}

/// [`train`] on the open run `run`, the process having started at `started`.
fn train_open(opts: &TrainOptions, run: &mut OpenRun, started: Instant) -> Result<TrainSummary> {
    let (dir, s, p) = (&run.run, &mut run.s, &mut run.p);
    let max_iters = s.cfg.train.max_iters;
    let mut end = opts.stop_at.map_or(max_iters, |stop| stop.min(max_iters));
    if let Some(stop) = opts.stop_at.filter(|&stop| stop <= p.step) {
        bail!(
            "--stop-at {stop}: the run is already at step {}; give a later step",
            p.step
        );
    }
    let last = opts.resume.then(|| last_summary(dir)).flatten();
    let ended_before = last.as_ref().is_some_and(ended);
    let path = step_path(s); // the header's second line, and the summary's
    if opts.progress {
        announce(s, dir, &path);
    }
    if p.step == end {
        crate::train::fit::check_fitted_at_end(s, p)?;
    }
    let bar = progress_bar(opts.progress, max_iters, p.step);
    if evaluation_pending(s, p) {
        evaluate_and_save(dir, s, p, &bar)?;
    }
    if p.step < end {
        crate::train::fit::reset(s, p)?; // the model trains as without its fitted biases
    }
    let tokens_per_step = (s.cfg.train.batch_size * s.cfg.model.block_size) as f64;
    let mut pace = Pace::default();
    let expected = Expected::of(&s.cfg, &s.texts)?;
    let mut planner = s.cfg.train.minutes.map(|minutes| {
        let val_batches = s.splits.tokens(Split::Val).len() as f64 / tokens_per_step;
        Planner::new(Budget::new(&s.cfg, minutes, val_batches))
    });
    while p.step < end {
        let step_start = Instant::now();
        let loss = train_step(s, p).map_err(|e| match e.is::<LossNotFinite>() {
            true => anyhow::anyhow!("{e}; {}", what_is_kept(dir, &s.cfg.optimizer, p.saved_step)),
            false => e,
        })?;
        let dt = step_start.elapsed().as_secs_f64();
        p.interval.seconds += dt;
        (pace.steps, pace.seconds) = (pace.steps + 1, pace.seconds + dt);
        p.elapsed_s += dt;
        if let Some(planner) = planner.as_mut() {
            if planner.wants_timing_at(p.step) {
                planner.timed_end(time_forward(s)?, crate::train::fit::seconds(s)?);
            }
            // The wall time of this process, and the training time of the runs it resumes.
            let spent = started.elapsed().as_secs_f64() + p.elapsed_s - pace.seconds;
            let planned = s.cfg.train.max_iters;
            if let Some(plan) = planner.after_step(p.step, dt, spent, planned) {
                let minutes = s.cfg.train.minutes.unwrap_or_default();
                bar.suspend(|| crate::note!("{}", with_expected(&plan, minutes, &expected)));
                s.cfg.train.max_iters = plan.steps;
                end = opts.stop_at.map_or(plan.steps, |stop| stop.min(plan.steps));
                bar.set_length(plan.steps as u64);
            }
        }
        say_fitted(crate::train::fit::fit_after_last_step(s, p)?, &bar);
        bar.set_position(p.step as u64);
        bar.set_message(format!(
            "loss {loss:.3} | {:.0} tok/s",
            tokens_per_step * p.interval.steps as f64 / p.interval.seconds
        ));
        if evaluates_at(s, p.step) {
            let forward_s = evaluate_and_save(dir, s, p, &bar)?;
            if let (Some(planner), Some(seconds)) = (planner.as_mut(), forward_s) {
                planner.evaluated(s.cfg.train.eval_iters, seconds);
            }
            if p.step == s.cfg.train.max_iters && kept_earlier_weights(p) {
                say_fitted_kept(crate::train::fit::fit_kept_weights(dir, s)?, &bar);
            }
        } else if p.step == end || interrupt::requested() {
            save_checkpoint(dir, s.state(), p, None)?;
        }
        if interrupt::requested() {
            break;
        }
    }
    bar.finish_and_clear();
    let stopped_early = p.step < end || evaluation_pending(s, p);
    let mut summary = summary_at_end(s, p, dir, (pace, tokens_per_step), started, path);
    summary.interrupted = stopped_early;
    summary.ended_before = ended_before;
    summary.expected_val_loss_whole = expected.and_then(|e| e.at(s.cfg.train.max_iters));
    if summary.steps_trained == 0 {
        carried_over(&mut summary, last.as_ref());
    }
    finish(dir, s, summary, started)
}

/// The line `train` prints about `plan`, with the loss the ladder's records expect of it (in
/// full the first time).
fn with_expected(plan: &Plan, minutes: f64, expected: &Option<Expected>) -> String {
    match expected {
        None => plan.describe(minutes),
        Some(e) if plan.first => format!("{}\n{}", plan.describe(minutes), e.describe(plan.steps)),
        Some(e) => match e.at(plan.steps) {
            Some(loss) => format!("{}; expect about {loss:.3}", plan.describe(minutes)),
            None => format!("{}; {}", plan.describe(minutes), e.describe(plan.steps)),
        },
    }
}

/// Says what trains, on what, into which folder, and how a step runs (`path`).
fn announce(s: &Setup, dir: &RunDir, path: &str) {
    let m = &s.cfg.model;
    crate::note!(
        "training {} × {} × {} dims, {} positions, on {} → {}\n{}",
        count(m.n_layer, "layer"),
        count(m.n_head, "head"),
        m.n_embd,
        m.position,
        s.cfg.data.corpus,
        dir.path.display(),
        path
    );
}

/// The steps this invocation trained and the seconds they took.
#[derive(Default)]
struct Pace {
    steps: usize,
    seconds: f64,
}

/// The summary of the run where its training loop ended (before its final evaluation), with the
/// pace of this invocation (its steps and seconds, of `tokens_per_step` each).
fn summary_at_end(
    s: &Setup,
    p: &Progress,
    dir: &RunDir,
    (pace, tokens_per_step): (Pace, f64),
    started: Instant,
    step_path: String,
) -> TrainSummary {
    let last_row = p.rows.last();
    TrainSummary {
        steps: p.step,
        steps_trained: pace.steps,
        train_loss: match p.interval.steps {
            0 => last_row.map_or(f64::NAN, |r| r.train_loss),
            _ => p.interval.mean_loss(),
        },
        val_loss: last_row.map_or(f64::NAN, |r| r.val_loss),
        val_loss_whole: f64::NAN,
        expected_val_loss_whole: None,
        best_val_loss: p.best_val,
        tokens_per_s: match pace.seconds > 0.0 {
            true => pace.steps as f64 * tokens_per_step / pace.seconds,
            false => 0.0,
        },
        wall_s: started.elapsed().as_secs_f64(),
        checkpoint: dir.path.display().to_string(),
        samples: Vec::new(),
        interrupted: false,
        quit: true,
        max_iters: s.cfg.train.max_iters,
        ended_before: false,
        peak_memory_bytes: crate::machine::peak_memory(),
        step_path,
        machine: crate::machine::Machine::detect().describe(),
        finished: crate::clock::UtcTime::now().to_string(),
    }
}

/// Ends a run whose checkpoint is on disk: its loss over the whole validation split and three
/// poems, unless a signal stopped it (Ctrl-C, SIGTERM: it quits, and a resume ends it so). A
/// signal during this end skips what is left of it alike; one after that ends the process at
/// once.
fn finish(
    dir: &RunDir,
    s: &Setup,
    mut summary: TrainSummary,
    started: Instant,
) -> Result<TrainSummary> {
    summary.quit = interrupt::requested();
    if summary.quit {
        // Written before a later signal may end the process at once.
        write_summary(dir, &summary)?;
        interrupt::checkpoint_saved();
        return Ok(summary);
    }
    interrupt::checkpoint_saved();
    match final_evaluation(s, interrupt::requested)? {
        Some((loss, samples)) => (summary.val_loss_whole, summary.samples) = (loss, samples),
        None => (summary.interrupted, summary.quit) = (true, true),
    }
    summary.wall_s = started.elapsed().as_secs_f64(); // the final evaluation's time included
    summary.peak_memory_bytes = crate::machine::peak_memory();
    summary.finished = crate::clock::UtcTime::now().to_string();
    write_summary(dir, &summary)?;
    Ok(summary)
}

/// The loss of the final weights over the whole validation split and three poems drawn from
/// them; None where `cut_short` says so between two batches or two poems.
fn final_evaluation(s: &Setup, cut_short: impl Fn() -> bool) -> Result<Option<(f64, Vec<String>)>> {
    let Some(loss) = whole_split_loss_until(&s.model, &s.shards, &s.splits, &s.device, &cut_short)?
    else {
        return Ok(None);
    };
    let mut sample_rng = rng(s.cfg.train.seed, Stream::FinalSamples);
    let mut samples = Vec::new();
    for _ in 0..3 {
        if cut_short() {
            return Ok(None);
        }
        samples.push(draw_sample(s, &mut sample_rng)?);
    }
    Ok(Some((loss, samples)))
}

/// Whether the weights the run keeps are of an earlier evaluation than its last (the last was not
/// its best).
fn kept_earlier_weights(p: &Progress) -> bool {
    p.rows.last().is_some_and(|r| r.val_loss > p.best_val)
}

/// Says that the kept weights of an earlier step were fitted too, and to what.
fn say_fitted_kept(kept: Option<(String, Vec<crate::train::fit::Fitted>)>, bar: &ProgressBar) {
    let Some((step, fitted)) = kept else {
        return;
    };
    for fitted in fitted {
        bar.suspend(|| {
            crate::note!(
                "fitted {} to the kept weights of step {step} too (the best evaluation): [{}]",
                fitted.tensor,
                shown_biases(&fitted)
            )
        });
    }
}

/// A fit's biases as the notes show them: `0.050, 1.780, 2.290`.
fn shown_biases(fitted: &crate::train::fit::Fitted) -> String {
    let biases: Vec<String> = fitted.biases.iter().map(|b| format!("{b:.3}")).collect();
    biases.join(", ")
}

/// Says what the biases fitted after the last step ([`crate::train::fit`]) became.
fn say_fitted(fitted: Vec<crate::train::fit::Fitted>, bar: &ProgressBar) {
    for fitted in fitted {
        if fitted.positions.iter().all(|&n| n == 0) {
            bar.suspend(|| {
                crate::note!(
                    "{}: no position of the training batches takes its biases (a text of no poems?): left as they were",
                    fitted.tensor
                )
            });
            continue;
        }
        let positions: Vec<String> = fitted.positions.iter().map(|n| n.to_string()).collect();
        bar.suspend(|| {
            crate::note!(
                "fitted {} to the final weights: [{}] (on {} positions of training batches)",
                fitted.tensor,
                shown_biases(&fitted),
                positions.join(", ")
            )
        });
    }
}

/// The summary.json that the last invocation on `run` wrote, where it reads.
fn last_summary(run: &RunDir) -> Option<serde_json::Value> {
    let path = run.file(SUMMARY_FILE);
    let text = crate::files::read_text_limited(&path, crate::files::SMALL_FILE_LIMIT).ok()?;
    serde_json::from_str(&text).ok()
}

/// Whether `last` (a run's summary.json) says that its invocation ended the run: all its steps
/// trained, its final evaluation done.
fn ended(last: &serde_json::Value) -> bool {
    last["interrupted"] == false
        && last["val_loss_whole"].is_number()
        && last["steps"].is_u64()
        && last["steps"] == last["max_iters"]
}

/// A summary of an invocation that trained no step takes the training's figures from the one
/// that trained them (`last`, of the same step): its losses (metrics.csv keeps them rounded) and
/// its tokens per second (none were trained here).
fn carried_over(summary: &mut TrainSummary, last: Option<&serde_json::Value>) {
    let Some(last) = last.filter(|l| l["steps"].as_u64() == Some(summary.steps as u64)) else {
        return;
    };
    let figures = [
        ("train_loss", &mut summary.train_loss),
        ("val_loss", &mut summary.val_loss),
        ("best_val_loss", &mut summary.best_val_loss),
        ("tokens_per_s", &mut summary.tokens_per_s),
    ];
    for (key, figure) in figures {
        if let Some(value) = last[key].as_f64() {
            *figure = value;
        }
    }
}

/// Writes `summary` as the run's summary.json.
fn write_summary(run: &RunDir, summary: &TrainSummary) -> Result<()> {
    let json = serde_json::to_string_pretty(summary)?;
    atomic_write(&run.file(SUMMARY_FILE), json.as_bytes())
}

/// What runs the training step: the CPU engine with the kernels chosen for this CPU (its model
/// and vector extensions, gemm's kernels or the bf16 unit, the loops' instruction set, the units and threads),
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
        match s.shards.threads() {
            1 => format!("units of {UNIT_ROWS} positions on 1 thread"),
            n => format!("units of {UNIT_ROWS} positions shared by {n} threads"),
        }
    )
}
