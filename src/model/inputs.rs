//! Inputs given by what is modelled: the core knows their shape, not their meaning (verse's live
//! in `verse::inputs`). Each is learned, zero at first so that a new model is the same as without
//! it. Three kinds:
//!
//! - a **token input** depends on the token alone: a matrix W (`rows` × C) whose rows a token
//!   takes with shares ([`Shares`]: Σ share · W[row]) through a fixed map A (V × rows); the token
//!   table becomes E' = E + A W (V, C), and so does a tied output layer;
//! - a **sequence input** depends on the tokens up to each position, read along each sequence by a
//!   [`SequenceReader`]: the rows of its W that a position takes are added to the residual stream
//!   entering the blocks;
//! - a **next-token bias** depends on the tokens up to each position too ([`BiasReader`]): it
//!   names next tokens whose logits take one of its learned biases b (`biases`), after the output
//!   layer.
//!
//! The graph's ops, the engine's slices and the gradients of every kind are written here once; the
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

/// The next tokens of one position whose logits take a bias: (token id, which bias).
pub type Biased = Vec<(u32, usize)>;

/// Goes along one sequence, token by token, naming the next tokens to bias.
pub trait BiasReader: Send {
    /// Reads the next token: the biased next tokens of the position that holds it.
    fn read(&mut self, id: u32) -> Biased;
}

/// What a next-token bias reads from the tokens.
pub trait BiasInput: Send + Sync {
    /// Its learned biases.
    fn biases(&self) -> usize;
    /// A reader at the start of a sequence (which may begin anywhere in the text).
    fn reader(&self) -> Box<dyn BiasReader>;
}

/// What an input reads: the token alone, or the sequence up to each position (for rows of the
/// residual stream, or for biases of the next token's logits).
#[derive(Clone)]
pub enum Reads {
    /// Each token id's rows of W (ids past the end take none), and the number of rows.
    Token { shares: Vec<Shares>, rows: usize },
    /// A reader of sequences.
    Sequence(Arc<dyn SequenceInput>),
    /// A reader of sequences naming next tokens to bias.
    Bias(Arc<dyn BiasInput>),
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

impl Input {
    /// Its learned parameters in a model of width `n_embd`: rows of W, or biases.
    pub fn parameters(&self, n_embd: usize) -> usize {
        match &self.reads {
            Reads::Token { rows, .. } => rows * n_embd,
            Reads::Sequence(input) => input.rows() * n_embd,
            Reads::Bias(input) => input.biases(),
        }
    }
}

/// The learned parameters of `inputs` in a model of width `n_embd`.
pub fn parameters(inputs: &[Input], n_embd: usize) -> usize {
    inputs.iter().map(|input| input.parameters(n_embd)).sum()
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
        read_sequences(ids, t, || self.reader(), |reader, id| reader.read(id))
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

/// What `read` gives for each position of `ids` (N), read as sequences of `t` tokens, each from a
/// fresh reader of `new_reader`: the one loop of [`SequenceEmbedding::shares_of`] and
/// [`NextTokenBias::entries_of`].
fn read_sequences<R, T>(
    ids: &[u32],
    t: usize,
    new_reader: impl Fn() -> R,
    read: impl Fn(&mut R, u32) -> T,
) -> Vec<T> {
    ids.chunks(t)
        .flat_map(|sequence| {
            let mut reader = new_reader();
            sequence
                .iter()
                .map(|&id| read(&mut reader, id))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A next-token bias with its learned biases.
#[derive(Clone)]
pub struct NextTokenBias {
    /// b (biases).
    pub(crate) weight: Tensor,
    input: Arc<dyn BiasInput>,
}

impl NextTokenBias {
    /// The input's biases, zero at first.
    fn new(vb: VarBuilder, input: Arc<dyn BiasInput>) -> Result<Self> {
        let weight = vb.get_with_hints(input.biases(), "weight", Init::Const(0.0))?;
        Ok(NextTokenBias { weight, input })
    }

    /// A reader at the start of a sequence.
    pub fn reader(&self) -> Box<dyn BiasReader> {
        self.input.reader()
    }

    /// The biased next tokens of each position of `ids` (N), read as sequences of `t` tokens,
    /// each from a fresh reader.
    pub fn entries_of(&self, ids: &[u32], t: usize) -> Vec<Biased> {
        read_sequences(ids, t, || self.reader(), |reader, id| reader.read(id))
    }

    /// logits (N, V) plus the biases of `entries` (N), as a graph of differentiable ops: each
    /// bias added to the rows that take it alone (index_add of mask · b, (R, V)).
    fn add_to_logits(&self, logits: &Tensor, entries: &[Biased]) -> Result<Tensor> {
        let v = logits.dim(1)?;
        let mut sum = logits.clone();
        for bias in 0..self.input.biases() {
            let rows: Vec<u32> = (0..entries.len() as u32)
                .filter(|&row| entries[row as usize].iter().any(|(_, b)| *b == bias))
                .collect();
            if rows.is_empty() {
                continue;
            }
            let mut mask = vec![0f32; rows.len() * v]; // (R, V)
            for (i, &row) in rows.iter().enumerate() {
                let taken = entries[row as usize].iter().filter(|(_, b)| *b == bias);
                for &(token, _) in taken {
                    mask[i * v + token as usize] += 1.0;
                }
            }
            let mask = Tensor::from_vec(mask, (rows.len(), v), logits.device())?;
            let delta = mask.broadcast_mul(&self.weight.narrow(0, bias, 1)?)?; // (R, V)
            let rows = Tensor::new(rows.as_slice(), logits.device())?; // (R)
            sum = sum.index_add(&rows, &delta, 0)?; // (N, V)
        }
        Ok(sum)
    }

    /// [`Self::add_to_logits`] on slices, for the decoder: one position's logits (V) plus the
    /// biases b of its `entries`.
    pub fn add_to_row(logits: &mut [f32], entries: &Biased, weight: &[f32]) {
        for &(token, bias) in entries {
            logits[token as usize] += weight[bias];
        }
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

/// A model's inputs with their learned W (or biases), each kind in the order given.
#[derive(Clone, Default)]
pub struct LearnedInputs {
    pub(crate) token: Vec<TokenInput>,
    pub(crate) sequence: Vec<SequenceEmbedding>,
    pub(crate) bias: Vec<NextTokenBias>,
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
                Reads::Bias(reader) => learned.bias.push(NextTokenBias::new(vb, reader)?),
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

    /// logits (B, T, V) plus every next-token bias for tokens idx (B, T), as a graph; with `last`,
    /// logits (B, V) of each sequence's last position only.
    pub(crate) fn add_to_logits(&self, logits: Tensor, idx: &Tensor, last: bool) -> Result<Tensor> {
        if self.bias.is_empty() {
            return Ok(logits);
        }
        let (b, t) = idx.dims2()?;
        let ids = idx.flatten_all()?.to_vec1::<u32>()?; // (B·T)
        let v = *logits
            .dims()
            .last()
            .expect("logits have a vocabulary dimension");
        let mut sum = logits.reshape(((), v))?; // (B·T or B, V)
        for input in &self.bias {
            let mut entries = input.entries_of(&ids, t); // (B·T)
            if last {
                entries = entries.into_iter().skip(t - 1).step_by(t).collect(); // (B)
            }
            sum = input.add_to_logits(&sum, &entries)?;
        }
        match last {
            true => Ok(sum),                 // (B, V)
            false => sum.reshape((b, t, v)), // (B, T, V)
        }
    }
}
