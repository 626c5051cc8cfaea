//! Per-evaluation metrics: the CSV file, the SVG plot of the loss curves, and the poem drawn at
//! each evaluation.

use anyhow::{Context, Result};
use plotters::prelude::*;
use std::path::Path;

/// One evaluation.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct MetricRow {
    /// Steps done.
    pub step: usize,
    /// Mean training loss since the previous evaluation.
    pub train_loss: f64,
    /// Mean validation loss over eval_iters batches.
    pub val_loss: f64,
    /// Learning rate of the last step.
    pub lr: f64,
    /// Training tokens per second since the previous evaluation.
    pub tokens_per_s: f64,
    /// Seconds of training so far (across resumes).
    pub elapsed_s: f64,
}

const HEADER: &str = "step,train_loss,val_loss,lr,tokens_per_s,elapsed_s";

/// The CSV text of `rows`.
pub fn to_csv(rows: &[MetricRow]) -> String {
    let mut s = format!("{HEADER}\n");
    for r in rows {
        s += &format!(
            "{},{:.6},{:.6},{:.6e},{:.1},{:.3}\n",
            r.step, r.train_loss, r.val_loss, r.lr, r.tokens_per_s, r.elapsed_s
        );
    }
    s
}

/// Reads a run's metrics.csv; the error names the file.
pub fn read_metrics(path: &Path) -> Result<Vec<MetricRow>> {
    let text = crate::files::read_text_limited(path, crate::files::SMALL_FILE_LIMIT)
        .with_context(|| format!("cannot read {}", path.display()))?;
    from_csv(&text).with_context(|| {
        format!(
            "{} is damaged: delete it (the run's losses are then listed from here on)",
            path.display()
        )
    })
}

/// Parses a metrics CSV written by [`to_csv`].
pub fn from_csv(text: &str) -> Result<Vec<MetricRow>> {
    text.lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let f: Vec<f64> = line
                .split(',')
                .map(|v| v.parse::<f64>())
                .collect::<std::result::Result<_, _>>()
                .with_context(|| format!("bad metrics row: {line}"))?;
            anyhow::ensure!(f.len() == 6, "bad metrics row: {line}");
            Ok(MetricRow {
                step: f[0] as usize,
                train_loss: f[1],
                val_loss: f[2],
                lr: f[3],
                tokens_per_s: f[4],
                elapsed_s: f[5],
            })
        })
        .collect()
}

/// A poem (or a stretch of running text) drawn at an evaluation.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EvalSample {
    /// Steps done.
    pub step: usize,
    pub text: String,
}

/// The JSON-lines text of `samples`.
pub fn samples_to_jsonl(samples: &[EvalSample]) -> Result<String> {
    let mut text = String::new();
    for sample in samples {
        text += &serde_json::to_string(sample)?;
        text.push('\n');
    }
    Ok(text)
}

/// Reads a run's samples.jsonl; the error names the file.
pub fn read_samples(path: &Path) -> Result<Vec<EvalSample>> {
    let text = crate::files::read_text_limited(path, crate::files::SMALL_FILE_LIMIT)
        .with_context(|| format!("cannot read {}", path.display()))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| serde_json::from_str(line).with_context(|| format!("bad sample line: {line}")))
        .collect::<Result<_>>()
        .with_context(|| {
            format!(
                "{} is damaged: delete it (the run's samples are then listed from here on)",
                path.display()
            )
        })
}

/// One named curve of (step, loss) points.
pub struct Curve {
    /// Its legend entry.
    pub name: String,
    /// The points, in step order.
    pub points: Vec<(f64, f64)>,
}

/// Loss curves against steps as an SVG document, each in its own colour, with a legend.
pub fn curves_svg(title: &str, y_desc: &str, curves: &[Curve]) -> Result<String> {
    let finite = curves
        .iter()
        .flat_map(|c| c.points.iter())
        .filter(|(_, y)| y.is_finite());
    let (max_x, lo, hi) = finite.fold((1f64, f64::MAX, f64::MIN), |(x, lo, hi), &(px, py)| {
        (x.max(px), lo.min(py), hi.max(py))
    });
    let (lo, hi) = if lo <= hi { (lo, hi) } else { (0.0, 1.0) };
    let pad = ((hi - lo) * 0.05).max(0.01);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (800, 500)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 22))
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(55)
            .build_cartesian_2d(0f64..max_x, (lo - pad)..(hi + pad))?;
        chart
            .configure_mesh()
            .x_desc("step")
            .y_desc(y_desc)
            .draw()?;
        for (i, curve) in curves.iter().enumerate() {
            let colour = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(
                    curve.points.iter().copied(),
                    colour.stroke_width(2),
                ))?
                .label(curve.name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
    }
    Ok(svg)
}

/// Draws the train and validation loss curves against steps into an SVG file.
pub fn plot_losses(rows: &[MetricRow], title: &str, path: &Path) -> Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let curve = |name: &str, pick: fn(&MetricRow) -> f64| Curve {
        name: name.to_string(),
        points: rows.iter().map(|r| (r.step as f64, pick(r))).collect(),
    };
    let curves = [
        curve("train", |r| r.train_loss),
        curve("val", |r| r.val_loss),
    ];
    let svg = curves_svg(title, "loss (nats)", &curves)?;
    crate::files::atomic_write(path, svg.as_bytes())
}
