//! The output layer and the loss in one pass: logits = x Wᵀ, cross-entropy against the targets,
//! and (when training) the gradients of x and W, computed chunk by chunk of rows so that the
//! (B·T) × vocab logits are never materialised (the fused linear cross-entropy of Liger-Kernel).
//! The engine's kernel, and the fused op of the candle graph (the loss alone).

use super::matmul_f32::{matmul_on, Operand};
use super::{bf16, contiguous, fast_math, isa, scratch, Precision};
use candle_core::{bail, CpuStorage, CustomOp2, Layout, Result, Shape, Tensor};
use rayon::prelude::*;
use std::ops::Range;

/// Rows of logits computed at once per thread: 256 × a 6,000-character vocabulary is 6 MB, so that
/// one chunk per thread fits in the shared L3 cache with room to spare (training runs a unit of
/// 256 positions per thread at a time). Course model, 2 shards, nine alternating runs: 256 rows
/// 7,420 tokens/s (median), 512 rows 7,020 and more often slow; 128 rows 7,020. Alternating per
/// step inside one process (15 rounds), 256, 384 and 512 rows came within 1 % (7,285 / 7,319 /
/// 7,356) and 128 was slower (6,945).
const CHUNK_ROWS: usize = 256;

/// Rows per chunk with bf16 products on the AMX tiles: fewer, so that the logits (f32) and their
/// two packed bf16 copies stay in the core's L2 cache; dW's product runs for each chunk.
const AMX_CHUNK_ROWS: usize = 64;

/// Rows per chunk and per group of chunks with AVX512-BF16's products (or without bf16
/// instructions): chunks small enough for their logits to stay in the core's L2 cache, while dW's
/// product, whose result (3 MB for the course model) is read and written whole each time, runs once
/// per group on the exponentials of all its chunks. Course model on an AMD EPYC Zen 4 (four
/// alternating rounds of `bench --only course --dtype bf16`): 20,160 tokens/s (median) against
/// 19,290 with chunks of 256 and dW for each; chunks of 32 gave 19,520, groups of 512 the same as
/// 256. The output layer alone (`bench --ops`): 68–86 ms against 81–94.
const BF16_CHUNK_ROWS: usize = 64;
const BF16_GROUP_ROWS: usize = CHUNK_ROWS;

/// A share's dW as its products sum it: the first product writes the buffer (taken from
/// `ops::scratch`, its old values unread), the later ones add to it.
struct DwSum {
    values: Vec<f32>,
    written: bool,
}

impl DwSum {
    fn new(len: usize) -> Self {
        DwSum {
            values: scratch::take(len),
            written: false,
        }
    }

    /// Whether a product wrote it already (so that the next one adds); marks it written.
    fn written(&mut self) -> bool {
        std::mem::replace(&mut self.written, true)
    }

    /// The sum (zeros if no product wrote it).
    fn into_values(mut self) -> Vec<f32> {
        if !self.written {
            self.values.fill(0.0);
        }
        self.values
    }
}

/// How a share's rows are cut: chunks of rows whose logits exist at once, and groups of chunks
/// whose dW product runs at once.
struct Chunking {
    chunk: usize,
    group: usize,
}

impl Chunking {
    fn of(precision: Precision) -> Self {
        let (chunk, group) = match (precision, bf16::Hardware::detect()) {
            (Precision::F32, _) => (CHUNK_ROWS, CHUNK_ROWS),
            (Precision::Bf16, Some(bf16::Hardware::Amx)) => (AMX_CHUNK_ROWS, AMX_CHUNK_ROWS),
            (Precision::Bf16, _) => (BF16_CHUNK_ROWS, BF16_GROUP_ROWS),
        };
        Chunking { chunk, group }
    }
}

/// `rows` cut into consecutive ranges of `len` (the last one shorter).
fn cut(rows: Range<usize>, len: usize) -> impl Iterator<Item = Range<usize>> {
    rows.clone()
        .step_by(len)
        .map(move |start| start..rows.end.min(start + len))
}

