//! Token streams for the train and validation splits, and seeded random windows over them.

use crate::data::error::DataError;
use crate::data::tokenizer::CharTokenizer;
use crate::data::RunText;
use candle_core::{Device, Result, Tensor};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// Which split to draw from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// The training text.
    Train,
    /// The held-out text.
    Val,
    /// What the schedule's decay trains on (`[data] decay_corpus`; the training text without one).
    Decay,
}

/// The two splits as token streams (`RunText::split_text`), and the decay's where it has its own.
pub struct Splits {
    /// Training tokens.
    pub train: Vec<u32>,
    /// Validation tokens.
    pub val: Vec<u32>,
    /// The decay's training tokens, where it trains on other text.
    pub decay: Option<Vec<u32>>,
}

impl Splits {
    /// Encodes the corpus's split; fails when either side is shorter than one window of
    /// `block_size + 1` tokens.
    pub fn new(
        run_text: &RunText,
        tokenizer: &CharTokenizer,
        block_size: usize,
    ) -> std::result::Result<Self, DataError> {
        let (train, val) = run_text.split_text();
        let decay = run_text.decay.as_ref().map(|d| tokenizer.encode(&d.text));
        let splits = Splits {
            train: tokenizer.encode(&train)?,
            val: tokenizer.encode(&val)?,
            decay: decay.transpose()?,
        };
        let decay = splits.decay.iter().map(|tokens| ("decay", tokens));
        for (name, tokens) in [("train", &splits.train), ("val", &splits.val)]
            .into_iter()
            .chain(decay)
        {
            if tokens.len() < block_size + 1 {
                return Err(DataError::TooShort {
                    split: name,
                    origin: run_text.source_of(name),
                    tokens: tokens.len(),
                    needed: block_size + 1,
                });
            }
        }
        Ok(splits)
    }

    /// The tokens of one split.
    pub fn tokens(&self, split: Split) -> &[u32] {
        match split {
            Split::Train => &self.train,
            Split::Val => &self.val,
            Split::Decay => self.decay.as_deref().unwrap_or(&self.train),
        }
    }

    /// `batch_size` windows of `block_size + 1` tokens at random offsets, as nanoGPT draws them:
    /// x = window[..T], y = window[1..], each (B, T) u32.
    pub fn batch(
        &self,
        split: Split,
        batch_size: usize,
        block_size: usize,
        rng: &mut ChaCha8Rng,
        device: &Device,
    ) -> Result<(Tensor, Tensor)> {
        let tokens = self.tokens(split);
        let mut x = Vec::with_capacity(batch_size * block_size);
        let mut y = Vec::with_capacity(batch_size * block_size);
        for _ in 0..batch_size {
            let start = rng.random_range(0..=tokens.len() - block_size - 1);
            x.extend_from_slice(&tokens[start..start + block_size]);
            y.extend_from_slice(&tokens[start + 1..start + block_size + 1]);
        }
        Ok((
            Tensor::from_vec(x, (batch_size, block_size), device)?, // (B, T)
            Tensor::from_vec(y, (batch_size, block_size), device)?, // (B, T)
        ))
    }

    /// The whole split in consecutive windows of `block_size` tokens, so that every token but the
    /// first is predicted exactly once: batches of up to `batch_size` windows as (x, y), each
    /// (B, T) u32, the last window shorter when the split does not divide evenly.
    pub fn windows(
        &self,
        split: Split,
        batch_size: usize,
        block_size: usize,
        device: &Device,
    ) -> Result<Vec<(Tensor, Tensor)>> {
        let tokens = self.tokens(split);
        let predicted = tokens.len().saturating_sub(1);
        let (full, rest) = (predicted / block_size, predicted % block_size);
        let window = |i: usize, len: usize| -> (&[u32], &[u32]) {
            let start = i * block_size;
            (
                &tokens[start..start + len],
                &tokens[start + 1..start + len + 1],
            )
        };
        let mut batches = Vec::new();
        for first in (0..full).step_by(batch_size.max(1)) {
            let rows = batch_size.max(1).min(full - first);
            let (mut x, mut y) = (Vec::new(), Vec::new());
            for i in first..first + rows {
                let (wx, wy) = window(i, block_size);
                x.extend_from_slice(wx);
                y.extend_from_slice(wy);
            }
            batches.push((
                Tensor::from_vec(x, (rows, block_size), device)?, // (B, T)
                Tensor::from_vec(y, (rows, block_size), device)?, // (B, T)
            ));
        }
        if rest > 0 {
            let (wx, wy) = window(full, rest);
            batches.push((
                Tensor::from_slice(wx, (1, rest), device)?, // (1, T')
                Tensor::from_slice(wy, (1, rest), device)?, // (1, T')
            ));
        }
        Ok(batches)
    }
}
