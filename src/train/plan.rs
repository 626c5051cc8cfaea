//! The step count of a run given minutes of wall time (`--minutes`).
//!
//! The first plan is made at the end of the warm-up, from its step rate. Machines do not keep
//! their pace (a shared or throttled CPU runs 5–15 % slower after the warm-up than during it), so
//! the plan is made again at each evaluation from the pace of the run since the warm-up,
//! evaluations included, or from the pace since the last plan where that is slower (a machine
//! that keeps slowing would run past its time over the held stretch), until the schedule's last
//! stretch (its last `decay_fraction` of steps) begins: from there it holds, so that the decay
//! runs as planned. Under WSD the learning rate before the decay is the peak whatever the step
//! count, so a re-planned run trains exactly as a run given its final step count would; under the
//! cosine each new plan bends the rest of the curve.

use crate::config::{minutes_said, RunConfig, MAX_ITERS};
use crate::train::schedule::decay_start;

/// A step count planned for the time left.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Plan {
    pub steps: usize,
    /// Seconds per step (evaluations included after the warm-up, spread over their interval),
    /// and for what ends the run after its last step (the fit, the last evaluation, the final
    /// pass over the whole validation split).
    pub step_s: f64,
    pub end_s: f64,
    /// Whether the pace came from the warm-up (the first plan) or from the run since.
    pub first: bool,
}

impl Plan {
    /// The line `train` prints about the plan.
    pub fn describe(&self, minutes: f64) -> String {
        match self.first {
            true => format!(
                "planned {} steps for {}: the warm-up ran at {:.3} s a step (evaluations included) \
                 and the end (the fit, the last evaluation, the whole validation split) takes {:.0} s; re-planned at \
                 each evaluation until the last stretch of the schedule (saved as max_iters in the run's config.toml)",
                self.steps, minutes_said(minutes), self.step_s, self.end_s
            ),
            false => format!(
                "re-planned {} steps for {}: the run since its warm-up went at {:.3} s a step",
                self.steps, minutes_said(minutes), self.step_s
            ),
        }
    }
}

/// The share of the budget left out of the plan: the last stretch is held at the pace before it,
/// and a machine that keeps slowing runs it slower (#79: a 30-minute run ended 12 s late).
pub const RESERVE: f64 = 0.01;

/// What a plan needs to know of the run besides its timings.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    pub seconds: f64,
    pub warmup_iters: usize,
    pub eval_interval: usize,
    pub eval_iters: usize,
    pub decay_fraction: f64,
    /// Batches in the whole validation split (its final pass), each of a training batch's
    /// tokens.
    pub val_batches: f64,
}

impl Budget {
    pub fn new(cfg: &RunConfig, minutes: f64, val_batches: f64) -> Self {
        Budget {
            seconds: minutes * 60.0,
            warmup_iters: cfg.schedule.warmup_iters,
            eval_interval: cfg.train.eval_interval,
            eval_iters: cfg.train.eval_iters,
            decay_fraction: cfg.schedule.decay_fraction(),
            val_batches,
        }
    }

    /// The steps of `step_s` seconds each that fit in what is left of the budget, `spent` seconds
    /// of it gone and `end_s` kept for the run's end: all but [`RESERVE`] of it is planned.
    fn steps_left(&self, spent: f64, end_s: f64, step_s: f64) -> f64 {
        (self.seconds * (1.0 - RESERVE) - spent - end_s) / step_s
    }

    /// The first step of the last stretch of a run of `steps` steps (WSD's decay).
    pub fn last_stretch_start(&self, steps: usize) -> usize {
        decay_start(steps, self.warmup_iters, self.decay_fraction)
    }
}

/// Plans and re-plans one process's run.
pub struct Planner {
    budget: Budget,
    /// Each warm-up step's seconds.
    warmup_seconds: Vec<f64>,
    /// The seconds spent and the step when the warm-up ended, and the first plan then made.
    warmup_end: Option<(f64, usize, Plan)>,
    /// The seconds spent and the step at the last re-plan that was due (made or not).
    last_due: Option<(f64, usize)>,
    /// A batch's forward pass and the fit after the last step, timed ([`Planner::timed_end`]),
    /// and the evaluations' forward passes so far: their seconds and batches.
    forward_s: Option<f64>,
    fit_s: f64,
    evaluated: (f64, usize),
}

impl Planner {
    pub fn new(budget: Budget) -> Self {
        Planner {
            budget,
            warmup_seconds: Vec::new(),
            warmup_end: None,
            last_due: None,
            forward_s: None,
            fit_s: 0.0,
            evaluated: (0.0, 0),
        }
    }

