//! A training step on the CPU: the forward and backward passes over a batch, written out by hand.
//!
//! candle's autograd keeps every op's output as a node of its graph and starts each node's
//! gradient as zeros that the op's gradient is then added to: on the CPU that bookkeeping (a zeroed
//! buffer and an add per node, then copies out of the gradient store) was about 5 % of a training
//! step. Here the kernels of the fused ops ([`crate::ops`]) are called on plain buffers, block by
//! block, with the residual stream's gradient accumulated in place and every parameter's gradient
//! written once. The model is the candle graph's ([`Gpt::loss`]), every positional scheme and
//! dropout included: the masks are drawn from the same RNG in the same order, so both give the
//! same step (tests/engine.rs).

use super::weights::{add_sequence_input, embed, Norm, TokenTable, Values};
use crate::model::block::Block;
use crate::model::inputs::{Biased, Shares};
use crate::model::layers::{dropout_mask, LayerNorm, Linear};
use crate::model::position::{PositionEncoding, Rotations};
use crate::model::{Gpt, Mode};
use crate::ops::attention::{self, Heads};
use crate::ops::lm_head_loss::LogitBias;
use crate::ops::{activation, adaptive_softmax, linear, lm_head_loss, qk_norm, scratch, Precision};
use candle_core::{bail, Result, Tensor, TensorId};
use std::borrow::Cow;
use std::collections::HashMap;

/// Each parameter's gradient, flat, by the parameter's tensor.
pub type ParamGrads = HashMap<TensorId, Vec<f32>>;

/// Whether [`loss_and_gradients`] handles `model`: f32 on the CPU with the fused kernels on.
pub fn supports(model: &Gpt) -> bool {
    model.runs_fused_kernels()
}

/// Adds `grad` to the gradient of `param` (a tied weight gets two).
fn add_grad(grads: &mut ParamGrads, param: &Tensor, grad: Vec<f32>) {
    match grads.get_mut(&param.id()) {
        Some(sum) => sum.iter_mut().zip(&grad).for_each(|(s, g)| *s += g),
        None => {
            grads.insert(param.id(), grad);
        }
    }
}

/// y = x Wᵀ + b into a new buffer.
fn linear_forward(layer: &Linear, x: &[f32], precision: Precision) -> Result<Vec<f32>> {
    let w = Values::new(&layer.weight)?;
    let b = layer.bias.as_ref().map(Values::new).transpose()?;
    let n_out = layer.weight.dim(0)?;
    Ok(linear::forward(
        x,
        w.get(),
        b.as_ref().map(Values::get),
        n_out,
        precision,
    ))
}

/// The residual stream y plus a Linear layer's output x Wᵀ + b, dropped out by `mask` if given.
fn residual_forward(
    layer: &Linear,
    x: &[f32],
    mut y: Vec<f32>,
    mask: Option<&[f32]>,
    precision: Precision,
) -> Result<Vec<f32>> {
    match mask {
        None => {
            let w = Values::new(&layer.weight)?;
            let b = layer.bias.as_ref().map(Values::new).transpose()?;
            let n_out = layer.weight.dim(0)?;
            let b = b.as_ref().map(Values::get);
            linear::add_forward(x, w.get(), b, n_out, &mut y, precision);
        }
        Some(mask) => {
            let out = linear_forward(layer, x, precision)?;
            for ((y, o), m) in y.iter_mut().zip(out).zip(mask) {
                *y += o * m;
            }
        }
    }
    Ok(y)
}

