//! Data-parallel steps on the CPU: the batch cut into a fixed set of units, shared out over the
//! threads.
//!
//! Spreading every op of a step over the threads costs a hand-over per op (hundreds per step), and
//! the small element-wise ops do not scale. Instead each unit runs its whole forward and backward
//! pass on one thread, every op inside it single-threaded (a one-thread rayon pool per thread;
//! candle's own thread pool is turned off by [`crate::perf::init`]), and the units' losses and
//! gradients are averaged, weighted by their sequences, in the units' order. Where a batch has
//! fewer units than there are threads (16 threads, the default's 4 units), each unit gets a pool
//! of several threads, over which its ops split their rows and products.
//!
//! The units do not follow the threads: a batch is cut into units of whole sequences, at least
//! [`UNIT_ROWS`] positions each, each unit's dropout masks drawn from its own seed (taken from the
//! step's RNG in the units' order), and the threads take the units one by one. So a step gives
//! the same bits on 1, 2 or 16 threads, and never depends on timing. Units of 256 positions keep
//! the output layer's products as large as its chunks (one sequence of 128 per unit was 14 %
//! slower on 2 cores: each unit's gradients are a full set, summed afterwards).

use super::optim::{Gradients, Optimizer};
use crate::engine;
use crate::engine::team::lock;
use crate::model::{Gpt, Mode};
use crate::ops::scratch;
use crate::ops::Precision;
use candle_core::{Device, Error, Result, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::{ThreadPool, ThreadPoolBuilder};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

/// Positions per unit of a batch on the CPU (whole sequences, one at least), whatever the
/// thread count.
pub const UNIT_ROWS: usize = 256;

/// Runs steps cut into units, one single-thread pool per thread (none: on the calling thread, in
/// a browser), or the whole batch at once on devices whose ops are parallel inside.
pub struct Shards {
    pools: Vec<ThreadPool>,
    /// The whole batch at once, uncut ([`Shards::whole`]).
    whole: bool,
    /// The largest gradient buffer of each unit but the first of the last step, for the next
    /// step's output layer to write over (`ops::scratch`) instead of zeroing fresh memory.
    spare: Mutex<Vec<Vec<f32>>>,
}

/// Each unit's weight (its share of the batch's sequences), loss and gradients, in the units'
/// order.
pub struct UnitGradients(Vec<(f64, (f64, Gradients))>);

/// One unit's rows of a batch and its weight (its share of the batch's sequences).
struct Unit {
    x: Tensor,
    y: Tensor,
    weight: f64,
}

impl Shards {
    /// Units of batches of `shape` (B, T) shared out over `threads` threads (at least one): a
    /// pool per unit while there are fewer units than threads, the threads spread over the pools
    /// (a unit's ops split their rows over its pool, in blocks that do not follow the threads).
    /// Where there are no threads to start (a browser's wasm), the units run one after another
    /// on the calling thread: the same units, so the same bits.
    pub fn new(threads: usize, shape: (usize, usize)) -> Result<Self> {
        let threads = match cfg!(target_family = "wasm") {
            true => 0,
            false => threads.max(1),
        };
        let pools = pool_sizes(threads, unit_count(shape))
            .enumerate()
            .map(|(i, size)| {
                ThreadPoolBuilder::new()
                    .num_threads(size)
                    .thread_name(move |j| format!("shard-{i}-{j}"))
                    .build()
                    .map_err(Error::wrap)
            })
            .collect::<Result<_>>()?;
        Ok(Shards {
            pools,
            whole: false,
            spare: Mutex::default(),
        })
    }

    /// The whole batch at once on the calling thread, its ops parallel inside (a GPU).
    pub fn whole() -> Self {
        Shards {
            pools: Vec::new(),
            whole: true,
            spare: Mutex::default(),
        }
    }

    /// Threads that share the units (1 for a whole batch).
    pub fn threads(&self) -> usize {
        self.pools
            .iter()
            .map(ThreadPool::current_num_threads)
            .sum::<usize>()
            .max(1)
    }

    /// The threads of rayon's pool on the CPU, for batches of `shape` (B, T); the whole batch on
    /// other devices.
    pub fn for_device(device: &Device, shape: (usize, usize)) -> Result<Self> {
        if device.is_cpu() {
            Self::new(rayon::current_num_threads(), shape)
        } else {
            Ok(Self::whole())
        }
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
        let parts = self.unit_gradients((model, opt), (x, y), precision, rng)?;
        Ok(self.sum(parts))
    }

    /// Each unit's loss and gradients (the whole batch as one unit on devices whose ops are
    /// parallel inside): the parallel phase of [`Shards::loss_and_gradients`].
    pub fn unit_gradients(
        &self,
        (model, opt): (&Gpt, &Optimizer),
        (x, y): (&Tensor, &Tensor),
        precision: Precision,
        rng: &mut ChaCha8Rng,
    ) -> Result<UnitGradients> {
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
        if self.whole {
            return Ok(UnitGradients(vec![(1.0, backward(x, y, rng)?)]));
        }
        let units = units(x, y)?;
        let seeds: Vec<u64> = units.iter().map(|_| rng.random()).collect();
        let results = self.run(&units, |i, unit| {
            backward(&unit.x, &unit.y, &mut ChaCha8Rng::seed_from_u64(seeds[i]))
        })?;
        Ok(UnitGradients(results))
    }

    /// The batch's loss and gradients: the units' weighted by their sequences, summed in the
    /// units' order.
    pub fn sum(&self, UnitGradients(parts): UnitGradients) -> (f64, Gradients) {
        let loss = parts.iter().map(|(w, (loss, _))| w * loss).sum();
        let grads = parts.into_iter().map(|(w, (_, g))| (w, g)).collect();
        let (sum, spare) = Gradients::weighted_sum(grads);
        *lock(&self.spare) = spare
            .into_iter()
            .filter_map(Gradients::into_largest)
            .collect();
        (loss, sum)
    }

    /// The mean cross-entropy of the batch `x` → `y` (B, T), without dropout.
    pub fn loss(&self, model: &Gpt, x: &Tensor, y: &Tensor) -> Result<f64> {
        let loss = |x: &Tensor, y: &Tensor| -> Result<f64> {
            if engine::supports(model) {
                return Ok(engine::loss(model, (x, y))?);
            }
            Ok(model.loss(x, y, &mut Mode::Eval)?.to_scalar::<f32>()? as f64)
        };
        if self.whole {
            return loss(x, y);
        }
        let results = self.run(&units(x, y)?, |_, unit| loss(&unit.x, &unit.y))?;
        Ok(results.iter().map(|(w, loss)| w * loss).sum())
    }

    /// `work` on every unit, the threads taking the next unit as they come free; results in the
    /// units' order with their weights.
    fn run<T: Send>(
        &self,
        units: &[Unit],
        work: impl Fn(usize, &Unit) -> Result<T> + Sync,
    ) -> Result<Vec<(f64, T)>> {
        let next = AtomicUsize::new(0);
        let results: Vec<Mutex<Option<Result<T>>>> =
            units.iter().map(|_| Mutex::new(None)).collect();
        let take_units = || loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(unit) = units.get(i) else { return };
            if let Some(buffer) = lock(&self.spare).pop() {
                scratch::give_back(buffer); // to this thread, for the unit's largest gradient
            }
            *lock(&results[i]) = Some(work(i, unit));
        };
        let take_units = &take_units;
        if self.pools.is_empty() {
            take_units();
        }
        let threads = self.pools.len().min(units.len());
        std::thread::scope(|scope| {
            let handles: Vec<_> = self.pools[..threads]
                .iter()
                .map(|pool| scope.spawn(move || pool.install(take_units)))
                .collect();
            // Every thread joined before looking (`any` would stop at the first that panicked).
            let panicked: Vec<bool> = handles.into_iter().map(|h| h.join().is_err()).collect();
            if panicked.contains(&true) {
                return Err(Error::Msg("a thread of the training step panicked".into()));
            }
            Ok(())
        })?;
        results
            .into_iter()
            .zip(units)
            .map(|(result, unit)| {
                let result = result.into_inner().unwrap_or_else(PoisonError::into_inner);
                Ok((unit.weight, result.expect("every unit was taken")?))
            })
            .collect()
    }
}

