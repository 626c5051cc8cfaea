//! The conversions with AVX512-BF16 (and AVX512-BW's word permutation).

use std::arch::x86_64::*;

/// Whether the CPU has the features of the functions below.
pub(super) fn available() -> bool {
    crate::ops::cpu_features::avx512bf16()
}

/// [`super::convert`] of 32 values. Safety: the CPU must have the features [`available`]
/// checks.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(super) unsafe fn convert32(dst: &mut [u16; 32], src: &[f32; 32]) {
    // SAFETY: `src` holds 32 floats, read as two unaligned vectors of 16.
    let (lo, hi) = unsafe {
        (
            _mm512_loadu_ps(src.as_ptr()),
            _mm512_loadu_ps(src.as_ptr().add(16)),
        )
    };
    // SAFETY: __m512bh and __m512i are both 512 plain bits.
    let packed: __m512i = unsafe { std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo)) };
    // SAFETY: `dst` holds 32 u16, 512 bits, written unaligned.
    unsafe { _mm512_storeu_si512(dst.as_mut_ptr().cast(), packed) };
}

/// A whole left block: row r of `block` = the 32 values from r·`stride` in `src`, rounded.
/// Safety: the CPU must have the features [`available`] checks.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(super) unsafe fn lhs_block(block: &mut [u16; 1024], src: &[f32], stride: usize) {
    for (r, out) in block.chunks_exact_mut(32).enumerate() {
        let row = &src[r * stride..r * stride + 32];
        // SAFETY: the caller's contract: the CPU has the features.
        unsafe { convert32(out.try_into().expect("32"), row.try_into().expect("32")) };
    }
}

/// [`super::interleave`]. Safety: the CPU must have the features [`available`] checks.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(super) unsafe fn interleave(out: &mut [u16; 32], first: &[f32; 16], second: &[f32; 16]) {
    // Word c of the result is word c / 2 (first) or 16 + c / 2 (second).
    let order = _mm512_set_epi16(
        31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5, 20, 4,
        19, 3, 18, 2, 17, 1, 16, 0,
    );
    // SAFETY: `first` and `second` hold 16 floats each, one unaligned vector.
    let (a, b) = unsafe {
        (
            _mm512_loadu_ps(first.as_ptr()),
            _mm512_loadu_ps(second.as_ptr()),
        )
    };
    // SAFETY: __m512bh and __m512i are both 512 plain bits.
    let both: __m512i = unsafe { std::mem::transmute(_mm512_cvtne2ps_pbh(b, a)) };
    let ordered = _mm512_permutexvar_epi16(order, both);
    // SAFETY: `out` holds 32 u16, 512 bits, written unaligned.
    unsafe { _mm512_storeu_si512(out.as_mut_ptr().cast(), ordered) };
}

/// out = the transpose of the 32 × 32 matrix `src` (row-major, 16-bit values): five rounds
/// that each swap the off-diagonal halves of sub-blocks of 16, 8, 4, 2 and 1 rows and columns,
/// one word permute per row and round. Safety: the CPU must have the features [`available`]
/// checks.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn transpose_block(out: &mut [u16; 1024], src: &[u16; 1024]) {
    // SAFETY: row r reads the 32 u16 from r·32 of the 1024 in `src`.
    let mut rows: [__m512i; 32] =
        std::array::from_fn(|r| unsafe { _mm512_loadu_si512(src[r * 32..].as_ptr().cast()) });
    for half in [16, 8, 4, 2, 1] {
        // Row r (r & half = 0) keeps its columns c with c & half = 0 and takes row r + half's
        // columns c − half for the others; row r + half the converse.
        let index = |upper: bool| {
            let words: [i16; 32] = std::array::from_fn(|c| {
                let (c, h) = (c as i16, half as i16);
                match (c & h == 0, upper) {
                    (true, false) => c,
                    (false, false) => 32 + c - h,
                    (true, true) => c + h,
                    (false, true) => 32 + c,
                }
            });
            // SAFETY: `words` holds 32 i16, 512 bits.
            unsafe { _mm512_loadu_si512(words.as_ptr().cast()) }
        };
        let (lower_index, upper_index) = (index(false), index(true));
        for r in (0..32).filter(|r| r & half == 0) {
            let (a, b) = (rows[r], rows[r + half]);
            rows[r] = _mm512_permutex2var_epi16(a, lower_index, b);
            rows[r + half] = _mm512_permutex2var_epi16(a, upper_index, b);
        }
    }
    for (r, row) in rows.iter().enumerate() {
        // SAFETY: row r writes the 32 u16 from r·32 of the 1024 in `out`.
        unsafe { _mm512_storeu_si512(out[r * 32..].as_mut_ptr().cast(), *row) };
    }
}

/// [`super::relayout_block`]. Safety: the CPU must have the features [`available`] checks.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn relayout_block(block: &mut [u16; 1024], source: &[u16; 1024]) {
    // Word 2c of tile t's row p is word t·16 + c of source row 2p, word 2c + 1 the same of
    // row 2p + 1 (indices from 32 on pick from the second operand).
    let order = |t: i16| {
        let w = |c: i16| [t * 16 + c, 32 + t * 16 + c];
        let words: [i16; 32] = std::array::from_fn(|i| w(i as i16 / 2)[i % 2]);
        // SAFETY: `words` holds 32 i16, 512 bits.
        unsafe { _mm512_loadu_si512(words.as_ptr().cast()) }
    };
    let orders = [order(0), order(1)];
    for p in 0..16 {
        // SAFETY: rows 2p and 2p + 1 (p < 16) of `source`'s 32 rows of 32 u16.
        let (first, second) = unsafe {
            (
                _mm512_loadu_si512(source[2 * p * 32..].as_ptr().cast()),
                _mm512_loadu_si512(source[(2 * p + 1) * 32..].as_ptr().cast()),
            )
        };
        for (tile, order) in orders.iter().enumerate() {
            let out = &mut block[tile * 512 + p * 32..][..32];
            let pairs = _mm512_permutex2var_epi16(first, *order, second);
            // SAFETY: `out` is a slice of 32 u16, 512 bits.
            unsafe { _mm512_storeu_si512(out.as_mut_ptr().cast(), pairs) };
        }
    }
}
