//! Ablations: train variants of one base config with the same seed and data, then compare their
//! losses, and optionally their length extrapolation, order sensitivity and position probes.
//! With `seeds = [...]` every variant trains once per seed, and the results give each variant's
//! mean and range: one seed's loss moves by a few hundredths of a nat.
//!
//! A spec (`configs/ablations/*.toml`) names a base run config and its variants, each a set of
//! keys of `model`, `data`, `train`, `optimizer` and `schedule` that override the base:
//!
//! ```toml
//! name = "heads"
//! base = "configs/ablations/base.toml"
//! [[variant]]
//! name = "1 head"
//! model = { n_head = 1 }
//! ```

use crate::config::{CorpusKind, Override, RunConfig};
use crate::data::{CharTokenizer, RunText, Split, Splits};
use crate::experiments::{lesson, probe};
use crate::model::{Gpt, Mode};
use crate::train::checkpoint::load_params;
use crate::train::load::load_run;
use crate::train::metrics::read_metrics;
use crate::train::run_dir::{RunDir, CONFIG_FILE, LOCK_FILE, METRICS_FILE, MODEL_FILE, STATE_FILE};
use crate::train::safetensors::read_safetensors;
use crate::train::setup::check_precision;
use crate::train::shards::Shards;
use crate::train::trainer::{whole_split_loss, WHOLE_EVAL_BATCH};
use crate::train::{train, TrainOptions};
use anyhow::{bail, Context, Result};
use candle_core::Device;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The longest context a spec may evaluate, in characters: at 4,096 the evaluation's attention
/// holds 64 MB of weights per head and layer; at 100,000 it would need 40 GB and exhaust the
/// machine after every variant had trained.
pub const MAX_CONTEXT: usize = 4_096;

/// An ablation as written in its TOML file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// Short name, also the output directory's.
    pub name: String,
    /// The base run config every variant starts from.
    pub base: PathBuf,
    /// Evaluate each trained variant's validation loss at these context lengths.
    #[serde(default)]
    pub contexts: Vec<usize>,
    /// Compare "白日依山尽" with "山依日白尽" in each trained variant.
    #[serde(default)]
    pub order_probe: bool,
    /// Fit the linear position probe on each layer of each trained variant.
    #[serde(default)]
    pub position_probe: bool,
    /// Train every variant once per seed, each replacing the config's `seed`; empty: once, with
    /// the config's own.
    #[serde(default)]
    pub seeds: Vec<u64>,
    /// The variants, in table order.
    pub variant: Vec<Variant>,
}

/// One variant: a name and the keys it changes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Variant {
    /// Its name in tables and plots.
    pub name: String,
    /// Keys of `[model]` to override.
    #[serde(default)]
    pub model: toml::Table,
    /// Keys of `[data]` to override.
    #[serde(default)]
    pub data: toml::Table,
    /// Keys of `[train]` to override (those of the old layout too, such as `learning_rate`).
    #[serde(default)]
    pub train: toml::Table,
    /// Keys of `[optimizer]` to override.
    #[serde(default)]
    pub optimizer: toml::Table,
    /// Keys of `[schedule]` to override.
    #[serde(default)]
    pub schedule: toml::Table,
}

impl Variant {
    /// The settings it changes, as overrides of the base config.
    fn overrides(&self) -> Result<Vec<Override>> {
        let sections = [
            ("model", &self.model),
            ("data", &self.data),
            ("train", &self.train),
            ("optimizer", &self.optimizer),
            ("schedule", &self.schedule),
        ];
        let mut all = Vec::new();
        for (section, table) in sections {
            for (key, value) in table {
                // Named as the spec names it, not as a --set.
                let key = format!("{section}.{key}");
                all.push(Override::of(&key, value).map_err(|e| match e {
                    crate::config::ConfigError::Parse { message, .. } => {
                        anyhow::anyhow!("{key} is not valid: {message}")
                    }
                    other => other.into(),
                })?);
            }
        }
        Ok(all)
    }
}

impl Spec {
    /// Reads a spec file and checks it, every variant's config included, before anything trains.
    pub fn load(path: &Path) -> Result<Self> {
        let text = crate::files::read_text_limited(path, crate::files::CONFIG_LIMIT)
            .with_context(|| format!("cannot read ablation spec {}", path.display()))?;
        let spec: Spec = toml::from_str(&text)
            .map_err(|e| crate::config::parse_error(&path.display().to_string(), e))
            .with_context(|| format!("ablation spec {} is not valid", path.display()))?;
        spec.check(path)?;
        Ok(spec)
    }

