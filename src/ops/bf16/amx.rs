//! The AMX tile unit: its detection and the kernel.

#[cfg(target_arch = "x86_64")]
use super::{blocks, BLOCK, BLOCK_LEN};
use super::{Lhs, Rhs};
use std::sync::OnceLock;

/// Whether this CPU has AMX-BF16 and Linux lets this process use the tile registers (asked
/// once, for the whole process, with `arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`).
pub fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(crate::ops::cpu_features::amx)
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
unsafe fn row_block(dst: &mut [f32], n: usize, lhs: &Lhs, rhs: &Rhs, rb: usize, accumulate: bool) {
    use std::arch::asm;
    assert!(available() && lhs.k == rhs.k && rhs.n == n && n > 0 && dst.len().is_multiple_of(n));
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
                    dst[r * n + cb * BLOCK..r * n + cb * BLOCK + cols].copy_from_slice(&e[..cols]);
                }
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
pub(super) fn row_blocks(_: &mut [f32], _: usize, _: &Lhs, _: &Rhs, _: usize, _: bool) {
    unreachable!("AMX is x86-64 only and `available` says so")
}
