//! Products with weights packed in panels, for the CPU decoder: matrix-vector products for
//! one-token generation steps, and a 6×16 register tile for a prompt's rows.
//!
//! A generation step reads every weight once and does two flops per weight read, so its speed is
//! the speed at which the weights stream in from the cache. Read as rows (W is out × in), eight
//! rows of 128 inputs at a time make eight short streams that the hardware prefetcher follows
//! poorly; packed so that each panel of outputs is one contiguous run, a product reads a single
//! stream (1.5–1.8× the bandwidth on two threads, measured on a 3 MB matrix in the L3 cache).
//!
//! The panels hold f32 or, where the CPU converts half precision in hardware (F16C), f16: half the
//! bytes to stream, and a model's weights then fit in the cores' L2 caches instead of the L3
//! (a 3 MB matrix streams at 30 GB/s from L3 and at 60–80 GB/s from L2 on a 2-core Xeon). The
//! products still multiply and sum in f32; only each weight is rounded once, to 11 significant
//! bits.

use rayon::prelude::*;
use std::ops::Range;

/// How a `PackedMatrix` stores its weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WeightFormat {
    /// The weights as they are.
    F32,
    /// Each weight rounded to IEEE half precision (relative error ≤ 2⁻¹¹): held in f16 where the
    /// CPU has F16C, elsewhere (a browser's wasm) widened back to f32 once, so that every machine
    /// multiplies by the same numbers. A matrix with a weight beyond f16's range stays exact.
    F16,
}

impl WeightFormat {
    /// Whether this CPU converts f16 to f32 in hardware.
    pub fn f16_converts_here() -> bool {
        super::cpu_features::f16c()
    }

    /// The fastest format for generation on this CPU: f16 where it converts in hardware.
    pub fn fastest() -> Self {
        match Self::f16_converts_here() {
            true => WeightFormat::F16,
            false => WeightFormat::F32,
        }
    }

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            WeightFormat::F32 => "f32",
            WeightFormat::F16 => "f16",
        }
    }
}

/// One input's 16 weights of a panel, widened to f32 by the products.
trait PanelRow: Copy + Send + Sync {
    fn widen(&self) -> [f32; PANEL];

    /// The same in one AVX-512 register. Safety: the CPU has AVX-512F.
    #[cfg(target_arch = "x86_64")]
    unsafe fn widen_512(&self) -> std::arch::x86_64::__m512;
}