/// The output layer's gradients (dx, dW), computed in the same pass as the loss.
pub type Grads = (Vec<f32>, Vec<f32>);

/// Learned biases added to some of the logits before the loss (`model::inputs`' next-token
/// biases): for each row of x, the (token, bias) pairs whose logit takes `weight[bias]`.
pub struct LogitBias<'a> {
    /// Per row of x (N): (token id, index into `weight`).
    pub entries: &'a [Vec<(u32, usize)>],
    /// The biases.
    pub weight: &'a [f32],
}

impl LogitBias<'_> {
    /// Adds the biases of `rows` (of x) to their logits (rows × V).
    fn add_to(&self, rows: Range<usize>, logits: &mut [f32]) {
        let v = logits.len() / rows.len().max(1);
        for (row, entries) in logits.chunks_mut(v).zip(&self.entries[rows]) {
            for &(token, bias) in entries {
                row[token as usize] += self.weight[bias];
            }
        }
    }

    /// Adds to `d_weight` the gradient of the biases of `rows` from their dlogits, scale · E
    /// (see [`cross_entropy_rows`]).
    fn gradient(&self, rows: Range<usize>, (exps, scales): (&[f32], &[f32]), d_weight: &mut [f32]) {
        let v = exps.len() / rows.len().max(1);
        for ((row, s), entries) in exps.chunks(v).zip(scales).zip(&self.entries[rows]) {
            for &(token, bias) in entries {
                d_weight[bias] += s * row[token as usize];
            }
        }
    }
}

/// The loss alone, for the candle graph (forward only: training runs on `crate::engine`).
struct LmHeadLoss {
    targets: Vec<u32>,
}

/// The output layer's three products for one chunk of rows, with the weight W (V × C) in the
/// chosen precision, on `threads` threads (their split of the output does not change a bit).
struct Products<'w> {
    weights: Weights<'w>,
    threads: usize,
}

/// W as the products read it: in bf16, rounded and packed once for all the chunks of a share.
enum Weights<'w> {
    F32(&'w [f32]),
    Bf16 { w_t: bf16::Rhs, w: bf16::Rhs },
}

impl<'w> Products<'w> {
    fn new(w: &'w [f32], c: usize, precision: Precision, threads: usize) -> Self {
        let v = w.len() / c;
        let weights = match precision {
            Precision::F32 => Weights::F32(w),
            Precision::Bf16 => Weights::Bf16 {
                w_t: bf16::Rhs::pack(Operand::rows(w, c).t(), c, v),
                w: bf16::Rhs::pack(Operand::rows(w, c), v, c),
            },
        };
        Products { weights, threads }
    }

    /// logits (rows × V) = x (rows × C) · Wᵀ.
    fn logits(&self, x: Operand, rows: usize, c: usize, logits: &mut [f32]) {
        let (v, threads) = (logits.len() / rows.max(1), self.threads);
        match &self.weights {
            Weights::F32(w) => matmul_on(
                logits,
                rows,
                v,
                c,
                x,
                Operand::rows(w, c).t(),
                false,
                threads,
            ),
            Weights::Bf16 { w_t, .. } => {
                bf16::product(logits, &bf16::Lhs::pack(x, rows, c), w_t, false, threads)
            }
        }
    }

    /// What a group's chunks leave for its dW product (see [`Products::group_backward`]).
    fn group(&self, rows: usize, v: usize) -> Group {
        match &self.weights {
            Weights::F32(_) => Group::F32,
            Weights::Bf16 { .. } => Group::Bf16(bf16::Rhs::stack(rows, v)),
        }
    }

