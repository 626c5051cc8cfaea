//! A trained run loaded for use (sampling, scoring, the page, fine-tuning): its best weights, its
//! config and its tokenizer, checked to belong together before any model is built.

use crate::config::RunConfig;
use crate::data::CharTokenizer;
use crate::train::checkpoint::{load_params, MODEL_CONFIG_KEY, TOKENIZER_KEY};
use crate::train::run_dir::{refuse_file, RunDir, CONFIG_FILE, MODEL_FILE, TOKENIZER_FILE};
use crate::train::safetensors::parse_safetensors;
use anyhow::{bail, Context, Result};
use candle_core::{Device, Tensor};
use std::collections::HashMap;
use std::path::Path;

/// A trained model ready for use: the model, its tokenizer and the run's config.
pub struct LoadedRun {
    /// The model with the best weights of the run.
    pub model: crate::model::Gpt,
    /// The run's tokenizer.
    pub tokenizer: CharTokenizer,
    /// The run's whole config.
    pub config: RunConfig,
}

/// Loads the best weights of a run directory onto the CPU with its config and tokenizer, checking
/// that the three belong together.
pub fn load_run(dir: &Path) -> Result<LoadedRun> {
    load_run_on(dir, &Device::Cpu)
}

/// [`load_run`] onto `device`.
pub fn load_run_on(dir: &Path, device: &Device) -> Result<LoadedRun> {
    let files = RunFiles::read(dir)?;
    let origin = dir.display().to_string();
    LoadedRun::build(
        (files.config, files.tokenizer),
        &files.tensors,
        &origin,
        device,
    )
}

/// The files of a trained run as read, checked to belong together (before any model is built):
/// its config, its tokenizer, and its weights (their bytes as on disk, and as tensors).
pub struct RunFiles {
    pub config: RunConfig,
    pub tokenizer: CharTokenizer,
    /// model.safetensors as it is on disk.
    pub weights: Vec<u8>,
    pub tensors: HashMap<String, Tensor>,
}

impl RunFiles {
    /// Reads the run in `dir`: a directory with a config, a tokenizer and weights that belong
    /// together.
    pub fn read(dir: &Path) -> Result<RunFiles> {
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
                let resume = match run.holds_run() {
                    true => format!(
                        "; it holds a checkpoint: `train --resume {}` trains on to its next evaluation, which writes it",
                        crate::cli::shell_word(dir)
                    ),
                    false => String::new(),
                };
                bail!(
                    "{} has no {file}: it is not a finished run directory (a run writes model.safetensors at its first evaluation){resume}",
                    dir.display()
                );
            }
        }
        let file = run.file(MODEL_FILE);
        let weights = crate::files::read_limited(&file, crate::files::WEIGHTS_LIMIT)
            .with_context(|| format!("cannot read {}", file.display()))?;
        let (tensors, metadata) = parse_safetensors(&weights, &file)?;
        let config = RunConfig::load(&run.file(CONFIG_FILE))?;
        let tokenizer = CharTokenizer::load(&run.file(TOKENIZER_FILE))?;
        let origin = dir.display().to_string();
        check_parts((&config, &tokenizer), (&tensors, &metadata), &origin)?;
        Ok(RunFiles {
            config,
            tokenizer,
            weights,
            tensors,
        })
    }
}

/// Checks, before any model is built, that a run's config, tokenizer and weights (the tensors
/// and metadata of its model.safetensors) belong together; `origin` names the run in errors.
fn check_parts(
    (config, tokenizer): (&RunConfig, &CharTokenizer),
    (tensors, metadata): (&HashMap<String, Tensor>, &HashMap<String, String>),
    origin: &str,
) -> Result<()> {
    if config.model.vocab_size != tokenizer.vocab_size() {
        bail!(
            "{origin}: the config says vocab_size {} but tokenizer.json has {} tokens: they come from different runs",
            config.model.vocab_size,
            tokenizer.vocab_size()
        );
    }
    check_weights_belong(origin, &config.model, tokenizer, tensors, metadata)?;
    Ok(config.model.validate()?)
}

impl LoadedRun {
    /// A run's config and tokenizer with its weights (the tensors and metadata of its
    /// model.safetensors) on `device`, checked to belong together; `origin` names the run in
    /// errors. The static page loads its run so, from what it downloaded.
    pub fn from_parts(
        (config, tokenizer): (RunConfig, CharTokenizer),
        (tensors, metadata): (HashMap<String, Tensor>, HashMap<String, String>),
        origin: &str,
        device: &Device,
    ) -> Result<LoadedRun> {
        check_parts((&config, &tokenizer), (&tensors, &metadata), origin)?;
        Self::build((config, tokenizer), &tensors, origin, device)
    }

    /// The model of a run whose parts are checked to belong together, its weights `tensors`.
    fn build(
        (config, tokenizer): (RunConfig, CharTokenizer),
        tensors: &HashMap<String, Tensor>,
        origin: &str,
        device: &Device,
    ) -> Result<LoadedRun> {
        let inputs = crate::verse::inputs::for_tokenizer(&config.model, &tokenizer)?;
        let (model, varmap) = crate::model::Gpt::seeded_with(&config.model, inputs, 0, device)?;
        load_params(
            &varmap,
            tensors,
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
