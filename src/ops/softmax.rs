//! Softmax over the last dimension with an optional causal mask, fused (forward only: training
//! runs on `crate::engine`).

use super::{contiguous, fast_math, isa, ROWS_PER_TASK};
use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, Tensor, D};
use rayon::prelude::*;

/// Keys a query row may see: with Tq queries being the last of Tk keys, row i sees keys 0..=i+Tk-Tq.
fn visible(row: usize, t_q: usize, t_k: usize, causal: bool) -> usize {
    if causal {
        (row % t_q) + (t_k - t_q) + 1
    } else {
        t_k
    }
}

struct Softmax {
    causal: bool,
}

impl CustomOp1 for Softmax {
    fn name(&self) -> &'static str {
        "fused-softmax"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = contiguous(storage, layout, self.name())?;
        let dims = layout.dims();
        let (t_k, t_q) = (
            dims[dims.len() - 1],
            if dims.len() >= 2 {
                dims[dims.len() - 2]
            } else {
                1
            },
        );
        let mut y = vec![0f32; x.len()];
        y.par_chunks_mut(t_k * ROWS_PER_TASK)
            .enumerate()
            .for_each(|(task, out)| {
                isa::widest(|| {
                    for (r, out_row) in out.chunks_mut(t_k).enumerate() {
                        let row = task * ROWS_PER_TASK + r;
                        let n = visible(row, t_q, t_k, self.causal);
                        let x_row = &x[row * t_k..row * t_k + n];
                        out_row[..n].copy_from_slice(x_row);
                        fast_math::softmax_in_place(&mut out_row[..n]);
                    }
                })
            });
        Ok((CpuStorage::F32(y), layout.shape().clone()))
    }
}

/// Softmax over the last dimension of scores (.., Tq, Tk); with `causal`, query i (the last Tq of
/// Tk positions) sees only keys up to its own position, the rest get weight 0.
pub fn softmax(scores: &Tensor, causal: bool) -> Result<Tensor> {
    scores.contiguous()?.apply_op1(Softmax { causal })
}

/// The composite reference: an additive −∞ mask above the diagonal, then candle's softmax.
pub fn softmax_reference(scores: &Tensor, causal: bool) -> Result<Tensor> {
    let scores = if causal {
        let (t_q, t_k) = (scores.dim(D::Minus2)?, scores.dim(D::Minus1)?);
        let mask: Vec<f32> = (0..t_q * t_k)
            .map(|i| {
                if i % t_k < visible(i / t_k, t_q, t_k, true) {
                    0.0
                } else {
                    f32::NEG_INFINITY
                }
            })
            .collect();
        let mask = Tensor::from_vec(mask, (t_q, t_k), scores.device())?.to_dtype(scores.dtype())?;
        scores.broadcast_add(&mask)?
    } else {
        scores.clone()
    };
    candle_nn::ops::softmax(&scores, D::Minus1)
}
