//! An ablation's results as a Markdown table, a CSV file and an SVG of the validation curves.

use crate::experiments::ablation::{Spec, VariantResult};
use crate::train::metrics::Curve;
use anyhow::Result;
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
    let curves: Vec<Curve> = results
        .iter()
        .map(|r| Curve {
            name: r.name.clone(),
            points: r.curve.iter().map(|&(s, l)| (s as f64, l)).collect(),
        })
        .collect();
    crate::train::metrics::curves_svg(title, "validation loss (nats)", &curves)
}
