//! Pictures of a model: each head's attention weights over a poem, and the sinusoidal table.

use crate::data::CharTokenizer;
use crate::experiments::heatmap::{heatmaps_svg, Heatmap, Scale, MARK};
use crate::files::atomic_write;
use crate::model::position::sinusoidal_table;
use crate::model::{Gpt, Mode};
use anyhow::{Context, Result};
use candle_core::{Device, Tensor};
use std::path::{Path, PathBuf};

/// The longest text whose attention is drawn: T × T weights per head, and as many cells.
pub const MAX_CHARS: usize = 256;

/// Each layer's attention weights over `text` (at most [`MAX_CHARS`] characters): per layer
/// (n_head, T, T), row-major.
pub fn attention_weights(
    model: &Gpt,
    tokenizer: &CharTokenizer,
    text: &str,
) -> Result<Vec<Vec<f32>>> {
    let length = text.chars().count();
    if length == 0 {
        anyhow::bail!("the poem to draw is empty: give a few characters, e.g. --poem 白日依山尽");
    }
    if length > MAX_CHARS {
        anyhow::bail!(
            "the poem to draw has {length} characters; attention is drawn over at most {MAX_CHARS}: give a shorter one"
        );
    }
    if let Some(rows) = model.position.max_positions().filter(|&rows| length > rows) {
        anyhow::bail!(
            "the poem to draw has {length} characters but the model's learned positions stop at {rows}: give a shorter one"
        );
    }
    let idx = Tensor::new(tokenizer.encode(text)?, &Device::Cpu)?.unsqueeze(0)?; // (1, T)
    let mut x = model.embed(&idx, &mut Mode::Eval)?; // (1, T, C)
    let (mut layers, pos, kernels) = (Vec::new(), &model.position, model.kernels());
    for block in &model.h {
        let (q, k, _v) = block
            .attn
            .qkv(&block.attn_input(&x, kernels)?, pos, kernels)?; // (1, H, T, D)
        let w = block.attn.weights((&q, &k), pos, kernels)?; // (1, H, T, T)
        layers.push(w.flatten_all()?.to_vec1()?);
        x = block.forward(&x, pos, kernels, &mut Mode::Eval)?; // (1, T, C)
    }
    Ok(layers)
}

/// The files a drawing for a model of `n_layer` layers writes into its directory (`None`: the
/// sinusoidal table alone, for no model).
pub fn plot_files(n_layer: Option<usize>) -> Vec<String> {
    let layers = (1..=n_layer.unwrap_or(0)).map(|i| format!("attention-layer{i}.svg"));
    layers.chain(["sinusoidal.svg".to_string()]).collect()
}

/// Refuses `dir` for drawings when one of `names` there is not a heatmap this program drew (a
/// file of the user's own under the same name): nothing is written over.
pub fn check_plot_dir(dir: &Path, names: &[String]) -> Result<()> {
    for name in names {
        let path = dir.join(name);
        if path.symlink_metadata().is_err() {
            continue;
        }
        let ours = crate::files::read_text_limited(&path, crate::files::SMALL_FILE_LIMIT)
            .is_ok_and(|text| text.contains(MARK));
        if !ours {
            anyhow::bail!(
                "{} exists and is not a drawing of this program: choose a new or empty --plot directory (nothing is written over)",
                path.display()
            );
        }
    }
    Ok(())
}

/// Writes `attention-layer<i>.svg` into `dir`, one heatmap per head (rows: the character that
/// looks; columns: the characters it looks at). Returns the files written. A text the model
/// cannot read is refused before `dir` is made.
pub fn write_attention_maps(
    model: &Gpt,
    tokenizer: &CharTokenizer,
    text: &str,
    dir: &Path,
) -> Result<Vec<PathBuf>> {
    crate::data::poem::one_line(text, "--poem").map_err(anyhow::Error::msg)?;
    let layers = attention_weights(model, tokenizer, text)
        .context("cannot draw the attention over --poem")?;
    crate::files::create_dir(dir, "--plot")?;
    let chars: Vec<String> = text.chars().map(|c| c.to_string()).collect();
    let t = chars.len();
    let n_head = model.config().n_head;
    let mut files = Vec::new();
    for (layer, weights) in layers.iter().enumerate() {
        let maps: Vec<Heatmap> = (0..n_head)
            .map(|h| Heatmap {
                title: format!("head {}", h + 1),
                values: &weights[h * t * t..(h + 1) * t * t],
                row_labels: chars.clone(),
                col_labels: chars.clone(),
                scale: Scale::Sequential { max: 1.0 },
            })
            .collect();
        let title = format!(
            "layer {} of {}, {} positions: attention weights (row attends to column)",
            layer + 1,
            model.h.len(),
            model.config().position
        );
        let path = dir.join(format!("attention-layer{}.svg", layer + 1));
        atomic_write(&path, heatmaps_svg(&title, &maps, t, t).as_bytes())?;
        files.push(path);
    }
    Ok(files)
}

/// Writes the sinusoidal position table, `positions` rows × `dims` columns, as `path`.
pub fn write_sinusoidal_map(positions: usize, dims: usize, path: &Path) -> Result<()> {
    let table = sinusoidal_table(0, positions, dims, 1.0);
    let label = |n: usize, step: usize| -> Vec<String> {
        (0..n)
            .map(|i| {
                if i % step == 0 {
                    i.to_string()
                } else {
                    String::new()
                }
            })
            .collect()
    };
    let map = Heatmap {
        title: format!(
            "rows: positions 0–{}, columns: dimensions 0–{}",
            positions - 1,
            dims - 1
        ),
        values: &table,
        row_labels: label(positions, 8),
        col_labels: label(dims, 16),
        scale: Scale::Diverging,
    };
    let title =
        "sinusoidal position encoding: sin (even dims) and cos (odd dims) of p / 10000^(2i/d)";
    atomic_write(
        path,
        heatmaps_svg(title, &[map], positions, dims).as_bytes(),
    )
}
