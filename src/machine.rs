//! What this machine is and which kernels run on it, so that every speed figure names its machine:
//! the CPU model, the vector instruction sets it offers, the matmul kernels the `gemm` crate picks
//! at run time and the instruction set the project's own kernels were compiled for.

use serde::Serialize;

/// The CPU and the kernels chosen for it.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// The CPU's model name (from /proc/cpuinfo; "unknown" elsewhere).
    pub cpu_model: String,
    /// The vector extensions that matter here, as the CPU reports them (e.g. "avx2 fma avx512f").
    pub isa: String,
    /// The float32 matmul microkernels that `gemm` selects on this CPU: "avx512f", "fma" or
    /// "scalar".
    pub gemm_kernels: &'static str,
    /// The bf16 matmuls of `--dtype bf16`: "amx" (the tile unit), "avx512bf16" (its dot
    /// products) or "none" (refused).
    pub bf16_kernels: &'static str,
    /// The instruction set of the project's own loops: the widest this CPU runs, chosen at run
    /// time, and the one the build's target enables everywhere else.
    pub fused_kernels: String,
    /// How generation's cached steps store the weight matrices here: f16 where the CPU converts
    /// it in hardware, else f32.
    pub decoder_weights: crate::ops::WeightFormat,
    /// Threads the work is spread over.
    pub threads: usize,
}

/// Whether this build is capped at AVX2 and f32 (an x86-64 build without the `avx512` feature:
/// src/ops/cpu_features.rs).
pub const CAPPED_AT_AVX2: bool = cfg!(all(target_arch = "x86_64", not(feature = "avx512")));

/// Why bf16 matmuls are not here, for a message that refuses them: the build's cap, or the CPU.
pub fn no_bf16_why() -> String {
    match CAPPED_AT_AVX2 {
        true => "this build is capped at AVX2 and f32 (built without the avx512 feature)".into(),
        false => format!(
            "this CPU ({}) has neither AMX-BF16 (or Linux refused its tiles) nor AVX512-BF16",
            Machine::detect().cpu_model
        ),
    }
}

/// The CPU extensions reported, in this order, when present.
const REPORTED: [&str; 7] = [
    "avx2",
    "fma",
    "avx512f",
    "avx512_bf16",
    "avx512_fp16",
    "amx_bf16",
    "amx_tile",
];

impl Machine {
    /// Reads this machine.
    pub fn detect() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let field = |name: &str| {
            cpuinfo
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        };
        let flags = field("flags").unwrap_or_default();
        let flags: Vec<&str> = flags.split_whitespace().collect();
        let isa = REPORTED
            .iter()
            .filter(|f| flags.contains(f))
            .copied()
            .collect::<Vec<_>>()
            .join(" ");
        Machine {
            cpu_model: field("model name").unwrap_or_else(|| "unknown".into()),
            isa,
            gemm_kernels: gemm_kernels(),
            bf16_kernels: crate::ops::bf16::Hardware::detect().map_or("none", |h| h.name()),
            fused_kernels: fused_kernels(),
            decoder_weights: crate::ops::WeightFormat::fastest(),
            threads: rayon::current_num_threads(),
        }
    }

    /// The vector extensions as reports show them ("no AVX" where none of them is there).
    pub fn isa_shown(&self) -> &str {
        if self.isa.is_empty() {
            "no AVX"
        } else {
            &self.isa
        }
    }

    /// One line for a report's header.
    pub fn describe(&self) -> String {
        format!(
            "{} ({}); matmul kernels: gemm {}, bf16 {}; fused kernels {}; decoder weights {}; {} threads",
            self.cpu_model,
            self.isa_shown(),
            self.gemm_kernels,
            self.bf16_kernels,
            self.fused_kernels,
            self.decoder_weights.name(),
            self.threads
        )
    }
}

/// The rule of gemm-common 0.19's `init_gemm_fn` for float32, with the `x86-v4` feature that
/// Cargo.toml turns on: AVX-512 where the CPU has it, else FMA (AVX2), else scalar code; NEON on
/// ARM (every aarch64 CPU has it); SIMD128 in a browser that has it.
fn gemm_kernels() -> &'static str {
    #[cfg(target_arch = "aarch64")]
    if std::arch::is_aarch64_feature_detected!("neon") {
        return "neon";
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    return "simd128";
    #[cfg(target_arch = "x86_64")]
    {
        if cfg!(feature = "avx512") && std::arch::is_x86_feature_detected!("avx512f") {
            return "avx512f";
        }
        if std::arch::is_x86_feature_detected!("fma") {
            return "fma";
        }
    }
    "scalar"
}

