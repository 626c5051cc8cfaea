//! The five positional schemes: none, learned, sinusoidal, RoPE and ALiBi, each whole on one
//! type, [`PositionEncoding`].
//!
//! Each acts at one place in the model: learned and sinusoidal tables are added to the token
//! embedding, RoPE rotates q and k inside attention, ALiBi biases the attention scores. The
//! candle graph ([`crate::model`]) calls the methods on tensors, the CPU engine
//! ([`crate::engine`]) those on f32 slices; both take their tables, angles and slopes from the
//! functions at the top, and their limit (the learned table's rows) from
//! [`PositionEncoding::check_positions`].
//!
//! Adding a scheme touches three places: its variant and methods here (the compiler then points
//! at every `match` to complete, all in this file), its name in [`crate::config::Position`]
//! (with its one-line account for the lesson, and any constraint it puts on the shape, as RoPE's
//! even head size), and its tests (tests/positions.rs for its formula; the engine's equivalence
//! table in tests/engine.rs runs over [`Position::ALL`]).

use crate::config::{ModelConfig, Position};
use crate::model::layers::{f32_tensor, INIT_STD};
use crate::ops::attention::alibi_penalty;
use candle_core::{bail, Result, Tensor};
use candle_nn::{Init, VarBuilder};

/// The sinusoidal table of Vaswani et al. times `scale`: row p, columns (2i, 2i+1) hold
/// sin(p / 10000^(2i/dim)) and cos(p / 10000^(2i/dim)), for positions `start..start+len`.
pub fn sinusoidal_table(start: usize, len: usize, dim: usize, scale: f64) -> Vec<f32> {
    let mut table = Vec::with_capacity(len * dim);
    for p in start..start + len {
        for c in 0..dim {
            let i = (c / 2) as f64;
            let angle = p as f64 / 10_000f64.powf(2.0 * i / dim as f64);
            table.push((scale * if c % 2 == 0 { angle.sin() } else { angle.cos() }) as f32);
        }
    }
    table
}

/// RoPE angles m·θ_i with θ_i = base^(-2i/head_dim), for positions `start..start+len`:
/// (cos, sin), each `len × head_dim/2`, row-major.
pub fn rope_angles(start: usize, len: usize, head_dim: usize, base: f64) -> (Vec<f32>, Vec<f32>) {
    let half = head_dim / 2;
    let mut cos = Vec::with_capacity(len * half);
    let mut sin = Vec::with_capacity(len * half);
    let thetas: Vec<f64> = (0..half)
        .map(|i| base.powf(-2.0 * i as f64 / head_dim as f64))
        .collect(); // θ_i
    for m in start..start + len {
        for &theta in &thetas {
            let angle = m as f64 * theta;
            cos.push(angle.cos() as f32);
            sin.push(angle.sin() as f32);
        }
    }
    (cos, sin)
}

/// Rotates the pairs (2i, 2i+1) of one row x (head_dim) by the angles whose cosines and sines
/// are `cos` and `sin` (head_dim/2 each), as RoPE does to q and k; with `inverse`, by the opposite
/// angles (the rotation's transpose, which carries a gradient back through it).
pub fn rotate_pairs(x: &mut [f32], cos: &[f32], sin: &[f32], inverse: bool) {
    let sign = if inverse { -1.0 } else { 1.0 };
    for (pair, (cos, sin)) in x.chunks_mut(2).zip(cos.iter().zip(sin)) {
        let (a, b, sin) = (pair[0], pair[1], sign * sin);
        pair[0] = a * cos - b * sin;
        pair[1] = a * sin + b * cos;
    }
}

/// ALiBi slopes as in Press et al.: for n a power of two, the geometric sequence starting at
/// 2^(-8/n) with that ratio (8 heads: 1/2, 1/4 … 1/256); otherwise the slopes of the closest
/// smaller power of two, followed by every other slope of the next one.
pub fn alibi_slopes(n_head: usize) -> Vec<f64> {
    fn power_of_two(n: usize) -> Vec<f64> {
        let start = 2f64.powf(-8.0 / n as f64);
        (1..=n).map(|i| start.powi(i as i32)).collect()
    }
    if n_head.is_power_of_two() {
        return power_of_two(n_head);
    }
    let closest = 1usize << n_head.ilog2();
    let mut slopes = power_of_two(closest);
    slopes.extend(
        power_of_two(2 * closest)
            .into_iter()
            .step_by(2)
            .take(n_head - closest),
    );
    slopes
}

