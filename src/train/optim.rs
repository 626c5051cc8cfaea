//! AdamW with decoupled weight decay on matrices only, global gradient-norm clipping, and state
//! that can be saved and restored for exact resumption.

use candle_core::{backprop::GradStore, Result, Tensor, Var};
use std::collections::HashMap;

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

/// One parameter with its moments.
struct Slot {
    name: String,
    var: Var,
    m: Tensor,
    v: Tensor,
    decay: bool,
}

/// AdamW over named variables, in name order (so that its state is stable across runs).
pub struct AdamW {
    slots: Vec<Slot>,
    params: AdamWParams,
    /// Steps taken so far.
    pub step: usize,
}

impl AdamW {
    /// An optimiser for `vars`; tensors with 2 or more dimensions get weight decay.
    pub fn new(vars: HashMap<String, Var>, params: AdamWParams) -> Result<Self> {
        let mut named: Vec<(String, Var)> = vars.into_iter().collect();
        named.sort_by(|a, b| a.0.cmp(&b.0));
        let slots = named
            .into_iter()
            .map(|(name, var)| {
                let zeros = var.as_tensor().zeros_like()?;
                let decay = var.rank() >= 2;
                Ok(Slot {
                    name,
                    m: zeros.clone(),
                    v: zeros,
                    decay,
                    var,
                })
            })
            .collect::<Result<_>>()?;
        Ok(AdamW {
            slots,
            params,
            step: 0,
        })
    }

    /// The global L2 norm of the gradients of all parameters.
    pub fn grad_norm(&self, grads: &GradStore) -> Result<f64> {
        let mut total = Tensor::zeros((), candle_core::DType::F32, self.slots[0].var.device())?;
        for slot in &self.slots {
            if let Some(g) = grads.get(slot.var.as_tensor()) {
                total = (total + g.sqr()?.sum_all()?)?;
            }
        }
        Ok((total.to_scalar::<f32>()? as f64).sqrt())
    }

    /// One update at learning rate `lr`, with gradients multiplied by `grad_scale` (clipping).
    pub fn step(&mut self, grads: &GradStore, lr: f64, grad_scale: f64) -> Result<()> {
        self.step += 1;
        let p = self.params;
        let bias1 = 1.0 - p.beta1.powi(self.step as i32);
        let bias2 = 1.0 - p.beta2.powi(self.step as i32);
        for slot in &mut self.slots {
            let Some(g) = grads.get(slot.var.as_tensor()) else {
                continue;
            };
            let g = (g * grad_scale)?;
            slot.m = ((&slot.m * p.beta1)? + (&g * (1.0 - p.beta1))?)?;
            slot.v = ((&slot.v * p.beta2)? + (g.sqr()? * (1.0 - p.beta2))?)?;
            let update = ((&slot.m / bias1)? / ((&slot.v / bias2)?.sqrt()? + p.eps)?)?;
            let theta = slot.var.as_tensor();
            let decayed = if slot.decay {
                (theta * (1.0 - lr * p.weight_decay))?
            } else {
                theta.clone()
            };
            slot.var.set(&(decayed - (update * lr)?)?)?;
        }
        Ok(())
    }

    /// The moments as named tensors (`m.<param>`, `v.<param>`), for a checkpoint.
    pub fn state(&self) -> Vec<(String, Tensor)> {
        self.slots
            .iter()
            .flat_map(|s| {
                [
                    (format!("m.{}", s.name), s.m.clone()),
                    (format!("v.{}", s.name), s.v.clone()),
                ]
            })
            .collect()
    }

    /// Restores the moments saved by [`AdamW::state`] and the step count.
    pub fn load_state(&mut self, tensors: &HashMap<String, Tensor>, step: usize) -> Result<()> {
        for slot in &mut self.slots {
            for (prefix, target) in [("m", &mut slot.m), ("v", &mut slot.v)] {
                let key = format!("{prefix}.{}", slot.name);
                let t = tensors.get(&key).ok_or_else(|| {
                    candle_core::Error::Msg(format!("optimiser state has no {key}"))
                })?;
                if t.shape() != target.shape() {
                    candle_core::bail!(
                        "optimiser state {key} has shape {:?}, expected {:?}",
                        t.shape(),
                        target.shape()
                    )
                }
                *target = t.clone();
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
