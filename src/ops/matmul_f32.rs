//! Products of f32 matrices given by their strides: gemm's kernels, or dot products for a few
//! rows (one token at a time while generating). The bf16 products build on these; the choice
//! between the two is [`super::matmul`]'s.

use super::fast_math::{self, DOT_GROUP};
use gemm::{gemm, Parallelism};
use rayon::prelude::*;

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

    /// Whether every element (i, j) of a rows × cols matrix read through these strides lies
    /// inside the data (an empty matrix reads nothing).
    pub(crate) fn covers(&self, rows: usize, cols: usize) -> bool {
        if rows == 0 || cols == 0 {
            return true;
        }
        let last = (rows - 1)
            .checked_mul(self.row_stride)
            .zip((cols - 1).checked_mul(self.col_stride))
            .and_then(|(r, c)| r.checked_add(c));
        last.is_some_and(|last| last < self.data.len())
    }

    /// The rows from `first` on (element (i, j) is this one's (first + i, j)); empty past the end.
    pub(crate) fn rows_from(self, first: usize) -> Self {
        let start = first.saturating_mul(self.row_stride).min(self.data.len());
        Operand {
            data: &self.data[start..],
            ..self
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

/// dst (m × n, row-major) = (dst if `accumulate`) + lhs (m × k) · rhs (k × n) in f32, on at most
/// `threads` threads (1: the calling thread only).
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
    // The checks that make the gemm call below sound for any input: every element it reads or
    // writes lies inside its buffer.
    assert!(
        m.checked_mul(n).is_some_and(|mn| dst.len() >= mn),
        "matmul destination too small"
    );
    assert!(
        lhs.covers(m, k) && rhs.covers(k, n),
        "matmul operand smaller than its shape and strides"
    );
    if m == 0 || n == 0 {
        return; // no output
    }
    if m <= DOT_ROWS && lhs.col_stride == 1 && rhs.row_stride == 1 {
        return dot_products(dst, (m, n, k), lhs, rhs, accumulate, threads);
    }
    let parallelism = if threads > 1 {
        Parallelism::Rayon(threads)
    } else {
        Parallelism::None
    };
    // SAFETY: the assertions above check that every element gemm reads (lhs (i, l) at
    // i·row_stride + l·col_stride, rhs likewise) and writes (dst (i, j) at i·n + j) is inside
    // its slice; dst is borrowed mutably, so nothing else reads it meanwhile.
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

/// [`matmul_on`] for a few lhs rows and contiguous rhs columns: each output is the dot product
/// of an lhs row and an rhs column (gemm would pack the whole rhs for them).
fn dot_products(
    dst: &mut [f32],
    (m, n, k): (usize, usize, usize),
    lhs: Operand,
    rhs: Operand,
    accumulate: bool,
    threads: usize,
) {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn products_with_operands_too_small_for_their_strides_panic_instead_of_reading_past_them() {
        let (a, b) = (vec![1f32; 6], vec![1f32; 6]);
        let mut dst = vec![0f32; 9];
        // 3 × 2 by 2 × 3 fits.
        matmul_on(
            &mut dst,
            3,
            3,
            2,
            Operand::rows(&a, 2),
            Operand::rows(&b, 3),
            false,
            1,
        );
        assert_eq!(dst, vec![2.0; 9]);
        let too_long_rows = Operand {
            data: &a,
            row_stride: 4,
            col_stride: 1,
        };
        let cases: [(usize, Operand, Operand); 3] = [
            (3, too_long_rows, Operand::rows(&b, 3)),
            (3, Operand::rows(&a, 2), Operand::rows(&b[..5], 3)),
            (6, Operand::rows(&a, 2), Operand::rows(&b, 3)),
        ];
        for (m, lhs, rhs) in cases {
            let mut dst = vec![0f32; 3 * m];
            let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                matmul_on(&mut dst, m, 3, 2, lhs, rhs, false, 1)
            }));
            assert!(run.is_err(), "an out-of-bounds product ran (m = {m})");
        }
    }
}
