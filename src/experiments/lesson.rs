//! The lesson's experiment: does attention see word order, and what do heads cost?
//!
//! 1. Order leak: untrained models read "白日依山尽" and "山依日白尽"; how far apart are the logits
//!    at the last position? With one layer and no positions only float rounding separates them; a
//!    second layer sees order through the causal mask (Haviv et al. 2022).
//! 2. Multi-head shapes and the parameter count of one attention layer for 1, 2, 4 and 8 heads.

use crate::config::{ModelConfig, Position};
use crate::data::CharTokenizer;
use crate::model::{Gpt, Mode};
use anyhow::Result;
use candle_core::{Device, Tensor};
use serde::Serialize;
use std::fmt::Write;

/// The poem line of the lesson.
pub const SENTENCE: &str = "白日依山尽";
/// The same characters with the first four reordered.
pub const SHUFFLED: &str = "山依日白尽";

/// The sentence pairs the order question can be asked with, each the same characters with the
/// last one kept and the others reordered: the lesson's line, and the same question for a
/// vocabulary without it (a run trained on English text).
pub const PAIRS: [(&str, &str); 2] = [
    (SENTENCE, SHUFFLED),
    ("the dog bit the man.", "the man bit the dog."),
];

/// The first of [`PAIRS`] whose characters are all in `tokenizer`'s vocabulary.
pub fn order_pair(tokenizer: &CharTokenizer) -> Result<(&'static str, &'static str)> {
    let known = |text: &str| text.chars().all(|c| tokenizer.id(c).is_some());
    PAIRS
        .into_iter()
        .find(|(sentence, _)| known(sentence))
        .ok_or_else(|| {
            anyhow::anyhow!(
                "the vocabulary has the characters of neither '{SENTENCE}' nor '{}': the order question needs a run trained on Chinese verse or English text",
                PAIRS[1].0
            )
        })
}

/// One cell of the order-leak table.
#[derive(Debug, Clone, Serialize)]
pub struct OrderLeak {
    /// Number of transformer blocks.
    pub layers: usize,
    /// The positional scheme ("none" is the learned model with its table zeroed, as in the lesson).
    pub position: Position,
    /// max |logits(sentence) − logits(shuffled)| at the last position.
    pub diff: f32,
}

/// Attention parameter counts of one layer.
#[derive(Debug, Clone, Serialize)]
pub struct AttentionParams {
    /// Heads.
    pub n_head: usize,
    /// Weights and biases of the fused qkv projection.
    pub c_attn: usize,
    /// Weights and biases of the output projection.
    pub c_proj: usize,
}

/// Shapes in a 32-dim, 4-head attention layer reading the sentence.
#[derive(Debug, Clone, Serialize)]
pub struct Shapes {
    /// q before the split: (B, T, C).
    pub q: Vec<usize>,
    /// q split into heads: (B, n_head, T, head_dim).
    pub q_heads: Vec<usize>,
    /// Attention weights: (B, n_head, T, T).
    pub scores: Vec<usize>,
}

/// Everything the experiment measures.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The sentence of part 1 ([`order_pair`]).
    pub sentence: &'static str,
    /// Its characters reordered.
    pub shuffled: &'static str,
    /// The seed of the random models.
    pub seed: u64,
    /// Vocabulary size of the tokenizer used.
    pub vocab_size: usize,
    /// Width of the models of part 1.
    pub n_embd: usize,
    /// Heads of the models of part 1.
    pub n_head: usize,
    /// Part 1, for 1, 2 and 3 layers and every scheme.
    pub order_leak: Vec<OrderLeak>,
    /// Part 2: shapes.
    pub shapes: Shapes,
    /// Part 2: parameter counts.
    pub attention_params: Vec<AttentionParams>,
}

/// Tokens of `text` as a (1, T) tensor.
fn ids(tokenizer: &CharTokenizer, text: &str, device: &Device) -> Result<Tensor> {
    Ok(Tensor::new(tokenizer.encode(text)?, device)?.unsqueeze(0)?)
}

