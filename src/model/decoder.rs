//! One generation step on the CPU, written out on plain f32 slices.
//!
//! With the key/value cache a step computes a single position: a few matrix-vector products and
//! short loops. Run as tensor ops, each of its ~20 ops per layer pays for an allocation and a
//! dispatch that cost more than its arithmetic; here the step is the arithmetic alone. The model
//! and the numbers are those of [`Gpt::forward_cached`] (tested to 1e-4 for every scheme).
//!
//! The step is bound by reading the weights, so the weight matrices are packed once per decoder
//! into panels (`ops::matvec`), which stream faster than rows; embeddings, LayerNorms
//! and biases are read in place from the model's tensors.

use crate::model::block::Block;
use crate::model::layers::{LayerNorm, Linear, LN_EPS};
use crate::model::position::{rope_angles, sinusoidal_table, PositionEncoding};
use crate::model::Gpt;
use crate::ops::fast_math::{self, DOT_GROUP};
use crate::ops::matvec::PackedMatrix;
use crate::ops::{gelu::gelu_value, layer_norm::normalize_row};
use candle_core::{bail, CpuStorage, Result, Storage, StorageRef, Tensor};
use rayon::prelude::*;
use std::ops::Range;

/// The f32 values of a contiguous CPU tensor (row-major), borrowed from its storage: the tensor
/// cannot change while the decoder holds them.
struct Values<'m> {
    storage: StorageRef<'m>,
    range: Range<usize>,
}

impl<'m> Values<'m> {
    /// The values of `t`; an error unless it is a contiguous f32 CPU tensor.
    fn new(t: &'m Tensor) -> Result<Self> {
        let (storage, layout) = t.storage_and_layout();
        let Some((start, end)) = layout.contiguous_offsets() else {
            bail!("the CPU decoder needs contiguous weights")
        };
        if !matches!(&*storage, Storage::Cpu(CpuStorage::F32(_))) {
            bail!("the CPU decoder needs f32 weights on the CPU")
        }
        Ok(Values {
            storage,
            range: start..end,
        })
    }

    /// The values.
    fn get(&self) -> &[f32] {
        match &*self.storage {
            Storage::Cpu(CpuStorage::F32(v)) => &v[self.range.clone()],
            _ => unreachable!("Values::new accepts only f32 CPU storage"),
        }
    }
}

/// A Linear layer's weight W (out × in), packed, and bias.
struct Dense<'m> {
    weight: PackedMatrix,
    bias: Option<Values<'m>>,
}

impl<'m> Dense<'m> {
    fn new(linear: &'m Linear) -> Result<Self> {
        let (n_out, n_in) = linear.weight.dims2()?;
        Ok(Dense {
            weight: PackedMatrix::new(Values::new(&linear.weight)?.get(), n_out, n_in),
            bias: linear.bias.as_ref().map(Values::new).transpose()?,
        })
    }

    /// out (M, out) = x Wᵀ + b for the rows of x (M, in).
    fn forward(&self, x: &[f32], out: &mut [f32]) {
        self.weight.forward(x, out);
        if let Some(b) = &self.bias {
            let b = b.get();
            for row in out.chunks_mut(b.len()) {
                row.iter_mut().zip(b).for_each(|(o, b)| *o += b);
            }
        }
    }
}

/// A LayerNorm's weight and bias.
struct Norm<'m> {
    weight: Values<'m>,
    bias: Values<'m>,
}

impl<'m> Norm<'m> {
    fn new(ln: &'m LayerNorm) -> Result<Self> {
        Ok(Norm {
            weight: Values::new(&ln.weight)?,
            bias: Values::new(&ln.bias)?,
        })
    }

    /// out = LayerNorm(x), row by row.
    fn forward(&self, x: &[f32], out: &mut [f32]) {
        let (weight, bias) = (self.weight.get(), self.bias.get());
        for (x, out) in x.chunks(weight.len()).zip(out.chunks_mut(weight.len())) {
            normalize_row(x, weight, bias, LN_EPS, out)
        }
    }
}

/// One block's weights.
struct BlockWeights<'m> {
    ln_1: Norm<'m>,
    c_attn: Dense<'m>,
    attn_proj: Dense<'m>,
    ln_2: Norm<'m>,
    c_fc: Dense<'m>,
    mlp_proj: Dense<'m>,
}

impl<'m> BlockWeights<'m> {
    fn new(block: &'m Block) -> Result<Self> {
        Ok(BlockWeights {
            ln_1: Norm::new(&block.ln_1)?,
            c_attn: Dense::new(&block.attn.c_attn)?,
            attn_proj: Dense::new(&block.attn.c_proj)?,
            ln_2: Norm::new(&block.ln_2)?,
            c_fc: Dense::new(&block.mlp.c_fc)?,
            mlp_proj: Dense::new(&block.mlp.c_proj)?,
        })
    }
}

