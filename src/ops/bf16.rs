//! Matmuls with bf16 inputs and f32 accumulation, for mixed-precision training.
//!
//! Both operands are rounded to bf16 (8 bits of mantissa, f32's exponent range) and packed into
//! blocks of 32 × 32 (zero-padded at the edges); the products are summed in f32. On CPUs with
//! AMX-BF16 the blocks go through the tile unit (`tdpbf16ps`: a 16 × 16 f32 tile += a 16 × 32
//! bf16 tile · a 32 × 16 one), several times the f32 rate of AVX-512. Elsewhere the packed values
//! are widened back to f32 and multiplied by gemm: the same rounded inputs, so the numerics of
//! this mode are tested on every machine (only the order of the f32 sums differs).

use super::{matmul_on, Operand};
use rayon::prelude::*;
use std::ops::Range;

/// Rows and columns of one packed block; an AMX tile holds 16 rows of 32 bf16 (64 bytes).
const BLOCK: usize = 32;
/// Values in one packed block.
const BLOCK_LEN: usize = BLOCK * BLOCK;

/// The 16 bits of `x` rounded to the nearest bf16, ties to even (as `vcvtneps2bf16`); a NaN stays
/// a (quiet) NaN. Branch-free, so that loops over it vectorise.
#[inline(always)]
pub fn to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1)) >> 16;
    let quiet_nan = (bits >> 16) | 0x40;
    (if x.is_nan() { quiet_nan } else { rounded }) as u16
}

/// dst = src rounded to bf16, element by element: 32 at a time with AVX512-BF16's
/// `vcvtne2ps2bf16` where the CPU has it (the same rounding; that instruction also flushes
/// subnormal inputs, below 1.2e-38, to zero).
fn convert(dst: &mut [u16], src: &[f32]) {
    let dst = &mut dst[..src.len()];
    #[cfg(target_arch = "x86_64")]
    let done = if avx512::available() {
        let (d, s) = (dst.chunks_exact_mut(BLOCK), src.chunks_exact(BLOCK));
        let done = s.len() * BLOCK;
        for (d, s) in d.zip(s) {
            let (d, s) = (d.try_into().expect("32"), s.try_into().expect("32"));
            // SAFETY: `available` checked the target features.
            unsafe { avx512::convert32(d, s) };
        }
        done
    } else {
        0
    };
    #[cfg(not(target_arch = "x86_64"))]
    let done = 0;
    dst[done..]
        .iter_mut()
        .zip(&src[done..])
        .for_each(|(d, &s)| *d = to_bf16(s));
}

/// out = the pairs (first[c], second[c]) for c = 0…15, rounded to bf16: one row of a right
/// operand's tile.
fn interleave(out: &mut [u16; BLOCK], first: &[f32; 16], second: &[f32; 16]) {
    #[cfg(target_arch = "x86_64")]
    if avx512::available() {
        // SAFETY: `available` checked the target features.
        return unsafe { avx512::interleave(out, first, second) };
    }
    for (c, pair) in out.chunks_exact_mut(2).enumerate() {
        (pair[0], pair[1]) = (to_bf16(first[c]), to_bf16(second[c]));
    }
}

