//! The loss to expect of a run of one of the ladder's recipes at the steps planned for it here:
//! a machine slower or faster than the reference plans fewer or more steps than the rung's record
//! ran, and ends higher or lower.
//!
//! The estimate comes from the records of the same recipe (the rungs whose configs differ in their
//! steps alone: the 1-, 3- and 10-minute rungs; the 30-minute bf16 rung and the 60-minute one), on
//! the curve L(N) = E + A / N through the two records nearest N (between them, or the last two
//! past them). The 1- and 10-minute records put the 3-minute one within 0.003 of its 4.3635, and
//! the three predict a Zen 3's 23,169 steps of the 10-minute rung at 4.205 against the 4.2012 it
//! reached (docs/experiments.md, section 24). A recipe with one record is expected at its record's
//! loss, said as such.

use crate::config::RunConfig;
use crate::train::ladder::records::{same_recipe, Recorded, LADDER};
use anyhow::Result;

/// The records of a recipe.
#[derive(Debug, Clone, PartialEq)]
pub struct Expected {
    /// (steps, whole-split loss) of each record, fewest steps first.
    points: Vec<(usize, f64)>,
    /// Their files.
    records: Vec<&'static str>,
}

impl Expected {
    /// The records of the recipe `cfg` runs on the texts of fingerprints `texts` (a run's
    /// [`crate::train::setup::Setup`]): None where no rung of the ladder ran it.
    pub fn of(cfg: &RunConfig, texts: &str) -> Result<Option<Expected>> {
        let mut found: Vec<(Recorded, &'static str)> = Vec::new();
        for rung in &LADDER {
            let recorded = rung.recorded()?;
            if recorded.texts == texts && same_recipe(cfg, &recorded.config) {
                found.push((recorded, rung.record));
            }
        }
        found.sort_by_key(|(recorded, _)| recorded.steps);
        Ok((!found.is_empty()).then(|| Expected {
            points: found.iter().map(|(r, _)| (r.steps, r.loss)).collect(),
            records: found.iter().map(|(_, file)| *file).collect(),
        }))
    }

    /// The whole-split loss to expect after `steps` steps: None where they are too far from
    /// the records' for the curve to say: under nine tenths of the fewest (below its records the
    /// curve rises too fast: it says 5.309 for 909 steps of the 1-minute rung, which reached
    /// 5.072), or over four times the most.
    pub fn at(&self, steps: usize) -> Option<f64> {
        let (first, last) = (self.points[0], self.points[self.points.len() - 1]);
        if 10 * steps < 9 * first.0 || steps > 4 * last.0 {
            return None;
        }
        let i = match self.points.len() {
            1 => return Some(first.1),
            // The pair around `steps`, or the nearest pair at either end.
            len => (self.points.iter())
                .position(|&(s, _)| s >= steps)
                .unwrap_or(len - 1)
                .clamp(1, len - 1),
        };
        let ((n_a, l_a), (n_b, l_b)) = (self.points[i - 1], self.points[i]);
        let x = |n: usize| 1.0 / n as f64;
        let slope = (l_a - l_b) / (x(n_a) - x(n_b));
        Some(l_b + slope * (x(steps) - x(n_b)))
    }

    /// The line `train` prints with a plan of `steps` steps.
    pub fn describe(&self, steps: usize) -> String {
        let runs: Vec<String> = (self.points.iter().zip(&self.records))
            .map(|((s, loss), file)| format!("{s} steps: {loss:.4}, {file}"))
            .collect();
        let runs = runs.join("; ");
        match (self.at(steps), self.points.len()) {
            (None, _) => format!(
                "no loss to expect at {steps} steps: too far from the steps of this recipe's records ({runs})"
            ),
            (Some(loss), 1) => format!(
                "expect whole-split about {loss:.3} ({runs}: its one record, not scaled to the {steps} steps planned here)"
            ),
            (Some(loss), _) => format!(
                "expect whole-split about {loss:.3} at {steps} steps (on L = E + A / steps through this recipe's records: {runs})"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tang() -> Expected {
        Expected {
            points: vec![(1793, 4.7406), (5047, 4.3635), (16466, 4.2228)],
            records: vec!["a", "b", "c"],
        }
    }

    #[test]
    fn the_records_themselves_are_expected_at_their_steps() {
        let e = tang();
        for &(steps, loss) in &e.points {
            let at = e.at(steps).unwrap();
            assert!((at - loss).abs() < 1e-12, "{steps}: {at}");
        }
    }

    #[test]
    fn between_and_past_the_records_the_curve_goes_as_one_over_the_steps() {
        let e = tang();
        // L = E + A/N through (5047, 4.3635) and (16466, 4.2228): A = 1023.9, E = 4.16062.
        let a = (4.3635 - 4.2228) / (1.0 / 5047.0 - 1.0 / 16466.0);
        let e_ = 4.2228 - a / 16466.0;
        for steps in [8000, 23169, 60_000] {
            let want = e_ + a / steps as f64;
            assert!((e.at(steps).unwrap() - want).abs() < 1e-9, "{steps}");
        }
        // The Zen 3's run of issue #79: 23,169 steps, 4.2012 reached.
        let zen3 = e.at(23169).unwrap();
        assert!((zen3 - 4.2012).abs() < 0.01, "{zen3}");
        // A few steps fewer than the first record: on its pair's curve, higher.
        assert!(e.at(1700).unwrap() > 4.7406 + 0.02);
        // Monotone: more steps, lower loss.
        let curve: Vec<f64> = (4..130).map(|k| e.at(k * 500).unwrap()).collect();
        assert!(curve.windows(2).all(|w| w[1] < w[0]));
    }

    #[test]
    fn one_record_is_expected_as_it_is_and_says_so() {
        let e = Expected {
            points: vec![(12607, 4.2168)],
            records: vec!["docs/results/ladder_30min.json"],
        };
        assert_eq!(e.at(12000), Some(4.2168));
        assert!(
            e.describe(12000).contains("not scaled"),
            "{}",
            e.describe(12000)
        );
    }

    #[test]
    fn steps_far_from_the_records_expect_nothing() {
        let e = tang();
        assert_eq!(e.at(1613), None, "under nine tenths of 1,793");
        assert!(e.at(1614).is_some());
        assert!(e.at(4 * 16466).is_some());
        assert_eq!(e.at(4 * 16466 + 1), None);
        assert_eq!(e.at(0), None);
        assert!(e.describe(10).starts_with("no loss to expect at 10 steps"));
    }
}
