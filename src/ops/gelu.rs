//! GELU (exact, with erf): the engine's forward and backward kernels, and the fused op of the
//! candle graph (forward only).

use super::{contiguous, fast_math, isa, ROWS_PER_TASK};
use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

const CHUNK: usize = 256 * ROWS_PER_TASK;
const INV_SQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;
/// 1/√(2π).
const INV_SQRT_2PI: f32 = 0.398_942_3;

/// GELU(v) = v·Φ(v), exact (with erf).
#[inline(always)]
pub(crate) fn gelu_value(v: f32) -> f32 {
    0.5 * v * (1.0 + fast_math::erf(v * INV_SQRT_2))
}

/// GELU of every element of x.
pub fn forward(x: &[f32]) -> Vec<f32> {
    let mut y = vec![0f32; x.len()];
    y.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .for_each(|(out, inp)| {
            isa::widest(|| {
                for (o, &v) in out.iter_mut().zip(inp) {
                    *o = gelu_value(v);
                }
            })
        });
    y
}

/// Turns the output's gradient `g` into the input's: g · (Φ(x) + x·φ(x)), element by element.
pub fn backward_in_place(x: &[f32], g: &mut [f32]) {
    g.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .for_each(|(gs, xs)| isa::widest(|| gelu_gradient(gs, xs)));
}

/// [`backward_in_place`] for one chunk.
#[inline(always)]
pub(crate) fn gelu_gradient(gs: &mut [f32], xs: &[f32]) {
    for (g, &v) in gs.iter_mut().zip(xs) {
        // e^(−v²/2) is both φ(v)·√(2π) and the exponential inside erf(v/√2).
        let gaussian = fast_math::exp(-0.5 * v * v);
        let cdf = 0.5 * (1.0 + fast_math::erf_with_gaussian(v * INV_SQRT_2, gaussian));
        *g *= v.mul_add(INV_SQRT_2PI * gaussian, cdf);
    }
}

struct Gelu;

impl CustomOp1 for Gelu {
    fn name(&self) -> &'static str {
        "fused-gelu"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = contiguous(storage, layout, self.name())?;
        Ok((CpuStorage::F32(forward(x)), layout.shape().clone()))
    }
}

/// GELU with erf: x·Φ(x).
pub fn gelu(x: &Tensor) -> Result<Tensor> {
    if super::fused_for(x) {
        x.contiguous()?.apply_op1(Gelu)
    } else {
        gelu_reference(x)
    }
}

/// The composite reference: candle's `gelu_erf`.
pub fn gelu_reference(x: &Tensor) -> Result<Tensor> {
    x.gelu_erf()
}