/// The conversions with AVX512-BF16 (and AVX512-BW's word permutation).
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    /// Whether the CPU has the features of the functions below.
    pub(super) fn available() -> bool {
        std::arch::is_x86_feature_detected!("avx512bf16")
            && std::arch::is_x86_feature_detected!("avx512bw")
    }

    /// [`super::convert`] of 32 values. Safety: the CPU must have the features [`available`]
    /// checks.
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    pub(super) unsafe fn convert32(dst: &mut [u16; 32], src: &[f32; 32]) {
        let (lo, hi) = (
            _mm512_loadu_ps(src.as_ptr()),
            _mm512_loadu_ps(src.as_ptr().add(16)),
        );
        let packed: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
        _mm512_storeu_si512(dst.as_mut_ptr().cast(), packed);
    }

    /// A whole left block: row r of `block` = the 32 values from r·`stride` in `src`, rounded.
    /// Safety: the CPU must have the features [`available`] checks.
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    pub(super) unsafe fn lhs_block(block: &mut [u16; 1024], src: &[f32], stride: usize) {
        for (r, out) in block.chunks_exact_mut(32).enumerate() {
            let row = &src[r * stride..r * stride + 32];
            convert32(out.try_into().expect("32"), row.try_into().expect("32"));
        }
    }

    /// A whole right block: value (l, j) = `src`[l·`stride` + j], rounded, at
    /// [`super::rhs_offset`]. Safety: the CPU must have the features [`available`] checks.
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    pub(super) unsafe fn rhs_block(block: &mut [u16; 1024], src: &[f32], stride: usize) {
        let half = |l: usize, tile: usize| -> &[f32; 16] {
            let start = l * stride + tile * 16;
            src[start..start + 16].try_into().expect("16")
        };
        for pair in 0..16 {
            for tile in 0..2 {
                let out = &mut block[tile * 512 + pair * 32..][..32];
                let (first, second) = (half(2 * pair, tile), half(2 * pair + 1, tile));
                interleave(out.try_into().expect("32"), first, second);
            }
        }
    }

    /// [`super::interleave`]. Safety: the CPU must have the features [`available`] checks.
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    pub(super) unsafe fn interleave(out: &mut [u16; 32], first: &[f32; 16], second: &[f32; 16]) {
        // Word c of the result is word c / 2 (first) or 16 + c / 2 (second).
        let order = _mm512_set_epi16(
            31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5, 20,
            4, 19, 3, 18, 2, 17, 1, 16, 0,
        );
        let (a, b) = (
            _mm512_loadu_ps(first.as_ptr()),
            _mm512_loadu_ps(second.as_ptr()),
        );
        let both: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(b, a));
        _mm512_storeu_si512(
            out.as_mut_ptr().cast(),
            _mm512_permutexvar_epi16(order, both),
        );
    }

    /// out = the transpose of the 32 × 32 matrix `src` (row-major, 16-bit values): five rounds
    /// that each swap the off-diagonal halves of sub-blocks of 16, 8, 4, 2 and 1 rows and columns,
    /// one word permute per row and round. Safety: the CPU must have the features [`available`]
    /// checks.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn transpose_block(out: &mut [u16; 1024], src: &[u16; 1024]) {
        let mut rows: [__m512i; 32] =
            std::array::from_fn(|r| _mm512_loadu_si512(src[r * 32..].as_ptr().cast()));
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
                _mm512_loadu_si512(words.as_ptr().cast())
            };
            let (lower_index, upper_index) = (index(false), index(true));
            for r in (0..32).filter(|r| r & half == 0) {
                let (a, b) = (rows[r], rows[r + half]);
                rows[r] = _mm512_permutex2var_epi16(a, lower_index, b);
                rows[r + half] = _mm512_permutex2var_epi16(a, upper_index, b);
            }
        }
        for (r, row) in rows.iter().enumerate() {
            _mm512_storeu_si512(out[r * 32..].as_mut_ptr().cast(), *row);
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
            _mm512_loadu_si512(words.as_ptr().cast())
        };
        let orders = [order(0), order(1)];
        for p in 0..16 {
            let (first, second) = (
                _mm512_loadu_si512(source[2 * p * 32..].as_ptr().cast()),
                _mm512_loadu_si512(source[(2 * p + 1) * 32..].as_ptr().cast()),
            );
            for (tile, order) in orders.iter().enumerate() {
                let out = &mut block[tile * 512 + p * 32..][..32];
                let pairs = _mm512_permutex2var_epi16(first, *order, second);
                _mm512_storeu_si512(out.as_mut_ptr().cast(), pairs);
            }
        }
    }
}

