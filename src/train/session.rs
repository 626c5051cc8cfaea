//! A training held in memory, with no run directory: the static page's Train button, in a
//! browser tab. The same setup, steps and evaluations as `train` (so the same bits for the same
//! config and text), without files, signals or a clock: the caller times the steps.

use super::metrics::{EvalSample, MetricRow};
use super::setup::{complete_config, new_vocabulary, Setup};
use super::state::Progress;
use super::trainer::{evaluate, evaluates_at, record_evaluation, train_step};
use crate::config::{Override, RunConfig};
use crate::data::{Corpus, RunText};
use anyhow::{Context, Result};
use candle_core::Device;
use std::path::Path;

/// Settings a run trained in memory cannot honour, each with why: it trains the text it is given,
/// not a file, and its caller times its steps.
const NOT_IN_MEMORY: [(&str, &str); 4] = [
    (
        "data.corpus",
        "it trains the text given to it (in the browser: data/tiny.txt, or a text pasted in the form), not a file",
    ),
    (
        "train.minutes",
        "it cannot plan its steps by the clock: give train.max_iters",
    ),
    (
        "data.validation",
        "it is measured on its own text's held-out part, not on a file",
    ),
    (
        "data.decay_corpus",
        "it trains the text given to it throughout, not a file",
    ),
];

/// The refusal of a setting of [`NOT_IN_MEMORY`].
fn not_in_memory((key, why): (&str, &str)) -> anyhow::Error {
    anyhow::anyhow!("{key}: not possible for a run trained in memory (the browser tab): {why}")
}

/// A new run of `config` on a text, trained step by step in memory.
pub struct Session {
    s: Setup,
    p: Progress,
}

impl Session {
    /// Refuses the settings in `overrides` that a run in memory cannot honour (a corpus file,
    /// minutes), each in one line, so that none is silently ignored.
    pub fn check_settings(overrides: &[Override]) -> Result<()> {
        for o in overrides {
            if let Some(&setting) = NOT_IN_MEMORY.iter().find(|(key, _)| o.key == *key) {
                return Err(not_in_memory(setting));
            }
        }
        Ok(())
    }

    /// A new run of `config` (its corpus file not read) on `text`, read as `config.data.kind`
    /// says; `origin` names the text in errors. Refused: a config planned by minutes.
    pub fn new(config: RunConfig, text: &str, origin: &str) -> Result<Session> {
        if config.train.minutes.is_some() {
            return Err(not_in_memory(NOT_IN_MEMORY[1]));
        }
        if config.data.validation.is_some() {
            return Err(not_in_memory(NOT_IN_MEMORY[2]));
        }
        if config.data.decay_corpus.is_some() {
            return Err(not_in_memory(NOT_IN_MEMORY[3]));
        }
        let corpus = Corpus::parse(text, Path::new(origin), config.data.kind)?;
        let tokenizer = new_vocabulary(&corpus.text(), &config.model)?;
        let run_text = RunText::from(corpus);
        let config = complete_config(config, &run_text, &tokenizer)?;
        let devices = (&Device::Cpu, Default::default());
        let s = Setup::new(config, &run_text, tokenizer, None, devices)?;
        let p = Progress::new(s.cfg.train.seed);
        Ok(Session { s, p })
    }

    /// The run's config, completed (vocabulary size, the kind its text was read as).
    pub fn config(&self) -> &RunConfig {
        &self.s.cfg
    }

    /// Steps done.
    pub fn step(&self) -> usize {
        self.p.step
    }

    /// Whether the run has done its `max_iters` steps.
    pub fn is_done(&self) -> bool {
        self.p.step >= self.s.cfg.train.max_iters
    }

    /// One optimiser step (after the last, the fitted biases fitted, as `train` does); its
    /// training loss.
    pub fn train_step(&mut self) -> Result<f64> {
        let loss = train_step(&mut self.s, &mut self.p)?;
        crate::train::fit::fit_after_last_step(&self.s, &mut self.p)?;
        Ok(loss)
    }

    /// Whether the step just done is one the run evaluates after.
    pub fn evaluates_now(&self) -> bool {
        self.p.step > 0 && evaluates_at(&self.s, self.p.step)
    }

    /// Evaluates the model as it is after the interval's steps, which took `seconds`: its metrics
    /// row and the poem it draws.
    pub fn evaluate(&mut self, seconds: f64) -> Result<(&MetricRow, &EvalSample)> {
        let val = evaluate(&self.s)?.context("the evaluation was interrupted")?;
        self.p.interval.seconds = seconds;
        self.p.elapsed_s += seconds;
        record_evaluation(&self.s, &mut self.p, val)?;
        Ok((
            &self.p.rows[self.p.rows.len() - 1],
            &self.p.samples[self.p.samples.len() - 1],
        ))
    }

    /// Every evaluation so far.
    pub fn rows(&self) -> &[MetricRow] {
        &self.p.rows
    }

    /// The model's parameters as they are now, by name.
    pub fn parameters(&self) -> Vec<(String, candle_core::Tensor)> {
        crate::train::checkpoint::named_params(&self.s.varmap, false)
    }

    /// The poem of every evaluation so far.
    pub fn samples(&self) -> &[EvalSample] {
        &self.p.samples
    }
}
