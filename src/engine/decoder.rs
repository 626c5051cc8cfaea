//! One generation step on the CPU, written out on plain f32 slices.
//!
//! With the key/value cache a step computes a single position: a few matrix-vector products and
//! short loops. Run as tensor ops, each of its ~20 ops per layer pays for an allocation and a
//! dispatch that cost more than its arithmetic; here the step is the arithmetic alone. The model
//! is the candle graph's: tests/engine.rs checks prefill and cached steps against the full
//! forward pass for every scheme and layout.
//!
//! The step is bound by reading the weights, so the weight matrices are packed once per decoder
//! into panels (`ops::matvec`), which stream faster than rows; embeddings, LayerNorms and the
//! projections' biases are read in place from the model's tensors.
//!
//! Each block runs in two parallel phases, since every hand-over between threads costs time:
//! the heads (each its q, k, v, attention and share of the output projection), then the MLP in
//! shares of its hidden units (each share's GELU and part of the second projection). Every head
//! and share has its own packed weights, read as one contiguous run. The phases run on the
//! decoder's own `Team` of threads, whose hand-over is faster than rayon's. The shares are
//! summed in a fixed order, so the logits do not depend on the thread count.

use super::team::{lock, Team};
use super::weights::{add_sequence_input, embed, Norm, TokenTable, Values};
use crate::model::block::Block;
use crate::model::inputs::{BiasReader, NextTokenBias, SequenceEmbedding, SequenceReader, Shares};
use crate::model::layers::Linear;
use crate::model::position::{PositionEncoding, Rotations};
use crate::model::Gpt;
use crate::ops::activation::Activation;
use crate::ops::attention::alibi_penalty;
use crate::ops::fast_math::{self, DOT_GROUP};
use crate::ops::matvec::{PackedMatrix, WeightFormat};
use crate::ops::qk_norm;
use candle_core::{bail, Device, Result, Tensor};
use rayon::prelude::*;
use std::ops::Range;
use std::sync::Mutex;

/// A part of a Linear layer, packed: some of its outputs (rows of W), restricted to some of its
/// inputs, with those outputs' biases.
struct PackedLinear {
    weight: PackedMatrix,
    bias: Option<Vec<f32>>,
}

impl PackedLinear {
    /// The outputs `outputs` of `linear` over its inputs `inputs`, with their biases if
    /// `with_bias` (and the layer has them); the weights in `format`, the biases in f32.
    fn new(
        linear: &Linear,
        outputs: impl Iterator<Item = usize> + Clone,
        inputs: Range<usize>,
        with_bias: bool,
        format: WeightFormat,
    ) -> Result<Self> {
        let (_, n_in) = linear.weight.dims2()?;
        let weight = Values::new(&linear.weight)?;
        let weight = weight.get(); // (out, in)
        let rows: Vec<&[f32]> = outputs
            .clone()
            .map(|o| &weight[o * n_in + inputs.start..o * n_in + inputs.end])
            .collect();
        let bias = match (&linear.bias, with_bias) {
            (Some(b), true) => {
                let b = Values::new(b)?;
                Some(outputs.map(|o| b.get()[o]).collect())
            }
            _ => None,
        };
        Ok(PackedLinear {
            weight: PackedMatrix::new(&rows, inputs.len(), format),
            bias,
        })
    }

    /// The whole layer.
    fn whole(linear: &Linear, format: WeightFormat) -> Result<Self> {
        let (n_out, n_in) = linear.weight.dims2()?;
        Self::new(linear, 0..n_out, 0..n_in, true, format)
    }

    /// out (M × outputs) = x Wᵀ + b for the rows of x (M × inputs), on this thread.
    fn forward(&self, x: &[f32], out: &mut [f32]) {
        self.weight.product(x, out);
        if let Some(b) = &self.bias {
            add_bias(out, b);
        }
    }
}

/// One head's weights: its rows of c_attn (its q, k and v: 3·head_dim × C) and its columns of
/// the output projection (C × head_dim).
struct HeadWeights {
    qkv: PackedLinear,
    proj: PackedLinear,
}

/// One share of an MLP's hidden units: their rows of c_fc (units × C) and their columns of the
/// second projection (C × units).
struct MlpShareWeights {
    fc: PackedLinear,
    activation: Activation,
    proj: PackedLinear,
}

