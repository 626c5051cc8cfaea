//! The CPU engine: the model written out on plain f32 slices, for training and for generation.
//!
//! The candle graph ([`crate::model`]) is the readable reference and the path of other devices;
//! on the CPU both training and generation run here, since candle's per-op allocations,
//! dispatch and autograd bookkeeping cost more than a small model's arithmetic. The engine reads
//! the model's own tensors in place (`weights`), takes every positional scheme's behaviour from
//! [`crate::model::position`] (the graph's own), and has two entry points:
//! - [`step`]: a training step over a batch, forward and backward, every positional scheme and
//!   dropout;
//! - [`decoder`]: generation, a prompt at once then one position at a time, with a key/value
//!   cache.
//!
//! Both call the fused kernels of [`crate::ops`] (LayerNorm, Linear, GELU, attention rows); the
//! tests (tests/engine.rs) check both against the candle graph for every scheme and layout.

pub mod decoder;
pub mod step;
pub(crate) mod team;
mod weights;

pub use decoder::{CpuDecoder, DecodeState};
pub use step::{loss, loss_and_gradients, supports, ParamGrads};
