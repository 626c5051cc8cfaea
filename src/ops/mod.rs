//! CPU kernels on plain buffers with hand-written backward passes, each beside its composite
//! reference.
//!
//! The composites built from candle's tensor ops are slow on the CPU (and candle's own fast
//! softmax and LayerNorm have no backward pass). The engine's training step calls the kernels
//! here directly ([`crate::engine`]); the candle graph runs their forward passes as `CustomOp`s on
//! the CPU (rows spread over threads with rayon), and the composite reference on other devices
//! and to differentiate (`Kernels::Composite`, chosen once per model).

pub mod activation;
pub mod adaptive_softmax;
pub mod attention;
pub mod bf16;
pub(crate) mod cpu_features;
pub mod fast_math;
pub mod gelu;
pub mod isa;
pub mod layer_norm;
pub mod linear;
pub mod lm_head_loss;
pub(crate) mod matmul;
pub(crate) mod matmul_f32;
pub(crate) mod matvec;
pub mod qk_norm;
pub mod relu2;
pub(crate) mod scratch;
pub(crate) mod small_matmul;
pub mod softmax;

pub use matvec::WeightFormat;

use candle_core::{bail, CpuStorage, DType, Layout, Result, Tensor};

/// Which implementation a model's ops take, chosen once per model (see `Gpt::with_kernels`) and
/// passed down to each layer's forward pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Kernels {
    /// The fused kernels: f32 tensors on the CPU.
    #[default]
    Fused,
    /// Always the composite reference: candle's tensor ops, the path other devices take, and the
    /// one to differentiate through candle's autograd (the fused ops are forward-only).
    Composite,
}

/// The inputs of the matmuls of a training step (see `engine::loss_and_gradients`): f32, or rounded to
/// bf16 with f32 sums (mixed precision; master weights, moments, norms, softmax and loss stay f32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// f32 throughout.
    #[default]
    F32,
    /// bf16 matmul inputs, f32 accumulation: on AMX-BF16 or AVX512-BF16 where the CPU has it.
    Bf16,
}

impl std::str::FromStr for Precision {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "f32" => Ok(Precision::F32),
            "bf16" => Ok(Precision::Bf16),
            _ => Err(format!("unknown dtype `{s}`: use f32 or bf16")),
        }
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
        })
    }
}

impl Kernels {
    /// These kernels where tensors like `t` allow them: the fused ones need f32 on the CPU, and
    /// the composite reference runs everywhere.
    pub fn for_tensor(self, t: &Tensor) -> Kernels {
        match self {
            Kernels::Fused if t.device().is_cpu() && t.dtype() == DType::F32 => Kernels::Fused,
            _ => Kernels::Composite,
        }
    }
}

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