/// The positional scheme, with the learned table as plain values.
enum Positions<'m> {
    /// No positions.
    None,
    /// The learned table (block_size × n_embd), added to the embeddings.
    Learned(Values<'m>),
    /// The sin/cos table, computed per position and added to the embeddings.
    Sinusoidal,
    /// Rotation of q and k with this base.
    Rope(f64),
    /// Per-head slopes of the distance penalty on the scores.
    Alibi(Vec<f64>),
}

/// Keys and values of the positions seen so far, per layer, each position's n_embd values
/// (heads side by side) one after the other.
pub struct DecodeState {
    keys: Vec<Vec<f32>>,
    values: Vec<Vec<f32>>,
    n_embd: usize,
}

impl DecodeState {
    /// Number of positions held.
    pub fn len(&self) -> usize {
        self.keys.first().map_or(0, |k| k.len() / self.n_embd)
    }

    /// Whether no position is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets every position.
    pub fn clear(&mut self) {
        self.keys
            .iter_mut()
            .chain(&mut self.values)
            .for_each(Vec::clear);
    }
}

/// A model's weights, packed or read in place, for generation on the CPU.
pub struct CpuDecoder<'m> {
    wte: Values<'m>,
    positions: Positions<'m>,
    blocks: Vec<BlockWeights<'m>>,
    ln_f: Norm<'m>,
    lm_head: Dense<'m>,
    n_embd: usize,
    head_dim: usize,
    scale: f32,
}

impl<'m> CpuDecoder<'m> {
    /// A decoder for `model` (packing its weight matrices), or `None` when its tensors do not
    /// take the fused CPU path (another device or dtype, or fused kernels turned off).
    pub fn new(model: &'m Gpt) -> Result<Option<Self>> {
        if !crate::ops::fused_for(model.wte.embeddings()) {
            return Ok(None);
        }
        let cfg = model.config();
        let attn = match model.h.first() {
            Some(block) => &block.attn,
            None => bail!("the model has no layer"),
        };
        let positions = match &model.position {
            PositionEncoding::None => Positions::None,
            PositionEncoding::Learned { table } => Positions::Learned(Values::new(table)?),
            PositionEncoding::Sinusoidal { .. } => Positions::Sinusoidal,
            PositionEncoding::Rope { base, .. } => Positions::Rope(*base),
            PositionEncoding::Alibi { slopes } => Positions::Alibi(slopes.clone()),
        };
        Ok(Some(CpuDecoder {
            wte: Values::new(model.wte.embeddings())?,
            positions,
            blocks: model
                .h
                .iter()
                .map(BlockWeights::new)
                .collect::<Result<_>>()?,
            ln_f: Norm::new(&model.ln_f)?,
            lm_head: Dense::new(&model.lm_head)?,
            n_embd: cfg.n_embd,
            head_dim: attn.head_dim,
            scale: attn.scale() as f32,
        }))
    }

    /// An empty state for this model.
    pub fn new_state(&self) -> DecodeState {
        DecodeState {
            keys: vec![Vec::new(); self.blocks.len()],
            values: vec![Vec::new(); self.blocks.len()],
            n_embd: self.n_embd,
        }
    }

    /// Logits (vocab) of the token after `tokens`, which stand at positions `state.len()..`
    /// after the positions in `state`; their keys and values are added to `state`. One token is a
    /// generation step (matrix-vector products); several (a prompt) go through matrix products.
    pub fn forward(&self, tokens: &[u32], state: &mut DecodeState) -> Result<Vec<f32>> {
        let (c, start, t) = (self.n_embd, state.len(), tokens.len());
        if t == 0 {
            bail!("the decoder needs at least one new token")
        }
        let mut x = self.embed(tokens, start)?; // (T, C)
        let mut h = vec![0f32; t * c]; // (T, C)
        let mut qkv = vec![0f32; t * 3 * c]; // (T, 3C)
        let mut y = vec![0f32; t * c]; // (T, C)
        let mut out = vec![0f32; t * c]; // (T, C)
        let mut hidden = vec![0f32; t * 4 * c]; // (T, 4C)
        for (i, block) in self.blocks.iter().enumerate() {
            block.ln_1.forward(&x, &mut h);
            block.c_attn.forward(&h, &mut qkv);
            for (row, p) in qkv.chunks_mut(3 * c).zip(start..) {
                let (q, kv) = row.split_at_mut(c);
                let (k, v) = kv.split_at_mut(c);
                if let Positions::Rope(base) = self.positions {
                    self.rotate(q, p, base);
                    self.rotate(k, p, base);
                }
                state.keys[i].extend_from_slice(k);
                state.values[i].extend_from_slice(v);
            }
            let (keys, values) = (&state.keys[i], &state.values[i]);
            let attend_row = |(r, (row, y)): (usize, (&[f32], &mut [f32]))| {
                let seen = (start + r + 1) * c; // positions 0..=start+r
                self.attend(&row[..c], &keys[..seen], &values[..seen], y);
            };
            if t > 1 {
                // A prompt: its rows on all threads.
                qkv.par_chunks(3 * c)
                    .zip(y.par_chunks_mut(c))
                    .enumerate()
                    .for_each(attend_row);
            } else {
                // One position: its heads on all threads.
                let (q, seen) = (&qkv[..c], (start + 1) * c);
                y.par_chunks_mut(self.head_dim)
                    .enumerate()
                    .for_each(|(head, y)| {
                        self.attend_head(head, q, &keys[..seen], &values[..seen], y)
                    });
            }
            block.attn_proj.forward(&y, &mut out);
            x.iter_mut().zip(&out).for_each(|(x, o)| *x += o);

            block.ln_2.forward(&x, &mut h);
            block.c_fc.forward(&h, &mut hidden);
            hidden.iter_mut().for_each(|v| *v = gelu_value(*v));
            block.mlp_proj.forward(&hidden, &mut out);
            x.iter_mut().zip(&out).for_each(|(x, o)| *x += o);
        }
        let last = &x[(t - 1) * c..]; // (C)
        self.ln_f.forward(last, &mut h[..c]);
        let mut logits = vec![0f32; self.wte.get().len() / c]; // (V)
        self.lm_head.forward(&h[..c], &mut logits);
        Ok(logits)
    }

