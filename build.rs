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
