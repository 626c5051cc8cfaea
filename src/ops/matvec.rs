//! Products with weights packed in panels, for the CPU decoder: matrix-vector products for
//! one-token generation steps, and a 6×16 register tile for a prompt's rows.
//!
//! A generation step reads every weight once and does two flops per weight read, so its speed is
//! the speed at which the weights stream in from the cache. Read as rows (W is out × in), eight
//! rows of 128 inputs at a time make eight short streams that the hardware prefetcher follows
//! poorly; packed so that each panel of outputs is one contiguous run, a product reads a single
//! stream (1.5–1.8× the bandwidth on two threads, measured on a 3 MB matrix in the L3 cache).

use rayon::prelude::*;
use std::ops::Range;

/// Outputs per panel: two AVX registers.
const PANEL: usize = 16;

/// Below this many weights a matrix is packed on one thread: handing half to another costs more.
const PARALLEL_WEIGHTS: usize = 1 << 14;

/// A weight matrix W (out × in) packed in panels of 16 outputs: panel p holds, for each input i
/// in turn, the weights W[16p..16p+16][i] (zeros past the last output).
pub(crate) struct PackedMatrix {
    data: Vec<[f32; PANEL]>, // (panels × in)
    n_out: usize,
    n_in: usize,
}

impl PackedMatrix {
    /// Packs the matrix whose rows (outputs) are `rows`, each of `n_in` inputs; on all threads
    /// if it is large.
    pub(crate) fn new(rows: &[&[f32]], n_in: usize) -> Self {
        assert!(rows.iter().all(|r| r.len() == n_in), "rows of n_in inputs");
        let n_out = rows.len();
        let zeros = vec![0f32; n_in];
        let mut data = vec![[0f32; PANEL]; n_out.div_ceil(PANEL) * n_in];
        let pack = |(p, panel): (usize, &mut [[f32; PANEL]])| {
            // Past the last output, zero rows.
            let rows: [&[f32]; PANEL] =
                std::array::from_fn(|j| rows.get(p * PANEL + j).copied().unwrap_or(&zeros));
            for (i, weights) in panel.iter_mut().enumerate() {
                for (w, row) in weights.iter_mut().zip(&rows) {
                    *w = row[i];
                }
            }
        };
        if n_out * n_in < PARALLEL_WEIGHTS {
            data.chunks_mut(n_in).enumerate().for_each(pack);
        } else {
            data.par_chunks_mut(n_in).enumerate().for_each(pack);
        }
        PackedMatrix { data, n_out, n_in }
    }

    /// (out, in).
    pub(crate) fn shape(&self) -> (usize, usize) {
        (self.n_out, self.n_in)
    }

    /// out (M × out) = x Wᵀ for the rows of x (M × in), on this thread.
    pub(crate) fn product(&self, x: &[f32], out: &mut [f32]) {
        self.check(x, out);
        self.panels_product(x, 0..self.panel_count(), out)
    }

    /// out (M × out) += x Wᵀ for the rows of x (M × in), on this thread.
    pub(crate) fn accumulate(&self, x: &[f32], out: &mut [f32]) {
        self.check(x, out);
        let n_out = self.n_out;
        self.each_panel_sum(x, 0..self.panel_count(), |row, p, sums| {
            let cols = self.outputs(p..p + 1);
            let out = &mut out[row * n_out + cols.start..row * n_out + cols.end];
            out.iter_mut().zip(sums).for_each(|(o, s)| *o += s);
        });
    }

    /// The outputs of one row split into up to `parts` runs of whole panels, each with its
    /// panels, for [`Self::panels_product`] on different threads.
    pub(crate) fn output_parts<'o>(
        &self,
        out: &'o mut [f32],
        parts: usize,
    ) -> Vec<(Range<usize>, &'o mut [f32])> {
        assert_eq!(out.len(), self.n_out, "output_parts: one row of outputs");
        let per_part = self.panel_count().div_ceil(parts.max(1)).max(1);
        out.chunks_mut(per_part * PANEL)
            .enumerate()
            .map(|(i, out)| {
                let first = i * per_part;
                (first..first + out.len().div_ceil(PANEL), out)
            })
            .collect()
    }

    /// Panics unless x is M × in and out M × out.
    fn check(&self, x: &[f32], out: &mut [f32]) {
        assert!(
            x.len().is_multiple_of(self.n_in) && out.len() * self.n_in == x.len() * self.n_out,
            "PackedMatrix: x must be M × {}, out M × {}",
            self.n_in,
            self.n_out
        );
    }

    /// Number of panels (16 outputs each, the last possibly cut).
    fn panel_count(&self) -> usize {
        self.n_out.div_ceil(PANEL)
    }

    /// The outputs of panels `panels`: `16·start..min(16·end, out)`.
    fn outputs(&self, panels: Range<usize>) -> Range<usize> {
        panels.start * PANEL..self.n_out.min(panels.end * PANEL)
    }

    /// out (M × outputs) = x Wᵀ restricted to the outputs of panels `panels`.
    pub(crate) fn panels_product(&self, x: &[f32], panels: Range<usize>, out: &mut [f32]) {
        let outputs = self.outputs(panels.clone());
        let width = outputs.len();
        self.each_panel_sum(x, panels, |row, p, sums| {
            let cols = self.outputs(p..p + 1);
            let first = row * width + cols.start - outputs.start;
            out[first..first + cols.len()].copy_from_slice(&sums[..cols.len()]);
        });
    }

    /// For each row r of x (M × in) and each panel p of `panels`, the 16 sums
    /// Σᵢ x[r][i]·W[16p + j][i], handed to `emit(r, p, sums)`: one row streams each panel once;
    /// several go through a [`tile`] of six rows at a time.
    #[inline(always)]
    fn each_panel_sum(
        &self,
        x: &[f32],
        panels: Range<usize>,
        mut emit: impl FnMut(usize, usize, &[f32; PANEL]),
    ) {
        let n_in = self.n_in;
        let panel = |p: usize| self.data[p * n_in..(p + 1) * n_in].as_flattened();
        if x.len() == n_in {
            for p in panels {
                emit(0, p, &panel_product(x, panel(p)));
            }
            return;
        }
        let mut padded = Vec::new();
        for (group, x) in x.chunks(TILE_ROWS * n_in).enumerate() {
            let rows = x.len() / n_in;
            let x = if rows == TILE_ROWS {
                x
            } else {
                // The last rows: padded with zero rows to a whole tile.
                padded.resize(TILE_ROWS * n_in, 0.0);
                padded[..x.len()].copy_from_slice(x);
                &padded
            };
            let x_rows: [&[f32]; TILE_ROWS] = std::array::from_fn(|r| &x[r * n_in..(r + 1) * n_in]);
            for p in panels.clone() {
                let sums = tile(x_rows, panel(p));
                for (r, sums) in sums.iter().take(rows).enumerate() {
                    emit(group * TILE_ROWS + r, p, sums);
                }
            }
        }
    }
}

