//! The learning-rate schedules: linear warm-up, then cosine decay to a tenth of the peak
//! (nanoGPT's), or the peak held and a linear decay to a tenth over the last steps (WSD).

use crate::config::{RunConfig, ScheduleKind};

/// Learning rate at `step` (0-based) of a run of `max_iters` steps: cosine.
pub fn learning_rate(step: usize, peak: f64, warmup: usize, max_iters: usize) -> f64 {
    let min_lr = peak / 10.0;
    if step < warmup {
        return peak * (step + 1) as f64 / warmup as f64;
    }
    let decay_steps = max_iters.saturating_sub(warmup).max(1);
    let progress = ((step - warmup) as f64 / decay_steps as f64).min(1.0);
    min_lr + 0.5 * (1.0 + (std::f64::consts::PI * progress).cos()) * (peak - min_lr)
}

/// Learning rate at `step` (0-based) of a run of `max_iters` steps: warm-up, stable, decay. The
/// peak is held until the last ⌈`decay_fraction` · max_iters⌉ steps (never into the warm-up),
/// which fall linearly to a tenth of it at max_iters.
pub fn wsd_learning_rate(
    step: usize,
    peak: f64,
    warmup: usize,
    max_iters: usize,
    decay_fraction: f64,
) -> f64 {
    let min_lr = peak / 10.0;
    if step < warmup {
        return peak * (step + 1) as f64 / warmup as f64;
    }
    let decay_start = decay_start(max_iters, warmup, decay_fraction);
    if step < decay_start {
        return peak;
    }
    let progress = ((step - decay_start) as f64 / (max_iters - decay_start).max(1) as f64).min(1.0);
    peak - progress * (peak - min_lr)
}

/// WSD's first step of decay in a run of `max_iters` steps: ⌈`decay_fraction` · max_iters⌉ steps
/// before the end, at least one, never into the warm-up.
pub fn decay_start(max_iters: usize, warmup: usize, decay_fraction: f64) -> usize {
    let decay_steps = ((decay_fraction * max_iters as f64).ceil() as usize)
        .min(max_iters.saturating_sub(warmup))
        .max(1);
    max_iters.saturating_sub(decay_steps)
}

/// The learning rate at `step` of a run trained with `cfg`, for the peak `peak` (AdamW's
/// learning_rate, or Muon's).
pub fn rate_at(cfg: &RunConfig, step: usize, peak: f64) -> f64 {
    let (s, max_iters) = (&cfg.schedule, cfg.train.max_iters);
    match s.kind {
        ScheduleKind::Cosine => learning_rate(step, peak, s.warmup_iters, max_iters),
        ScheduleKind::Wsd => {
            wsd_learning_rate(step, peak, s.warmup_iters, max_iters, s.decay_fraction())
        }
    }
}
