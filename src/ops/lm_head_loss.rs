//! The output layer and the loss in one pass: logits = x Wᵀ, cross-entropy against the targets,
//! and (when training) the gradients of x and W, computed chunk by chunk of rows so that the
//! (B·T) × vocab logits are never materialised (the fused linear cross-entropy of Liger-Kernel).

use super::{contiguous, fast_math, matmul_into, Operand};
use candle_core::{bail, CpuStorage, CustomOp2, Layout, Result, Shape, Tensor};
use rayon::prelude::*;
use std::sync::{Arc, Mutex};

/// Rows of logits computed at once: 128 × a 6,000-character vocabulary is 3 MB, cache-sized.
const CHUNK_ROWS: usize = 128;

/// The gradients computed during the forward pass, handed to the backward pass.
type Grads = (Vec<f32>, Vec<f32>);

struct LmHeadLoss {
    targets: Arc<Vec<u32>>,
    with_grad: bool,
    grads: Mutex<Option<Grads>>,
}

impl CustomOp2 for LmHeadLoss {
    fn name(&self) -> &'static str {
        "fused-lm-head-cross-entropy"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (x, w) = (
            contiguous(s1, l1, self.name())?,
            contiguous(s2, l2, self.name())?,
        );
        let (v, c) = (l2.dims()[0], l2.dims()[1]);
        let n = x.len() / c;
        let inv_n = 1.0 / n as f32;
        let mut dx = if self.with_grad {
            vec![0f32; n * c]
        } else {
            Vec::new()
        };
        let mut dw = if self.with_grad {
            vec![0f32; v * c]
        } else {
            Vec::new()
        };
        let mut logits = vec![0f32; CHUNK_ROWS * v];
        let mut total = 0f64;
        for start in (0..n).step_by(CHUNK_ROWS) {
            let rows = CHUNK_ROWS.min(n - start);
            let x_chunk = &x[start * c..(start + rows) * c];
            let logits = &mut logits[..rows * v];
            let x_op = Operand {
                data: x_chunk,
                row_stride: c,
                col_stride: 1,
            };
            matmul_into(
                logits,
                rows,
                v,
                c,
                x_op,
                Operand {
                    data: w,
                    row_stride: 1,
                    col_stride: c,
                },
                false,
            ); // x Wᵀ
            let targets = &self.targets[start..start + rows];
            let losses: Vec<f32> = logits
                .par_chunks_mut(v)
                .zip(targets.par_iter())
                .map(|(row, &t)| {
                    let max = fast_math::max(row);
                    let lse = max + fast_math::sum_exp(row, max).ln();
                    let loss = lse - row[t as usize];
                    if self.with_grad {
                        // d loss / d logits = (softmax − onehot) / N, written over the logits.
                        row.iter_mut()
                            .for_each(|l| *l = fast_math::exp(*l - lse) * inv_n);
                        row[t as usize] -= inv_n;
                    }
                    loss
                })
                .collect();
            total += losses.iter().map(|&l| l as f64).sum::<f64>();
            if self.with_grad {
                let dx_chunk = &mut dx[start * c..(start + rows) * c];
                let dlogits = Operand {
                    data: logits,
                    row_stride: v,
                    col_stride: 1,
                };
                let w_op = Operand {
                    data: w,
                    row_stride: c,
                    col_stride: 1,
                };
                matmul_into(dx_chunk, rows, c, v, dlogits, w_op, false); // dlogits · W
                let dlogits_t = Operand {
                    data: logits,
                    row_stride: 1,
                    col_stride: v,
                };
                matmul_into(&mut dw, v, c, rows, dlogits_t, x_op, true); // += dlogitsᵀ · x
            }
        }
        if self.with_grad {
            *self
                .grads
                .lock()
                .map_err(|_| candle_core::Error::Msg("gradient lock poisoned".into()))? =
                Some((dx, dw));
        }
        Ok((
            CpuStorage::F32(vec![(total / n as f64) as f32]),
            Shape::from(()),
        ))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _loss: &Tensor,
        dloss: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let taken = self
            .grads
            .lock()
            .map_err(|_| candle_core::Error::Msg("gradient lock poisoned".into()))?
            .take();
        let Some((dx, dw)) = taken else {
            bail!("the fused output layer ran without gradients (evaluation mode) and cannot be differentiated")
        };
        let g = dloss
            .to_dtype(candle_core::DType::F32)?
            .to_scalar::<f32>()?;
        let dx = (Tensor::from_vec(dx, x.shape(), x.device())? * g as f64)?;
        let dw = (Tensor::from_vec(dw, w.shape(), w.device())? * g as f64)?;
        Ok((Some(dx), Some(dw)))
    }
}

/// Mean cross-entropy of `x` (N, C) · `w`ᵀ (w: (V, C)) against `targets` (N,). With `with_grad`
/// the gradients are computed in the same pass (training); without, only the loss (evaluation).
pub fn lm_head_cross_entropy(
    x: &Tensor,
    w: &Tensor,
    targets: &Tensor,
    with_grad: bool,
) -> Result<Tensor> {
    if !(x.device().is_cpu() && x.dtype() == candle_core::DType::F32) {
        return lm_head_cross_entropy_reference(x, w, targets);
    }
    let ((n, c), (v, c_w)) = (x.dims2()?, w.dims2()?);
    if c != c_w {
        bail!("lm_head: hidden size {c} but weight expects {c_w}")
    }
    let targets: Vec<u32> = targets.to_vec1()?;
    if targets.len() != n {
        bail!("{} targets for {n} rows", targets.len())
    }
    if let Some(&bad) = targets.iter().find(|&&t| t as usize >= v) {
        bail!("target id {bad} is outside the vocabulary of {v}")
    }
    let op = LmHeadLoss {
        targets: Arc::new(targets),
        with_grad,
        grads: Mutex::new(None),
    };
    x.contiguous()?.apply_op2(&w.contiguous()?, op)
}

/// The composite reference: the Linear layer, then candle-nn's cross-entropy.
pub fn lm_head_cross_entropy_reference(x: &Tensor, w: &Tensor, targets: &Tensor) -> Result<Tensor> {
    candle_nn::loss::cross_entropy(&x.matmul(&w.t()?)?, targets)
}