    /// Whether what ends a run should be timed now, before the step `step` is told
    /// ([`Planner::after_step`]): at the warm-up's end, for the first plan.
    pub fn wants_timing_at(&self, step: usize) -> bool {
        step == self.budget.warmup_iters && self.forward_s.is_none()
    }

    /// A batch's forward pass takes `forward_s` (timed alone), the fit after the last step
    /// `fit_s` (0 without fitted inputs).
    pub fn timed_end(&mut self, forward_s: f64, fit_s: f64) {
        (self.forward_s, self.fit_s) = (Some(forward_s), fit_s);
    }

    /// The seconds of what ends a run after its last step, a batch's forward pass taking
    /// `forward_s`: the fit, the last evaluation and the final pass over the whole validation
    /// split.
    fn end_s(&self, forward_s: f64) -> f64 {
        let b = &self.budget;
        self.fit_s + (b.eval_iters as f64 + b.val_batches) * forward_s
    }

    /// An evaluation forwarded `batches` batches in `seconds` (its checkpoint left out).
    pub fn evaluated(&mut self, batches: usize, seconds: f64) {
        self.evaluated = (self.evaluated.0 + seconds, self.evaluated.1 + batches);
    }

    /// A batch's forward pass: as the evaluations ran them, else as one was timed, else a third
    /// of a training step of `train_s` (a forward and a backward pass).
    fn forward_s(&self, train_s: f64) -> f64 {
        match self.evaluated {
            (seconds, batches) if batches > 0 => seconds / batches as f64,
            _ => self.forward_s.unwrap_or(train_s / 3.0),
        }
    }

    /// After a training step to `step` that took `dt` seconds, of a run now planned for
    /// `planned` steps, with `spent` seconds of the budget gone: a new plan, if one is due (the
    /// warm-up's end, or an evaluation before the last stretch) and it differs.
    pub fn after_step(&mut self, step: usize, dt: f64, spent: f64, planned: usize) -> Option<Plan> {
        let b = self.budget;
        if step <= b.warmup_iters {
            self.warmup_seconds.push(dt);
            if step < b.warmup_iters {
                return None;
            }
            let plan = self.first_plan(step, spent);
            self.warmup_end = Some((spent, step, plan));
            return Some(plan);
        }
        let (warmup_spent, warmup_step, _) = self.warmup_end?;
        let due = step.is_multiple_of(b.eval_interval) && step < b.last_stretch_start(planned);
        if !due {
            return None;
        }
        // The pace since the warm-up, or since the last re-plan where slower, evaluations
        // included.
        let pace_since = |(then, at): (f64, usize)| (spent - then) / (step - at) as f64;
        let average = pace_since((warmup_spent, warmup_step));
        let recent = self.last_due.map_or(average, pace_since);
        self.last_due = Some((spent, step));
        let step_s = average.max(recent);
        // The end forwards batches alone, at the pace the evaluations forwarded theirs (their
        // checkpoints and samples are no guide to it).
        let end_s = self.end_s(self.forward_s(dt));
        let more = b.steps_left(spent, end_s, step_s).max(0.0);
        // Never so few steps that the last stretch should have begun already.
        let shortest = (step..).find(|&n| b.last_stretch_start(n) >= step)?;
        let plan = Plan {
            steps: steps_after(step, more).max(shortest),
            step_s,
            end_s,
            first: false,
        };
        // More steps by under 1 % is the clock's noise, not worth bending the schedule for; fewer
        // are taken however few, or such shortfalls add up to a run past its time.
        let added = plan.steps.saturating_sub(planned);
        (plan.steps < planned || added >= (planned / 100).max(1)).then_some(plan)
    }

    /// The plan at the warm-up's end, from its step rate (the first two steps left out when
    /// there are five or more, as they include one-time costs). An evaluation forwards
    /// eval_iters batches (a forward pass as timed, else a third of a step), and the end
    /// forwards the fit's batches, a last evaluation's and each batch of the whole validation
    /// split. Never fewer steps than done.
    fn first_plan(&self, done: usize, spent: f64) -> Plan {
        let b = &self.budget;
        let timed = match self.warmup_seconds.len() {
            n if n >= 5 => &self.warmup_seconds[2..],
            _ => &self.warmup_seconds[..],
        };
        let train_s = timed.iter().sum::<f64>() / timed.len().max(1) as f64;
        let forward_s = self.forward_s(train_s);
        let step_s = train_s + b.eval_iters as f64 * forward_s / b.eval_interval as f64;
        let end_s = self.end_s(forward_s);
        let more = b.steps_left(spent, end_s, step_s).max(0.0);
        Plan {
            steps: steps_after(done, more),
            step_s,
            end_s,
            first: true,
        }
    }
}