/// The order-leak difference for one untrained model; `position = None` means the learned model
/// with its position table zeroed.
pub fn order_leak(
    base: &ModelConfig,
    layers: usize,
    position: Position,
    seed: u64,
    tokenizer: &CharTokenizer,
) -> Result<f32> {
    let device = Device::Cpu;
    let zero_table = position == Position::None;
    let cfg = ModelConfig {
        n_layer: layers,
        position: if zero_table {
            Position::Learned
        } else {
            position
        },
        ..base.clone()
    };
    let (model, mut varmap) = Gpt::seeded(&cfg, seed, &device)?;
    if zero_table {
        varmap.set_one(
            "transformer.wpe.weight",
            Tensor::zeros(
                (cfg.block_size, cfg.n_embd),
                candle_core::DType::F32,
                &device,
            )?,
        )?;
    }
    order_diff(&model, tokenizer)
}

/// max |logits(sentence) − logits(shuffled)| at the last position for `model`, of the pair
/// [`order_pair`] chooses: 0 up to float rounding when the model cannot see the order of the
/// characters before the last.
pub fn order_diff(model: &Gpt, tokenizer: &CharTokenizer) -> Result<f32> {
    let device = Device::Cpu;
    let (sentence, shuffled) = order_pair(tokenizer)?;
    let last = |text: &str| -> Result<Tensor> {
        let logits = model.forward(&ids(tokenizer, text, &device)?, &mut Mode::Eval)?; // (1, T, V)
        Ok(logits.get(0)?.get(text.chars().count() - 1)?) // (V,)
    };
    let diff = (last(sentence)? - last(shuffled)?)?
        .abs()?
        .max(0)?
        .to_scalar::<f32>()?;
    Ok(diff)
}

/// Shapes of q, its heads and the attention weights in a 32-dim 4-head model.
fn shapes(tokenizer: &CharTokenizer, seed: u64) -> Result<Shapes> {
    let device = Device::Cpu;
    let cfg = ModelConfig {
        vocab_size: tokenizer.vocab_size(),
        n_layer: 1,
        n_head: 4,
        n_embd: 32,
        ..Default::default()
    };
    let (model, _) = Gpt::seeded(&cfg, seed, &device)?;
    let sentence = order_pair(tokenizer)?.0;
    let x = model.embed(&ids(tokenizer, sentence, &device)?, &mut Mode::Eval)?; // (1, T, 32)
    let (block, pos, kernels) = (&model.h[0], &model.position, model.kernels());
    let (q, k, _v) = block
        .attn
        .qkv(&block.attn_input(&x, kernels)?, pos, kernels)?; // (1, 4, T, 8)
    let weights = block.attn.weights((&q, &k), pos, kernels)?; // (1, 4, T, T)
    let (b, h, t, d) = q.dims4()?;
    Ok(Shapes {
        q: vec![b, t, h * d],
        q_heads: q.dims().to_vec(),
        scores: weights.dims().to_vec(),
    })
}

/// Counts the parameters of the first block's c_attn and c_proj at n_embd 32.
fn attention_params(n_head: usize, vocab_size: usize) -> Result<AttentionParams> {
    let cfg = ModelConfig {
        vocab_size,
        n_layer: 1,
        n_head,
        n_embd: 32,
        ..Default::default()
    };
    let (_, varmap) = Gpt::seeded(&cfg, 0, &Device::Cpu)?;
    let data = varmap
        .data()
        .lock()
        .map_err(|_| anyhow::anyhow!("parameter map poisoned"))?;
    let count = |part: &str| -> usize {
        data.iter()
            .filter(|(name, _)| name.starts_with(&format!("transformer.h.0.attn.{part}.")))
            .map(|(_, v)| v.elem_count())
            .sum()
    };
    Ok(AttentionParams {
        n_head,
        c_attn: count("c_attn"),
        c_proj: count("c_proj"),
    })
}