/// The positional scheme of one model, with its parameters or settings.
#[derive(Clone)]
pub enum PositionEncoding {
    /// Nothing: attention sees a set, and only the causal mask leaks order.
    None,
    /// `transformer.wpe.weight`, a trainable (block_size, n_embd) table.
    Learned { table: Tensor },
    /// The fixed sin/cos table times `scale`, computed for the positions asked for.
    Sinusoidal { n_embd: usize, scale: f64 },
    /// Rotation of q and k by position, per head.
    Rope { head_dim: usize, base: f64 },
    /// Per-head slopes of the linear distance penalty ([`alibi_slopes`] in f32).
    Alibi { slopes: Vec<f32> },
}

impl PositionEncoding {
    /// Builds the scheme the config asks for; only `learned` has parameters (`wpe.weight`).
    pub fn new(vb: VarBuilder, cfg: &ModelConfig) -> Result<Self> {
        Ok(match cfg.position {
            Position::None => PositionEncoding::None,
            Position::Learned => PositionEncoding::Learned {
                table: vb.pp("wpe").get_with_hints(
                    (cfg.block_size, cfg.n_embd),
                    "weight",
                    Init::Randn {
                        mean: 0.0,
                        stdev: INIT_STD,
                    },
                )?,
            },
            Position::Sinusoidal => PositionEncoding::Sinusoidal {
                n_embd: cfg.n_embd,
                scale: cfg.sinusoidal_scale,
            },
            Position::Rope => PositionEncoding::Rope {
                head_dim: cfg.head_dim(),
                base: cfg.rope_base,
            },
            Position::Alibi => PositionEncoding::Alibi {
                slopes: alibi_slopes(cfg.n_head).iter().map(|&s| s as f32).collect(),
            },
        })
    }

    /// The most positions the scheme can place: the learned table's rows; `None` (no limit) for
    /// the others, which compute any position.
    pub fn max_positions(&self) -> Option<usize> {
        match self {
            PositionEncoding::Learned { table } => table.dims().first().copied(),
            _ => None,
        }
    }

    /// Refuses positions up to `end` (exclusive) where the scheme cannot place them.
    pub fn check_positions(&self, end: usize) -> Result<()> {
        match self.max_positions() {
            Some(rows) if end > rows => bail!(
                "the learned position table has {rows} rows but positions up to {end} were asked for: \
                 crop the context to block_size or use none, sinusoidal, rope or alibi"
            ),
            _ => Ok(()),
        }
    }

    // On tensors, for the candle graph.

    /// Adds absolute positions 0..T to the token embeddings x (B, T, C) for the learned and
    /// sinusoidal schemes; returns x unchanged for the others.
    pub fn add_to_embedding(&self, x: &Tensor) -> Result<Tensor> {
        let (_b, t, c) = x.dims3()?;
        self.check_positions(t)?;
        match self {
            PositionEncoding::Learned { table } => {
                x.broadcast_add(&table.narrow(0, 0, t)?) // (B, T, C)
            }
            PositionEncoding::Sinusoidal { n_embd, scale } => {
                let table = sinusoidal_table(0, t, *n_embd, *scale);
                let table = f32_tensor(table, (t, c), x)?; // (T, C)
                x.broadcast_add(&table) // (B, T, C)
            }
            _ => Ok(x.clone()),
        }
    }

