//! bf16 products on AVX512-BF16's `vdpbf16ps`, for CPUs without the AMX tile unit (AMD Zen 4
//! and later, Intel Cooper Lake): one instruction adds to 16 f32 lanes the products of 16 pairs
//! of bf16, the right operand's pairs of consecutive k as its packed blocks hold them and the
//! left operand's pair broadcast to every lane. Twice the f32 FMA rate per instruction.

#[cfg(target_arch = "x86_64")]
use super::{avx512, blocks, BLOCK, BLOCK_LEN};
use super::{Lhs, Rhs};

/// Whether this CPU has the instructions of the kernel.
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    return avx512::available();
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Rows of the result one pass keeps in registers: 8 rows × 32 columns, 16 zmm accumulators
/// (enough independent sums to hide the instruction's latency).
#[cfg(target_arch = "x86_64")]
const STRIP: usize = 8;

/// The rows from `first`·32 on of the product (`dst` holds whole blocks of 32 rows of n
/// columns, fewer rows at the bottom edge) = (dst if `accumulate`) + lhs · rhs.
#[cfg(target_arch = "x86_64")]
pub(super) fn row_blocks(
    dst: &mut [f32],
    n: usize,
    lhs: &Lhs,
    rhs: &Rhs,
    first: usize,
    accumulate: bool,
) {
    assert!(available() && lhs.k == rhs.k && rhs.n == n && n > 0 && dst.len().is_multiple_of(n));
    assert!(first * BLOCK + dst.len() / n <= lhs.m);
    let k_blocks = blocks(lhs.k);
    // The 32 rows × 32 columns of the result at row block `rb` (`rows`: its rows) and column
    // block `cb`.
    let block = |rows: &mut [f32], rb: usize, cb: usize| {
        let a = &lhs.data[rb * k_blocks * BLOCK_LEN..(rb + 1) * k_blocks * BLOCK_LEN];
        let b = &rhs.data[cb * k_blocks * BLOCK_LEN..(cb + 1) * k_blocks * BLOCK_LEN];
        let (cols, height) = (BLOCK.min(n - cb * BLOCK), rows.len() / n);
        for top in (0..height).step_by(STRIP) {
            let out = &mut rows[top * n + cb * BLOCK..];
            let shape = (STRIP.min(height - top), cols, n);
            // SAFETY: `available` checked the target features.
            unsafe { strip(out, shape, a, b, top, accumulate) };
        }
    };
    // The operand of fewer blocks is read again for each block of the other, from the cache:
    // the output layer's 6,000 columns go once through the cache for all rows of a chunk.
    if dst.len().div_ceil(BLOCK * n) < blocks(n) {
        for cb in 0..blocks(n) {
            for (i, rows) in dst.chunks_mut(BLOCK * n).enumerate() {
                block(rows, first + i, cb);
            }
        }
    } else {
        for (i, rows) in dst.chunks_mut(BLOCK * n).enumerate() {
            for cb in 0..blocks(n) {
                block(rows, first + i, cb);
            }
        }
    }
}

/// One strip of a 32 × 32 block of the result: rows `top` … `top` + 7 of the row block (the
/// first `height` of them, in `out` at r·n, `cols` ≤ 32 columns each; `shape` = (height, cols,
/// n)) = (out if `accumulate`) + the strip's rows of `a` (a row block's packed left blocks along
/// k) · `b` (a column block's packed right blocks along k). Each sum runs over k in order, pair
/// by pair, and is then added to `out`'s value. Safety: the CPU must have the features
/// [`available`] checks.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn strip(
    out: &mut [f32],
    (height, cols, n): (usize, usize, usize),
    a: &[u16],
    b: &[u16],
    top: usize,
    accumulate: bool,
) {
    use std::arch::x86_64::*;
    assert!(a.len() == b.len() && a.len().is_multiple_of(BLOCK_LEN) && top + STRIP <= BLOCK);
    assert!(height <= STRIP && (1..=BLOCK).contains(&cols) && cols <= n);
    assert!(height == 0 || (height - 1) * n + cols <= out.len());
    // Lanes of the two halves of a row's 32 columns that lie inside the result.
    let masks: [__mmask16; 2] = [
        (1u32 << cols.min(16)).wrapping_sub(1) as u16,
        (1u32 << cols.saturating_sub(16)).wrapping_sub(1) as u16,
    ];
    // The result's lines are fetched while the products run (a fresh buffer's are not cached):
    // added to the sums at the end.
    for r in 0..height {
        for half in (0..cols).step_by(16) {
            _mm_prefetch::<_MM_HINT_T0>(out[r * n + half..].as_ptr().cast());
        }
    }
    let mut acc = [[_mm512_setzero_ps(); 2]; STRIP];
    // SAFETY: __m512i and __m512bh are both 512 plain bits.
    let to_bh = |v: __m512i| -> __m512bh { unsafe { std::mem::transmute(v) } };
    for (a, b) in a.chunks_exact(BLOCK_LEN).zip(b.chunks_exact(BLOCK_LEN)) {
        // Row r of the strip: 32 consecutive k at (top + r)·32 of the left block; pair p of a
        // right tile's columns: 32 values at p·32 of the tile (tiles of 16 columns, 512 apart).
        let rows = &a[top * BLOCK..(top + STRIP) * BLOCK];
        for p in 0..16 {
            let pairs = [
                &b[p * BLOCK..][..BLOCK],
                &b[BLOCK_LEN / 2 + p * BLOCK..][..BLOCK],
            ];
            // SAFETY: each line is a slice of BLOCK (32) u16, 512 bits.
            let pairs =
                pairs.map(|line| to_bh(unsafe { _mm512_loadu_si512(line.as_ptr().cast()) }));
            for (r, sums) in acc.iter_mut().enumerate() {
                let pair = &rows[r * BLOCK + 2 * p..][..2];
                let pair = u32::from(pair[0]) | u32::from(pair[1]) << 16;
                let broadcast = to_bh(_mm512_set1_epi32(pair as i32));
                sums[0] = _mm512_dpbf16_ps(sums[0], broadcast, pairs[0]);
                sums[1] = _mm512_dpbf16_ps(sums[1], broadcast, pairs[1]);
            }
        }
    }
    for (r, row) in acc.iter().enumerate() {
        if r < height {
            for (half, sum) in row.iter().enumerate().filter(|(h, _)| h * 16 < cols) {
                let line = &mut out[r * n + half * 16..r * n + cols.min(half * 16 + 16)];
                // SAFETY: the mask's lanes are the `line.len()` (at most 16) values of `line`;
                // masked-off lanes are neither read nor written.
                let sum = if accumulate {
                    let old = unsafe { _mm512_maskz_loadu_ps(masks[half], line.as_ptr()) };
                    _mm512_add_ps(old, *sum)
                } else {
                    *sum
                };
                // SAFETY: as the load above.
                unsafe { _mm512_mask_storeu_ps(line.as_mut_ptr(), masks[half], sum) };
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
pub(super) fn row_blocks(_: &mut [f32], _: usize, _: &Lhs, _: &Rhs, _: usize, _: bool) {
    unreachable!("AVX512-BF16 is x86-64 only and `available` says so")
}
