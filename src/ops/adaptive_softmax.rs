//! The adaptive softmax (Grave et al. 2017) of two clusters over the output layer: the head is the
//! first K ids of the vocabulary (the most frequent, in a vocabulary numbered by count) and one
//! more vector, the tail's; the tail's own softmax over the other ids is needed only at the rows
//! whose target is one of them. The distribution it defines over all V ids:
//!
//!   p(c) = p_head(c)                for c < K,
//!   p(c) = p_head(tail) · p_tail(c) for c ≥ K,
//!
//! with p_head the softmax of [x·W[..K]ᵀ, x·t] and p_tail that of x·W[K..]ᵀ. The next-token
//! biases B act on that distribution as on logits, log p + B renormalised over all V ids, so that
//! a bias raises its ids against all the others, as with the full softmax.
//!
//! The engine's kernel: the rows without biases take the output layer's fused pass
//! ([`super::lm_head_loss`]) twice, on the head's K + 1 rows of weights for every row and on the
//! tail's V − K for the rows whose target is there; the rows with biases (a few: the rhyme
//! positions) take all V logits and the gradient of the biased distribution, written out below.
//! The composite reference builds the log-probabilities of all V ids from the full logits
//! ([`log_probs_reference`]).

use super::lm_head_loss::summed_loss_and_gradients;
use super::matmul_f32::{matmul_on, Operand};
use super::{fast_math, isa, lm_head_loss::LogitBias, scratch, Precision};
use candle_core::{Result, Tensor, D};
use rayon::prelude::*;

/// The adaptive output layer's gradients: of x (N × C), of W (V × C) and of the tail vector (C).
pub type AdaptiveGrads = (Vec<f32>, Vec<f32>, Vec<f32>);

/// The output layer's weights: W (V × C), the tail vector t (C) and the head's size K.
#[derive(Clone, Copy)]
pub struct Head<'a> {
    pub w: &'a [f32],
    pub tail: &'a [f32],
    pub k: usize,
}

impl Head<'_> {
    fn c(&self) -> usize {
        self.tail.len()
    }

    fn v(&self) -> usize {
        self.w.len() / self.c()
    }
}

/// A part of the rows: their x (M × C) and targets (M), and where they stand among all N.
struct Rows {
    index: Vec<usize>,
    x: Vec<f32>,
    targets: Vec<u32>,
}

impl Rows {
    /// The rows `index` of x (N × C) and `targets` (N).
    fn gather(index: Vec<usize>, x: &[f32], targets: &[u32], c: usize) -> Self {
        let x = index.iter().flat_map(|&i| &x[i * c..(i + 1) * c]).copied();
        let targets = index.iter().map(|&i| targets[i]).collect();
        Rows {
            x: x.collect(),
            targets,
            index,
        }
    }
}

/// The mean loss of x (N × C) under the adaptive softmax of `head` (0 < K < V) with the next-token
/// `bias`, against `targets` (N); with `with_grad`, the gradients (x, W, tail) and the biases'
/// (empty without biases).
pub fn loss_and_gradients(
    (x, head, bias): (&[f32], Head, Option<&LogitBias>),
    targets: &[u32],
    c: usize,
    with_grad: bool,
    precision: Precision,
) -> (f64, Option<AdaptiveGrads>, Vec<f32>) {
    let n = x.len() / c;
    assert!(
        0 < head.k && head.k < head.v(),
        "an adaptive head of {} of {} ids",
        head.k,
        head.v()
    );
    let weighting = (precision, 1.0 / n as f32);
    let zero_bias_grad = || match (bias, with_grad) {
        (Some(b), true) => vec![0f32; b.weight.len()],
        _ => Vec::new(),
    };
    let with_bias = |i: &usize| bias.is_some_and(|b| !b.entries[*i].is_empty());
    let (biased, plain): (Vec<usize>, Vec<usize>) = (0..n).partition(with_bias);
    let Some(bias) = bias.filter(|_| !biased.is_empty()) else {
        let (loss, grads) = two_level(x, targets, head, with_grad, weighting);
        return (loss / n as f64, grads, zero_bias_grad());
    };
    let plain = Rows::gather(plain, x, targets, c);
    let (plain_loss, mut grads) = two_level(&plain.x, &plain.targets, head, with_grad, weighting);
    let biased = Rows::gather(biased, x, targets, c);
    let d_params = grads.as_mut().map(|(_, dw, dt)| (&mut dw[..], &mut dt[..]));
    let (biased_loss, d_bias, biased_dx) = all_ids(&biased, bias, head, d_params, weighting.1);
    let grads = grads.map(|(plain_dx, dw, dt)| {
        let mut dx = scratch::take(n * c); // (N, C), every row written below
        let parts = [(&plain, plain_dx), (&biased, biased_dx)];
        for (rows, part) in parts {
            for (&i, d) in rows.index.iter().zip(part.chunks(c)) {
                dx[i * c..(i + 1) * c].copy_from_slice(d);
            }
            scratch::give_back(part);
        }
        (dx, dw, dt)
    });
    (
        (plain_loss + biased_loss) / n as f64,
        grads,
        if with_grad { d_bias } else { Vec::new() },
    )
}

