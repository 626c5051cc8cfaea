//! Where a run stands ([`Progress`]: its step, its random streams, its curve so far), and what a
//! checkpoint saves of it besides the tensors: the training state's scalars, kept as the metadata
//! (text) of `train_state.safetensors`, each under its own key.

use crate::random::{rng, Stream};
use crate::train::metrics::{EvalSample, MetricRow};
use anyhow::{Context, Result};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::path::Path;

/// Where a run stands: everything its checkpoint saves besides the tensors.
pub(crate) struct Progress {
    pub step: usize,
    pub best_val: f64,
    pub elapsed_s: f64,
    pub batch_rng: ChaCha8Rng,
    pub dropout_rng: ChaCha8Rng,
    pub interval: Interval,
    pub rows: Vec<MetricRow>,
    /// The poem drawn at each evaluation.
    pub samples: Vec<EvalSample>,
    /// The step of the checkpoint in the run directory, if there is one.
    pub saved_step: Option<usize>,
    /// Whether the fitted biases ([`crate::train::fit`]) were fitted to the weights as they
    /// stand: after the last step; no longer once a step trains.
    pub fitted: bool,
}

impl Progress {
    /// A new run of `seed`, at step 0.
    pub fn new(seed: u64) -> Progress {
        Progress {
            step: 0,
            best_val: f64::INFINITY,
            elapsed_s: 0.0,
            batch_rng: rng(seed, Stream::Batches),
            dropout_rng: rng(seed, Stream::Dropout),
            interval: Interval::default(),
            rows: Vec::new(),
            samples: Vec::new(),
            saved_step: None,
            fitted: false,
        }
    }
}

/// Running sums since the last evaluation.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Interval {
    pub loss: f64,
    pub steps: usize,
    pub seconds: f64,
}

impl Interval {
    pub fn mean_loss(&self) -> f64 {
        self.loss / self.steps as f64
    }
}

/// The scalars of a training state.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SavedState {
    /// The fingerprint of the corpus's poems (`None` in checkpoints of earlier versions).
    pub corpus: Option<String>,
    /// The fingerprint of each text read, by key ([`crate::data::RunText::fingerprints`]; `None`
    /// in checkpoints of earlier versions).
    pub texts: Option<String>,
    pub step: usize,
    /// Where the batch and dropout RNGs stand (ChaCha8's word positions).
    pub batch_rng_pos: u128,
    pub dropout_rng_pos: u128,
    pub best_val_loss: f64,
    pub elapsed_s: f64,
    /// The running sums (`None` in checkpoints of earlier versions, which were written at
    /// evaluations only).
    pub interval: Option<Interval>,
    /// Whether the fitted biases were fitted ([`Progress::fitted`]; `None` in checkpoints of
    /// earlier versions).
    pub fitted: Option<bool>,
}

// The metadata keys, one per scalar.
const CORPUS: &str = "corpus_fingerprint";
const TEXTS: &str = "text_fingerprints";
const STEP: &str = "step";
const BATCH_RNG: &str = "batch_rng_pos";
const DROPOUT_RNG: &str = "dropout_rng_pos";
const BEST_VAL: &str = "best_val_loss";
const ELAPSED: &str = "elapsed_s";
const INTERVAL_LOSS: &str = "interval_loss";
const INTERVAL_STEPS: &str = "interval_steps";
const INTERVAL_SECONDS: &str = "interval_s";
const FITTED: &str = "fitted";

