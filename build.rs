//! Tells the tests which instruction sets of this machine's CPU they can check. The library
//! chooses its kernels at run time and depends on none of this; a test of a kernel whose
//! instructions the CPU lacks is marked ignored, with the reason, so that `cargo test` reports
//! what it did not test instead of passing it. Tests are built where they run; a build copied to
//! another CPU fails those tests with a message instead.

// The library's own answers (src/ops/cpu_features.rs), so that the two cannot disagree.
#[path = "src/ops/cpu_features.rs"]
mod cpu_features;

/// An instruction set's cfg name, and whether this machine's CPU runs it.
type InstructionSet = (&'static str, fn() -> bool);

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=src/ops/cpu_features.rs");
    let sets: [InstructionSet; 5] = [
        ("cpu_avx2", cpu_features::avx2),
        ("cpu_avx512", cpu_features::avx512),
        ("cpu_avx512bf16", cpu_features::avx512bf16),
        ("cpu_amx", cpu_features::amx),
        ("cpu_f16c", cpu_features::f16c),
    ];
    for (set, _) in sets {
        println!("cargo::rustc-check-cfg=cfg({set})");
    }
    warn_of_a_cap_compiled_past_it();
    // Only when the tests run on the machine that builds them (no cross-compilation).
    if std::env::var("TARGET").ok() != std::env::var("HOST").ok() {
        return;
    }
    for (set, runs_here) in sets {
        if runs_here() {
            println!("cargo::rustc-cfg={set}");
        }
    }
}

/// A build capped at AVX2 (without the `avx512` feature) whose target is an AVX-512 CPU
/// (`target-cpu=native` on one, .cargo/config.toml) still compiles the code outside the kernels
/// for AVX-512: says how to compile it for AVX2 too.
fn warn_of_a_cap_compiled_past_it() {
    let capped = std::env::var_os("CARGO_FEATURE_AVX512").is_none();
    let features = std::env::var("CARGO_CFG_TARGET_FEATURE").unwrap_or_default();
    if capped && features.split(',').any(|f| f == "avx512f") {
        println!(
            "cargo::warning=built without the avx512 feature (capped at AVX2) but for an AVX-512 target: \
             for an AVX2 machine's code everywhere, build with RUSTFLAGS=\"-C target-cpu=x86-64-v3\""
        );
    }
}
