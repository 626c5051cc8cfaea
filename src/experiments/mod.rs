//! Experiments of the course, as library code the binaries call.

pub mod ablation;
pub mod attention_maps;
pub mod heads_positions;
pub mod heatmap;
pub mod probe;
pub mod report;
