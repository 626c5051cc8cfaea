//! The vector instructions the hand-written loops run on, chosen when the program runs.
//!
//! The loops of the fused kernels are portable Rust that the compiler vectorises. Run through
//! [`widest`], they are compiled a second and third time inside functions that enable AVX2+FMA or
//! AVX-512, and the widest one this CPU has is taken: a binary built for any x86-64 target (with
//! or without `-C target-cpu=native`) runs the vector code of the CPU it meets. Sums keep their
//! fixed lanes, so every path gives the same result up to the order in which a few hand-written
//! intrinsics reduce.

use serde::Serialize;
use std::sync::OnceLock;

/// An instruction set for the hand-written loops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Isa {
    /// AVX-512 (F, BW, DQ, VL) with AVX2, FMA and F16C.
    Avx512,
    /// AVX2 with FMA and F16C (every AVX2 CPU has them).
    Avx2,
    /// Whatever the build's target enables.
    Portable,
}

impl Isa {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Avx512 => "avx512",
            Isa::Avx2 => "avx2+fma",
            Isa::Portable => "portable",
        }
    }

    /// Whether this CPU can run it.
    pub fn runs_here(self) -> bool {
        match self {
            Isa::Avx512 => super::cpu_features::avx512(),
            Isa::Avx2 => super::cpu_features::avx2(),
            Isa::Portable => true,
        }
    }

    /// The widest this CPU runs (detected once).
    pub fn detected() -> Isa {
        static DETECTED: OnceLock<Isa> = OnceLock::new();
        *DETECTED.get_or_init(|| {
            [Isa::Avx512, Isa::Avx2]
                .into_iter()
                .find(|isa| isa.runs_here())
                .unwrap_or(Isa::Portable)
        })
    }
}

/// Runs `f` compiled for the widest instruction set of this CPU: the loops inlined into it are
/// vectorised for that width.
#[inline(always)]
pub fn widest<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: `detected` returns only an instruction set this CPU runs.
    unsafe { run(Isa::detected(), f) }
}

/// Runs `f` compiled for `isa`; panics if this CPU cannot run it.
#[inline(always)]
pub fn on<R>(isa: Isa, f: impl FnOnce() -> R) -> R {
    assert!(isa.runs_here(), "this CPU cannot run {}", isa.name());
    // SAFETY: checked just above.
    unsafe { run(isa, f) }
}

