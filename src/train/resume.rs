//! Resuming a run: what a resume may change of the run's recipe and what it may not (refused,
//! named), and the checkpoint it continues, loaded into the run's model and optimiser.

use crate::config::{shown, RunConfig};
use crate::data::RunText;
use crate::train::checkpoint::load_params;
use crate::train::metrics::{read_metrics, read_samples};
use crate::train::run_dir::{RunDir, CONFIG_FILE, METRICS_FILE, SAMPLES_FILE, STATE_FILE};
use crate::train::safetensors::{read_safetensors, refuse_non_finite};
use crate::train::setup::Setup;
use crate::train::state::{Progress, SavedState};
use anyhow::{bail, Context, Result};
use std::path::Path;

/// Checks that a resume asks for the model saved in the run directory, and for the seed and
/// eval_iters that fix its validation batches, and changes nothing else of its recipe but what
/// [`CHANGEABLE_ON_RESUME`] lists; returns the notes on what it does change (a new batch size
/// redraws the validation batches, a new rate changes the run's course).
pub(super) fn check_resume(run: &RunDir, cfg: &RunConfig) -> Result<Vec<String>> {
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
    check_recipe_kept(run, cfg, &saved)?;
    let saved_config = saved;
    let (t, saved) = (&cfg.train, &saved_config.train);
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
    // A step count given for a run planned by minutes ends the plan (minutes is then None).
    if t.minutes.is_some() && saved.minutes != t.minutes {
        let started = match saved.minutes {
            Some(minutes) => format!(
                "planned its steps for {} when it started",
                crate::config::minutes_said(minutes)
            ),
            None => "was given its steps when it started".into(),
        };
        bail!(
            "train.minutes: the run in {} {started} (max_iters {}): a resumed run keeps its step count; \
             leave minutes out, and give max_iters (--max-iters) to train longer",
            run.path.display(),
            saved.max_iters
        );
    }
    check_nothing_else_changed(run, cfg, &saved_config)?;
    let (o, was) = (&cfg.optimizer, &saved_config.optimizer);
    let rates = [
        ("learning_rate", was.learning_rate, o.learning_rate),
        (
            "muon_learning_rate",
            was.muon_learning_rate(),
            o.muon_learning_rate(),
        ),
    ];
    let mut notes: Vec<String> = rates
        .into_iter()
        .filter(|(_, was, now)| was != now)
        .map(|(name, was, now)| {
            format!(
                "note: {name} {} → {} from here on: the run's course changes at this step, so it no longer repeats an uninterrupted one",
                shown(was),
                shown(now)
            )
        })
        .collect();
    if saved.batch_size != t.batch_size {
        notes.push(format!(
            "note: batch_size {} → {}: the fixed validation batches are drawn at the new size from here on, \
             so the validation losses before this resume and after it come from different batches",
            saved.batch_size, t.batch_size
        ));
    }
    Ok(notes)
}

/// The settings a resumed run may change: how long it trains (a step count given ends a plan by
/// minutes; a plan itself stays, [`check_resume`]), how often it evaluates, its batch (noted: the validation batches are redrawn), the
/// precision of its products, where its corpus is (its poems are checked by fingerprint), and
/// its peak learning rates, to go on from a checkpoint kept when the loss exploded (noted: its
/// course changes there).
const CHANGEABLE_ON_RESUME: [&str; 7] = [
    "train.max_iters",
    "train.eval_interval",
    "train.batch_size",
    "train.dtype",
    "data.corpus",
    "optimizer.learning_rate",
    "optimizer.muon_learning_rate",
];

/// Refuses a resume that would change what the run's saved state belongs to: its optimiser (its
/// moments are saved), its schedule (a new one would jump the learning rate) and the kind its
/// corpus is read as (it decides the validation split).
fn check_recipe_kept(run: &RunDir, cfg: &RunConfig, saved: &RunConfig) -> Result<()> {
    if saved.optimizer.kind != cfg.optimizer.kind {
        bail!(
            "the optimizer is {} but the run in {} was trained with {}: a resumed run keeps its optimizer, \
             whose moments it saved; leave --optimizer out (or start a new run with --out)",
            cfg.optimizer.kind.name(),
            run.path.display(),
            saved.optimizer.kind.name()
        );
    }
    let (s, was) = (&cfg.schedule, &saved.schedule);
    if (was.kind, was.decay_fraction()) != (s.kind, s.decay_fraction()) {
        bail!(
            "the schedule is {} but the run in {} was trained with {}: a resumed run keeps \
             its schedule, since a new one would jump its learning rate mid-run; leave --schedule out (or start a new run with --out)",
            schedule_named(s),
            run.path.display(),
            schedule_named(was),
        );
    }
    if saved.data.trained_kind() != cfg.data.kind {
        bail!(
            "the corpus is read as {} but the run in {} was trained on it as {}: a resumed run keeps its kind, \
             since the kind decides the validation split; leave --corpus-kind out (or start a new run with --out)",
            cfg.data.kind,
            run.path.display(),
            saved.data.trained_kind()
        );
    }
    Ok(())
}