/// The f32 of a bf16's 16 bits (exact).
pub fn from_bf16(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// `x` rounded to bf16 and back: the value a bf16 matmul multiplies.
pub fn round(x: f32) -> f32 {
    from_bf16(to_bf16(x))
}

/// A left operand (m × k) in bf16: blocks of 32 rows × 32 columns, each row of a block 32
/// consecutive k (the A tiles of `tdpbf16ps`), row blocks outermost.
pub(crate) struct Lhs {
    data: Vec<u16>,
    m: usize,
    k: usize,
}

/// A right operand (k × n) in bf16: blocks of 32 k × 32 columns, each block two tiles of 16
/// columns whose rows hold pairs of consecutive k side by side (Intel's "VNNI" layout for
/// `tdpbf16ps`), column blocks outermost.
pub(crate) struct Rhs {
    data: Vec<u16>,
    k: usize,
    n: usize,
}

/// Blocks along `len`, the last one padded.
fn blocks(len: usize) -> usize {
    len.div_ceil(BLOCK)
}

/// Packed blocks of an operand whose other dimension (m or n) is `outer` long: for each block
/// along it, the blocks along k in turn, each filled by `fill(block, outer range, k range)` (the
/// values past either end stay zero), on all threads.
fn pack_blocks(
    outer: usize,
    k: usize,
    fill: impl Fn(&mut [u16], Range<usize>, Range<usize>) + Sync,
) -> Vec<u16> {
    let range = |b: usize, len: usize| b * BLOCK..len.min(b * BLOCK + BLOCK);
    let mut data = spare::take(blocks(outer) * blocks(k) * BLOCK_LEN);
    data.par_chunks_mut(blocks(k) * BLOCK_LEN)
        .enumerate()
        .for_each(|(ob, along_k)| {
            for (kb, block) in along_k.chunks_mut(BLOCK_LEN).enumerate() {
                let (outer, ks) = (range(ob, outer), range(kb, k));
                // `fill` writes every value of a whole block; an edge block's padding is zeroed.
                if outer.len() < BLOCK || ks.len() < BLOCK {
                    block.fill(0);
                }
                fill(block, outer, ks);
            }
        });
    data
}

/// The buffers of dropped packed operands, kept per thread for the next packs instead of a fresh
/// zeroed allocation for each (several per product, up to 768 kB for the output layer's
/// gradient): the course model's bf16 training step ran 1.2 % faster (docs/performance.md).
mod spare {
    use crate::ops::scratch::Shelf;
    use std::cell::RefCell;

    /// Buffers kept per thread (the output layer holds five packed operands at once: W in two
    /// layouts, dlogits in two, xᵀ).
    const KEPT: usize = 8;

    thread_local! {
        static SHELF: RefCell<Shelf<u16>> = const { RefCell::new(Shelf::new(KEPT)) };
    }

    /// A buffer of `len` values, reused where this thread has one large enough (its values are
    /// left as they were: the packing writes every one).
    pub(super) fn take(len: usize) -> Vec<u16> {
        SHELF.with_borrow_mut(|shelf| shelf.take(len))
    }

    /// Keeps `data` for this thread's next [`take`] (nothing is kept while the thread itself is
    /// being torn down).
    pub(super) fn give_back(data: Vec<u16>) {
        let _ = SHELF.try_with(|shelf| shelf.borrow_mut().keep(data));
    }
}

/// Rounds values (i, l) of `op`, i in `rows`, l in `cols`, into a 32 × 32 block of a left
/// operand: (i, l) → block[(i − rows.start)·32 + l − cols.start]. Rows contiguous in the source
/// are converted in place; otherwise (a transposed source) the source's rows are converted into a
/// staging block, which is then transposed.
fn pack_lhs_block(block: &mut [u16], op: Operand, rows: Range<usize>, cols: Range<usize>) {
    let width = cols.len();
    #[cfg(target_arch = "x86_64")]
    let whole = width == BLOCK && rows.len() == BLOCK;
    #[cfg(target_arch = "x86_64")]
    if op.col_stride == 1 && whole && avx512::available() {
        let src = &op.data[rows.start * op.row_stride + cols.start..];
        let block = block.try_into().expect("one block");
        // SAFETY: `available` checked the target features.
        return unsafe { avx512::lhs_block(block, src, op.row_stride) };
    }
    if op.col_stride == 1 {
        for (r, i) in rows.enumerate() {
            let start = i * op.row_stride + cols.start;
            let (out, src) = (
                &mut block[r * BLOCK..][..width],
                &op.data[start..start + width],
            );
            convert(out, src);
        }
        return;
    }
    let mut stage = [0u16; BLOCK_LEN]; // (l − cols.start, i − rows.start)
    #[cfg(target_arch = "x86_64")]
    if avx512::available() {
        if op.row_stride == 1 && whole {
            let src = &op.data[cols.start * op.col_stride + rows.start..];
            // SAFETY: `available` checked the target features.
            unsafe { avx512::lhs_block(&mut stage, src, op.col_stride) };
        } else {
            fill_stage(&mut stage, op, rows, cols);
        }
        let block = block.try_into().expect("one block");
        // SAFETY: `available` checked the target features.
        return unsafe { avx512::transpose_block(block, &stage) };
    }
    fill_stage(&mut stage, op, rows, cols);
    for (r, out) in block.chunks_mut(BLOCK).enumerate() {
        for (j, o) in out.iter_mut().enumerate() {
            *o = stage[j * BLOCK + r];
        }
    }
}

/// The staging block of [`pack_lhs_block`] for a source read across its rows: stage[j·32 + r] =
/// value (rows.start + r, cols.start + j) rounded (zero past the edges if the stage was).
fn fill_stage(stage: &mut [u16; BLOCK_LEN], op: Operand, rows: Range<usize>, cols: Range<usize>) {
    let height = rows.len();
    for (j, l) in cols.enumerate() {
        let line = &mut stage[j * BLOCK..j * BLOCK + height];
        if op.row_stride == 1 {
            let start = l * op.col_stride + rows.start;
            convert(line, &op.data[start..start + height]);
        } else {
            for (d, i) in line.iter_mut().zip(rows.clone()) {
                *d = to_bf16(op.data[i * op.row_stride + l * op.col_stride]);
            }
        }
    }
}

impl Drop for Lhs {
    fn drop(&mut self) {
        spare::give_back(std::mem::take(&mut self.data));
    }
}

impl Lhs {
    /// Rounds and packs `op` read as an m × k matrix.
    pub(crate) fn pack(op: Operand, m: usize, k: usize) -> Self {
        assert!(op.covers(m, k), "bf16 operand smaller than its shape");
        let data = pack_blocks(m, k, |block, rows, cols| {
            pack_lhs_block(block, op, rows, cols)
        });
        Lhs { data, m, k }
    }

    /// The rounded values as a row-major f32 matrix of m × k (padded to whole blocks).
    fn widen(&self) -> Vec<f32> {
        let kp = blocks(self.k) * BLOCK;
        let mut out = vec![0f32; blocks(self.m) * BLOCK * kp];
        for (b, block) in self.data.chunks(BLOCK_LEN).enumerate() {
            let (rb, kb) = (b / blocks(self.k), b % blocks(self.k));
            for (r, row) in block.chunks(BLOCK).enumerate() {
                let start = (rb * BLOCK + r) * kp + kb * BLOCK;
                out[start..start + BLOCK]
                    .iter_mut()
                    .zip(row)
                    .for_each(|(o, &h)| *o = from_bf16(h));
            }
        }
        out
    }
}

/// The position of value (l, j) of a right operand's block: tile j / 16, row l / 2, column j % 16,
/// element l % 2.
fn rhs_offset(l: usize, j: usize) -> usize {
    (j / 16) * (BLOCK_LEN / 2) + (l / 2) * BLOCK + (j % 16) * 2 + l % 2
}

/// Rounds values (l, j) of `op`, l in `ks`, j in `cols`, into a 32 × 32 block of a right
/// operand (at [`rhs_offset`]). A row-major source goes through [`interleave`], pair of rows by
/// pair of rows; otherwise (a transposed source: small weights) value by value.
fn pack_rhs_block(block: &mut [u16], op: Operand, ks: Range<usize>, cols: Range<usize>) {
    #[cfg(target_arch = "x86_64")]
    if op.col_stride == 1 && ks.len() == BLOCK && cols.len() == BLOCK && avx512::available() {
        let src = &op.data[ks.start * op.row_stride + cols.start..];
        let block = block.try_into().expect("one block");
        // SAFETY: `available` checked the target features.
        return unsafe { avx512::rhs_block(block, src, op.row_stride) };
    }
    #[cfg(target_arch = "x86_64")]
    if op.row_stride == 1 && ks.len() == BLOCK && cols.len() == BLOCK && avx512::available() {
        // A transposed source (a weight read as Wᵀ): its rows are the block's columns. Rounded as
        // a left block of them, turned, and moved into the right operand's layout.
        let src = &op.data[cols.start * op.col_stride + ks.start..];
        let (mut stage, mut turned) = ([0u16; BLOCK_LEN], [0u16; BLOCK_LEN]);
        let block = block.try_into().expect("one block");
        // SAFETY: `available` checked the target features.
        return unsafe {
            avx512::lhs_block(&mut stage, src, op.col_stride);
            avx512::transpose_block(&mut turned, &stage);
            avx512::relayout_block(block, &turned)
        };
    }
    if op.col_stride != 1 {
        for j in cols.clone() {
            for l in ks.clone() {
                let v = op.data[l * op.row_stride + j * op.col_stride];
                block[rhs_offset(l - ks.start, j - cols.start)] = to_bf16(v);
            }
        }
        return;
    }
    // Row l's 16 values from column c: borrowed where the source has them all, else copied
    // into `spare` with zeros after the last column (or for a row past the last k).
    let row = |l: usize, c: usize, width: usize, spare: &'_ mut [f32; 16]| -> [f32; 16] {
        let start = l * op.row_stride + c;
        if l < ks.end && width == 16 {
            return op.data[start..start + 16].try_into().expect("16");
        }
        spare.fill(0.0);
        if l < ks.end {
            spare[..width].copy_from_slice(&op.data[start..start + width]);
        }
        *spare
    };
    let mut spare = [0f32; 16];
    for (pair, l) in ks.clone().step_by(2).enumerate() {
        for (tile, c) in cols.clone().step_by(16).enumerate() {
            let width = 16.min(cols.end - c);
            let start = tile * (BLOCK_LEN / 2) + pair * BLOCK;
            let out = (&mut block[start..start + BLOCK]).try_into().expect("32");
            let first = row(l, c, width, &mut spare);
            let second = row(l + 1, c, width, &mut spare);
            interleave(out, &first, &second);
        }
    }
}

