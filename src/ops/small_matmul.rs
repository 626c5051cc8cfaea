//! Products of the small matrices of attention (a head's T × D queries, keys and values, its
//! T × T weights), which fit in a core's caches: register tiles of [`ROWS`] × [`WIDTH`] outputs
//! read the operands in place, with no packing and no per-call set-up. gemm packs both operands
//! on every call, which on a 32 × 32 block costs about as much as the product.
//!
//! Each output is one sum over its terms in ascending order, so a result does not depend on the
//! tiling or the thread count. The loops are portable Rust; run inside [`super::isa::widest`] they
//! are compiled for the CPU's vectors (on AVX2, a tile's 6 × 16 sums are twelve registers).

use super::matmul_f32::Operand;
use std::ops::Range;

/// Rows of a register tile: each term broadcasts one value of `a` per row.
pub(crate) const ROWS: usize = 6;

/// Columns of a register tile: each term reads this many contiguous values of a row of `b`.
pub(crate) const WIDTH: usize = 16;

/// What the row tile starting at row `first` (of at most [`ROWS`] rows) computes: its first
/// `cols` columns, summing over the terms `terms` (the causal structure lives here).
pub(crate) struct TileSpan {
    pub cols: usize,
    pub terms: Range<usize>,
}

/// dst (i, j) = Σ_{l ∈ span.terms} a (i, l) · b (l, j) for every row i < m and column j <
/// span.cols of its row tile, `span` giving each tile's columns and terms from its first row; the
/// other entries of dst are left as they were. dst's row i starts at i · `dst_stride`; b's
/// columns must be contiguous (col_stride 1), a's strides are free.
///
/// Panics if a tile would read or write outside an operand.
#[inline(always)]
pub(crate) fn product(
    (dst, dst_stride): (&mut [f32], usize),
    m: usize,
    a: Operand,
    b: Operand,
    span: impl Fn(usize) -> TileSpan,
) {
    assert_eq!(
        b.col_stride, 1,
        "small_matmul: b's columns must be contiguous"
    );
    let mut panel = Vec::new();
    for first in (0..m).step_by(ROWS) {
        let rows = ROWS.min(m - first);
        let TileSpan { cols, terms } = span(first);
        let dst_rows = Operand {
            data: &*dst,
            row_stride: dst_stride,
            col_stride: 1,
        };
        assert!(
            cols <= dst_stride && dst_rows.rows_from(first).covers(rows, cols),
            "small_matmul: destination too small"
        );
        if terms.is_empty() {
            // A sum of no terms.
            for row in dst[first * dst_stride..].chunks_mut(dst_stride).take(rows) {
                row[..cols].fill(0.0);
            }
            continue;
        }
        assert!(
            a.rows_from(first).covers(rows, terms.end)
                && b.rows_from(terms.start).covers(terms.len(), cols),
            "small_matmul: operand smaller than its span"
        );
        let b = b.rows_from(terms.start);
        let len = terms.len();
        let dst = (&mut *dst, dst_stride);
        if a.col_stride == 1 {
            // Row r's terms are one contiguous run (rows past the tile repeat its last row).
            let runs = std::array::from_fn(|r| {
                let start = (first + r.min(rows - 1)) * a.row_stride + terms.start;
                &a.data[start..start + len]
            });
            row_tile(dst, (first, rows, cols), &Runs(runs), (b, len));
        } else if a.row_stride == 1 && rows == ROWS {
            // a is a transposed matrix: the tile's values of term l are contiguous.
            let start = terms.start * a.col_stride + first;
            let end = start + (len - 1) * a.col_stride + ROWS;
            let columns = Columns {
                data: &a.data[start..end],
                stride: a.col_stride,
            };
            row_tile(dst, (first, rows, cols), &columns, (b, len));
        } else {
            gather_panel(a, (first, rows), terms, &mut panel);
            let columns = Columns {
                data: &panel,
                stride: ROWS,
            };
            row_tile(dst, (first, rows, cols), &columns, (b, len));
        }
    }
}

/// a's values of one row tile, term by term.
trait TermValues {
    /// The tile's ROWS values of a at its `t`-th term.
    fn at(&self, t: usize) -> [f32; ROWS];
}

/// One contiguous run of terms per row.
struct Runs<'a>([&'a [f32]; ROWS]);

impl TermValues for Runs<'_> {
    #[inline(always)]
    fn at(&self, t: usize) -> [f32; ROWS] {
        std::array::from_fn(|r| self.0[r][t])
    }
}

/// The ROWS values of term t contiguous, at t · stride.
struct Columns<'a> {
    data: &'a [f32],
    stride: usize,
}

