//! The positional scheme as the CPU engine applies it, for a training batch (sequences from
//! position 0) and for generation (new positions after the cached ones) alike.

use super::weights::Values;
use crate::model::position::{rope_angles, rotate_pairs, sinusoidal_table, PositionEncoding};
use candle_core::{bail, Result};

/// One of the five schemes, its table read in place, with the model's scheme it reads.
pub(crate) struct Positions<'m> {
    scheme: &'m PositionEncoding,
    read: Read<'m>,
}

/// What the engine reads of each scheme.
enum Read<'m> {
    /// No positions.
    None,
    /// The learned table (block_size × C), added to the embeddings.
    Learned(Values<'m>),
    /// The sin/cos table times this scale, computed for the positions asked for and added to the
    /// embeddings.
    Sinusoidal(f64),
    /// Rotation of each head's q and k.
    Rope { head_dim: usize, base: f64 },
    /// Per-head slopes of the distance penalty on the scores.
    Alibi(Vec<f32>),
}

impl<'m> Positions<'m> {
    pub fn new(scheme: &'m PositionEncoding) -> Result<Self> {
        let read = match scheme {
            PositionEncoding::None => Read::None,
            PositionEncoding::Learned { table } => Read::Learned(Values::new(table)?),
            PositionEncoding::Sinusoidal { scale, .. } => Read::Sinusoidal(*scale),
            PositionEncoding::Rope { head_dim, base } => Read::Rope {
                head_dim: *head_dim,
                base: *base,
            },
            PositionEncoding::Alibi { slopes } => {
                Read::Alibi(slopes.iter().map(|&s| s as f32).collect())
            }
        };
        Ok(Positions { scheme, read })
    }

    /// The residual stream entering the blocks (N × C): the rows of `wte` (V × C) for `ids`,
    /// plus, for the learned and sinusoidal schemes, positions `start..start+len` in each
    /// sequence of `len` rows.
    pub fn embed(
        &self,
        (wte, c): (&[f32], usize),
        ids: &[u32],
        (start, len): (usize, usize),
    ) -> Result<Vec<f32>> {
        let mut x = Vec::with_capacity(ids.len() * c); // (N, C)
        for &id in ids {
            let Some(row) = wte.get(id as usize * c..(id as usize + 1) * c) else {
                bail!(
                    "token id {id} is outside the vocabulary of {}",
                    wte.len() / c
                )
            };
            x.extend_from_slice(row);
        }
        let end = start + len;
        self.scheme.check_positions(end)?;
        let table = match &self.read {
            Read::Learned(table) => table.get()[start * c..end * c].to_vec(),
            Read::Sinusoidal(scale) => sinusoidal_table(start, len, c, *scale),
            _ => return Ok(x),
        }; // (len, C)
        for sequence in x.chunks_mut(len * c) {
            sequence.iter_mut().zip(&table).for_each(|(x, p)| *x += p);
        }
        Ok(x)
    }

    /// The learned table's gradient (block_size × C) from the gradient d_x (N × C, sequences of
    /// `len` rows from position 0) of [`Positions::embed`]'s output; `None` for the other schemes.
    pub fn table_gradient(&self, d_x: &[f32], (len, c): (usize, usize)) -> Option<Vec<f32>> {
        let Read::Learned(table) = &self.read else {
            return None;
        };
        let mut d_table = vec![0f32; table.get().len()]; // (block_size, C)
        for sequence in d_x.chunks(len * c) {
            d_table.iter_mut().zip(sequence).for_each(|(d, g)| *d += g);
        }
        Some(d_table)
    }

    /// RoPE's rotations of positions `start..start+len`; `None` for the other schemes.
    pub fn rotations(&self, start: usize, len: usize) -> Option<Rotations> {
        let Read::Rope { head_dim, base } = &self.read else {
            return None;
        };
        let (cos, sin) = rope_angles(start, len, *head_dim, *base);
        Some(Rotations {
            cos,
            sin,
            half: head_dim / 2,
        })
    }

    /// ALiBi's slope per head; `None` for the other schemes.
    pub fn slopes(&self) -> Option<&[f32]> {
        match &self.read {
            Read::Alibi(slopes) => Some(slopes),
            _ => None,
        }
    }
}

/// RoPE's cos and sin for a run of positions (len × head_dim/2 each).
pub(crate) struct Rotations {
    cos: Vec<f32>,
    sin: Vec<f32>,
    half: usize,
}

impl Rotations {
    /// Rotates one head's q or k (head_dim) standing at the run's `i`-th position (or, with
    /// `inverse`, turns it back: that carries a gradient back through the rotation).
    pub fn rotate(&self, x: &mut [f32], i: usize, inverse: bool) {
        let pairs = i * self.half..(i + 1) * self.half;
        rotate_pairs(x, &self.cos[pairs.clone()], &self.sin[pairs], inverse);
    }

    /// Rotates the q and k of every head in qkv (N × 3C, q | k | v of `c` each per row, sequences
    /// of the run's length), each row by its position in its sequence.
    pub fn rotate_qkv(&self, qkv: &mut [f32], c: usize, inverse: bool) {
        let len = self.cos.len() / self.half;
        for (r, row) in qkv.chunks_mut(3 * c).enumerate() {
            for head in row[..2 * c].chunks_mut(2 * self.half) {
                self.rotate(head, r % len, inverse);
            }
        }
    }
}
