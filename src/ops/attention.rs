//! Causal scaled dot-product attention, softmax(q kᵀ/√d) v with the causal mask, per (batch,
//! head): the engine's forward and backward kernels (with ALiBi's score bias and dropout), and the
//! fused ops of the candle graph (forward only), through which no (B, H, T, T) score tensor goes.

use super::matmul_f32::Operand;
use super::small_matmul::{self, TileSpan};
use super::{contiguous, isa, scratch};
use candle_core::{bail, CpuStorage, CustomOp1, CustomOp3, Layout, Result, Shape, Tensor, D};
use rayon::prelude::*;
use std::ops::Range;

/// Keys the queries of the row tile at `first` see together, rounded up to whole tiles of
/// columns (within `len`): query i sees keys 0..=i + `offset`, and the scores past a query's
/// last key are overwritten by the masking.
fn seen_keys(first: usize, offset: usize, len: usize) -> usize {
    let last = first + small_matmul::ROWS + offset;
    last.next_multiple_of(small_matmul::WIDTH).min(len)
}

/// The terms of a product by the causal weights (zero past each query's last key) for the row
/// tile at `first`: the keys its last query sees.
fn terms_seen(first: usize, offset: usize, len: usize) -> Range<usize> {
    0..(first + small_matmul::ROWS + offset).min(len)
}

/// ALiBi's penalty on a score, subtracted from it once it is scaled: `slope` times the distance
/// from the query's position to the key's. The training step's kernel and the decoder both take
/// it from here (the composite reference builds the same bias as a tensor, in f64).
pub(crate) fn alibi_penalty(slope: f32, distance: usize) -> f32 {
    slope * distance as f32
}

/// One (batch, head) forward: p (Tq × Tk) = causal softmax of q kᵀ · scale, o (Tq × D) = p v, for
/// q (Tq × D) and k, v (Tk × D), query i standing at position i + Tk − Tq.
///
/// With an ALiBi `slope`, each score is first lowered by slope · (i − j), the distance from the
/// query's position i to the key's j (a constant: the backward pass is the same). With a dropout
/// `mask` (Tq × Tk: 0 or 1/(1 − p)), o = (p ⊙ mask) v; p is kept undropped for the backward pass.
fn head_forward(
    (q, k, v): (Operand, Operand, Operand),
    (t_q, t_k, d): (usize, usize, usize),
    (scale, slope): (f32, Option<f32>),
    mask: Option<&[f32]>,
    p: &mut [f32],
    o: &mut [f32],
) {
    isa::widest(|| {
        let offset = t_k - t_q; // query i sees keys 0..=i+offset
        let mut k_t = scratch::take(d * t_k); // (D, Tk), written whole
        small_matmul::transpose(k, (t_k, d), &mut k_t);
        small_matmul::product((p, t_k), t_q, q, Operand::rows(&k_t, t_k), |first| {
            TileSpan {
                cols: seen_keys(first, offset, t_k),
                terms: 0..d,
            }
        }); // q kᵀ
        scratch::give_back(k_t);
        for (i, row) in p.chunks_mut(t_k).enumerate() {
            let (seen, masked) = row.split_at_mut(i + offset + 1);
            masked.fill(0.0);
            let last = seen.len() - 1;
            match slope {
                None => seen.iter_mut().for_each(|s| *s *= scale),
                Some(slope) => seen
                    .iter_mut()
                    .enumerate()
                    .for_each(|(j, s)| *s = *s * scale - alibi_penalty(slope, last - j)),
            }
            super::fast_math::softmax_in_place(seen);
        }
        let dropped = mask.map(|mask| dropped(p, mask)); // (Tq, Tk)
        let weights = Operand::rows(dropped.as_deref().unwrap_or(p), t_k);
        small_matmul::product((o, d), t_q, weights, v, |first| TileSpan {
            cols: d,
            terms: terms_seen(first, offset, t_k),
        }); // p v
    })
}

/// p ⊙ mask.
fn dropped(p: &[f32], mask: &[f32]) -> Vec<f32> {
    p.iter().zip(mask).map(|(p, m)| p * m).collect()
}

/// xᵀ · y for the lower-triangular x (T × T) and y (T × D), into dst (T × D): row j of the
/// result sums only over the rows i ≥ its tile's first (x is zero above its diagonal).
#[inline(always)]
fn lower_t_product(x: &[f32], y: Operand, (t, d): (usize, usize), dst: &mut [f32]) {
    let x_t = Operand::rows(x, t).t();
    small_matmul::product((dst, d), t, x_t, y, |first| TileSpan {
        cols: d,
        terms: first..t,
    });
}

