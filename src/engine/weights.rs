//! The model's tensors read in place as f32 slices: the embeddings and the LayerNorm that read
//! them.

use crate::model::inputs::{SequenceEmbedding, Shares};
use crate::model::layers::{LayerNorm, LN_EPS};
use crate::model::position::PositionEncoding;
use crate::model::Gpt;
use crate::ops::layer_norm;
use candle_core::{bail, CpuStorage, Result, Storage, StorageRef, Tensor};
use std::ops::Range;

/// The f32 values of a contiguous CPU tensor (row-major), borrowed from its storage: the tensor
/// cannot change while they are held.
pub(crate) struct Values<'m> {
    storage: StorageRef<'m>,
    range: Range<usize>,
}

impl<'m> Values<'m> {
    /// The values of `t`; an error unless it is a contiguous f32 CPU tensor.
    pub fn new(t: &'m Tensor) -> Result<Self> {
        let (storage, layout) = t.storage_and_layout();
        let Some((start, end)) = layout.contiguous_offsets() else {
            bail!("the CPU engine needs contiguous weights")
        };
        if !matches!(&*storage, Storage::Cpu(CpuStorage::F32(_))) {
            bail!("the CPU engine needs f32 tensors on the CPU")
        }
        Ok(Values {
            storage,
            range: start..end,
        })
    }

    /// The values.
    pub fn get(&self) -> &[f32] {
        match &*self.storage {
            Storage::Cpu(CpuStorage::F32(v)) => &v[self.range.clone()],
            _ => unreachable!("Values::new accepts only f32 CPU storage"),
        }
    }
}

/// The token table the engine reads (V × C): the embedding in place, or, for a model with token
/// inputs (`model::inputs`), a copy with them added.
pub(crate) enum TokenTable<'m> {
    InPlace(Values<'m>),
    WithInputs(Vec<f32>),
}

impl<'m> TokenTable<'m> {
    pub fn new(model: &'m Gpt) -> Result<Self> {
        let wte = Values::new(model.wte.embeddings())?;
        if model.inputs.token.is_empty() {
            return Ok(TokenTable::InPlace(wte));
        }
        let c = model.config().n_embd;
        let mut table = wte.get().to_vec(); // (V, C)
        for input in &model.inputs.token {
            input.add_to_table_values(&mut table, Values::new(&input.weight)?.get(), c);
        }
        Ok(TokenTable::WithInputs(table))
    }

    /// The values (V × C).
    pub fn get(&self) -> &[f32] {
        match self {
            TokenTable::InPlace(values) => values.get(),
            TokenTable::WithInputs(table) => table,
        }
    }

    /// The output layer's weight if it is this table and not the embedding as stored: the table
    /// with token inputs of a tied model.
    pub fn tied_head(self, model: &Gpt) -> Option<Vec<f32>> {
        match self {
            TokenTable::WithInputs(table) if model.config().tie_weights => Some(table),
            _ => None,
        }
    }
}

/// The residual stream entering the blocks (N × C): the rows of `wte` (V × C) for `ids`, plus,
/// for the learned and sinusoidal schemes, positions `start..start+len` in each sequence of
/// `len` rows.
pub(crate) fn embed(
    (wte, c): (&[f32], usize),
    position: &PositionEncoding,
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
    position.add_to_rows(&mut x, (start, len))?;
    Ok(x)
}

/// Adds to the rows x (N × C) of the residual stream the rows of `input`'s W that each position
/// takes, `shares` (N).
pub(crate) fn add_sequence_input(
    input: &SequenceEmbedding,
    shares: &[Shares],
    x: &mut [f32],
) -> Result<()> {
    let weight = Values::new(&input.weight)?;
    SequenceEmbedding::add_to_rows(x, shares, weight.get(), input.weight.dim(1)?);
    Ok(())
}

/// A LayerNorm's weight and bias.
pub(crate) struct Norm<'m> {
    pub weight: Values<'m>,
    pub bias: Values<'m>,
}

impl<'m> Norm<'m> {
    pub fn new(ln: &'m LayerNorm) -> Result<Self> {
        Ok(Norm {
            weight: Values::new(&ln.weight)?,
            bias: Values::new(&ln.bias)?,
        })
    }

    /// out = LayerNorm(x), row by row on this thread.
    pub fn forward_into(&self, x: &[f32], out: &mut [f32]) {
        let (weight, bias) = (self.weight.get(), self.bias.get());
        for (x, out) in x.chunks(weight.len()).zip(out.chunks_mut(weight.len())) {
            layer_norm::normalize_row(x, weight, bias, LN_EPS, out)
        }
    }

    /// LayerNorm(x) of the rows of x (N × C), spread over the threads.
    pub fn forward(&self, x: &[f32]) -> Vec<f32> {
        layer_norm::forward(x, self.weight.get(), self.bias.get(), LN_EPS)
    }

    /// Adds the gradient of the input x, from the output's gradient dy, to `dx`; returns the
    /// weight's and bias's gradients.
    pub fn backward(&self, x: &[f32], dy: &[f32], dx: &mut [f32]) -> (Vec<f32>, Vec<f32>) {
        layer_norm::backward_into(x, self.weight.get(), dy, LN_EPS, dx, true)
    }
}