    /// The rules a spec must follow: variants with names that give distinct directories, and
    /// context lengths of 1 to [`MAX_CONTEXT`] tokens.
    fn check(&self, path: &Path) -> Result<()> {
        if self.variant.is_empty() {
            bail!("ablation spec {} has no [[variant]]", path.display());
        }
        if self.dir_name().is_empty() {
            bail!(
                "ablation spec {}: name `{}` needs letters or digits (it names the ablation's directory)",
                path.display(),
                self.name.escape_debug()
            );
        }
        if let Some(bad) = self.contexts.iter().find(|&&c| c == 0) {
            bail!(
                "ablation spec {}: contexts = {:?} holds {bad}: every context is a number of characters, at least 1",
                path.display(),
                self.contexts
            );
        }
        if let Some(bad) = self.contexts.iter().find(|&&c| c > MAX_CONTEXT) {
            bail!(
                "ablation spec {}: contexts = {:?} holds {bad}: the longest context evaluated is {MAX_CONTEXT} characters (its attention takes T × T weights per head)",
                path.display(),
                self.contexts
            );
        }
        let mut dirs: Vec<(String, &str)> = Vec::new();
        for v in &self.variant {
            let dir = slug(&v.name);
            if dir.is_empty() {
                bail!(
                    "variant `{}` of {} needs a name with letters or digits (it names its directory)",
                    v.name,
                    path.display()
                );
            }
            if let Some((_, other)) = dirs.iter().find(|(d, _)| *d == dir) {
                bail!(
                    "variants `{other}` and `{}` of {} would share the directory `{dir}`: give them names that differ in letters or digits",
                    v.name,
                    path.display()
                );
            }
            dirs.push((dir, &v.name));
            if !self.seeds.is_empty() && v.train.contains_key("seed") {
                bail!(
                    "variant `{}` of {} sets `seed` while the spec lists `seeds`: remove one of the two",
                    v.name,
                    path.display()
                );
            }
        }
        for &seed in &self.seeds {
            crate::config::check_toml_integer("a seed of `seeds`", seed)
                .with_context(|| format!("ablation spec {}", path.display()))?;
        }
        if let Some(twice) = self
            .seeds
            .iter()
            .enumerate()
            .find_map(|(i, s)| self.seeds[..i].contains(s).then_some(s))
        {
            bail!(
                "ablation spec {}: `seeds` lists {twice} twice: each seed is one run of every variant",
                path.display()
            );
        }
        Ok(())
    }

    /// The name of the ablation's directory under checkpoints/ablations/: its name as a slug, so
    /// that a spec cannot choose where files go (`../x`, `/abs` or a line break).
    pub fn dir_name(&self) -> String {
        slug(&self.name)
    }

    /// The seeds every variant trains with: the spec's, or `None` for the config's own.
    fn run_seeds(&self) -> Vec<Option<u64>> {
        match self.seeds.is_empty() {
            true => vec![None],
            false => self.seeds.iter().copied().map(Some).collect(),
        }
    }

    /// The run configs of every variant, each checked as training will check it (but for the
    /// vocabulary, which training takes from the corpus).
    pub fn configs(&self) -> Result<Vec<RunConfig>> {
        self.variant
            .iter()
            .map(|v| {
                let cfg = self.config(v)?;
                let mut checked = cfg.clone();
                checked.model.vocab_size = checked.model.vocab_size.max(1);
                checked
                    .validate()
                    .with_context(|| format!("variant `{}` of {}", v.name, self.name))?;
                Ok(cfg)
            })
            .collect()
    }

    /// The full config of `variant`: the base with its overrides, validated except for the
    /// vocabulary (which training fills in).
    pub fn config(&self, variant: &Variant) -> Result<RunConfig> {
        let overrides = variant
            .overrides()
            .with_context(|| format!("variant `{}`", variant.name))?;
        RunConfig::load_with(&self.base, &overrides)
            .with_context(|| format!("variant `{}`", variant.name))
    }
}

