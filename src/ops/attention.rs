//! Causal scaled dot-product attention, softmax(q kᵀ/√d) v with the causal mask, fused per
//! (batch, head) with its backward pass: no (B, H, T, T) score tensor goes through candle's
//! graph, and the weights are kept for the backward pass.

use super::contiguous;
use super::fast_math::dot;
use candle_core::{bail, CpuStorage, CustomOp3, Layout, Result, Shape, Tensor, D};
use rayon::prelude::*;
use std::sync::Mutex;

/// out += s · x.
#[inline(always)]
fn axpy(out: &mut [f32], s: f32, x: &[f32]) {
    out.iter_mut().zip(x).for_each(|(o, v)| *o += s * v);
}

struct CausalAttention {
    scale: f32,
    /// The attention weights of the forward pass, (B·H, T, T), for the backward pass.
    weights: Mutex<Option<Vec<f32>>>,
}

impl CustomOp3 for CausalAttention {
    fn name(&self) -> &'static str {
        "fused-causal-attention"
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
        let name = self.name();
        let (q, k, v) = (
            contiguous(s1, l1, name)?,
            contiguous(s2, l2, name)?,
            contiguous(s3, l3, name)?,
        );
        let (t_q, d) = (l1.dims()[2], l1.dims()[3]);
        let t_k = l2.dims()[2];
        let offset = t_k - t_q; // query i stands at position i + offset and sees keys 0..=i+offset
        let mut out = vec![0f32; q.len()];
        let mut weights = vec![0f32; q.len() / d * t_k];
        out.par_chunks_mut(t_q * d)
            .zip(weights.par_chunks_mut(t_q * t_k))
            .enumerate()
            .for_each(|(bh, (o, p))| {
                let q = &q[bh * t_q * d..(bh + 1) * t_q * d];
                let (k, v) = (
                    &k[bh * t_k * d..(bh + 1) * t_k * d],
                    &v[bh * t_k * d..(bh + 1) * t_k * d],
                );
                for i in 0..t_q {
                    let row = &mut p[i * t_k..i * t_k + i + offset + 1];
                    let qi = &q[i * d..(i + 1) * d];
                    for (j, s) in row.iter_mut().enumerate() {
                        *s = dot(qi, &k[j * d..(j + 1) * d]) * self.scale;
                    }
                    let max = super::fast_math::max(row);
                    row.iter_mut()
                        .for_each(|s| *s = super::fast_math::exp(*s - max));
                    let inv = 1.0 / super::fast_math::sum(row);
                    row.iter_mut().for_each(|s| *s *= inv);
                    let oi = &mut o[i * d..(i + 1) * d];
                    for (j, &pij) in row.iter().enumerate() {
                        axpy(oi, pij, &v[j * d..(j + 1) * d]);
                    }
                }
            });
        *self
            .weights
            .lock()
            .map_err(|_| candle_core::Error::Msg("attention lock poisoned".into()))? =
            Some(weights);
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }

    fn bwd(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        _out: &Tensor,
        d_out: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let Some(p) = self
            .weights
            .lock()
            .map_err(|_| candle_core::Error::Msg("attention lock poisoned".into()))?
            .take()
        else {
            bail!("fused attention: backward called twice")
        };
        let (_, _, t, d) = q.dims4()?;
        if k.dim(2)? != t {
            bail!("fused attention: the backward pass needs as many queries as keys (no cache)")
        }
        let flat = |x: &Tensor| x.flatten_all()?.to_vec1::<f32>();
        let (q_v, k_v, v_v, do_v) = (flat(q)?, flat(k)?, flat(v)?, flat(d_out)?);
        let n = q_v.len();
        let (mut dq, mut dk, mut dv) = (vec![0f32; n], vec![0f32; n], vec![0f32; n]);
        dq.par_chunks_mut(t * d)
            .zip(dk.par_chunks_mut(t * d))
            .zip(dv.par_chunks_mut(t * d))
            .enumerate()
            .for_each(|(bh, ((dq, dk), dv))| {
                let base = bh * t * d;
                let (q, k, v, g) = (
                    &q_v[base..base + t * d],
                    &k_v[base..base + t * d],
                    &v_v[base..base + t * d],
                    &do_v[base..base + t * d],
                );
                let p = &p[bh * t * t..(bh + 1) * t * t];
                let mut ds = vec![0f32; t];
                for i in 0..t {
                    let (pi, gi) = (&p[i * t..i * t + i + 1], &g[i * d..(i + 1) * d]);
                    // dV_j += p_ij dO_i; dP_ij = dO_i · v_j; dS = p ⊙ (dP − Σ p dP).
                    let mut weighted = 0f32;
                    for j in 0..=i {
                        axpy(&mut dv[j * d..(j + 1) * d], pi[j], gi);
                        ds[j] = dot(gi, &v[j * d..(j + 1) * d]);
                        weighted += pi[j] * ds[j];
                    }
                    let qi = &q[i * d..(i + 1) * d];
                    for j in 0..=i {
                        let s = pi[j] * (ds[j] - weighted) * self.scale;
                        axpy(&mut dq[i * d..(i + 1) * d], s, &k[j * d..(j + 1) * d]);
                        axpy(&mut dk[j * d..(j + 1) * d], s, qi);
                    }
                }
            });
        let make = |x: Vec<f32>| Tensor::from_vec(x, q.shape(), q.device());
        Ok((Some(make(dq)?), Some(make(dk)?), Some(make(dv)?)))
    }
}

/// softmax(q kᵀ · scale + causal mask) v for q (B, H, Tq, D) and k, v (B, H, Tk, D), Tq ≤ Tk,
/// the queries being the last Tq positions (Tq < Tk when earlier keys come from a cache; the
/// backward pass needs Tq = Tk).
pub fn causal_attention(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64) -> Result<Tensor> {
    let (b, h, t_q, d) = q.dims4()?;
    let t_k = k.dim(2)?;
    let fits = k.dims() == [b, h, t_k, d] && v.dims() == k.dims() && t_q <= t_k;
    if !(q.device().is_cpu() && q.dtype() == candle_core::DType::F32 && fits) {
        return causal_attention_reference(q, k, v, scale);
    }
    let op = CausalAttention {
        scale: scale as f32,
        weights: Mutex::new(None),
    };
    q.contiguous()?
        .apply_op3(&k.contiguous()?, &v.contiguous()?, op)
}

/// The composite reference: scores, the causal softmax, then the weighted sum of v.
pub fn causal_attention_reference(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
) -> Result<Tensor> {
    let scores = (q.matmul(&k.transpose(D::Minus2, D::Minus1)?)? * scale)?; // (B, H, Tq, Tk)
    super::softmax::softmax_reference(&scores, true)?.matmul(v) // (B, H, Tq, D)
}