/// The gradient of a Linear layer's input x from its output's gradient dy; the weight's and
/// bias's gradients go to `grads`.
fn linear_backward(
    layer: &Linear,
    x: &[f32],
    dy: &[f32],
    grads: &mut ParamGrads,
    precision: Precision,
) -> Result<Vec<f32>> {
    let (n_out, n_in) = layer.weight.dims2()?;
    let w = Values::new(&layer.weight)?;
    let mut dx = scratch::take(x.len()); // written whole
    let mut dw = vec![0f32; n_out * n_in];
    let mut db = layer.bias.as_ref().map(|_| vec![0f32; n_out]);
    let (dw_out, db_out) = (&mut dw, db.as_deref_mut());
    linear::backward_into((x, w.get(), dy), n_out, &mut dx, dw_out, db_out, precision);
    add_grad(grads, &layer.weight, dw);
    if let (Some(bias), Some(db)) = (&layer.bias, db) {
        add_grad(grads, bias, db);
    }
    Ok(dx)
}

/// Adds the gradient of a LayerNorm's input x, from its output's gradient dy, to `dx`; the
/// weight's and bias's gradients go to `grads` (a model without biases has a constant bias,
/// whose gradient no optimiser asks for).
fn norm_backward(
    norm: &LayerNorm,
    x: &[f32],
    dy: &[f32],
    dx: &mut [f32],
    grads: &mut ParamGrads,
) -> Result<()> {
    let (dw, db) = Norm::new(norm)?.backward(x, dy, dx);
    add_grad(grads, &norm.weight, dw);
    add_grad(grads, &norm.bias, db);
    Ok(())
}

/// g ⊙ mask, or g itself without a mask: the gradient through a dropout.
fn through_dropout<'g>(g: &'g [f32], mask: Option<&[f32]>) -> Cow<'g, [f32]> {
    match mask {
        None => Cow::Borrowed(g),
        Some(mask) => Cow::Owned(g.iter().zip(mask).map(|(g, m)| g * m).collect()),
    }
}

/// Dropout's masks for one step, drawn in the order the candle graph draws them; none in
/// evaluation mode or with p = 0.
struct Dropout<'m, 'r> {
    p: f64,
    mode: &'m mut Mode<'r>,
}

impl Dropout<'_, '_> {
    fn mask(&mut self, len: usize) -> Option<Vec<f32>> {
        match &mut self.mode {
            Mode::Train(rng) if self.p > 0.0 => Some(dropout_mask(self.p, len, rng)),
            _ => None,
        }
    }
}

/// What a block's forward pass keeps for its backward pass; every buffer is N × width, N = B·T.
struct BlockActivations {
    /// The block's input (C).
    x: Vec<f32>,
    /// ln_1(x) (C).
    ln_1: Vec<f32>,
    /// The fused projection's q | k | v (3C), q and k normalized (QK-norm) and rotated for RoPE.
    qkv: Vec<f32>,
    /// With QK-norm, the RMS each head's q and k had (N × 2H).
    qk_rms: Option<Vec<f32>>,
    /// The attention weights before dropout (B × H × T × T).
    weights: Vec<f32>,
    /// The heads' outputs side by side (C).
    heads: Vec<f32>,
    /// x + the attention's projection (C).
    mid: Vec<f32>,
    /// ln_2(mid) (C).
    ln_2: Vec<f32>,
    /// The activation's slope at the MLP's hidden layer (4C), left by its
    /// `forward_keeping_slope`.
    slope: Vec<f32>,
    /// After the activation (4C).
    act: Vec<f32>,
    /// Dropout's masks: attention weights (B × H × T × T), attention and MLP outputs (C).
    masks: [Option<Vec<f32>>; 3],
}

/// The sequence length, positions, dropout and matmul precision of one step.
struct Setting<'s, 'm, 'r> {
    t: usize,
    precision: Precision,
    position: &'s PositionEncoding,
    rotations: Option<Rotations>,
    dropout: Dropout<'m, 'r>,
}

impl Setting<'_, '_, '_> {
    /// How `block`'s heads attend, with dropout's `masks` on their weights.
    fn heads<'a>(&'a self, block: &Block, masks: Option<&'a [f32]>) -> Heads<'a> {
        Heads {
            n_head: block.attn.n_head,
            scale: block.attn.scale() as f32,
            slopes: self.position.slopes(),
            masks,
        }
    }
}