/// What one trained variant gave.
#[derive(Debug, Clone, Serialize)]
pub struct VariantResult {
    /// The variant's name.
    pub name: String,
    /// The seed of its weights, batches and dropout.
    pub seed: u64,
    /// Its name in tables and plots: the variant's, with the seed when the spec lists seeds.
    pub label: String,
    /// Its run directory.
    pub dir: String,
    /// Trainable parameters.
    pub parameters: usize,
    /// Steps trained.
    pub steps: usize,
    /// Training loss over the last evaluation interval.
    pub train_loss: f64,
    /// Validation loss at the end: the mean over the run's fixed validation batches.
    pub val_loss: f64,
    /// Validation loss of the final weights over the whole validation split, every held-out
    /// character predicted once (the figure `train` ends with; less noisy than `val_loss`).
    pub val_loss_whole: f64,
    /// Best validation loss.
    pub best_val_loss: f64,
    /// Training time (the steps only), seconds.
    pub train_s: f64,
    /// Training tokens per second.
    pub tokens_per_s: f64,
    /// Validation loss at each of the spec's contexts (`None`: beyond a learned table).
    pub context_losses: Vec<Option<f64>>,
    /// max |Δlogits| between the lesson's sentence and its shuffle, if asked.
    pub order_diff: Option<f32>,
    /// Probe error per layer (embedding first), if asked.
    pub probe_mae: Vec<f64>,
    /// The probe's baseline (guessing the mean position).
    pub probe_baseline: Option<f64>,
    /// The validation curve: (step, val loss).
    pub curve: Vec<(usize, f64)>,
}

/// How to run an ablation.
pub struct AblationOptions {
    /// The spec.
    pub spec: Spec,
    /// Where the runs and results go.
    pub out: PathBuf,
    /// Shrinks every variant to this many steps (smoke runs).
    pub max_iters: Option<usize>,
    /// Print progress on stderr.
    pub progress: bool,
}

/// A directory name for a variant: lower case, runs of other characters as one `-`.
fn slug(name: &str) -> String {
    let mut s = String::new();
    for c in name.to_lowercase().chars() {
        if c.is_ascii_alphanumeric() {
            s.push(c);
        } else if !s.ends_with('-') {
            s.push('-');
        }
    }
    s.trim_matches('-').to_string()
}

/// Trains (or, when a finished run is already there, reuses) every variant and measures it.
pub fn run(opts: &AblationOptions) -> Result<Vec<VariantResult>> {
    let spec = &opts.spec;
    if opts.max_iters == Some(0) {
        bail!("--max-iters 0 would train nothing: give 1 or more (or leave it out for the spec's own)");
    }
    let configs = spec.configs()?;
    // A variant the machine cannot train is refused before the others have trained.
    for (variant, cfg) in spec.variant.iter().zip(&configs) {
        check_precision(cfg.train.dtype, &Device::Cpu, crate::ops::Kernels::Fused)
            .with_context(|| format!("variant `{}` of {}", variant.name, spec.name))?;
    }
    check_out(&opts.out)?;
    let made = crate::files::missing_dirs(&opts.out);
    crate::files::create_dir(&opts.out, "--out")?;
    let results = run_variants(opts, configs);
    if results.is_err() {
        crate::files::remove_empty_dirs(&made);
    }
    results
}

/// The files an ablation writes into its output directory, beside one run directory per variant.
pub const RESULT_FILES: [&str; 3] = ["results.md", "results.csv", "curves.svg"];

/// Whether `name` is a temporary file that an ablation writing its results left behind.
fn is_leftover(name: &str) -> bool {
    crate::files::is_temporary_of(name, &RESULT_FILES)
}

/// Checks that `out` can take an ablation without writing over anything it did not write: it
/// is absent or empty, or holds what an earlier ablation left there (run directories, and its
/// results beside them).
fn check_out(out: &Path) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(out) else {
        return Ok(());
    };
    let (mut runs, mut results, mut foreign) = (0, Vec::new(), Vec::new());
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if is_run_dir(&entry.path()) {
            runs += 1;
        } else if RESULT_FILES.contains(&name.as_str()) {
            results.push(name);
        } else if !is_leftover(&name) {
            foreign.push(name);
        }
    }
    if !foreign.is_empty() {
        foreign.sort();
        bail!(
            "{} holds what no ablation wrote ({}): choose a new or empty directory for --out, or the one of an earlier ablation to continue it",
            out.display(),
            foreign.join(", ")
        );
    }
    if runs == 0 && !results.is_empty() {
        results.sort();
        bail!(
            "{} holds {} but no run of an ablation: choose another --out (nothing there is written over)",
            out.display(),
            results.join(", ")
        );
    }
    Ok(())
}

