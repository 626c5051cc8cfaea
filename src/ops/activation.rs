//! The MLP's nonlinearity, GELU or ReLU², chosen by the config: one place where the engine, the
//! cached decoder and the candle graph ask for its kernels (`gelu`, `relu2`).

use super::{gelu, relu2, Kernels, ROWS_PER_TASK};
use candle_core::{Result, Tensor};
use rayon::prelude::*;

/// The MLP's nonlinearity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Activation {
    /// GPT-2's GELU (exact, with erf).
    #[default]
    Gelu,
    /// ReLU squared, max(x, 0)² (So et al. 2021, "Primer"; modded-nanogpt's).
    Relu2,
}

impl Activation {
    /// Every nonlinearity.
    pub const ALL: [Activation; 2] = [Activation::Gelu, Activation::Relu2];

    /// The name used in config files.
    pub fn name(self) -> &'static str {
        match self {
            Activation::Gelu => "gelu",
            Activation::Relu2 => "relu2",
        }
    }

    /// Its value at `v`, as the engine's kernel computes it.
    #[inline(always)]
    pub fn value(self, v: f32) -> f32 {
        match self {
            Activation::Gelu => gelu::gelu_value(v),
            Activation::Relu2 => relu2::relu2_value(v),
        }
    }

    /// Its values at every element of `pre`, returned; `pre` is overwritten by its slope there,
    /// all that [`backward_in_place`] needs.
    pub fn forward_keeping_slope(self, pre: &mut [f32]) -> Vec<f32> {
        match self {
            Activation::Gelu => gelu::forward_keeping_slope(pre),
            Activation::Relu2 => relu2::forward_keeping_slope(pre),
        }
    }

    /// The candle graph's op on `kernels`: the fused forward, or the composite reference.
    pub fn forward(self, x: &Tensor, kernels: Kernels) -> Result<Tensor> {
        match (self, kernels) {
            (Activation::Gelu, Kernels::Fused) => gelu::gelu(x),
            (Activation::Gelu, Kernels::Composite) => gelu::gelu_reference(x),
            (Activation::Relu2, Kernels::Fused) => relu2::relu2(x),
            (Activation::Relu2, Kernels::Composite) => relu2::relu2_reference(x),
        }
    }
}

impl std::fmt::Display for Activation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Turns the output's gradient `g` into the input's, given the slope that
/// [`Activation::forward_keeping_slope`] left: g · f′(x), element by element.
pub fn backward_in_place(slope: &[f32], g: &mut [f32]) {
    const CHUNK: usize = 256 * ROWS_PER_TASK;
    g.par_chunks_mut(CHUNK)
        .zip(slope.par_chunks(CHUNK))
        .for_each(|(gs, ss)| gs.iter_mut().zip(ss).for_each(|(g, s)| *g *= s));
}