impl PanelRow for [f32; PANEL] {
    #[inline(always)]
    fn widen(&self) -> [f32; PANEL] {
        *self
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn widen_512(&self) -> std::arch::x86_64::__m512 {
        // SAFETY: the caller's contract (AVX-512F); the load reads the 16 f32 of self.
        unsafe { std::arch::x86_64::_mm512_loadu_ps(self.as_ptr()) }
    }
}

/// 16 weights in IEEE half precision. Made only by [`PackedMatrix::new`], and only where
/// [`WeightFormat::f16_converts_here`]: [`PanelRow::widen`] relies on it.
#[derive(Clone, Copy)]
struct HalfRow([u16; PANEL]);

impl HalfRow {
    /// The 16 weights rounded to the nearest f16 (ties to even). Only where
    /// [`WeightFormat::f16_converts_here`] and every weight is within f16's range.
    #[inline(always)]
    fn round(w: [f32; PANEL]) -> HalfRow {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{__m128i, __m256, _mm256_cvtps_ph, _MM_FROUND_TO_NEAREST_INT};
            // SAFETY: called only where the CPU has F16C and AVX (PackedMatrix::new checks);
            // [f32; 16] is two __m256 and [u16; 16] two __m128i.
            unsafe {
                let [lo, hi]: [__m256; 2] = std::mem::transmute(w);
                HalfRow(std::mem::transmute::<[__m128i; 2], [u16; PANEL]>([
                    _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(lo),
                    _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(hi),
                ]))
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            HalfRow(w.map(|w| half::f16::from_f32(w).to_bits()))
        }
    }
}

impl PanelRow for HalfRow {
    #[inline(always)]
    fn widen(&self) -> [f32; PANEL] {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{__m128i, _mm256_cvtph_ps, _mm_loadu_si128};
            let halves = self.0.as_ptr() as *const __m128i;
            // SAFETY: a HalfRow exists only where the CPU has F16C and AVX (see its doc); the two
            // unaligned loads read the 2 × 8 u16 of self.0, and [f32; 16] is two __m256.
            unsafe {
                let (lo, hi) = (
                    _mm256_cvtph_ps(_mm_loadu_si128(halves)),
                    _mm256_cvtph_ps(_mm_loadu_si128(halves.add(1))),
                );
                std::mem::transmute([lo, hi])
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self.0.map(|h| half::f16::from_bits(h).to_f32())
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn widen_512(&self) -> std::arch::x86_64::__m512 {
        use std::arch::x86_64::{_mm256_loadu_si256, _mm512_cvtph_ps};
        // SAFETY: the caller's contract (AVX-512F, which converts f16 itself); the load reads
        // the 16 u16 of self.0.
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(self.0.as_ptr().cast())) }
    }
}

/// The packed weights, in one format.
enum Panels {
    F32(Vec<[f32; PANEL]>), // (panels × in)
    F16(Vec<HalfRow>),      // (panels × in)
}

/// Outputs per panel: two AVX registers, one AVX-512 register.
const PANEL: usize = 16;

/// Below this many weights a matrix is packed on one thread: handing half to another costs more.
const PARALLEL_WEIGHTS: usize = 1 << 14;

/// A weight matrix W (out × in) packed in panels of 16 outputs: panel p holds, for each input i
/// in turn, the weights W[16p..16p+16][i] (zeros past the last output).
pub(crate) struct PackedMatrix {
    panels: Panels,
    /// Whether the weights were rounded to f16 ([`WeightFormat::F16`]).
    rounded: bool,
    n_out: usize,
    n_in: usize,
}

impl PackedMatrix {
    /// Packs the matrix whose rows (outputs) are `rows`, each of `n_in` inputs, in `format` if
    /// this CPU and these weights allow it (else in f32); on all threads if it is large.
    pub(crate) fn new(rows: &[&[f32]], n_in: usize, format: WeightFormat) -> Self {
        assert!(rows.iter().all(|r| r.len() == n_in), "rows of n_in inputs");
        let in_f16_range = || {
            let max = half::f16::MAX.to_f32();
            // NaN is out of range too.
            rows.iter()
                .all(|r| r.iter().fold(true, |ok, w| ok & (w.abs() <= max)))
        };
        let rounded = format == WeightFormat::F16 && in_f16_range();
        let panels = match rounded {
            true if WeightFormat::f16_converts_here() => {
                Panels::F16(pack(rows, n_in, HalfRow::round))
            }
            true => Panels::F32(pack(rows, n_in, |w| {
                w.map(|w| half::f16::from_f32(w).to_f32())
            })),
            false => Panels::F32(pack(rows, n_in, |w| w)),
        };
        PackedMatrix {
            panels,
            rounded,
            n_out: rows.len(),
            n_in,
        }
    }