    /// dx (rows × C) = dlogits (rows × V) · W, and in f32 dW += dlogitsᵀ (V × rows) · x (rows ×
    /// C) at once; in bf16, dlogits join the group's stack for [`Products::group_backward`].
    #[allow(clippy::too_many_arguments)]
    fn chunk_backward(
        &self,
        dlogits: &[f32],
        x: Operand,
        rows: usize,
        c: usize,
        dx: &mut [f32],
        dw: &mut DwSum,
        group: &mut Group,
    ) {
        let (v, threads) = (dlogits.len() / rows.max(1), self.threads);
        let dlogits = Operand::rows(dlogits, v);
        match (&self.weights, group) {
            (Weights::F32(w), _) => {
                matmul_on(dx, rows, c, v, dlogits, Operand::rows(w, c), false, threads);
                let accumulate = dw.written();
                matmul_on(
                    &mut dw.values,
                    v,
                    c,
                    rows,
                    dlogits.t(),
                    x,
                    accumulate,
                    threads,
                );
            }
            (Weights::Bf16 { w, .. }, Group::Bf16(stack)) => {
                let as_lhs = bf16::Lhs::pack(dlogits, rows, v);
                bf16::product(dx, &as_lhs, w, false, threads);
                stack.push(&as_lhs);
            }
            (Weights::Bf16 { .. }, Group::F32) => unreachable!("a bf16 group holds its stack"),
        }
    }

    /// The group's dW product in bf16 (in f32, each chunk added its own): `dw` holds dWᵀ (C × V)
    /// until [`Products::finish_dw`], and xᵀ · dlogits packs the small xᵀ (C × rows) transposed
    /// and the large dlogits as they lie, where dlogitsᵀ · x would transpose the large one.
    fn group_backward(&self, group: Group, x: Operand, rows: usize, c: usize, dw: &mut DwSum) {
        if let Group::Bf16(stack) = group {
            let x_t = bf16::Lhs::pack(x.t(), c, rows);
            let (accumulate, threads) = (dw.written(), self.threads);
            bf16::product(&mut dw.values, &x_t, &stack.finish(), accumulate, threads);
        }
    }

    /// dW (V × C) from what the backward products summed.
    fn finish_dw(&self, dw: Vec<f32>, c: usize) -> Vec<f32> {
        match &self.weights {
            Weights::F32(_) => dw,
            Weights::Bf16 { .. } if dw.is_empty() => dw,
            Weights::Bf16 { .. } => {
                // Turned in tiles of 16 × 16, so that the writes fill whole cache lines.
                const TILE: usize = 16;
                let v = dw.len() / c;
                let mut turned = vec![0f32; dw.len()];
                for j0 in (0..c).step_by(TILE) {
                    for i0 in (0..v).step_by(TILE) {
                        for j in j0..c.min(j0 + TILE) {
                            for i in i0..v.min(i0 + TILE) {
                                turned[i * c + j] = dw[j * v + i];
                            }
                        }
                    }
                }
                turned
            }
        }
    }
}

/// What a group's chunks leave for its dW product: nothing in f32, the chunks' dlogits stacked
/// into one right operand in bf16.
enum Group {
    F32,
    Bf16(bf16::Stack),
}

/// The cross-entropy of each row of `logits` (rows × V) against `targets`, into `losses`. With
/// `scales`, each row is overwritten by its exponentials e^(l − max), less their sum Σ at the
/// target, and `scales` gets `inv_n` / Σ for it: d loss / d logits is then scale · row, which
/// [`Share::run`] applies to the products' results instead of rescaling every logit. The one-hot
/// term is folded into the row before a bf16 product rounds it: kept apart in f32, it would cancel
/// against rounded values (for a confident row, p·round(W[target]) − W[target], whose rounding
/// error is 1/(1 − p) times the gradient's own rounding).
#[inline(always)]
pub(crate) fn cross_entropy_rows(
    logits: &mut [f32],
    targets: &[u32],
    inv_n: f32,
    scales: Option<&mut [f32]>,
    losses: &mut [f32],
) {
    let v = logits.len() / targets.len().max(1);
    let rows = logits.chunks_mut(v).zip(targets).zip(losses);
    match scales {
        Some(scales) => {
            for (((row, &t), loss), scale) in rows.zip(scales) {
                let (max, target) = (fast_math::max(row), row[t as usize]);
                let sum = fast_math::exp_in_place(row, max);
                row[t as usize] -= sum;
                *loss = max + fast_math::ln(sum) - target;
                *scale = inv_n / sum;
            }
        }
        None => {
            for ((row, &t), loss) in rows {
                let (max, target) = (fast_math::max(row), row[t as usize]);
                *loss = max + fast_math::ln(fast_math::sum_exp(row, max)) - target;
            }
        }
    }
}

