//! The run directory: atomic writes of the model, the training state, the config and the
//! tokenizer, and their loading for resumption and sampling.
//!
//! `train_state.safetensors` holds everything a resume needs (weights, the optimiser's moments, step, RNG
//! positions) in ONE file, so that a single rename commits it: a kill at any moment leaves either
//! the previous state or the new one, never a mix. `model.safetensors` holds the best weights
//! (nanoGPT's names; `lm_head.weight` written too when tied) for sampling.

use crate::cli::shell_word;
use crate::train::state::SavedState;
use anyhow::{bail, Context, Result};
use candle_core::{Device, Tensor};
use candle_nn::VarMap;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The files of a run directory.
pub const MODEL_FILE: &str = "model.safetensors";
/// Weights, optimiser moments, step and RNG state of the latest checkpoint.
pub const STATE_FILE: &str = "train_state.safetensors";
/// The whole run config.
pub const CONFIG_FILE: &str = "config.toml";
/// The tokenizer.
pub const TOKENIZER_FILE: &str = "tokenizer.json";
/// One row per evaluation.
pub const METRICS_FILE: &str = "metrics.csv";
/// The loss curves.
pub const PLOT_FILE: &str = "loss.svg";
/// A poem drawn at each evaluation, one JSON object a line.
pub const SAMPLES_FILE: &str = "samples.jsonl";
/// What the run's last invocation ended with ([`crate::train::TrainSummary`] as JSON).
pub const SUMMARY_FILE: &str = "summary.json";

