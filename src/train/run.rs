//! A run opened for training: its config, corpus, tokenizer, model and optimiser set up, fresh or
//! restored from its checkpoint (weights, moments, random streams, metrics and samples so far),
//! under its directory's lock; and the checkpoints it writes. The training loop
//! ([`super::trainer`]) gets a ready [`OpenRun`] and only trains, evaluates and asks it to save.

use crate::config::{shown, OptimizerKind, RunConfig};
use crate::data::error::describe_char;
use crate::data::{CharTokenizer, Corpus, DataError, Splits};
use crate::files::atomic_write;
use crate::model::Gpt;
use crate::ops::Precision;
use crate::train::checkpoint::*;
use crate::train::metrics::{
    plot_losses, read_metrics, read_samples, samples_to_jsonl, to_csv, EvalSample, MetricRow,
};
use crate::train::muon::MuonParams;
use crate::train::optim::{AdamWParams, Optimizer};
use crate::train::parent::{write_record, ParentRecord, PARENT_FILE};
use crate::train::shards::Shards;
use crate::train::state::{Interval, SavedState};
use crate::train::TrainOptions;
use anyhow::{bail, Context, Result};
use candle_core::Device;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::path::{Path, PathBuf};

/// A run ready to train: set up, at its step, its directory locked while this lives.
pub(super) struct OpenRun {
    pub(super) s: Setup,
    pub(super) p: Progress,
    lock: RunLock,
    /// The directories that opening it created, and whether it had a lock file before.
    made: Vec<PathBuf>,
    had_lock: bool,
}

impl OpenRun {
    /// Opens the run `opts` asks for: a new one in a directory without a run in it, or the
    /// checkpoint a resume continues, checked against the config asked for (and the steps it
    /// has left); refused before anything is written, and nothing left behind, when it cannot
    /// be trained.
    pub(super) fn open(opts: &TrainOptions) -> Result<Self> {
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
        let opened = set_up(opts).and_then(|mut s| {
            let p = restore(&mut s, opts.resume)?;
            check_steps_left(&s.run.path, p.step, s.cfg.train.max_iters)?;
            Ok((s, p))
        });
        match opened {
            Ok((s, p)) => Ok(OpenRun {
                s,
                p,
                lock,
                made,
                had_lock,
            }),
            Err(e) => {
                drop(lock);
                opts.run.tidy_after_failure(&made, had_lock);
                Err(e)
            }
        }
    }

    /// Releases a run whose training failed, removing what opening it added: the lock file if
    /// there was none, and the directories it made while they are empty.
    pub(super) fn abandon(self) {
        let OpenRun {
            s,
            lock,
            made,
            had_lock,
            ..
        } = self;
        drop(lock);
        s.run.tidy_after_failure(&made, had_lock);
    }
}

/// Everything a run trains with, set up once: config, data, tokenizer, model and optimiser.
pub(super) struct Setup {
    pub(super) cfg: RunConfig,
    pub(super) run: RunDir,
    /// The fingerprint of the corpus's poems, saved with the training state.
    pub(super) corpus: String,
    pub(super) tokenizer: CharTokenizer,
    pub(super) splits: Splits,
    pub(super) model: Gpt,
    pub(super) varmap: candle_nn::VarMap,
    pub(super) opt: Optimizer,
    pub(super) shards: Shards,
    pub(super) device: Device,
    /// The run it was fine-tuned from, recorded at its first checkpoint.
    pub(super) parent: Option<ParentRecord>,
}

/// Where a run stands: everything its checkpoint saves besides the tensors.
pub(super) struct Progress {
    pub(super) step: usize,
    pub(super) best_val: f64,
    pub(super) elapsed_s: f64,
    pub(super) batch_rng: ChaCha8Rng,
    pub(super) dropout_rng: ChaCha8Rng,
    pub(super) interval: Interval,
    pub(super) rows: Vec<MetricRow>,
    /// The poem drawn at each evaluation.
    pub(super) samples: Vec<EvalSample>,
    /// The step of the checkpoint in the run directory, if there is one.
    pub(super) saved_step: Option<usize>,
}

pub(super) fn rng(seed: u64, stream: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(stream);
    rng
}

/// Reads the corpus, saying on stderr which kind it is read as, and why, and how many of its
/// lines were left out.
fn load_corpus(cfg: &RunConfig, progress: bool) -> Result<Corpus> {
    let d = &cfg.data;
    let corpus = Corpus::load(Path::new(&d.corpus), d.kind)?;
    if progress {
        crate::note!("{}", corpus.describe(&d.corpus));
    }
    if progress && corpus.skipped > 0 {
        crate::note!(
            "note: {} of {} lines of {} are not regular verse (4 or 8 lines of 5 or 7 characters, each ended by ，。？！；) and were left out; to keep every line, train with --corpus-kind lines",
            corpus.skipped,
            corpus.skipped + corpus.items.len(),
            d.corpus
        );
    }
    Ok(corpus)
}

