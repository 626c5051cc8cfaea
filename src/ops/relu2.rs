//! ReLU squared, max(x, 0)²: the engine's forward kernel that keeps its slope, and the fused op
//! of the candle graph (forward only) beside its composite reference.

use super::{contiguous, scratch, ROWS_PER_TASK};
use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

const CHUNK: usize = 256 * ROWS_PER_TASK;

/// max(v, 0)².
#[inline(always)]
pub fn relu2_value(v: f32) -> f32 {
    let r = v.max(0.0);
    r * r
}

/// ReLU² of every element of `pre`, returned; `pre` itself is overwritten by the slope there,
/// 2·max(x, 0), which is all the backward pass needs (`activation::backward_in_place`).
pub fn forward_keeping_slope(pre: &mut [f32]) -> Vec<f32> {
    let mut y = scratch::take(pre.len()); // written whole
    y.par_chunks_mut(CHUNK)
        .zip(pre.par_chunks_mut(CHUNK))
        .for_each(|(out, inp)| {
            for (o, v) in out.iter_mut().zip(inp) {
                let r = v.max(0.0);
                (*o, *v) = (r * r, 2.0 * r);
            }
        });
    y
}

struct Relu2;

impl CustomOp1 for Relu2 {
    fn name(&self) -> &'static str {
        "fused-relu2"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = contiguous(storage, layout, self.name())?;
        let y: Vec<f32> = x.par_iter().map(|&v| relu2_value(v)).collect();
        Ok((CpuStorage::F32(y), layout.shape().clone()))
    }
}

/// max(x, 0)² in one pass.
pub fn relu2(x: &Tensor) -> Result<Tensor> {
    x.contiguous()?.apply_op1(Relu2)
}

/// The composite reference, with candle's autograd: relu then square.
pub fn relu2_reference(x: &Tensor) -> Result<Tensor> {
    x.relu()?.sqr()
}