/// A left operand's block (row l, column j at l·32 + j) in a right operand's layout (at
/// [`rhs_offset`]): rows 2p and 2p + 1 interleaved, 16 columns per tile.
fn relayout_block(block: &mut [u16; BLOCK_LEN], source: &[u16; BLOCK_LEN]) {
    #[cfg(target_arch = "x86_64")]
    if avx512::available() {
        // SAFETY: `available` checked the target features.
        return unsafe { avx512::relayout_block(block, source) };
    }
    relayout_block_portable(block, source)
}

/// [`relayout_block`] value by value.
fn relayout_block_portable(block: &mut [u16; BLOCK_LEN], source: &[u16; BLOCK_LEN]) {
    for (l, row) in source.chunks_exact(BLOCK).enumerate() {
        for (j, &v) in row.iter().enumerate() {
            block[rhs_offset(l, j)] = v;
        }
    }
}

impl Drop for Rhs {
    fn drop(&mut self) {
        spare::give_back(std::mem::take(&mut self.data));
    }
}

impl Rhs {
    /// Rounds and packs `op` read as a k × n matrix.
    pub(crate) fn pack(op: Operand, k: usize, n: usize) -> Self {
        assert!(op.covers(k, n), "bf16 operand smaller than its shape");
        let data = pack_blocks(n, k, |block, cols, ks| pack_rhs_block(block, op, ks, cols));
        Rhs { data, k, n }
    }

    /// The matrix of `lhs` (m × k) as a right operand of m × k: the same rounded values moved
    /// into the right operand's layout, without reading the f32 source again (the output layer's
    /// dlogits are the left operand of dx and the right one of dW).
    pub(crate) fn relayout(lhs: &Lhs) -> Self {
        let (k, n) = (lhs.m, lhs.k);
        let mut data = spare::take(lhs.data.len());
        // Right block (column block cb, k block kb) is left block (row block kb, column block cb).
        data.par_chunks_mut(blocks(k) * BLOCK_LEN)
            .enumerate()
            .for_each(|(cb, along_k)| {
                for (kb, block) in along_k.chunks_mut(BLOCK_LEN).enumerate() {
                    let source = &lhs.data[(kb * blocks(n) + cb) * BLOCK_LEN..][..BLOCK_LEN];
                    relayout_block(
                        block.try_into().expect("one block"),
                        source.try_into().expect("one block"),
                    );
                }
            });
        Rhs { data, k, n }
    }

