//! Cross-entropy of logits against target ids, fused with its softmax, with its backward.

use super::{contiguous, fast_math, ROWS_PER_TASK};
use candle_core::{bail, CpuStorage, CustomOp1, CustomOp2, Layout, Result, Shape, Tensor};
use rayon::prelude::*;
use std::sync::Arc;

/// log Σ exp(row), computed stably; also returns the max.
fn log_sum_exp(row: &[f32]) -> (f32, f32) {
    let max = fast_math::max(row);
    let sum = fast_math::sum_exp(row, max);
    (max, max + sum.ln())
}

struct CrossEntropy {
    targets: Arc<Vec<u32>>,
}

impl CustomOp1 for CrossEntropy {
    fn name(&self) -> &'static str {
        "fused-cross-entropy"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let logits = contiguous(storage, layout, self.name())?;
        let v = layout.dims()[1];
        let losses: Vec<f32> = logits
            .par_chunks(v)
            .zip(self.targets.par_iter())
            .map(|(row, &t)| log_sum_exp(row).1 - row[t as usize])
            .collect();
        Ok((CpuStorage::F32(losses), Shape::from(self.targets.len())))
    }

    fn bwd(&self, logits: &Tensor, _losses: &Tensor, dloss: &Tensor) -> Result<Option<Tensor>> {
        let op = CrossEntropyBackward {
            targets: self.targets.clone(),
        };
        Ok(Some(logits.apply_op2_no_bwd(&dloss.contiguous()?, &op)?))
    }
}

/// dlogits = (softmax(logits) − onehot(target)) · dloss, row by row.
struct CrossEntropyBackward {
    targets: Arc<Vec<u32>>,
}

impl CustomOp2 for CrossEntropyBackward {
    fn name(&self) -> &'static str {
        "fused-cross-entropy-backward"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (logits, dloss) = (
            contiguous(s1, l1, self.name())?,
            contiguous(s2, l2, self.name())?,
        );
        let v = l1.dims()[1];
        let mut out = vec![0f32; logits.len()];
        out.par_chunks_mut(v * ROWS_PER_TASK)
            .enumerate()
            .for_each(|(task, part)| {
                for (r, o) in part.chunks_mut(v).enumerate() {
                    let row = task * ROWS_PER_TASK + r;
                    let x = &logits[row * v..(row + 1) * v];
                    let (_, lse) = log_sum_exp(x);
                    let g = dloss[row];
                    for (oi, &xi) in o.iter_mut().zip(x) {
                        *oi = fast_math::exp(xi - lse) * g;
                    }
                    o[self.targets[row] as usize] -= g;
                }
            });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

/// Mean cross-entropy of logits (N, V) against targets (N,) u32.
pub fn cross_entropy(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    if !(logits.device().is_cpu() && logits.dtype() == candle_core::DType::F32) {
        return cross_entropy_reference(logits, targets);
    }
    let (n, v) = logits.dims2()?;
    let targets: Vec<u32> = targets.to_vec1()?;
    if let Some(&bad) = targets.iter().find(|&&t| t as usize >= v) {
        bail!("target id {bad} is outside the vocabulary of {v}")
    }
    if targets.len() != n {
        bail!("{} targets for {n} rows of logits", targets.len())
    }
    logits
        .contiguous()?
        .apply_op1(CrossEntropy {
            targets: Arc::new(targets),
        })?
        .mean_all()
}

/// The composite reference: candle-nn's `cross_entropy` (log-softmax, then the mean negative
/// log-likelihood).
pub fn cross_entropy_reference(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    candle_nn::loss::cross_entropy(logits, targets)
}
