//! Inputs added to the token embeddings, given by what is modelled: the core knows their shape, not
//! their meaning (verse's live in `verse::inputs`). Each is a learned matrix W (`rows` × C), zero
//! at first so that a new model is the same as without it, whose rows a token or a position takes
//! with shares ([`Shares`]: it adds Σ share · W[row]). Two kinds:
//!
//! - a **token input** depends on the token alone, through a fixed map A (V × rows): the token
//!   table becomes E' = E + A W (V, C), and so does a tied output layer;
//! - a **sequence input** depends on the tokens up to each position, read along each sequence by a
//!   [`SequenceReader`]: its rows are added to the residual stream entering the blocks.
//!
//! The graph's ops, the engine's slices and the gradients of both kinds are written here once; the
//! graph ([`crate::model::Gpt`]), the training step and the decoder call them for every input.

use candle_core::{bail, Result, Tensor};
use candle_nn::{Init, VarBuilder};
use std::sync::Arc;

/// The rows of W that one token or position takes, each with its share.
pub type Shares = Vec<(usize, f32)>;

/// Goes along one sequence, token by token.
pub trait SequenceReader: Send {
    /// Reads the next token: the rows of the position that holds it.
    fn read(&mut self, id: u32) -> Shares;
}

/// What a sequence input reads from the tokens.
pub trait SequenceInput: Send + Sync {
    /// Rows of its W.
    fn rows(&self) -> usize;
    /// A reader at the start of a sequence (which may begin anywhere in the text).
    fn reader(&self) -> Box<dyn SequenceReader>;
}

/// What an input reads: the token alone, or the sequence up to each position.
#[derive(Clone)]
pub enum Reads {
    /// Each token id's rows of W (ids past the end take none), and the number of rows.
    Token { shares: Vec<Shares>, rows: usize },
    /// A reader of sequences.
    Sequence(Arc<dyn SequenceInput>),
}

/// One input as a model is given it.
#[derive(Clone)]
pub struct Input {
    /// Its name in the config (`ModelConfig::inputs`).
    pub name: &'static str,
    /// Its W's parameter: `transformer.<tensor>.weight`.
    pub tensor: &'static str,
    /// What it reads.
    pub reads: Reads,
}

/// A token input with its learned W.
#[derive(Clone)]
pub struct TokenInput {
    /// W (rows, C).
    pub(crate) weight: Tensor,
    /// Per token id, the rows of W added to its embedding and the share of each.
    shares: Vec<Shares>,
    /// The map as a matrix A (V, rows), for the candle graph.
    map: Tensor,
}

impl TokenInput {
    /// W of `rows` × `n_embd`, zero at first, for a model of `vocab_size` tokens.
    fn new(
        vb: VarBuilder,
        shares: Vec<Shares>,
        rows: usize,
        shape: (usize, usize),
    ) -> Result<Self> {
        let (vocab_size, n_embd) = shape;
        if shares.len() > vocab_size {
            bail!(
                "the input's vocabulary names {} tokens but the model has {vocab_size}: they come from different runs",
                shares.len()
            )
        }
        let weight = vb.get_with_hints((rows, n_embd), "weight", Init::Const(0.0))?;
        let mut map = vec![0f32; vocab_size * rows]; // (V, rows)
        for (v, shares) in shares.iter().enumerate() {
            for &(row, share) in shares {
                if row >= rows {
                    bail!("token {v} takes row {row} of an input of {rows} rows")
                }
                map[v * rows + row] += share;
            }
        }
        let map = Tensor::from_vec(map, (vocab_size, rows), weight.device())?;
        Ok(TokenInput {
            weight,
            shares,
            map,
        })
    }

    /// The token table with this input, E + A W (V, C), for the table E (V, C), as a graph of
    /// differentiable ops.
    pub fn add_to_table(&self, table: &Tensor) -> Result<Tensor> {
        table + self.map.matmul(&self.weight)? // (V, C)
    }

    /// [`Self::add_to_table`] on slices, for the CPU engine: the table (V × C) plus A W.
    pub fn add_to_table_values(&self, table: &mut [f32], weight: &[f32], c: usize) {
        for (row, shares) in table.chunks_mut(c).zip(&self.shares) {
            add_shares(row, shares, weight, c);
        }
    }

    /// The gradient of W (rows × C) from the table's d_table (V × C): Aᵀ d_table, summed in token
    /// order.
    pub fn gradient(&self, d_table: &[f32], c: usize) -> Vec<f32> {
        let mut d_weight = vec![0f32; self.weight.elem_count()]; // (rows, C)
        for (d_row, shares) in d_table.chunks(c).zip(&self.shares) {
            add_to_shares(&mut d_weight, shares, d_row, c);
        }
        d_weight
    }
}

/// A sequence input with its learned W.
#[derive(Clone)]
pub struct SequenceEmbedding {
    /// W (rows, C).
    pub(crate) weight: Tensor,
    input: Arc<dyn SequenceInput>,
}