    /// The format of its weights: F16 when they were rounded to f16 (held in f16 or widened).
    pub(crate) fn format(&self) -> WeightFormat {
        match self.rounded {
            true => WeightFormat::F16,
            false => WeightFormat::F32,
        }
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
        emit: impl FnMut(usize, usize, &[f32; PANEL]),
    ) {
        match &self.panels {
            Panels::F32(data) => each_panel_sum_of(data, self.n_in, x, panels, emit),
            Panels::F16(data) => each_panel_sum_of(data, self.n_in, x, panels, emit),
        }
    }
}

/// The panels of the matrix whose rows are `rows` (n_in inputs each), each input's 16 weights
/// stored by `store`; zero weights past the last row.
fn pack<R: PanelRow>(
    rows: &[&[f32]],
    n_in: usize,
    store: impl Fn([f32; PANEL]) -> R + Sync,
) -> Vec<R> {
    let mut data = vec![store([0f32; PANEL]); rows.len().div_ceil(PANEL) * n_in]; // (panels × in)
    let pack_panel = |(p, panel): (usize, &mut [R])| {
        let mut weights = vec![[0f32; PANEL]; n_in]; // (in × 16)
        for (j, row) in rows.iter().skip(p * PANEL).take(PANEL).enumerate() {
            for (w, &v) in weights.iter_mut().zip(*row) {
                w[j] = v;
            }
        }
        for (stored, w) in panel.iter_mut().zip(&weights) {
            *stored = store(*w);
        }
    };
    if rows.len() * n_in < PARALLEL_WEIGHTS {
        data.chunks_mut(n_in).enumerate().for_each(pack_panel);
    } else {
        data.par_chunks_mut(n_in).enumerate().for_each(pack_panel);
    }
    data
}

/// [`PackedMatrix::each_panel_sum`] over panels stored as `data` (panels × n_in).
#[inline(always)]
fn each_panel_sum_of<R: PanelRow>(
    data: &[R],
    n_in: usize,
    x: &[f32],
    panels: Range<usize>,
    mut emit: impl FnMut(usize, usize, &[f32; PANEL]),
) {
    let panel = |p: usize| &data[p * n_in..(p + 1) * n_in];
    if x.len() == n_in {
        for p in panels {
            emit(0, p, &panel_product_widest(x, panel(p)));
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
            let sums = tile_widest(x_rows, panel(p));
            for (r, sums) in sums.iter().take(rows).enumerate() {
                emit(group * TILE_ROWS + r, p, sums);
            }
        }
    }
}

/// Rows of x in one [`tile`]: 6 × 2 AVX registers of sums (or 6 AVX-512 ones), plus the panel's
/// and a broadcast.
const TILE_ROWS: usize = 6;

/// [`tile`] in AVX-512 registers where the CPU has them; the same sums in the same order.
#[inline(always)]
fn tile_widest<R: PanelRow>(x: [&[f32]; TILE_ROWS], panel: &[R]) -> [[f32; PANEL]; TILE_ROWS] {
    #[cfg(target_arch = "x86_64")]
    if crate::ops::isa::Isa::detected() == crate::ops::isa::Isa::Avx512 {
        // SAFETY: the CPU has AVX-512 (F among others).
        return unsafe { tile_avx512(x, panel) };
    }
    tile(x, panel)
}

/// [`tile`] with one AVX-512 register of sums per row. Safety: the CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tile_avx512<R: PanelRow>(
    x: [&[f32]; TILE_ROWS],
    panel: &[R],
) -> [[f32; PANEL]; TILE_ROWS] {
    use std::arch::x86_64::{_mm512_fmadd_ps, _mm512_set1_ps, _mm512_setzero_ps};
    let x = x.map(|x| &x[..panel.len()]);
    let mut sums = [_mm512_setzero_ps(); TILE_ROWS];
    for (i, w) in panel.iter().enumerate() {
        // SAFETY: this function's contract (AVX-512F).
        let w = unsafe { w.widen_512() };
        for (sum, x) in sums.iter_mut().zip(&x) {
            *sum = _mm512_fmadd_ps(_mm512_set1_ps(x[i]), w, *sum);
        }
    }
    // SAFETY: __m512 and [f32; 16] have the same size, and every bit pattern is an f32.
    unsafe { std::mem::transmute(sums) }
}

/// Σᵢ x_r[i]·panel[i][..] for six rows x_r and one panel (in × 16).
#[inline(always)]
fn tile<R: PanelRow>(x: [&[f32]; TILE_ROWS], panel: &[R]) -> [[f32; PANEL]; TILE_ROWS] {
    let mut sums = [[0f32; PANEL]; TILE_ROWS];
    for (i, w) in panel.iter().enumerate() {
        let w = w.widen();
        for (sums, x) in sums.iter_mut().zip(&x) {
            let x = x[i];
            for (s, w) in sums.iter_mut().zip(&w) {
                *s = x.mul_add(*w, *s);
            }
        }
    }
    sums
}

/// [`panel_product`] in AVX-512 registers where the CPU has them (the compiler's own vectors may
/// be half as wide: Sapphire Rapids' tuning prefers 256 bits); the same sums in the same order.
#[inline(always)]
fn panel_product_widest<R: PanelRow>(x: &[f32], panel: &[R]) -> [f32; PANEL] {
    #[cfg(target_arch = "x86_64")]
    if crate::ops::isa::Isa::detected() == crate::ops::isa::Isa::Avx512 {
        // SAFETY: the CPU has AVX-512 (F among others).
        return unsafe { panel_product_avx512(x, panel) };
    }
    panel_product(x, panel)
}