impl Drop for BlockActivations {
    /// The two largest buffers (B·H·T·T and N·4C) go back to this thread for the next step's
    /// outputs (`ops::scratch`).
    fn drop(&mut self) {
        for buffer in [&mut self.weights, &mut self.act] {
            scratch::give_back(std::mem::take(buffer));
        }
    }
}

/// One block over x (N × C, sequences of `t` rows): its output and what its backward pass needs.
fn block_forward(
    block: &Block,
    x: Vec<f32>,
    s: &mut Setting,
) -> Result<(Vec<f32>, BlockActivations)> {
    let (attn, mlp) = (&block.attn, &block.mlp);
    let (c, p) = (attn.n_head * attn.head_dim, s.precision);
    let n = x.len() / c;
    let ln_1 = Norm::new(&block.ln_1)?.forward(&x); // (N, C)
    let mut qkv = linear_forward(&attn.c_attn, &ln_1, p)?; // (N, 3C)
    let qk_rms = attn
        .qk_norm
        .then(|| qk_norm::forward_qkv(&mut qkv, c, attn.head_dim)); // (N, 2H)
    if let Some(rotations) = &s.rotations {
        rotations.rotate_qkv(&mut qkv, c, false);
    }
    let attn_mask = s.dropout.mask(n / s.t * attn.n_head * s.t * s.t); // (B, H, T, T)
    let heads = s.heads(block, attn_mask.as_deref());
    let (heads, weights) = attention::qkv_forward(&qkv, (s.t, c), &heads); // (N, C), (B, H, T, T)
    let resid_mask = s.dropout.mask(n * c); // (N, C)
    let mid = residual_forward(&attn.c_proj, &heads, x.clone(), resid_mask.as_deref(), p)?; // (N, C)
    let ln_2 = Norm::new(&block.ln_2)?.forward(&mid); // (N, C)
    let mut slope = linear_forward(&mlp.c_fc, &ln_2, p)?; // (N, 4C)
    let act = mlp.activation.forward_keeping_slope(&mut slope); // (N, 4C), (N, 4C)
    let mlp_mask = s.dropout.mask(n * c); // (N, C)
    let out = residual_forward(&mlp.c_proj, &act, mid.clone(), mlp_mask.as_deref(), p)?; // (N, C)
    let kept = BlockActivations {
        x,
        ln_1,
        qkv,
        qk_rms,
        weights,
        heads,
        mid,
        ln_2,
        slope,
        act,
        masks: [attn_mask, resid_mask, mlp_mask],
    };
    Ok((out, kept))
}

