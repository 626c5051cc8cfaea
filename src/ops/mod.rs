//! Fused CPU kernels with hand-written backward passes, each beside its composite reference.
//!
//! candle's own fast softmax and LayerNorm have no backward pass, and the composites built from
//! tensor ops are slow on the CPU. Each op here runs as a candle `CustomOp` on the CPU (rows spread
//! over threads with rayon) and falls back to its composite reference on other devices.

pub mod attention;
pub mod fast_math;
pub mod gelu;
pub mod layer_norm;
pub mod linear;
pub mod lm_head_loss;
pub(crate) mod matvec;
pub mod softmax;

use candle_core::{bail, CpuStorage, DType, Layout, Result, Tensor};
use fast_math::DOT_GROUP;
use gemm::{gemm, Parallelism};
use rayon::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether CPU tensors go through the fused kernels (on by default).
static FUSED: AtomicBool = AtomicBool::new(true);

/// Turns the fused kernels off (or on again) for the whole process: every op then takes its
/// composite reference, the path other devices take. For comparisons and tests of that path.
pub fn set_fused(enabled: bool) {
    FUSED.store(enabled, Ordering::Relaxed);
}

/// Whether an op on `t` runs its fused kernel: f32 on the CPU, unless turned off by [`set_fused`].
pub(crate) fn fused_for(t: &Tensor) -> bool {
    FUSED.load(Ordering::Relaxed) && t.device().is_cpu() && t.dtype() == DType::F32
}

/// Rows per rayon task: enough work to amortise the scheduling.
pub(crate) const ROWS_PER_TASK: usize = 64;

/// The f32 values of a contiguous CPU tensor.
pub(crate) fn contiguous<'a>(
    storage: &'a CpuStorage,
    layout: &Layout,
    op: &str,
) -> Result<&'a [f32]> {
    let data = storage.as_slice::<f32>()?;
    match layout.contiguous_offsets() {
        Some((start, end)) => Ok(&data[start..end]),
        None => bail!("{op} needs a contiguous f32 input"),
    }
}

/// A (rows, cols) operand: its values with the strides of a row and of a column.
#[derive(Clone, Copy)]
pub(crate) struct Operand<'a> {
    /// The values.
    pub data: &'a [f32],
    /// Distance between consecutive rows.
    pub row_stride: usize,
    /// Distance between consecutive columns.
    pub col_stride: usize,
}

impl<'a> Operand<'a> {
    /// A row-major matrix with `cols` columns.
    pub(crate) fn rows(data: &'a [f32], cols: usize) -> Self {
        Operand {
            data,
            row_stride: cols,
            col_stride: 1,
        }
    }

    /// The transposed operand (the same values, strides swapped).
    pub(crate) fn t(self) -> Self {
        Operand {
            row_stride: self.col_stride,
            col_stride: self.row_stride,
            ..self
        }
    }
}

/// At most this many lhs rows go through dot products instead of gemm, whose packing of the
/// whole rhs costs more than the product itself (one token at a time while generating).
const DOT_ROWS: usize = 4;

/// Output columns per rayon task in the dot-product path.
const COLS_PER_TASK: usize = 256;

/// Below this many multiply-adds per row, the dot-product path stays on one thread: waking the
/// others costs more.
const PARALLEL_MACS: usize = 1 << 12;

/// dst (m × n, row-major) = (dst if `accumulate`) + lhs (m × k) · rhs (k × n), on all threads.
pub(crate) fn matmul_into(
    dst: &mut [f32],
    m: usize,
    n: usize,
    k: usize,
    lhs: Operand,
    rhs: Operand,
    accumulate: bool,
) {
    let threads = rayon::current_num_threads();
    matmul_on(dst, m, n, k, lhs, rhs, accumulate, threads)
}

/// [`matmul_into`] on at most `threads` threads (1: the calling thread only).
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul_on(
    dst: &mut [f32],
    m: usize,
    n: usize,
    k: usize,
    lhs: Operand,
    rhs: Operand,
    accumulate: bool,
    threads: usize,
) {
    let parallelism = if threads > 1 {
        Parallelism::Rayon(threads)
    } else {
        Parallelism::None
    };
    assert!(dst.len() >= m * n, "matmul destination too small");
    if m <= DOT_ROWS && lhs.col_stride == 1 && rhs.row_stride == 1 {
        // Each output is the dot product of an lhs row and a contiguous rhs column.
        for (i, dst_row) in dst.chunks_mut(n).take(m).enumerate() {
            let row = &lhs.data[i * lhs.row_stride..i * lhs.row_stride + k];
            let column = |j: usize| &rhs.data[j * rhs.col_stride..j * rhs.col_stride + k];
            let columns = |(task, out): (usize, &mut [f32])| {
                let first = task * COLS_PER_TASK;
                let done = out.len() / DOT_GROUP * DOT_GROUP;
                let mut groups = out.chunks_exact_mut(DOT_GROUP);
                for (g, o) in (&mut groups).enumerate() {
                    let j = first + DOT_GROUP * g;
                    let v = fast_math::dot_rows(row, std::array::from_fn(|c| column(j + c)));
                    for (o, v) in o.iter_mut().zip(v) {
                        *o = if accumulate { *o + v } else { v };
                    }
                }
                for (c, o) in groups.into_remainder().iter_mut().enumerate() {
                    let v = fast_math::dot(row, column(first + done + c));
                    *o = if accumulate { *o + v } else { v };
                }
            };
            if threads > 1 && n * k >= PARALLEL_MACS {
                dst_row
                    .par_chunks_mut(COLS_PER_TASK)
                    .enumerate()
                    .for_each(columns);
            } else {
                dst_row
                    .chunks_mut(COLS_PER_TASK)
                    .enumerate()
                    .for_each(columns);
            }
        }
        return;
    }
    // SAFETY: the pointers and strides describe buffers of at least m×k, k×n and m×n elements,
    // checked by the callers from the tensors' shapes.
    unsafe {
        gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            n as isize,
            accumulate,
            lhs.data.as_ptr(),
            lhs.col_stride as isize,
            lhs.row_stride as isize,
            rhs.data.as_ptr(),
            rhs.col_stride as isize,
            rhs.row_stride as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        )
    }
}