/// One (batch, head) backward for T queries of T keys: dq, dk, dv (each T × D) from the weights p
/// (T × T) and dropout `mask` of [`head_forward`] and the output's gradient g (T × D); `ds` is
/// T × T scratch. The products skip the tiles above the diagonal, where p and dS are zero.
fn head_backward(
    (q, k, v, g): (Operand, Operand, Operand, Operand),
    (t, d): (usize, usize),
    (scale, mask): (f32, Option<&[f32]>),
    p: &[f32],
    ds: &mut [f32],
    (dq, dk, dv): (&mut [f32], &mut [f32], &mut [f32]),
) {
    isa::widest(|| {
        // dV = (p ⊙ mask)ᵀ dO.
        let dropped = mask.map(|mask| dropped(p, mask));
        lower_t_product(dropped.as_deref().unwrap_or(p), g, (t, d), dv);
        // dP = (dO vᵀ) ⊙ mask, then dS = p ⊙ (dP − Σ_j p dP) · scale, zero above the diagonal.
        let mut v_t = scratch::take(d * t); // (D, T), written whole
        small_matmul::transpose(v, (t, d), &mut v_t);
        small_matmul::product((ds, t), t, g, Operand::rows(&v_t, t), |first| TileSpan {
            cols: seen_keys(first, 0, t),
            terms: 0..d,
        });
        scratch::give_back(v_t);
        for (i, (pi, dsi)) in p.chunks(t).zip(ds.chunks_mut(t)).enumerate() {
            let (seen, above) = dsi.split_at_mut(i + 1);
            above.fill(0.0);
            if let Some(mask) = mask {
                seen.iter_mut()
                    .zip(&mask[i * t..])
                    .for_each(|(s, m)| *s *= m);
            }
            let pi = &pi[..=i];
            let weighted = super::fast_math::dot(pi, seen);
            seen.iter_mut()
                .zip(pi)
                .for_each(|(s, &pij)| *s = pij * (*s - weighted) * scale);
        }
        let ds_rows = Operand::rows(ds, t);
        small_matmul::product((dq, d), t, ds_rows, k, |first| TileSpan {
            cols: d,
            terms: terms_seen(first, 0, t),
        }); // dQ = dS k
        lower_t_product(ds, q, (t, d), dk); // dK = dSᵀ q
    })
}

struct CausalAttention {
    scale: f32,
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
        let mut out = vec![0f32; q.len()];
        let mut weights = vec![0f32; q.len() / d * t_k];
        out.par_chunks_mut(t_q * d)
            .zip(weights.par_chunks_mut(t_q * t_k))
            .enumerate()
            .for_each(|(bh, (o, p))| {
                let q = &q[bh * t_q * d..(bh + 1) * t_q * d];
                let qkv = (
                    Operand::rows(q, d),
                    Operand::rows(&k[bh * t_k * d..(bh + 1) * t_k * d], d),
                    Operand::rows(&v[bh * t_k * d..(bh + 1) * t_k * d], d),
                );
                head_forward(qkv, (t_q, t_k, d), (self.scale, None), None, p, o);
            });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

/// Causal attention straight from the fused projection's output: the heads are read from qkv
/// (B, T, 3C) in place and written to y (B, T, C) side by side, so that neither the split into
/// heads nor the merge back (nor their gradients) are copies through candle's graph.
struct QkvAttention {
    n_head: usize,
    scale: f32,
}

/// How the heads of one layer attend.
pub struct Heads<'a> {
    pub n_head: usize,
    /// The scores' scale, 1/√head_dim.
    pub scale: f32,
    /// ALiBi's slopes, one per head, if the scores are biased.
    pub slopes: Option<&'a [f32]>,
    /// Dropout's masks on the attention weights (B × H × T × T: 0 or 1/(1 − p)), if any.
    pub masks: Option<&'a [f32]>,
}