/// The gradient of a block's input from its output's gradient `d_out` (N × C), whose buffer it
/// reuses; the parameters' gradients go to `grads`.
fn block_backward(
    block: &Block,
    a: &BlockActivations,
    s: &Setting,
    d_out: Vec<f32>,
    grads: &mut ParamGrads,
) -> Result<Vec<f32>> {
    let (attn, mlp) = (&block.attn, &block.mlp);
    let c = attn.n_head * attn.head_dim;
    let [attn_mask, resid_mask, mlp_mask] = &a.masks;
    // out = mid + dropout(c_proj(activation(c_fc(ln_2(mid))))).
    let d_mlp = through_dropout(&d_out, mlp_mask.as_deref()); // (N, C)
    let mut d_fc = linear_backward(&mlp.c_proj, &a.act, &d_mlp, grads, s.precision)?; // (N, 4C)
    activation::backward_in_place(&a.slope, &mut d_fc);
    let d_ln_2 = linear_backward(&mlp.c_fc, &a.ln_2, &d_fc, grads, s.precision)?; // (N, C)
    drop(d_mlp);
    let mut d_mid = d_out;
    norm_backward(&block.ln_2, &a.mid, &d_ln_2, &mut d_mid, grads)?; // (N, C)
    [d_fc, d_ln_2].into_iter().for_each(scratch::give_back);

    // mid = x + dropout(c_proj(attention(c_attn(ln_1(x))))).
    let d_proj = through_dropout(&d_mid, resid_mask.as_deref()); // (N, C)
    let d_heads = linear_backward(&attn.c_proj, &a.heads, &d_proj, grads, s.precision)?; // (N, C)
    drop(d_proj);
    let heads = s.heads(block, attn_mask.as_deref());
    let mut d_qkv = attention::qkv_backward(&a.qkv, &d_heads, &a.weights, (s.t, c), &heads); // (N, 3C)
    if let Some(rotations) = &s.rotations {
        rotations.rotate_qkv(&mut d_qkv, c, true);
    }
    if let Some(rms) = &a.qk_rms {
        // The normalized q and k before their rotation, which the gradient now stands in.
        let mut normalized = a.qkv.clone(); // (N, 3C)
        if let Some(rotations) = &s.rotations {
            rotations.rotate_qkv(&mut normalized, c, true);
        }
        qk_norm::backward_qkv(&mut d_qkv, &normalized, rms, c, attn.head_dim);
    }
    let d_ln_1 = linear_backward(&attn.c_attn, &a.ln_1, &d_qkv, grads, s.precision)?; // (N, C)
    let mut d_x = d_mid;
    norm_backward(&block.ln_1, &a.x, &d_ln_1, &mut d_x, grads)?; // (N, C)
    [d_heads, d_qkv, d_ln_1]
        .into_iter()
        .for_each(scratch::give_back);
    Ok(d_x)
}

/// The embeddings' gradients from the gradient `d_x` (N × C) of the residual stream entering
/// the blocks, dropped out by `mask` if given; `shares` are the rows each sequence input's
/// positions took in the forward pass.
fn embed_backward(
    model: &Gpt,
    (ids, t, shares): (&[u32], usize, &[Vec<Shares>]),
    (d_x, mask): (&[f32], Option<&[f32]>),
    grads: &mut ParamGrads,
) {
    let d_x = through_dropout(d_x, mask); // (N, C)
    let wte = model.wte.embeddings();
    let c = model.config().n_embd;
    // Each position's row added to its token's: into the output layer's gradient when tied.
    let d_wte = grads
        .entry(wte.id())
        .or_insert_with(|| vec![0f32; wte.elem_count()]); // (V, C)
    for (&id, row) in ids.iter().zip(d_x.chunks(c)) {
        let target = &mut d_wte[id as usize * c..(id as usize + 1) * c];
        target.iter_mut().zip(row).for_each(|(d, g)| *d += g);
    }
    for (input, shares) in model.inputs.sequence.iter().zip(shares) {
        add_grad(grads, &input.weight, input.gradient(&d_x, shares, c)); // (rows, C)
    }
    for input in &model.inputs.token {
        // The token table's gradient, the output layer's part included when tied.
        let d_table = &grads[&wte.id()]; // (V, C)
        let d_weight = input.gradient(d_table, c); // (rows, C)
        add_grad(grads, &input.weight, d_weight);
    }
    if let Some((table, d_table)) = model.position.table_gradient(&d_x, (t, c)) {
        add_grad(grads, table, d_table);
    }
}

/// Every next-token bias of a model over one batch, as one: their biases end to end, and each
/// position's entries pointing into them.
struct NextTokenBiases {
    /// Per position (N): (token, index into `weight`).
    entries: Vec<Biased>,
    /// Every input's biases, in the inputs' order.
    weight: Vec<f32>,
}

impl NextTokenBiases {
    /// The biases of `model`'s next-token inputs for the sequences of `t` tokens in `ids` (N).
    fn read(model: &Gpt, ids: &[u32], t: usize) -> Result<Self> {
        let mut all = NextTokenBiases {
            entries: Vec::new(),
            weight: Vec::new(),
        };
        if model.inputs.bias.is_empty() {
            return Ok(all); // the usual model: nothing read, nothing allocated per position
        }
        all.entries = vec![Vec::new(); ids.len()];
        for input in &model.inputs.bias {
            let offset = all.weight.len();
            all.weight.extend(Values::new(&input.weight)?.get());
            for (mine, theirs) in all.entries.iter_mut().zip(input.entries_of(ids, t)) {
                mine.extend(
                    theirs
                        .into_iter()
                        .map(|(token, bias)| (token, offset + bias)),
                );
            }
        }
        Ok(all)
    }