/// Rows per task of [`cross_entropy`].
const CROSS_ENTROPY_ROWS: usize = 16;

/// The summed cross-entropy of the rows of `logits` (see [`cross_entropy_rows`]), blocks of rows
/// on the thread pool, the rows' losses summed in their order.
fn cross_entropy(
    logits: &mut [f32],
    targets: &[u32],
    inv_n: f32,
    scales: Option<&mut [f32]>,
) -> f64 {
    let v = (logits.len() / targets.len().max(1)).max(1);
    let mut losses = vec![0f32; targets.len()];
    let block = CROSS_ENTROPY_ROWS;
    let blocks = logits
        .par_chunks_mut(block * v)
        .zip(targets.par_chunks(block))
        .zip(losses.par_chunks_mut(block));
    match scales {
        Some(scales) => blocks
            .zip(scales.par_chunks_mut(block))
            .for_each(|(((l, t), out), s)| {
                isa::widest(|| cross_entropy_rows(l, t, inv_n, Some(s), out))
            }),
        None => blocks
            .for_each(|((l, t), out)| isa::widest(|| cross_entropy_rows(l, t, inv_n, None, out))),
    }
    losses
        .iter()
        .fold(0f64, |total, &loss| total + f64::from(loss))
}

/// What every group and chunk of one thread's share reads: x (N × C), W (V × C), the targets
/// (N), how its products run and how its rows are cut.
struct Share<'a> {
    x: &'a [f32],
    w: &'a [f32],
    targets: &'a [u32],
    c: usize,
    /// 1/N, the mean's weight of each row.
    inv_n: f32,
    with_grad: bool,
    products: Products<'a>,
    chunking: Chunking,
    bias: Option<&'a LogitBias<'a>>,
}

/// A share's working memory: one chunk's logits, one group's row scales and scaled x rows.
struct Buffers {
    logits: Vec<f32>,
    scales: Vec<f32>,
    x_scaled: Vec<f32>,
}