    /// The rounded values as a row-major f32 matrix of k × n (padded to whole blocks).
    fn widen(&self) -> Vec<f32> {
        let np = blocks(self.n) * BLOCK;
        let mut out = vec![0f32; blocks(self.k) * BLOCK * np];
        for (b, block) in self.data.chunks(BLOCK_LEN).enumerate() {
            let (cb, kb) = (b / blocks(self.k), b % blocks(self.k));
            for l in 0..BLOCK {
                for j in 0..BLOCK {
                    out[(kb * BLOCK + l) * np + cb * BLOCK + j] =
                        from_bf16(block[rhs_offset(l, j)]);
                }
            }
        }
        out
    }
}

/// dst (m × n, row-major) = (dst if `accumulate`) + lhs · rhs with bf16 inputs, on at most
/// `threads` threads.
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul(
    dst: &mut [f32],
    m: usize,
    n: usize,
    k: usize,
    lhs: Operand,
    rhs: Operand,
    accumulate: bool,
    threads: usize,
) {
    // A left operand read across its rows is packed through a transposition; when it is the
    // larger of the two, the turned product rhsᵀ · lhsᵀ packs the smaller one that way instead.
    if lhs.col_stride != 1 && m > n {
        let mut turned = vec![0f32; n * m];
        let (rhs_t, lhs_t) = (Lhs::pack(rhs.t(), n, k), Rhs::pack(lhs.t(), k, m));
        product(&mut turned, &rhs_t, &lhs_t, false, threads);
        assert!(dst.len() >= m * n, "bf16 matmul destination too small");
        for (i, row) in dst.chunks_mut(n).take(m).enumerate() {
            for (j, d) in row.iter_mut().enumerate() {
                let v = turned[j * m + i];
                *d = if accumulate { *d + v } else { v };
            }
        }
        return;
    }
    let (lhs, rhs) = (Lhs::pack(lhs, m, k), Rhs::pack(rhs, k, n));
    product(dst, &lhs, &rhs, accumulate, threads)
}

/// dst (m × n, row-major) = (dst if `accumulate`) + lhs · rhs for packed operands: on AMX where
/// the CPU has it, else through gemm on the widened values.
pub(crate) fn product(dst: &mut [f32], lhs: &Lhs, rhs: &Rhs, accumulate: bool, threads: usize) {
    if amx::available() {
        product_on_tiles(dst, lhs, rhs, accumulate, threads)
    } else {
        product_widened(dst, lhs, rhs, accumulate, threads)
    }
}

/// The shape of a product, checked: (m, n).
fn product_shape(dst: &[f32], lhs: &Lhs, rhs: &Rhs) -> (usize, usize) {
    assert_eq!(lhs.k, rhs.k, "bf16 product of mismatched operands");
    let (m, n) = (lhs.m, rhs.n);
    assert!(
        m.checked_mul(n).is_some_and(|mn| dst.len() >= mn),
        "bf16 matmul destination too small"
    );
    (m, n)
}

/// [`product`] on the AMX tiles, row blocks spread over `threads`.
fn product_on_tiles(dst: &mut [f32], lhs: &Lhs, rhs: &Rhs, accumulate: bool, threads: usize) {
    let (m, n) = product_shape(dst, lhs, rhs);
    if n == 0 {
        return;
    }
    // One run of whole row blocks per thread, each configuring its tiles once.
    let part_blocks = blocks(m).div_ceil(threads.max(1)).max(1);
    let run = |(part, rows): (usize, &mut [f32])| {
        amx::row_blocks(rows, n, lhs, rhs, part * part_blocks, accumulate)
    };
    let dst = &mut dst[..m * n];
    if threads > 1 {
        dst.par_chunks_mut(part_blocks * BLOCK * n)
            .enumerate()
            .for_each(run);
    } else {
        run((0, dst));
    }
}

/// [`product`] by gemm on the rounded values widened back to f32.
fn product_widened(dst: &mut [f32], lhs: &Lhs, rhs: &Rhs, accumulate: bool, threads: usize) {
    let (m, n) = product_shape(dst, lhs, rhs);
    let (kp, np) = (blocks(lhs.k) * BLOCK, blocks(n) * BLOCK);
    let (a, b) = (lhs.widen(), rhs.widen());
    let mut out = vec![0f32; m * np];
    let (a, b) = (Operand::rows(&a, kp), Operand::rows(&b, np));
    matmul_on(&mut out, m, np, kp, a, b, false, threads);
    for (d, o) in dst.chunks_mut(n.max(1)).take(m).zip(out.chunks(np.max(1))) {
        for (d, o) in d.iter_mut().zip(o) {
            *d = if accumulate { *d + o } else { *o };
        }
    }
}

/// The AMX tile unit: its detection and the kernel.
pub mod amx {
    #[cfg(target_arch = "x86_64")]
    use super::{blocks, BLOCK, BLOCK_LEN};
    use super::{Lhs, Rhs};
    use std::sync::OnceLock;

    /// Whether this CPU has AMX-BF16 and Linux lets this process use the tile registers (asked
    /// once, for the whole process, with `arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`).
    pub fn available() -> bool {
        static AVAILABLE: OnceLock<bool> = OnceLock::new();
        *AVAILABLE.get_or_init(detect)
    }

    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    fn detect() -> bool {
        // CPUID leaf 7: EDX bit 22 AMX-BF16, bit 24 AMX-TILE.
        let edx = std::arch::x86_64::__cpuid_count(7, 0).edx;
        if edx & (1 << 22) == 0 || edx & (1 << 24) == 0 {
            return false;
        }
        const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
        const XFEATURE_XTILEDATA: libc::c_long = 18;
        // SAFETY: a system call with integer arguments that only changes this process's
        // permissions; it fails cleanly on kernels without AMX support.
        unsafe {
            libc::syscall(
                libc::SYS_arch_prctl,
                ARCH_REQ_XCOMP_PERM,
                XFEATURE_XTILEDATA,
            ) == 0
        }
    }

    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    fn detect() -> bool {
        false
    }