    /// The biases as the output layer's loss takes them, if the model has any.
    fn as_logit_bias(&self) -> Option<LogitBias<'_>> {
        (!self.weight.is_empty()).then_some(LogitBias {
            entries: &self.entries,
            weight: &self.weight,
        })
    }

    /// Adds each input's share of `d_weight` (the gradient of all the biases) to `grads`.
    fn add_gradients(&self, model: &Gpt, d_weight: Vec<f32>, grads: &mut ParamGrads) {
        let mut rest = &d_weight[..];
        for input in &model.inputs.bias {
            let (mine, others) = rest.split_at(input.weight.elem_count());
            add_grad(grads, &input.weight, mine.to_vec());
            rest = others;
        }
    }
}

/// A batch's token ids and next tokens, flat (N = B·T), and its sequence length, checked
/// against the model's vocabulary.
fn batch_ids(model: &Gpt, (x, y): (&Tensor, &Tensor)) -> Result<(Vec<u32>, Vec<u32>, usize)> {
    if !supports(model) {
        bail!("the CPU engine's training step needs f32 tensors on the CPU and the fused kernels: train this model through autograd")
    }
    let (_b, t) = x.dims2()?;
    let (ids, targets) = (
        x.flatten_all()?.to_vec1::<u32>()?,
        y.flatten_all()?.to_vec1::<u32>()?,
    );
    let vocab = model.config().vocab_size;
    if let Some(&bad) = targets.iter().find(|&&id| id as usize >= vocab) {
        bail!("token id {bad} is outside the vocabulary of {vocab}")
    }
    if targets.len() != ids.len() {
        bail!("{} targets for {} tokens", targets.len(), ids.len())
    }
    Ok((ids, targets, t))
}

/// The forward pass up to the final LayerNorm's input, and what the backward pass needs of it.
struct Forward {
    /// The residual stream after the last block (N × C).
    h: Vec<f32>,
    /// Each block's activations (none when they are not kept).
    kept: Vec<BlockActivations>,
    /// The rows each sequence input's positions took (inputs × N).
    shares: Vec<Vec<Shares>>,
    /// Dropout's mask on the embeddings (N × C).
    embed_mask: Option<Vec<f32>>,
}

/// The embeddings and the blocks over `ids` (N, sequences of `s.t`), each block's activations
/// kept where `keep` (for the backward pass).
fn forward(model: &Gpt, ids: &[u32], s: &mut Setting, keep: bool) -> Result<Forward> {
    let (t, c) = (s.t, model.config().n_embd);
    let table = TokenTable::new(model)?; // (V, C)
    let mut h = embed((table.get(), c), &model.position, ids, (0, t))?; // (N, C)
    let shares: Vec<Vec<Shares>> = model
        .inputs
        .sequence
        .iter()
        .map(|i| i.shares_of(ids, t))
        .collect(); // (inputs, N)
    for (input, shares) in model.inputs.sequence.iter().zip(&shares) {
        add_sequence_input(input, shares, &mut h)?;
    }
    let embed_mask = s.dropout.mask(h.len()); // (N, C)
    if let Some(mask) = &embed_mask {
        h.iter_mut().zip(mask).for_each(|(h, m)| *h *= m);
    }
    let mut kept = Vec::with_capacity(model.h.len());
    for block in &model.h {
        let (out, activations) = block_forward(block, h, s)?; // (N, C)
        if keep {
            kept.push(activations);
        }
        h = out;
    }
    Ok(Forward {
        h,
        kept,
        shares,
        embed_mask,
    })
}