impl SavedState {
    /// The metadata to save: each scalar as text that parses back to the same value (Rust's
    /// float formatting is the shortest that round-trips).
    pub fn to_metadata(&self) -> HashMap<String, String> {
        let interval = self.interval.unwrap_or_default();
        let mut metadata = HashMap::from([
            (STEP, self.step.to_string()),
            (BATCH_RNG, self.batch_rng_pos.to_string()),
            (DROPOUT_RNG, self.dropout_rng_pos.to_string()),
            (BEST_VAL, self.best_val_loss.to_string()),
            (ELAPSED, self.elapsed_s.to_string()),
            (INTERVAL_LOSS, interval.loss.to_string()),
            (INTERVAL_STEPS, interval.steps.to_string()),
            (INTERVAL_SECONDS, interval.seconds.to_string()),
        ]);
        if let Some(corpus) = &self.corpus {
            metadata.insert(CORPUS, corpus.clone());
        }
        if let Some(texts) = &self.texts {
            metadata.insert(TEXTS, texts.clone());
        }
        if let Some(fitted) = self.fitted {
            metadata.insert(FITTED, fitted.to_string());
        }
        metadata
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect()
    }

    /// The state saved in `metadata`, read from the file `path` (named in errors).
    pub fn from_metadata(metadata: &HashMap<String, String>, path: &Path) -> Result<Self> {
        let interval = match metadata.contains_key(INTERVAL_STEPS) {
            true => Some(Interval {
                loss: metadata_value(metadata, INTERVAL_LOSS, path)?,
                steps: metadata_value(metadata, INTERVAL_STEPS, path)?,
                seconds: metadata_value(metadata, INTERVAL_SECONDS, path)?,
            }),
            false => None,
        };
        Ok(SavedState {
            corpus: metadata.get(CORPUS).cloned(),
            texts: metadata.get(TEXTS).cloned(),
            step: metadata_value(metadata, STEP, path)?,
            batch_rng_pos: metadata_value(metadata, BATCH_RNG, path)?,
            dropout_rng_pos: metadata_value(metadata, DROPOUT_RNG, path)?,
            best_val_loss: metadata_value(metadata, BEST_VAL, path)?,
            elapsed_s: metadata_value(metadata, ELAPSED, path)?,
            interval,
            fitted: match metadata.contains_key(FITTED) {
                true => Some(metadata_value(metadata, FITTED, path)?),
                false => None,
            },
        })
    }
}

/// The value under `key`, parsed; an error naming the file where it is missing or not valid.
fn metadata_value<T: std::str::FromStr>(
    metadata: &HashMap<String, String>,
    key: &str,
    path: &Path,
) -> Result<T> {
    metadata
        .get(key)
        .and_then(|v| v.parse().ok())
        .with_context(|| {
            format!(
                "{} has no valid `{key}` entry: it is not a checkpoint of this program",
                path.display()
            )
        })
}

#[cfg(test)]
mod tests {
    use super::{Interval, SavedState};
    use std::path::Path;

    #[test]
    fn a_state_reads_back_from_its_metadata_exactly() {
        let state = SavedState {
            corpus: Some("0123456789abcdef".into()),
            texts: Some("data.corpus=0123456789abcdef;data.validation=fedcba9876543210".into()),
            step: 1234,
            batch_rng_pos: u128::from(u64::MAX) + 7,
            dropout_rng_pos: 0,
            best_val_loss: 4.421_812_345_678_9,
            elapsed_s: 0.1 + 0.2,
            interval: Some(Interval {
                loss: f64::MIN_POSITIVE,
                steps: 3,
                seconds: 1e-300,
            }),
            fitted: Some(true),
        };
        let back = SavedState::from_metadata(&state.to_metadata(), Path::new("s")).unwrap();
        assert_eq!(back, state);
        // An earlier version's checkpoint: no fingerprint, no running sums, no fitted flag.
        let mut old = state.to_metadata();
        old.retain(|k, _| {
            let newer = ["text_fingerprints", "fitted"].contains(&k.as_str());
            !k.starts_with("interval") && !k.ends_with("_fingerprint") && !newer
        });
        let back = SavedState::from_metadata(&old, Path::new("s")).unwrap();
        let newer = (back.corpus, back.texts, back.interval, back.fitted);
        assert_eq!(newer, (None, None, None, None));
        old.remove("step");
        let missing = SavedState::from_metadata(&old, Path::new("s")).unwrap_err();
        assert!(
            missing.to_string().contains("no valid `step` entry"),
            "{missing}"
        );
    }
}