    /// Rotates q or k (B, H, T, D), whose rows stand at positions `start..start+T`, for RoPE:
    /// pairs (2i, 2i+1) turn by the angle m·θ_i. Other schemes return the input unchanged.
    pub fn rotate(&self, x: &Tensor, start: usize) -> Result<Tensor> {
        match self {
            PositionEncoding::Rope { head_dim, base } => {
                let t = x.dim(2)?;
                let (cos, sin) = rope_angles(start, t, *head_dim, *base);
                let cos = f32_tensor(cos, (t, head_dim / 2), x)?; // (T, D/2)
                let sin = f32_tensor(sin, (t, head_dim / 2), x)?; // (T, D/2)
                candle_nn::rotary_emb::rope_i_slow(&x.contiguous()?, &cos, &sin)
                // (B, H, T, D)
            }
            _ => Ok(x.clone()),
        }
    }

    /// Whether the scheme adds a bias to the attention scores (ALiBi).
    pub fn biases_scores(&self) -> bool {
        matches!(self, PositionEncoding::Alibi { .. })
    }

    /// Whether the scheme acts inside attention: rotates q and k (RoPE) or biases the scores
    /// (ALiBi).
    pub fn acts_in_attention(&self) -> bool {
        matches!(
            self,
            PositionEncoding::Rope { .. } | PositionEncoding::Alibi { .. }
        )
    }

    /// For ALiBi, the bias −slope_h·(i − j) for a query at absolute position i and a key at j, as a
    /// (H, Tq, Tk) tensor whose queries are the last Tq of the Tk keys; `None` for other schemes.
    /// Entries above the diagonal (zero) are left to the causal mask.
    pub fn score_bias(&self, t_q: usize, t_k: usize, like: &Tensor) -> Result<Option<Tensor>> {
        let Some(slopes) = self.slopes() else {
            return Ok(None);
        };
        let mut bias = Vec::with_capacity(slopes.len() * t_q * t_k);
        for &slope in slopes {
            for i in (t_k - t_q)..t_k {
                bias.extend((0..t_k).map(|j| match i.checked_sub(j) {
                    Some(distance) => -alibi_penalty(slope, distance),
                    None => 0.0,
                }));
            }
        }
        Ok(Some(f32_tensor(bias, (slopes.len(), t_q, t_k), like)?)) // (H, Tq, Tk)
    }

    // On f32 slices, for the CPU engine.

    /// Adds positions `start..start+len` to each sequence of `len` rows of x (N × C) for the
    /// learned and sinusoidal schemes; leaves x as it is for the others.
    pub fn add_to_rows(&self, x: &mut [f32], (start, len): (usize, usize)) -> Result<()> {
        self.check_positions(start + len)?;
        let table = match self {
            PositionEncoding::Learned { table } => table
                .narrow(0, start, len)?
                .flatten_all()?
                .to_vec1::<f32>()?,
            PositionEncoding::Sinusoidal { n_embd, scale } => {
                sinusoidal_table(start, len, *n_embd, *scale)
            }
            _ => return Ok(()),
        }; // (len, C)
        if table.is_empty() {
            return Ok(());
        }
        for sequence in x.chunks_mut(table.len()) {
            sequence.iter_mut().zip(&table).for_each(|(x, p)| *x += p);
        }
        Ok(())
    }

    /// The learned table (block_size × C) and its gradient from the gradient d_x (N × C,
    /// sequences of `len` rows from position 0) of [`PositionEncoding::add_to_rows`]'s output;
    /// `None` for the schemes without parameters.
    pub fn table_gradient(
        &self,
        d_x: &[f32],
        (len, c): (usize, usize),
    ) -> Option<(&Tensor, Vec<f32>)> {
        let PositionEncoding::Learned { table } = self else {
            return None;
        };
        let mut d_table = vec![0f32; table.elem_count()]; // (block_size, C)
        for sequence in d_x.chunks(len * c) {
            d_table.iter_mut().zip(sequence).for_each(|(d, g)| *d += g);
        }
        Some((table, d_table))
    }

    /// RoPE's rotations of positions `start..start+len`; `None` for the other schemes.
    pub fn rotations(&self, start: usize, len: usize) -> Option<Rotations> {
        let PositionEncoding::Rope { head_dim, base } = self else {
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
        match self {
            PositionEncoding::Alibi { slopes } => Some(slopes),
            _ => None,
        }
    }
}

/// RoPE's cos and sin for a run of positions (len × head_dim/2 each).
pub struct Rotations {
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