/// One block's weights, by head and by share of the MLP.
struct BlockWeights<'m> {
    ln_1: Norm<'m>,
    heads: Vec<HeadWeights>,
    attn_proj_bias: Option<Values<'m>>,
    ln_2: Norm<'m>,
    mlp_shares: Vec<MlpShareWeights>,
    mlp_proj_bias: Option<Values<'m>>,
}

impl<'m> BlockWeights<'m> {
    fn new(block: &'m Block, format: WeightFormat) -> Result<Self> {
        let (attn, mlp) = (&block.attn, &block.mlp);
        let (d, c) = (attn.head_dim, attn.n_head * attn.head_dim);
        // Many small matrices: packed side by side, each on one thread.
        let heads = (0..attn.n_head)
            .into_par_iter()
            .map(|h| {
                // q, k and v rows h·d..(h+1)·d of each third of c_attn.
                let rows = (0..3).flat_map(move |third| third * c + h * d..third * c + (h + 1) * d);
                Ok(HeadWeights {
                    qkv: PackedLinear::new(&attn.c_attn, rows, 0..c, true, format)?,
                    proj: PackedLinear::new(&attn.c_proj, 0..c, h * d..(h + 1) * d, false, format)?,
                })
            })
            .collect::<Result<_>>()?;
        let (hidden, _) = mlp.c_fc.weight.dims2()?;
        let count = MLP_SHARES.min(hidden);
        let mlp_shares = (0..count)
            .into_par_iter()
            .map(|s| {
                let units = s * hidden / count..(s + 1) * hidden / count;
                Ok(MlpShareWeights {
                    fc: PackedLinear::new(&mlp.c_fc, units.clone(), 0..c, true, format)?,
                    activation: mlp.activation,
                    proj: PackedLinear::new(&mlp.c_proj, 0..c, units, false, format)?,
                })
            })
            .collect::<Result<_>>()?;
        let bias = |linear: &'m Linear| linear.bias.as_ref().map(Values::new).transpose();
        Ok(BlockWeights {
            ln_1: Norm::new(&block.ln_1)?,
            heads,
            attn_proj_bias: bias(&attn.c_proj)?,
            ln_2: Norm::new(&block.ln_2)?,
            mlp_shares,
            mlp_proj_bias: bias(&mlp.c_proj)?,
        })
    }
}

/// Keys and values of the positions seen so far, per layer and head (`layer * n_head + head`),
/// each position's head_dim values one after the other: a head's attention reads one
/// contiguous run.
pub struct DecodeState {
    keys: Vec<Vec<f32>>,
    values: Vec<Vec<f32>>,
    head_dim: usize,
    /// Each sequence input's reader, past the positions held.
    readers: Vec<Box<dyn SequenceReader>>,
    /// The inputs, to start their readers afresh.
    inputs: Vec<SequenceEmbedding>,
    /// Each next-token bias's reader, past the positions held.
    bias_readers: Vec<Box<dyn BiasReader>>,
    /// Those inputs, to start their readers afresh.
    biases: Vec<NextTokenBias>,
}

impl DecodeState {
    /// Number of positions held.
    pub fn len(&self) -> usize {
        self.keys.first().map_or(0, |k| k.len() / self.head_dim)
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
        self.readers = self.inputs.iter().map(SequenceEmbedding::reader).collect();
        self.bias_readers = self.biases.iter().map(NextTokenBias::reader).collect();
    }
}

/// A model's weights, packed or read in place, for generation on the CPU.
pub struct CpuDecoder<'m> {
    wte: TokenTable<'m>,
    position: &'m PositionEncoding,
    sequence_inputs: &'m [SequenceEmbedding],
    /// The next-token biases and their values.
    biases: Vec<(&'m NextTokenBias, Vec<f32>)>,
    blocks: Vec<BlockWeights<'m>>,
    ln_f: Norm<'m>,
    lm_head: PackedLinear,
    /// The adaptive softmax's tail vector (C) and head size, if the model has one.
    adaptive: Option<(Vec<f32>, usize)>,
    n_embd: usize,
    n_head: usize,
    head_dim: usize,
    scale: f32,
    /// Whether each head's q and k are scaled to unit RMS (QK-norm).
    qk_norm: bool,
    /// The threads of the parallel phases, one per thread of rayon's pool.
    team: Team,
}

