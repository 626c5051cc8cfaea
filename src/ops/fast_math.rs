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
    let x = x.clamp(-87.0, 88.0);
    let n = (x * LOG2_E + ROUND_MAGIC) - ROUND_MAGIC; // nearest integer to x/ln2
                                                      // f = x − n·ln2 in two steps (Cody & Waite), so that f keeps its precision; |f| ≤ ln2/2.
    let f = (x - n * LN2_HI) - n * LN2_LO;
    // Taylor series of e^f to degree 7: error below 1e-8 on |f| ≤ 0.347.
    let p = 1.0
        + f * (1.0
            + f * (0.5
                + f * (1.0 / 6.0
                    + f * (1.0 / 24.0 + f * (1.0 / 120.0 + f * (1.0 / 720.0 + f / 5040.0))))));
    let scale = f32::from_bits(((n as i32 + 127) << 23) as u32); // 2^n
    p * scale
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
    }
}
