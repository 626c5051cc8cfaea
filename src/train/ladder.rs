//! The ladder: one recipe per budget of minutes (configs/ladder/), each the best of a small sweep
//! on the reference machine (docs/results/ladder_*.json), and the choice `train --minutes M` makes
//! among them: the largest recipe whose steps this machine runs in M minutes, timed here on a few
//! steps of each, so that a faster machine gets a bigger model for the same minutes.

use crate::config::RunConfig;
use crate::data::{CharTokenizer, Corpus};
use crate::ops::Kernels;
use crate::train::setup::{complete_config, Setup};
use crate::train::state::Progress;
use crate::train::trainer::train_step;
use anyhow::Result;
use candle_core::Device;
use std::path::Path;
use std::time::Instant;

/// One recipe of the ladder, as it ran on the reference machine.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rung {
    /// The budget it was chosen for, in minutes on the reference machine.
    pub minutes: f64,
    /// Its config (max_iters: the steps it planned there), and the record of that run.
    pub config: &'static str,
    pub record: &'static str,
    /// The steps it ran there in its minutes.
    pub steps: usize,
    /// Its loss over the whole validation split there.
    pub loss: f64,
    /// The seconds a training step of it took there, timed as [`time_step`] times it (without
    /// the evaluations, which the run's minutes held too).
    pub step_s: f64,
    /// The characters its corpus (and the files read with it) held there: a corpus that holds
    /// others here was built otherwise, and is not the one its loss was measured on.
    pub vocab_size: usize,
}

impl Rung {
    /// The minutes its steps take on a machine where a step takes `step_s` seconds, at the
    /// reference machine's share of time for everything else.
    pub fn minutes_at(&self, step_s: f64) -> f64 {
        self.minutes * step_s / self.step_s
    }
}

/// The machine the ladder was measured on.
pub const REFERENCE: &str = "Intel Xeon (family 6, model 207), 2 cores, AVX-512 and AMX-BF16";

/// The rungs, smallest first (each below the loss of the one before it; of two rungs of the same
/// minutes, the second needs what the first does not). The last two train on data/tang_song.txt,
/// which is built, not shipped, with bf16 matmuls, which need AMX-BF16 or AVX512-BF16: where
/// either is not here, they are passed over.
pub const LADDER: [Rung; 6] = [
    Rung {
        minutes: 1.0,
        config: "configs/ladder/1min.toml",
        record: "docs/results/ladder_1min.json",
        steps: 1793,
        loss: 4.7406,
        step_s: 0.028,
        vocab_size: 6668,
    },
    Rung {
        minutes: 3.0,
        config: "configs/ladder/3min.toml",
        record: "docs/results/ladder_3min.json",
        steps: 5047,
        loss: 4.3635,
        step_s: 0.028,
        vocab_size: 6668,
    },
    Rung {
        minutes: 10.0,
        config: "configs/ladder/10min.toml",
        record: "docs/results/ladder_10min.json",
        steps: 16466,
        loss: 4.2228,
        step_s: 0.028,
        vocab_size: 6668,
    },
    Rung {
        minutes: 30.0,
        config: "configs/ladder/30min.toml",
        record: "docs/results/ladder_30min.json",
        steps: 12607,
        loss: 4.2168,
        step_s: 0.120,
        vocab_size: 6668,
    },
    Rung {
        minutes: 30.0,
        config: "configs/ladder/30min_bf16.toml",
        record: "docs/results/ladder_30min_bf16.json",
        steps: 21981,
        loss: 4.0686,
        step_s: 0.071,
        vocab_size: 6668,
    },
    Rung {
        minutes: 60.0,
        config: "configs/ladder/60min.toml",
        record: "docs/results/ladder_60min.json",
        steps: 43962,
        loss: 4.0617,
        step_s: 0.071,
        vocab_size: 6668,
    },
];

/// How far past the minutes a rung may run and still be chosen: the reference machine's own
/// timings of a rung vary by about this much (and the rung below ends far higher).
pub const TOLERANCE: f64 = 0.1;

/// The rung chosen for a budget, and why.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Choice {
    pub rung: Rung,
    /// Seconds a step of it took here; None where it could not be timed (it cannot run here).
    pub step_s: Option<f64>,
    /// Whether its steps fit in the minutes (false: no rung does, and the smallest is planned for
    /// fewer steps).
    pub fits: bool,
}

