//! Data-parallel steps on the CPU: the batch's sequences split into one shard per thread.
//!
//! Spreading every op of a step over the threads costs a hand-over per op (hundreds per step), and
//! the small element-wise ops do not scale. Instead each shard runs its whole forward and backward
//! pass on one thread, every op inside it single-threaded (a one-thread rayon pool per shard;
//! candle's own thread pool is turned off by [`crate::perf::init`]), and the shards' losses and
//! gradients are averaged, weighted by their sequences. On 2 cores (course model, batch 32) this
//! took a step from 5,300–6,000 to 7,250–7,500 tokens/s.
//!
//! The result is the whole batch's up to float rounding, except that with dropout each shard
//! draws its masks from its own seed, taken from the step's RNG. It depends on the number of
//! shards (the threads), never on timing.

use super::optim::{Gradients, Optimizer};
use crate::engine;
use crate::model::{Gpt, Mode};
use crate::ops::Precision;
use candle_core::{Device, Error, Result, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::{ThreadPool, ThreadPoolBuilder};

/// Runs steps split into shards, one single-thread pool per shard (none for a single shard).
pub struct Shards {
    pools: Vec<ThreadPool>,
}

/// One shard's rows of a batch and its weight (its share of the batch's sequences).
struct Shard {
    x: Tensor,
    y: Tensor,
    weight: f64,
}

impl Shards {
    /// At most `count` shards; with 1 the batch runs unsplit on the calling thread, its ops
    /// spread over all threads.
    pub fn new(count: usize) -> Result<Self> {
        let pools = if count > 1 {
            (0..count)
                .map(|i| {
                    ThreadPoolBuilder::new()
                        .num_threads(1)
                        .thread_name(move |_| format!("shard-{i}"))
                        .build()
                        .map_err(Error::wrap)
                })
                .collect::<Result<_>>()?
        } else {
            Vec::new()
        };
        Ok(Shards { pools })
    }

    /// How many shards a batch is split into (at most; a batch of one sequence runs whole).
    pub fn count(&self) -> usize {
        self.pools.len().max(1)
    }

    /// One shard per thread of rayon's pool on the CPU; a single shard on other devices, whose
    /// ops are parallel inside.
    pub fn for_device(device: &Device) -> Result<Self> {
        Self::new(if device.is_cpu() {
            rayon::current_num_threads()
        } else {
            1
        })
    }

    /// The mean cross-entropy of the batch `x` → `y` (B, T) and its gradients for `opt`'s
    /// parameters, with the CPU engine's matmuls in `precision` and dropout masks drawn from `rng`.
    pub fn loss_and_gradients(
        &self,
        (model, opt): (&Gpt, &Optimizer),
        (x, y): (&Tensor, &Tensor),
        precision: Precision,
        rng: &mut ChaCha8Rng,
    ) -> Result<(f64, Gradients)> {
        let backward = |x: &Tensor, y: &Tensor, rng: &mut ChaCha8Rng| -> Result<(f64, Gradients)> {
            if engine::supports(model) {
                let mode = &mut Mode::Train(rng);
                let (loss, grads) = engine::loss_and_gradients(model, (x, y), precision, mode)?;
                return Ok((loss, opt.gradients_from(grads)));
            }
            let loss = model.loss(x, y, &mut Mode::Train(rng))?;
            let grads = opt.gradients(&loss.backward()?)?;
            Ok((loss.to_scalar::<f32>()? as f64, grads))
        };
        if !self.splits(x)? {
            return backward(x, y, rng);
        }
        let shards = self.split(x, y)?;
        let seeds: Vec<u64> = shards.iter().map(|_| rng.random()).collect();
        let results = self.run(&shards, |i, shard| {
            backward(&shard.x, &shard.y, &mut ChaCha8Rng::seed_from_u64(seeds[i]))
        })?;
        let loss = results.iter().map(|(w, (loss, _))| w * loss).sum();
        let grads = results.into_iter().map(|(w, (_, g))| (w, g)).collect();
        Ok((loss, Gradients::weighted_sum(grads)))
    }

    /// The mean cross-entropy of the batch `x` → `y` (B, T), without dropout.
    pub fn loss(&self, model: &Gpt, x: &Tensor, y: &Tensor) -> Result<f64> {
        let loss = |x: &Tensor, y: &Tensor| -> Result<f64> {
            Ok(model.loss(x, y, &mut Mode::Eval)?.to_scalar::<f32>()? as f64)
        };
        if !self.splits(x)? {
            return loss(x, y);
        }
        let shards = self.split(x, y)?;
        let results = self.run(&shards, |_, shard| loss(&shard.x, &shard.y))?;
        Ok(results.iter().map(|(w, loss)| w * loss).sum())
    }

    /// Whether the batch `x` is split: with one sequence (or one thread) it runs whole on the
    /// calling thread, its ops spread over all threads.
    fn splits(&self, x: &Tensor) -> Result<bool> {
        Ok(self.pools.len() > 1 && x.dim(0)? > 1)
    }

    /// The batch's sequences in up to one shard per pool, sizes differing by at most one.
    fn split(&self, x: &Tensor, y: &Tensor) -> Result<Vec<Shard>> {
        let batch = x.dim(0)?;
        let count = self.pools.len().min(batch);
        let mut start = 0;
        (0..count)
            .map(|i| {
                let rows = batch / count + usize::from(i < batch % count);
                let shard = Shard {
                    x: x.narrow(0, start, rows)?,
                    y: y.narrow(0, start, rows)?,
                    weight: rows as f64 / batch as f64,
                };
                start += rows;
                Ok(shard)
            })
            .collect()
    }

    /// `work` on every shard, each in its own pool, side by side; results in shard order with
    /// the shards' weights.
    fn run<T: Send>(
        &self,
        shards: &[Shard],
        work: impl Fn(usize, &Shard) -> Result<T> + Sync,
    ) -> Result<Vec<(f64, T)>> {
        let work = &work;
        std::thread::scope(|scope| {
            let handles: Vec<_> = shards
                .iter()
                .zip(&self.pools)
                .enumerate()
                .map(|(i, (shard, pool))| scope.spawn(move || pool.install(|| work(i, shard))))
                .collect();
            handles
                .into_iter()
                .zip(shards)
                .map(|(handle, shard)| match handle.join() {
                    Ok(result) => Ok((shard.weight, result?)),
                    Err(_) => Err(Error::Msg("a shard of the training step panicked".into())),
                })
                .collect()
        })
    }
}