impl Share<'_> {
    /// The summed loss of `rows` of x on the calling thread, group by group of chunks (see
    /// [`Chunking`]). With gradients, also writes d loss/dx of those rows into `dx` and returns
    /// their contribution to dW and to the logits' biases (empty without gradients).
    ///
    /// The gradients come from the exponentials E (rows × V, less Σ at each target) and each
    /// row's scale s (see [`cross_entropy_rows`]): dlogits = diag(s)·E, so dx = diag(s)·(E·W) and
    /// dW = Eᵀ·(diag(s)·x) (in bf16, E, W and the scaled x are rounded).
    fn run(&self, rows: Range<usize>, dx: &mut [f32]) -> (f64, Vec<f32>, Vec<f32>) {
        let (c, v) = (self.c, self.w.len() / self.c);
        let mut dw = DwSum::new(if self.with_grad { v * c } else { 0 });
        let mut d_bias = match (self.with_grad, self.bias) {
            (true, Some(bias)) => vec![0f32; bias.weight.len()],
            _ => Vec::new(),
        };
        let mut buffers = Buffers {
            logits: scratch::take(self.chunking.chunk * v), // each chunk's rows written whole
            scales: vec![0f32; self.chunking.group],
            x_scaled: vec![0f32; self.chunking.group * c],
        };
        let mut total = 0f64;
        for group in cut(rows.clone(), self.chunking.group) {
            // Empty without gradients.
            let dx = dx
                .get_mut((group.start - rows.start) * c..)
                .unwrap_or_default();
            total += self.group_pass(group, &mut buffers, dx, (&mut dw, &mut d_bias));
        }
        scratch::give_back(buffers.logits);
        (total, self.products.finish_dw(dw.into_values(), c), d_bias)
    }

    /// The summed loss of the rows `group` of x, chunk by chunk; with gradients, their dx
    /// (written from the group's first row of `dx` on), their share of dW (summed into `dw` as
    /// [`Products`] holds it) and of the biases' gradient (summed into `d_bias`).
    fn group_pass(
        &self,
        group: Range<usize>,
        buffers: &mut Buffers,
        dx: &mut [f32],
        (dw, d_bias): (&mut DwSum, &mut [f32]),
    ) -> f64 {
        let (products, c, v) = (&self.products, self.c, self.w.len() / self.c);
        let mut pending = self.with_grad.then(|| products.group(group.len(), v));
        let mut total = 0f64;
        for chunk in cut(group.clone(), self.chunking.chunk) {
            let rows = chunk.len();
            let local = chunk.start - group.start;
            let logits = &mut buffers.logits[..rows * v];
            let x_rows = &self.x[chunk.start * c..chunk.end * c];
            products.logits(Operand::rows(x_rows, c), rows, c, logits); // x Wᵀ
            if let Some(bias) = self.bias {
                bias.add_to(chunk.clone(), logits); // + the biases
            }
            let targets = &self.targets[chunk.clone()];
            let scales = &mut buffers.scales[local..local + rows];
            let wanted = self.with_grad.then_some(&mut *scales);
            total += cross_entropy(logits, targets, self.inv_n, wanted);
            if let (true, Some(bias)) = (self.with_grad, self.bias) {
                bias.gradient(chunk, (logits, scales), d_bias);
            }
            if let Some(pending) = &mut pending {
                let dx = &mut dx[local * c..(local + rows) * c];
                let x_scaled = &mut buffers.x_scaled[local * c..(local + rows) * c];
                let chunk_in = (x_rows, &*logits, &*scales);
                self.chunk_gradients(chunk_in, x_scaled, (dx, dw), pending);
            }
        }
        if let Some(pending) = pending {
            let x_scaled = Operand::rows(&buffers.x_scaled, c);
            products.group_backward(pending, x_scaled, group.len(), c, dw); // += Eᵀ · (s x)
        }
        total
    }

    /// One chunk's dx (rows × C, written) and, in f32, its share of dW (see
    /// [`Share::group_pass`]) from its exponentials E and their scales s (see [`Share::run`]);
    /// writes its rows of s·x into `x_scaled`.
    fn chunk_gradients(
        &self,
        (x_rows, exps, scales): (&[f32], &[f32], &[f32]),
        x_scaled: &mut [f32],
        (dx, dw): (&mut [f32], &mut DwSum),
        group: &mut Group,
    ) {
        let c = self.c;
        for ((out, row), s) in x_scaled.chunks_mut(c).zip(x_rows.chunks(c)).zip(scales) {
            out.iter_mut().zip(row).for_each(|(o, x)| *o = x * s);
        }
        let (rows, x_scaled) = (scales.len(), Operand::rows(x_scaled, c));
        // E · W (, += Eᵀ · (s x))
        self.products
            .chunk_backward(exps, x_scaled, rows, c, dx, dw, group);
        for (d, s) in dx.chunks_mut(c).zip(scales) {
            d.iter_mut().for_each(|d| *d *= s);
        }
    }
}

/// The mean loss of x (N × C) · Wᵀ (W: V × C) against `targets` (N) and, with `with_grad`, its
/// gradients (dx, dW).
pub fn loss_and_gradients(
    x: &[f32],
    w: &[f32],
    targets: &[u32],
    c: usize,
    with_grad: bool,
    precision: Precision,
) -> (f64, Option<Grads>) {
    let (loss, grads, _) =
        biased_loss_and_gradients((x, w, None), targets, c, with_grad, precision);
    (loss, grads)
}