/// `done` steps and `more` to come, saturated at [`MAX_ITERS`] (a plan of years of minutes
/// must not wrap to a few steps, nor be saved as a count that a config file cannot hold).
fn steps_after(done: usize, more: f64) -> usize {
    // `as` saturates: infinity and anything past usize::MAX become usize::MAX.
    done.saturating_add(more as usize).min(MAX_ITERS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 100 s; warm-up of 10 steps; evaluations of 10 batches every 100 steps; the last fifth is
    /// the stretch; the final pass is 30 batches; no fit.
    fn budget() -> Budget {
        Budget {
            seconds: 100.0,
            warmup_iters: 10,
            eval_interval: 100,
            eval_iters: 10,
            decay_fraction: 0.2,
            val_batches: 30.0,
        }
    }

    /// What a forward pass of a batch costs on the simulated machines, as a share of a training
    /// step: more than a third (a graph's forward pass is slower than the engine's).
    const FORWARD: f64 = 0.45;

    /// Runs a planner over a machine that takes `pace(step)` seconds for each step, and FORWARD
    /// of that per batch for the evaluations (after every eval_interval steps, as `train` runs
    /// them), the fit and the final pass, a forward pass timed at the warm-up's end where
    /// `timed`; returns every plan made and the seconds the run took to its last planned step,
    /// its end included.
    fn simulate(pace: impl Fn(usize) -> f64) -> (Vec<Plan>, f64) {
        simulate_on(budget(), pace, 0.0, true)
    }

    /// [`simulate`] on budget `b`, each evaluation costing `saving` seconds more (its checkpoint).
    fn simulate_on(
        b: Budget,
        pace: impl Fn(usize) -> f64,
        saving: f64,
        timed: bool,
    ) -> (Vec<Plan>, f64) {
        simulate_with_fit(b, pace, saving, timed, 0.0)
    }

    /// [`simulate_on`], with a fit of `fit_s` seconds after the last step.
    fn simulate_with_fit(
        b: Budget,
        pace: impl Fn(usize) -> f64,
        saving: f64,
        timed: bool,
        fit_s: f64,
    ) -> (Vec<Plan>, f64) {
        let mut planner = Planner::new(b);
        let (mut planned, mut spent, mut plans) = (usize::MAX, 0.0, Vec::new());
        let mut step = 0;
        while step < planned {
            step += 1;
            spent += pace(step);
            if timed && planner.wants_timing_at(step) {
                spent += FORWARD * pace(step) + fit_s / 128.0;
                planner.timed_end(FORWARD * pace(step), fit_s);
            }
            if let Some(plan) = planner.after_step(step, pace(step), spent, planned) {
                planned = plan.steps;
                plans.push(plan);
            }
            if step == planned {
                spent += fit_s;
            }
            if step.is_multiple_of(b.eval_interval) || step == planned {
                let forward = b.eval_iters as f64 * FORWARD * pace(step);
                planner.evaluated(b.eval_iters, forward);
                spent += forward + saving;
            }
        }
        (plans, spent + b.val_batches * FORWARD * pace(step))
    }

    /// A simulated run of 100 s ended within its time, and at most 1 s before the time its
    /// reserve leaves.
    fn in_time(took: f64, plans: &[Plan]) {
        let earliest = 100.0 * (1.0 - RESERVE) - 1.0;
        assert!(
            (earliest..=100.0).contains(&took),
            "the run took {took} s of 100: {plans:?}"
        );
    }

    #[test]
    fn a_steady_machine_is_planned_from_its_warm_up_and_ends_near_its_time() {
        let (plans, took) = simulate(|_| 0.1);
        // The first plan, worked out: a step of 0.1 s and its share of an evaluation, 10 × 0.045
        // every 100 steps, is 0.1045 s; the end, 30 + 10 batches of 0.045 s, 1.8 s; (100 − 1 s of
        // warm-up − 0.045 s timing a forward pass − 1.8 s − 1 s of reserve) / 0.1045 + 10 steps done
        // = 930.1.
        assert_eq!(plans[0].steps, 930, "{plans:?}");
        in_time(took, &plans);
        // Without a forward pass timed, a third of a step is the guess: the evaluations cost
        // more than planned, and the re-plans from the run's own pace bring it back to its time.
        let (plans, took) = simulate_on(budget(), |_| 0.1, 0.0, false);
        assert_eq!(plans[0].steps, 945, "{plans:?}");
        in_time(took, &plans);
    }

    /// The fit after the last step forwards batches of its own (#78: a 30-second run took 38):
    /// planned, the run ends in its time even when no evaluation comes before its last stretch.
    #[test]
    fn the_fit_and_the_final_pass_are_in_the_plan() {
        let b = Budget {
            val_batches: 80.0,
            eval_interval: 1000,
            ..budget()
        };
        let (plans, took) = simulate_with_fit(b, |_| 0.05, 0.0, true, 3.0);
        assert_eq!(
            plans.len(),
            1,
            "no evaluation before the stretch: {plans:?}"
        );
        in_time(took, &plans);
    }

    /// A small model measured on a large held-out text (`[data] validation`): its evaluations
    /// cost mostly their checkpoints, which are no guide to the final pass over the held-out
    /// text; planned from them, the run stopped at half its time.
    #[test]
    fn evaluations_slowed_by_their_checkpoints_do_not_shorten_the_run() {
        let b = Budget {
            val_batches: 3000.0,
            eval_interval: 20,
            ..budget()
        };
        let (plans, took) = simulate_on(b, |_| 0.002, 0.05, true);
        assert!(
            (took - 100.0).abs() < 5.0,
            "the run took {took} s of 100: {plans:?}"
        );
    }

    #[test]
    fn a_machine_that_slows_after_the_warm_up_is_re_planned_and_ends_near_its_time() {
        let slowing = |step: usize| if step <= 10 { 0.1 } else { 0.12 };
        let (plans, took) = simulate(slowing);
        assert_eq!(
            plans[0].steps, 930,
            "the first plan trusts the warm-up: {plans:?}"
        );
        assert!(plans.len() >= 2, "{plans:?}");
        let last = plans.last().unwrap();
        assert!(last.steps < 820, "{plans:?}");
        // Held from the last stretch on: the last plan was made before it began.
        in_time(took, &plans);
    }

    /// A machine that keeps slowing (a laptop warming up, a shared host filling): the pace since
    /// the warm-up lags the pace now, and a plan made from it overshot the time by the
    /// slowing over the held last stretch (#79: 12 s past 30 minutes). Planned from the slower of
    /// the two, it ends within its time.
    #[test]
    fn a_machine_that_keeps_slowing_ends_within_its_time() {
        let slowing = |step: usize| 0.1 * (1.0 + 0.06 * step as f64 / 900.0);
        let (plans, took) = simulate(slowing);
        assert!(plans.len() >= 2, "{plans:?}");
        in_time(took, &plans);
    }

    #[test]
    fn the_plan_holds_once_the_last_stretch_begins() {
        let mut planner = Planner::new(budget());
        for step in 1..=10 {
            planner.after_step(step, 0.1, 0.1 * step as f64, usize::MAX);
        }
        // 990 steps planned: the stretch begins at step 792; an evaluation at 800 keeps the plan
        // however late the run is.
        assert_eq!(planner.after_step(800, 0.5, 99.0, 990), None);
        // Before it, a run far behind is cut, but only so far that its stretch begins now.
        let plan = planner.after_step(700, 0.5, 99.0, 990).unwrap();
        assert_eq!(budget().last_stretch_start(plan.steps), 700);
        assert!(budget().last_stretch_start(plan.steps - 1) < 700);
    }

    #[test]
    fn a_budget_of_ages_saturates_at_what_a_config_holds_and_never_wraps() {
        for minutes in [6e14, 1e15, 1e300, f64::MAX] {
            let mut planner = Planner::new(Budget {
                seconds: minutes * 60.0,
                ..budget()
            });
            let mut first = None;
            for step in 1..=10 {
                first = planner.after_step(step, 0.001, 0.001 * step as f64, usize::MAX);
            }
            assert_eq!(first.map(|p| p.steps), Some(MAX_ITERS), "{minutes} minutes");
            // Re-planned at an evaluation: still saturated, so no new plan.
            assert_eq!(planner.after_step(100, 0.001, 0.1, MAX_ITERS), None);
        }
    }

    #[test]
    fn the_last_stretch_never_reaches_into_the_warm_up() {
        let b = budget();
        assert_eq!(b.last_stretch_start(1000), 800);
        assert_eq!(b.last_stretch_start(12), 10);
        assert_eq!(b.last_stretch_start(10), 9);
    }
}