/// The mean cross-entropy of the batch `x` → `y` (B, T of token ids) in evaluation mode (no
/// dropout), f32: [`loss_and_gradients`]'s forward pass alone, for the evaluations.
pub fn loss(model: &Gpt, (x, y): (&Tensor, &Tensor)) -> Result<f64> {
    let (ids, targets, t) = batch_ids(model, (x, y))?;
    let mut s = Setting {
        t,
        precision: Precision::F32,
        position: &model.position,
        rotations: model.position.rotations(0, t),
        dropout: Dropout {
            p: model.config().dropout,
            mode: &mut Mode::Eval,
        },
    };
    let f = forward(model, &ids, &mut s, false)?;
    let h_f = Norm::new(&model.ln_f)?.forward(&f.h); // (N, C)
    let table = TokenTable::new(model)?; // (V, C)
    let tied_head = table.tied_head(model); // (V, C)
    let head = Values::new(&model.lm_head.weight)?;
    let head_weight = tied_head.as_deref().unwrap_or(head.get()); // (V, C)
    let biases = NextTokenBiases::read(model, &ids, t)?;
    let output = (&h_f[..], head_weight, biases.as_logit_bias());
    let (loss, _, _) = output_layer(model, output, &targets, false, Precision::F32)?;
    Ok(loss)
}

/// The output layer's gradients: of its input (N × C), of its weight (V × C) and of the adaptive
/// softmax's tail vector (C) if it has one.
type OutputGrads = (Vec<f32>, Vec<f32>, Option<Vec<f32>>);

/// The mean loss of the final hidden states h_f (N × C) through the output layer's `weight`
/// (V × C) with the next-token `bias`, against `targets` (N): the full softmax, or the adaptive
/// one where the model has it; with `with_grad`, the gradients and the biases' (empty without).
fn output_layer(
    model: &Gpt,
    (h_f, weight, bias): (&[f32], &[f32], Option<LogitBias>),
    targets: &[u32],
    with_grad: bool,
    precision: Precision,
) -> Result<(f64, Option<OutputGrads>, Vec<f32>)> {
    let c = model.config().n_embd;
    let Some(tail) = &model.tail else {
        let (loss, grads, d_bias) = lm_head_loss::biased_loss_and_gradients(
            (h_f, weight, bias.as_ref()),
            targets,
            c,
            with_grad,
            precision,
        );
        return Ok((loss, grads.map(|(dx, dw)| (dx, dw, None)), d_bias));
    };
    let tail = Values::new(tail)?;
    let k = model.config().adaptive_head;
    let head = adaptive_softmax::Head {
        w: weight,
        tail: tail.get(),
        k,
    };
    let (loss, grads, d_bias) = adaptive_softmax::loss_and_gradients(
        (h_f, head, bias.as_ref()),
        targets,
        c,
        with_grad,
        precision,
    );
    Ok((loss, grads.map(|(dx, dw, dt)| (dx, dw, Some(dt))), d_bias))
}

