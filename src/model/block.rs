//! The MLP and the pre-LN transformer block.

use crate::config::ModelConfig;
use crate::model::attention::CausalSelfAttention;
use crate::model::layers::{Dropout, LayerNorm, Linear, Mode, INIT_STD};
use crate::model::position::PositionEncoding;
use crate::ops::activation::Activation;
use crate::ops::Kernels;
use candle_core::{Result, Tensor};
use candle_nn::VarBuilder;

/// The feed-forward network: n_embd → 4·n_embd → GELU (exact, erf) or ReLU² → n_embd.
#[derive(Clone)]
pub struct Mlp {
    pub(crate) c_fc: Linear,
    pub(crate) activation: Activation,
    pub(crate) c_proj: Linear,
    dropout: Dropout,
}

impl Mlp {
    /// `c_fc` drawn N(0, 0.02); `c_proj` with the scaled residual std 0.02/√(2·n_layer).
    pub fn new(vb: VarBuilder, cfg: &ModelConfig) -> Result<Self> {
        let c = cfg.n_embd;
        let residual_std = crate::model::layers::projection_std(cfg);
        Ok(Mlp {
            c_fc: Linear::new(vb.pp("c_fc"), c, 4 * c, cfg.bias, INIT_STD)?,
            activation: cfg.activation,
            c_proj: Linear::new(vb.pp("c_proj"), 4 * c, c, cfg.bias, residual_std)?,
            dropout: Dropout::new(cfg.dropout),
        })
    }

    /// x (B, T, C) → (B, T, C) on `kernels`.
    pub fn forward(&self, x: &Tensor, kernels: Kernels, mode: &mut Mode) -> Result<Tensor> {
        let fc = self.c_fc.forward(x, kernels)?; // (B, T, 4C)
        let h = self.activation.forward(&fc, kernels)?; // (B, T, 4C)
        self.dropout
            .forward(&self.c_proj.forward(&h, kernels)?, mode) // (B, T, C)
    }
}

/// One pre-LN block: `x = x + attn(ln_1(x))`, then `x = x + mlp(ln_2(x))`.
#[derive(Clone)]
pub struct Block {
    pub(crate) ln_1: LayerNorm,
    /// The block's attention, public so that experiments can read its weights.
    pub attn: CausalSelfAttention,
    pub(crate) ln_2: LayerNorm,
    pub(crate) mlp: Mlp,
}

impl Block {
    /// Names as nanoGPT: `ln_1`, `attn`, `ln_2`, `mlp`.
    pub fn new(vb: VarBuilder, cfg: &ModelConfig) -> Result<Self> {
        Ok(Block {
            ln_1: LayerNorm::new(vb.pp("ln_1"), cfg.n_embd, cfg.bias)?,
            attn: CausalSelfAttention::new(vb.pp("attn"), cfg)?,
            ln_2: LayerNorm::new(vb.pp("ln_2"), cfg.n_embd, cfg.bias)?,
            mlp: Mlp::new(vb.pp("mlp"), cfg)?,
        })
    }

    /// The input the attention reads: ln_1(x).
    pub fn attn_input(&self, x: &Tensor, kernels: Kernels) -> Result<Tensor> {
        self.ln_1.forward(x, kernels)
    }

    /// x (B, T, C) → (B, T, C) on `kernels`.
    pub fn forward(
        &self,
        x: &Tensor,
        pos: &PositionEncoding,
        kernels: Kernels,
        mode: &mut Mode,
    ) -> Result<Tensor> {
        let attn = self
            .attn
            .forward(&self.attn_input(x, kernels)?, pos, kernels, mode)?; // (B, T, C)
        let x = (x + attn)?; // (B, T, C)
        &x + self
            .mlp
            .forward(&self.ln_2.forward(&x, kernels)?, kernels, mode)? // (B, T, C)
    }
}
