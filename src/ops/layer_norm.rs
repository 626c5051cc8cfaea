//! LayerNorm over the last dimension: the engine's forward and backward kernels, and the fused op
//! of the candle graph (forward only).

use super::{contiguous, fast_math, isa, scratch, ROWS_PER_TASK};
use candle_core::{CpuStorage, CustomOp3, Layout, Result, Shape, Tensor, D};
use rayon::prelude::*;

/// The normalised row x̂ = (x − mean(x)) / σ(x), written into `xhat`, and 1/σ.
fn normalized(row: &[f32], eps: f32, xhat: &mut [f32]) -> f32 {
    let n = row.len() as f32;
    let mean = fast_math::sum(row) / n;
    xhat.iter_mut().zip(row).for_each(|(h, x)| *h = x - mean);
    let rstd = 1.0 / (fast_math::dot(xhat, xhat) / n + eps).sqrt();
    xhat.iter_mut().for_each(|h| *h *= rstd);
    rstd
}

/// out = (x − mean(x)) / σ(x) · w + b for one row x.
pub(crate) fn normalize_row(x: &[f32], w: &[f32], b: &[f32], eps: f32, out: &mut [f32]) {
    normalized(x, eps, out);
    for ((o, w), b) in out.iter_mut().zip(w).zip(b) {
        *o = o.mul_add(*w, *b);
    }
}

/// LayerNorm of the rows of x (N × C) with weight w and bias b (C).
pub fn forward(x: &[f32], w: &[f32], b: &[f32], eps: f32) -> Vec<f32> {
    let c = w.len();
    let mut y = scratch::take(x.len()); // written whole, row by row
    y.par_chunks_mut(c * ROWS_PER_TASK)
        .zip(x.par_chunks(c * ROWS_PER_TASK))
        .for_each(|(out, inp)| {
            isa::widest(|| {
                for (o, xr) in out.chunks_mut(c).zip(inp.chunks(c)) {
                    normalize_row(xr, w, b, eps, o);
                }
            })
        });
    y
}

/// [`backward_into`] for the rows of one chunk: dx written into `dx` (added with `accumulate`),
/// and the chunk's (dweight, dbias) returned.
#[inline(always)]
pub(crate) fn backward_rows(
    (x_part, w, dy_part): (&[f32], &[f32], &[f32]),
    eps: f32,
    dx_part: &mut [f32],
    accumulate: bool,
) -> (Vec<f32>, Vec<f32>) {
    let c = w.len();
    let (mut dw, mut db) = (vec![0f32; c], vec![0f32; c]);
    let (mut xhat, mut g) = (vec![0f32; c], vec![0f32; c]);
    for ((dxr, xr), gr) in dx_part
        .chunks_mut(c)
        .zip(x_part.chunks(c))
        .zip(dy_part.chunks(c))
    {
        // Element-wise passes and lane sums, so that each vectorises.
        let rstd = normalized(xr, eps, &mut xhat);
        g.iter_mut()
            .zip(gr.iter().zip(w))
            .for_each(|(g, (gr, w))| *g = gr * w); // d out / d x̂
        let mean_g = fast_math::sum(&g) / c as f32;
        let mean_gx = fast_math::dot(&g, &xhat) / c as f32;
        for (((dw, db), gr), xhat) in dw.iter_mut().zip(&mut db).zip(gr).zip(&xhat) {
            *dw = gr.mul_add(*xhat, *dw);
            *db += gr;
        }
        for ((dx, g), xhat) in dxr.iter_mut().zip(&g).zip(&xhat) {
            let d = rstd * (g - mean_g - xhat * mean_gx);
            *dx = if accumulate { *dx + d } else { d };
        }
    }
    (dw, db)
}

/// The gradients of [`forward`] from the output's gradient dy (N × C): dx written into `dx`
/// (added to it with `accumulate`), and (dweight, dbias) returned.
pub fn backward_into(
    x: &[f32],
    w: &[f32],
    dy: &[f32],
    eps: f32,
    dx: &mut [f32],
    accumulate: bool,
) -> (Vec<f32>, Vec<f32>) {
    let c = w.len();
    let chunk = c * ROWS_PER_TASK;
    dx.par_chunks_mut(chunk)
        .zip(x.par_chunks(chunk).zip(dy.par_chunks(chunk)))
        .map(|(dx_part, (x_part, dy_part))| {
            isa::widest(|| backward_rows((x_part, w, dy_part), eps, dx_part, accumulate))
        })
        .collect::<Vec<_>>()
        .into_iter()
        // Summed in chunk order, not in rayon's reduction tree (which follows work stealing), so
        // that a run is repeatable to the bit.
        .fold((vec![0f32; c], vec![0f32; c]), |(mut a, mut b), (c2, d)| {
            a.iter_mut().zip(&c2).for_each(|(u, v)| *u += v);
            b.iter_mut().zip(&d).for_each(|(u, v)| *u += v);
            (a, b)
        })
}

struct LayerNormOp {
    eps: f32,
}

impl CustomOp3 for LayerNormOp {
    fn name(&self) -> &'static str {
        "fused-layer-norm"
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
        let x = contiguous(s1, l1, self.name())?;
        let (w, b) = (
            contiguous(s2, l2, self.name())?,
            contiguous(s3, l3, self.name())?,
        );
        Ok((
            CpuStorage::F32(forward(x, w, b, self.eps)),
            l1.shape().clone(),
        ))
    }
}

/// LayerNorm of x (.., C) with weight and bias (C): (x − mean)/√(var + eps) · weight + bias.
pub fn layer_norm(x: &Tensor, weight: &Tensor, bias: &Tensor, eps: f32) -> Result<Tensor> {
    x.contiguous()?.apply_op3(weight, bias, LayerNormOp { eps })
}

/// The composite reference, from differentiable tensor ops.
pub fn layer_norm_reference(
    x: &Tensor,
    weight: &Tensor,
    bias: &Tensor,
    eps: f32,
) -> Result<Tensor> {
    let mean = x.mean_keepdim(D::Minus1)?; // (.., 1)
    let centred = x.broadcast_sub(&mean)?; // (.., C)
    let var = centred.sqr()?.mean_keepdim(D::Minus1)?; // (.., 1)
    let normed = centred.broadcast_div(&(var + eps as f64)?.sqrt()?)?; // (.., C)
    normed.broadcast_mul(weight)?.broadcast_add(bias)
}
