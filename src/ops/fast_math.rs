//! Branch-free exp and erf for f32 that the compiler can vectorise (libm's are called one element
//! at a time). Relative error of `exp` below 2e-7; absolute error of `erf` below 5e-7.

const LOG2_E: f32 = std::f32::consts::LOG2_E;
/// 1.5·2²³: adding and subtracting it rounds an f32 to the nearest integer.
const ROUND_MAGIC: f32 = 12_582_912.0;
/// ln 2 split into a part with few significant bits and the rest.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;

/// e^x. Inputs below −87 give about 1e-38 instead of 0; NaN stays NaN (`clamp` keeps it, and
/// every step after propagates it: no select needed).
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    let x = x.clamp(-87.0, 88.0);
    // The nearest integer to x/ln2 lands in the low mantissa bits of `biased`.
    let biased = x.mul_add(LOG2_E, ROUND_MAGIC);
    let n = biased - ROUND_MAGIC;
    // f = x − n·ln2 in two steps (Cody & Waite), so that f keeps its precision; |f| ≤ ln2/2.
    let f = n.mul_add(-LN2_LO, n.mul_add(-LN2_HI, x));
    // Taylor series of e^f to degree 7 (error below 1e-8 on |f| ≤ 0.347), in fused
    // multiply-adds: a chain half as long as separate multiplies and adds.
    let p = [
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
        1.0,
        1.0,
    ]
    .iter()
    .fold(1.0 / 5040.0, |p: f32, &c| p.mul_add(f, c));
    let n_bits = biased.to_bits().wrapping_sub(ROUND_MAGIC.to_bits()); // n, two's complement
    let scale = f32::from_bits(n_bits.wrapping_add(127) << 23); // 2^n
    p * scale
}

/// ln x for f32, the same bits on every system: f32's `ln` is the C library's `logf`, whose last
/// bit differs between them (glibc and MinGW's gave one loss 1e-10 apart), while f64's `log`
/// rounded to f32 is correctly rounded on both unless it lies within an f64 ulp of a rounding
/// boundary (a chance of about 2⁻²⁹). Called once per row, so its cost does not show.
#[inline(always)]
pub fn ln(x: f32) -> f32 {
    (x as f64).ln() as f32
}

/// erf(x), Abramowitz & Stegun 7.1.26.
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    erf_with_gaussian(x, exp(-x * x))
}

/// erf(x) given `gaussian` = e^(−x²), which the formula uses (so that a caller that needs that
/// exponential too computes it once).
#[inline(always)]
pub fn erf_with_gaussian(x: f32, gaussian: f32) -> f32 {
    let a = x.abs();
    let t = 1.0 / a.mul_add(0.327_591_1, 1.0);
    let poly = t * [-1.453_152_1, 1.421_413_7, -0.284_496_74, 0.254_829_6]
        .iter()
        .fold(1.061_405_4, |p: f32, &c| p.mul_add(t, c));
    let y = poly.mul_add(-gaussian, 1.0);
    y.copysign(x)
}

/// Lanes of the accumulators below: eight independent sums let the compiler use SIMD registers
/// (a single running sum must add in order, one element at a time).
const LANES: usize = 8;

/// Σ values, summed in eight lanes.
#[inline(always)]
pub fn sum(values: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let chunks = values.chunks_exact(LANES);
    let tail: f32 = chunks.remainder().iter().sum();
    for chunk in chunks {
        let chunk: &[f32; LANES] = chunk.try_into().expect("chunk of LANES");
        for l in 0..LANES {
            acc[l] += chunk[l];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// Σ a_i b_i, summed in four independent sets of eight lanes (so that the additions overlap).
#[inline(always)]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    const WIDTH: usize = 4 * LANES;
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0f32; WIDTH];
    let (ca, cb) = (a.chunks_exact(WIDTH), b.chunks_exact(WIDTH));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        let x: &[f32; WIDTH] = x.try_into().expect("chunk of WIDTH");
        let y: &[f32; WIDTH] = y.try_into().expect("chunk of WIDTH");
        for l in 0..WIDTH {
            acc[l] = x[l].mul_add(y[l], acc[l]);
        }
    }
    sum(&acc) + tail
}

