//! The learning-rate schedule: linear warm-up, then cosine decay to a tenth of the peak.

/// Learning rate at `step` (0-based) of a run of `max_iters` steps.
pub fn learning_rate(step: usize, peak: f64, warmup: usize, max_iters: usize) -> f64 {
    let min_lr = peak / 10.0;
    if step < warmup {
        return peak * (step + 1) as f64 / warmup as f64;
    }
    let decay_steps = max_iters.saturating_sub(warmup).max(1);
    let progress = ((step - warmup) as f64 / decay_steps as f64).min(1.0);
    min_lr + 0.5 * (1.0 + (std::f64::consts::PI * progress).cos()) * (peak - min_lr)
}
