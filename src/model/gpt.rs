//! The whole GPT, read top to bottom: token embedding, positions, blocks, final LayerNorm, lm_head.

use crate::config::ModelConfig;
use crate::model::block::Block;
use crate::model::init::seeded_var_builder;
use crate::model::inputs::{Input, LearnedInputs};
use crate::model::layers::{Dropout, LayerNorm, Linear, Mode, INIT_STD};
use crate::model::position::PositionEncoding;
use crate::ops::Kernels;
use candle_core::{Device, Module, Result, Tensor};
use candle_nn::{Embedding, Init, VarBuilder, VarMap};
use std::borrow::Cow;

/// A decoder-only transformer with nanoGPT's parameter names (`transformer.wte.weight`, …).
#[derive(Clone)]
pub struct Gpt {
    pub(crate) wte: Embedding,
    /// What the config's inputs add to the token embeddings (`model::inputs`).
    pub(crate) inputs: LearnedInputs,
    /// The positional scheme, public so that experiments can inspect it.
    pub position: PositionEncoding,
    drop: Dropout,
    /// The transformer blocks, public so that experiments can read each layer.
    pub h: Vec<Block>,
    pub(crate) ln_f: LayerNorm,
    pub(crate) lm_head: Linear,
    /// The adaptive softmax's tail vector (C), with `adaptive_head` > 0.
    pub(crate) tail: Option<Tensor>,
    cfg: ModelConfig,
    /// The kernels every op runs on, chosen once for the whole model.
    kernels: Kernels,
}

impl Gpt {
    /// Builds the model, taking or creating its parameters through `vb`. The config is validated
    /// first, so a bad one fails before any tensor is made. A model whose config names inputs
    /// needs them: [`Gpt::with_inputs`].
    pub fn new(vb: VarBuilder, cfg: &ModelConfig) -> Result<Self> {
        Self::with_inputs(vb, cfg, Vec::new())
    }

    /// [`Gpt::new`] with `inputs` added to its token embeddings: those its config names
    /// (`ModelConfig::inputs`), in that order.
    pub fn with_inputs(vb: VarBuilder, cfg: &ModelConfig, inputs: Vec<Input>) -> Result<Self> {
        cfg.validate().map_err(candle_core::Error::wrap)?;
        let input_parameters = crate::model::inputs::parameters(&inputs, cfg.n_embd) as f64;
        cfg.check_weights_fit(input_parameters)
            .map_err(candle_core::Error::wrap)?;
        let given: Vec<&str> = inputs.iter().map(|input| input.name).collect();
        if given != cfg.inputs() {
            candle_core::bail!(
                "the config names the inputs {:?} but the model was given {given:?}: build them from its vocabulary (verse::inputs::for_tokenizer)",
                cfg.inputs()
            )
        }
        let t = vb.pp("transformer");
        let wte_weight = t.pp("wte").get_with_hints(
            (cfg.vocab_size, cfg.n_embd),
            "weight",
            Init::Randn {
                mean: 0.0,
                stdev: INIT_STD,
            },
        )?;
        let inputs = LearnedInputs::new(&t, inputs, (cfg.vocab_size, cfg.n_embd))?;
        let position = PositionEncoding::new(t.clone(), cfg)?;
        let h = (0..cfg.n_layer)
            .map(|i| Block::new(t.pp(format!("h.{i}")), cfg))
            .collect::<Result<_>>()?;
        let ln_f = LayerNorm::new(t.pp("ln_f"), cfg.n_embd, cfg.bias)?;
        let lm_head = if cfg.tie_weights {
            Linear::tied(wte_weight.clone())
        } else {
            Linear::new(
                vb.pp("lm_head"),
                cfg.n_embd,
                cfg.vocab_size,
                false,
                INIT_STD,
            )?
        };
        let tail = (cfg.adaptive_head > 0)
            .then(|| {
                vb.pp("adaptive")
                    .get_with_hints(cfg.n_embd, "tail", Init::Const(0.0))
            })
            .transpose()?;
        let kernels = Kernels::Fused.for_tensor(&wte_weight);
        Ok(Gpt {
            wte: Embedding::new(wte_weight, cfg.n_embd),
            inputs,
            position,
            drop: Dropout::new(cfg.dropout),
            h,
            ln_f,
            lm_head,
            tail,
            cfg: cfg.clone(),
            kernels,
        })
    }

