//! The position probe of Haviv et al. (2022): can a linear map read a token's absolute position
//! from a layer's hidden states? Fitted by ridge regression on half of some validation windows
//! and scored (mean absolute error, in positions) on the other half.

use crate::data::{Split, Splits};
use crate::model::{Gpt, Mode};
use anyhow::{bail, Result};
use candle_core::Device;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// Windows used by the probe: half fit it, half score it.
pub const PROBE_WINDOWS: usize = 64;

/// Ridge penalty (features are LayerNorm-scale, so a small one suffices).
const RIDGE: f64 = 1e-2;

/// Mean absolute error of the linear position probe on each layer's residual stream: index 0 is
/// the embedding (tokens plus absolute positions, if any), index i the output of block i. Also
/// returns the error of always guessing the mean position, for scale.
pub fn position_probe(
    model: &Gpt,
    splits: &Splits,
    context: usize,
    seed: u64,
) -> Result<(Vec<f64>, f64)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (x, _) = splits.batch(Split::Val, PROBE_WINDOWS, context, &mut rng, &Device::Cpu)?; // (N, T)
    let mut layers = Vec::new();
    let mut h = model.embed(&x, &mut Mode::Eval)?; // (N, T, C)
    layers.push(h.clone());
    for block in &model.h {
        h = block.forward(&h, &model.position, model.kernels(), &mut Mode::Eval)?; // (N, T, C)
        layers.push(h.clone());
    }
    let half = PROBE_WINDOWS / 2 * context;
    let positions: Vec<f64> = (0..PROBE_WINDOWS * context)
        .map(|i| (i % context) as f64)
        .collect();
    let mut errors = Vec::new();
    for layer in layers {
        let c = layer.dim(2)?;
        let features: Vec<f32> = layer.flatten_all()?.to_vec1()?; // N·T·C
        let rows: Vec<&[f32]> = features.chunks(c).collect();
        let w = ridge_fit(&rows[..half], &positions[..half])?;
        let mae = rows[half..]
            .iter()
            .zip(&positions[half..])
            .map(|(r, &p)| (predict(&w, r) - p).abs())
            .sum::<f64>()
            / (rows.len() - half) as f64;
        errors.push(mae);
    }
    let mean = positions[..half].iter().sum::<f64>() / half as f64;
    let baseline = positions[half..]
        .iter()
        .map(|p| (p - mean).abs())
        .sum::<f64>()
        / (positions.len() - half) as f64;
    Ok((errors, baseline))
}

/// w (C + 1, the last entry the intercept) minimising ‖Xw − y‖² + RIDGE·‖w‖².
fn ridge_fit(rows: &[&[f32]], y: &[f64]) -> Result<Vec<f64>> {
    let d = rows.first().map_or(0, |r| r.len()) + 1;
    let mut a = vec![0f64; d * d]; // XᵀX + λI
    let mut b = vec![0f64; d]; // Xᵀy
    for (row, &target) in rows.iter().zip(y) {
        let x: Vec<f64> = row.iter().map(|&v| v as f64).chain([1.0]).collect();
        for i in 0..d {
            b[i] += x[i] * target;
            for j in 0..d {
                a[i * d + j] += x[i] * x[j];
            }
        }
    }
    for i in 0..d - 1 {
        a[i * d + i] += RIDGE;
    }
    solve(&mut a, &mut b, d)?;
    Ok(b)
}

/// Solves a x = b in place (b becomes x) by Gaussian elimination with partial pivoting.
fn solve(a: &mut [f64], b: &mut [f64], d: usize) -> Result<()> {
    for col in 0..d {
        let pivot = (col..d)
            .max_by(|&i, &j| a[i * d + col].abs().total_cmp(&a[j * d + col].abs()))
            .unwrap_or(col);
        if a[pivot * d + col].abs() < 1e-12 {
            bail!("the probe's normal equations are singular");
        }
        if pivot != col {
            for k in 0..d {
                a.swap(col * d + k, pivot * d + k);
            }
            b.swap(col, pivot);
        }
        for row in col + 1..d {
            let f = a[row * d + col] / a[col * d + col];
            for k in col..d {
                a[row * d + k] -= f * a[col * d + k];
            }
            b[row] -= f * b[col];
        }
    }
    for col in (0..d).rev() {
        let s: f64 = (col + 1..d).map(|k| a[col * d + k] * b[k]).sum();
        b[col] = (b[col] - s) / a[col * d + col];
    }
    Ok(())
}

fn predict(w: &[f64], row: &[f32]) -> f64 {
    row.iter()
        .zip(w)
        .map(|(&x, &wi)| x as f64 * wi)
        .sum::<f64>()
        + w[w.len() - 1]
}
