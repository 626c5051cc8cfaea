//! The MLP and the pre-LN transformer block.

use crate::config::ModelConfig;
use crate::model::attention::CausalSelfAttention;
use crate::model::layers::{Dropout, LayerNorm, Linear, Mode, INIT_STD};
use crate::model::position::PositionEncoding;
use crate::ops::Kernels;
use candle_core::{Module, Result, Tensor};
use candle_nn::VarBuilder;

/// The feed-forward network: n_embd → 4·n_embd → GELU (exact, erf) → n_embd.
#[derive(Clone)]
pub struct Mlp {
    pub(crate) c_fc: Linear,
    pub(crate) c_proj: Linear,
    dropout: Dropout,
    kernels: Kernels,
}

impl Mlp {
    /// `c_fc` drawn N(0, 0.02); `c_proj` with the scaled residual std 0.02/√(2·n_layer).
    pub fn new(vb: VarBuilder, cfg: &ModelConfig) -> Result<Self> {
        let c = cfg.n_embd;
        let residual_std = INIT_STD / (2.0 * cfg.n_layer as f64).sqrt();
        Ok(Mlp {
            c_fc: Linear::new(vb.pp("c_fc"), c, 4 * c, cfg.bias, INIT_STD)?,
            c_proj: Linear::new(vb.pp("c_proj"), 4 * c, c, cfg.bias, residual_std)?,
            dropout: Dropout::new(cfg.dropout),
            kernels: Kernels::Fused,
        })
    }

    /// Runs every op on `kernels`.
    pub fn set_kernels(&mut self, kernels: Kernels) {
        (self.kernels, self.c_fc.kernels, self.c_proj.kernels) = (kernels, kernels, kernels);
    }

    /// x (B, T, C) → (B, T, C).
    pub fn forward(&self, x: &Tensor, mode: &mut Mode) -> Result<Tensor> {
        let fc = self.c_fc.forward(x)?; // (B, T, 4C)
        let h = match self.kernels {
            Kernels::Fused => crate::ops::gelu::gelu(&fc)?, // (B, T, 4C)
            Kernels::Composite => crate::ops::gelu::gelu_reference(&fc)?, // (B, T, 4C)
        };
        self.dropout.forward(&self.c_proj.forward(&h)?, mode) // (B, T, C)
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

    /// Runs every op on `kernels`.
    pub fn set_kernels(&mut self, kernels: Kernels) {
        (self.ln_1.kernels, self.ln_2.kernels) = (kernels, kernels);
        self.attn.set_kernels(kernels);
        self.mlp.set_kernels(kernels);
    }

    /// The input the attention reads: ln_1(x).
    pub fn attn_input(&self, x: &Tensor) -> Result<Tensor> {
        self.ln_1.forward(x)
    }

    /// x (B, T, C) → (B, T, C).
    pub fn forward(&self, x: &Tensor, pos: &PositionEncoding, mode: &mut Mode) -> Result<Tensor> {
        let x = (x + self.attn.forward(&self.ln_1.forward(x)?, pos, mode)?)?; // (B, T, C)
        &x + self.mlp.forward(&self.ln_2.forward(&x)?, mode)? // (B, T, C)
    }
}