impl TermValues for Columns<'_> {
    #[inline(always)]
    fn at(&self, t: usize) -> [f32; ROWS] {
        let at = t * self.stride;
        self.data[at..at + ROWS].try_into().expect("ROWS values")
    }
}

/// The rows first.. first + `rows` of [`product`], `cols` wide, tile by tile, b's row t being
/// the `t`-th term's.
#[inline(always)]
fn row_tile(
    (dst, dst_stride): (&mut [f32], usize),
    (first, rows, cols): (usize, usize, usize),
    a: &impl TermValues,
    b: (Operand, usize),
) {
    let (b, len) = b;
    for col in (0..cols).step_by(WIDTH) {
        let width = WIDTH.min(cols - col);
        let sums = tile(a, (b, col, width), len);
        for (r, sums) in sums.iter().take(rows).enumerate() {
            let at = (first + r) * dst_stride + col;
            match <&mut [f32; WIDTH]>::try_from(&mut dst[at..at + width]) {
                Ok(whole) => *whole = *sums, // fixed-size: vector stores, not a memcpy call
                Err(_) => dst[at..at + width].copy_from_slice(&sums[..width]),
            }
        }
    }
}

/// panel (terms × ROWS) = a's rows first.. first + `rows` over `terms`, term by term; rows past
/// `rows` are zeros.
fn gather_panel(
    a: Operand,
    (first, rows): (usize, usize),
    terms: Range<usize>,
    panel: &mut Vec<f32>,
) {
    panel.clear();
    panel.resize(terms.len() * ROWS, 0.0);
    for (slot, l) in panel.chunks_exact_mut(ROWS).zip(terms) {
        for (r, s) in slot.iter_mut().enumerate().take(rows) {
            *s = a.data[(first + r) * a.row_stride + l * a.col_stride];
        }
    }
}

/// The sums of one tile over `len` terms: ROWS × WIDTH, from a's values and b's rows (one per
/// term) at columns col.. col + width (width ≤ WIDTH; the rest of each row of sums is zero).
#[inline(always)]
fn tile(
    a: &impl TermValues,
    (b, col, width): (Operand, usize, usize),
    len: usize,
) -> [[f32; WIDTH]; ROWS] {
    let at = |t: usize| t * b.row_stride + col;
    if width == WIDTH {
        sums(a, len, |t| {
            b.data[at(t)..at(t) + WIDTH]
                .try_into()
                .expect("WIDTH values")
        })
    } else {
        // The last columns of a row (its own loop, so that the full tiles' sums stay in
        // registers).
        sums(a, len, |t| {
            let mut padded = [0f32; WIDTH];
            padded[..width].copy_from_slice(&b.data[at(t)..at(t) + width]);
            padded
        })
    }
}

/// Σ_t a.at(t) ⊗ b_row(t) over `len` terms, row by row, each sum in term order.
#[inline(always)]
fn sums(
    a: &impl TermValues,
    len: usize,
    b_row: impl Fn(usize) -> [f32; WIDTH],
) -> [[f32; WIDTH]; ROWS] {
    let mut sums = [[0f32; WIDTH]; ROWS];
    for t in 0..len {
        let (a_l, b_l) = (a.at(t), b_row(t));
        for (sums, a_il) in sums.iter_mut().zip(a_l) {
            for (s, b_lj) in sums.iter_mut().zip(b_l) {
                *s = a_il.mul_add(b_lj, *s);
            }
        }
    }
    sums
}

