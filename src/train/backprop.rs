//! The training step's forward and backward passes written out by hand for the CPU.
//!
//! candle's autograd keeps every op's output as a node of its graph and starts each node's
//! gradient as zeros that the op's gradient is then added to: on the CPU that bookkeeping (a zeroed
//! buffer and an add per node, then copies out of the gradient store) was about 5 % of a training
//! step. Here the kernels of the fused ops ([`crate::ops`]) are called on plain buffers, block by
//! block, with the residual stream's gradient accumulated in place and every parameter's gradient
//! written once. The model is the same; [`supports`] says which configurations this covers
//! (every positional scheme, dropout off), the others train through candle's autograd. The tests
//! check both give the same loss and gradients.

use crate::model::block::Block;
use crate::model::layers::{LayerNorm, Linear, LN_EPS};
use crate::model::position::{rope_angles, rotate_pairs, sinusoidal_table, PositionEncoding};
use crate::model::Gpt;
use crate::ops::{attention, contiguous, gelu, layer_norm, linear, lm_head_loss};
use candle_core::{bail, Layout, Result, Storage, StorageRef, Tensor, TensorId};
use std::collections::HashMap;

/// Each parameter's gradient, flat, by the parameter's tensor.
pub type ParamGrads = HashMap<TensorId, Vec<f32>>;

/// Whether [`loss_and_gradients`] handles `model`: f32 on the CPU with the fused kernels on, and
/// no dropout.
pub fn supports(model: &Gpt) -> bool {
    model.config().dropout == 0.0 && model.runs_fused_kernels()
}

/// How the positional scheme acts inside attention, computed once per step for T positions.
enum InAttention {
    /// Nothing (none, learned, sinusoidal).
    Nothing,
    /// RoPE's cos and sin of positions 0..T (T × head_dim/2 each).
    Rotations(Vec<f32>, Vec<f32>),
    /// ALiBi's slope per head.
    Slopes(Vec<f32>),
}

impl InAttention {
    fn new(position: &PositionEncoding, t: usize) -> Self {
        match position {
            PositionEncoding::Rope { head_dim, base } => {
                let (cos, sin) = rope_angles(0, t, *head_dim, *base);
                InAttention::Rotations(cos, sin)
            }
            PositionEncoding::Alibi { slopes } => {
                InAttention::Slopes(slopes.iter().map(|&s| s as f32).collect())
            }
            _ => InAttention::Nothing,
        }
    }

    /// Rotates (or, with `inverse`, turns back) the q and k of every head in qkv (N × 3C,
    /// sequences of `t` rows) for RoPE; turning back carries their gradients to c_attn.
    fn rotate(&self, qkv: &mut [f32], (t, c): (usize, usize), head_dim: usize, inverse: bool) {
        let InAttention::Rotations(cos, sin) = self else {
            return;
        };
        let half = head_dim / 2;
        for (r, row) in qkv.chunks_mut(3 * c).enumerate() {
            let pairs = r % t * half..(r % t + 1) * half;
            let (cos, sin) = (&cos[pairs.clone()], &sin[pairs]);
            for head in row[..2 * c].chunks_mut(head_dim) {
                rotate_pairs(head, cos, sin, inverse);
            }
        }
    }

    fn slopes(&self) -> Option<&[f32]> {
        match self {
            InAttention::Slopes(slopes) => Some(slopes),
            _ => None,
        }
    }
}

/// A CPU tensor's values, read in place while this lives.
struct Values<'a>(StorageRef<'a>, &'a Layout);

impl<'a> Values<'a> {
    fn of(t: &'a Tensor) -> Self {
        let (storage, layout) = t.storage_and_layout();
        Values(storage, layout)
    }