/// Serialises named tensors with string metadata into safetensors bytes: the same tensors and
/// metadata give the same bytes in every process (the header's keys sorted; safetensors writes
/// its metadata map in the order of a hash map, which differs from one process to the next).
pub fn to_safetensors(
    tensors: &[(String, Tensor)],
    metadata: HashMap<String, String>,
) -> Result<Vec<u8>> {
    let mut sorted: Vec<(&str, &Tensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    sorted_header(safetensors::serialize(sorted, Some(metadata))?)
}

/// A safetensors file (8 bytes of header length, the JSON header padded with spaces to a
/// multiple of 8, the data) with its header's keys, and its metadata's, in sorted order. The
/// tensors' offsets count from the data's start, so the data stays as it is.
fn sorted_header(bytes: Vec<u8>) -> Result<Vec<u8>> {
    use std::collections::BTreeMap;
    let length = u64::from_le_bytes(bytes[..8].try_into()?) as usize;
    let (header, data) = bytes[8..].split_at(length);
    let mut header: BTreeMap<String, serde_json::Value> = serde_json::from_slice(header)?;
    if let Some(metadata) = header.remove("__metadata__") {
        let metadata: BTreeMap<String, String> = serde_json::from_value(metadata)?;
        header.insert("__metadata__".into(), serde_json::to_value(metadata)?);
    }
    let mut text = serde_json::to_string(&header)?.into_bytes();
    text.resize(text.len().next_multiple_of(8), b' ');
    let mut out = Vec::with_capacity(8 + text.len() + data.len());
    out.extend((text.len() as u64).to_le_bytes());
    out.extend(text);
    out.extend(data);
    Ok(out)
}

/// Reads a safetensors file: its tensors and its metadata.
pub fn read_safetensors(path: &Path) -> Result<(HashMap<String, Tensor>, HashMap<String, String>)> {
    let bytes = crate::files::read_limited(path, crate::files::WEIGHTS_LIMIT)
        .with_context(|| format!("cannot read {}", path.display()))?;
    parse_safetensors(&bytes, path)
}

/// The tensors and metadata of the safetensors file `bytes`, read from `path`.
pub fn parse_safetensors(
    bytes: &[u8],
    path: &Path,
) -> Result<(HashMap<String, Tensor>, HashMap<String, String>)> {
    // The cause's own text only: safetensors' errors repeat their source in it.
    let invalid = |cause: &dyn std::fmt::Display| {
        anyhow::anyhow!(
            "{} is not a valid safetensors file (truncated or corrupted?): {cause}",
            path.display()
        )
    };
    let (_, header) = safetensors::SafeTensors::read_metadata(bytes).map_err(|e| invalid(&e))?;
    let metadata = header.metadata().clone().unwrap_or_default();
    let tensors =
        candle_core::safetensors::load_buffer(bytes, &Device::Cpu).map_err(|e| invalid(&e))?;
    Ok((tensors, metadata))
}

/// The step of the training state in `dir`, read from its header alone (not its tensors).
pub fn saved_step(dir: &Path) -> Result<usize> {
    use std::io::Read;
    let path = dir.join(STATE_FILE);
    let invalid = |cause: &dyn std::fmt::Display| {
        anyhow::anyhow!(
            "{} is not a valid safetensors file (truncated or corrupted?): {cause}",
            path.display()
        )
    };
    let mut file =
        std::fs::File::open(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut length = [0u8; 8];
    file.read_exact(&mut length).map_err(|e| invalid(&e))?;
    // A header is a few kilobytes of JSON; safetensors caps it at 100 MB.
    let length = u64::from_le_bytes(length).min(100_000_000) as usize;
    let mut header = vec![0; length];
    file.read_exact(&mut header).map_err(|e| invalid(&e))?;
    let header: serde_json::Value = serde_json::from_slice(&header).map_err(|e| invalid(&e))?;
    let metadata: HashMap<String, String> =
        serde_json::from_value(header["__metadata__"].clone()).map_err(|e| invalid(&e))?;
    Ok(SavedState::from_metadata(&metadata, &path)?.step)
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

/// The model's parameters, sorted by name, with `lm_head.weight` added when it is tied to the
/// token embedding (so that nanoGPT's `load_state_dict` finds it).
pub fn named_params(varmap: &VarMap, tied: bool) -> Vec<(String, Tensor)> {
    let data = varmap.data().lock().expect("parameter map");
    let mut params: Vec<(String, Tensor)> = data
        .iter()
        .map(|(n, v)| (n.clone(), v.as_tensor().clone()))
        .collect();
    if tied {
        if let Some(wte) = data.get("transformer.wte.weight") {
            params.push(("lm_head.weight".into(), wte.as_tensor().clone()));
        }
    }
    params.sort_by(|a, b| a.0.cmp(&b.0));
    params
}

/// Whether every element of `t` is a finite number.
pub fn is_finite(t: &Tensor) -> Result<bool> {
    let values = t
        .flatten_all()?
        .to_dtype(candle_core::DType::F32)?
        .to_vec1::<f32>()?;
    Ok(values.iter().all(|v| v.is_finite()))
}

/// The name of the first tensor (in the given order) holding a NaN or an infinity, if any.
pub fn first_non_finite<'a>(
    tensors: impl IntoIterator<Item = (&'a str, &'a Tensor)>,
) -> Result<Option<String>> {
    for (name, t) in tensors {
        if !is_finite(t)? {
            return Ok(Some(name.to_string()));
        }
    }
    Ok(None)
}

/// Copies saved weights into the model's variables, checking that every one is there with the
/// right shape and finite values, and that the file holds no other tensor under `prefix` (a
/// tensor left over means the file was written for another model). A tied model's file also
/// holds `lm_head.weight`, written for nanoGPT: it must equal the token embedding.
pub fn load_params(
    varmap: &VarMap,
    tensors: &HashMap<String, Tensor>,
    prefix: &str,
    source: &Path,
) -> Result<()> {
    let data = varmap.data().lock().expect("parameter map");
    for (name, var) in data.iter() {
        let key = format!("{prefix}{name}");
        let Some(saved) = tensors.get(&key) else {
            bail!(
                "{} has no tensor {key}: it was not written for this model config",
                source.display()
            )
        };
        if saved.shape() != var.shape() {
            bail!(
                "{}: {key} has shape {:?} but the config needs {:?}: weights and config come from different runs",
                source.display(),
                saved.dims(),
                var.dims()
            )
        }
        if !is_finite(saved)? {
            bail!(
                "{}: {key} holds NaN or infinite values: these weights cannot be used; train again or resume from an intact run",
                source.display()
            )
        }
        var.set(&saved.to_dtype(var.dtype())?.to_device(var.device())?)?;
    }
    let tied_copy = |key: &str| -> Result<bool> {
        let wte = tensors.get(&format!("{prefix}transformer.wte.weight"));
        match (key == format!("{prefix}lm_head.weight"), wte) {
            (true, Some(wte)) => Ok(tensors[key].shape() == wte.shape()
                && tensors[key].eq(wte)?.min_all()?.to_scalar::<u8>()? == 1),
            _ => Ok(false),
        }
    };
    let mut unused = Vec::new();
    for key in tensors.keys() {
        if key.starts_with(prefix) && !data.contains_key(&key[prefix.len()..]) && !tied_copy(key)? {
            unused.push(key.as_str());
        }
    }
    if !unused.is_empty() {
        unused.sort();
        bail!(
            "{} holds tensors this model config does not use ({}): weights and config come from different runs",
            source.display(),
            unused.iter().take(4).copied().collect::<Vec<_>>().join(", ")
        );
    }
    Ok(())
}

/// The advisory lock a training process holds on its run directory for its whole life.
pub const LOCK_FILE: &str = ".lock";

/// Every file a run writes.
pub const RUN_FILES: [&str; 8] = [
    MODEL_FILE,
    STATE_FILE,
    CONFIG_FILE,
    TOKENIZER_FILE,
    METRICS_FILE,
    PLOT_FILE,
    SAMPLES_FILE,
    SUMMARY_FILE,
];

/// A run directory.
#[derive(Debug, Clone)]
pub struct RunDir {
    /// Its path.
    pub path: PathBuf,
}

/// Held while a process writes a run directory; dropping it (or the process ending in any way)
/// releases the directory.
#[derive(Debug)]
pub struct RunLock {
    _file: std::fs::File,
}

impl RunDir {
    /// A run directory at `path` (not created yet).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        RunDir { path: path.into() }
    }

    /// The path of one of its files.
    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Whether it holds one of a run's files (a run stopped before its first checkpoint leaves
    /// some without a training state).
    fn holds_run_files(&self) -> bool {
        RUN_FILES.iter().any(|name| self.file(name).exists())
    }

    /// Whether it holds a resumable checkpoint.
    pub fn holds_run(&self) -> bool {
        self.file(STATE_FILE).exists()
    }

    /// Creates the directory if needed and takes its lock, so that no second process writes the
    /// same run: two runs writing one directory would mix their files.
    pub fn lock(&self) -> Result<RunLock> {
        crate::files::create_dir(&self.path, "--out")?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.file(LOCK_FILE))
            .with_context(|| format!("cannot create the lock file in {}", self.path.display()))?;
        crate::files::check_writable(&self.path, "--out")?;
        #[cfg(unix)]
        {
            use std::os::fd::AsRawFd;
            // SAFETY: flock only reads the descriptor, which `file` keeps open.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
                bail!(
                    "{} is being written by another training process: wait for it to end, or choose another --out",
                    self.path.display()
                );
            }
        }
        Ok(RunLock { _file: file })
    }

    /// Whether a training process holds the directory's lock now (`None` where the system has
    /// no advisory locks to ask).
    pub fn is_locked(&self) -> Option<bool> {
        #[cfg(unix)]
        {
            use std::os::fd::AsRawFd;
            let Ok(file) = std::fs::File::open(self.file(LOCK_FILE)) else {
                return Some(false); // no lock file: nothing ever trained here
            };
            // SAFETY: flock only reads the descriptor, which `file` keeps open; a shared lock
            // taken here is released when `file` closes, at once.
            let free = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } == 0;
            Some(!free)
        }
        #[cfg(not(unix))]
        None
    }

    /// Checks that the directory to resume exists and is one (what it holds is checked under its
    /// lock, by [`RunDir::check_resumable`]: another process may be writing its first checkpoint).
    pub fn check_present(&self) -> Result<()> {
        refuse_file(&self.path)?;
        if !self.path.exists() {
            bail!(
                "no run to resume at {}{}: give --resume a run directory that `train` wrote, or start one with --out {}",
                self.path.display(),
                crate::files::where_missing(&self.path),
                shell_word(&self.path)
            );
        }
        Ok(())
    }

    /// Checks that a run can be resumed from here: a directory holding a training state.
    pub fn check_resumable(&self) -> Result<()> {
        self.check_present()?;
        if self.holds_run() {
            return Ok(());
        }
        if self.holds_run_files() {
            bail!(
                "{} holds the start of a run that stopped before its first checkpoint ({STATE_FILE} is missing), so there is nothing to resume: \
                 remove its files and start again with --out {}, or choose another --out",
                self.path.display(),
                shell_word(&self.path)
            );
        }
        bail!(
            "{} holds no checkpoint to resume ({STATE_FILE} is missing): start a new run with --out {}",
            self.path.display(),
            shell_word(&self.path)
        )
    }

    /// Checks that a new run may start here: the directory is absent or holds nothing but what an
    /// earlier run of this program left before its first file (its lock and temporary files).
    pub fn check_fresh(&self) -> Result<()> {
        let resume = format!("--resume {}", shell_word(&self.path));
        self.check_fresh_or("another --out", &resume)
    }

    /// [`RunDir::check_fresh`], whose refusals end by asking to choose `other`, or to continue a
    /// run with `resume` (the page asks for another name, or its runs list's Resume; `train` for
    /// another --out, or --resume).
    pub fn check_fresh_or(&self, other: &str, resume: &str) -> Result<()> {
        if self.path.exists() && !self.path.is_dir() {
            bail!(
                "{} is a file, not a directory for a new run: choose {other}",
                self.path.display()
            );
        }
        let Ok(entries) = std::fs::read_dir(&self.path) else {
            return Ok(());
        };
        let mut foreign = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if RUN_FILES.contains(&name.as_str()) && self.holds_run() {
                bail!(
                    "{} already holds a run: continue it with {resume}, or choose {other}",
                    self.path.display(),
                );
            }
            if RUN_FILES.contains(&name.as_str()) {
                bail!(
                    "{} holds the start of a run that stopped before its first checkpoint ({name}, no training state to resume): \
                     remove its files and start again (they would be written over), or choose {other}",
                    self.path.display()
                );
            }
            let ours = name == LOCK_FILE || crate::files::is_temporary(&name);
            if !ours {
                foreign.push(name);
            }
        }
        if !foreign.is_empty() {
            foreign.sort();
            bail!(
                "{} holds files that are not a run's ({}): choose {other} (a new or empty directory)",
                self.path.display(),
                foreign.join(", ")
            );
        }
        Ok(())
    }

    /// Undoes what taking the lock added when training failed: the lock file if there was none,
    /// and the directories `made` ([`crate::files::missing_dirs`] before the lock) while they are
    /// empty.
    pub fn tidy_after_failure(&self, made: &[PathBuf], had_lock: bool) {
        if !had_lock {
            let _ = std::fs::remove_file(self.file(LOCK_FILE));
        }
        crate::files::remove_empty_dirs(made);
    }

    /// Removes temporary files that a killed process left behind (the lock must be held).
    pub fn remove_temporary_files(&self) {
        for entry in std::fs::read_dir(&self.path)
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = entry.file_name().to_string_lossy().into_owned();
            if crate::files::is_temporary(&name) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

/// Refuses a file given where a run directory is expected, naming the run that holds it.
fn refuse_file(path: &Path) -> Result<()> {
    if !path.exists() || path.is_dir() {
        return Ok(());
    }
    match path.parent().filter(|p| p.join(CONFIG_FILE).exists()) {
        Some(run) => bail!(
            "{} is a file, not a run directory: give the directory that holds it, {}",
            path.display(),
            run.display()
        ),
        None => bail!(
            "{} is a file, not a run directory: give the directory that `train` wrote",
            path.display()
        ),
    }
}

/// A trained model ready for use: the model, its tokenizer and the run's config.
pub struct LoadedRun {
    /// The model with the best weights of the run.
    pub model: crate::model::Gpt,
    /// The run's tokenizer.
    pub tokenizer: crate::data::CharTokenizer,
    /// The run's whole config.
    pub config: crate::config::RunConfig,
}

/// Loads the best weights of a run directory onto the CPU with its config and tokenizer, checking
/// that the three belong together.
pub fn load_run(dir: &Path) -> Result<LoadedRun> {
    load_run_on(dir, &Device::Cpu)
}

/// [`load_run`] onto `device`.
pub fn load_run_on(dir: &Path, device: &Device) -> Result<LoadedRun> {
    let run = RunDir::new(dir);
    refuse_file(dir)?;
    if !dir.is_dir() {
        bail!(
            "no run directory at {}{}: train one with `cargo run --release --bin train` (it prints where it writes)",
            dir.display(),
            crate::files::where_missing(dir)
        );
    }
    for file in [CONFIG_FILE, TOKENIZER_FILE, MODEL_FILE] {
        if !run.file(file).exists() {
            bail!(
                "{} has no {file}: it is not a finished run directory (a run writes model.safetensors at its first evaluation)",
                dir.display()
            );
        }
    }
    let config = crate::config::RunConfig::load(&run.file(CONFIG_FILE))?;
    let tokenizer = crate::data::CharTokenizer::load(&run.file(TOKENIZER_FILE))?;
    let (tensors, metadata) = read_safetensors(&run.file(MODEL_FILE))?;
    LoadedRun::from_parts(
        (config, tokenizer),
        (tensors, metadata),
        &dir.display().to_string(),
        device,
    )
}

impl LoadedRun {
    /// A run's config and tokenizer with its weights (the tensors and metadata of its
    /// model.safetensors) on `device`, checked to belong together; `origin` names the run in
    /// errors. The static page loads its run so, from what it downloaded.
    pub fn from_parts(
        (config, tokenizer): (crate::config::RunConfig, crate::data::CharTokenizer),
        (tensors, metadata): (HashMap<String, Tensor>, HashMap<String, String>),
        origin: &str,
        device: &Device,
    ) -> Result<LoadedRun> {
        if config.model.vocab_size != tokenizer.vocab_size() {
            bail!(
                "{origin}: the config says vocab_size {} but tokenizer.json has {} tokens: they come from different runs",
                config.model.vocab_size,
                tokenizer.vocab_size()
            );
        }
        check_weights_belong(origin, &config.model, &tokenizer, &tensors, &metadata)?;
        config.model.validate()?;
        let inputs = crate::verse::inputs::for_tokenizer(&config.model, &tokenizer)?;
        let (model, varmap) = crate::model::Gpt::seeded_with(&config.model, inputs, 0, device)?;
        load_params(
            &varmap,
            &tensors,
            "",
            Path::new(origin).join(MODEL_FILE).as_path(),
        )?;
        Ok(LoadedRun {
            model,
            tokenizer,
            config,
        })
    }
}

/// Metadata key of model.safetensors: the model config the weights were trained with (TOML).
pub const MODEL_CONFIG_KEY: &str = "model_config";
/// Metadata key of model.safetensors: the fingerprint of the run's tokenizer.
pub const TOKENIZER_KEY: &str = "tokenizer_fingerprint";

/// The metadata that ties model.safetensors to its config and tokenizer.
pub fn model_metadata(
    cfg: &crate::config::ModelConfig,
    tokenizer: &crate::data::CharTokenizer,
) -> Result<HashMap<String, String>> {
    Ok(HashMap::from([
        (MODEL_CONFIG_KEY.to_string(), toml::to_string(cfg)?),
        (TOKENIZER_KEY.to_string(), tokenizer.fingerprint()),
    ]))
}

/// Checks, before any model is built, that a run's weights were written for its config and
/// tokenizer: the config and tokenizer recorded in the weights' metadata (runs of earlier versions
/// have none), the number of blocks and the token embedding's shape.
fn check_weights_belong(
    origin: &str,
    cfg: &crate::config::ModelConfig,
    tokenizer: &crate::data::CharTokenizer,
    tensors: &HashMap<String, Tensor>,
    metadata: &HashMap<String, String>,
) -> Result<()> {
    let different = |what: String| {
        anyhow::anyhow!(
            "{origin}: {what}: config.toml, tokenizer.json and model.safetensors must come from one run"
        )
    };
    if let Some(saved) = metadata.get(MODEL_CONFIG_KEY) {
        let saved = crate::config::ModelConfig::from_toml_str(saved, MODEL_FILE)?;
        let differences = saved.differences(cfg, ["weights trained with", "config.toml says"]);
        if !differences.is_empty() {
            return Err(different(differences.join("; ")));
        }
    }
    if let Some(saved) = metadata.get(TOKENIZER_KEY) {
        if *saved != tokenizer.fingerprint() {
            return Err(different(
                "tokenizer.json is not the vocabulary the weights were trained with".into(),
            ));
        }
    }
    let layers = tensors
        .keys()
        .filter_map(|k| {
            k.strip_prefix("transformer.h.")?
                .split('.')
                .next()?
                .parse::<usize>()
                .ok()
        })
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    if layers != cfg.n_layer {
        return Err(different(format!(
            "the config says {} layers but the weights have {layers}",
            cfg.n_layer
        )));
    }
    if let Some(wte) = tensors.get("transformer.wte.weight") {
        if wte.dims() != [cfg.vocab_size, cfg.n_embd] {
            return Err(different(format!(
                "the token embedding has shape {:?} but the config needs [{}, {}]",
                wte.dims(),
                cfg.vocab_size,
                cfg.n_embd
            )));
        }
    }
    Ok(())
}
