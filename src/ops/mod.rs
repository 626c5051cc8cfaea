//! Fused CPU kernels with hand-written backward passes, each beside its composite reference.
//!
//! candle's own fast softmax and LayerNorm have no backward pass, and the composites built from
//! tensor ops are slow on the CPU. Each op here runs as a candle `CustomOp` on the CPU (rows spread
//! over threads with rayon) and falls back to its composite reference on other devices.

pub mod attention;
pub mod cross_entropy;
pub mod fast_math;
pub mod gelu;
pub mod layer_norm;
pub mod linear;
pub mod lm_head_loss;
pub mod softmax;

use candle_core::{bail, CpuStorage, Layout, Result};

/// Rows per rayon task: enough work to amortise the scheduling.
pub(crate) const ROWS_PER_TASK: usize = 64;

/// The f32 values of a contiguous CPU tensor.
pub(crate) fn contiguous<'a>(
    storage: &'a CpuStorage,
    layout: &Layout,
    op: &str,
) -> Result<&'a [f32]> {
    let data = storage.as_slice::<f32>()?;
    match layout.contiguous_offsets() {
        Some((start, end)) => Ok(&data[start..end]),
        None => bail!("{op} needs a contiguous f32 input"),
    }
}
