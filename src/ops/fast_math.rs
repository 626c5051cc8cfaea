//! Branch-free exp and erf for f32 that the compiler can vectorise (libm's are called one element
//! at a time). Relative error of `exp` below 2e-7; absolute error of `erf` below 5e-7.

const LOG2_E: f32 = std::f32::consts::LOG2_E;
/// 1.5·2²³: adding and subtracting it rounds an f32 to the nearest integer.
const ROUND_MAGIC: f32 = 12_582_912.0;
/// ln 2 split into a part with few significant bits and the rest.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;

/// e^x. Inputs below −87 give about 1e-38 instead of 0; NaN stays NaN.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    let input = x;
    let x = x.max(-87.0).min(88.0);
    // The nearest integer to x/ln2 lands in the low mantissa bits of `biased`.
    let biased = x * LOG2_E + ROUND_MAGIC;
    let n = biased - ROUND_MAGIC;
    // f = x − n·ln2 in two steps (Cody & Waite), so that f keeps its precision; |f| ≤ ln2/2.
    let f = (x - n * LN2_HI) - n * LN2_LO;
    // Taylor series of e^f to degree 7: error below 1e-8 on |f| ≤ 0.347.
    let p = 1.0
        + f * (1.0
            + f * (0.5
                + f * (1.0 / 6.0
                    + f * (1.0 / 24.0 + f * (1.0 / 120.0 + f * (1.0 / 720.0 + f / 5040.0))))));
    let n_bits = biased.to_bits().wrapping_sub(ROUND_MAGIC.to_bits()); // n, two's complement
    let scale = f32::from_bits(n_bits.wrapping_add(127) << 23); // 2^n
    if input.is_nan() {
        input
    } else {
        p * scale
    }
}

/// erf(x), Abramowitz & Stegun 7.1.26.
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let a = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * a);
    let poly = t
        * (0.254_829_6
            + t * (-0.284_496_74 + t * (1.421_413_7 + t * (-1.453_152_1 + t * 1.061_405_4))));
    let y = 1.0 - poly * exp(-a * a);
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
        for (a, v) in acc.iter_mut().zip(chunk) {
            *a += v;
        }
    }
    acc.iter().sum::<f32>() + tail
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
        for (a, &v) in acc.iter_mut().zip(chunk) {
            *a = a.max(v);
        }
    }
    acc.iter().cloned().fold(tail, f32::max)
}

/// Σ e^(v − shift), in eight lanes.
#[inline(always)]
pub fn sum_exp(values: &[f32], shift: f32) -> f32 {
    let mut acc = [0f32; LANES];
    let chunks = values.chunks_exact(LANES);
    let tail: f32 = chunks.remainder().iter().map(|&v| exp(v - shift)).sum();
    for chunk in chunks {
        for (a, &v) in acc.iter_mut().zip(chunk) {
            *a += exp(v - shift);
        }
    }
    acc.iter().sum::<f32>() + tail
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
        let plain: f32 = values.iter().map(|v| (v - 1.0).exp()).sum();
        assert!((super::sum_exp(&values, 1.0) - plain).abs() < 1e-5 * plain);
    }
}
