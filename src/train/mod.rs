//! Training: the optimiser, the schedule, checkpoints, metrics and the loop.

pub mod checkpoint;
pub mod interrupt;
pub mod metrics;
pub mod muon;
pub mod optim;
pub mod parent;
pub mod plan;
pub mod run;
pub mod schedule;
pub mod session;
pub mod shards;
mod state;
pub mod trainer;

pub use session::Session;
pub use trainer::{train, TrainOptions, TrainSummary};