/// The summed loss of rows x (M × C) without biases against `targets` (M), each weighted in the
/// gradients by the weight `weighting` gives (1/N), its matmuls in its precision: the head's pass
/// over every row, the tail's over those whose target is in the tail.
fn two_level(
    x: &[f32],
    targets: &[u32],
    head: Head,
    with_grad: bool,
    weighting: (Precision, f32),
) -> (f64, Option<AdaptiveGrads>) {
    let (c, k) = (head.c(), head.k);
    let mut head_w = head.w[..k * c].to_vec(); // (K + 1, C)
    head_w.extend_from_slice(head.tail);
    let head_targets: Vec<u32> = targets.iter().map(|&t| t.min(k as u32)).collect(); // (M)
    let inputs = (x, &head_w[..], None);
    let (head_loss, head_grads, _) =
        summed_loss_and_gradients(inputs, &head_targets, c, with_grad, weighting);
    let in_tail = (0..targets.len())
        .filter(|&i| targets[i] as usize >= k)
        .collect();
    let mut tail = Rows::gather(in_tail, x, targets, c); // (M', C)
    tail.targets.iter_mut().for_each(|t| *t -= k as u32);
    let inputs = (&tail.x[..], &head.w[k * c..], None);
    let (tail_loss, tail_grads, _) =
        summed_loss_and_gradients(inputs, &tail.targets, c, with_grad, weighting);
    let grads = head_grads
        .zip(tail_grads)
        .map(|((mut dx, d_head), (d_tail_x, d_rest))| {
            for (&i, d) in tail.index.iter().zip(d_tail_x.chunks(c)) {
                let row = &mut dx[i * c..(i + 1) * c];
                row.iter_mut().zip(d).for_each(|(a, b)| *a += b);
            }
            let mut d_w = d_head; // (K + 1, C), then (V, C)
            let d_tail = d_w.split_off(k * c);
            d_w.extend_from_slice(&d_rest); // zeros where no target is in the tail
            (dx, d_w, d_tail)
        });
    (head_loss + tail_loss, grads)
}

/// The summed loss of the `rows` with biases, each weighted by `inv_n` in the gradients: all V
/// logits z and the tail logit s of each, u = log p(z, s) + B, the loss log Σ e^u − u_y (see
/// [`biased_row`] for the gradients). With `d_params`, the gradients of W (V × C) and of the
/// tail vector (C) are added to them and those of the biases and of the rows' x (M × C)
/// returned. Its matmuls run in f32 whatever the run's precision (a few rows). The rows run on
/// the thread pool; the biases' gradient is summed in their order.
fn all_ids(
    rows: &Rows,
    bias: &LogitBias,
    head: Head,
    d_params: Option<(&mut [f32], &mut [f32])>,
    inv_n: f32,
) -> (f64, Vec<f32>, Vec<f32>) {
    let (c, v, m) = (head.c(), head.v(), rows.targets.len());
    let threads = rayon::current_num_threads();
    let (x, w) = (Operand::rows(&rows.x, c), Operand::rows(head.w, c));
    let mut z = scratch::take(m * v); // (M, V), written whole
    matmul_on(&mut z, m, v, c, x, w.t(), false, threads);
    let mut ds = vec![0f32; m]; // (M)
    let with_grad = d_params.is_some();
    let results: Vec<(f32, Vec<(usize, f32)>)> = z
        .par_chunks_mut(v)
        .zip(ds.par_iter_mut())
        .enumerate()
        .map(|(i, (row, ds))| {
            let x_i = &rows.x[i * c..(i + 1) * c];
            let s = fast_math::dot(x_i, head.tail);
            let entries = (&bias.entries[rows.index[i]][..], bias.weight);
            let out = (with_grad.then_some(ds), inv_n);
            isa::widest(|| biased_row((row, s, rows.targets[i]), entries, head.k, out))
        })
        .collect();
    let mut d_bias = vec![0f32; bias.weight.len()];
    let mut total = 0f64;
    for (loss, d) in results {
        total += f64::from(loss);
        d.into_iter().for_each(|(b, d)| d_bias[b] += d);
    }
    let Some((dw, dt)) = d_params else {
        scratch::give_back(z);
        return (total, d_bias, Vec::new());
    };
    let dz = Operand::rows(&z, v);
    let mut dx = scratch::take(m * c); // dz · W + ds ⊗ t, written whole
    matmul_on(&mut dx, m, c, v, dz, w, false, threads);
    matmul_on(dw, v, c, m, dz.t(), x, true, threads); // += dzᵀ · x
    for ((d, x_i), &s) in dx.chunks_mut(c).zip(rows.x.chunks(c)).zip(&ds) {
        d.iter_mut().zip(head.tail).for_each(|(d, t)| *d += s * t);
        dt.iter_mut().zip(x_i).for_each(|(d, x)| *d += s * x); // += Σ ds x
    }
    scratch::give_back(z);
    (total, d_bias, dx)
}