/// Runs `f` compiled for `isa`. Safety: this CPU must run `isa`.
#[inline(always)]
unsafe fn run<R>(isa: Isa, f: impl FnOnce() -> R) -> R {
    match isa {
        // SAFETY: the caller's contract: the CPU has the features each function enables.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { with_avx512(f) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { with_avx2(f) },
        _ => f(),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")]
unsafe fn with_avx512<R>(f: impl FnOnce() -> R) -> R {
    f()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn with_avx2<R>(f: impl FnOnce() -> R) -> R {
    f()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{fast_math, gelu, layer_norm, lm_head_loss};

    /// Each hand-written loop over inputs with large, small, negative and tied values: exp, erf,
    /// GELU, softmax, LayerNorm, sums and dot products, and the gradients of GELU, LayerNorm and
    /// the cross-entropy.
    fn loops() -> Vec<Vec<f32>> {
        let x: Vec<f32> = (0..1000)
            .map(|i| ((i * 7919) % 2001) as f32 / 200.0 - 5.0)
            .collect();
        let mut out = vec![
            x.iter().map(|&v| fast_math::exp(v)).collect(),
            x.iter().map(|&v| fast_math::erf(v)).collect(),
            x.iter().map(|&v| gelu::gelu_value(v)).collect(),
        ];
        let mut softmax = x.clone();
        softmax
            .chunks_mut(100)
            .for_each(fast_math::softmax_in_place);
        out.push(softmax);
        let (w, b) = (vec![1.5f32; 100], vec![0.25f32; 100]);
        let mut normed = vec![0f32; x.len()];
        for (o, row) in normed.chunks_mut(100).zip(x.chunks(100)) {
            layer_norm::normalize_row(row, &w, &b, 1e-5, o);
        }
        out.push(normed);
        let rows: [&[f32]; fast_math::DOT_GROUP] =
            std::array::from_fn(|r| &x[r * 100..r * 100 + 99]);
        out.push(fast_math::dot_rows(&x[900..999], rows).to_vec());
        out.push(vec![
            fast_math::sum(&x),
            fast_math::max(&x),
            fast_math::dot(&x, &x),
        ]);
        // Gradients: GELU's, LayerNorm's (dx, dweight, dbias), the cross-entropy's exponentials and scales.
        let g: Vec<f32> = x.iter().map(|v| (v * 3.0).sin()).collect();
        let (mut gelu, mut gelu_slope) = (vec![0f32; x.len()], x.clone());
        gelu::values_and_slopes(&mut gelu, &mut gelu_slope);
        out.extend([gelu, gelu_slope]);
        let mut dx = vec![0f32; x.len()];
        let (dw, db) = layer_norm::backward_rows((&x, &w, &g), 1e-5, &mut dx, false);
        out.extend([dx, dw, db]);
        let mut logits = x.clone();
        let targets: Vec<u32> = (0..10).map(|i| i * 7).collect();
        let mut scales = vec![0f32; targets.len()];
        let mut losses = vec![0f32; targets.len()];
        let wanted = Some(&mut scales[..]);
        lm_head_loss::cross_entropy_rows(&mut logits, &targets, 0.1, wanted, &mut losses);
        out.extend([logits, scales, losses]);
        out
    }

    /// Checks that `isa`'s loops give the portable results, bit for bit.
    fn gives_the_portable_results(isa: Isa) {
        assert!(
            isa.runs_here(),
            "built on a CPU that runs {}, but this one does not: `cargo clean` and test again",
            isa.name()
        );
        let reference = on(Isa::Portable, loops);
        let got = on(isa, loops);
        for (case, (g, r)) in got.iter().zip(&reference).enumerate() {
            for (i, (g, r)) in g.iter().zip(r).enumerate() {
                assert_eq!(
                    g.to_bits(),
                    r.to_bits(),
                    "{}: loop {case}, element {i}: {g} against {r}",
                    isa.name()
                );
            }
        }
    }

    #[test]
    #[cfg_attr(not(cpu_avx512), ignore = "this CPU has no AVX-512")]
    fn avx512_gives_the_portable_results() {
        gives_the_portable_results(Isa::Avx512);
    }

    #[test]
    #[cfg_attr(not(cpu_avx2), ignore = "this CPU has no AVX2 with FMA and F16C")]
    fn avx2_gives_the_portable_results() {
        gives_the_portable_results(Isa::Avx2);
    }

    /// The choice against the CPU's own flags as Linux lists them in /proc/cpuinfo (a reading
    /// that is not the detection's).
    #[test]
    #[cfg_attr(
        not(all(target_os = "linux", target_arch = "x86_64")),
        ignore = "the CPU's flags are read from Linux's /proc/cpuinfo on x86-64"
    )]
    fn the_widest_instruction_set_is_the_one_the_cpus_flags_allow() {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap();
        let flags: Vec<&str> = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("flags"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, f)| f.split_whitespace().collect())
            .unwrap();
        let has = |all: &[&str]| all.iter().all(|f| flags.contains(f));
        let avx2 = has(&["avx2", "fma", "f16c"]);
        // A build without the avx512 feature is capped at AVX2 (cpu_features.rs).
        let avx512 =
            cfg!(feature = "avx512") && has(&["avx512f", "avx512bw", "avx512dq", "avx512vl"]);
        let expected = match (avx2, avx512) {
            (true, true) => Isa::Avx512,
            (true, false) => Isa::Avx2,
            (false, _) => Isa::Portable,
        };
        assert_eq!(Isa::detected(), expected, "flags: {flags:?}");
    }
}