impl<'m> CpuDecoder<'m> {
    /// A decoder for `model` (packing its weight matrices in `format`), or `None` when its
    /// tensors do not take the fused CPU path (another device or dtype, or fused kernels turned
    /// off).
    pub fn new(model: &'m Gpt, format: WeightFormat) -> Result<Option<Self>> {
        if !model.runs_fused_kernels() {
            return Ok(None);
        }
        let cfg = model.config();
        let attn = match model.h.first() {
            Some(block) => &block.attn,
            None => bail!("the model has no layer"),
        };
        let wte = TokenTable::new(model)?;
        let lm_head = match &wte {
            TokenTable::WithInputs(table) if cfg.tie_weights => {
                let table =
                    Tensor::from_slice(table, model.wte.embeddings().shape(), &Device::Cpu)?;
                PackedLinear::whole(&Linear::tied(table), format)?
            }
            _ => PackedLinear::whole(&model.lm_head, format)?,
        };
        Ok(Some(CpuDecoder {
            wte,
            position: &model.position,
            sequence_inputs: &model.inputs.sequence,
            biases: model
                .inputs
                .bias
                .iter()
                .map(|b| Ok((b, Values::new(&b.weight)?.get().to_vec())))
                .collect::<Result<_>>()?,
            blocks: model
                .h
                .iter()
                .map(|block| BlockWeights::new(block, format))
                .collect::<Result<_>>()?,
            ln_f: Norm::new(&model.ln_f)?,
            lm_head,
            adaptive: (model.tail.as_ref())
                .map(|tail| {
                    Ok::<_, candle_core::Error>((
                        Values::new(tail)?.get().to_vec(),
                        cfg.adaptive_head,
                    ))
                })
                .transpose()?,
            n_embd: cfg.n_embd,
            n_head: cfg.n_head,
            head_dim: attn.head_dim,
            scale: attn.scale() as f32,
            qk_norm: attn.qk_norm,
            team: Team::new(rayon::current_num_threads()),
        }))
    }

    /// The format of its packed weights: f16 only if every matrix is held in f16.
    pub fn weight_format(&self) -> WeightFormat {
        let heads = self.blocks.iter().flat_map(|b| &b.heads);
        let shares = self.blocks.iter().flat_map(|b| &b.mlp_shares);
        let mut matrices = heads
            .flat_map(|h| [&h.qkv, &h.proj])
            .chain(shares.flat_map(|s| [&s.fc, &s.proj]))
            .chain([&self.lm_head]);
        match matrices.all(|m| m.weight.format() == WeightFormat::F16) {
            true => WeightFormat::F16,
            false => WeightFormat::F32,
        }
    }

    /// An empty state for this model.
    pub fn new_state(&self) -> DecodeState {
        let caches = self.blocks.len() * self.n_head;
        DecodeState {
            keys: vec![Vec::new(); caches],
            values: vec![Vec::new(); caches],
            head_dim: self.head_dim,
            readers: self.sequence_inputs.iter().map(|i| i.reader()).collect(),
            inputs: self.sequence_inputs.to_vec(),
            bias_readers: self.biases.iter().map(|(b, _)| b.reader()).collect(),
            biases: self.biases.iter().map(|(b, _)| (*b).clone()).collect(),
        }
    }

