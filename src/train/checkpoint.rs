//! The run directory: atomic writes of the model, the training state, the config and the
//! tokenizer, and their loading for resumption and sampling.
//!
//! `train_state.safetensors` holds everything a resume needs (weights, AdamW moments, step, RNG
//! positions) in ONE file, so that a single rename commits it: a kill at any moment leaves either
//! the previous state or the new one, never a mix. `model.safetensors` holds the best weights
//! (nanoGPT's names; `lm_head.weight` written too when tied) for sampling.

use anyhow::{bail, Context, Result};
use candle_core::{Device, Tensor};
use candle_nn::VarMap;
use std::collections::HashMap;
use std::io::Write;
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

/// Writes `bytes` to `path` atomically: a temporary file in the same folder, flushed to disk,
/// then renamed over the target.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension(format!(
        "{}.tmp",
        path.extension()
            .and_then(|e| e.to_str())
            .unwrap_or_default()
    ));
    let mut file =
        std::fs::File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    file.write_all(bytes)
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    file.sync_all()
        .with_context(|| format!("cannot flush {}", tmp.display()))?;
    std::fs::rename(&tmp, path)
        .with_context(|| format!("cannot move {} to {}", tmp.display(), path.display()))?;
    if let Some(dir) = path.parent().and_then(|d| std::fs::File::open(d).ok()) {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// Serialises named tensors with string metadata into safetensors bytes.
pub fn to_safetensors(
    tensors: &[(String, Tensor)],
    metadata: HashMap<String, String>,
) -> Result<Vec<u8>> {
    let mut sorted: Vec<(&str, &Tensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    Ok(safetensors::serialize(sorted, Some(metadata))?)
}

/// Reads a safetensors file: its tensors and its metadata.
pub fn read_safetensors(path: &Path) -> Result<(HashMap<String, Tensor>, HashMap<String, String>)> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let (_, header) = safetensors::SafeTensors::read_metadata(&bytes).with_context(|| {
        format!(
            "{} is not a valid safetensors file (truncated or corrupted?)",
            path.display()
        )
    })?;
    let metadata = header.metadata().clone().unwrap_or_default();
    let tensors =
        candle_core::safetensors::load_buffer(&bytes, &Device::Cpu).with_context(|| {
            format!(
                "{} is not a valid safetensors file (truncated or corrupted?)",
                path.display()
            )
        })?;
    Ok((tensors, metadata))
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

/// Copies saved weights into the model's variables, checking that every one is there with the
/// right shape.
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
        var.set(&saved.to_device(var.device())?)?;
    }
    Ok(())
}

/// A run directory.
#[derive(Debug, Clone)]
pub struct RunDir {
    /// Its path.
    pub path: PathBuf,
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

    /// Whether it already holds a run with a checkpoint. A directory whose run was stopped before
    /// its first checkpoint holds nothing to keep, and a new run may start there.
    pub fn holds_run(&self) -> bool {
        self.file(STATE_FILE).exists()
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
    if !dir.is_dir() {
        bail!(
            "no run directory at {}: train one with `cargo run --release --bin train` (it prints where it writes)",
            dir.display()
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
    if config.model.vocab_size != tokenizer.vocab_size() {
        bail!(
            "{}: the config says vocab_size {} but tokenizer.json has {} tokens: they come from different runs",
            dir.display(),
            config.model.vocab_size,
            tokenizer.vocab_size()
        );
    }
    config.model.validate()?;
    let (model, varmap) = crate::model::Gpt::seeded(&config.model, 0, device)?;
    let (tensors, _) = read_safetensors(&run.file(MODEL_FILE))?;
    load_params(&varmap, &tensors, "", &run.file(MODEL_FILE))?;
    Ok(LoadedRun {
        model,
        tokenizer,
        config,
    })
}