    /// The residual stream entering the blocks (T, C): token embeddings plus, for the learned
    /// and sinusoidal schemes, those of positions `start..start+T`.
    fn embed(&self, tokens: &[u32], start: usize) -> Result<Vec<f32>> {
        let c = self.n_embd;
        let mut x = Vec::with_capacity(tokens.len() * c); // (T, C)
        let wte = self.wte.get(); // (V, C)
        for &token in tokens {
            let Some(row) = wte.get(token as usize * c..(token as usize + 1) * c) else {
                bail!("token {token} is outside the model's vocabulary")
            };
            x.extend_from_slice(row);
        }
        let end = start + tokens.len();
        let added = match &self.positions {
            Positions::Learned(table) => match table.get().get(start * c..end * c) {
                Some(rows) => rows.to_vec(),
                None => bail!(
                    "positions up to {end} are past the learned position table: crop the context to block_size"
                ),
            },
            Positions::Sinusoidal => sinusoidal_table(start, tokens.len(), c),
            _ => return Ok(x),
        };
        x.iter_mut().zip(&added).for_each(|(x, a)| *x += a);
        Ok(x)
    }

    /// RoPE: turns each head's pairs (2i, 2i+1) of x (C) by the angle p·θ_i.
    fn rotate(&self, x: &mut [f32], p: usize, base: f64) {
        let (cos, sin) = rope_angles(p, 1, self.head_dim, base);
        for head in x.chunks_mut(self.head_dim) {
            for (pair, (cos, sin)) in head.chunks_mut(2).zip(cos.iter().zip(&sin)) {
                let (a, b) = (pair[0], pair[1]);
                pair[0] = a * cos - b * sin;
                pair[1] = a * sin + b * cos;
            }
        }
    }

    /// y (C) = per head, softmax(q·kⱼ · scale + bias) weighted sum of vⱼ over the positions j held
    /// in keys and values (T × C), the query being the last of them.
    fn attend(&self, q: &[f32], keys: &[f32], values: &[f32], y: &mut [f32]) {
        for (head, y) in y.chunks_mut(self.head_dim).enumerate() {
            self.attend_head(head, q, keys, values, y);
        }
    }

    /// One head's part of [`Self::attend`]: y (head_dim) from q (C), keys and values (T × C).
    fn attend_head(&self, head: usize, q: &[f32], keys: &[f32], values: &[f32], y: &mut [f32]) {
        let (c, d) = (self.n_embd, self.head_dim);
        let t = keys.len() / c;
        let q = &q[head * d..(head + 1) * d];
        let key = |j: usize| &keys[j * c + head * d..j * c + (head + 1) * d];
        let mut scores = vec![0f32; t]; // (T)
        let mut groups = scores.chunks_exact_mut(DOT_GROUP);
        for (g, s) in (&mut groups).enumerate() {
            let dots = fast_math::dot_rows(q, std::array::from_fn(|r| key(g * DOT_GROUP + r)));
            s.iter_mut()
                .zip(dots)
                .for_each(|(s, v)| *s = v * self.scale);
        }
        let done = t / DOT_GROUP * DOT_GROUP;
        for (j, s) in groups.into_remainder().iter_mut().enumerate() {
            *s = fast_math::dot(q, key(done + j)) * self.scale;
        }
        if let Positions::Alibi(slopes) = &self.positions {
            for (j, s) in scores.iter_mut().enumerate() {
                *s -= (slopes[head] * (t - 1 - j) as f64) as f32;
            }
        }
        let max = fast_math::max(&scores);
        scores
            .iter_mut()
            .for_each(|s| *s = fast_math::exp(*s - max));
        let inv_total = 1.0 / fast_math::sum(&scores);
        y.fill(0.0);
        for (j, &w) in scores.iter().enumerate() {
            let v = &values[j * c + head * d..j * c + (head + 1) * d];
            y.iter_mut().zip(v).for_each(|(y, v)| *y += w * v);
        }
        y.iter_mut().for_each(|y| *y *= inv_total);
    }
}
