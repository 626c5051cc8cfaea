//! QK-norm: each head's query and key scaled to unit root mean square before RoPE rotates them
//! (an RMSNorm without a weight, as modded-nanogpt's `F.rms_norm(q, (head_dim,))`), so that the
//! attention scores stay bounded however the weights grow. The engine's forward and backward on
//! the fused projection's rows, beside the composite reference.

use candle_core::{Result, Tensor, D};

/// ε added to the mean square.
pub const EPS: f32 = 1e-6;

/// `x` (one head's q or k) scaled to unit RMS in place; returns the RMS it had (ε included).
pub fn normalize(x: &mut [f32]) -> f32 {
    let mean_square = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    let rms = (mean_square + EPS).sqrt();
    x.iter_mut().for_each(|v| *v /= rms);
    rms
}

/// The gradient of a head's input, in place of `g`, the gradient of its output x̂ = x / rms:
/// (g − x̂ · mean(g ⊙ x̂)) / rms.
pub fn backward(g: &mut [f32], normalized: &[f32], rms: f32) {
    let mean = g.iter().zip(normalized).map(|(g, x)| g * x).sum::<f32>() / g.len() as f32;
    g.iter_mut()
        .zip(normalized)
        .for_each(|(g, x)| *g = (*g - x * mean) / rms);
}

/// Every head's q and k in `qkv` (N × 3C, q | k | v of `c` per row, heads of `d`) normalized in
/// place; the RMS of each (N × 2C/d: a row's q heads, then its k heads).
pub fn forward_qkv(qkv: &mut [f32], c: usize, d: usize) -> Vec<f32> {
    let mut rms = Vec::with_capacity(qkv.len() / 3 / d * 2);
    for row in qkv.chunks_mut(3 * c) {
        rms.extend(row[..2 * c].chunks_mut(d).map(normalize));
    }
    rms
}

/// The gradient of the projection's q and k in `d_qkv` (N × 3C), in place, from that of the
/// normalized ones, given those (`normalized`, before any rotation) and their RMS.
pub fn backward_qkv(d_qkv: &mut [f32], normalized: &[f32], rms: &[f32], c: usize, d: usize) {
    let heads = d_qkv
        .chunks_mut(3 * c)
        .zip(normalized.chunks(3 * c))
        .flat_map(|(g, x)| g[..2 * c].chunks_mut(d).zip(x[..2 * c].chunks(d)));
    for ((g, x), &r) in heads.zip(rms) {
        backward(g, x, r);
    }
}

/// The composite reference on heads (.., D), differentiable: x / √(mean(x², D) + ε).
pub fn reference(x: &Tensor) -> Result<Tensor> {
    let mean_square = x.sqr()?.mean_keepdim(D::Minus1)?;
    x.broadcast_div(&(mean_square + EPS as f64)?.sqrt()?)
}
