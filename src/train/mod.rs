//! Training, in the order a run goes: its folder ([`run_dir`]), opened and set up ([`run`],
//! [`setup`], fresh or [`resume`]d), trained step by step ([`trainer`], its batch cut in units:
//! [`shards`]; the optimiser [`optim`] with [`muon`], its [`schedule`]; steps [`plan`]ned for
//! minutes, a recipe chosen for them from the [`ladder`], the loss to [`expect`] of it),
//! evaluated and written ([`checkpoint`], [`metrics`], [`state`]), stopped by a signal
//! ([`interrupt`]); a fine-tune starts from a [`parent`], a run loads for use ([`load`]), and the
//! tab trains one in memory ([`session`]).

pub mod checkpoint;
pub mod expect;
pub mod fit;
pub mod interrupt;
pub mod ladder;
pub mod load;
pub mod metrics;
pub mod muon;
pub mod optim;
pub mod parent;
pub mod plan;
pub mod resume;
pub mod run;
pub mod run_dir;
pub mod safetensors;
pub mod schedule;
pub mod session;
pub mod setup;
pub mod shards;
mod state;
pub mod trainer;

pub use run::TrainOptions;
pub use session::Session;
pub use trainer::{train, TrainSummary};