/// Whether `dir` is a run directory, or one that a run stopped before its first checkpoint left
/// (with the lock it takes first).
fn is_run_dir(dir: &Path) -> bool {
    // A link to a folder elsewhere is no run of this ablation: it would be written through.
    dir.is_dir()
        && !dir.is_symlink()
        && (dir.join(CONFIG_FILE).exists() || dir.join(LOCK_FILE).exists())
}

/// [`run`] once the output directory is made: each variant in turn, once per seed.
fn run_variants(opts: &AblationOptions, configs: Vec<RunConfig>) -> Result<Vec<VariantResult>> {
    let spec = &opts.spec;
    let seeds = spec.run_seeds();
    let total = spec.variant.len() * seeds.len();
    let mut results = Vec::new();
    for (variant, base) in spec.variant.iter().zip(configs) {
        for &seed in &seeds {
            let mut cfg = base.clone();
            if let Some(seed) = seed {
                cfg.train.seed = seed;
            }
            if let Some(n) = opts.max_iters {
                cfg.train.max_iters = n;
                cfg.train.eval_interval = cfg.train.eval_interval.min(n.max(1));
                cfg.schedule.warmup_iters = cfg.schedule.warmup_iters.min(n / 10);
            }
            let label = match seed {
                None => variant.name.clone(),
                Some(seed) => format!("{}, seed {seed}", variant.name),
            };
            // `<variant>`, or `<variant>-seed-<n>` when the spec lists seeds.
            let dir = opts.out.join(slug(&label));
            let place = format!("[{}/{total}] {label}", results.len() + 1);
            train_unless_finished(opts, cfg, &dir, &place)
                .with_context(|| format!("variant `{label}`"))?;
            results.push(measure(spec, variant, label, &dir)?);
        }
    }
    Ok(results)
}

/// Trains the run of `cfg` in `dir`, resuming an unfinished one; a finished one is reused.
fn train_unless_finished(
    opts: &AblationOptions,
    cfg: RunConfig,
    dir: &Path,
    place: &str,
) -> Result<()> {
    let run_dir = RunDir::new(dir);
    let done = finished_run_of(&run_dir, &cfg)?;
    if opts.progress {
        let what = if done {
            "already trained, reusing"
        } else {
            "training"
        };
        crate::note!("{place}: {what}");
    }
    if done {
        return Ok(());
    }
    let resume = run_dir.file(STATE_FILE).exists();
    let summary = train(TrainOptions {
        device: Device::Cpu,
        config: cfg,
        run: run_dir,
        resume,
        stop_at: None,
        progress: opts.progress,
        kernels: crate::ops::Kernels::Fused,
        parent: None,
        clock: None,
    })?;
    if summary.interrupted {
        bail!(
            "interrupted at step {}: its training state is saved in {}; \
             the same command continues from there",
            summary.steps,
            dir.display()
        );
    }
    Ok(())
}

/// Whether `run` holds a finished run of `cfg` (to reuse). A run of another config is an error:
/// reusing it would report stale numbers, and training over it would lose it.
fn finished_run_of(run: &RunDir, cfg: &RunConfig) -> Result<bool> {
    if !run.file(CONFIG_FILE).exists() {
        return Ok(false);
    }
    let saved = RunConfig::load(&run.file(CONFIG_FILE))?;
    // What training fills in (the vocabulary, the kind `auto` chose) is compared as saved.
    let mut asked = cfg.clone();
    if asked.model.vocab_size == 0 {
        asked.model.vocab_size = saved.model.vocab_size;
    }
    if asked.data.kind == CorpusKind::Auto {
        asked.data.kind = saved.data.kind;
    }
    if asked.data.header_fields.is_none() {
        asked.data.header_fields = saved.data.header_fields;
    }
    let differences = saved.differences(&asked, ["saved", "asked"]);
    if !differences.is_empty() {
        bail!(
            "{} holds a run of another config ({}): delete it to train the variant anew, or choose another --out",
            run.path.display(),
            differences.join("; ")
        );
    }
    let last = match run.file(METRICS_FILE).exists() {
        true => read_metrics(&run.file(METRICS_FILE))?.pop(),
        false => None,
    };
    Ok(last.is_some_and(|r| r.step >= cfg.train.max_iters))
}

