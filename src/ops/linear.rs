//! A Linear layer `y = x Wᵀ + b`: the engine's forward and backward kernels, gemm calls on the raw
//! buffers, so that no transposed copy, broadcast bias or zeros-then-add gradient is ever built;
//! and the fused op of the candle graph (forward only).

use super::matmul::matmul_into;
use super::matmul_f32::Operand;
use super::{contiguous, Precision};
use candle_core::{CpuStorage, CustomOp2, CustomOp3, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

/// y (N × out) = x (N × in) · Wᵀ, W stored (out × in), plus `bias` in every row when given.
pub fn forward(
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    n_out: usize,
    precision: Precision,
) -> Vec<f32> {
    let rows = x.len() / (w.len() / n_out);
    let mut y = match bias {
        Some(b) => b.repeat(rows),
        None => vec![0f32; rows * n_out],
    };
    add_product(x, w, n_out, &mut y, bias.is_some(), precision);
    y
}

/// y (N × out) += x (N × in) · Wᵀ, plus `bias` in every row when given: [`forward`] onto a
/// residual stream.
pub(crate) fn add_forward(
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    n_out: usize,
    y: &mut [f32],
    precision: Precision,
) {
    if let Some(b) = bias {
        for row in y.chunks_mut(n_out) {
            row.iter_mut().zip(b).for_each(|(v, b)| *v += b);
        }
    }
    add_product(x, w, n_out, y, true, precision);
}

/// y = (y if `accumulate`) + x · Wᵀ.
fn add_product(
    x: &[f32],
    w: &[f32],
    n_out: usize,
    y: &mut [f32],
    accumulate: bool,
    precision: Precision,
) {
    let n_in = w.len() / n_out;
    let rows = x.len() / n_in;
    let lhs = Operand::rows(x, n_in);
    let rhs = Operand {
        data: w,
        row_stride: 1,
        col_stride: n_in,
    }; // Wᵀ: (in × out)
    matmul_into(y, rows, n_out, n_in, lhs, rhs, accumulate, precision);
}

/// The gradients of [`forward`] from the output's gradient dy (N × out), W being (out × in): dx
/// (N × in) = dy·W, dW (out × in) = dyᵀ·x and, when given, db (out) = Σ_rows dy. Every output is
/// overwritten.
pub fn backward_into(
    (x, w, dy): (&[f32], &[f32], &[f32]),
    n_out: usize,
    dx: &mut [f32],
    dw: &mut [f32],
    db: Option<&mut [f32]>,
    precision: Precision,
) {
    let n_in = w.len() / n_out;
    let rows = x.len() / n_in;
    let dy_op = Operand::rows(dy, n_out);
    let w_op = Operand::rows(w, n_in);
    matmul_into(dx, rows, n_in, n_out, dy_op, w_op, false, precision); // dy·W
    let x_op = Operand::rows(x, n_in);
    matmul_into(dw, n_out, n_in, rows, dy_op.t(), x_op, false, precision); // dyᵀ·x
    if let Some(db) = db {
        let sums = dy
            .par_chunks(n_out * 256)
            .map(|part| {
                let mut acc = vec![0f32; n_out];
                for row in part.chunks(n_out) {
                    acc.iter_mut().zip(row).for_each(|(a, v)| *a += v);
                }
                acc
            })
            .collect::<Vec<_>>()
            .into_iter()
            // Summed in chunk order, not in rayon's reduction tree (which follows work
            // stealing), so that a run is repeatable to the bit.
            .fold(vec![0f32; n_out], |mut a, b| {
                a.iter_mut().zip(&b).for_each(|(u, v)| *u += v);
                a
            });
        db.copy_from_slice(&sums);
    }
}

/// The Linear op; `out` is the number of output features.
struct Linear {
    out: usize,
}

fn output_shape(x: &Layout, out: usize) -> Shape {
    let mut dims = x.dims().to_vec();
    *dims.last_mut().expect("rank ≥ 1") = out;
    Shape::from(dims)
}

impl CustomOp2 for Linear {
    fn name(&self) -> &'static str {
        "fused-linear"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (x, w) = (
            contiguous(s1, l1, "fused-linear")?,
            contiguous(s2, l2, "fused-linear")?,
        );
        Ok((
            CpuStorage::F32(forward(x, w, None, self.out, Precision::F32)),
            output_shape(l1, self.out),
        ))
    }
}

impl CustomOp3 for Linear {
    fn name(&self) -> &'static str {
        "fused-linear-bias"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let name = "fused-linear-bias";
        let (x, w, b) = (
            contiguous(s1, l1, name)?,
            contiguous(s2, l2, name)?,
            contiguous(s3, l3, name)?,
        );
        Ok((
            CpuStorage::F32(forward(x, w, Some(b), self.out, Precision::F32)),
            output_shape(l1, self.out),
        ))
    }
}

/// y = x Wᵀ + b for x (.., in), W (out, in), b (out).
pub fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
    let (out, n_in) = w.dims2()?;
    if x.dim(candle_core::D::Minus1)? != n_in {
        candle_core::bail!(
            "linear: input has {} features, weight expects {n_in}",
            x.dim(candle_core::D::Minus1)?
        )
    }
    let (x, w) = (x.contiguous()?, w.contiguous()?);
    match b {
        Some(b) => x.apply_op3(&w, &b.contiguous()?, Linear { out }),
        None => x.apply_op2(&w, Linear { out }),
    }
}

/// The composite reference: candle-nn's `Linear`.
pub fn linear_reference(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
    use candle_core::Module;
    candle_nn::Linear::new(w.clone(), b.cloned()).forward(x)
}