/// Rows of x in one [`tile`]: 6 × 2 registers of sums, plus the panel's two and a broadcast.
const TILE_ROWS: usize = 6;

/// Σᵢ x_r[i]·panel[i][..] for six rows x_r and one panel (in × 16).
#[inline(always)]
fn tile(x: [&[f32]; TILE_ROWS], panel: &[f32]) -> [[f32; PANEL]; TILE_ROWS] {
    let mut sums = [[0f32; PANEL]; TILE_ROWS];
    for (i, w) in panel.chunks_exact(PANEL).enumerate() {
        for (sums, x) in sums.iter_mut().zip(&x) {
            let x = x[i];
            for (s, w) in sums.iter_mut().zip(w) {
                *s = x.mul_add(*w, *s);
            }
        }
    }
    sums
}

/// Σᵢ x[i]·panel[i][..] for one panel (in × 16), with four sets of sums (inputs i mod 4) so that
/// eight chains of fused multiply-adds run side by side: enough to keep up with the stream.
#[inline(always)]
fn panel_product(x: &[f32], panel: &[f32]) -> [f32; PANEL] {
    const SETS: usize = 4;
    let mut sums = [[0f32; PANEL]; SETS];
    let quads = panel.chunks_exact(SETS * PANEL).zip(x.chunks_exact(SETS));
    for (w, x) in quads {
        for (set, sums) in sums.iter_mut().enumerate() {
            for (j, sum) in sums.iter_mut().enumerate() {
                *sum = x[set].mul_add(w[set * PANEL + j], *sum);
            }
        }
    }
    let done = x.len() / SETS * SETS;
    for (x, w) in x[done..]
        .iter()
        .zip(panel[done * PANEL..].chunks_exact(PANEL))
    {
        for (sum, w) in sums[0].iter_mut().zip(w) {
            *sum = x.mul_add(*w, *sum);
        }
    }
    std::array::from_fn(|j| (sums[0][j] + sums[1][j]) + (sums[2][j] + sums[3][j]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// x Wᵀ computed plainly in f64, (M × out).
    fn reference(x: &[f32], w: &[f32], n_out: usize, n_in: usize) -> Vec<f32> {
        x.chunks(n_in)
            .flat_map(|x| {
                (0..n_out).map(move |o| {
                    let row = &w[o * n_in..(o + 1) * n_in];
                    row.iter()
                        .zip(x)
                        .map(|(&w, &x)| w as f64 * x as f64)
                        .sum::<f64>() as f32
                })
            })
            .collect()
    }

    #[test]
    fn products_match_the_plain_sums_for_any_shape() {
        // Outputs not a whole number of panels, odd inputs, row counts around the tile of six,
        // and a matrix large enough to be split over threads.
        for (n_out, n_in) in [(1, 1), (16, 8), (37, 5), (130, 33), (300, 128)] {
            let w: Vec<f32> = (0..n_out * n_in)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
                .collect();
            let rows: Vec<&[f32]> = w.chunks(n_in).collect();
            let packed = PackedMatrix::new(&rows, n_in);
            for m in [0, 1, 2, 6, 7, 13] {
                let x: Vec<f32> = (0..m * n_in)
                    .map(|i| ((i * 11 % 23) as f32 - 11.0) / 7.0)
                    .collect();
                let want = reference(&x, &w, n_out, n_in);
                let close = |got: &[f32], want: &[f32], what: &str| {
                    for (got, want) in got.iter().zip(want) {
                        assert!(
                            (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
                            "{what}, {m} rows, {n_out}×{n_in}: {got} vs {want}"
                        );
                    }
                };
                let mut out = vec![f32::NAN; m * n_out];
                packed.product(&x, &mut out);
                close(&out, &want, "product");
                if m == 1 {
                    for parts in [1, 2, 3, 64] {
                        let mut out = vec![f32::NAN; n_out];
                        for (panels, out) in packed.output_parts(&mut out, parts) {
                            packed.panels_product(&x, panels, out);
                        }
                        close(&out, &want, "output_parts");
                    }
                }
                // Accumulated onto what is there.
                let mut out: Vec<f32> = (0..m * n_out).map(|i| i as f32 / 10.0).collect();
                packed.accumulate(&x, &mut out);
                let want: Vec<f32> = want
                    .iter()
                    .enumerate()
                    .map(|(i, w)| w + i as f32 / 10.0)
                    .collect();
                close(&out, &want, "accumulate");
            }
        }
    }
}