/// Rows in one [`dot_rows`] call: eight accumulators, one SIMD register each.
pub const DOT_GROUP: usize = 8;

/// The dot products of `x` with each of `rows` (all at least as long as `x`), eight at a time:
/// each load of `x` serves eight products, and the eight sums are reduced together at the end.
/// Where the CPU has AVX2 and FMA it is written with their intrinsics, since the compiler
/// vectorises the portable loop across the rows instead of along them.
#[inline(always)]
pub fn dot_rows(x: &[f32], rows: [&[f32]; DOT_GROUP]) -> [f32; DOT_GROUP] {
    let n = x.len();
    let rows = rows.map(|r| &r[..n]);
    let done = n / LANES * LANES;
    let mut sums = dot_rows_lanes(&x[..done], rows.map(|r| &r[..done]));
    if done < n {
        for (s, r) in sums.iter_mut().zip(rows) {
            *s += (done..n).map(|i| x[i] * r[i]).sum::<f32>();
        }
    }
    sums
}

/// `dot_rows` for lengths that are a multiple of [`LANES`]: with AVX2 and FMA intrinsics where the
/// CPU has them (detected at run time), else the portable dot products.
#[inline(always)]
fn dot_rows_lanes(x: &[f32], rows: [&[f32]; DOT_GROUP]) -> [f32; DOT_GROUP] {
    let n = x.len();
    assert!(n.is_multiple_of(LANES) && rows.iter().all(|r| r.len() == n));
    #[cfg(target_arch = "x86_64")]
    if super::isa::Isa::detected() != super::isa::Isa::Portable {
        // SAFETY: both vector instruction sets `detected` picks include AVX2 and FMA; the
        // lengths are checked above.
        return unsafe { dot_rows_avx2(x, rows) };
    }
    rows.map(|r| dot(x, r))
}

/// [`dot_rows_lanes`] with AVX2 and FMA. Safety: the CPU must have both, and every row must be as
/// long as `x`, a multiple of [`LANES`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_rows_avx2(x: &[f32], rows: [&[f32]; DOT_GROUP]) -> [f32; DOT_GROUP] {
    use std::arch::x86_64::*;
    let n = x.len();
    // Every load reads LANES floats at c < n from slices of length n (the caller's contract).
    let mut acc = [_mm256_setzero_ps(); DOT_GROUP];
    for c in (0..n).step_by(LANES) {
        // SAFETY: c + LANES ≤ n = x.len() (n a multiple of LANES).
        let xs = unsafe { _mm256_loadu_ps(x.as_ptr().add(c)) };
        for (a, r) in acc.iter_mut().zip(&rows) {
            // SAFETY: every row is as long as `x` (the caller's contract).
            let row = unsafe { _mm256_loadu_ps(r.as_ptr().add(c)) };
            *a = _mm256_fmadd_ps(xs, row, *a);
        }
    }
    // Pairwise horizontal adds leave, in each 128-bit half, partial sums of four rows:
    // quads[0] = [s0 s1 s2 s3 | s0 s1 s2 s3] (low and high halves), quads[1] the same for s4..s7.
    let pairs = [
        _mm256_hadd_ps(acc[0], acc[1]),
        _mm256_hadd_ps(acc[2], acc[3]),
        _mm256_hadd_ps(acc[4], acc[5]),
        _mm256_hadd_ps(acc[6], acc[7]),
    ];
    let quads = [
        _mm256_hadd_ps(pairs[0], pairs[1]),
        _mm256_hadd_ps(pairs[2], pairs[3]),
    ];
    let low = _mm256_permute2f128_ps::<0x20>(quads[0], quads[1]);
    let high = _mm256_permute2f128_ps::<0x31>(quads[0], quads[1]);
    let mut out = [0f32; DOT_GROUP];
    // SAFETY: `out` holds DOT_GROUP (8) floats, one vector.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), _mm256_add_ps(low, high)) };
    out
}

/// The largest value (−∞ for an empty slice), in eight lanes.
#[inline(always)]
pub fn max(values: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let chunks = values.chunks_exact(LANES);
    let tail = chunks
        .remainder()
        .iter()
        .cloned()
        .fold(f32::NEG_INFINITY, f32::max);
    for chunk in chunks {
        let chunk: &[f32; LANES] = chunk.try_into().expect("chunk of LANES");
        for l in 0..LANES {
            acc[l] = acc[l].max(chunk[l]);
        }
    }
    acc.iter().cloned().fold(tail, f32::max)
}

