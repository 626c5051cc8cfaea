//! Generating text from a model.

use crate::config::Position;
use crate::model::{Gpt, Mode};
use candle_core::{Device, Result, Tensor};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// Draws an index from unnormalised `logits` at `temperature` (0 = the most likely one).
pub fn sample_logits(logits: &[f32], temperature: f64, rng: &mut ChaCha8Rng) -> u32 {
    let argmax = || {
        logits
            .iter()
            .enumerate()
            .fold(0, |best, (i, &l)| if l > logits[best] { i } else { best })
    };
    if temperature <= 0.0 {
        return argmax() as u32;
    }
    let max = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let weights: Vec<f64> = logits
        .iter()
        .map(|&l| (((l - max) as f64) / temperature).exp())
        .collect();
    let total: f64 = weights.iter().sum();
    let mut r = rng.random::<f64>() * total;
    for (i, w) in weights.iter().enumerate() {
        r -= w;
        if r <= 0.0 {
            return i as u32;
        }
    }
    argmax() as u32
}

/// Continues `prompt` by up to `max_new_tokens` tokens, recomputing the whole (cropped) context
/// each step; stops early after `stop` when it is given. Each new token is passed to `on_token`
/// as soon as it is drawn (for streaming); all of them are returned.
pub fn generate(
    model: &Gpt,
    prompt: &[u32],
    max_new_tokens: usize,
    temperature: f64,
    stop: Option<u32>,
    rng: &mut ChaCha8Rng,
    on_token: &mut dyn FnMut(u32),
) -> Result<Vec<u32>> {
    let cfg = model.config();
    let mut context = prompt.to_vec();
    let mut new = Vec::new();
    for _ in 0..max_new_tokens {
        let start = if cfg.position == Position::Learned {
            context.len().saturating_sub(cfg.block_size)
        } else {
            0
        };
        let idx = Tensor::new(&context[start..], &Device::Cpu)?.unsqueeze(0)?; // (1, T)
        let logits = model.forward(&idx, &mut Mode::Eval)?; // (1, T, V)
        let last: Vec<f32> = logits.get(0)?.get(context.len() - start - 1)?.to_vec1()?; // (V,)
        let next = sample_logits(&last, temperature, rng);
        context.push(next);
        new.push(next);
        on_token(next);
        if Some(next) == stop {
            break;
        }
    }
    Ok(new)
}

/// Whether `poem` is well-formed verse: a regular form (4 or 8 lines, all of 5 or all of 7
/// characters) whose lines end alternately with ，and 。.
pub fn is_well_formed(poem: &str) -> bool {
    if crate::data::poem::regular_form(poem).is_none() {
        return false;
    }
    let marks: Vec<char> = poem
        .chars()
        .filter(|c| crate::data::poem::PUNCTUATION.contains(c))
        .collect();
    marks
        .iter()
        .enumerate()
        .all(|(i, &c)| c == if i % 2 == 0 { '，' } else { '。' })
}