    /// Logits (vocab; with an adaptive softmax, its log-probabilities, each with the next-token
    /// biases) of the token after `tokens`, which stand at positions `state.len()..`
    /// after the positions in `state`; their keys and values are added to `state`. One token is a
    /// generation step (matrix-vector products); several (a prompt) go through matrix products.
    pub fn forward(&self, tokens: &[u32], state: &mut DecodeState) -> Result<Vec<f32>> {
        let (c, start, t) = (self.n_embd, state.len(), tokens.len());
        if t == 0 {
            bail!("the decoder needs at least one new token")
        }
        let mut x = embed((self.wte.get(), c), self.position, tokens, (start, t))?; // (T, C)
        for (input, reader) in self.sequence_inputs.iter().zip(&mut state.readers) {
            let shares: Vec<Shares> = tokens.iter().map(|&id| reader.read(id)).collect(); // (T)
            add_sequence_input(input, &shares, &mut x)?;
        }
        let mut h = vec![0f32; t * c]; // (T, C)

        // RoPE's rotations of positions start..start+T, for every block.
        let rotations = self.position.rotations(start, t);

        // The outputs of a phase's heads or shares, one (T, C) each, written whole by each.
        let mut outs = vec![0f32; self.n_head.max(MLP_SHARES) * t * c];
        for (i, block) in self.blocks.iter().enumerate() {
            // Past the last block's keys and values, only the last position counts (its logits):
            // there the other positions skip attention and MLP.
            let first = if i + 1 == self.blocks.len() { t - 1 } else { 0 };
            let out_len = (t - first) * c;
            block.ln_1.forward_into(&x, &mut h);
            let layer = i * self.n_head..(i + 1) * self.n_head;
            let caches = state.keys[layer.clone()]
                .iter_mut()
                .zip(&mut state.values[layer]);
            let mut shares: Vec<HeadShare> = block
                .heads
                .iter()
                .zip(caches)
                .zip(outs.chunks_mut(out_len))
                .map(|((weights, (keys, values)), out)| HeadShare {
                    weights,
                    keys,
                    values,
                    out,
                })
                .collect();
            self.on_all_members(&mut shares, |head, share| {
                self.head_share(head, &h, rotations.as_ref(), first, share)
            });
            let (x, h) = (&mut x[first * c..], &mut h[first * c..]); // (T − first, C)
            add_shares(x, shares.iter().map(|s| &*s.out), &block.attn_proj_bias);

            block.ln_2.forward_into(x, h);
            let mut shares: Vec<(&MlpShareWeights, &mut [f32])> = block
                .mlp_shares
                .iter()
                .zip(outs.chunks_mut(out_len))
                .collect();
            self.on_all_members(&mut shares, |_, (weights, out)| mlp_share(weights, h, out));
            add_shares(x, shares.iter().map(|s| &*s.1), &block.mlp_proj_bias);
        }
        let last = &x[(t - 1) * c..]; // (C)
        self.ln_f.forward_into(last, &mut h[..c]);
        let mut logits = self.logits(&h[..c]); // (V)
        if let Some((tail, k)) = &self.adaptive {
            let tail_logit = crate::ops::fast_math::dot(&h[..c], tail);
            crate::ops::adaptive_softmax::log_probs(&mut logits, tail_logit, *k);
        }
        for ((_, weight), reader) in self.biases.iter().zip(&mut state.bias_readers) {
            let mut entries = Vec::new();
            for &id in tokens {
                entries = reader.read(id); // every token read; the last position's kept
            }
            NextTokenBias::add_to_row(&mut logits, &entries, weight);
        }
        Ok(logits)
    }

    /// Runs `work(index, item)` for every item, the items split into one run per team member.
    fn on_all_members<T: Send>(&self, items: &mut [T], work: impl Fn(usize, &mut T) + Sync) {
        let per_member = items.len().div_ceil(self.team.size()).max(1);
        let runs: Vec<Mutex<&mut [T]>> = items.chunks_mut(per_member).map(Mutex::new).collect();
        self.team.run(&|member| {
            if let Some(run) = runs.get(member) {
                crate::ops::isa::widest(|| {
                    for (j, item) in lock(run).iter_mut().enumerate() {
                        work(member * per_member + j, item)
                    }
                })
            }
        });
    }

    /// The logits (V) of the final hidden state h (C), the vocabulary split between the team.
    fn logits(&self, h: &[f32]) -> Vec<f32> {
        let mut logits = vec![0f32; self.wte.get().len() / self.n_embd]; // (V)
        let weight = &self.lm_head.weight;
        let parts: Vec<_> = weight
            .output_parts(&mut logits, self.team.size())
            .into_iter()
            .map(Mutex::new)
            .collect();
        self.team.run(&|member| {
            if let Some(part) = parts.get(member) {
                let (panels, out) = &mut *lock(part);
                crate::ops::isa::widest(|| weight.panels_product(h, panels.clone(), out));
            }
        });
        drop(parts);
        if let Some(b) = &self.lm_head.bias {
            add_bias(&mut logits, b);
        }
        logits
    }

    /// One head's part of a block's attention for the rows of h (T × C): its q, k and v (q and k
    /// rotated by RoPE's `rotations` if given), its keys and values added to the cache, and for rows
    /// `first..` its attention and its share of the output projection into `share.out`
    /// (T − first, C).
    fn head_share(
        &self,
        head: usize,
        h: &[f32],
        rotations: Option<&Rotations>,
        first: usize,
        share: &mut HeadShare,
    ) {
        let (d, rows) = (self.head_dim, h.len() / self.n_embd);
        let mut qkv = vec![0f32; rows * 3 * d]; // (T, 3d)
        share.weights.qkv.forward(h, &mut qkv);
        let mut y = vec![0f32; (rows - first) * d]; // (T − first, d)

        // Each row's place in y, none before `first`.
        let y_rows = std::iter::repeat_with(|| None)
            .take(first)
            .chain(y.chunks_mut(d).map(Some));
        for (r, (row, y)) in qkv.chunks_mut(3 * d).zip(y_rows).enumerate() {
            let (q, kv) = row.split_at_mut(d);
            let (k, v) = kv.split_at_mut(d);
            if self.qk_norm {
                qk_norm::normalize(q);
                qk_norm::normalize(k);
            }
            if let Some(rotations) = rotations {
                rotations.rotate(q, r, false);
                rotations.rotate(k, r, false);
            }
            share.keys.extend_from_slice(k);
            share.values.extend_from_slice(v);
            if let Some(y) = y {
                self.attend_head(head, q, share.keys, share.values, y);
            }
        }
        share.weights.proj.weight.product(&y, share.out);
    }

