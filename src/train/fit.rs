//! Fitted biases: the next-token biases of an input that is fitted (`verse::inputs`, the lead
//! rhymes) are left out of the optimiser and held at zero while the run trains, so that the model
//! learns as without them, and are set after the last step, before its evaluation, to the values
//! that fit the trained model best on training batches. Where an earlier evaluation was the best,
//! the weights it kept (model.safetensors) are fitted then too, on the same batches. A run
//! stopped before its end (`--stop-at`) and resumed with its end moved to the step it stands at
//! takes no step, so it is not fitted: give it more steps.
//!
//! Each position takes at most one bias of such an input, on a set S of next tokens, each named
//! once. With z the position's logits without it, the loss there is
//! log(e^b Σ_S e^z + Σ_rest e^z) − b·[y ∈ S] − z_y; over the positions of one bias it is least
//! where the model's probabilities of S sum to the count of positions whose next token is in S:
//! Σ σ(b + ℓ) = hits, with ℓ the log-odds of S without the bias. The left side grows with b, so
//! bisection finds it.

use crate::data::Split;
use crate::files::atomic_write;
use crate::model::inputs::{Biased, NextTokenBias};
use crate::random::{rng, Stream};
use crate::train::checkpoint::named_params;
use crate::train::run_dir::{RunDir, MODEL_FILE};
use crate::train::safetensors::{read_safetensors, to_safetensors};
use crate::train::setup::Setup;
use crate::train::state::Progress;
use anyhow::{bail, Result};
use candle_core::{Tensor, Var};

/// Training batches the biases are fitted on: 128 of 8 windows (131,072 positions at the default's
/// block of 128: 2,650 first rhymes and 2,152 second rhymes of its corpus).
const BATCHES: usize = 128;
/// Windows per batch.
const WINDOWS: usize = 8;

/// The seconds the fit will take after the run's last step (none without fitted inputs), for
/// `--minutes` to plan for: one of its batches timed per fitted input (on a stream of its own,
/// which the fit itself draws afresh).
pub fn seconds(s: &Setup) -> Result<f64> {
    let mut total = 0.0;
    for (_, var) in fitted_vars(s)? {
        let bias = bias_of(s, &var)?;
        let mut by_bias: Vec<Vec<Position>> =
            (0..bias.weight.elem_count()).map(|_| Vec::new()).collect();
        let started = std::time::Instant::now();
        add_batch_positions(
            s,
            bias,
            &mut rng(s.cfg.train.seed, Stream::Fit),
            &mut by_bias,
        )?;
        total += started.elapsed().as_secs_f64() * BATCHES as f64;
    }
    Ok(total)
}

/// One fitted input's parameter and its biases after the fit.
pub struct Fitted {
    /// The parameter, `transformer.<tensor>.weight`.
    pub tensor: String,
    /// Its biases as fitted (or as they were, for a bias with nothing to fit).
    pub biases: Vec<f32>,
    /// The positions each bias was fitted on.
    pub positions: Vec<usize>,
}

/// What one position tells the fit of its bias: the log-odds ℓ of its set without the bias, and
/// whether the next token is in it.
struct Position {
    log_odds: f64,
    hit: bool,
}

/// After the run's last step (before its evaluation), [`fit`], and the run marked fitted;
/// elsewhere nothing.
pub(crate) fn fit_after_last_step(s: &Setup, p: &mut Progress) -> Result<Vec<Fitted>> {
    if p.step != s.cfg.train.max_iters {
        return Ok(Vec::new());
    }
    let fitted = fit(s)?;
    p.fitted = true;
    Ok(fitted)
}

/// Refuses to end a run at the step it stands at where its fitted biases were never fitted (a run
/// stopped before its end, resumed with its end moved back to that step): no step is left for the
/// fit to follow.
pub(crate) fn check_fitted_at_end(s: &Setup, p: &Progress) -> Result<()> {
    let vars = fitted_vars(s)?;
    if p.step == 0 || p.step != s.cfg.train.max_iters || vars.is_empty() || p.fitted {
        return Ok(());
    }
    bail!(
        "the run stands at step {} with its fitted biases ({}) not yet fitted: they are fitted after the last step a run trains, so give --max-iters {} or more",
        p.step,
        vars.iter().map(|(name, _)| name.as_str()).collect::<Vec<_>>().join(", "),
        p.step + 1
    )
}