/// Replaces each v by e^(v − shift) and returns their sum (equal to [`sum_exp`]'s).
#[inline(always)]
pub fn exp_in_place(values: &mut [f32], shift: f32) -> f32 {
    let mut total = 0f32;
    for block in values.chunks_mut(8 * LANES) {
        for v in block.iter_mut() {
            *v = exp(*v - shift);
        }
        total += sum(block);
    }
    total
}

/// Replaces `values` by their softmax: e^(v − max) / Σ e^(v − max).
#[inline(always)]
pub fn softmax_in_place(values: &mut [f32]) {
    let max = max(values);
    let inv_total = 1.0 / exp_in_place(values, max);
    values.iter_mut().for_each(|v| *v *= inv_total);
}

/// Σ e^(v − shift). The exponentials go through a block buffer first: a plain map loop is what
/// the compiler vectorises (fused into the lane sums, the exp stayed scalar, 7× slower).
#[inline(always)]
pub fn sum_exp(values: &[f32], shift: f32) -> f32 {
    const BLOCK: usize = 8 * LANES;
    let mut buffer = [0f32; BLOCK];
    let mut total = 0f32;
    for block in values.chunks(BLOCK) {
        let exps = &mut buffer[..block.len()];
        for (e, &v) in exps.iter_mut().zip(block) {
            *e = exp(v - shift);
        }
        total += sum(exps);
    }
    total
}

#[cfg(test)]
mod tests {
    #[test]
    fn exp_and_erf_match_libm() {
        for i in -2000..=2000 {
            let x = i as f32 * 0.04;
            let (fast, exact) = (super::exp(x), x.exp());
            assert!(
                (fast - exact).abs() <= 2e-7 * exact,
                "exp({x}) = {fast}, libm {exact}"
            );
            let (fast, exact) = (
                super::erf(x / 10.0),
                candle_core::cpu::erf::erf_f32(x / 10.0),
            );
            assert!(
                (fast - exact).abs() < 5e-7,
                "erf({}) = {fast}, libm {exact}",
                x / 10.0
            );
        }
        assert!(super::exp(f32::NAN).is_nan());
        // NaN in a vectorised loop, with finite neighbours in the same vector.
        let mut lanes = [0.5f32; 16];
        lanes[5] = f32::NAN;
        super::exp_in_place(&mut lanes, 0.0);
        assert!(lanes[5].is_nan() && lanes.iter().filter(|v| v.is_nan()).count() == 1);
        assert!(super::exp(-1e30) < 1e-37);
        let values: Vec<f32> = (0..37)
            .map(|i| ((i * 7919) % 101) as f32 / 10.0 - 5.0)
            .collect();
        let plain_sum: f32 = values.iter().sum();
        assert!((super::sum(&values) - plain_sum).abs() < 1e-4);
        assert_eq!(
            super::max(&values),
            values.iter().cloned().fold(f32::MIN, f32::max)
        );
        // Eight dot products at once, with a length that is not a multiple of the lanes.
        let rows: Vec<Vec<f32>> = (0..super::DOT_GROUP)
            .map(|r| values.iter().map(|v| v * (r as f32 - 3.5)).collect())
            .collect();
        let dots = super::dot_rows(&values, std::array::from_fn(|r| &rows[r][..]));
        for (r, row) in rows.iter().enumerate() {
            let plain: f32 = values.iter().zip(row).map(|(a, b)| a * b).sum();
            assert!(
                (dots[r] - plain).abs() < 1e-3,
                "row {r}: {} vs {plain}",
                dots[r]
            );
        }
        let plain: f32 = values.iter().map(|v| (v - 1.0).exp()).sum();
        assert!((super::sum_exp(&values, 1.0) - plain).abs() < 1e-5 * plain);
        let mut exps = values.clone();
        assert_eq!(
            super::exp_in_place(&mut exps, 1.0),
            super::sum_exp(&values, 1.0)
        );
        for (e, v) in exps.iter().zip(&values) {
            assert!((e - (v - 1.0).exp()).abs() < 1e-6 * e);
        }
    }
}
