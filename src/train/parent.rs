//! Fine-tuning (`train --init-from RUN`): a new run that starts from the best weights of a trained
//! one, as nanoGPT's `init_from` does. It begins at step 0 with a fresh optimiser and schedule,
//! on its own corpus and recipe; the model's shape is the parent's, and its vocabulary the
//! parent's with the characters the new corpus adds after it (their embedding rows, and the
//! output layer's, drawn as a new model's are). The run records its parent in `parent.json`.

use crate::config::{ModelConfig, Override, RunConfig};
use crate::data::CharTokenizer;
use crate::train::checkpoint::ParentRecord;
use crate::train::load::RunFiles;
use crate::train::run_dir::{RunDir, MODEL_FILE};
use crate::train::safetensors::refuse_non_finite;
use anyhow::{bail, Result};
use candle_core::Tensor;
use candle_nn::VarMap;
use std::collections::HashMap;
use std::path::Path;

/// The tensors whose rows are the vocabulary's: they grow with it (and so do those of the inputs
/// with a row per token).
const BY_TOKEN: [&str; 2] = ["transformer.wte.weight", "lm_head.weight"];

/// A trained run to start from: its config, tokenizer and named weights.
pub struct Parent {
    pub config: RunConfig,
    pub tokenizer: CharTokenizer,
    tensors: HashMap<String, Tensor>,
    pub record: ParentRecord,
}

impl Parent {
    /// The run in `dir`, checked as `sample` checks one (config, tokenizer and weights belong
    /// together, the weights finite), its weights read once and no model built.
    pub fn open(dir: &Path) -> Result<Self> {
        let RunFiles {
            config,
            tokenizer,
            weights,
            tensors,
        } = RunFiles::read(dir)?;
        let file = RunDir::new(dir).file(MODEL_FILE);
        let named = tensors.iter().map(|(n, t)| (n.as_str(), t));
        let unusable = "these weights cannot be used; train again or resume from an intact run";
        refuse_non_finite(named, &file, unusable)?;
        let record = ParentRecord {
            run: dir.display().to_string(),
            weights: crate::data::fingerprint(weights.iter().copied()),
            vocab_size: tokenizer.vocab_size(),
        };
        Ok(Parent {
            config,
            tokenizer,
            tensors,
            record,
        })
    }

    /// The config of a run fine-tuned from this one: the file at `path` with `overrides` (its
    /// corpus and recipe), and the parent's model. A shape asked for that is not the parent's is
    /// refused; dropout may change.
    pub fn config_for(&self, path: &Path, overrides: &[Override]) -> Result<RunConfig> {
        let own = toml::Table::try_from(&self.config.model)?;
        for o in overrides {
            let Some(name) = o.key.strip_prefix("model.") else {
                continue;
            };
            // Compared as settings, not as written: 10000 asks for the rope_base 10000.0.
            let mut asked = own.clone();
            asked.insert(name.to_string(), o.value.clone());
            let same = toml::Value::Table(asked).try_into::<ModelConfig>().ok()
                == Some(self.config.model.clone());
            if name != "dropout" && !same {
                let theirs = own.get(name).map_or("none".into(), |v| v.to_string());
                bail!(
                    "a fine-tune takes the model's shape from {} ({name} {theirs}), but {} was asked: leave it out, or train a new model without a run to start from",
                    self.record.run,
                    o.value
                )
            }
        }
        let mut cfg = RunConfig::load_with(path, overrides)?;
        let unused = cfg.model.differences(
            &self.config.model,
            [&path.display().to_string(), "the run's"],
        );
        let unused: Vec<String> = unused
            .into_iter()
            .filter(|d| !d.starts_with("vocab_size:") && !d.starts_with("dropout:"))
            .collect();
        if !unused.is_empty() {
            crate::note!(
                "note: a fine-tune trains {}'s model; the [model] settings of {} that differ are not used ({})",
                self.record.run,
                path.display(),
                unused.join("; ")
            );
        }
        let given_dropout = overrides.iter().any(|o| o.key == "model.dropout");
        cfg.model = ModelConfig {
            vocab_size: 0, // the parent's and the new corpus's characters
            dropout: match given_dropout {
                true => cfg.model.dropout,
                false => self.config.model.dropout,
            },
            ..self.config.model.clone()
        };
        Ok(cfg)
    }

    /// The parent's vocabulary extended by the characters of `text` it lacks.
    pub fn tokenizer_for(&self, text: &str) -> Result<CharTokenizer> {
        Ok(self.tokenizer.extended(text)?)
    }

    /// Sets every parameter of a new model (`varmap`, drawn from its seed) to the parent's, but
    /// for the rows of characters the parent lacks, which keep their fresh draws.
    pub fn copy_weights_into(&self, varmap: &VarMap) -> Result<()> {
        let mut by_token = crate::verse::inputs::per_token_tensors(&self.config.model)?;
        by_token.extend(BY_TOKEN.map(String::from));
        let data = varmap.data().lock().expect("parameter map");
        for (name, var) in data.iter() {
            let Some(saved) = self.tensors.get(name) else {
                bail!(
                    "{} has no tensor {name}: it is not a run of this program's model",
                    self.record.run
                )
            };
            let saved = saved.to_device(var.device())?.to_dtype(var.dtype())?;
            let (old, new) = (saved.dims(), var.dims());
            let grows = by_token.contains(name) && old[1..] == new[1..] && old[0] <= new[0];
            if old == new {
                var.set(&saved)?;
            } else if grows {
                let fresh = var.as_tensor().narrow(0, old[0], new[0] - old[0])?; // (V_new − V, C)
                var.set(&Tensor::cat(&[&saved, &fresh], 0)?)?;
            } else {
                bail!(
                    "{}: {name} has shape {old:?} but the fine-tuned model needs {new:?}",
                    self.record.run
                )
            }
        }
        Ok(())
    }
}
