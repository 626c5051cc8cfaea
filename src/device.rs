//! The device that runs the model. On the CPU the fused kernels of [`crate::ops`] do the work; in
//! builds with the `cuda` or `metal` feature a GPU can run it with candle's composite ops.

use anyhow::{bail, Context, Result};
use candle_core::Device;

/// The devices `--device` accepts, for help texts.
pub const DEVICE_HELP: &str = "cpu, cuda, cuda:N or metal";

/// Opens the device named `cpu`, `cuda`, `cuda:N` (the N-th GPU) or `metal`. A GPU this build
/// cannot drive gives an error that says which feature to build with.
pub fn open(name: &str) -> Result<Device> {
    let name = name.trim().to_ascii_lowercase();
    let (kind, ordinal) = match name.split_once(':') {
        Some((kind, n)) => {
            let n: usize = n.parse().with_context(|| {
                format!("`{name}`: the device number after `:` must be 0, 1, …")
            })?;
            (kind, n)
        }
        None => (name.as_str(), 0),
    };
    match kind {
        "cpu" if ordinal == 0 => Ok(Device::Cpu),
        "cuda" if !candle_core::utils::cuda_is_available() => bail!(
            "this build has no CUDA support: rebuild with the `cuda` feature (needs the CUDA \
             toolkit), e.g. `cargo run --release --features cuda --bin {} -- --device cuda`",
            this_binary()
        ),
        "cuda" => {
            Device::new_cuda(ordinal).with_context(|| format!("cannot open CUDA device {ordinal}"))
        }
        "metal" if !candle_core::utils::metal_is_available() => bail!(
            "this build has no Metal support: rebuild with the `metal` feature (macOS), e.g. \
             `cargo run --release --features metal --bin {} -- --device metal`",
            this_binary()
        ),
        "metal" => Device::new_metal(ordinal)
            .with_context(|| format!("cannot open Metal device {ordinal}")),
        _ => bail!("unknown device `{name}`: use {DEVICE_HELP}"),
    }
}

/// The name of the running binary (train, sample), for the command that rebuilds it.
fn this_binary() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.file_stem()?.to_str()?.to_string()))
        .filter(|name| !name.contains('-'))
        .unwrap_or_else(|| "train".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_missing_backends_say_how_to_build() {
        assert!(open("cpu").unwrap().is_cpu());
        assert!(open(" CPU ").unwrap().is_cpu());
        for bad in ["gpu", "cpu:1", "cuda:x", ""] {
            let err = open(bad).unwrap_err().to_string();
            assert!(
                err.contains("device") || err.contains("`:`"),
                "{bad}: {err}"
            );
        }
        if !candle_core::utils::cuda_is_available() {
            let err = open("cuda:0").unwrap_err().to_string();
            assert!(err.contains("--features cuda"), "{err}");
        }
        if !candle_core::utils::metal_is_available() {
            let err = open("metal").unwrap_err().to_string();
            assert!(err.contains("--features metal"), "{err}");
        }
    }
}
