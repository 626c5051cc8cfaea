//! Tells the tests which instruction sets of this machine's CPU they can check. The library
//! chooses its kernels at run time and depends on none of this; a test of a kernel whose
//! instructions the CPU lacks is marked ignored, with the reason, so that `cargo test` reports
//! what it did not test instead of passing it. Tests are built where they run; a build copied to
//! another CPU fails those tests with a message instead.

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let sets = [
        "cpu_avx2",
        "cpu_avx512",
        "cpu_avx512bf16",
        "cpu_amx",
        "cpu_f16c",
    ];
    for set in sets {
        println!("cargo::rustc-check-cfg=cfg({set})");
    }
    // Only when the tests run on the machine that builds them (no cross-compilation).
    if std::env::var("TARGET").ok() != std::env::var("HOST").ok() {
        return;
    }
    for set in detected() {
        println!("cargo::rustc-cfg={set}");
    }
}

/// The sets of `main` this CPU runs, with the same tests as the library's run-time detection
/// (`Isa::runs_here`, `bf16::Hardware::detect`, `WeightFormat::f16_converts_here`).
#[cfg(target_arch = "x86_64")]
fn detected() -> Vec<&'static str> {
    use std::arch::is_x86_feature_detected as has;
    let avx2 = has!("avx2") && has!("fma") && has!("f16c");
    let avx512 =
        avx2 && has!("avx512f") && has!("avx512bw") && has!("avx512dq") && has!("avx512vl");
    let candidates = [
        ("cpu_avx2", avx2),
        ("cpu_avx512", avx512),
        ("cpu_avx512bf16", has!("avx512bf16") && has!("avx512bw")),
        ("cpu_amx", amx()),
        ("cpu_f16c", has!("f16c") && has!("avx")),
    ];
    candidates
        .into_iter()
        .filter(|(_, has)| *has)
        .map(|(set, _)| set)
        .collect()
}

#[cfg(not(target_arch = "x86_64"))]
fn detected() -> Vec<&'static str> {
    Vec::new()
}

/// AMX-BF16 and AMX-TILE in CPUID, and Linux's permission to use the tiles.
#[cfg(target_arch = "x86_64")]
fn amx() -> bool {
    let edx = std::arch::x86_64::__cpuid_count(7, 0).edx;
    if edx & (1 << 22) == 0 || edx & (1 << 24) == 0 {
        return false;
    }
    #[cfg(target_os = "linux")]
    {
        const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
        const XFEATURE_XTILEDATA: libc::c_long = 18;
        // SAFETY: a system call with integer arguments that only changes this (build script's)
        // process's permissions; it fails cleanly on kernels without AMX support.
        unsafe {
            libc::syscall(
                libc::SYS_arch_prctl,
                ARCH_REQ_XCOMP_PERM,
                XFEATURE_XTILEDATA,
            ) == 0
        }
    }
    #[cfg(not(target_os = "linux"))]
    false
}
