//! What each instruction set of the kernels needs of the CPU, asked at run time. The library
//! chooses its kernels by these answers, and build.rs (which includes this file) tells the tests
//! by the same answers which kernels this machine can check. Only std and libc here.
//!
//! A build without the `avx512` feature is capped at AVX2 and f32, as most laptops run: it says
//! no to AVX-512, AVX512-BF16 and AMX on any CPU (and gemm keeps its AVX2 kernels, the feature
//! being its `x86-v4` too), so that what an AVX2 machine trains can be measured on a wider one.

/// Whether this build may use the instruction sets past AVX2 (the `avx512` feature).
#[cfg(target_arch = "x86_64")]
const PAST_AVX2: bool = cfg!(feature = "avx512");

#[cfg(target_arch = "x86_64")]
use std::arch::is_x86_feature_detected as has;

/// AVX2 with FMA and F16C: the loops' AVX2 kernels.
pub fn avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    return has!("avx2") && has!("fma") && has!("f16c");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// AVX2's set and AVX-512 F, BW, DQ and VL: the loops' and the decoder's AVX-512 kernels.
pub fn avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    return PAST_AVX2
        && avx2()
        && has!("avx512f")
        && has!("avx512bw")
        && has!("avx512dq")
        && has!("avx512vl");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// AVX512-BF16 with AVX512-BW: bf16 products by `vdpbf16ps`, and the bf16 conversions.
// Only x86-64 builds have kernels that ask (build.rs asks on every machine).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub fn avx512bf16() -> bool {
    #[cfg(target_arch = "x86_64")]
    return PAST_AVX2 && has!("avx512bf16") && has!("avx512bw");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// F16C with AVX: f16 converted to f32 in hardware (the decoder's f16 weights).
pub fn f16c() -> bool {
    #[cfg(target_arch = "x86_64")]
    return has!("f16c") && has!("avx");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// AMX-BF16 and AMX-TILE in CPUID, and Linux's leave for this process to use the tile registers
/// (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`, which changes only this process's
/// permissions). Ask once per process.
pub fn amx() -> bool {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        if !PAST_AVX2 {
            return false;
        }
        // CPUID leaf 7: EDX bit 22 AMX-BF16, bit 24 AMX-TILE.
        let edx = std::arch::x86_64::__cpuid_count(7, 0).edx;
        if edx & (1 << 22) == 0 || edx & (1 << 24) == 0 {
            return false;
        }
        const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
        const XFEATURE_XTILEDATA: libc::c_long = 18;
        // SAFETY: a system call with integer arguments that only changes this process's
        // permissions; it fails cleanly on kernels without AMX support.
        unsafe {
            libc::syscall(
                libc::SYS_arch_prctl,
                ARCH_REQ_XCOMP_PERM,
                XFEATURE_XTILEDATA,
            ) == 0
        }
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    false
}