/// The vocabulary: the run's saved tokenizer when resuming, else one built from the corpus (the
/// parent's extended by it, when fine-tuning).
fn tokenizer_for(opts: &TrainOptions, corpus: &Corpus) -> Result<CharTokenizer> {
    match (opts.resume, &opts.parent) {
        (true, _) => Ok(CharTokenizer::load(&opts.run.file(TOKENIZER_FILE))?),
        (false, Some(parent)) => parent.tokenizer_for(&corpus.text()),
        (false, None) => Ok(CharTokenizer::from_text(&corpus.text())?),
    }
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
        bail!(
            "train.minutes: the run in {} planned its steps when it started (max_iters {}): a resumed run keeps its plan; \
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
    for (name, was, now) in rates.into_iter().filter(|(_, was, now)| was != now) {
        if progress {
            crate::note!(
                "note: {name} {} → {} from here on: the run's course changes at this step, so it no longer repeats an uninterrupted one",
                shown(was),
                shown(now)
            );
        }
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
    let changed = saved.changes(cfg).into_iter().find(|c| {
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
    let run = &opts.run;
    match opts.resume {
        true => run.check_resumable()?,
        false => run.check_fresh()?,
    }
    run.remove_temporary_files();
    set_up_with(opts, load_corpus(&opts.config, opts.progress)?)
}

/// [`set_up`] on `corpus`, read already: tokenizer, data and a freshly initialised model.
pub(super) fn set_up_with(opts: &TrainOptions, corpus: Corpus) -> Result<Setup> {
    let (run, mut cfg) = (opts.run.clone(), opts.config.clone());
    cfg.data.kind = corpus.kind; // saved with the run: a resume reads it the same way
    let header_fields = corpus.header_fields(); // what the run writes before its poems
    match cfg.data.header_fields {
        Some(given) if given != header_fields => bail!(
            "data.header_fields is {given} but {} begins its lines with headers of {header_fields} fields: it is what train \
             finds in the corpus, not a setting; leave it out (a resumed run needs the corpus it started on)",
            cfg.data.corpus
        ),
        _ => cfg.data.header_fields = Some(header_fields),
    }
    if opts.resume && opts.parent.is_some() {
        bail!("--init-from starts a new run: leave it out to resume one (the run keeps the weights it trained)")
    }
    let tokenizer = tokenizer_for(opts, &corpus)?;
    match cfg.model.vocab_size {
        0 => cfg.model.vocab_size = tokenizer.vocab_size(),
        v if v != tokenizer.vocab_size() => bail!(
            "vocab_size {v} in the config differs from the tokenizer's {}: remove vocab_size from the config",
            tokenizer.vocab_size()
        ),
        _ => {}
    }
    cfg.validate()?;
    crate::verse::inputs::check(&cfg.model)?;
    if opts.resume {
        check_resume(&run, &cfg, opts.progress)?;
    }
    let splits = match Splits::new(&corpus, &tokenizer, cfg.model.block_size) {
        Err(DataError::UnknownChars(chars)) if opts.resume => bail!(
            "{} has {} characters that the run's vocabulary lacks (such as {}): a run keeps the vocabulary of the corpus it started on, so resume with that corpus, or start a new run with --out",
            cfg.data.corpus,
            chars.len(),
            chars.iter().take(3).map(|&c| describe_char(c)).collect::<Vec<_>>().join(" ")
        ),
        splits => splits?,
    };
    let inputs = crate::verse::inputs::for_tokenizer(&cfg.model, &tokenizer)?;
    let input_parameters = crate::model::inputs::parameters(&inputs, cfg.model.n_embd) as f64;
    cfg.model
        .check_training_memory(cfg.train.batch_size, input_parameters)?;
    let t = &cfg.train;
    let (model, varmap) = Gpt::seeded_with(&cfg.model, inputs, t.seed, &opts.device)?;
    if let Some(parent) = &opts.parent {
        parent.copy_weights_into(&varmap)?;
        if opts.progress {
            let added = tokenizer.vocab_size() - parent.record.vocab_size;
            crate::note!(
                "fine-tuning from {} (weights {}), its {} characters and {added} new ones of {}",
                parent.record.run,
                parent.record.weights,
                parent.record.vocab_size,
                cfg.data.corpus
            );
        }
    }
    check_precision(t.dtype, &opts.device, opts.kernels)?;
    let model = model.with_kernels(opts.kernels);
    let o = &cfg.optimizer;
    let params = AdamWParams {
        beta1: o.beta1,
        beta2: o.beta2,
        eps: 1e-8,
        weight_decay: o.weight_decay,
    };
    let muon = (o.kind == OptimizerKind::Muon).then_some(MuonParams {
        momentum: o.muon_momentum(),
    });
    let vars = varmap.data().lock().expect("parameter map").clone();
    let opt = Optimizer::new(vars, params, muon)?;
    Ok(Setup {
        parent: opts.parent.as_ref().map(|p| p.record.clone()),
        shards: Shards::for_device(&opts.device, (cfg.train.batch_size, cfg.model.block_size))?,
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
pub(super) fn restore(s: &mut Setup, resume: bool) -> Result<Progress> {
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
                s.cfg.data.corpus
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

/// What to say about the run directory when training must stop on a non-finite number.
pub(super) fn what_is_kept(s: &Setup, p: &Progress) -> String {
    let o = &s.cfg.optimizer;
    let lower = match o.kind {
        OptimizerKind::Muon => format!(
            "lower Muon's --muon-learning-rate (now {}) or AdamW's --learning-rate (now {})",
            shown(o.muon_learning_rate()),
            shown(o.learning_rate)
        ),
        OptimizerKind::Adamw => format!("lower --learning-rate (now {})", shown(o.learning_rate)),
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

/// Writes a checkpoint: at an evaluation (`val` given) its metrics row and, when it is the best
/// so far, the weights for sampling; always the config, the tokenizer and the training state
/// (last, so that everything it points to exists once it does). Nothing is written when a weight,
/// a moment or the validation loss is not finite: the previous checkpoint stays.
pub(super) fn save_checkpoint(s: &Setup, p: &mut Progress, val: Option<f64>) -> Result<()> {
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
    if let Some(parent) = s
        .parent
        .as_ref()
        .filter(|_| !s.run.file(PARENT_FILE).exists())
    {
        write_record(&s.run, parent)?;
    }
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