    /// The same model with every op on `kernels` (the fused ones by default, where the tensors
    /// allow them); models with different kernels can run side by side.
    pub fn with_kernels(mut self, kernels: Kernels) -> Self {
        self.kernels = kernels.for_tensor(self.wte.embeddings());
        self
    }

    /// The kernels the model's ops run on: the fused ones only if chosen and the tensors are f32
    /// on the CPU.
    pub fn kernels(&self) -> Kernels {
        self.kernels
    }

    /// Whether the model's ops run the fused kernels.
    pub fn runs_fused_kernels(&self) -> bool {
        self.kernels == Kernels::Fused
    }

    /// A fresh model whose parameters are drawn from `seed` (GPT-2's initialisation), with the
    /// VarMap that holds them for training and saving.
    pub fn seeded(cfg: &ModelConfig, seed: u64, device: &Device) -> Result<(Gpt, VarMap)> {
        Self::seeded_with(cfg, Vec::new(), seed, device)
    }

    /// [`Gpt::seeded`] with `inputs` ([`Gpt::with_inputs`]).
    pub fn seeded_with(
        cfg: &ModelConfig,
        inputs: Vec<Input>,
        seed: u64,
        device: &Device,
    ) -> Result<(Gpt, VarMap)> {
        let varmap = VarMap::new();
        let model = Gpt::with_inputs(seeded_var_builder(&varmap, seed, device), cfg, inputs)?;
        Ok((model, varmap))
    }

    /// The device that holds the parameters.
    pub fn device(&self) -> &Device {
        self.wte.embeddings().device()
    }

    /// The configuration the model was built from.
    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// The residual stream entering the blocks for tokens idx (B, T): token embedding plus
    /// absolute positions.
    pub fn embed(&self, idx: &Tensor, mode: &mut Mode) -> Result<Tensor> {
        let tok = match self.inputs.table(self.wte.embeddings())? {
            None => self.wte.forward(idx)?, // (B, T, C)
            Some(table) => Embedding::new(table, self.cfg.n_embd).forward(idx)?, // (B, T, C)
        };
        let x = self.position.add_to_embedding(&tok)?; // (B, T, C)
        let x = self.inputs.add_to_embedding(x, idx)?; // (B, T, C)
        self.drop.forward(&x, mode)
    }

    /// The residual stream leaving the last block (B, T, C) for token ids idx (B, T).
    fn residual(&self, idx: &Tensor, mode: &mut Mode) -> Result<Tensor> {
        let mut x = self.embed(idx, mode)?; // (B, T, C)
        for block in &self.h {
            x = block.forward(&x, &self.position, self.kernels, mode)?; // (B, T, C)
        }
        Ok(x)
    }