/// [`loss_and_gradients`] with `bias` added to the logits; with `with_grad`, also the biases'
/// gradient (empty without biases).
pub fn biased_loss_and_gradients(
    inputs: (&[f32], &[f32], Option<&LogitBias>),
    targets: &[u32],
    c: usize,
    with_grad: bool,
    precision: Precision,
) -> (f64, Option<Grads>, Vec<f32>) {
    let n = inputs.0.len() / c;
    let (total, grads, d_bias) =
        summed_loss_and_gradients(inputs, targets, c, with_grad, (precision, 1.0 / n as f32));
    (total / n as f64, grads, d_bias)
}

/// [`biased_loss_and_gradients`] with each row's loss weighted by `inv_n` in the gradients (a
/// part of a larger mean: the adaptive softmax's), its loss the rows' unweighted sum.
pub(crate) fn summed_loss_and_gradients(
    (x, w, bias): (&[f32], &[f32], Option<&LogitBias>),
    targets: &[u32],
    c: usize,
    with_grad: bool,
    (precision, inv_n): (Precision, f32),
) -> (f64, Option<Grads>, Vec<f32>) {
    let (n, v) = (x.len() / c, w.len() / c);
    let mut dx = if with_grad {
        scratch::take(n * c) // written whole, chunk by chunk
    } else {
        Vec::new()
    };
    // Each chunk of rows is a share with its own dW, the shares summed in order afterwards: one
    // gemm per thread beats all threads on each small chunk, and neither the shares nor the order
    // of the sums (hence the result) follow the threads or their scheduling.
    let share_rows = CHUNK_ROWS;
    let shares = n.div_ceil(share_rows).max(1);
    let threads = (rayon::current_num_threads() / shares).max(1); // for each share's products
    let ranges: Vec<_> = (0..n)
        .step_by(share_rows)
        .map(|start| start..n.min(start + share_rows))
        .collect();
    let mut dx_shares: Vec<&mut [f32]> = dx.chunks_mut(share_rows * c).collect();
    dx_shares.resize_with(ranges.len(), Default::default); // empty without gradients
    let results: Vec<(f64, Vec<f32>, Vec<f32>)> = ranges
        .into_par_iter()
        .zip(dx_shares)
        .map(|(rows, dx)| {
            let share = Share {
                x,
                w,
                targets,
                c,
                inv_n,
                with_grad,
                products: Products::new(w, c, precision, threads),
                chunking: Chunking::of(precision),
                bias,
            };
            share.run(rows, dx)
        })
        .collect();
    let total: f64 = results.iter().map(|(loss, _, _)| loss).sum();
    let (dws, d_biases): (Vec<_>, Vec<_>) = results.into_iter().map(|(_, dw, db)| (dw, db)).unzip();
    let d_bias = sum_in_order(d_biases, bias.map_or(0, |b| b.weight.len()));
    let grads = with_grad.then(|| (dx, sum_in_order(dws, v * c)));
    (total, grads, d_bias)
}

/// The sum of the shares' `parts` in their order (`len` zeros for none).
fn sum_in_order(parts: Vec<Vec<f32>>, len: usize) -> Vec<f32> {
    let mut parts = parts.into_iter();
    let mut sum = parts.next().unwrap_or_else(|| vec![0f32; len]);
    for part in parts {
        sum.iter_mut().zip(&part).for_each(|(s, p)| *s += p);
    }
    sum
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
        let c = l2.dims()[1];
        let (loss, _) = loss_and_gradients(x, w, &self.targets, c, false, Precision::F32);
        Ok((CpuStorage::F32(vec![loss as f32]), Shape::from(())))
    }
}

/// Mean cross-entropy of `x` (N, C) · `w`ᵀ (w: (V, C)) against `targets` (N,).
pub fn lm_head_cross_entropy(x: &Tensor, w: &Tensor, targets: &Tensor) -> Result<Tensor> {
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
    x.contiguous()?
        .apply_op2(&w.contiguous()?, LmHeadLoss { targets })
}

/// The composite reference: the Linear layer, then candle-nn's cross-entropy.
pub fn lm_head_cross_entropy_reference(x: &Tensor, w: &Tensor, targets: &Tensor) -> Result<Tensor> {
    candle_nn::loss::cross_entropy(&x.matmul(&w.t()?)?, targets)
}