    fn slice(&self) -> Result<&[f32]> {
        match &*self.0 {
            Storage::Cpu(cpu) => contiguous(cpu, self.1, "the hand-written training step"),
            _ => bail!("the hand-written training step runs on the CPU only"),
        }
    }
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

/// y = x Wᵀ + b, added onto `y` when given (the residual stream), else into a new buffer.
fn linear_forward(layer: &Linear, x: &[f32], y: Option<Vec<f32>>) -> Result<Vec<f32>> {
    let w = Values::of(&layer.weight);
    let b = layer.bias.as_ref().map(Values::of);
    let b = b.as_ref().map(Values::slice).transpose()?;
    let n_out = layer.weight.dim(0)?;
    Ok(match y {
        Some(mut y) => {
            linear::add_forward(x, w.slice()?, b, n_out, &mut y);
            y
        }
        None => linear::forward(x, w.slice()?, b, n_out),
    })
}

/// The gradient of a Linear layer's input x from its output's gradient dy; the weight's and
/// bias's gradients go to `grads`.
fn linear_backward(
    layer: &Linear,
    x: &[f32],
    dy: &[f32],
    grads: &mut ParamGrads,
) -> Result<Vec<f32>> {
    let (n_out, n_in) = layer.weight.dims2()?;
    let w = Values::of(&layer.weight);
    let mut dx = vec![0f32; x.len()];
    let mut dw = vec![0f32; n_out * n_in];
    let mut db = layer.bias.as_ref().map(|_| vec![0f32; n_out]);
    linear::backward_into(
        (x, w.slice()?, dy),
        n_out,
        &mut dx,
        &mut dw,
        db.as_deref_mut(),
    );
    add_grad(grads, &layer.weight, dw);
    if let (Some(bias), Some(db)) = (&layer.bias, db) {
        add_grad(grads, bias, db);
    }
    Ok(dx)
}

/// LayerNorm of the rows of x (N × C).
fn norm_forward(norm: &LayerNorm, x: &[f32]) -> Result<Vec<f32>> {
    let (w, b) = (Values::of(&norm.weight), Values::of(&norm.bias));
    Ok(layer_norm::forward(x, w.slice()?, b.slice()?, LN_EPS))
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
    let w = Values::of(&norm.weight);
    let (dw, db) = layer_norm::backward_into(x, w.slice()?, dy, LN_EPS, dx, true);
    add_grad(grads, &norm.weight, dw);
    add_grad(grads, &norm.bias, db);
    Ok(())
}

/// What a block's forward pass keeps for its backward pass; every buffer is N × width, N = B·T.
struct BlockActivations {
    /// The block's input (C).
    x: Vec<f32>,
    /// ln_1(x) (C).
    ln_1: Vec<f32>,
    /// The fused projection's q | k | v (3C), q and k rotated for RoPE.
    qkv: Vec<f32>,
    /// The attention weights (B × H × T × T).
    weights: Vec<f32>,
    /// The heads' outputs side by side (C).
    heads: Vec<f32>,
    /// x + the attention's projection (C).
    mid: Vec<f32>,
    /// ln_2(mid) (C).
    ln_2: Vec<f32>,
    /// The MLP's hidden layer before GELU (4C).
    fc: Vec<f32>,
    /// After GELU (4C).
    act: Vec<f32>,
}

/// One block over x (N × C, sequences of `t` rows): its output and what its backward pass needs.
fn block_forward(
    block: &Block,
    x: Vec<f32>,
    t: usize,
    positions: &InAttention,
) -> Result<(Vec<f32>, BlockActivations)> {
    let attn = &block.attn;
    let c = attn.n_head * attn.head_dim;
    let ln_1 = norm_forward(&block.ln_1, &x)?; // (N, C)
    let mut qkv = linear_forward(&attn.c_attn, &ln_1, None)?; // (N, 3C)
    positions.rotate(&mut qkv, (t, c), attn.head_dim, false);
    let scale = attn.scale() as f32;
    let slopes = positions.slopes();
    let (heads, weights) = attention::qkv_forward(&qkv, (t, c), attn.n_head, scale, slopes); // (N, C), (B, H, T, T)
    let mid = linear_forward(&attn.c_proj, &heads, Some(x.clone()))?; // (N, C)
    let ln_2 = norm_forward(&block.ln_2, &mid)?; // (N, C)
    let fc = linear_forward(&block.mlp.c_fc, &ln_2, None)?; // (N, 4C)
    let act = gelu::forward(&fc); // (N, 4C)
    let out = linear_forward(&block.mlp.c_proj, &act, Some(mid.clone()))?; // (N, C)
    let kept = BlockActivations {
        x,
        ln_1,
        qkv,
        weights,
        heads,
        mid,
        ln_2,
        fc,
        act,
    };
    Ok((out, kept))
}

/// The gradient of a block's input from its output's gradient `d_out` (N × C), whose buffer it
/// reuses; the parameters' gradients go to `grads`.
fn block_backward(
    block: &Block,
    a: &BlockActivations,
    (t, positions): (usize, &InAttention),
    d_out: Vec<f32>,
    grads: &mut ParamGrads,
) -> Result<Vec<f32>> {
    let attn = &block.attn;
    let c = attn.n_head * attn.head_dim;
    // out = mid + c_proj(gelu(c_fc(ln_2(mid)))).
    let mut d_fc = linear_backward(&block.mlp.c_proj, &a.act, &d_out, grads)?; // (N, 4C)
    gelu::backward_in_place(&a.fc, &mut d_fc);
    let d_ln_2 = linear_backward(&block.mlp.c_fc, &a.ln_2, &d_fc, grads)?; // (N, C)
    let mut d_mid = d_out;
    norm_backward(&block.ln_2, &a.mid, &d_ln_2, &mut d_mid, grads)?; // (N, C)
                                                                     // mid = x + c_proj(attention(c_attn(ln_1(x)))).
    let d_heads = linear_backward(&attn.c_proj, &a.heads, &d_mid, grads)?; // (N, C)
    let scale = attn.scale() as f32;
    let mut d_qkv =
        attention::qkv_backward(&a.qkv, &d_heads, &a.weights, (t, c), attn.n_head, scale); // (N, 3C)
    positions.rotate(&mut d_qkv, (t, c), attn.head_dim, true);
    let d_ln_1 = linear_backward(&attn.c_attn, &a.ln_1, &d_qkv, grads)?; // (N, C)
    let mut d_x = d_mid;
    norm_backward(&block.ln_1, &a.x, &d_ln_1, &mut d_x, grads)?; // (N, C)
    Ok(d_x)
}

/// The token embeddings of `ids` plus the positions 0..T of each sequence of `t` rows (N × C).
fn embed(model: &Gpt, ids: &[u32], t: usize) -> Result<Vec<f32>> {
    let table = Values::of(model.wte.embeddings());
    let (table, c) = (table.slice()?, model.config().n_embd);
    let mut x = Vec::with_capacity(ids.len() * c);
    for &id in ids {
        x.extend_from_slice(&table[id as usize * c..(id as usize + 1) * c]);
    }
    let add_positions = |x: &mut [f32], positions: &[f32]| {
        for sequence in x.chunks_mut(t * c) {
            sequence
                .iter_mut()
                .zip(positions)
                .for_each(|(v, p)| *v += p);
        }
    };
    match &model.position {
        PositionEncoding::Learned { table } => {
            let rows = table.dim(0)?;
            if t > rows {
                bail!("the learned position table has {rows} rows but the batch has {t} positions: crop the sequences to block_size")
            }
            let values = Values::of(table);
            add_positions(&mut x, &values.slice()?[..t * c]);
        }
        PositionEncoding::Sinusoidal { n_embd } => {
            add_positions(&mut x, &sinusoidal_table(0, t, *n_embd))
        }
        _ => {}
    }
    Ok(x)
}

/// The embedding's gradients from the gradient of its output `d_x` (N × C).
fn embed_backward(
    model: &Gpt,
    ids: &[u32],
    t: usize,
    d_x: &[f32],
    grads: &mut ParamGrads,
) -> Result<()> {
    let wte = model.wte.embeddings();
    let c = model.config().n_embd;
    let mut d_wte = vec![0f32; wte.elem_count()];
    for (&id, row) in ids.iter().zip(d_x.chunks(c)) {
        let target = &mut d_wte[id as usize * c..(id as usize + 1) * c];
        target.iter_mut().zip(row).for_each(|(d, g)| *d += g);
    }
    add_grad(grads, wte, d_wte);
    if let PositionEncoding::Learned { table } = &model.position {
        let mut d_table = vec![0f32; table.elem_count()];
        for sequence in d_x.chunks(t * c) {
            d_table.iter_mut().zip(sequence).for_each(|(d, g)| *d += g);
        }
        add_grad(grads, table, d_table);
    }
    Ok(())
}

/// The mean cross-entropy of the batch `x` → `y` (B, T of token ids) and the gradient of every
/// parameter, for a model [`supports`] accepts.
pub fn loss_and_gradients(model: &Gpt, x: &Tensor, y: &Tensor) -> Result<(f64, ParamGrads)> {
    if !supports(model) {
        bail!("the hand-written training step does not cover this model: train it through autograd")
    }
    let (_b, t) = x.dims2()?;
    let (ids, targets) = (
        x.flatten_all()?.to_vec1::<u32>()?,
        y.flatten_all()?.to_vec1::<u32>()?,
    );
    let vocab = model.config().vocab_size;
    if let Some(&bad) = ids.iter().chain(&targets).find(|&&id| id as usize >= vocab) {
        bail!("token id {bad} is outside the vocabulary of {vocab}")
    }
    if targets.len() != ids.len() {
        bail!("{} targets for {} tokens", targets.len(), ids.len())
    }
    let c = model.config().n_embd;
    let mut grads = ParamGrads::new();
    // Forward.
    let mut h = embed(model, &ids, t)?; // (N, C)
    let positions = InAttention::new(&model.position, t);
    let mut kept = Vec::with_capacity(model.h.len());
    for block in &model.h {
        let (out, activations) = block_forward(block, h, t, &positions)?; // (N, C)
        kept.push(activations);
        h = out;
    }
    let h_f = norm_forward(&model.ln_f, &h)?; // (N, C)
    let head = Values::of(&model.lm_head.weight);
    let (loss, Some((d_h_f, d_head))) =
        lm_head_loss::loss_and_gradients(&h_f, head.slice()?, &targets, c, true)
    else {
        bail!("the output layer returned no gradients")
    };
    drop(head);
    add_grad(&mut grads, &model.lm_head.weight, d_head);
    // Backward.
    let mut d_h = vec![0f32; h.len()];
    norm_backward(&model.ln_f, &h, &d_h_f, &mut d_h, &mut grads)?; // (N, C)
    for (block, activations) in model.h.iter().zip(&kept).rev() {
        d_h = block_backward(block, activations, (t, &positions), d_h, &mut grads)?;
        // (N, C)
    }
    embed_backward(model, &ids, t, &d_h, &mut grads)?;
    Ok((loss, grads))
}