/// Causal attention of every head in qkv (B × T × 3C, sequences of T rows): the heads' outputs
/// side by side (B × T × C) and the attention weights before dropout (B × H × T × T) for
/// [`qkv_backward`].
pub fn qkv_forward(qkv: &[f32], (t, c): (usize, usize), heads: &Heads) -> (Vec<f32>, Vec<f32>) {
    let (c3, n_head) = (3 * c, heads.n_head);
    let (b, d) = (qkv.len() / (t * c3), c / n_head);
    // Both written whole: every head's columns of `out`, every row of `weights`.
    let (mut out, mut weights) = (scratch::take(b * t * c), scratch::take(b * n_head * t * t));
    out.par_chunks_mut(t * c)
        .zip(weights.par_chunks_mut(n_head * t * t))
        .zip(qkv.par_chunks(t * c3))
        .enumerate()
        .for_each(|(row, ((out, p), qkv))| {
            // The sequence's heads side by side too, where there are more threads than sequences.
            let qkv = split_heads(qkv, t, d); // (3H, T, D): the q heads, the k heads, the v heads
            let mut o = scratch::take(t * c); // (H, T, D), written whole
            p.par_chunks_mut(t * t)
                .zip(o.par_chunks_mut(t * d))
                .enumerate()
                .for_each(|(head, (p, o))| {
                    let [q, k, v] = head_qkv(&qkv, head, n_head, (t, d));
                    let slope = heads.slopes.map(|s| s[head]);
                    let mask = heads.mask(row * n_head + head, t);
                    head_forward((q, k, v), (t, t, d), (heads.scale, slope), mask, p, o);
                });
            merge_heads(&o, (t, d), out);
            [qkv, o].into_iter().for_each(scratch::give_back);
        });
    (out, weights)
}

/// The gradient of qkv (B × T × 3C) from the output's gradient g (B × T × C) and the weights p
/// of [`qkv_forward`].
pub fn qkv_backward(
    qkv: &[f32],
    g: &[f32],
    p: &[f32],
    (t, c): (usize, usize),
    heads: &Heads,
) -> Vec<f32> {
    let (c3, n_head) = (3 * c, heads.n_head);
    let d = c / n_head;
    let mut dqkv = scratch::take(qkv.len()); // written whole, head by head
    dqkv.par_chunks_mut(t * c3)
        .zip(qkv.par_chunks(t * c3))
        .zip(g.par_chunks(t * c))
        .zip(p.par_chunks(n_head * t * t))
        .enumerate()
        .for_each(|(row, (((dqkv, qkv), g), p))| {
            // (3H, T, D) and (H, T, D).
            let (qkv, g) = (split_heads(qkv, t, d), split_heads(g, t, d));
            // Written whole: dq, dk, dv of every head (3H, T, D) as qkv.
            let mut grads = scratch::take(t * c3);
            let (dq, rest) = grads.split_at_mut(t * c);
            let (dk, dv) = rest.split_at_mut(t * c);
            // The heads side by side too, where there are more threads than sequences.
            p.par_chunks(t * t)
                .zip(dq.par_chunks_mut(t * d))
                .zip(dk.par_chunks_mut(t * d))
                .zip(dv.par_chunks_mut(t * d))
                .enumerate()
                .for_each(|(head, (((p, dq), dk), dv))| {
                    let [q, k, v] = head_qkv(&qkv, head, n_head, (t, d));
                    let g = head_block(&g, head, (t, d));
                    let mask = heads.mask(row * n_head + head, t);
                    let mut ds = scratch::take(t * t); // dS (T, T), written whole
                    let grads = (dq, dk, dv);
                    head_backward((q, k, v, g), (t, d), (heads.scale, mask), p, &mut ds, grads);
                    scratch::give_back(ds);
                });
            merge_heads(&grads, (t, d), dqkv);
            [qkv, g, grads].into_iter().for_each(scratch::give_back);
        });
    dqkv
}

impl Heads<'_> {
    /// The dropout mask (T × T) of (batch row, head) number `bh`, if any.
    fn mask(&self, bh: usize, t: usize) -> Option<&[f32]> {
        self.masks.map(|m| &m[bh * t * t..(bh + 1) * t * t])
    }
}

/// src (T × width) split into its width / d column blocks, head-major: (width / d, T, d), so
/// that each head's rows are one contiguous run (in place, a head's rows stand 3C apart, a
/// stride that maps them onto a few cache sets, evicting each other). One pass in row order.
fn split_heads(src: &[f32], t: usize, d: usize) -> Vec<f32> {
    let blocks = src.len() / (t * d);
    let mut out = scratch::take(src.len()); // written whole
    for (i, row) in src.chunks_exact(blocks * d).enumerate() {
        for (block, values) in row.chunks_exact(d).enumerate() {
            copy(
                values,
                &mut out[(block * t + i) * d..(block * t + i + 1) * d],
            );
        }
    }
    out
}

/// Block `block` (T × d) of a [`split_heads`] buffer.
fn head_block(heads: &[f32], block: usize, (t, d): (usize, usize)) -> Operand<'_> {
    Operand::rows(&heads[block * t * d..(block + 1) * t * d], d)
}