/// Sequences per unit of sequences of `t` positions: [`UNIT_ROWS`] positions, one sequence at
/// least.
fn sequences_per_unit(t: usize) -> usize {
    (UNIT_ROWS / t.max(1)).max(1)
}

/// Units in a batch of `shape` (B, T).
fn unit_count((batch, t): (usize, usize)) -> usize {
    batch.div_ceil(sequences_per_unit(t))
}

/// The sizes of the pools that share `threads` threads among `units` units: one pool per unit
/// while threads are left (none without threads), the threads spread evenly.
fn pool_sizes(threads: usize, units: usize) -> impl Iterator<Item = usize> {
    let pools = threads.min(units.max(1));
    (0..pools).map(move |i| threads / pools + usize::from(i < threads % pools))
}

/// The batch's sequences in units of [`UNIT_ROWS`] positions (the last may be smaller).
fn units(x: &Tensor, y: &Tensor) -> Result<Vec<Unit>> {
    let (batch, t) = x.dims2()?;
    let per_unit = sequences_per_unit(t);
    (0..batch)
        .step_by(per_unit)
        .map(|start| {
            let rows = per_unit.min(batch - start);
            Ok(Unit {
                x: x.narrow(0, start, rows)?,
                y: y.narrow(0, start, rows)?,
                weight: rows as f64 / batch as f64,
            })
        })
        .collect()
}
