//! The optimiser: AdamW with decoupled weight decay on matrices only, or Muon for the blocks' weight
//! matrices with AdamW for the rest (embeddings, biases, norms); global gradient-norm clipping, and
//! state that can be saved and restored for exact resumption.

use super::muon::{self, MuonParams};
use crate::engine::ParamGrads;
use candle_core::{backprop::GradStore, CpuStorage, InplaceOp1, Layout, Result, Tensor, Var};
use rayon::prelude::*;
use std::cell::Cell;
use std::collections::HashMap;

/// Parameters per rayon task in the update.
const UPDATE_CHUNK: usize = 1 << 14;

/// AdamW hyper-parameters.
#[derive(Debug, Clone, Copy)]
pub struct AdamWParams {
    /// β1.
    pub beta1: f64,
    /// β2.
    pub beta2: f64,
    /// ε added to √v.
    pub eps: f64,
    /// Decay applied to tensors of 2 or more dimensions (embeddings and Linear weights).
    pub weight_decay: f64,
}

impl AdamWParams {
    /// nanoGPT's: β (0.9, 0.95), ε 1e-8, weight decay 0.1 (the benchmark's and the tests' optimiser).
    pub const NANOGPT: AdamWParams = AdamWParams {
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-8,
        weight_decay: 0.1,
    };
}

/// How a parameter is updated.
#[derive(Debug, Clone, Copy)]
enum Rule {
    /// AdamW, with weight decay or without.
    AdamW { decay: bool },
    /// Muon: a weight matrix of the blocks, of `rows` × `cols`.
    Muon {
        rows: usize,
        cols: usize,
        params: MuonParams,
    },
}

/// One parameter with its moments, kept as plain vectors so that an update is one fused pass.
/// Under Muon `m` is the momentum buffer and `v` is empty.
struct Slot {
    name: String,
    var: Var,
    m: Vec<f32>,
    v: Vec<f32>,
    rule: Rule,
}

/// The learning rates of one step: AdamW's, and Muon's for the matrices it updates.
#[derive(Debug, Clone, Copy)]
pub struct Rates {
    pub adamw: f64,
    pub muon: f64,
}

/// The optimiser over named variables, in name order (so that its state is stable across runs).
pub struct Optimizer {
    slots: Vec<Slot>,
    params: AdamWParams,
    /// Steps taken so far.
    pub step: usize,
}

/// Whether Muon updates the parameter `name` when it is a matrix: those inside the blocks
/// (`transformer.h.*`), as modded-nanogpt gives it the hidden layers; embeddings and the output
/// layer stay with AdamW.
pub fn muon_takes(name: &str) -> bool {
    name.starts_with("transformer.h.")
}

/// The gradient of each slot as a flat vector (zeros where a parameter got none).
pub struct Gradients(Vec<Vec<f32>>);

impl Gradients {
    /// Σ weight × gradients over `parts`, summed in the parts' order (none: no gradients): each
    /// chunk of each parameter on one thread, over every part in turn; a lone part of weight 1
    /// as it is. Also returns the parts after the first, whose buffers the caller may use again.
    pub fn weighted_sum(mut parts: Vec<(f64, Gradients)>) -> (Gradients, Vec<Gradients>) {
        if parts.is_empty() {
            return (Gradients(Vec::new()), Vec::new());
        }
        let (w0, Gradients(mut sum)) = parts.remove(0);
        if parts.is_empty() && w0 == 1.0 {
            return (Gradients(sum), Vec::new()); // × 1 would change no bit
        }
        for (p, sum) in sum.iter_mut().enumerate() {
            sum.par_chunks_mut(UPDATE_CHUNK)
                .enumerate()
                .for_each(|(k, s)| {
                    s.iter_mut().for_each(|x| *x *= w0 as f32);
                    for (w, Gradients(part)) in &parts {
                        let part = &part[p][k * UPDATE_CHUNK..][..s.len()];
                        s.iter_mut()
                            .zip(part)
                            .for_each(|(s, &g)| *s = (*w as f32).mul_add(g, *s));
                    }
                });
        }
        (
            Gradients(sum),
            parts.into_iter().map(|(_, part)| part).collect(),
        )
    }