impl Choice {
    /// The lines `train` prints: the recipe, why, and the loss to expect.
    pub fn describe(&self, minutes: f64) -> String {
        let r = &self.rung;
        let pace = match self.step_s {
            Some(s) => format!(
                "{s:.3} s a step here, {:.3} s on the reference machine: its {} steps take about {:.1} minutes here",
                r.step_s,
                r.steps,
                r.minutes_at(s)
            ),
            None => "it could not be timed here".into(),
        };
        let (why, expect) = match self.fits {
            true => (
                "the largest recipe of the ladder whose steps fit",
                "expect about that, lower where this machine plans more steps",
            ),
            false => (
                "no recipe of the ladder fits: the smallest, planned for fewer steps",
                "expect a higher loss in fewer steps",
            ),
        };
        let unit = if r.minutes == 1.0 {
            "minute"
        } else {
            "minutes"
        };
        format!(
            "{} minutes and no config: {} ({why}; {pace}); on the reference machine ({REFERENCE}) it \
             ended at whole-split {:.4} in {} {unit} ({}): {expect}",
            crate::config::shown(minutes),
            r.config,
            r.loss,
            r.minutes,
            r.record
        )
    }
}

/// The largest rung whose steps take at most `minutes` (and [`TOLERANCE`]) at the pace
/// `step_seconds` finds (None: the rung cannot run here), trying the largest first; else the
/// smallest rung.
pub fn choose(
    minutes: f64,
    mut step_seconds: impl FnMut(&Rung) -> Result<Option<f64>>,
) -> Result<Choice> {
    let mut last = None;
    for rung in LADDER.iter().rev() {
        let Some(s) = step_seconds(rung)? else {
            continue;
        };
        if rung.minutes_at(s) <= minutes * (1.0 + TOLERANCE) {
            return Ok(Choice {
                rung: *rung,
                step_s: Some(s),
                fits: true,
            });
        }
        last = Some((*rung, s));
    }
    Ok(Choice {
        rung: LADDER[0],
        step_s: last.filter(|(rung, _)| *rung == LADDER[0]).map(|(_, s)| s),
        fits: false,
    })
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
/// run here: its corpus is not here or was built otherwise, or it cannot be set up (its memory,
/// a precision this CPU lacks).
pub fn time_step(rung: &Rung, device: &Device, kernels: Kernels) -> Result<Option<f64>> {
    time_step_of(rung, device, kernels)
        .map_err(|e| anyhow::anyhow!("the ladder's recipe {}: {e}", rung.config))
}

/// Why a rung of `cfg` cannot run here for want of its corpus (data/tang_song.txt is built, not
/// shipped): None where the corpus is here.
fn corpus_missing(cfg: &RunConfig) -> Option<String> {
    let corpus = &cfg.data.corpus;
    if Path::new(corpus).exists() {
        return None;
    }
    Some(match crate::data::how_to_build(Path::new(corpus)) {
        Some(how) => format!("it trains on {corpus}, which is built, not shipped ({how})"),
        None => format!("it trains on {corpus}, which is not here"),
    })
}

/// Why the corpus of `cfg` (completed here) is not the one `rung` was measured on: None where its
/// vocabulary is the same size. (A data/tang_song.txt built before the Song poems in other
/// characters were left out holds 9,782.)
fn other_corpus(rung: &Rung, cfg: &RunConfig) -> Option<String> {
    let (here, there) = (cfg.model.vocab_size, rung.vocab_size);
    (here != there).then(|| {
        let corpus = &cfg.data.corpus;
        let rebuild = crate::data::how_to_build(Path::new(corpus))
            .map(|how| format!(": move it away and build it again ({how})"))
            .unwrap_or_default();
        format!(
            "{corpus} and the files read with it hold {here} characters, not the {there} of the corpus it was measured on{rebuild}"
        )
    })
}

/// [`time_step`], its errors not yet naming the rung.
fn time_step_of(rung: &Rung, device: &Device, kernels: Kernels) -> Result<Option<f64>> {
    let cfg = RunConfig::load(Path::new(rung.config))?;
    if let Some(why) = corpus_missing(&cfg) {
        crate::note!("{}: not here: {why}; a smaller recipe instead", rung.config);
        return Ok(None);
    }
    let data = &cfg.data;
    let corpus = Corpus::load_with(&data.corpus, data.kind, data.others())?;
    let tokenizer = CharTokenizer::from_text(&corpus.vocabulary_text())?;
    let cfg = complete_config(cfg, &corpus, &tokenizer)?;
    if let Some(why) = other_corpus(rung, &cfg) {
        crate::note!("{}: not here: {why}; a smaller recipe instead", rung.config);
        return Ok(None);
    }
    let mut s = match Setup::new(cfg, &corpus, tokenizer, None, (device, kernels)) {
        Ok(s) => s,
        Err(e) => {
            crate::note!("{}: cannot run here ({e})", rung.config);
            return Ok(None);
        }
    };
    let mut p = Progress::new(s.cfg.train.seed);
    for _ in 0..WARM_STEPS {
        train_step(&mut s, &mut p)?;
    }
    let mut seconds: Vec<f64> = Vec::new();
    while seconds.len() < TIMED_STEPS
        || (seconds.iter().sum::<f64>() < TIMED_S && seconds.len() < MAX_TIMED_STEPS)
    {
        let start = Instant::now();
        train_step(&mut s, &mut p)?;
        seconds.push(start.elapsed().as_secs_f64());
    }
    seconds.sort_by(f64::total_cmp);
    Ok(Some(seconds[seconds.len() / 2]))
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
    fn a_rung_whose_corpus_was_built_otherwise_is_passed_over_with_the_reason() {
        let rung = LADDER[5];
        let mut cfg = RunConfig::load(Path::new(rung.config)).unwrap();
        cfg.model.vocab_size = rung.vocab_size;
        assert_eq!(other_corpus(&rung, &cfg), None);
        cfg.model.vocab_size = 9782;
        let why = other_corpus(&rung, &cfg).unwrap();
        assert!(why.contains("hold 9782 characters, not the 6668"), "{why}");
        assert!(why.contains("move it away and build it again"), "{why}");
    }

    /// A machine `speed` times as fast as the reference: each rung's step at its reference pace
    /// divided by `speed`.
    fn at_speed(speed: f64) -> impl FnMut(&Rung) -> Result<Option<f64>> {
        move |r: &Rung| Ok(Some(r.step_s / speed))
    }

    #[test]
    fn the_reference_machine_gets_the_rung_of_its_minutes() {
        for (i, rung) in LADDER.iter().enumerate() {
            // The rungs above it cannot run here: of two of the same minutes, the second needs
            // what the first does not.
            let choice = choose(rung.minutes, |r: &Rung| match LADDER[..=i].contains(r) {
                true => Ok(Some(r.step_s)),
                false => Ok(None),
            })
            .unwrap();
            assert_eq!(choice.rung, *rung);
            assert!(choice.fits);
        }
        let choice = choose(30.0, at_speed(1.0)).unwrap();
        assert_eq!(choice.rung.config, "configs/ladder/30min_bf16.toml");
        // Between two rungs: the one below; a little slower than the reference: still its rung,
        // a fifth slower: the one below.
        assert_eq!(choose(20.0, at_speed(1.0)).unwrap().rung, LADDER[2]);
        assert_eq!(choose(3.0, at_speed(0.95)).unwrap().rung, LADDER[1]);
        assert_eq!(choose(3.0, at_speed(0.8)).unwrap().rung, LADDER[0]);
    }

    #[test]
    fn a_faster_machine_climbs_and_a_slower_one_steps_down() {
        let choice = choose(10.0, at_speed(3.5)).unwrap();
        assert_eq!((choice.rung, choice.fits), (LADDER[4], true));
        let choice = choose(30.0, at_speed(0.5)).unwrap();
        assert_eq!((choice.rung, choice.fits), (LADDER[2], true));
        // Too slow for any rung: the smallest, said not to fit.
        let choice = choose(1.0, at_speed(0.5)).unwrap();
        assert_eq!((choice.rung, choice.fits), (LADDER[0], false));
        assert!(choice
            .describe(1.0)
            .contains("no recipe of the ladder fits"));
    }

    #[test]
    fn a_rung_that_cannot_run_here_is_passed_over() {
        let mut fast = at_speed(100.0);
        let choice = choose(30.0, |r: &Rung| match r.minutes >= 30.0 {
            true => Ok(None),
            false => fast(r),
        })
        .unwrap();
        assert_eq!(choice.rung, LADDER[2]);
    }

    #[test]
    fn the_rungs_climb() {
        for pair in LADDER.windows(2) {
            assert!(pair[0].minutes <= pair[1].minutes, "{pair:?}");
            assert!(pair[0].loss > pair[1].loss, "{pair:?}");
        }
    }
}
