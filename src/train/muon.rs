//! Muon's update of one weight matrix (Keller Jordan, 2024, "Muon: an optimizer for hidden layers
//! in neural networks", as modded-nanogpt runs it): momentum, Nesterov's look-ahead, then the
//! update orthogonalised by five Newton–Schulz iterations, scaled by √max(1, rows/cols).
//!
//! modded-nanogpt iterates in bf16 on a GPU; here every product is f32 (on the CPU bf16 would buy
//! little at these sizes and cost accuracy).

use crate::ops::matmul_f32::{matmul_on, Operand};

/// The quintic's coefficients (a, b, c), chosen by Jordan to push every singular value towards 1
/// in few steps (to about 0.7–1.2, which is enough).
const NEWTON_SCHULZ: (f32, f32, f32) = (3.4445, -4.7750, 2.0315);

/// Newton–Schulz iterations per update.
const NEWTON_SCHULZ_STEPS: usize = 5;

/// Muon's hyper-parameters.
#[derive(Debug, Clone, Copy)]
pub struct MuonParams {
    /// Momentum (0.95 in modded-nanogpt).
    pub momentum: f64,
}

/// X (rows × cols) ← a·X + (b·A + c·A²)·X with A = X·Xᵀ, five times, from X = G / (‖G‖_F + 1e-7):
/// an approximation of U·Vᵀ for G = U·S·Vᵀ. Works on the wide orientation (rows ≤ cols), so
/// that A is the smaller square.
pub fn orthogonalise(g: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    assert_eq!(g.len(), rows * cols, "a {rows} × {cols} matrix");
    let tall = rows > cols;
    let (r, c) = if tall { (cols, rows) } else { (rows, cols) };
    let mut x = if tall {
        transpose(g, rows, cols)
    } else {
        g.to_vec()
    }; // (r, c)
    let norm = x
        .iter()
        .map(|&v| f64::from(v) * f64::from(v))
        .sum::<f64>()
        .sqrt();
    let inverse = (1.0 / (norm + 1e-7)) as f32;
    x.iter_mut().for_each(|v| *v *= inverse);

    let (a, b, c2) = NEWTON_SCHULZ;
    let (mut gram, mut gram2, mut bx) = (vec![0.0; r * r], vec![0.0; r * r], vec![0.0; r * c]);
    for _ in 0..NEWTON_SCHULZ_STEPS {
        let xs = Operand::rows(&x, c);
        product(&mut gram, (r, r, c), xs, xs.t()); // A = X·Xᵀ (r, r)
        product(
            &mut gram2,
            (r, r, r),
            Operand::rows(&gram, r),
            Operand::rows(&gram, r),
        ); // A² (r, r)
           // B = b·A + c·A², kept in gram2 (r, r).
        gram2
            .iter_mut()
            .zip(&gram)
            .for_each(|(a2, a1)| *a2 = b * a1 + c2 * *a2);
        product(
            &mut bx,
            (r, c, r),
            Operand::rows(&gram2, r),
            Operand::rows(&x, c),
        ); // B·X (r, c)
        x.iter_mut().zip(&bx).for_each(|(x, bx)| *x = a * *x + bx);
    }
    if tall {
        transpose(&x, r, c)
    } else {
        x
    }
}

/// dst (m × n) = lhs (m × k) · rhs (k × n), f32, on the calling thread: the optimiser updates
/// its matrices side by side, one per thread.
fn product(dst: &mut [f32], (m, n, k): (usize, usize, usize), lhs: Operand, rhs: Operand) {
    matmul_on(dst, m, n, k, lhs, rhs, false, 1);
}

/// The transpose (cols × rows) of a row-major rows × cols matrix.
fn transpose(x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0; x.len()];
    for i in 0..rows {
        for j in 0..cols {
            out[j * rows + i] = x[i * cols + j];
        }
    }
    out
}

/// One Muon update of a weight `theta` (rows × cols) with gradient `g` times `scale` (the
/// clipping's factor) and momentum buffer `buffer`, at learning rate `lr`:
/// buffer ← μ·buffer + (1 − μ)·g; u = (1 − μ)·g + μ·buffer; θ ← θ − lr·√max(1, rows/cols)·NS(u).
pub fn update(
    theta: &mut [f32],
    buffer: &mut [f32],
    (g, scale): (&[f32], f32),
    (rows, cols): (usize, usize),
    lr: f64,
    params: MuonParams,
) {
    let mu = params.momentum as f32;
    let mut u = vec![0.0; g.len()];
    for ((b, u), &g) in buffer.iter_mut().zip(&mut u).zip(g) {
        let g = g * scale;
        *b = mu * *b + (1.0 - mu) * g;
        *u = (1.0 - mu) * g + mu * *b;
    }
    let step = (lr * (rows as f64 / cols as f64).max(1.0).sqrt()) as f32;
    for (t, o) in theta.iter_mut().zip(orthogonalise(&u, rows, cols)) {
        *t -= step * o;
    }
}
