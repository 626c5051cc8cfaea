//! An ablation's results as a Markdown table, a CSV file and an SVG of the validation curves.

use crate::experiments::ablation::{Spec, VariantResult};
use anyhow::Result;
use plotters::prelude::*;
use std::fmt::Write;

fn loss(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.3}")
    } else {
        "—".into()
    }
}

/// The results table (and the extra tables the spec asks for) in Markdown.
pub fn markdown(spec: &Spec, results: &[VariantResult]) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "| variant | parameters | steps | train loss | val loss | best val | tokens/s | train time |");
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|");
    for r in results {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {:.0} | {:.0} s |",
            r.name,
            r.parameters,
            r.steps,
            loss(r.train_loss),
            loss(r.val_loss),
            loss(r.best_val_loss),
            r.tokens_per_s,
            r.train_s
        );
    }
    if !spec.contexts.is_empty() {
        let _ = writeln!(md, "\nValidation loss by context length:\n");
        let head: Vec<String> = spec
            .contexts
            .iter()
            .map(|c| format!("context {c}"))
            .collect();
        let _ = writeln!(md, "| variant | {} |", head.join(" | "));
        let _ = writeln!(md, "|---|{}", "---|".repeat(spec.contexts.len()));
        for r in results {
            let cells: Vec<String> = r
                .context_losses
                .iter()
                .map(|l| l.map_or("n/a (beyond the learned table)".into(), loss))
                .collect();
            let _ = writeln!(md, "| {} | {} |", r.name, cells.join(" | "));
        }
    }
    if spec.order_probe {
        let _ = writeln!(md, "\nAfter training, max |Δlogits| between 白日依山尽 and 山依日白尽 at the last position:\n");
        let _ = writeln!(md, "| variant | max abs difference |\n|---|---|");
        for r in results {
            let _ = writeln!(
                md,
                "| {} | {:.2e} |",
                r.name,
                r.order_diff.unwrap_or(f32::NAN)
            );
        }
    }
    if spec.position_probe {
        let layers = results.iter().map(|r| r.probe_mae.len()).max().unwrap_or(0);
        let _ = writeln!(md, "\nPosition probe: mean absolute error (positions) of a linear map from each layer's hidden states to the absolute position:\n");
        let head: Vec<String> = (0..layers)
            .map(|l| {
                if l == 0 {
                    "embedding".to_string()
                } else {
                    format!("after block {l}")
                }
            })
            .collect();
        let _ = writeln!(md, "| variant | {} | guessing the mean |", head.join(" | "));
        let _ = writeln!(md, "|---|{}---|", "---|".repeat(layers));
        for r in results {
            let cells: Vec<String> = (0..layers)
                .map(|l| {
                    r.probe_mae
                        .get(l)
                        .map_or(String::new(), |m| format!("{m:.2}"))
                })
                .collect();
            let _ = writeln!(
                md,
                "| {} | {} | {:.2} |",
                r.name,
                cells.join(" | "),
                r.probe_baseline.unwrap_or(f64::NAN)
            );
        }
    }
    md
}

/// One CSV row per variant.
pub fn csv(spec: &Spec, results: &[VariantResult]) -> String {
    let mut out = String::from(
        "variant,parameters,steps,train_loss,val_loss,best_val_loss,tokens_per_s,train_s",
    );
    for c in &spec.contexts {
        let _ = write!(out, ",val_loss_ctx{c}");
    }
    if spec.order_probe {
        out.push_str(",order_diff");
    }
    let layers = results.iter().map(|r| r.probe_mae.len()).max().unwrap_or(0);
    for l in 0..layers {
        let _ = write!(out, ",probe_mae_layer{l}");
    }
    out.push('\n');
    for r in results {
        let _ = write!(
            out,
            "{},{},{},{},{},{},{:.1},{:.1}",
            r.name.replace(',', ";"),
            r.parameters,
            r.steps,
            r.train_loss,
            r.val_loss,
            r.best_val_loss,
            r.tokens_per_s,
            r.train_s
        );
        for l in &r.context_losses {
            let _ = write!(out, ",{}", l.map_or(String::new(), |v| v.to_string()));
        }
        if let Some(d) = r.order_diff {
            let _ = write!(out, ",{d}");
        }
        for m in &r.probe_mae {
            let _ = write!(out, ",{m}");
        }
        out.push('\n');
    }
    out
}

/// The validation-loss curves of every variant in one SVG.
pub fn curves_svg(title: &str, results: &[VariantResult]) -> Result<String> {
    let points = results
        .iter()
        .flat_map(|r| r.curve.iter())
        .filter(|(_, l)| l.is_finite());
    let (max_step, lo, hi) = points
        .fold((1usize, f64::MAX, f64::MIN), |(s, lo, hi), &(step, l)| {
            (s.max(step), lo.min(l), hi.max(l))
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
            .build_cartesian_2d(0f64..max_step as f64, (lo - pad)..(hi + pad))?;
        chart
            .configure_mesh()
            .x_desc("step")
            .y_desc("validation loss (nats)")
            .draw()?;
        for (i, r) in results.iter().enumerate() {
            let colour = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(
                    r.curve.iter().map(|&(s, l)| (s as f64, l)),
                    colour.stroke_width(2),
                ))?
                .label(r.name.clone())
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
