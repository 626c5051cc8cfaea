//! Matmuls with bf16 inputs and f32 accumulation, for mixed-precision training.
//!
//! Both operands are rounded to bf16 (8 bits of mantissa, f32's exponent range) and packed into
//! blocks of 32 × 32 (zero-padded at the edges); the products are summed in f32. On CPUs with
//! AMX-BF16 the blocks go through the tile unit (`tdpbf16ps`: a 16 × 16 f32 tile += a 16 × 32
//! bf16 tile · a 32 × 16 one), several times the f32 rate of AVX-512; on CPUs with AVX512-BF16
//! but no tiles, through `vdpbf16ps` (twice the f32 rate). Elsewhere the packed values are widened
//! back to f32 and multiplied by gemm: the same rounded inputs, so the numerics of this mode are
//! tested on every machine (only the order of the f32 sums differs).

pub mod amx;
#[cfg(target_arch = "x86_64")]
mod avx512;
pub mod dot;

use super::matmul_f32::{matmul_on, Operand};
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
/// along it, the blocks along k in turn, filled `per_task` outer blocks at a time by `fill(their
/// blocks, outer range)` (the values past either end stay zero), on all threads.
fn pack_blocks(
    outer: usize,
    k: usize,
    per_task: usize,
    fill: impl Fn(&mut [u16], Range<usize>) + Sync,
) -> Vec<u16> {
    let along_k = blocks(k) * BLOCK_LEN;
    let mut data = spare::take(blocks(outer) * along_k);
    data.par_chunks_mut(per_task * along_k)
        .enumerate()
        .for_each(|(task, run)| {
            // `fill` writes every value inside the matrix; the padding of edge blocks is zeroed.
            for (b, along_k) in run.chunks_mut(along_k).enumerate() {
                if block_range(task * per_task + b, outer).len() < BLOCK {
                    along_k.fill(0);
                } else if !k.is_multiple_of(BLOCK) {
                    let last = along_k.len() - BLOCK_LEN;
                    along_k[last..].fill(0);
                }
            }
            let first = task * per_task * BLOCK;
            fill(run, first..outer.min(first + per_task * BLOCK));
        });
    data
}

/// Blocks per task for `count` blocks shared among all threads, one run each.
fn per_thread(count: usize) -> usize {
    count.div_ceil(rayon::current_num_threads()).max(1)
}

/// The indices of block `b` along a dimension of `len`.
fn block_range(b: usize, len: usize) -> Range<usize> {
    b * BLOCK..len.min(b * BLOCK + BLOCK)
}