/// Refuses a resume that changes any other setting of the run's recipe but those of
/// [`CHANGEABLE_ON_RESUME`] (a new warm-up, rate or decay would change its course mid-run).
fn check_nothing_else_changed(run: &RunDir, cfg: &RunConfig, saved: &RunConfig) -> Result<()> {
    // What training fills in from the corpus is checked with the corpus itself; a plan by
    // minutes, by check_resume.
    let filled_in = ["data.kind", "data.header_fields", "train.minutes"];
    let changed = saved
        .spelled_out()
        .changes(&cfg.spelled_out())
        .into_iter()
        .find(|c| {
            !CHANGEABLE_ON_RESUME.contains(&c.key.as_str()) && !filled_in.contains(&c.key.as_str())
        });
    if let Some(change) = changed {
        let [saved, asked] = &change.values;
        bail!(
            "{} differs (saved {saved}, asked {asked}) from the run saved in {}: a resumed run keeps its recipe, \
             since a change would alter its course mid-run; leave it out (a resume may change {}), or start a new run with --out",
            change.key,
            run.path.display(),
            CHANGEABLE_ON_RESUME.join(", ")
        );
    }
    Ok(())
}

/// A schedule as a message names it: its kind, with its decay_fraction where it has one.
fn schedule_named(s: &crate::config::ScheduleConfig) -> String {
    match s.kind {
        crate::config::ScheduleKind::Wsd => format!("wsd (decay_fraction {})", s.decay_fraction()),
        kind => kind.name().to_string(),
    }
}

/// The progress of the checkpoint a resume continues in `run`, whose weights and moments it loads
/// into the model and optimiser of `s`: refused where they are not finite, or where the corpus is
/// not the one the run was trained on.
pub(super) fn restore(run: &RunDir, s: &mut Setup, run_text: &RunText) -> Result<Progress> {
    let mut p = Progress::new(s.cfg.train.seed);
    let path = run.file(STATE_FILE);
    let (tensors, metadata) = read_safetensors(&path)?;
    load_params(&s.varmap, &tensors, "param.", &path)?; // checks the weights are finite
    let moments = tensors.iter().filter(|(n, _)| !n.starts_with("param."));
    refuse_non_finite(
        moments.map(|(n, t)| (n.as_str(), t)),
        &path,
        "this checkpoint cannot be resumed",
    )?;
    let saved = SavedState::from_metadata(&metadata, &path)?;
    // Checkpoints of earlier versions have no fingerprint of their corpus.
    if let Some(whole) = &saved.corpus {
        if *whole != s.corpus {
            bail!(
                "{}: resume with the files the run started on, or start a new run with --out",
                changed_text(run_text, saved.texts.as_deref())
            );
        }
    }
    p.step = saved.step;
    p.best_val = saved.best_val_loss;
    p.elapsed_s = saved.elapsed_s;
    p.batch_rng.set_word_pos(saved.batch_rng_pos);
    p.dropout_rng.set_word_pos(saved.dropout_rng_pos);
    p.interval = saved.interval.unwrap_or_default();
    p.fitted = match saved.fitted {
        Some(fitted) => fitted,
        None => crate::train::fit::any_fitted(s)?, // an earlier version's checkpoint
    };
    s.opt.load_state(&tensors, p.step).with_context(|| {
        format!(
            "{}: its optimiser moments do not fit this model, so it cannot be resumed (start a new run with --out)",
            path.display()
        )
    })?;
    p.saved_step = Some(p.step);
    if run.file(METRICS_FILE).exists() {
        p.rows = read_metrics(&run.file(METRICS_FILE))?;
        p.rows.retain(|r| r.step <= p.step);
    } else if p.step >= s.cfg.train.eval_interval && p.best_val.is_finite() {
        bail!(
            "{} has no {METRICS_FILE}, though the run evaluated before step {}: its curve would begin again here; \
             put the file back, or start a new run with --out",
            run.path.display(),
            p.step
        );
    }
    if run.file(SAMPLES_FILE).exists() {
        p.samples = read_samples(&run.file(SAMPLES_FILE))?;
        p.samples.retain(|r| r.step <= p.step);
    }
    Ok(p)
}

/// What changed of the texts of `corpus` since a checkpoint that saved their fingerprints
/// (`saved`; checkpoints of earlier versions saved only the whole one): the file whose text did.
fn changed_text(run_text: &RunText, saved: Option<&str>) -> String {
    let what = |key: &str| {
        match key {
        "data.validation" => "the file this run was measured on (its held-out text changed), so its curve would not go on from where it stood",
        "data.decay_corpus" => "the file this run's decay was trained on (its text changed)",
        _ => "the corpus this run was trained on (its poems or their order changed), so other poems would be held out for validation and the old ones trained on",
    }
    };
    if let Some((key, path)) = saved.and_then(|saved| run_text.changed_text(saved)) {
        return match key {
            "data.corpus" => format!("{path} is not {}", what(key)),
            _ => format!("{path} ({key}) is not {}", what(key)),
        };
    }
    let others: Vec<String> = [
        &run_text.held_out.as_ref().map(|h| h.path.clone()),
        &run_text.decay.as_ref().map(|d| d.path.clone()),
    ]
    .into_iter()
    .flatten()
    .cloned()
    .collect();
    match others.is_empty() {
        true => format!("{} is not {}", run_text.corpus.path, what("data.corpus")),
        false => format!(
            "the text of {} or of a file read with it ({}) is not the one this run was trained and measured on",
            run_text.corpus.path,
            others.join(", ")
        ),
    }
}

/// Refuses to resume a run at `step` for a total of `max_iters` steps that it has passed.
pub fn check_steps_left(dir: &Path, step: usize, max_iters: usize) -> Result<()> {
    if max_iters < step {
        bail!(
            "max_iters {max_iters} is below the step the run in {} has reached ({step}): give more steps, e.g. --max-iters {}",
            dir.display(),
            step.saturating_mul(2).max(step + 1)
        );
    }
    Ok(())
}