/// Everything the spec asks about one trained variant.
fn measure(spec: &Spec, variant: &Variant, label: String, dir: &Path) -> Result<VariantResult> {
    let loaded = load_run(dir)?;
    let rows = read_metrics(&dir.join(METRICS_FILE))?;
    let last = rows.last().context("the run has no metrics")?;
    let (tensors, _) = read_safetensors(&dir.join(MODEL_FILE))?;
    let tied = loaded.config.model.tie_weights;
    let parameters = tensors
        .iter()
        .filter(|(name, _)| !(tied && name.as_str() == "lm_head.weight"))
        .map(|(_, t)| t.elem_count())
        .sum();
    let cfg = &loaded.config;
    let data = &cfg.data;
    let run_text = RunText::load(&data.corpus, data.kind, data.others())?;
    let longest = spec
        .contexts
        .iter()
        .copied()
        .max()
        .unwrap_or(0)
        .max(cfg.model.block_size);
    let splits = Splits::new(&run_text, &loaded.tokenizer, longest)?;
    let val_loss_whole = final_whole_split_loss(dir, cfg, (&loaded.tokenizer, &splits))?;
    let mut context_losses = Vec::new();
    for &ctx in &spec.contexts {
        context_losses.push(context_loss(&loaded, &splits, ctx)?);
    }
    let order_diff = if spec.order_probe {
        Some(lesson::order_diff(&loaded.model, &loaded.tokenizer)?)
    } else {
        None
    };
    let (probe_mae, probe_baseline) = if spec.position_probe {
        let (mae, base) =
            probe::position_probe(&loaded.model, &splits, cfg.model.block_size, cfg.train.seed)?;
        (mae, Some(base))
    } else {
        (Vec::new(), None)
    };
    let train_s = last.elapsed_s;
    let tokens = (last.step * cfg.train.batch_size * cfg.model.block_size) as f64;
    Ok(VariantResult {
        name: variant.name.clone(),
        seed: cfg.train.seed,
        label,
        dir: dir.display().to_string(),
        parameters,
        steps: last.step,
        train_loss: last.train_loss,
        val_loss: last.val_loss,
        val_loss_whole,
        best_val_loss: rows
            .iter()
            .map(|r| r.val_loss)
            .fold(f64::INFINITY, f64::min),
        train_s,
        tokens_per_s: if train_s > 0.0 { tokens / train_s } else { 0.0 },
        context_losses,
        order_diff,
        probe_mae,
        probe_baseline,
        curve: rows.iter().map(|r| (r.step, r.val_loss)).collect(),
    })
}

/// [`VariantResult::val_loss_whole`]: the final weights are those of the run's training state
/// (model.safetensors holds the best ones).
fn final_whole_split_loss(
    dir: &Path,
    cfg: &RunConfig,
    (tokenizer, splits): (&CharTokenizer, &Splits),
) -> Result<f64> {
    let path = dir.join(STATE_FILE);
    let (tensors, _) = read_safetensors(&path)?;
    let inputs = crate::verse::inputs::for_tokenizer(&cfg.model, tokenizer)?;
    let (model, varmap) = Gpt::seeded_with(&cfg.model, inputs, 0, &Device::Cpu)?;
    load_params(&varmap, &tensors, "param.", &path)?;
    whole_split_loss(
        &model,
        &Shards::for_device(&Device::Cpu, (WHOLE_EVAL_BATCH, cfg.model.block_size))?,
        splits,
        &Device::Cpu,
    )
}

/// Batches for each context-length evaluation.
const CONTEXT_EVAL_BATCHES: usize = 8;

/// Mean validation loss of the best weights on windows of `ctx` tokens (the same windows for
/// every variant); `None` for a learned table shorter than `ctx`.
fn context_loss(
    run: &crate::train::load::LoadedRun,
    splits: &Splits,
    ctx: usize,
) -> Result<Option<f64>> {
    let m = &run.config.model;
    if run
        .model
        .position
        .max_positions()
        .is_some_and(|rows| ctx > rows)
    {
        return Ok(None);
    }
    // The weights' stream, from which the recorded ablations drew these batches.
    let mut rng = crate::random::rng(run.config.train.seed, crate::random::Stream::Weights);
    let batch = (run.config.train.batch_size * m.block_size / ctx).max(1);
    let mut total = 0.0;
    for _ in 0..CONTEXT_EVAL_BATCHES {
        let (x, y) = splits.batch(Split::Val, batch, ctx, &mut rng, &Device::Cpu)?;
        total += run
            .model
            .loss(&x, &y, &mut Mode::Eval)?
            .to_scalar::<f32>()? as f64;
    }
    Ok(Some(total / CONTEXT_EVAL_BATCHES as f64))
}