    /// The largest parameter's buffer (the token table's or the output layer's).
    pub fn into_largest(self) -> Option<Vec<f32>> {
        self.0.into_iter().max_by_key(Vec::len)
    }

    /// Each parameter's gradient, flat, in the optimiser's order (by name).
    pub fn values(&self) -> &[Vec<f32>] {
        &self.0
    }

    /// The global L2 norm of all gradients: chunks on all threads, each summed in eight f64
    /// lanes, the chunk sums added in order (so the result does not depend on the threads).
    pub fn norm(&self) -> f64 {
        let chunk_sums: Vec<f64> = self
            .0
            .iter()
            .flat_map(|g| g.chunks(UPDATE_CHUNK))
            .collect::<Vec<_>>()
            .par_iter()
            .map(|chunk| {
                let mut lanes = [0f64; 8];
                let (eights, rest) = chunk.as_chunks::<8>();
                for eight in eights {
                    for (lane, &x) in lanes.iter_mut().zip(eight) {
                        *lane = (x as f64).mul_add(x as f64, *lane);
                    }
                }
                let rest: f64 = rest.iter().map(|&x| (x as f64) * (x as f64)).sum();
                lanes.iter().sum::<f64>() + rest
            })
            .collect();
        chunk_sums.iter().sum::<f64>().sqrt()
    }
}

impl Optimizer {
    /// An optimiser for `vars`: AdamW (tensors with 2 or more dimensions get weight decay), and
    /// with `muon`, Muon for the blocks' weight matrices ([`muon_takes`]).
    pub fn new(
        vars: HashMap<String, Var>,
        params: AdamWParams,
        muon: Option<MuonParams>,
    ) -> Result<Self> {
        let mut named: Vec<(String, Var)> = vars.into_iter().collect();
        named.sort_by(|a, b| a.0.cmp(&b.0));
        let slots = named
            .into_iter()
            .map(|(name, var)| {
                let n = var.elem_count();
                let rule = match (muon, var.dims()) {
                    (Some(params), &[rows, cols]) if muon_takes(&name) => {
                        Rule::Muon { rows, cols, params }
                    }
                    _ => Rule::AdamW {
                        decay: var.rank() >= 2,
                    },
                };
                let v = match rule {
                    Rule::Muon { .. } => Vec::new(),
                    Rule::AdamW { .. } => vec![0.0; n],
                };
                Slot {
                    name,
                    rule,
                    m: vec![0.0; n],
                    v,
                    var,
                }
            })
            .collect();
        Ok(Optimizer {
            slots,
            params,
            step: 0,
        })
    }

    /// Reads the gradient of every parameter out of `grads`.
    pub fn gradients(&self, grads: &GradStore) -> Result<Gradients> {
        self.slots
            .iter()
            .map(|slot| match grads.get(slot.var.as_tensor()) {
                Some(g) => g.flatten_all()?.to_vec1::<f32>(),
                None => Ok(vec![0.0; slot.m.len()]),
            })
            .collect::<Result<_>>()
            .map(Gradients)
    }

    /// Takes the gradient of every parameter out of `grads` (of the hand-written training step).
    pub fn gradients_from(&self, mut grads: ParamGrads) -> Gradients {
        Gradients(
            self.slots
                .iter()
                .map(|slot| {
                    grads
                        .remove(&slot.var.as_tensor().id())
                        .unwrap_or_else(|| vec![0.0; slot.m.len()])
                })
                .collect(),
        )
    }

    /// One update at the learning rates `lr`, with gradients multiplied by `grad_scale` (clipping).
    /// The parameters are updated and written back side by side on the thread pool (each on its
    /// own: the result does not depend on the threads).
    pub fn step(&mut self, grads: &Gradients, lr: Rates, grad_scale: f64) -> Result<()> {
        self.step += 1;
        let (params, step) = (self.params, self.step);
        self.slots
            .par_iter_mut()
            .zip(grads.0.par_iter())
            .try_for_each(|(slot, g)| {
                let var = slot.var.clone();
                update_values(&var, |theta| {
                    slot.update(theta, g, lr, grad_scale, (params, step))
                })
            })
    }

