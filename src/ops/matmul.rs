//! The one matmul of the training step: f32 or bf16 inputs, as the run's precision asks.

use super::matmul_f32::{matmul_on, Operand};
use super::{bf16, Precision};

/// dst (m × n, row-major) = (dst if `accumulate`) + lhs (m × k) · rhs (k × n), on all threads,
/// with inputs of the given precision.
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul_into(
    dst: &mut [f32],
    m: usize,
    n: usize,
    k: usize,
    lhs: Operand,
    rhs: Operand,
    accumulate: bool,
    precision: Precision,
) {
    let threads = rayon::current_num_threads();
    match precision {
        Precision::F32 => matmul_on(dst, m, n, k, lhs, rhs, accumulate, threads),
        Precision::Bf16 => bf16::matmul(dst, m, n, k, lhs, rhs, accumulate, threads),
    }
}