/// The instruction set of the project's own loops, and the build target's.
fn fused_kernels() -> String {
    let target = if cfg!(target_feature = "avx512f") {
        "avx512f"
    } else if cfg!(all(target_feature = "avx2", target_feature = "fma")) {
        "avx2+fma"
    } else if cfg!(target_arch = "aarch64") {
        "aarch64 (NEON)"
    } else if cfg!(target_arch = "x86_64") {
        "baseline x86-64"
    } else {
        std::env::consts::ARCH
    };
    let capped = match CAPPED_AT_AVX2 {
        true => "; built without the avx512 feature: capped at AVX2 and f32",
        false => "",
    };
    format!(
        "{} (chosen at run time; build target {target}{capped})",
        crate::ops::isa::Isa::detected().name()
    )
}

/// The most memory this process has held at once (its peak resident set size), in bytes; 0
/// where the system does not say. VmHWM, the resident set's high-water mark, is what
/// getrusage's ru_maxrss reports.
pub fn peak_memory() -> u64 {
    proc_bytes("/proc/self/status", "VmHWM:").unwrap_or(0)
}

/// The value of `key` in a /proc file of `key  N kB` lines, in bytes; None where the file or the
/// key is absent (not Linux).
fn proc_bytes(file: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    let kb = text.lines().find_map(|l| l.strip_prefix(key))?;
    let kb: u64 = kb.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kb.saturating_mul(1024))
}

/// Memory the system can give this process without swapping, in bytes: MemAvailable from
/// /proc/meminfo (where there is none, no limit is known and u64::MAX is returned). In a
/// browser (wasm32), what the module can still grow to: a wasm32 memory addresses at most
/// 4 GiB, and what it holds already is taken.
pub fn available_memory() -> u64 {
    #[cfg(target_arch = "wasm32")]
    {
        let held = core::arch::wasm32::memory_size(0) as u64 * WASM_PAGE;
        WASM32_MEMORY.saturating_sub(held)
    }
    #[cfg(not(target_arch = "wasm32"))]
    proc_bytes("/proc/meminfo", "MemAvailable:").unwrap_or(u64::MAX)
}

/// The most memory a wasm32 module can address: 65,536 pages of [`WASM_PAGE`] bytes.
#[cfg(target_arch = "wasm32")]
const WASM32_MEMORY: u64 = 4 << 30;
/// A page of wasm memory.
#[cfg(target_arch = "wasm32")]
const WASM_PAGE: u64 = 64 << 10;

/// Bytes for people: `713 MB`, `2.4 GB`, `3.1e+12 GB`.
pub fn human_bytes(bytes: f64) -> String {
    match bytes {
        b if b < 1e6 => format!("{:.0} kB", b / 1e3),
        b if b < 1e9 => format!("{:.0} MB", b / 1e6),
        b if b < 1e12 => format!("{:.1} GB", b / 1e9),
        b => format!("{:.1e} GB", b / 1e9),
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use crate::ops::isa::Isa;

    /// A build without the `avx512` feature runs AVX2's kernels on an x86 CPU with AVX-512 too,
    /// f32 alone, and says so in every machine line.
    #[test]
    #[cfg(not(feature = "avx512"))]
    #[cfg_attr(not(cpu_avx2), ignore = "this CPU has no AVX2")]
    fn a_build_without_avx512_is_capped_at_avx2() {
        let machine = Machine::detect();
        assert_eq!(Isa::detected(), Isa::Avx2);
        assert_eq!(machine.gemm_kernels, "fma");
        assert_eq!(machine.bf16_kernels, "none");
        assert!(
            machine.fused_kernels.contains("capped at AVX2"),
            "{machine:?}"
        );
        assert!(no_bf16_why().contains("capped at AVX2"));
    }

    /// The default build takes AVX-512 where the CPU has it.
    #[test]
    #[cfg(feature = "avx512")]
    #[cfg_attr(not(cpu_avx512), ignore = "this CPU has no AVX-512")]
    fn the_default_build_takes_avx512_where_the_cpu_has_it() {
        let machine = Machine::detect();
        assert_eq!(Isa::detected(), Isa::Avx512);
        assert_eq!(machine.gemm_kernels, "avx512f");
        assert!(!machine.fused_kernels.contains("capped"), "{machine:?}");
    }
}