    /// The moments as named tensors (`m.<param>`, `v.<param>`; Muon's momentum buffer
    /// `momentum.<param>`), for a checkpoint.
    pub fn state(&self) -> Result<Vec<(String, Tensor)>> {
        let mut out = Vec::with_capacity(2 * self.slots.len());
        for s in &self.slots {
            for (prefix, values) in s.moments() {
                let t = Tensor::from_slice(values, s.var.shape(), s.var.device())?;
                out.push((format!("{prefix}.{}", s.name), t));
            }
        }
        Ok(out)
    }

    /// Restores the moments saved by [`Optimizer::state`] and the step count.
    pub fn load_state(&mut self, tensors: &HashMap<String, Tensor>, step: usize) -> Result<()> {
        for slot in &mut self.slots {
            let prefixes = slot.prefixes();
            for (&prefix, target) in prefixes.iter().zip([&mut slot.m, &mut slot.v]) {
                let key = format!("{prefix}.{}", slot.name);
                let t = tensors.get(&key).ok_or_else(|| {
                    candle_core::Error::Msg(format!("optimiser state has no {key}"))
                })?;
                if t.shape() != slot.var.shape() {
                    candle_core::bail!(
                        "optimiser state {key} has shape {:?}, expected {:?}",
                        t.dims(),
                        slot.var.dims()
                    )
                }
                *target = t.flatten_all()?.to_vec1::<f32>()?;
            }
        }
        self.step = step;
        Ok(())
    }
}

/// The key prefix of Muon's momentum buffers in a checkpoint.
const MOMENTUM: &str = "momentum";

impl Slot {
    /// One update of the parameter's values `theta` with gradient `g` (see [`Optimizer::step`]);
    /// AdamW's parameters and step count (1-based).
    fn update(
        &mut self,
        theta: &mut [f32],
        g: &[f32],
        lr: Rates,
        grad_scale: f64,
        (p, step): (AdamWParams, usize),
    ) {
        match self.rule {
            Rule::Muon { rows, cols, params } => {
                let g = (g, grad_scale as f32);
                muon::update(theta, &mut self.m, g, (rows, cols), lr.muon, params);
            }
            Rule::AdamW { decay } => {
                let keep = if decay {
                    1.0 - lr.adamw * p.weight_decay
                } else {
                    1.0
                };
                let moments = (&mut self.m[..], &mut self.v[..]);
                adamw_update(theta, moments, g, (lr.adamw, keep, grad_scale), p, step);
            }
        }
    }

    /// The key prefixes of the moments in a checkpoint: of `m`, then of `v` (AdamW's).
    fn prefixes(&self) -> &'static [&'static str] {
        match self.rule {
            Rule::Muon { .. } => &[MOMENTUM],
            Rule::AdamW { .. } => &["m", "v"],
        }
    }

    /// The moments to save, each with its key prefix.
    fn moments(&self) -> impl Iterator<Item = (&'static str, &Vec<f32>)> {
        self.prefixes().iter().copied().zip([&self.m, &self.v])
    }
}

/// `change` applied to the values of `var` (f32), in place on the CPU (a copy out and back made
/// the default's update half as slow again); elsewhere on a copy written back.
fn update_values(var: &Var, change: impl FnOnce(&mut [f32])) -> Result<()> {
    if !var.device().is_cpu() {
        let mut values = var.flatten_all()?.to_vec1::<f32>()?;
        change(&mut values);
        return var.set(&Tensor::from_vec(values, var.shape(), var.device())?);
    }
    var.inplace_op1(&InPlace(Cell::new(Some(change))))
}

/// An in-place op on a CPU tensor's f32 values, called once.
struct InPlace<F>(Cell<Option<F>>);

impl<F: FnOnce(&mut [f32])> InplaceOp1 for InPlace<F> {
    fn name(&self) -> &'static str {
        "update-in-place"
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> Result<()> {
        let (CpuStorage::F32(values), Some((start, end))) = (storage, layout.contiguous_offsets())
        else {
            candle_core::bail!("a parameter to update in place must be contiguous f32")
        };
        let change = self.0.take().expect("an in-place update runs once");
        change(&mut values[start..end]);
        Ok(())
    }
}

