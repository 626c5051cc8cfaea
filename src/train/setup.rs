//! Everything a run trains with, set up once from its config, corpus and vocabulary: the config
//! completed by what they say (the kind the corpus is read as, its headers, the vocabulary's
//! size), the splits, the model (a parent's weights copied in when fine-tuning), the optimiser and
//! the units of work. `train` sets a run up in its folder ([`super::run`]), the tab's run in
//! memory ([`super::Session`]) the same way.

use crate::config::{OptimizerKind, RunConfig};
use crate::data::{CharTokenizer, RunText, Splits};
use crate::model::Gpt;
use crate::ops::{Kernels, Precision};
use crate::train::checkpoint::{ParentRecord, RunState};
use crate::train::muon::MuonParams;
use crate::train::optim::{AdamWParams, Optimizer};
use crate::train::parent::Parent;
use crate::train::shards::Shards;
use anyhow::{bail, Result};
use candle_core::Device;

/// Everything a run trains with.
pub struct Setup {
    pub cfg: RunConfig,
    /// The fingerprint of the corpus's poems, saved with the training state, and of each text
    /// read ([`crate::data::RunText::fingerprints`]).
    pub corpus: String,
    pub texts: String,
    pub tokenizer: CharTokenizer,
    pub splits: Splits,
    pub model: Gpt,
    pub varmap: candle_nn::VarMap,
    pub opt: Optimizer,
    pub shards: Shards,
    pub device: Device,
    /// The run it was fine-tuned from, recorded at its first checkpoint.
    pub parent: Option<ParentRecord>,
}

/// A new run's vocabulary of `text`: numbered by count for a model with an adaptive softmax (its
/// head is the first ids), in code-point order otherwise.
pub fn new_vocabulary(text: &str, model: &crate::config::ModelConfig) -> Result<CharTokenizer> {
    Ok(match model.adaptive_head {
        0 => CharTokenizer::from_text(text)?,
        _ => CharTokenizer::by_count(text)?,
    })
}

/// `cfg` completed by the run's corpus and vocabulary and validated: the kind the corpus is read
/// as and the fields of its headers (saved with the run: a resume reads it the same way, a sample
/// writes what the run was trained on), and the vocabulary's size; its inputs known by name.
pub fn complete_config(
    mut cfg: RunConfig,
    run_text: &RunText,
    tokenizer: &CharTokenizer,
) -> Result<RunConfig> {
    cfg.data.kind = run_text.corpus.kind;
    let header_fields = run_text.corpus.header_fields();
    match cfg.data.header_fields {
        Some(given) if given != header_fields => bail!(
            "data.header_fields is {given} but {} begins its lines with headers of {header_fields} fields: it is what train \
             finds in the corpus, not a setting; leave it out (a resumed run needs the corpus it started on)",
            cfg.data.corpus
        ),
        _ => cfg.data.header_fields = Some(header_fields),
    }
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
    Ok(cfg)
}

impl Setup {
    /// A run of `cfg` (completed, [`complete_config`]) on `corpus` in `tokenizer`'s vocabulary:
    /// its splits, a model drawn from its seed (with `parent`'s weights where fine-tuning), its
    /// optimiser and its units on `device` with `kernels`. Refused before anything is allocated
    /// where the machine lacks the memory or the instructions it needs.
    pub fn new(
        cfg: RunConfig,
        run_text: &RunText,
        tokenizer: CharTokenizer,
        parent: Option<&Parent>,
        (device, kernels): (&Device, Kernels),
    ) -> Result<Setup> {
        let splits = Splits::new(run_text, &tokenizer, cfg.model.block_size)?;
        let inputs = crate::verse::inputs::for_tokenizer(&cfg.model, &tokenizer)?;
        let input_parameters = crate::model::inputs::parameters(&inputs, cfg.model.n_embd) as f64;
        cfg.model
            .check_training_memory(cfg.train.batch_size, input_parameters)?;
        let t = &cfg.train;
        let (model, varmap) = Gpt::seeded_with(&cfg.model, inputs, t.seed, device)?;
        if let Some(parent) = parent {
            parent.copy_weights_into(&varmap)?;
        }
        check_precision(t.dtype, device, kernels)?;
        let model = model.with_kernels(kernels);
        let opt = optimizer(&cfg, &varmap)?;
        Ok(Setup {
            parent: parent.map(|p| p.record.clone()),
            shards: Shards::for_device(device, (t.batch_size, cfg.model.block_size))?,
            device: device.clone(),
            corpus: run_text.fingerprint(),
            texts: run_text.fingerprints(),
            cfg,
            tokenizer,
            splits,
            model,
            varmap,
            opt,
        })
    }
}

impl Setup {
    /// What a checkpoint writes of it.
    pub(crate) fn state(&self) -> RunState<'_> {
        RunState {
            cfg: &self.cfg,
            tokenizer: &self.tokenizer,
            varmap: &self.varmap,
            opt: &self.opt,
            corpus: &self.corpus,
            texts: &self.texts,
            parent: self.parent.as_ref(),
        }
    }
}

/// The optimiser of `cfg` over the variables of `varmap`: AdamW, or Muon with AdamW.
fn optimizer(cfg: &RunConfig, varmap: &candle_nn::VarMap) -> Result<Optimizer> {
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
    let mut vars = varmap.data().lock().expect("parameter map").clone();
    // Fitted biases are set after the last step, not trained (`train::fit`).
    for name in crate::verse::inputs::fitted_tensors(&cfg.model)? {
        vars.remove(&name);
    }
    Ok(Optimizer::new(vars, params, muon)?)
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
            "dtype bf16 needs a CPU with AMX-BF16 or AVX512-BF16 (Intel Xeon of the 4th generation or later, AMD Zen 4 or later), and {}: train in f32 (--dtype f32, the default)",
            crate::machine::no_bf16_why()
        )
    }
    Ok(())
}