/// The mean cross-entropy of the batch `x` → `y` (B, T of token ids) and the gradient of every
/// parameter, for a model [`supports`] accepts, with the matmuls' inputs in `precision`; dropout
/// as `mode` says (masks drawn as [`Gpt::loss`] draws them).
pub fn loss_and_gradients(
    model: &Gpt,
    (x, y): (&Tensor, &Tensor),
    precision: Precision,
    mode: &mut Mode,
) -> Result<(f64, ParamGrads)> {
    let (ids, targets, t) = batch_ids(model, (x, y))?;
    let mut s = Setting {
        t,
        precision,
        position: &model.position,
        rotations: model.position.rotations(0, t),
        dropout: Dropout {
            p: model.config().dropout,
            mode,
        },
    };
    let mut grads = ParamGrads::new();
    let table = TokenTable::new(model)?; // (V, C)
    let tied_head = table.tied_head(model); // (V, C)
    let Forward {
        h,
        kept,
        shares,
        embed_mask,
    } = forward(model, &ids, &mut s, true)?;
    let h_f = Norm::new(&model.ln_f)?.forward(&h); // (N, C)
    let head = Values::new(&model.lm_head.weight)?;
    let head_weight = tied_head.as_deref().unwrap_or(head.get()); // (V, C)
    let biases = NextTokenBiases::read(model, &ids, t)?;
    let output = (&h_f[..], head_weight, biases.as_logit_bias());
    let (loss, Some((d_h_f, d_head, d_tail)), d_biases) =
        output_layer(model, output, &targets, true, s.precision)?
    else {
        bail!("the output layer returned no gradients")
    };
    drop(head);
    add_grad(&mut grads, &model.lm_head.weight, d_head);
    if let (Some(tail), Some(d_tail)) = (&model.tail, d_tail) {
        add_grad(&mut grads, tail, d_tail);
    }
    biases.add_gradients(model, d_biases, &mut grads);
    // Backward.
    let mut d_h = vec![0f32; h.len()];
    norm_backward(&model.ln_f, &h, &d_h_f, &mut d_h, &mut grads)?; // (N, C)
    scratch::give_back(d_h_f);
    for (block, activations) in model.h.iter().zip(&kept).rev() {
        d_h = block_backward(block, activations, &s, d_h, &mut grads)?; // (N, C)
    }
    embed_backward(
        model,
        (&ids, t, &shares),
        (&d_h, embed_mask.as_deref()),
        &mut grads,
    );
    Ok((loss, grads))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ModelConfig, Position};
    use candle_core::Device;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    /// A step's loss and gradients for a batch of 3 × 16 tokens, on a thread of its own whose
    /// `ops::scratch` shelf holds `poisoned` NaN-filled buffers (larger than any the step takes)
    /// before the step starts.
    fn step_on_a_new_thread(model: &Gpt, poisoned: usize) -> (f64, ParamGrads) {
        let ids: Vec<u32> = (0..3 * 17).map(|i| (i * 7 % 49) as u32).collect();
        let all = Tensor::from_vec(ids, (3, 17), &Device::Cpu).unwrap();
        let (x, y) = (all.narrow(1, 0, 16).unwrap(), all.narrow(1, 1, 16).unwrap());
        let (x, y) = (x.contiguous().unwrap(), y.contiguous().unwrap());
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        pool.install(|| {
            for _ in 0..poisoned {
                scratch::give_back(vec![f32::NAN; 1 << 16]);
            }
            let mut rng = ChaCha8Rng::seed_from_u64(5);
            let mode = &mut Mode::Train(&mut rng);
            loss_and_gradients(model, (&x, &y), Precision::F32, mode).unwrap()
        })
    }

    #[test]
    fn a_step_writes_every_value_it_takes_from_scratch_before_reading_it() {
        // Every buffer the kernels take for an output (ops::scratch) holds NaN beforehand: the
        // step must compute to the bit what it computes on fresh zeroed memory.
        for position in [Position::Rope, Position::Alibi] {
            let cfg = ModelConfig {
                vocab_size: 50,
                block_size: 16,
                n_layer: 2,
                n_head: 2,
                n_embd: 32,
                dropout: 0.1,
                position,
                ..Default::default()
            };
            let (model, _) = Gpt::seeded(&cfg, 3, &Device::Cpu).unwrap();
            let (loss, grads) = step_on_a_new_thread(&model, 0);
            let (poisoned_loss, poisoned_grads) = step_on_a_new_thread(&model, scratch::KEPT);
            assert!(loss.is_finite() && grads.len() > 10);
            assert_eq!(loss.to_bits(), poisoned_loss.to_bits(), "{position:?}");
            for (id, grad) in &grads {
                let poisoned = &poisoned_grads[id];
                let same = grad
                    .iter()
                    .zip(poisoned)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{position:?}: a gradient changed on poisoned buffers");
            }
        }
    }
}
