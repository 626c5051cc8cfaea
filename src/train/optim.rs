//! AdamW with decoupled weight decay on matrices only, global gradient-norm clipping, and state
//! that can be saved and restored for exact resumption.

use crate::engine::ParamGrads;
use candle_core::{backprop::GradStore, Result, Tensor, Var};
use rayon::prelude::*;
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

/// One parameter with its moments, kept as plain vectors so that an update is one fused pass.
struct Slot {
    name: String,
    var: Var,
    m: Vec<f32>,
    v: Vec<f32>,
    decay: bool,
}

/// AdamW over named variables, in name order (so that its state is stable across runs).
pub struct AdamW {
    slots: Vec<Slot>,
    params: AdamWParams,
    /// Steps taken so far.
    pub step: usize,
}

/// The gradient of each slot as a flat vector (zeros where a parameter got none).
pub struct Gradients(Vec<Vec<f32>>);

impl Gradients {
    /// Σ weight × gradients over `parts`, summed in the parts' order (none: no gradients).
    pub fn weighted_sum(parts: Vec<(f64, Gradients)>) -> Gradients {
        let mut parts = parts.into_iter();
        let Some((w0, Gradients(mut sum))) = parts.next() else {
            return Gradients(Vec::new());
        };
        for g in sum.iter_mut() {
            g.par_chunks_mut(UPDATE_CHUNK)
                .for_each(|g| g.iter_mut().for_each(|x| *x *= w0 as f32));
        }
        for (w, Gradients(part)) in parts {
            for (sum, part) in sum.iter_mut().zip(part) {
                sum.par_chunks_mut(UPDATE_CHUNK)
                    .zip(part.par_chunks(UPDATE_CHUNK))
                    .for_each(|(s, p)| {
                        s.iter_mut()
                            .zip(p)
                            .for_each(|(s, &p)| *s = (w as f32).mul_add(p, *s))
                    });
            }
        }
        Gradients(sum)
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

impl AdamW {
    /// An optimiser for `vars`; tensors with 2 or more dimensions get weight decay.
    pub fn new(vars: HashMap<String, Var>, params: AdamWParams) -> Result<Self> {
        let mut named: Vec<(String, Var)> = vars.into_iter().collect();
        named.sort_by(|a, b| a.0.cmp(&b.0));
        let slots = named
            .into_iter()
            .map(|(name, var)| {
                let n = var.elem_count();
                Slot {
                    name,
                    decay: var.rank() >= 2,
                    m: vec![0.0; n],
                    v: vec![0.0; n],
                    var,
                }
            })
            .collect();
        Ok(AdamW {
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

    /// One update at learning rate `lr`, with gradients multiplied by `grad_scale` (clipping).
    pub fn step(&mut self, grads: &Gradients, lr: f64, grad_scale: f64) -> Result<()> {
        self.step += 1;
        let p = self.params;
        let bias1 = 1.0 - p.beta1.powi(self.step as i32);
        let bias2 = 1.0 - p.beta2.powi(self.step as i32);
        let (b1, b2, eps, scale) = (
            p.beta1 as f32,
            p.beta2 as f32,
            p.eps as f32,
            grad_scale as f32,
        );
        let (step_size, v_corr) = ((lr / bias1) as f32, (1.0 / bias2) as f32);
        for (slot, g) in self.slots.iter_mut().zip(&grads.0) {
            let keep = if slot.decay {
                (1.0 - lr * p.weight_decay) as f32
            } else {
                1.0
            };
            let mut theta = slot.var.as_tensor().flatten_all()?.to_vec1::<f32>()?;
            // Element by element, so chunks on different threads give the same result.
            theta
                .par_chunks_mut(UPDATE_CHUNK)
                .zip(slot.m.par_chunks_mut(UPDATE_CHUNK))
                .zip(slot.v.par_chunks_mut(UPDATE_CHUNK))
                .zip(g.par_chunks(UPDATE_CHUNK))
                .for_each(|(((theta, m), v), g)| {
                    crate::ops::isa::widest(|| {
                        for i in 0..theta.len() {
                            let gi = g[i] * scale;
                            m[i] = b1 * m[i] + (1.0 - b1) * gi;
                            v[i] = b2 * v[i] + (1.0 - b2) * gi * gi;
                            theta[i] =
                                theta[i] * keep - step_size * m[i] / ((v[i] * v_corr).sqrt() + eps);
                        }
                    })
                });
            let shape = slot.var.shape().clone();
            slot.var
                .set(&Tensor::from_vec(theta, shape, slot.var.device())?)?;
        }
        Ok(())
    }

    /// The moments as named tensors (`m.<param>`, `v.<param>`), for a checkpoint.
    pub fn state(&self) -> Result<Vec<(String, Tensor)>> {
        let mut out = Vec::with_capacity(2 * self.slots.len());
        for s in &self.slots {
            for (prefix, values) in [("m", &s.m), ("v", &s.v)] {
                let t = Tensor::from_slice(values, s.var.shape(), s.var.device())?;
                out.push((format!("{prefix}.{}", s.name), t));
            }
        }
        Ok(out)
    }

    /// Restores the moments saved by [`AdamW::state`] and the step count.
    pub fn load_state(&mut self, tensors: &HashMap<String, Tensor>, step: usize) -> Result<()> {
        for slot in &mut self.slots {
            for (prefix, target) in [("m", &mut slot.m), ("v", &mut slot.v)] {
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
        let sum = Gradients::weighted_sum(vec![(0.75, a), (0.25, b)]);
        for (s, e) in sum.values().iter().flatten().zip(expected.iter().flatten()) {
            assert!((s - e).abs() < 1e-6, "{s} vs {e}");
        }
    }
}