    /// The tiles' shapes, as `ldtilecfg` reads them (palette 1: eight tiles of up to 16 rows of
    /// 64 bytes). Here all eight are 16 rows × 64 bytes: tmm0–3 the f32 accumulators of a 32 × 32
    /// block of the result, tmm4–5 two A tiles (16 rows × 32 k), tmm6–7 two B tiles.
    #[cfg(target_arch = "x86_64")]
    #[repr(C, align(64))]
    struct TileConfig {
        palette: u8,
        start_row: u8,
        reserved: [u8; 14],
        bytes_per_row: [u16; 16],
        rows: [u8; 16],
    }

    #[cfg(target_arch = "x86_64")]
    const CONFIG: TileConfig = TileConfig {
        palette: 1,
        start_row: 0,
        reserved: [0; 14],
        bytes_per_row: [64, 64, 64, 64, 64, 64, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0],
        rows: [16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0],
    };

    /// The rows from `first`·32 on of the product (`dst` holds whole blocks of 32 rows of n
    /// columns, fewer rows at the bottom edge) = (dst if `accumulate`) + lhs · rhs, the tiles
    /// configured once for all of them.
    #[cfg(target_arch = "x86_64")]
    pub(super) fn row_blocks(
        dst: &mut [f32],
        n: usize,
        lhs: &Lhs,
        rhs: &Rhs,
        first: usize,
        accumulate: bool,
    ) {
        use std::arch::asm;
        assert!(available() && n > 0);
        // SAFETY: the CPU has AMX-BF16 and the process has the tile permission (`available`);
        // `row_block` runs with the tiles configured, and the configuration is released after.
        unsafe {
            asm!("ldtilecfg [{}]", in(reg) &CONFIG, options(nostack, readonly));
            for (i, rows) in dst.chunks_mut(BLOCK * n).enumerate() {
                row_block(rows, n, lhs, rhs, first + i, accumulate);
            }
            asm!("tilerelease", options(nostack, nomem));
        }
    }