/// `fill(block, k range)` for each of the blocks along k (`k` long) of one outer block.
fn each_block(along_k: &mut [u16], k: usize, fill: impl Fn(&mut [u16], Range<usize>)) {
    for (kb, block) in along_k.chunks_mut(BLOCK_LEN).enumerate() {
        fill(block, block_range(kb, k));
    }
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

/// Rounds the rows `rows` of `op` (contiguous rows of `k` values) into a row block's blocks along
/// k (`along_k`): row by row, each row's values 32 at a time into the next block, so that the
/// source is read in order.
fn pack_lhs_rows(along_k: &mut [u16], op: Operand, rows: Range<usize>, k: usize) {
    for (r, i) in rows.enumerate() {
        let row = &op.data[i * op.row_stride..][..k];
        for (block, part) in along_k.chunks_mut(BLOCK_LEN).zip(row.chunks(BLOCK)) {
            convert(&mut block[r * BLOCK..][..part.len()], part);
        }
    }
}

/// Rounds the rows `rows` (whole row blocks from a block's first row) of `op` (read across its
/// rows: a transposed source, k long) into their row blocks' blocks along k (`run`): the blocks
/// of each 32 of the source's rows (one block along k) across all the row blocks, so that the
/// source is read in order.
fn pack_lhs_transposed(run: &mut [u16], op: Operand, rows: Range<usize>, k: usize) {
    let along_k = blocks(k) * BLOCK_LEN;
    for kb in 0..blocks(k) {
        for (b, along) in run.chunks_mut(along_k).enumerate() {
            let block_rows = block_range(b, rows.len());
            let block_rows = rows.start + block_rows.start..rows.start + block_rows.end;
            let block = &mut along[kb * BLOCK_LEN..][..BLOCK_LEN];
            pack_lhs_block(block, op, block_rows, block_range(kb, k));
        }
    }
}

/// Rounds values (i, l) of `op` (read across its rows: a transposed source), i in `rows`, l in
/// `cols`, into a 32 × 32 block of a left operand: (i, l) → block[(i − rows.start)·32 + l −
/// cols.start]. The source's rows are converted into a staging block, which is then transposed.
fn pack_lhs_block(block: &mut [u16], op: Operand, rows: Range<usize>, cols: Range<usize>) {
    #[cfg(target_arch = "x86_64")]
    let whole = cols.len() == BLOCK && rows.len() == BLOCK;
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
        let data = if op.col_stride == 1 {
            pack_blocks(m, k, 1, |along_k, rows| pack_lhs_rows(along_k, op, rows, k))
        } else {
            pack_blocks(m, k, per_thread(blocks(m)), |run, rows| {
                pack_lhs_transposed(run, op, rows, k)
            })
        };
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

/// Rounds the columns `cols` (whole column blocks from a block's first column) of `op` (k
/// contiguous rows) into their column blocks' blocks along k (`run`): pair of rows by pair of
/// rows through [`interleave`], 16 columns at a time, so that the source is read in order.
fn pack_rhs_rows(run: &mut [u16], op: Operand, k: usize, cols: Range<usize>) {
    let along_k = blocks(k) * BLOCK_LEN;
    // Row l's 16 values from column c: borrowed where the source has them all, else copied
    // into `spare` with zeros after the last column (or for a row past the last k).
    let row = |l: usize, c: usize, width: usize, spare: &'_ mut [f32; 16]| -> [f32; 16] {
        let start = l * op.row_stride + c;
        if l < k && width == 16 {
            return op.data[start..start + 16].try_into().expect("16");
        }
        spare.fill(0.0);
        if l < k {
            spare[..width].copy_from_slice(&op.data[start..start + width]);
        }
        *spare
    };
    let mut spare = [0f32; 16];
    for l in (0..k).step_by(2) {
        let (kb, pair) = (l / BLOCK, l % BLOCK / 2);
        for c in cols.clone().step_by(16) {
            let (cb, tile) = ((c - cols.start) / BLOCK, c % BLOCK / 16);
            let start = cb * along_k + kb * BLOCK_LEN + tile * (BLOCK_LEN / 2) + pair * BLOCK;
            let out = (&mut run[start..start + BLOCK]).try_into().expect("32");
            let width = 16.min(cols.end - c);
            let first = row(l, c, width, &mut spare);
            let second = row(l + 1, c, width, &mut spare);
            interleave(out, &first, &second);
        }
    }
}

/// Rounds values (l, j) of `op` (read across its rows: a transposed source, small weights), l in
/// `ks`, j in `cols`, into a 32 × 32 block of a right operand (at [`rhs_offset`]).
fn pack_rhs_block(block: &mut [u16], op: Operand, ks: Range<usize>, cols: Range<usize>) {
    #[cfg(target_arch = "x86_64")]
    if op.row_stride == 1 && ks.len() == BLOCK && cols.len() == BLOCK && avx512::available() {
        // Its rows are the block's columns: rounded as a left block of them, turned, and moved
        // into the right operand's layout.
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
    for j in cols.clone() {
        for l in ks.clone() {
            let v = op.data[l * op.row_stride + j * op.col_stride];
            block[rhs_offset(l - ks.start, j - cols.start)] = to_bf16(v);
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
        let data = if op.col_stride == 1 {
            // Rows read in order across a thread's run of column blocks.
            pack_blocks(n, k, per_thread(blocks(n)), |run, cols| {
                pack_rhs_rows(run, op, k, cols)
            })
        } else {
            pack_blocks(n, k, 1, |along_k, cols| {
                each_block(along_k, k, |block, ks| {
                    pack_rhs_block(block, op, ks, cols.clone())
                })
            })
        };
        Rhs { data, k, n }
    }

    /// A right operand of k × n built from left operands of n columns stacked on each other
    /// (see [`Stack`]).
    pub(crate) fn stack(k: usize, n: usize) -> Stack {
        let data = spare::take(blocks(n) * blocks(k) * BLOCK_LEN); // every block set by a push
        Stack {
            rhs: Rhs { data, k, n },
            filled: 0,
        }
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

/// A right operand under construction: the rows of left operands moved into the right layout one
/// after the other, without reading their f32 source again (the output layer's exponentials are
/// the left operand of dx chunk by chunk, and together the right one of dW).
pub(crate) struct Stack {
    rhs: Rhs,
    /// Rows set so far: whole blocks, except after the last push.
    filled: usize,
}

impl Stack {
    /// Moves the rounded values of `lhs` (rows × n) into the next rows.
    pub(crate) fn push(&mut self, lhs: &Lhs) {
        let (first, n, k_blocks) = (self.filled, self.rhs.n, blocks(self.rhs.k));
        assert!(
            lhs.k == n && first + lhs.m <= self.rhs.k,
            "stacked rows past the operand"
        );
        assert!(
            first.is_multiple_of(BLOCK),
            "rows stacked after a partial block"
        );
        // Right block (column block cb, k block first/32 + kb) is left block (row block kb,
        // column block cb); a partial block's padding rows come from the left one's (zeros).
        for (cb, along_k) in self.rhs.data.chunks_mut(k_blocks * BLOCK_LEN).enumerate() {
            let dst = along_k[first / BLOCK * BLOCK_LEN..].chunks_mut(BLOCK_LEN);
            for (kb, block) in dst.take(blocks(lhs.m)).enumerate() {
                let source = &lhs.data[(kb * blocks(n) + cb) * BLOCK_LEN..][..BLOCK_LEN];
                relayout_block(
                    block.try_into().expect("one block"),
                    source.try_into().expect("one block"),
                );
            }
        }
        self.filled += lhs.m;
    }

    /// The operand, once every row is set.
    pub(crate) fn finish(self) -> Rhs {
        assert_eq!(
            self.filled, self.rhs.k,
            "a stacked operand with rows missing"
        );
        self.rhs
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

/// The instructions that multiply bf16 on this CPU, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hardware {
    /// The AMX tile unit (`tdpbf16ps`).
    Amx,
    /// AVX512-BF16's dot products (`vdpbf16ps`).
    Avx512Bf16,
}

impl Hardware {
    /// What this CPU offers: the tiles before the vector instructions.
    pub fn detect() -> Option<Hardware> {
        if amx::available() {
            Some(Hardware::Amx)
        } else if dot::available() {
            Some(Hardware::Avx512Bf16)
        } else {
            None
        }
    }

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Hardware::Amx => "amx",
            Hardware::Avx512Bf16 => "avx512bf16",
        }
    }

    /// The product of row blocks on it (see [`amx::row_blocks`]).
    fn row_blocks(self) -> RowBlocks {
        match self {
            Hardware::Amx => amx::row_blocks,
            Hardware::Avx512Bf16 => dot::row_blocks,
        }
    }
}

/// The rows from block `first` on of a product (dst, n, lhs, rhs, first, accumulate).
type RowBlocks = fn(&mut [f32], usize, &Lhs, &Rhs, usize, bool);

/// dst (m × n, row-major) = (dst if `accumulate`) + lhs · rhs for packed operands: on the CPU's
/// bf16 instructions where it has them, else through gemm on the widened values.
pub(crate) fn product(dst: &mut [f32], lhs: &Lhs, rhs: &Rhs, accumulate: bool, threads: usize) {
    match Hardware::detect() {
        Some(hardware) => {
            product_in_row_blocks(hardware.row_blocks(), dst, lhs, rhs, accumulate, threads)
        }
        None => product_widened(dst, lhs, rhs, accumulate, threads),
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

/// [`product`] by `row_blocks`, the row blocks spread over `threads`.
fn product_in_row_blocks(
    row_blocks: RowBlocks,
    dst: &mut [f32],
    lhs: &Lhs,
    rhs: &Rhs,
    accumulate: bool,
    threads: usize,
) {
    let (m, n) = product_shape(dst, lhs, rhs);
    if n == 0 {
        return;
    }
    // One run of whole row blocks per thread (AMX configures its tiles once for each).
    let part_blocks = blocks(m).div_ceil(threads.max(1)).max(1);
    let run = |(part, rows): (usize, &mut [f32])| {
        row_blocks(rows, n, lhs, rhs, part * part_blocks, accumulate)
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
    fn left_operands_stacked_into_the_right_layout_are_the_right_operand_packed() {
        // (rows of each part, columns): whole blocks, a partial last part, one small part.
        for (parts, k) in [(vec![64, 64, 32], 6000), (vec![32, 13], 33), (vec![1], 1)] {
            let m: usize = parts.iter().sum();
            let a = values(m * k, 4);
            let packed = Rhs::pack(Operand::rows(&a, k), m, k);
            let mut stack = Rhs::stack(m, k);
            let mut first = 0;
            for rows in parts {
                let part = Operand::rows(&a, k).rows_from(first);
                stack.push(&Lhs::pack(part, rows, k));
                first += rows;
            }
            let moved = stack.finish();
            assert_eq!((moved.k, moved.n), (m, k));
            assert!(moved.data == packed.data, "{m} × {k}: the layouts differ");
        }
    }

    #[test]
    fn a_stack_refuses_rows_after_a_partial_block_and_is_unusable_unfilled() {
        let a = values(64 * 8, 5);
        let part = |rows| Lhs::pack(Operand::rows(&a, 8), rows, 8);
        let run = |f: &dyn Fn()| std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        assert!(run(&|| {
            let mut stack = Rhs::stack(64, 8);
            stack.push(&part(13));
            stack.push(&part(32));
        })
        .is_err());
        assert!(run(&|| drop(Rhs::stack(64, 8).finish())).is_err());
        assert!(run(&|| Rhs::stack(32, 8).push(&part(64))).is_err());
    }

    /// A block of distinct values, and where each must go: (source, expected relayout).
    fn relayout_case() -> ([u16; BLOCK_LEN], [u16; BLOCK_LEN]) {
        let source: [u16; BLOCK_LEN] = std::array::from_fn(|i| (i * 7 + 3) as u16);
        let mut expected = [0u16; BLOCK_LEN];
        for l in 0..BLOCK {
            for j in 0..BLOCK {
                expected[rhs_offset(l, j)] = source[l * BLOCK + j];
            }
        }
        // rhs_offset maps the block onto itself: every value lands somewhere different.
        assert!(expected.iter().all(|&v| v != 0));
        (source, expected)
    }

    #[test]
    fn a_block_relayout_puts_each_value_at_its_right_operand_offset() {
        let (source, expected) = relayout_case();
        let mut moved = [0u16; BLOCK_LEN];
        relayout_block_portable(&mut moved, &source);
        assert_eq!(moved, expected);
    }

    /// What a test of a kernel says where the build script saw the instructions but this CPU
    /// lacks them (a build copied to another machine).
    const ANOTHER_CPU: &str = "built on a CPU that has these instructions, but this one lacks them: `cargo clean` and test again";

    #[test]
    #[cfg(target_arch = "x86_64")]
    #[cfg_attr(
        not(cpu_avx512bf16),
        ignore = "this CPU has no AVX512-BF16 (or AVX512-BW)"
    )]
    fn the_avx512_relayout_puts_each_value_at_its_right_operand_offset() {
        assert!(avx512::available(), "{ANOTHER_CPU}");
        let (source, expected) = relayout_case();
        let mut moved = [0u16; BLOCK_LEN];
        // SAFETY: `available` checked the target features.
        unsafe { avx512::relayout_block(&mut moved, &source) };
        assert_eq!(moved, expected);
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    #[cfg_attr(
        not(cpu_avx512bf16),
        ignore = "this CPU has no AVX512-BF16 (or AVX512-BW)"
    )]
    fn the_avx512_transpose_turns_a_block() {
        assert!(avx512::available(), "{ANOTHER_CPU}");
        let src: [u16; BLOCK_LEN] = std::array::from_fn(|i| i as u16);
        let mut out = [0u16; BLOCK_LEN];
        // SAFETY: `available` checked the target features.
        unsafe { avx512::transpose_block(&mut out, &src) };
        for (r, row) in out.chunks(BLOCK).enumerate() {
            for (c, &v) in row.iter().enumerate() {
                assert_eq!(v, src[c * BLOCK + r], "({r}, {c})");
            }
        }
    }

    #[test]
    fn the_widened_path_multiplies_the_rounded_inputs() {
        check(product_widened);
    }

    #[test]
    #[cfg_attr(not(cpu_amx), ignore = "this CPU (or its kernel) offers no AMX-BF16")]
    fn the_amx_tiles_multiply_the_rounded_inputs() {
        assert!(amx::available(), "{ANOTHER_CPU}");
        check(|dst, lhs, rhs, accumulate, threads| {
            product_in_row_blocks(amx::row_blocks, dst, lhs, rhs, accumulate, threads)
        });
    }

    #[test]
    #[cfg_attr(
        not(cpu_avx512bf16),
        ignore = "this CPU has no AVX512-BF16 (or AVX512-BW)"
    )]
    fn the_avx512_dot_products_multiply_the_rounded_inputs() {
        assert!(dot::available(), "{ANOTHER_CPU}");
        check(|dst, lhs, rhs, accumulate, threads| {
            product_in_row_blocks(dot::row_blocks, dst, lhs, rhs, accumulate, threads)
        });
    }
}
