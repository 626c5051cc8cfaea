//! Experiments of the course, as library code the binaries call.

pub mod ablation;
pub mod attention_maps;
pub mod header_worth;
pub mod heatmap;
pub mod lesson;
pub mod probe;
pub mod report;