/// dst (cols × rows) = src (rows × cols)ᵀ: a head's keys or values laid out key by key along
/// the rows, as [`product`]'s `b` needs them for q kᵀ and dO vᵀ.
#[inline(always)]
pub(crate) fn transpose(src: Operand, (rows, cols): (usize, usize), dst: &mut [f32]) {
    assert!(src.covers(rows, cols) && dst.len() >= rows * cols);
    // Source rows in order: reading down a column of a strided source (a head's rows in qkv
    // stand 3C apart) keeps evicting itself from the few cache sets that stride maps to.
    for i in 0..rows {
        for j in 0..cols {
            dst[j * rows + i] = src.data[i * src.row_stride + j * src.col_stride];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same products by the definition, in f64.
    fn reference(a: Operand, b: Operand, (m, n, k): (usize, usize, usize)) -> Vec<f64> {
        let mut out = vec![0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..k)
                    .map(|l| {
                        a.data[i * a.row_stride + l * a.col_stride] as f64
                            * b.data[l * b.row_stride + j * b.col_stride] as f64
                    })
                    .sum();
            }
        }
        out
    }

    fn values(len: usize, seed: usize) -> Vec<f32> {
        (0..len)
            .map(|i| ((i * 7919 + seed * 104_729) % 2003) as f32 / 1001.0 - 1.0)
            .collect()
    }

    #[test]
    fn products_of_every_tail_shape_and_strided_or_transposed_operands_match_the_definition() {
        for (m, n, k) in [
            (1, 1, 1),
            (4, 16, 32),
            (7, 19, 5),
            (13, 40, 33),
            (32, 128, 32),
        ] {
            let a_data = values(m * k * 3, 1);
            let b_data = values(k * (n + 3), 2);
            let operands = [
                (Operand::rows(&a_data, k), "a row-major"),
                (
                    Operand {
                        data: &a_data,
                        row_stride: 3 * k,
                        col_stride: 1,
                    },
                    "a with long rows",
                ),
                (Operand::rows(&a_data, m).t(), "a transposed"),
            ];
            let b = Operand {
                data: &b_data,
                row_stride: n + 3,
                col_stride: 1,
            };
            for (a, name) in operands {
                let stride = n + 2;
                let mut dst = vec![f32::NAN; m * stride];
                product((&mut dst, stride), m, a, b, |_| TileSpan {
                    cols: n,
                    terms: 0..k,
                });
                let want = reference(a, b, (m, n, k));
                let scale = want.iter().fold(0f64, |s, v| s.max(v.abs()));
                for i in 0..m {
                    for j in 0..stride {
                        let got = dst[i * stride + j];
                        if j >= n {
                            assert!(got.is_nan(), "{name}: ({i}, {j}) past n was written");
                            continue;
                        }
                        let want = want[i * n + j];
                        assert!(
                            (got as f64 - want).abs() <= 1e-6 * scale,
                            "{name} {m}×{n}×{k}: ({i}, {j}) = {got}, want {want}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_tile_computes_only_its_span() {
        // Lower-triangular spans, as causal attention asks: row tile f sums terms f.. and
        // writes f + ROWS columns.
        let (m, k) = (10, 10);
        let (a_data, b_data) = (values(m * k, 3), values(k * m, 4));
        let (a, b) = (Operand::rows(&a_data, k), Operand::rows(&b_data, m));
        let mut dst = vec![f32::NAN; m * m];
        product((&mut dst, m), m, a, b, |first| TileSpan {
            cols: (first + ROWS).min(m),
            terms: first..k,
        });
        for i in 0..m {
            let first = i / ROWS * ROWS;
            for j in 0..m {
                let got = dst[i * m + j];
                if j >= (first + ROWS).min(m) {
                    assert!(got.is_nan(), "({i}, {j}) is outside its tile's span");
                    continue;
                }
                let want: f64 = (first..k)
                    .map(|l| a_data[i * k + l] as f64 * b_data[l * m + j] as f64)
                    .sum();
                assert!((got as f64 - want).abs() <= 1e-6 * want.abs().max(1.0));
            }
        }
    }

    #[test]
    fn a_tile_without_terms_is_zero() {
        // A whole row tile of a transposed a (its term-major path) and of a row-major one,
        // their terms starting at the end of the data.
        let data = vec![1f32; ROWS * ROWS];
        let (a, b) = (Operand::rows(&data, ROWS), Operand::rows(&data, ROWS));
        for a in [a, a.t()] {
            let mut dst = vec![f32::NAN; ROWS * ROWS];
            product((&mut dst, ROWS), ROWS, a, b, |_| TileSpan {
                cols: ROWS - 1,
                terms: ROWS..ROWS,
            });
            for (i, v) in dst.iter().enumerate() {
                assert_eq!(v.is_nan(), i % ROWS == ROWS - 1, "element {i}: {v}");
                assert!(v.is_nan() || *v == 0.0, "element {i}: {v}");
            }
        }
    }

    #[test]
    fn spans_outside_the_operands_panic_instead_of_reading_past_them() {
        let data = vec![1f32; 16];
        let (a, b) = (Operand::rows(&data, 4), Operand::rows(&data, 4));
        for (cols, terms) in [(5, 0..4), (4, 0..5), (4, 2..6)] {
            let mut dst = vec![0f32; 32];
            let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                product((&mut dst, 8), 4, a, b, |_| TileSpan {
                    cols,
                    terms: terms.clone(),
                })
            }));
            assert!(run.is_err(), "cols {cols}, terms {terms:?} ran");
        }
    }

    #[test]
    fn transpose_swaps_rows_and_columns() {
        let src = values(3 * 5, 5);
        let mut dst = vec![0f32; 15];
        transpose(Operand::rows(&src, 5), (3, 5), &mut dst);
        for i in 0..3 {
            for j in 0..5 {
                assert_eq!(dst[j * 3 + i], src[i * 5 + j]);
            }
        }
    }
}
