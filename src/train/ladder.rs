//! The ladder: one recipe per budget of minutes (configs/ladder/), each the best of a small sweep
//! on the reference machine, its run kept in a record ([`records`]); and the whole of what `train
//! --minutes M` does with them: when the ladder applies (no config, run or recipe of one's own),
//! and which rung runs: the largest whose steps this machine runs in M minutes, timed here on a
//! few steps of each, so that a faster machine gets a bigger model for the same minutes. A rung
//! that cannot run here as its record ran (its precision, its corpus, an edited config) is passed
//! over, saying why; where none can, the default config is planned for the minutes.

use crate::config::{minutes_said, Override, RunConfig};
use crate::data::RunText;
use crate::ops::{Kernels, Precision};
use crate::train::setup::{check_precision, complete_config, new_vocabulary, Setup};
use crate::train::state::Progress;
use crate::train::trainer::train_step;
use anyhow::Result;
use candle_core::Device;
use std::path::Path;
use std::time::Instant;

pub mod records;
pub use records::{Recorded, Rung, LADDER, REFERENCE};

/// How far past the minutes a rung may run and still be chosen: the reference machine's own
/// timings of a rung vary by about this much (and the rung below ends far higher).
pub const TOLERANCE: f64 = 0.1;

/// A rung timed here.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    pub rung: Rung,
    pub recorded: Recorded,
    /// Seconds a step of it took here.
    pub step_s: f64,
}

/// What the ladder offers for a budget here.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The largest rung whose steps fit.
    Fits(Choice),
    /// No rung fits: the smallest that runs here, which does not.
    TooSlow(Choice),
    /// No rung runs here as its record ran.
    NoneRuns,
}

impl Choice {
    /// Its pace here, and what its steps take here.
    fn pace(&self) -> String {
        let (r, recorded, s) = (&self.rung, &self.recorded, self.step_s);
        format!(
            "{s:.3} s a step here, {:.3} s on the reference machine: its {} steps take about {:.1} minutes here",
            recorded.step_s,
            recorded.steps,
            r.minutes_at(recorded, s)
        )
    }

    /// The line `train` prints where the rung fits: the recipe, why, and the loss to expect.
    pub fn describe(&self, minutes: f64) -> String {
        let (r, recorded) = (&self.rung, &self.recorded);
        format!(
            "{} and no config: {} (the largest recipe of the ladder whose steps fit; {}); on the reference machine \
             ({REFERENCE}) it ended at whole-split {:.4} in {} ({}); the loss to expect here follows the steps planned",
            minutes_said(minutes),
            r.config,
            self.pace(),
            recorded.loss,
            minutes_said(r.minutes),
            r.record
        )
    }
}

impl Outcome {
    /// The config `train --minutes` runs, and the line it prints about it.
    pub fn config_and_line(&self, minutes: f64) -> (&'static str, String) {
        let default =
            "configs/default.toml is planned for the minutes, with no recorded loss to expect";
        match self {
            Outcome::Fits(choice) => (choice.rung.config, choice.describe(minutes)),
            Outcome::TooSlow(smallest) => (
                "configs/default.toml",
                format!(
                    "{} and no config: no recipe of the ladder fits here (the smallest that runs here, {}: {}): {default}",
                    minutes_said(minutes),
                    smallest.rung.config,
                    smallest.pace()
                ),
            ),
            Outcome::NoneRuns => (
                "configs/default.toml",
                format!(
                    "{} and no config: no recipe of the ladder runs here as its record ran: {default}",
                    minutes_said(minutes)
                ),
            ),
        }
    }
}

/// The largest rung whose steps take at most `minutes` (and [`TOLERANCE`]) at the pace
/// `step_seconds` finds (None: the rung cannot run here), trying the largest first; else the
/// smallest that runs here, which does not fit; or none.
pub fn choose(
    minutes: f64,
    mut step_seconds: impl FnMut(&Rung, &Recorded) -> Result<Option<f64>>,
) -> Result<Outcome> {
    let mut smallest = None;
    for rung in LADDER.iter().rev() {
        let recorded = rung.recorded()?;
        let Some(step_s) = step_seconds(rung, &recorded)? else {
            continue;
        };
        let fits = rung.minutes_at(&recorded, step_s) <= minutes * (1.0 + TOLERANCE);
        let choice = Choice {
            rung: *rung,
            recorded,
            step_s,
        };
        if fits {
            return Ok(Outcome::Fits(choice));
        }
        smallest = Some(choice);
    }
    Ok(smallest.map_or(Outcome::NoneRuns, Outcome::TooSlow))
}

