//! Causal multi-head self-attention with one fused qkv projection.

use crate::config::ModelConfig;
use crate::model::layers::{Dropout, Linear, Mode, INIT_STD};
use crate::model::position::PositionEncoding;
use crate::ops::{qk_norm, Kernels};
use candle_core::{Result, Tensor};
use candle_nn::VarBuilder;

/// Multi-head attention: `c_attn` makes q, k and v in one matmul, the heads are slices of them,
/// and `c_proj` mixes the heads back. Its parameter count does not depend on `n_head`.
#[derive(Clone)]
pub struct CausalSelfAttention {
    pub(crate) c_attn: Linear,
    pub(crate) c_proj: Linear,
    attn_dropout: Dropout,
    resid_dropout: Dropout,
    pub(crate) n_head: usize,
    pub(crate) head_dim: usize,
    /// Whether q and k are scaled to unit RMS per head before RoPE (QK-norm).
    pub(crate) qk_norm: bool,
}

impl CausalSelfAttention {
    /// `c_attn`: n_embd → 3·n_embd; `c_proj`: n_embd → n_embd, drawn with GPT-2's scaled
    /// residual std 0.02/√(2·n_layer).
    pub fn new(vb: VarBuilder, cfg: &ModelConfig) -> Result<Self> {
        let c = cfg.n_embd;
        let residual_std = crate::model::layers::projection_std(cfg);
        Ok(CausalSelfAttention {
            c_attn: Linear::new(vb.pp("c_attn"), c, 3 * c, cfg.bias, INIT_STD)?,
            c_proj: Linear::new(vb.pp("c_proj"), c, c, cfg.bias, residual_std)?,
            attn_dropout: Dropout::new(cfg.dropout),
            resid_dropout: Dropout::new(cfg.dropout),
            n_head: cfg.n_head,
            head_dim: cfg.head_dim(),
            qk_norm: cfg.qk_norm,
        })
    }

    /// Splits (B, T, C) into heads: (B, n_head, T, head_dim).
    fn split_heads(&self, x: &Tensor) -> Result<Tensor> {
        let (b, t, _c) = x.dims3()?;
        x.reshape((b, t, self.n_head, self.head_dim))?
            .transpose(1, 2)?
            .contiguous()
    }

    /// q, k and v for x (B, T, C), each (B, n_head, T, head_dim); q and k normalized (QK-norm)
    /// and rotated for RoPE.
    pub fn qkv(
        &self,
        x: &Tensor,
        pos: &PositionEncoding,
        kernels: Kernels,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        let c = x.dim(2)?;
        let qkv = self.c_attn.forward(x, kernels)?; // (B, T, 3C)
        let q = self.split_heads(&qkv.narrow(2, 0, c)?)?; // (B, H, T, D)
        let k = self.split_heads(&qkv.narrow(2, c, c)?)?; // (B, H, T, D)
        let v = self.split_heads(&qkv.narrow(2, 2 * c, c)?)?; // (B, H, T, D)
        let (q, k) = match self.qk_norm {
            true => (qk_norm::reference(&q)?, qk_norm::reference(&k)?), // (B, H, T, D)
            false => (q, k),
        };
        Ok((pos.rotate(&q, 0)?, pos.rotate(&k, 0)?, v))
    }

    /// The score scale 1/√head_dim.
    pub(crate) fn scale(&self) -> f64 {
        1.0 / (self.head_dim as f64).sqrt()
    }

    /// Attention weights (B, H, T, T) for x (B, T, C): causal softmax of the scaled scores.
    pub fn weights(
        &self,
        (q, k): (&Tensor, &Tensor),
        pos: &PositionEncoding,
        kernels: Kernels,
    ) -> Result<Tensor> {
        let (t_q, t_k) = (q.dim(2)?, k.dim(2)?);
        let mut scores = (q.matmul(&k.t()?)? * self.scale())?; // (B, H, Tq, Tk)
        if let Some(bias) = pos.score_bias(t_q, t_k, &scores)? {
            scores = scores.broadcast_add(&bias)?; // (B, H, Tq, Tk)
        }
        // (B, H, Tq, Tk), zero above the diagonal
        match kernels {
            Kernels::Fused => crate::ops::softmax::softmax(&scores, true),
            Kernels::Composite => crate::ops::softmax::softmax_reference(&scores, true),
        }
    }

    /// softmax(q kᵀ/√d + mask) v for q (B, H, Tq, D) and k, v (B, H, Tk, D), the queries being the
    /// last Tq of the Tk positions: (B, H, Tq, D).
    fn attend(
        &self,
        (q, k, v): (&Tensor, &Tensor, &Tensor),
        pos: &PositionEncoding,
        kernels: Kernels,
        mode: &mut Mode,
    ) -> Result<Tensor> {
        let fused = kernels == Kernels::Fused;
        if fused && !pos.biases_scores() && !self.attn_dropout.is_active(mode) {
            // No score bias and no dropout on the weights: the fused kernel does it all.
            crate::ops::attention::causal_attention(q, k, v, self.scale()) // (B, H, Tq, D)
        } else {
            let att = self.weights((q, k), pos, kernels)?; // (B, H, Tq, Tk)
            self.attn_dropout.forward(&att, mode)?.matmul(v) // (B, H, Tq, D)
        }
    }

    /// Merges the heads y (B, H, T, D) and projects them: (B, T, C).
    fn project(&self, y: &Tensor, kernels: Kernels, mode: &mut Mode) -> Result<Tensor> {
        let (b, _h, t, _d) = y.dims4()?;
        let y = y
            .transpose(1, 2)?
            .reshape((b, t, self.n_head * self.head_dim))?; // (B, T, C)
        self.resid_dropout
            .forward(&self.c_proj.forward(&y, kernels)?, mode)
    }

    /// y = c_proj(concat_heads(softmax(q kᵀ/√d + mask) v)) for x (B, T, C), on `kernels`.
    pub fn forward(
        &self,
        x: &Tensor,
        pos: &PositionEncoding,
        kernels: Kernels,
        mode: &mut Mode,
    ) -> Result<Tensor> {
        let fused = kernels == Kernels::Fused;
        if fused && !pos.acts_in_attention() && !self.qk_norm && !self.attn_dropout.is_active(mode)
        {
            // Plain causal attention: one fused op reads the heads from c_attn's output in place.
            let qkv = self.c_attn.forward(x, kernels)?; // (B, T, 3C)
            let y = crate::ops::attention::causal_attention_qkv(&qkv, self.n_head, self.scale())?; // (B, T, C)
            return self
                .resid_dropout
                .forward(&self.c_proj.forward(&y, kernels)?, mode);
        }
        let (q, k, v) = self.qkv(x, pos, kernels)?; // each (B, H, T, D)
        let y = self.attend((&q, &k, &v), pos, kernels, mode)?; // (B, H, T, D)
        self.project(&y, kernels, mode)
    }
}