    /// Rows `rb`·32 … of the product (`dst` holds those rows, n columns each; fewer than 32 at the
    /// bottom edge) = (dst if `accumulate`) + lhs · rhs. Safety: this thread's tiles must be
    /// configured with [`CONFIG`] (as [`row_blocks`] does).
    #[cfg(target_arch = "x86_64")]
    unsafe fn row_block(
        dst: &mut [f32],
        n: usize,
        lhs: &Lhs,
        rhs: &Rhs,
        rb: usize,
        accumulate: bool,
    ) {
        use std::arch::asm;
        assert!(
            available() && lhs.k == rhs.k && rhs.n == n && n > 0 && dst.len().is_multiple_of(n)
        );
        let rows = dst.len() / n;
        assert!(rows <= BLOCK && rb * BLOCK + rows <= lhs.m);
        let k_blocks = blocks(lhs.k);
        let a = &lhs.data[rb * k_blocks * BLOCK_LEN..(rb + 1) * k_blocks * BLOCK_LEN];
        // A 32 × 32 block of the result, for the blocks at the edges.
        let mut edge = [0f32; BLOCK_LEN];
        // SAFETY: the CPU has AMX-BF16 and the process has the tile permission (`available`).
        // Each tile load reads 16 rows of 64 bytes at 64-byte strides from one 2,048-byte block of
        // `a` or `b` (whole blocks, by the packing), each C load or store 16 rows of 64 bytes
        // either from `edge` (at a 128-byte stride) or from `dst` at column cb·32 when the block
        // lies wholly inside it (32 rows, cb·32 + 32 ≤ n). The tile registers are used by no
        // other code, and the caller configured them.
        unsafe {
            for cb in 0..blocks(n) {
                let b = &rhs.data[cb * k_blocks * BLOCK_LEN..(cb + 1) * k_blocks * BLOCK_LEN];
                let cols = BLOCK.min(n - cb * BLOCK);
                let inside = rows == BLOCK && cols == BLOCK;
                let (c, c_stride) = if inside {
                    (dst.as_mut_ptr().add(cb * BLOCK), n * 4)
                } else {
                    for (r, e) in edge.chunks_mut(BLOCK).enumerate() {
                        match (
                            accumulate && r < rows,
                            dst.get(r * n + cb * BLOCK..r * n + cb * BLOCK + cols),
                        ) {
                            (true, Some(d)) => e[..cols].copy_from_slice(d),
                            _ => e.fill(0.0),
                        }
                        e[cols..].fill(0.0);
                    }
                    (edge.as_mut_ptr(), BLOCK * 4)
                };
                let c_lower = c.add(16 * c_stride / 4);
                if accumulate || !inside {
                    asm!(
                        "tileloadd tmm0, [{c0} + {s}*1]",
                        "tileloadd tmm1, [{c1} + {s}*1]",
                        "tileloadd tmm2, [{c2} + {s}*1]",
                        "tileloadd tmm3, [{c3} + {s}*1]",
                        c0 = in(reg) c, c1 = in(reg) c.add(16), c2 = in(reg) c_lower, c3 = in(reg) c_lower.add(16),
                        s = in(reg) c_stride, options(nostack, readonly),
                    );
                } else {
                    asm!(
                        "tilezero tmm0",
                        "tilezero tmm1",
                        "tilezero tmm2",
                        "tilezero tmm3",
                        options(nostack, nomem)
                    );
                }
                for kb in 0..k_blocks {
                    let (a0, b0) = (
                        a.as_ptr().add(kb * BLOCK_LEN),
                        b.as_ptr().add(kb * BLOCK_LEN),
                    );
                    asm!(
                        // Each load just before the first product that needs it, so that
                        // the loads overlap the products.
                        "tileloadd tmm4, [{a0} + {s}*1]",
                        "tileloadd tmm6, [{b0} + {s}*1]",
                        "tdpbf16ps tmm0, tmm4, tmm6",
                        "tileloadd tmm7, [{b1} + {s}*1]",
                        "tdpbf16ps tmm1, tmm4, tmm7",
                        "tileloadd tmm5, [{a1} + {s}*1]",
                        "tdpbf16ps tmm2, tmm5, tmm6",
                        "tdpbf16ps tmm3, tmm5, tmm7",
                        a0 = in(reg) a0, a1 = in(reg) a0.add(BLOCK_LEN / 2),
                        b0 = in(reg) b0, b1 = in(reg) b0.add(BLOCK_LEN / 2),
                        s = in(reg) 64usize, options(nostack, readonly),
                    );
                }
                asm!(
                    "tilestored [{c0} + {s}*1], tmm0",
                    "tilestored [{c1} + {s}*1], tmm1",
                    "tilestored [{c2} + {s}*1], tmm2",
                    "tilestored [{c3} + {s}*1], tmm3",
                    c0 = in(reg) c, c1 = in(reg) c.add(16), c2 = in(reg) c_lower, c3 = in(reg) c_lower.add(16),
                    s = in(reg) c_stride, options(nostack),
                );
                if !inside {
                    for (r, e) in edge.chunks(BLOCK).take(rows).enumerate() {
                        dst[r * n + cb * BLOCK..r * n + cb * BLOCK + cols]
                            .copy_from_slice(&e[..cols]);
                    }
                }
            }
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    pub(super) fn row_blocks(_: &mut [f32], _: usize, _: &Lhs, _: &Rhs, _: usize, _: bool) {
        unreachable!("AMX is x86-64 only and `available` says so")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_is_to_the_nearest_bf16_with_ties_to_even() {
        assert_eq!(to_bf16(1.0), 0x3f80);
        assert_eq!(to_bf16(-2.0), 0xc000);
        // 1 + 2⁻⁸ lies halfway between 1 and 1 + 2⁻⁷: to the even one, 1.
        assert_eq!(to_bf16(1.0 + 1.0 / 256.0), 0x3f80);
        // 1 + 3·2⁻⁸ lies halfway between 1 + 2⁻⁷ (odd) and 1 + 2⁻⁶ (even).
        assert_eq!(to_bf16(1.0 + 3.0 / 256.0), 0x3f82);
        assert_eq!(to_bf16(1.0 + 1.5 / 256.0), 0x3f81);
        assert_eq!(from_bf16(to_bf16(0.1)), 0.100_097_656);
        assert!(round(f32::NAN).is_nan());
        assert_eq!(round(f32::MAX), f32::INFINITY);
        assert_eq!(round(f32::INFINITY), f32::INFINITY);
    }

    /// Values in ±1 whose f32 products differ from their bf16 ones.
    fn values(len: usize, seed: usize) -> Vec<f32> {
        (0..len)
            .map(|i| ((i * 7919 + seed * 104_729) % 2001) as f32 / 1000.0 - 1.0 + 1e-4)
            .collect()
    }

    /// Checks a product path against f64 sums of the rounded inputs, over shapes with partial
    /// blocks at every edge and operands read row-major and transposed, with and without
    /// accumulation.
    fn check(path: fn(&mut [f32], &Lhs, &Rhs, bool, usize)) {
        for (m, n, k) in [
            (32, 32, 32),
            (1, 1, 1),
            (45, 70, 33),
            (64, 96, 128),
            (100, 6, 300),
        ] {
            for (transposed, accumulate, threads) in [(false, false, 1), (true, true, 2)] {
                let (a, b) = (values(m * k, 1), values(k * n, 2));
                let (lhs, rhs) = if transposed {
                    (Operand::rows(&a, m).t(), Operand::rows(&b, k).t())
                } else {
                    (Operand::rows(&a, k), Operand::rows(&b, n))
                };
                let start = values(m * n, 3);
                let mut dst = if accumulate {
                    start.clone()
                } else {
                    vec![f32::NAN; m * n]
                };
                path(
                    &mut dst,
                    &Lhs::pack(lhs, m, k),
                    &Rhs::pack(rhs, k, n),
                    accumulate,
                    threads,
                );
                let at = |op: &Operand, i: usize, j: usize| {
                    op.data[i * op.row_stride + j * op.col_stride]
                };
                let (mut worst, mut f32_gap) = (0f64, 0f64);
                for i in 0..m {
                    for j in 0..n {
                        let terms = (0..k).map(|l| (at(&lhs, i, l), at(&rhs, l, j)));
                        let exact: f64 = terms
                            .clone()
                            .map(|(x, y)| round(x) as f64 * round(y) as f64)
                            .sum();
                        let unrounded: f64 = terms.clone().map(|(x, y)| x as f64 * y as f64).sum();
                        let scale: f64 = terms
                            .map(|(x, y)| (x as f64 * y as f64).abs())
                            .sum::<f64>()
                            .max(1e-3);
                        let base = if accumulate {
                            start[i * n + j] as f64
                        } else {
                            0.0
                        };
                        worst = worst.max((dst[i * n + j] as f64 - base - exact).abs() / scale);
                        f32_gap = f32_gap.max((unrounded - exact).abs() / scale);
                    }
                }
                assert!(
                    worst < 2e-6,
                    "{m}×{k}·{k}×{n} (transposed {transposed}): error {worst:.1e} of the scale"
                );
                if k > 1 {
                    assert!(
                        f32_gap > 1e-4,
                        "the inputs do not tell bf16 from f32 ({f32_gap:.1e})"
                    );
                }
            }
        }
    }

    #[test]
    fn a_reused_buffer_packs_zeros_into_the_padding() {
        // NaN in every value of a dropped operand: a stale value left in the padding of the next
        // (smaller, edge-padded) operand packed into the same buffer would show as NaN.
        let stale = vec![f32::NAN; 96 * 96];
        drop((
            Lhs::pack(Operand::rows(&stale, 96), 96, 96),
            Rhs::pack(Operand::rows(&stale, 96), 96, 96),
        ));
        let (m, k) = (45, 33);
        let a = values(m * k, 1);
        let (lhs, rhs) = (
            Lhs::pack(Operand::rows(&a, k), m, k),
            Rhs::pack(Operand::rows(&a, k).t(), k, m),
        );
        let (lhs, rhs) = (lhs.widen(), rhs.widen());
        let (kp, mp) = (blocks(k) * BLOCK, blocks(m) * BLOCK);
        for i in 0..mp {
            for l in 0..kp {
                let value = if i < m && l < k {
                    round(a[i * k + l])
                } else {
                    0.0
                };
                assert_eq!(lhs[i * kp + l], value, "lhs ({i}, {l})");
                assert_eq!(rhs[l * mp + i], value, "rhs ({l}, {i})");
            }
        }
    }

    #[test]
    fn a_left_operand_moved_into_the_right_layout_is_the_right_operand_packed() {
        for (m, k) in [(64, 6000), (45, 33), (1, 1), (32, 32)] {
            let a = values(m * k, 4);
            let lhs = Lhs::pack(Operand::rows(&a, k), m, k);
            let packed = Rhs::pack(Operand::rows(&a, k), m, k);
            let moved = Rhs::relayout(&lhs);
            assert_eq!((moved.k, moved.n), (m, k));
            assert!(moved.data == packed.data, "{m} × {k}: the layouts differ");
        }
    }

    #[test]
    fn a_block_relayout_puts_each_value_at_its_right_operand_offset() {
        let source: [u16; BLOCK_LEN] = std::array::from_fn(|i| (i * 7 + 3) as u16);
        let mut expected = [0u16; BLOCK_LEN];
        for l in 0..BLOCK {
            for j in 0..BLOCK {
                expected[rhs_offset(l, j)] = source[l * BLOCK + j];
            }
        }
        // rhs_offset maps the block onto itself: every value lands somewhere different.
        assert!(expected.iter().all(|&v| v != 0));
        let mut moved = [0u16; BLOCK_LEN];
        relayout_block_portable(&mut moved, &source);
        assert_eq!(moved, expected, "portable");
        #[cfg(target_arch = "x86_64")]
        if avx512::available() {
            let mut moved = [0u16; BLOCK_LEN];
            // SAFETY: `available` checked the target features.
            unsafe { avx512::relayout_block(&mut moved, &source) };
            assert_eq!(moved, expected, "AVX-512");
        } else {
            eprintln!("skipped the AVX-512 relayout: this CPU lacks AVX512-BF16 or AVX512-BW");
        }
    }

    #[test]
    fn the_avx512_transpose_turns_a_block() {
        #[cfg(target_arch = "x86_64")]
        if avx512::available() {
            let src: [u16; BLOCK_LEN] = std::array::from_fn(|i| i as u16);
            let mut out = [0u16; BLOCK_LEN];
            // SAFETY: `available` checked the target features.
            unsafe { avx512::transpose_block(&mut out, &src) };
            for (r, row) in out.chunks(BLOCK).enumerate() {
                for (c, &v) in row.iter().enumerate() {
                    assert_eq!(v, src[c * BLOCK + r], "({r}, {c})");
                }
            }
            return;
        }
        eprintln!("skipped the AVX-512 transpose: this CPU lacks AVX512-BF16 or AVX512-BW");
    }

    #[test]
    fn the_widened_path_multiplies_the_rounded_inputs() {
        check(product_widened);
    }

    #[test]
    fn the_amx_tiles_multiply_the_rounded_inputs() {
        if !amx::available() {
            eprintln!("skipped: this CPU (or kernel) offers no AMX-BF16; the widened path is tested instead");
            return;
        }
        check(product_on_tiles);
    }
}