    /// y (head_dim) = softmax(q·kⱼ · scale + bias) weighted sum of vⱼ for one head, over the
    /// positions j held in keys and values (T × head_dim), the query q (head_dim) being the last.
    fn attend_head(&self, head: usize, q: &[f32], keys: &[f32], values: &[f32], y: &mut [f32]) {
        let d = self.head_dim;
        let t = keys.len() / d;
        let key = |j: usize| &keys[j * d..(j + 1) * d];
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
        if let Some(slopes) = self.position.slopes() {
            for (j, s) in scores.iter_mut().enumerate() {
                *s -= alibi_penalty(slopes[head], t - 1 - j);
            }
        }
        fast_math::softmax_in_place(&mut scores);
        weighted_sum(&scores, values, y);
    }
}

/// A head's work in one block: its weights, its cache, and its share of the output
/// projection (T × C).
struct HeadShare<'s> {
    weights: &'s HeadWeights,
    keys: &'s mut Vec<f32>,
    values: &'s mut Vec<f32>,
    out: &'s mut [f32],
}

/// One share of an MLP for the rows of h (T × C): the activation of its hidden units and their
/// part of the second projection, into `out` (T × C).
fn mlp_share(weights: &MlpShareWeights, h: &[f32], out: &mut [f32]) {
    let (units, c) = weights.fc.weight.shape();
    let mut hidden = vec![0f32; h.len() / c * units]; // (T, units)
    weights.fc.forward(h, &mut hidden);
    let activation = weights.activation;
    hidden.iter_mut().for_each(|v| *v = activation.value(*v));
    weights.proj.weight.product(&hidden, out);
}

/// Shares of an MLP (fewer if it has fewer hidden units): a fixed number whatever the thread count,
/// so that the sums do not depend on it.
const MLP_SHARES: usize = 8;

/// x (T × C) += the shares' outputs (each T × C), summed in order, and the projection's bias.
fn add_shares<'a>(x: &mut [f32], shares: impl Iterator<Item = &'a [f32]>, bias: &Option<Values>) {
    for share in shares {
        x.iter_mut().zip(share).for_each(|(x, s)| *x += s);
    }
    if let Some(bias) = bias {
        add_bias(x, bias.get());
    }
}

/// Adds `bias` (N) to each row of x (M × N).
fn add_bias(x: &mut [f32], bias: &[f32]) {
    for row in x.chunks_mut(bias.len()) {
        row.iter_mut().zip(bias).for_each(|(x, b)| *x += b);
    }
}

/// Lanes of y summed at a time in [`weighted_sum`]: two AVX registers.
const SUM_LANES: usize = 16;

/// y (D) = Σⱼ wⱼ·vⱼ over the rows vⱼ of values (T × D), in strips of [`SUM_LANES`] lanes whose
/// sums stay in registers while the rows go by.
fn weighted_sum(weights: &[f32], values: &[f32], y: &mut [f32]) {
    let d = y.len();
    let mut strips = y.chunks_exact_mut(SUM_LANES);
    for (s, y) in (&mut strips).enumerate() {
        let mut sums = [0f32; SUM_LANES];
        for (&w, row) in weights.iter().zip(values.chunks_exact(d)) {
            let v: &[f32; SUM_LANES] = row[s * SUM_LANES..(s + 1) * SUM_LANES]
                .try_into()
                .expect("a strip of SUM_LANES");
            for (sum, v) in sums.iter_mut().zip(v) {
                *sum = w.mul_add(*v, *sum);
            }
        }
        y.copy_from_slice(&sums);
    }
    let done = d / SUM_LANES * SUM_LANES;
    let rest = strips.into_remainder();
    rest.fill(0.0);
    for (&w, row) in weights.iter().zip(values.chunks_exact(d)) {
        rest.iter_mut()
            .zip(&row[done..])
            .for_each(|(y, v)| *y += w * v);
    }
}