/// Runs both parts with the lesson's model (n_embd 128, 4 heads) and `tokenizer`'s vocabulary.
pub fn run(tokenizer: &CharTokenizer, seed: u64) -> Result<Report> {
    let base = ModelConfig {
        vocab_size: tokenizer.vocab_size(),
        ..Default::default()
    };
    let mut leaks = Vec::new();
    for layers in 1..=3 {
        for position in Position::ALL {
            leaks.push(OrderLeak {
                layers,
                position,
                diff: order_leak(&base, layers, position, seed, tokenizer)?,
            });
        }
    }
    let (sentence, shuffled) = order_pair(tokenizer)?;
    Ok(Report {
        sentence,
        shuffled,
        seed,
        vocab_size: tokenizer.vocab_size(),
        n_embd: base.n_embd,
        n_head: base.n_head,
        order_leak: leaks,
        shapes: shapes(tokenizer, seed)?,
        attention_params: [1, 2, 4, 8]
            .into_iter()
            .map(|h| attention_params(h, tokenizer.vocab_size()))
            .collect::<Result<_>>()?,
    })
}

fn shape(dims: &[usize]) -> String {
    format!(
        "({})",
        dims.iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

impl Report {
    /// The tables as text, laid out like the lesson's output.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "== 1. '{}' vs '{}': max |difference| of the last position's logits\n   \
             (untrained, seed {}, n_embd {}, {} heads, vocabulary {}; 'none' = learned table zeroed, as the lesson does)\n",
            self.sentence, self.shuffled, self.seed, self.n_embd, self.n_head, self.vocab_size
        );
        let _ = write!(s, "  {:<8}", "layers");
        for p in Position::ALL {
            let _ = write!(s, "{:>12}", p.name());
        }
        s.push('\n');
        for layers in 1..=3 {
            let _ = write!(s, "  {layers:<8}");
            for leak in self.order_leak.iter().filter(|l| l.layers == layers) {
                let _ = write!(s, "{:>12.1e}", leak.diff);
            }
            s.push('\n');
        }
        let _ = writeln!(s, "\n  At 1 layer:");
        for leak in self.order_leak.iter().filter(|l| l.layers == 1) {
            let verdict = if leak.diff > 1e-6 {
                "tells them apart"
            } else {
                "cannot tell them apart"
            };
            let _ = writeln!(
                s,
                "  - {:<11} {verdict}: {}.",
                leak.position.name(),
                leak.position.how_order_is_seen()
            );
        }
        let _ = writeln!(
            s,
            "  With 2 or more layers even 'none' tells them apart: the causal mask lets position i see i+1\n  \
             characters, so layer 1's outputs depend on order and layer 2 reads them (Haviv et al. 2022).\n"
        );
        let _ = writeln!(
            s,
            "== 2. Multi-head attention: a 32-dim vector split into 4 heads of 8"
        );
        let _ = writeln!(s, "  q                      {}", shape(&self.shapes.q));
        let _ = writeln!(
            s,
            "  split into heads       {}   (batch, heads, characters, head size)",
            shape(&self.shapes.q_heads)
        );
        let _ = writeln!(
            s,
            "  attention scores       {}   (one 5×5 table per head)\n",
            shape(&self.shapes.scores)
        );
        let _ = writeln!(s, "  parameters of one attention layer at n_embd 32:");
        let _ = writeln!(s, "  {:<8}{:>8}{:>8}", "heads", "c_attn", "c_proj");
        for p in &self.attention_params {
            let _ = writeln!(s, "  {:<8}{:>8}{:>8}", p.n_head, p.c_attn, p.c_proj);
        }
        let _ = writeln!(
            s,
            "  The head count only changes how the same matrices are sliced."
        );
        s
    }
}