/// Sets the biases of every fitted input of the run's model to zero, and the run unfitted: before
/// a run trains (a run resumed past its end, or one fine-tuned from a fitted parent, would train
/// with them).
pub(crate) fn reset(s: &Setup, p: &mut Progress) -> Result<()> {
    for (_, var) in fitted_vars(s)? {
        var.set(&var.zeros_like()?)?;
    }
    p.fitted = false;
    Ok(())
}

/// Whether any fitted bias of the run's model is not zero: fitted, for a checkpoint of an earlier
/// version that has no flag ([`Progress::fitted`]); training holds them at zero.
pub fn any_fitted(s: &Setup) -> Result<bool> {
    for (_, var) in fitted_vars(s)? {
        if var.as_tensor().abs()?.max_all()?.to_scalar::<f32>()? != 0.0 {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Where the run keeps weights of an earlier evaluation than its last (its best, saved unfitted
/// in model.safetensors), fits their biases too and writes them there; the model as it stands
/// (the final weights, fitted) is left as it was. Returns the step of the kept weights and their
/// fit; nothing for a run without a fitted input.
pub fn fit_kept_weights(run: &RunDir, s: &Setup) -> Result<Option<(String, Vec<Fitted>)>> {
    if fitted_vars(s)?.is_empty() {
        return Ok(None);
    }
    let path = run.file(MODEL_FILE);
    let (kept, metadata) = read_safetensors(&path)?;
    let vars: Vec<(String, Var)> = {
        let data = s.varmap.data().lock().expect("parameter map");
        data.iter().map(|(n, v)| (n.clone(), v.clone())).collect()
    };
    let stands: Vec<Tensor> = vars
        .iter()
        .map(|(_, var)| var.as_tensor().copy())
        .collect::<candle_core::Result<_>>()?;
    let refit = || -> Result<Vec<Fitted>> {
        for (name, var) in &vars {
            let Some(weights) = kept.get(name) else {
                bail!(
                    "{} has no {name}: the run's kept weights are not its model's",
                    path.display()
                );
            };
            var.set(&weights.to_device(var.device())?.to_dtype(var.dtype())?)?;
        }
        let fitted = fit(s)?;
        let weights = named_params(&s.varmap, s.cfg.model.tie_weights);
        atomic_write(&path, &to_safetensors(&weights, metadata.clone())?)?;
        Ok(fitted)
    };
    let fitted = refit();
    for ((_, var), weights) in vars.iter().zip(&stands) {
        var.set(weights)?;
    }
    let step = metadata.get("step").cloned().unwrap_or_else(|| "?".into());
    Ok(Some((step, fitted?)))
}

/// The parameter of every fitted input of the run's model, by name.
fn fitted_vars(s: &Setup) -> Result<Vec<(String, Var)>> {
    let vars = s.varmap.data().lock().expect("parameter map");
    let names = crate::verse::inputs::fitted_tensors(&s.cfg.model)?;
    Ok(names
        .into_iter()
        .map(|name| {
            let var = vars[&name].clone();
            (name, var)
        })
        .collect())
}

/// Fits the biases of every fitted input of the run's model to the model as it is, and sets them.
pub fn fit(s: &Setup) -> Result<Vec<Fitted>> {
    let mut fitted = Vec::new();
    for (name, var) in fitted_vars(s)? {
        let bias = bias_of(s, &var)?;
        let old = bias.weight.to_vec1::<f32>()?;
        let positions = positions(s, bias)?;
        let biases: Vec<f32> = positions
            .iter()
            .zip(&old)
            .map(|(positions, &old)| solve(positions).map_or(old, |b| b as f32))
            .collect();
        var.set(&Tensor::new(biases.as_slice(), var.device())?)?;
        let positions = positions.iter().map(Vec::len).collect();
        fitted.push(Fitted {
            tensor: name,
            biases,
            positions,
        });
    }
    Ok(fitted)
}

/// The next-token bias of the model that holds `var`.
fn bias_of<'s>(s: &'s Setup, var: &Var) -> Result<&'s NextTokenBias> {
    let held = |b: &&NextTokenBias| b.weight.id() == var.as_tensor().id();
    match s.model.inputs.bias.iter().find(held) {
        Some(bias) => Ok(bias),
        None => bail!("a fitted parameter that no next-token bias of the model holds"),
    }
}

/// Each bias's positions in the fit's training batches.
fn positions(s: &Setup, bias: &NextTokenBias) -> Result<Vec<Vec<Position>>> {
    let mut by_bias: Vec<Vec<Position>> =
        (0..bias.weight.elem_count()).map(|_| Vec::new()).collect();
    let mut batches = rng(s.cfg.train.seed, Stream::Fit);
    for _ in 0..BATCHES {
        add_batch_positions(s, bias, &mut batches, &mut by_bias)?;
    }
    Ok(by_bias)
}

/// The positions of each bias in the next training batch drawn from `batches`, added to
/// `by_bias`.
fn add_batch_positions(
    s: &Setup,
    bias: &NextTokenBias,
    batches: &mut rand_chacha::ChaCha8Rng,
    by_bias: &mut [Vec<Position>],
) -> Result<()> {
    let t = s.cfg.model.block_size;
    let (x, y) = s
        .splits
        .batch(Split::Train, WINDOWS, t, batches, &s.device)?;
    let ids = x.flatten_all()?.to_vec1::<u32>()?; // (B·T)
    let targets = y.flatten_all()?.to_vec1::<u32>()?; // (B·T)
    let entries = bias.entries_of(&ids, t); // (B·T)
    let rows: Vec<u32> = (0..ids.len() as u32)
        .filter(|&row| !entries[row as usize].is_empty())
        .collect(); // (R)
    if rows.is_empty() {
        return Ok(());
    }
    let logits = s.model.unbiased_logits_at(&x, &rows)?; // (R, V)
    let v = logits.dim(1)?;
    let logits = logits.flatten_all()?.to_vec1::<f32>()?; // (R·V)
    let others = other_biases(s, bias, &ids, t)?;
    for (z, &row) in logits.chunks(v).zip(&rows) {
        let mut z = z.to_vec(); // (V): the logits with every other input's biases
        for (entries, weight) in &others {
            NextTokenBias::add_to_row(&mut z, &entries[row as usize], weight);
        }
        let (k, in_set) = set_of(&entries[row as usize], v)?;
        let hit = in_set[targets[row as usize] as usize];
        let log_odds = log_odds(&z, &in_set);
        by_bias[k].push(Position { log_odds, hit });
    }
    Ok(())
}

/// Every next-token bias of the model but `bias`: its entries for `ids` read as sequences of `t`
/// tokens, and its biases.
fn other_biases(
    s: &Setup,
    bias: &NextTokenBias,
    ids: &[u32],
    t: usize,
) -> Result<Vec<(Vec<Biased>, Vec<f32>)>> {
    let others = s.model.inputs.bias.iter();
    others
        .filter(|other| other.weight.id() != bias.weight.id())
        .map(|other| Ok((other.entries_of(ids, t), other.weight.to_vec1::<f32>()?)))
        .collect()
}

/// The bias one position takes and its set of next tokens (V), or an error where it takes two
/// biases or names a token twice (each position must take one, each token once).
fn set_of(entries: &Biased, v: usize) -> Result<(usize, Vec<bool>)> {
    let k = entries[0].1;
    let mut in_set = vec![false; v];
    for &(token, bias) in entries {
        if bias != k {
            bail!("a position takes two biases of a fitted input: each must take one");
        }
        if std::mem::replace(&mut in_set[token as usize], true) {
            bail!("a position names token {token} twice in a fitted input: each once");
        }
    }
    Ok((k, in_set))
}

/// log(Σ_S e^z / Σ_rest e^z) of one row of logits z (V), summed in token order.
fn log_odds(z: &[f32], in_set: &[bool]) -> f64 {
    let max = z.iter().fold(f32::NEG_INFINITY, |m, &z| m.max(z)) as f64;
    let (mut set, mut rest) = (0f64, 0f64);
    for (&z, &s) in z.iter().zip(in_set) {
        let e = (z as f64 - max).exp();
        match s {
            true => set += e,
            false => rest += e,
        }
    }
    set.ln() - rest.ln()
}

/// The bias b with Σ σ(b + ℓ) = hits over `positions`, or `None` without positions. Where every
/// or no next token is in its set (no finite b fits: few positions), half a position is taken
/// off the count or added to it.
fn solve(positions: &[Position]) -> Option<f64> {
    if positions.is_empty() {
        return None;
    }
    let count = positions.iter().filter(|p| p.hit).count() as f64;
    let hits = count.clamp(0.5, positions.len() as f64 - 0.5);
    let expected = |b: f64| -> f64 {
        let sigmoid = |x: f64| 1.0 / (1.0 + (-x).exp());
        positions.iter().map(|p| sigmoid(b + p.log_odds)).sum()
    };
    // A bracket around the root, widened until it holds it (none where a position's odds are
    // infinite past what the hits allow).
    let (mut low, mut high) = (-1.0f64, 1.0f64);
    for _ in 0..64 {
        match (expected(low) > hits, expected(high) < hits) {
            (true, _) => low *= 2.0,
            (_, true) => high *= 2.0,
            _ => break,
        }
    }
    if !(expected(low) <= hits && expected(high) >= hits) {
        return None;
    }
    for _ in 0..100 {
        let mid = (low + high) / 2.0;
        match expected(mid) < hits {
            true => low = mid,
            false => high = mid,
        }
    }
    Some((low + high) / 2.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fitted_bias_makes_the_sets_probability_what_the_positions_show() {
        // Four positions whose set has even odds without the bias, one hit of four: the bias that
        // makes each position's probability 1/4 is ln(1/3).
        let even = |hit| Position { log_odds: 0.0, hit };
        let positions = [even(true), even(false), even(false), even(false)];
        let b = solve(&positions).expect("a bias fits");
        assert!((b - (1.0f64 / 3.0).ln()).abs() < 1e-9, "{b}");
        // Its loss is the least: a step either way costs.
        let loss = |b: f64| -> f64 {
            positions
                .iter()
                .map(|p| {
                    let q = 1.0 / (1.0 + (-(b + p.log_odds)).exp());
                    -(if p.hit { q } else { 1.0 - q }).ln()
                })
                .sum()
        };
        assert!(loss(b) < loss(b + 0.01) && loss(b) < loss(b - 0.01));
        // Nothing to fit without positions; where every or no next token is in the set, half a
        // position less or more: σ(b) = 3/4 for two hits of even odds, 1/4 for one miss.
        assert!(solve(&[]).is_none());
        let b = solve(&[even(true), even(true)]).expect("a bias fits");
        assert!((b - 3f64.ln()).abs() < 1e-9, "{b}");
        let b = solve(&[even(false), even(false)]).expect("a bias fits");
        assert!((b + 3f64.ln()).abs() < 1e-9, "{b}");
        // Positions of other odds: the expected count at the bias is the hits, far out too.
        let at = |log_odds, hit| Position { log_odds, hit };
        for positions in [
            vec![at(-3.0, true), at(1.0, false), at(0.5, true)],
            vec![at(-80.0, true), at(-90.0, false)],
        ] {
            let b = solve(&positions).expect("a bias fits");
            let expected: f64 = positions
                .iter()
                .map(|p| 1.0 / (1.0 + (-(b + p.log_odds)).exp()))
                .sum();
            let hits = positions.iter().filter(|p| p.hit).count() as f64;
            assert!((expected - hits).abs() < 1e-9, "{expected} at {b}");
        }
    }

    #[test]
    fn the_log_odds_of_a_set_are_its_probability_against_the_rest() {
        let z = [0.0f32, (3.0f32).ln(), 0.0, 0.0]; // probabilities 1/6, 3/6, 1/6, 1/6
        let odds = log_odds(&z, &[false, true, true, false]); // 4/6 against 2/6
        assert!((odds - 2f64.ln()).abs() < 1e-6, "{odds}");
    }
}
