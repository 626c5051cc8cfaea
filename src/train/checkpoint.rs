//! A checkpoint: the files a run writes at its evaluations and stops, atomically, and reads
//! back. `train_state.safetensors` holds everything a resume needs (weights, the optimiser's
//! moments, step, RNG positions) in ONE file, so that a single rename commits it: a kill at any
//! moment leaves either the previous state or the new one, never a mix. `model.safetensors`
//! holds the best weights (nanoGPT's names; `lm_head.weight` written too when tied) for sampling,
//! with the metadata that ties them to the run's config and tokenizer.

use crate::config::{shown, OptimizerKind};
use crate::config::{OptimizerConfig, RunConfig};
use crate::data::CharTokenizer;
use crate::files::atomic_write;
use crate::train::metrics::{plot_losses, samples_to_jsonl, to_csv};
use crate::train::optim::Optimizer;
use crate::train::run_dir::*;
use crate::train::safetensors::{not_safetensors, refuse_non_finite, to_safetensors};
use crate::train::state::{Progress, SavedState};
use anyhow::{bail, Context, Result};
use candle_core::Tensor;
use candle_nn::VarMap;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;

/// The step of the training state in `dir`, read from its header alone (not its tensors).
pub fn saved_step(dir: &Path) -> Result<usize> {
    use std::io::Read;
    let path = dir.join(STATE_FILE);
    let invalid = |cause: &dyn std::fmt::Display| not_safetensors(&path, cause);
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
        refuse_non_finite(
            [(key.as_str(), saved)],
            source,
            "these weights cannot be used; train again or resume from an intact run",
        )?;
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

/// What to say about the run directory when training must stop on a non-finite number: the
/// checkpoint of `saved_step`, if any, and the rate `o` to lower.
pub(crate) fn what_is_kept(run: &RunDir, o: &OptimizerConfig, saved_step: Option<usize>) -> String {
    let lower = match o.kind {
        OptimizerKind::Muon => format!(
            "lower Muon's --muon-learning-rate (now {}) or AdamW's --learning-rate (now {})",
            shown(o.muon_learning_rate()),
            shown(o.learning_rate)
        ),
        OptimizerKind::Adamw => format!("lower --learning-rate (now {})", shown(o.learning_rate)),
    };
    match saved_step {
        Some(step) => format!(
            "the checkpoint of step {step} in {} is intact; {lower} and --resume {}",
            run.path.display(),
            crate::cli::shell_word(&run.path)
        ),
        None => format!("no checkpoint was written yet; restart and {lower}"),
    }
}

/// What a checkpoint writes of a run besides where it stands: its recipe, vocabulary, weights,
/// moments, the fingerprint of its corpus, and the run it was fine-tuned from.
pub(crate) struct RunState<'a> {
    pub cfg: &'a RunConfig,
    pub tokenizer: &'a CharTokenizer,
    pub varmap: &'a VarMap,
    pub opt: &'a Optimizer,
    pub corpus: &'a str,
    /// The fingerprint of each text it reads.
    pub texts: &'a str,
    pub parent: Option<&'a ParentRecord>,
}

/// Writes a checkpoint: at an evaluation (`val` given) its metrics row and, when it is the best
/// so far, the weights for sampling; always the config, the tokenizer and the training state
/// (last, so that everything it points to exists once it does). Nothing is written when a weight,
/// a moment or the validation loss is not finite: the previous checkpoint stays.
pub(crate) fn save_checkpoint(
    run: &RunDir,
    s: RunState,
    p: &mut Progress,
    val: Option<f64>,
) -> Result<()> {
    let params = named_params(&s.varmap, false);
    let moments = s.opt.state()?;
    let all = params.iter().chain(&moments).map(|(n, t)| (n.as_str(), t));
    if let Some(name) = crate::train::safetensors::first_non_finite(all)? {
        bail!(
            "the update of step {} made {name} NaN or infinite: training stopped; {}",
            p.step,
            what_is_kept(run, &s.cfg.optimizer, p.saved_step)
        );
    }
    if let Some(val) = val {
        if !val.is_finite() {
            bail!(
                "the validation loss became {val} at step {}: training stopped; {}",
                p.step,
                what_is_kept(run, &s.cfg.optimizer, p.saved_step)
            );
        }
        if val < p.best_val {
            p.best_val = val;
            let mut metadata = model_metadata(&s.cfg.model, &s.tokenizer)?;
            metadata.insert("step".into(), p.step.to_string());
            metadata.insert("val_loss".into(), val.to_string());
            let weights = named_params(&s.varmap, s.cfg.model.tie_weights);
            atomic_write(&run.file(MODEL_FILE), &to_safetensors(&weights, metadata)?)?;
        }
        atomic_write(&run.file(METRICS_FILE), to_csv(&p.rows).as_bytes())?;
        let samples = samples_to_jsonl(&p.samples)?;
        atomic_write(&run.file(SAMPLES_FILE), samples.as_bytes())?;
    }
    if !run.file(TOKENIZER_FILE).exists() {
        atomic_write(&run.file(TOKENIZER_FILE), s.tokenizer.to_json()?.as_bytes())?;
    }
    atomic_write(&run.file(CONFIG_FILE), s.cfg.to_toml()?.as_bytes())?;
    if let Some(parent) = s.parent.filter(|_| !run.file(PARENT_FILE).exists()) {
        write_record(run, parent)?;
    }
    let mut tensors: Vec<_> = params
        .into_iter()
        .map(|(n, t)| (format!("param.{n}"), t))
        .collect();
    tensors.extend(moments);
    let metadata = SavedState {
        corpus: Some(s.corpus.to_string()),
        texts: Some(s.texts.to_string()),
        step: p.step,
        batch_rng_pos: p.batch_rng.get_word_pos(),
        dropout_rng_pos: p.dropout_rng.get_word_pos(),
        best_val_loss: p.best_val,
        elapsed_s: p.elapsed_s,
        interval: Some(p.interval),
        fitted: Some(p.fitted),
    }
    .to_metadata();
    atomic_write(&run.file(STATE_FILE), &to_safetensors(&tensors, metadata)?)?;
    p.saved_step = Some(p.step);
    if val.is_some() {
        let title = format!("loss of {}", run.path.display());
        plot_losses(&p.rows, &title, &run.file(PLOT_FILE))?;
    }
    Ok(())
}

/// What a fine-tuned run records of its parent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParentRecord {
    /// The parent's run directory, as given.
    pub run: String,
    /// The fingerprint of its model.safetensors (FNV-1a of the file's bytes).
    pub weights: String,
    /// Its vocabulary size, the first rows of the new run's embedding.
    pub vocab_size: usize,
}

/// Writes `record` as the run's parent.json.
pub fn write_record(run: &RunDir, record: &ParentRecord) -> Result<()> {
    let text = serde_json::to_string_pretty(record)?;
    atomic_write(&run.file(PARENT_FILE), text.as_bytes())?;
    Ok(())
}
