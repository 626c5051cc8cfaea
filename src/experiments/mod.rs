//! Experiments of the course, as library code the binaries call.

pub mod ablation;
pub mod attention_maps;
pub mod headers;
pub mod heatmap;
pub mod lesson;
pub mod probe;
pub mod report;