/// When the ladder applies: `train --minutes M` with no config, run to resume or to fine-tune,
/// and no setting that makes a recipe of its own (a precision only narrows the ladder to the
/// rungs of that precision). Its minutes and the precision asked for, if any.
pub fn applies(given_config: bool, overrides: &[Override]) -> Option<(f64, Option<Precision>)> {
    if given_config {
        return None;
    }
    let minutes = overrides.iter().rev().find(|o| o.key == "train.minutes")?;
    if overrides.iter().any(|o| o.key == "train.max_iters") {
        return None; // both given: the config's checks refuse it
    }
    if let Some(own) = overrides.iter().find(|o| changes_the_recipe(&o.key)) {
        crate::note!(
            "note: {} is given, so the ladder's recipes (configs/ladder/) are not used: configs/default.toml with it is planned for the minutes",
            crate::cli::escaped(&own.key)
        );
        return None;
    }
    let dtype = overrides.iter().rev().find(|o| o.key == "train.dtype");
    let dtype = dtype.and_then(|o| o.value.as_str()?.parse::<Precision>().ok());
    // Minutes that are no time are refused by the config's checks, before any timing.
    let value = &minutes.value;
    let minutes = value.as_float().or(value.as_integer().map(|m| m as f64));
    minutes
        .filter(|m| m.is_finite() && *m > 0.0)
        .map(|m| (m, dtype))
}

/// Settings that make a run other than the recorded one (any but the minutes, and the precision,
/// which narrows the ladder): given, the ladder's recipes and their records are not the run's.
fn changes_the_recipe(key: &str) -> bool {
    !["train.minutes", "train.dtype"].contains(&key)
}

/// The config `train --minutes M` runs where the ladder applies: the rung chosen here (of the
/// precision `dtype` where one is asked), said with the loss to expect; the default config where
/// no rung runs here.
pub fn config_for_minutes(
    minutes: f64,
    dtype: Option<Precision>,
    device: &Device,
    kernels: Kernels,
) -> Result<&'static str> {
    let outcome = choose(minutes, |rung, recorded| match dtype {
        Some(asked) if asked != recorded.config.train.dtype => Ok(None),
        _ => time_step(rung, recorded, device, kernels),
    })?;
    let (config, line) = outcome.config_and_line(minutes);
    crate::note!("{line}");
    Ok(config)
}

/// Steps timed per rung (their median is its pace), after the steps that warm it up: at least
/// `TIMED_STEPS`, and more for a fast step, until `TIMED_S` seconds have passed (at most
/// `MAX_TIMED_STEPS`).
const WARM_STEPS: usize = 2;
const TIMED_STEPS: usize = 5;
const TIMED_S: f64 = 0.5;
const MAX_TIMED_STEPS: usize = 50;

/// The seconds a training step of `rung` takes on `device`: a few steps of a model drawn for the
/// purpose (the run itself starts afresh). None, with the reason on stderr, where the rung cannot
/// run here as its record ran: a precision this CPU lacks, a config edited since, a corpus that
/// is not here, cannot be read as the rung reads it or is not the one it ran on, or a set-up
/// that fails (its memory).
pub fn time_step(
    rung: &Rung,
    recorded: &Recorded,
    device: &Device,
    kernels: Kernels,
) -> Result<Option<f64>> {
    match ready(rung, recorded, device, kernels) {
        Ok(mut s) => Ok(Some(median_step(&mut s)?)),
        Err(why) => {
            crate::note!("{}: not here: {why}; a smaller recipe instead", rung.config);
            Ok(None)
        }
    }
}

/// The rung set up to train here, or why it cannot run as its record ran.
fn ready(
    rung: &Rung,
    recorded: &Recorded,
    device: &Device,
    kernels: Kernels,
) -> Result<Setup, String> {
    let cfg = RunConfig::load(Path::new(rung.config)).map_err(|e| e.to_string())?;
    check_precision(cfg.train.dtype, device, kernels).map_err(|e| e.to_string())?;
    if let Some(why) = rung.edited(&cfg, &recorded.config) {
        return Err(why);
    }
    if let Some(why) = corpus_missing(&cfg) {
        return Err(why);
    }
    let data = &cfg.data;
    let run_text = RunText::load(&data.corpus, data.kind, data.others())
        .map_err(|e| format!("its corpus cannot be read as it reads it ({e})"))?;
    if let Some(why) = other_text(&run_text, &recorded.texts) {
        return Err(why);
    }
    let set_up = || -> Result<Setup> {
        let tokenizer = new_vocabulary(&run_text.vocabulary_text(), &cfg.model)?;
        let cfg = complete_config(cfg, &run_text, &tokenizer)?;
        Setup::new(cfg, &run_text, tokenizer, None, (device, kernels))
    };
    set_up().map_err(|e| format!("it cannot be set up ({})", crate::cli::one_line(&e)))
}