/// [`panel_product`] with one AVX-512 register per set of sums. Safety: the CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn panel_product_avx512<R: PanelRow>(x: &[f32], panel: &[R]) -> [f32; PANEL] {
    use std::arch::x86_64::{_mm512_add_ps, _mm512_fmadd_ps, _mm512_set1_ps, _mm512_setzero_ps};
    const SETS: usize = 4;
    let mut sums = [_mm512_setzero_ps(); SETS];
    for (w, x) in panel.chunks_exact(SETS).zip(x.chunks_exact(SETS)) {
        for (set, sum) in sums.iter_mut().enumerate() {
            // SAFETY: this function's contract (AVX-512F).
            let w = unsafe { w[set].widen_512() };
            *sum = _mm512_fmadd_ps(_mm512_set1_ps(x[set]), w, *sum);
        }
    }
    let done = x.len() / SETS * SETS;
    for (x, w) in x[done..].iter().zip(&panel[done..]) {
        // SAFETY: as above.
        let w = unsafe { w.widen_512() };
        sums[0] = _mm512_fmadd_ps(_mm512_set1_ps(*x), w, sums[0]);
    }
    let total = _mm512_add_ps(
        _mm512_add_ps(sums[0], sums[1]),
        _mm512_add_ps(sums[2], sums[3]),
    );
    // SAFETY: __m512 and [f32; 16] have the same size, and every bit pattern is an f32.
    unsafe { std::mem::transmute(total) }
}

