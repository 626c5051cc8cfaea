//! The smallest pieces of the model: Linear, LayerNorm, dropout and the forward mode.

use crate::ops::Kernels;
use candle_core::{Result, Tensor};
use candle_nn::{Init, VarBuilder};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// GPT-2's initialisation for weights: N(0, 0.02).
pub const INIT_STD: f64 = 0.02;

/// The initial std of the output projections that add to the residual stream (the attention's
/// and the MLP's `c_proj`): GPT-2's 0.02/√(2·n_layer), or 0 where the config starts them at zero
/// (drawn all the same, so that every other weight is the one drawn without it).
pub fn projection_std(cfg: &crate::config::ModelConfig) -> f64 {
    match cfg.zero_init_projections {
        true => 0.0,
        false => INIT_STD / (2.0 * cfg.n_layer as f64).sqrt(),
    }
}

/// The ε LayerNorm adds to the variance.
pub const LN_EPS: f32 = 1e-5;

/// Whether a forward pass trains (dropout on, masks drawn from this RNG) or evaluates.
pub enum Mode<'a> {
    /// No dropout.
    Eval,
    /// Dropout with masks drawn from the given seeded RNG.
    Train(&'a mut ChaCha8Rng),
}

/// A Linear layer `y = x Wᵀ + b` with W stored [out, in] (as PyTorch).
#[derive(Clone)]
pub struct Linear {
    pub(crate) weight: Tensor,
    pub(crate) bias: Option<Tensor>,
}

impl Linear {
    /// W drawn N(0, `std`), b zero (absent when `bias` is false).
    pub fn new(
        vb: VarBuilder,
        in_dim: usize,
        out_dim: usize,
        bias: bool,
        std: f64,
    ) -> Result<Self> {
        let weight = vb.get_with_hints(
            (out_dim, in_dim),
            "weight",
            Init::Randn {
                mean: 0.0,
                stdev: std,
            },
        )?;
        let bias = if bias {
            Some(vb.get_with_hints(out_dim, "bias", Init::Const(0.0))?)
        } else {
            None
        };
        Ok(Linear { weight, bias })
    }

    /// The weight, (out, in).
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// A bias-free layer that shares `weight` (weight tying).
    pub fn tied(weight: Tensor) -> Self {
        Linear { weight, bias: None }
    }

    /// x (.., in) → (.., out) on `kernels`.
    pub fn forward(&self, x: &Tensor, kernels: Kernels) -> Result<Tensor> {
        let (w, b) = (&self.weight, self.bias.as_ref());
        match kernels {
            Kernels::Fused => crate::ops::linear::linear(x, w, b), // (.., out)
            Kernels::Composite => crate::ops::linear::linear_reference(x, w, b), // (.., out)
        }
    }
}

/// LayerNorm over the last dimension, eps [`LN_EPS`]: a fused CPU kernel, or the composite of
/// differentiable tensor ops (candle's own `LayerNorm` module has no backward pass).
#[derive(Clone)]
pub struct LayerNorm {
    pub(crate) weight: Tensor,
    /// A parameter when `bias` is on, else constant zeros.
    pub(crate) bias: Tensor,
}

impl LayerNorm {
    /// Weight ones, bias zeros (a constant, not a parameter, when `bias` is false).
    pub fn new(vb: VarBuilder, dim: usize, bias: bool) -> Result<Self> {
        let weight = vb.get_with_hints(dim, "weight", Init::Const(1.0))?;
        let bias = if bias {
            vb.get_with_hints(dim, "bias", Init::Const(0.0))?
        } else {
            weight.zeros_like()?
        };
        Ok(LayerNorm { weight, bias })
    }

    /// x (.., C) → (.., C) on `kernels`.
    pub fn forward(&self, x: &Tensor, kernels: Kernels) -> Result<Tensor> {
        let (w, b) = (&self.weight, &self.bias);
        match kernels {
            Kernels::Fused => crate::ops::layer_norm::layer_norm(x, w, b, LN_EPS), // (.., C)
            Kernels::Composite => crate::ops::layer_norm::layer_norm_reference(x, w, b, LN_EPS), // (.., C)
        }
    }
}

/// Inverted dropout: zeroes each element with probability `p` in training and scales the rest by
/// 1/(1-p); does nothing in evaluation.
#[derive(Clone)]
pub struct Dropout {
    p: f64,
}

impl Dropout {
    /// Dropout with probability `p` in [0, 1).
    pub fn new(p: f64) -> Self {
        Dropout { p }
    }

    /// Whether this dropout changes anything in `mode`.
    pub fn is_active(&self, mode: &Mode) -> bool {
        matches!(mode, Mode::Train(_)) && self.p > 0.0
    }

    /// Applies dropout when `mode` is training and p > 0.
    pub fn forward(&self, x: &Tensor, mode: &mut Mode) -> Result<Tensor> {
        let rng = match mode {
            Mode::Train(rng) if self.p > 0.0 => rng,
            _ => return Ok(x.clone()),
        };
        let mask = dropout_mask(self.p, x.elem_count(), rng);
        x.mul(&f32_tensor(mask, x.shape(), x)?)
    }
}

/// A dropout mask of `len` elements drawn from `rng`, one 32-bit word each in order: 0 where the
/// word is below p·2³² (probability p to within 2⁻³²), else 1/(1 − p). The candle graph and the
/// CPU engine draw theirs here, in the same order, so that both give the same training step from
/// the same RNG. Words are drawn a block at a time: 4× faster than an f64 per element, which took
/// 8 ms of the default config's 70 ms step (docs/performance.md).
pub fn dropout_mask(p: f64, len: usize, rng: &mut ChaCha8Rng) -> Vec<f32> {
    const BLOCK: usize = 1024;
    let scale = (1.0 / (1.0 - p)) as f32;
    let threshold = (p * 2f64.powi(32)).ceil() as u64; // word < threshold ⇔ word < p·2³²
    let mut mask = vec![0f32; len];
    let mut words = [0u32; BLOCK];
    for chunk in mask.chunks_mut(BLOCK) {
        let words = &mut words[..chunk.len()];
        rng.fill(words);
        for (m, &w) in chunk.iter_mut().zip(words.iter()) {
            *m = if u64::from(w) < threshold { 0.0 } else { scale };
        }
    }
    mask
}

/// A tensor from f32 values on the device and in the dtype of `like`.
pub fn f32_tensor(
    values: Vec<f32>,
    shape: impl Into<candle_core::Shape>,
    like: &Tensor,
) -> Result<Tensor> {
    Tensor::from_vec(values, shape, like.device())?.to_dtype(like.dtype())
}