    /// The output layer: `lm_head`, or, tied with token inputs, the token table with them.
    fn output_layer(&self) -> Result<Cow<'_, Linear>> {
        if !self.cfg.tie_weights {
            return Ok(Cow::Borrowed(&self.lm_head));
        }
        match self.inputs.table(self.wte.embeddings())? {
            Some(table) => Ok(Cow::Owned(Linear::tied(table))), // (V, C)
            None => Ok(Cow::Borrowed(&self.lm_head)),
        }
    }

    /// Logits (B, V) of the last position of the residual stream x (B, T, C), and its final
    /// hidden state (B, C).
    fn last_logits(&self, x: &Tensor) -> Result<(Tensor, Tensor)> {
        let last = x.narrow(1, x.dim(1)? - 1, 1)?; // (B, 1, C)
        let last = self.ln_f.forward(&last, self.kernels)?; // (B, 1, C)
        let logits = self.output_layer()?.forward(&last, self.kernels)?; // (B, 1, V)
        Ok((logits.squeeze(1)?, last.squeeze(1)?)) // (B, V), (B, C)
    }

    /// The final hidden states ln_f(h) (B, T, C) for token ids idx (B, T) of at most block_size
    /// positions for a learned table; other schemes accept longer contexts.
    pub fn hidden(&self, idx: &Tensor, mode: &mut Mode) -> Result<Tensor> {
        self.ln_f.forward(&self.residual(idx, mode)?, self.kernels) // (B, T, C)
    }

    /// Logits (B, T, vocab) for token ids idx (B, T), with the next-token biases (with an
    /// adaptive softmax, its log-probabilities, the biases added to them).
    pub fn forward(&self, idx: &Tensor, mode: &mut Mode) -> Result<Tensor> {
        let head = self.output_layer()?;
        let hidden = self.hidden(idx, mode)?; // (B, T, C)
        let logits = head.forward(&hidden, self.kernels)?; // (B, T, V)
        let logits = self.adaptive(logits, &hidden)?; // (B, T, V)
        self.inputs.add_to_logits(logits, idx, false) // (B, T, V)
    }

    /// With an adaptive softmax, the log-probabilities (…, V) of its distribution from the full
    /// `logits` (…, V) of the final hidden states (…, C), before the next-token biases, which are
    /// added to them as to logits; the logits as they are without.
    fn adaptive(&self, logits: Tensor, hidden: &Tensor) -> Result<Tensor> {
        let Some(tail) = &self.tail else {
            return Ok(logits);
        };
        let tail_logits = hidden
            .broadcast_mul(tail)?
            .sum_keepdim(candle_core::D::Minus1)?; // (…, 1)
        let k = self.cfg.adaptive_head;
        crate::ops::adaptive_softmax::log_probs_reference(&logits, &tail_logits, k)
        // (…, V)
    }

    /// Logits (R, vocab) without the next-token biases at the positions `rows` of token ids idx
    /// (B, T), counted along the batch (b · T + t): the output layer runs on those rows alone
    /// (with an adaptive softmax, its log-probabilities).
    pub fn unbiased_logits_at(&self, idx: &Tensor, rows: &[u32]) -> Result<Tensor> {
        let hidden = self.hidden(idx, &mut Mode::Eval)?; // (B, T, C)
        let rows = Tensor::new(rows, hidden.device())?; // (R)
        let hidden = hidden.flatten_to(1)?.index_select(&rows, 0)?; // (R, C)
        let logits = self.output_layer()?.forward(&hidden, self.kernels)?; // (R, V)
        self.adaptive(logits, &hidden) // (R, V)
    }

    /// Logits (B, vocab) of the token after idx (B, T) alone: the output layer runs on the last
    /// position only, as in nanoGPT's `generate` (with an adaptive softmax, log-probabilities).
    pub fn forward_last(&self, idx: &Tensor) -> Result<Tensor> {
        let (logits, last) = self.last_logits(&self.residual(idx, &mut Mode::Eval)?)?; // (B, V)
        let logits = self.adaptive(logits, &last)?; // (B, V)
        self.inputs.add_to_logits(logits, idx, true) // (B, V)
    }

    /// Mean cross-entropy of the next-token predictions for idx (B, T) against targets (B, T).
    /// The fused ops are forward-only (the output layer and the loss run without materialising
    /// the logits): on the CPU, training runs on [`crate::engine::loss_and_gradients`], and a
    /// graph to differentiate takes [`Kernels::Composite`].
    pub fn loss(&self, idx: &Tensor, targets: &Tensor, mode: &mut Mode) -> Result<Tensor> {
        if matches!(mode, Mode::Train(_)) && self.runs_fused_kernels() {
            candle_core::bail!("the candle graph's fused CPU ops have no backward pass: train with engine::loss_and_gradients, or on Kernels::Composite (with_kernels)")
        }
        if !self.inputs.bias.is_empty() || self.tail.is_some() {
            // The biases join the logits, which the fused loss never materialises (nor the
            // adaptive softmax's log-probabilities: training runs on the engine's).
            let logits = self.forward(idx, mode)?; // (B, T, V)
            let v = logits.dim(2)?;
            return candle_nn::loss::cross_entropy(
                &logits.reshape(((), v))?,
                &targets.flatten_all()?,
            );
        }
        let h = self.hidden(idx, mode)?; // (B, T, C)
        let (b, t, c) = h.dims3()?;
        let head = self.output_layer()?;
        let (h, w, targets) = (
            &h.reshape((b * t, c))?,
            head.weight(),
            &targets.reshape(b * t)?,
        );
        match self.kernels {
            Kernels::Fused => crate::ops::lm_head_loss::lm_head_cross_entropy(h, w, targets),
            Kernels::Composite => {
                crate::ops::lm_head_loss::lm_head_cross_entropy_reference(h, w, targets)
            }
        }
    }
}