/// One row with biases: its logits z (V, overwritten), tail logit s and target y; its biases'
/// `entries` (token, index into `weights`); the head's size K. Returns its loss and, where `ds`
/// is given, the gradients of its biases (index, value), writes d/ds into `ds` and d/dz over z,
/// each weighted by `inv_n`. With q = softmax(u), p_tail the tail's softmax and [·] the target's
/// indicator:
///   d/dz_c = q_c − [y = c] (c < K),  d/ds = q(tail) − [y ≥ K],
///   d/dz_c = q_c − [y = c] + p_tail(c) · ([y ≥ K] − q(tail)) (c ≥ K),  d/dB_c = q_c − [y = c].
#[inline(always)]
fn biased_row(
    (row, s, y): (&mut [f32], f32, u32),
    (entries, weights): (&[(u32, usize)], &[f32]),
    k: usize,
    (ds, inv_n): (Option<&mut f32>, f32),
) -> (f32, Vec<(usize, f32)>) {
    let log_tail = log_probs(row, s, k); // log p (V), log p_head(tail)
    let mut p_tail = row[k..].to_vec(); // (V − K)
    fast_math::exp_in_place(&mut p_tail, log_tail); // p_tail(c) = p(c) / p_head(tail)
    for &(token, b) in entries {
        row[token as usize] += weights[b]; // u
    }
    let max = fast_math::max(row);
    let (y, target) = (y as usize, row[y as usize]);
    let sum = fast_math::exp_in_place(row, max); // e^(u − max)
    let loss = max + fast_math::ln(sum) - target;
    let Some(ds) = ds else {
        return (loss, Vec::new());
    };
    let scale = 1.0 / sum;
    row.iter_mut().for_each(|e| *e *= scale); // q
    let d_bias = entries
        .iter()
        .map(|&(token, b)| {
            (
                b,
                inv_n * (row[token as usize] - f32::from(token as usize == y)),
            )
        })
        .collect();
    let q_tail: f32 = row[k..].iter().sum();
    let y_in_tail = f32::from(y >= k);
    let spill = y_in_tail - q_tail;
    row[k..]
        .iter_mut()
        .zip(&p_tail)
        .for_each(|(q, p)| *q += p * spill);
    row[y] -= 1.0;
    row.iter_mut().for_each(|d| *d *= inv_n); // dz
    *ds = inv_n * (q_tail - y_in_tail);
    (loss, d_bias)
}

/// Turns one row of logits (V, without the biases) into the log-probabilities of the adaptive
/// softmax's distribution, given the tail vector's logit (what the decoder adds the biases to);
/// returns the head's log-probability of the tail.
pub fn log_probs(row: &mut [f32], tail_logit: f32, k: usize) -> f32 {
    let (head, rest) = row.split_at_mut(k);
    let max = fast_math::max(head).max(tail_logit);
    let sum = fast_math::sum_exp(head, max) + (tail_logit - max).exp();
    let log_sum = max + fast_math::ln(sum);
    head.iter_mut().for_each(|l| *l -= log_sum);
    let log_tail = tail_logit - log_sum;
    let rest_max = fast_math::max(rest);
    let rest_log_sum = rest_max + fast_math::ln(fast_math::sum_exp(rest, rest_max));
    rest.iter_mut().for_each(|l| *l += log_tail - rest_log_sum);
    log_tail
}

/// The composite reference: the log-probabilities (…, V) of the adaptive softmax from the full
/// logits (…, V, without the biases) and the tail vector's logits (…, 1), in candle's ops (to
/// differentiate).
pub fn log_probs_reference(logits: &Tensor, tail_logits: &Tensor, k: usize) -> Result<Tensor> {
    let v = logits.dim(D::Minus1)?;
    let head = Tensor::cat(&[&logits.narrow(D::Minus1, 0, k)?, tail_logits], D::Minus1)?;
    let head = candle_nn::ops::log_softmax(&head, D::Minus1)?; // (…, K + 1)
    let log_tail = head.narrow(D::Minus1, k, 1)?; // (…, 1)
    let rest = candle_nn::ops::log_softmax(&logits.narrow(D::Minus1, k, v - k)?, D::Minus1)?;
    Tensor::cat(
        &[
            &head.narrow(D::Minus1, 0, k)?,
            &rest.broadcast_add(&log_tail)?,
        ],
        D::Minus1,
    ) // (…, V)
}
