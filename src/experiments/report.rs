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

/// Appends a Markdown table: the header row, the separator, then one line per row.
fn table(md: &mut String, header: &[String], rows: impl IntoIterator<Item = Vec<String>>) {
    let _ = writeln!(md, "| {} |", header.join(" | "));
    let _ = writeln!(md, "|{}", "---|".repeat(header.len()));
    for row in rows {
        let _ = writeln!(md, "| {} |", row.join(" | "));
    }
}

/// Column titles from string literals.
fn titles(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// The results table (and the extra tables the spec asks for) in Markdown.
pub fn markdown(spec: &Spec, results: &[VariantResult]) -> String {
    let mut md = String::new();
    let header = titles(&[
        "variant",
        "parameters",
        "steps",
        "train loss",
        "val loss",
        "best val",
        "val, whole split",
        "tokens/s",
        "train time",
    ]);
    table(
        &mut md,
        &header,
        results.iter().map(|r| {
            vec![
                r.label.clone(),
                r.parameters.to_string(),
                r.steps.to_string(),
                loss(r.train_loss),
                loss(r.val_loss),
                loss(r.best_val_loss),
                loss(r.val_loss_whole),
                format!("{:.0}", r.tokens_per_s),
                format!("{:.0} s", r.train_s),
            ]
        }),
    );
    if spec.seeds.len() > 1 {
        seed_summary(&mut md, spec, results);
    }
    if !spec.contexts.is_empty() {
        let _ = writeln!(md, "\nValidation loss by context length:\n");
        let mut header = titles(&["variant"]);
        header.extend(spec.contexts.iter().map(|c| format!("context {c}")));
        table(
            &mut md,
            &header,
            results.iter().map(|r| {
                let mut row = vec![r.label.clone()];
                row.extend(
                    r.context_losses
                        .iter()
                        .map(|l| l.map_or("n/a (beyond the learned table)".into(), loss)),
                );
                row
            }),
        );
    }
    if spec.order_probe {
        let _ = writeln!(md, "\nAfter training, max |Δlogits| between 白日依山尽 and 山依日白尽 at the last position:\n");
        table(
            &mut md,
            &titles(&["variant", "max abs difference"]),
            results.iter().map(|r| {
                vec![
                    r.label.clone(),
                    format!("{:.2e}", r.order_diff.unwrap_or(f32::NAN)),
                ]
            }),
        );
    }
    if spec.position_probe {
        let layers = results.iter().map(|r| r.probe_mae.len()).max().unwrap_or(0);
        let _ = writeln!(md, "\nPosition probe: mean absolute error (positions) of a linear map from each layer's hidden states to the absolute position:\n");
        let mut header = titles(&["variant"]);
        header.extend((0..layers).map(|l| match l {
            0 => "embedding".to_string(),
            l => format!("after block {l}"),
        }));
        header.push("guessing the mean".into());
        table(
            &mut md,
            &header,
            results.iter().map(|r| {
                let mut row = vec![r.label.clone()];
                row.extend((0..layers).map(|l| {
                    r.probe_mae
                        .get(l)
                        .map_or(String::new(), |m| format!("{m:.2}"))
                }));
                row.push(format!("{:.2}", r.probe_baseline.unwrap_or(f64::NAN)));
                row
            }),
        );
    }
    md
}

/// Appends each variant's mean and range over the spec's seeds.
fn seed_summary(md: &mut String, spec: &Spec, results: &[VariantResult]) {
    let _ = writeln!(
        md,
        "\nOver the seeds {:?}, each variant's validation loss over the whole split:\n",
        spec.seeds
    );
    let header = titles(&[
        "variant",
        "mean val loss",
        "lowest",
        "highest",
        "mean tokens/s",
    ]);
    table(
        md,
        &header,
        spec.variant.iter().map(|v| {
            let runs: Vec<&VariantResult> = results.iter().filter(|r| r.name == v.name).collect();
            let mean = |f: fn(&VariantResult) -> f64| {
                runs.iter().map(|r| f(r)).sum::<f64>() / runs.len() as f64
            };
            let losses = runs.iter().map(|r| r.val_loss_whole);
            vec![
                v.name.clone(),
                loss(mean(|r| r.val_loss_whole)),
                loss(losses.clone().fold(f64::INFINITY, f64::min)),
                loss(losses.fold(f64::NEG_INFINITY, f64::max)),
                format!("{:.0}", mean(|r| r.tokens_per_s)),
            ]
        }),
    );
}

/// One CSV row per run (a variant, or a variant and a seed).
pub fn csv(spec: &Spec, results: &[VariantResult]) -> String {
    let mut out = String::from(
        "variant,seed,parameters,steps,train_loss,val_loss,best_val_loss,val_loss_whole,tokens_per_s,train_s",
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
            "{},{},{},{},{},{},{},{},{:.1},{:.1}",
            r.name.replace(',', ";"),
            r.seed,
            r.parameters,
            r.steps,
            r.train_loss,
            r.val_loss,
            r.best_val_loss,
            r.val_loss_whole,
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
            name: r.label.clone(),
            points: r.curve.iter().map(|&(s, l)| (s as f64, l)).collect(),
        })
        .collect();
    crate::train::metrics::curves_svg(title, "validation loss (nats)", &curves)
}