/// One AdamW update of `theta` with moments (m, v) and gradient `g` at step `step` (1-based):
/// `lr`, the factor `keep` of the weight decay and the clipping's `grad_scale`.
fn adamw_update(
    theta: &mut [f32],
    (m, v): (&mut [f32], &mut [f32]),
    g: &[f32],
    (lr, keep, grad_scale): (f64, f64, f64),
    p: AdamWParams,
    step: usize,
) {
    let bias1 = 1.0 - p.beta1.powi(step as i32);
    let bias2 = 1.0 - p.beta2.powi(step as i32);
    let (b1, b2, eps, scale) = (
        p.beta1 as f32,
        p.beta2 as f32,
        p.eps as f32,
        grad_scale as f32,
    );
    let (step_size, v_corr, keep) = ((lr / bias1) as f32, (1.0 / bias2) as f32, keep as f32);
    // Element by element, so chunks on different threads give the same result.
    theta
        .par_chunks_mut(UPDATE_CHUNK)
        .zip(m.par_chunks_mut(UPDATE_CHUNK))
        .zip(v.par_chunks_mut(UPDATE_CHUNK))
        .zip(g.par_chunks(UPDATE_CHUNK))
        .for_each(|(((theta, m), v), g)| {
            crate::ops::isa::widest(|| {
                for i in 0..theta.len() {
                    let gi = g[i] * scale;
                    m[i] = b1 * m[i] + (1.0 - b1) * gi;
                    v[i] = b2 * v[i] + (1.0 - b2) * gi * gi;
                    theta[i] = theta[i] * keep - step_size * m[i] / ((v[i] * v_corr).sqrt() + eps);
                }
            })
        });
}

/// The factor that brings a gradient norm down to `max_norm` (1 when it is below, or clipping is off).
pub fn clip_scale(norm: f64, max_norm: f64) -> f64 {
    if max_norm > 0.0 && norm > max_norm {
        max_norm / (norm + 1e-6)
    } else {
        1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gradient_norm_and_weighted_sum_match_plain_sums() {
        // Lengths around the chunk size and the eight lanes.
        let lengths = [
            1,
            7,
            8,
            9,
            UPDATE_CHUNK - 1,
            UPDATE_CHUNK,
            3 * UPDATE_CHUNK + 5,
        ];
        let gradients = |seed: usize| {
            let values = |n: usize| -> Vec<f32> {
                (0..n)
                    .map(|i| (((i * 37 + seed * 11) % 101) as f32 - 50.0) * 0.01)
                    .collect()
            };
            Gradients(lengths.iter().map(|&n| values(n)).collect())
        };
        let (a, b) = (gradients(1), gradients(2));
        let plain = |g: &Gradients| {
            g.0.iter()
                .flatten()
                .map(|&x| (x as f64).powi(2))
                .sum::<f64>()
                .sqrt()
        };
        assert!((a.norm() - plain(&a)).abs() < 1e-12 * plain(&a));
        let expected: Vec<Vec<f32>> =
            a.0.iter()
                .zip(&b.0)
                .map(|(a, b)| a.iter().zip(b).map(|(a, b)| 0.75 * a + 0.25 * b).collect())
                .collect();
        let (sum, _) = Gradients::weighted_sum(vec![(0.75, a), (0.25, b)]);
        for (s, e) in sum.values().iter().flatten().zip(expected.iter().flatten()) {
            assert!((s - e).abs() < 1e-6, "{s} vs {e}");
        }
        // A lone part: as it is with weight 1, scaled with another.
        let (lone, _) = Gradients::weighted_sum(vec![(1.0, gradients(3))]);
        assert!(lone.values() == gradients(3).values());
        let (half, _) = Gradients::weighted_sum(vec![(0.5, gradients(3))]);
        let whole = gradients(3);
        let halved = whole.values().iter().flatten().map(|x| 0.5 * x);
        assert!(half.values().iter().flatten().copied().eq(halved));
    }
}