/// Head `head`'s q, k and v (each T × d) in a [`split_heads`] buffer of qkv (3H, T, d).
fn head_qkv(qkv: &[f32], head: usize, n_head: usize, td: (usize, usize)) -> [Operand<'_>; 3] {
    [0, n_head, 2 * n_head].map(|part| head_block(qkv, part + head, td))
}

/// The inverse of [`split_heads`]: the blocks (width / d, T, d) side by side into dst (T ×
/// width).
fn merge_heads(src: &[f32], (t, d): (usize, usize), dst: &mut [f32]) {
    let blocks = src.len() / (t * d);
    for (i, row) in dst.chunks_exact_mut(blocks * d).enumerate() {
        for (block, values) in row.chunks_exact_mut(d).enumerate() {
            copy(&src[(block * t + i) * d..(block * t + i + 1) * d], values);
        }
    }
}

/// dst = src, eight values at a time: inline vector moves, where copy_from_slice calls memmove
/// (whose set-up costs more than a head's row of 32 values).
#[inline(always)]
fn copy(src: &[f32], dst: &mut [f32]) {
    let (mut to, mut from) = (dst.chunks_exact_mut(8), src.chunks_exact(8));
    for (to, from) in (&mut to).zip(&mut from) {
        let from: &[f32; 8] = from.try_into().expect("8 values");
        *<&mut [f32; 8]>::try_from(to).expect("8 values") = *from;
    }
    to.into_remainder()
        .iter_mut()
        .zip(from.remainder())
        .for_each(|(t, f)| *t = *f);
}

impl QkvAttention {
    /// Plain causal attention: no score bias, no dropout.
    fn heads(&self) -> Heads<'static> {
        Heads {
            n_head: self.n_head,
            scale: self.scale,
            slopes: None,
            masks: None,
        }
    }
}

impl CustomOp1 for QkvAttention {
    fn name(&self) -> &'static str {
        "fused-qkv-attention"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let qkv = contiguous(storage, layout, self.name())?;
        let (b, t, c3) = layout.shape().dims3()?;
        let (out, _weights) = qkv_forward(qkv, (t, c3 / 3), &self.heads());
        Ok((CpuStorage::F32(out), Shape::from((b, t, c3 / 3))))
    }
}

/// softmax(q kᵀ · scale + causal mask) v per head, for the fused projection's output qkv
/// (B, T, 3C) = [q | k | v], each C = n_head × D wide: the heads' outputs side by side, (B, T, C).
pub fn causal_attention_qkv(qkv: &Tensor, n_head: usize, scale: f64) -> Result<Tensor> {
    let c3 = qkv.dim(2)?;
    if c3 % (3 * n_head) != 0 {
        bail!("qkv attention: the last dimension {c3} is not 3 × n_head × head_dim")
    }
    let op = QkvAttention {
        n_head,
        scale: scale as f32,
    };
    qkv.contiguous()?.apply_op1(op)
}

/// softmax(q kᵀ · scale + causal mask) v for q (B, H, Tq, D) and k, v (B, H, Tk, D), Tq ≤ Tk,
/// the queries being the last Tq positions.
pub fn causal_attention(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64) -> Result<Tensor> {
    let (b, h, t_q, d) = q.dims4()?;
    let t_k = k.dim(2)?;
    if k.dims() != [b, h, t_k, d] || v.dims() != k.dims() || t_q > t_k {
        bail!(
            "causal attention: q {:?}, k {:?} and v {:?} must be (B, H, Tq, D), (B, H, Tk, D) and the same, Tq ≤ Tk",
            q.dims(),
            k.dims(),
            v.dims()
        )
    }
    let op = CausalAttention {
        scale: scale as f32,
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

/// The composite reference of [`causal_attention_qkv`]: split into heads, attend, merge.
pub fn causal_attention_qkv_reference(qkv: &Tensor, n_head: usize, scale: f64) -> Result<Tensor> {
    let (b, t, c3) = qkv.dims3()?;
    let c = c3 / 3;
    let head = |i: usize| -> Result<Tensor> {
        qkv.narrow(2, i * c, c)?
            .reshape((b, t, n_head, c / n_head))?
            .transpose(1, 2)?
            .contiguous() // (B, H, T, D)
    };
    let y = causal_attention_reference(&head(0)?, &head(1)?, &head(2)?, scale)?; // (B, H, T, D)
    y.transpose(1, 2)?.reshape((b, t, c)) // (B, T, C)
}