impl SequenceEmbedding {
    /// W of the input's rows × `n_embd`, zero at first.
    fn new(vb: VarBuilder, input: Arc<dyn SequenceInput>, n_embd: usize) -> Result<Self> {
        let weight = vb.get_with_hints((input.rows(), n_embd), "weight", Init::Const(0.0))?;
        Ok(SequenceEmbedding { weight, input })
    }

    /// A reader at the start of a sequence.
    pub fn reader(&self) -> Box<dyn SequenceReader> {
        self.input.reader()
    }

    /// The rows each position of `ids` (N) takes, read as sequences of `t` tokens, each from a
    /// fresh reader.
    pub fn shares_of(&self, ids: &[u32], t: usize) -> Vec<Shares> {
        ids.chunks(t)
            .flat_map(|sequence| {
                let mut reader = self.reader();
                sequence
                    .iter()
                    .map(|&id| reader.read(id))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// x (B, T, C) plus the rows each position takes for tokens idx (B, T), as a graph of
    /// differentiable ops.
    pub fn add_to_embedding(&self, x: &Tensor, idx: &Tensor) -> Result<Tensor> {
        let (b, t, c) = x.dims3()?;
        let rows = self.weight.dim(0)?;
        let ids = idx.flatten_all()?.to_vec1::<u32>()?; // (B·T)
        let mut choice = vec![0f32; b * t * rows]; // (B·T, rows)
        for (i, shares) in self.shares_of(&ids, t).iter().enumerate() {
            for &(row, share) in shares {
                choice[i * rows + row] += share;
            }
        }
        let choice = Tensor::from_vec(choice, (b * t, rows), x.device())?;
        x + choice.matmul(&self.weight)?.reshape((b, t, c))? // (B, T, C)
    }

    /// [`Self::add_to_embedding`] on slices, for the CPU engine: x (N × C) plus the rows of W
    /// (rows × C) each position takes, `shares` (N).
    pub fn add_to_rows(x: &mut [f32], shares: &[Shares], weight: &[f32], c: usize) {
        for (row, shares) in x.chunks_mut(c).zip(shares) {
            add_shares(row, shares, weight, c);
        }
    }

    /// The gradient of W (rows × C) from the embedding's d_x (N × C), summed in position order.
    pub fn gradient(&self, d_x: &[f32], shares: &[Shares], c: usize) -> Vec<f32> {
        let mut d_weight = vec![0f32; self.weight.elem_count()]; // (rows, C)
        for (d_row, shares) in d_x.chunks(c).zip(shares) {
            add_to_shares(&mut d_weight, shares, d_row, c);
        }
        d_weight
    }
}

/// row (C) += Σ share · W[r] over `shares`, W (rows × C).
fn add_shares(row: &mut [f32], shares: &Shares, weight: &[f32], c: usize) {
    for &(r, share) in shares {
        let w = &weight[r * c..(r + 1) * c]; // (C)
        row.iter_mut().zip(w).for_each(|(x, w)| *x += share * w);
    }
}

/// d_W[r] (C) += share · d_row over `shares`, d_W (rows × C).
fn add_to_shares(d_weight: &mut [f32], shares: &Shares, d_row: &[f32], c: usize) {
    for &(r, share) in shares {
        let d_w = &mut d_weight[r * c..(r + 1) * c]; // (C)
        d_w.iter_mut().zip(d_row).for_each(|(d, g)| *d += share * g);
    }
}

/// A model's inputs with their learned W, each kind in the order given.
#[derive(Clone, Default)]
pub struct LearnedInputs {
    pub(crate) token: Vec<TokenInput>,
    pub(crate) sequence: Vec<SequenceEmbedding>,
}

impl LearnedInputs {
    /// Takes or creates each input's W through `vb` (the model's `transformer`), for a model of
    /// (V, C) `shape`.
    pub(crate) fn new(vb: &VarBuilder, inputs: Vec<Input>, shape: (usize, usize)) -> Result<Self> {
        let mut learned = LearnedInputs::default();
        for input in inputs {
            let vb = vb.pp(input.tensor);
            match input.reads {
                Reads::Token { shares, rows } => learned
                    .token
                    .push(TokenInput::new(vb, shares, rows, shape)?),
                Reads::Sequence(reader) => learned
                    .sequence
                    .push(SequenceEmbedding::new(vb, reader, shape.1)?),
            }
        }
        Ok(learned)
    }

    /// The token table E' (V, C) of the embedding E with every token input, as a graph.
    pub(crate) fn table(&self, wte: &Tensor) -> Result<Option<Tensor>> {
        let mut table: Option<Tensor> = None;
        for input in &self.token {
            table = Some(input.add_to_table(table.as_ref().unwrap_or(wte))?);
        }
        Ok(table)
    }

    /// x (B, T, C) plus every sequence input's rows for tokens idx (B, T), as a graph.
    pub(crate) fn add_to_embedding(&self, mut x: Tensor, idx: &Tensor) -> Result<Tensor> {
        for input in &self.sequence {
            x = input.add_to_embedding(&x, idx)?; // (B, T, C)
        }
        Ok(x)
    }
}
