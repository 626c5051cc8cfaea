//! Drawing the next token from logits: temperature, top-k and top-p (nucleus) sampling.

use crate::ops::fast_math;
use crate::sample::SampleError;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// How the next token is drawn from the model's logits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    /// Divides the logits; 0 picks the most likely token (greedy).
    pub temperature: f64,
    /// Keep only the k most likely tokens.
    pub top_k: Option<usize>,
    /// Keep the fewest most likely tokens whose probabilities sum to at least p.
    pub top_p: Option<f64>,
}

impl Sampling {
    /// Always the most likely token.
    pub const GREEDY: Sampling = Sampling {
        temperature: 0.0,
        top_k: None,
        top_p: None,
    };

    /// Plain sampling at `temperature`, without truncation.
    pub fn with_temperature(temperature: f64) -> Self {
        Sampling {
            temperature,
            ..Sampling::GREEDY
        }
    }

    /// Checks temperature ≥ 0, top-k ≥ 1 and top-p in (0, 1].
    pub fn validate(&self) -> Result<(), SampleError> {
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(SampleError::Temperature(self.temperature));
        }
        if self.top_k == Some(0) {
            return Err(SampleError::TopK);
        }
        if let Some(p) = self.top_p {
            if !(p > 0.0 && p <= 1.0) {
                return Err(SampleError::TopP(p));
            }
        }
        Ok(())
    }

    /// Draws an index from unnormalised `logits`; −∞ entries are never drawn (unless all are).
    pub fn draw(&self, logits: &[f32], rng: &mut ChaCha8Rng) -> u32 {
        if self.temperature <= 0.0 {
            return argmax(logits);
        }
        let max = fast_math::max(logits);
        let inv_t = (1.0 / self.temperature) as f32;
        // Masked tokens get exactly 0 (the fast exp gives 1e-38 there); a select in the same loop
        // (a separate masking loop compiled to masked stores, slow on AMD CPUs).
        let weights: Vec<f32> = logits
            .iter()
            .map(|&l| {
                let w = fast_math::exp((l - max) * inv_t);
                if l == f32::NEG_INFINITY {
                    0.0
                } else {
                    w
                }
            })
            .collect();
        if self.top_k.is_none() && self.top_p.is_none() {
            let total = fast_math::sum(&weights);
            return pick_dense(&weights, total, rng).unwrap_or_else(|| argmax(logits));
        }
        let kept = self.truncate(logits, &weights);
        let total: f32 = kept.iter().map(|&i| weights[i]).sum();
        pick(kept.iter().map(|&i| (i, weights[i])), total, rng).unwrap_or_else(|| argmax(logits))
    }

    /// The indices top-k and top-p keep, most likely first, of `logits` whose weights at the
    /// temperature are `weights`.
    fn truncate(&self, logits: &[f32], weights: &[f32]) -> Vec<usize> {
        // Most likely first, ranked by logit: at a huge temperature every weight rounds to 1, but
        // the order of the logits is the order of the probabilities at any temperature. Equal
        // logits by index, so that the choice is deterministic.
        let heavier = |a: &usize, b: &usize| logits[*b].total_cmp(&logits[*a]).then(a.cmp(b));
        let mut kept: Vec<usize> = (0..weights.len()).filter(|&i| weights[i] > 0.0).collect();
        if let Some(k) = self.top_k {
            if kept.len() > k {
                kept.select_nth_unstable_by(k - 1, heavier);
                kept.truncate(k);
            }
        }
        if let Some(p) = self.top_p {
            let total: f32 = kept.iter().map(|&i| weights[i]).sum();
            let target = p as f32 * total;
            // The nucleus is the heaviest tokens first, so when the tokens above a small threshold
            // already hold p of the mass, only they need sorting (the common case).
            let heavy: Vec<usize> = kept
                .iter()
                .copied()
                .filter(|&i| weights[i] >= NUCLEUS_PREFILTER)
                .collect();
            if heavy.iter().map(|&i| weights[i]).sum::<f32>() >= target {
                kept = heavy;
            }
            kept.sort_unstable_by(heavier);
            let mut mass = 0.0;
            let size = kept
                .iter()
                .take_while(|&&i| {
                    let before = mass;
                    mass += weights[i];
                    before < target
                })
                .count();
            kept.truncate(size.max(1));
        }
        kept
    }
}

/// Weight (relative to the most likely token's 1) below which a token is left out of the sort
/// for top-p whenever the heavier tokens already reach p.
const NUCLEUS_PREFILTER: f32 = 1e-4;

/// Draws one of `candidates` (index, weight) in proportion to its weight; `None` if all are 0.
fn pick(
    candidates: impl Iterator<Item = (usize, f32)>,
    total: f32,
    rng: &mut ChaCha8Rng,
) -> Option<u32> {
    if total.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
        return None;
    }
    let mut r = rng.random::<f32>() * total;
    let mut last = None;
    for (i, w) in candidates {
        if w > 0.0 {
            last = Some(i as u32);
            r -= w;
            if r <= 0.0 {
                return last;
            }
        }
    }
    last
}

/// Tokens per block in [`pick_dense`].
const PICK_BLOCK: usize = 64;

/// Draws an index of `weights` in proportion to its weight; `None` if all are 0. As [`pick`] over
/// every index, but whole blocks whose sum does not reach the remaining mass are skipped at once
/// (their sums vectorise; walking every weight is a chain of dependent subtractions).
fn pick_dense(weights: &[f32], total: f32, rng: &mut ChaCha8Rng) -> Option<u32> {
    if total.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
        return None;
    }
    let mut r = rng.random::<f32>() * total;
    for (b, block) in weights.chunks(PICK_BLOCK).enumerate() {
        let mass = fast_math::sum(block);
        if r > mass {
            r -= mass;
            continue;
        }
        for (i, &w) in block.iter().enumerate() {
            if w > 0.0 {
                r -= w;
                if r <= 0.0 {
                    return Some((b * PICK_BLOCK + i) as u32);
                }
            }
        }
        // Rounding left a sliver of mass: the walk goes on into the next blocks.
    }
    weights.iter().rposition(|&w| w > 0.0).map(|i| i as u32)
}

/// The index of the largest logit (the first of equals).
fn argmax(logits: &[f32]) -> u32 {
    logits
        .iter()
        .enumerate()
        .fold(0, |best, (i, &l)| if l > logits[best] { i } else { best }) as u32
}