/// Why a rung of `cfg` cannot run here for want of its corpus (a file removed): None where the
/// corpus is here.
fn corpus_missing(cfg: &RunConfig) -> Option<String> {
    let corpus = &cfg.data.corpus;
    if Path::new(corpus).exists() {
        return None;
    }
    Some(match crate::data::how_to_build(Path::new(corpus)) {
        Some(how) => format!("it trains on {corpus}, which is not here ({how})"),
        None => format!("it trains on {corpus}, which is not here"),
    })
}

/// Why the texts of `corpus` are not those the rung ran on (their fingerprints `ran`): a corpus
/// built otherwise (or edited), or a changed validation or decay file, would not give the
/// recorded loss. None where they are.
fn other_text(run_text: &RunText, ran: &str) -> Option<String> {
    let (key, path) = run_text.changed_text(ran)?;
    let rebuild = crate::data::how_to_build(Path::new(&path))
        .map(|how| format!(": move it away and build it again ({how})"))
        .unwrap_or_default();
    Some(format!(
        "{path} ({key}) is not the text it was measured on{rebuild}"
    ))
}

/// The median seconds of a training step of `s`, after its first steps.
fn median_step(s: &mut Setup) -> Result<f64> {
    let mut p = Progress::new(s.cfg.train.seed);
    for _ in 0..WARM_STEPS {
        train_step(s, &mut p)?;
    }
    let mut seconds: Vec<f64> = Vec::new();
    while seconds.len() < TIMED_STEPS
        || (seconds.iter().sum::<f64>() < TIMED_S && seconds.len() < MAX_TIMED_STEPS)
    {
        let start = Instant::now();
        train_step(s, &mut p)?;
        seconds.push(start.elapsed().as_secs_f64());
    }
    seconds.sort_by(f64::total_cmp);
    Ok(seconds[seconds.len() / 2])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rung_whose_corpus_is_not_here_is_passed_over_with_the_reason() {
        let mut cfg = RunConfig::default();
        cfg.data.corpus = "data/poems.txt".into();
        assert_eq!(corpus_missing(&cfg), None);
        cfg.data.corpus = "no/such/corpus.txt".into();
        let why = corpus_missing(&cfg).unwrap();
        assert!(
            why.contains("no/such/corpus.txt, which is not here"),
            "{why}"
        );
    }

    #[test]
    fn an_edited_rung_is_named_with_what_differs() {
        let rung = LADDER[3];
        let ran = rung.recorded().unwrap().config;
        let cfg = RunConfig::load(Path::new(rung.config)).unwrap();
        assert_eq!(
            rung.edited(&cfg, &ran),
            None,
            "the shipped rung is its record's"
        );
        let mut small = cfg.clone();
        (small.model.n_layer, small.model.n_embd) = (1, 64);
        let why = rung.edited(&small, &ran).unwrap();
        assert!(
            why.contains("model.n_embd: recorded 256, now 64; model.n_layer: recorded 4, now 1"),
            "{why}"
        );
    }

    /// The figures of each rung, read once: the pace of a machine `speed` times as fast as the
    /// reference is each rung's reference pace divided by `speed`.
    fn at_speed(speed: f64) -> impl FnMut(&Rung, &Recorded) -> Result<Option<f64>> {
        move |_, r: &Recorded| Ok(Some(r.step_s / speed))
    }

    /// The rung that fits, or what else the ladder says.
    fn fitting(outcome: Outcome) -> Rung {
        match outcome {
            Outcome::Fits(choice) => choice.rung,
            other => panic!("no rung fits: {other:?}"),
        }
    }

    #[test]
    fn the_reference_machine_gets_the_rung_of_its_minutes() {
        for (i, rung) in LADDER.iter().enumerate() {
            // The rungs above it cannot run here: of two of the same minutes, the second needs
            // what the first does not.
            let outcome = choose(rung.minutes, |r, recorded| match LADDER[..=i].contains(r) {
                true => Ok(Some(recorded.step_s)),
                false => Ok(None),
            });
            assert_eq!(fitting(outcome.unwrap()), *rung);
        }
        let rung = |minutes, speed| fitting(choose(minutes, at_speed(speed)).unwrap());
        assert_eq!(rung(30.0, 1.0).config, "configs/ladder/30min_bf16.toml");
        // Between two rungs: the one below; a little slower than the reference: still its rung,
        // a fifth slower: the one below.
        assert_eq!(rung(20.0, 1.0), LADDER[2]);
        assert_eq!(rung(3.0, 0.95), LADDER[1]);
        assert_eq!(rung(3.0, 0.8), LADDER[0]);
    }

    #[test]
    fn a_faster_machine_climbs_and_a_slower_one_steps_down() {
        assert_eq!(fitting(choose(10.0, at_speed(3.5)).unwrap()), LADDER[4]);
        assert_eq!(fitting(choose(30.0, at_speed(0.5)).unwrap()), LADDER[2]);
        // Too slow for any rung: the default config, planned for the minutes, no loss promised.
        let outcome = choose(1.0, at_speed(0.5)).unwrap();
        assert!(
            matches!(&outcome, Outcome::TooSlow(c) if c.rung == LADDER[0]),
            "{outcome:?}"
        );
        let (config, line) = outcome.config_and_line(1.0);
        assert_eq!(config, "configs/default.toml");
        assert!(
            line.starts_with("1 minute and no config: no recipe of the ladder fits here"),
            "{line}"
        );
        assert!(!line.contains("whole-split"), "{line}");
    }

    #[test]
    fn a_rung_that_cannot_run_here_is_passed_over_and_none_may_run() {
        let mut fast = at_speed(100.0);
        let outcome = choose(30.0, |r, recorded| match r.minutes >= 30.0 {
            true => Ok(None),
            false => fast(r, recorded),
        });
        assert_eq!(fitting(outcome.unwrap()), LADDER[2]);
        // Too slow for any that runs: the smallest of those is named, and not run.
        let outcome = choose(0.5, |r, recorded| match r.minutes >= 3.0 {
            true => Ok(Some(recorded.step_s)),
            false => Ok(None),
        })
        .unwrap();
        assert!(
            matches!(&outcome, Outcome::TooSlow(c) if c.rung == LADDER[1]),
            "{outcome:?}"
        );
        // None runs here (#78: the smallest was run under its recorded loss).
        let outcome = choose(30.0, |_, _| Ok(None)).unwrap();
        assert_eq!(outcome, Outcome::NoneRuns);
        assert_eq!(outcome.config_and_line(30.0).0, "configs/default.toml");
    }

    #[test]
    fn the_rungs_climb() {
        for pair in LADDER.windows(2) {
            let (low, high) = (pair[0].recorded().unwrap(), pair[1].recorded().unwrap());
            assert!(pair[0].minutes <= pair[1].minutes, "{pair:?}");
            assert!(low.loss > high.loss, "{pair:?}");
        }
    }

    #[test]
    fn the_ladder_applies_to_minutes_alone_and_a_precision_narrows_it() {
        let set = |text: &str| Override::parse(text).unwrap();
        let minutes_again = || set("train.minutes=30");
        let minutes = set("train.minutes=30");
        assert_eq!(applies(false, &[minutes.clone()]), Some((30.0, None)));
        assert_eq!(
            applies(true, &[minutes.clone()]),
            None,
            "a config of one's own"
        );
        let f32 = set("train.dtype=\"f32\"");
        assert_eq!(
            applies(false, &[minutes.clone(), f32]),
            Some((30.0, Some(Precision::F32)))
        );
        let own = set("model.n_layer=1");
        assert_eq!(applies(false, &[minutes.clone(), own]), None);
        let steps = set("train.max_iters=10");
        assert_eq!(applies(false, &[minutes, steps]), None);
        assert_eq!(applies(false, &[set("train.seed=3")]), None, "no minutes");
        // A seed or an evaluation of one's own is another run than the recorded one.
        for own in [
            "train.seed=7",
            "train.eval_iters=5",
            "train.eval_interval=100",
        ] {
            assert_eq!(applies(false, &[minutes_again(), set(own)]), None, "{own}");
        }
    }
}