/// Σᵢ x[i]·panel[i][..] for one panel (in × 16), with four sets of sums (inputs i mod 4) so that
/// eight chains of fused multiply-adds run side by side: enough to keep up with the stream.
#[inline(always)]
fn panel_product<R: PanelRow>(x: &[f32], panel: &[R]) -> [f32; PANEL] {
    const SETS: usize = 4;
    let mut sums = [[0f32; PANEL]; SETS];
    let quads = panel.chunks_exact(SETS).zip(x.chunks_exact(SETS));
    for (w, x) in quads {
        for (set, sums) in sums.iter_mut().enumerate() {
            let w = w[set].widen();
            for (sum, w) in sums.iter_mut().zip(w) {
                *sum = x[set].mul_add(w, *sum);
            }
        }
    }
    let done = x.len() / SETS * SETS;
    for (x, w) in x[done..].iter().zip(&panel[done..]) {
        for (sum, w) in sums[0].iter_mut().zip(w.widen()) {
            *sum = x.mul_add(w, *sum);
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

    /// The weights as the packed matrix multiplies by them in `format` (rounded by the half
    /// crate for f16, an independent rounding, on every CPU).
    fn as_stored(w: &[f32], format: WeightFormat) -> Vec<f32> {
        match format {
            WeightFormat::F16 => w.iter().map(|&w| half::f16::from_f32(w).to_f32()).collect(),
            WeightFormat::F32 => w.to_vec(),
        }
    }

    #[test]
    fn products_match_the_plain_sums_for_any_shape_and_format() {
        // Outputs not a whole number of panels, odd inputs, row counts around the tile of six,
        // and a matrix large enough to be split over threads.
        for format in [WeightFormat::F32, WeightFormat::F16] {
            for (n_out, n_in) in [(1, 1), (16, 8), (37, 5), (130, 33), (300, 128)] {
                // Multiples of 1/50: most are not f16 numbers.
                let w: Vec<f32> = (0..n_out * n_in)
                    .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
                    .collect();
                let rows: Vec<&[f32]> = w.chunks(n_in).collect();
                let packed = PackedMatrix::new(&rows, n_in, format);
                let stored = as_stored(&w, format);
                assert_eq!(packed.format(), format);
                let held_in_f16 = matches!(packed.panels, Panels::F16(_));
                assert_eq!(
                    held_in_f16,
                    format == WeightFormat::F16 && WeightFormat::f16_converts_here()
                );
                for m in [0, 1, 2, 6, 7, 13] {
                    let case = format!("{format:?}, {m} rows, {n_out}×{n_in}");
                    check_products(&packed, &stored, m, &case);
                    if format == WeightFormat::F16 && m > 0 && n_in > 1 {
                        // The rounding is real: the f32 weights' products are others.
                        let exact = reference(&inputs(m * n_in), &w, n_out, n_in);
                        let rounded = reference(&inputs(m * n_in), &stored, n_out, n_in);
                        assert!(
                            exact
                                .iter()
                                .zip(&rounded)
                                .any(|(a, b)| (a - b).abs() > 1e-4 * (1.0 + a.abs())),
                            "{case}"
                        );
                    }
                }
            }
        }
    }

    /// m rows of inputs.
    fn inputs(len: usize) -> Vec<f32> {
        (0..len)
            .map(|i| ((i * 11 % 23) as f32 - 11.0) / 7.0)
            .collect()
    }

    /// The products of `packed` for m rows of inputs against the plain sums over `stored`, the
    /// weights as packed; for one row also split into parts as the decoder's threads take them.
    fn check_products(packed: &PackedMatrix, stored: &[f32], m: usize, case: &str) {
        let (n_out, n_in) = packed.shape();
        let x = inputs(m * n_in);
        let want = reference(&x, stored, n_out, n_in);
        let close = |got: &[f32], what: &str| {
            for (got, want) in got.iter().zip(&want) {
                assert!(
                    (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
                    "{what}, {case}: {got} vs {want}"
                );
            }
        };
        let mut out = vec![f32::NAN; m * n_out];
        packed.product(&x, &mut out);
        close(&out, "product");
        if m == 1 {
            for parts in [1, 2, 3, 64] {
                let mut out = vec![f32::NAN; n_out];
                for (panels, out) in packed.output_parts(&mut out, parts) {
                    packed.panels_product(&x, panels, out);
                }
                close(&out, "output_parts");
            }
        }
    }

    #[test]
    fn weights_beyond_f16_stay_f32() {
        for odd in [1e5, -7e4, f32::INFINITY, f32::NAN] {
            let mut w: Vec<f32> = (0..40 * 9).map(|i| (i % 13) as f32 / 13.0).collect();
            w[17] = odd;
            let rows: Vec<&[f32]> = w.chunks(9).collect();
            let packed = PackedMatrix::new(&rows, 9, WeightFormat::F16);
            assert_eq!(packed.format(), WeightFormat::F32, "a weight of {odd}");
            if odd.is_finite() {
                check_products(&packed, &w, 2, &format!("a weight of {odd}"));
            }
        }
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    #[cfg_attr(not(cpu_avx512), ignore = "this CPU has no AVX-512")]
    fn the_avx512_kernels_give_the_portable_sums_bit_for_bit() {
        use crate::ops::isa::Isa;
        assert!(
            Isa::Avx512.runs_here(),
            "built on a CPU with AVX-512, but this one lacks it: `cargo clean` and test again"
        );
        avx512_kernels_against_the_portable_ones();
    }

    /// The AVX-512 kernels' sums on a tile of rows and a remainder of inputs, in f32 and f16.
    #[cfg(target_arch = "x86_64")]
    fn avx512_kernels_against_the_portable_ones() {
        let n_in = 37; // a remainder after the sets of four inputs
        let w: Vec<f32> = (0..PANEL * n_in)
            .map(|i| ((i * 29 % 97) as f32 - 48.0) / 31.0)
            .collect();
        let rows: Vec<&[f32]> = w.chunks(n_in).collect();
        let x = inputs(TILE_ROWS * n_in);
        let x_rows: [&[f32]; TILE_ROWS] = std::array::from_fn(|r| &x[r * n_in..(r + 1) * n_in]);
        for format in [WeightFormat::F32, WeightFormat::F16] {
            let packed = PackedMatrix::new(&rows, n_in, format);
            match &packed.panels {
                Panels::F32(data) => same_sums(x_rows, data),
                Panels::F16(data) => same_sums(x_rows, data),
            }
        }
    }

    /// Asserts that the AVX-512 kernels give the portable ones' sums bit for bit, for the first
    /// row and for the tile of all rows. Only where the CPU has AVX-512.
    #[cfg(target_arch = "x86_64")]
    fn same_sums<R: PanelRow>(x: [&[f32]; TILE_ROWS], data: &[R]) {
        // SAFETY: the callers checked that the CPU has AVX-512.
        let (one, six) = unsafe { (panel_product_avx512(x[0], data), tile_avx512(x, data)) };
        let bits = |row: [f32; PANEL]| row.map(f32::to_bits);
        assert_eq!(bits(one), bits(panel_product(x[0], data)));
        assert_eq!(six.map(bits), tile(x, data).map(bits));
    }
}
