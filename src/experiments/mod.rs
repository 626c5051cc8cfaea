//! Experiments of the course, as library code the binaries call.

pub mod heads_positions;
