//! GELU (exact, with erf): the engine's forward and backward kernels, and the fused op of the
//! candle graph (forward only).

use super::{contiguous, fast_math, isa, scratch, ROWS_PER_TASK};
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

/// GELU of every element of `pre`, returned; `pre` itself is overwritten by GELU's slope there,
/// Φ(x) + x·φ(x), which is all its backward pass needs (so the pass is one multiply per element,
/// not a second exponential and erf).
pub fn forward_keeping_slope(pre: &mut [f32]) -> Vec<f32> {
    let mut y = scratch::take(pre.len()); // written whole
    y.par_chunks_mut(CHUNK)
        .zip(pre.par_chunks_mut(CHUNK))
        .for_each(|(out, inp)| isa::widest(|| values_and_slopes(out, inp)));
    y
}

/// [`forward_keeping_slope`] for one chunk: `out` = GELU(`pre`), then `pre` = GELU'(`pre`).
#[inline(always)]
pub(crate) fn values_and_slopes(out: &mut [f32], pre: &mut [f32]) {
    for (o, v) in out.iter_mut().zip(pre) {
        let x = *v * INV_SQRT_2;
        // e^(−x²) = e^(−v²/2) is both the exponential inside erf(v/√2) and φ(v)·√(2π).
        let gaussian = fast_math::exp(-x * x);
        let erf = fast_math::erf_with_gaussian(x, gaussian);
        // The value as `gelu_value` computes it, to the bit.
        let (value, cdf) = (0.5 * *v * (1.0 + erf), 0.5 * (1.0 + erf));
        (*o, *v) = (value, v.mul_add(INV_SQRT_2PI * gaussian, cdf));
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
    x.contiguous()?.apply_op1(Gelu)
}

/// The composite reference: candle's `gelu_erf`.
pub fn gelu_reference(x: &Tensor) -> Result<Tensor> {
    x.gelu_erf()
}
