//! Process-wide performance settings, applied once at the start of every binary.

/// Tunes the process for candle on the CPU; call first thing in `main`, before any thread starts.
pub fn init() {
    keep_freed_memory();
    fix_thread_count();
    serial_candle_ops();
}

/// Asks glibc's malloc to keep freed memory instead of returning every large buffer to the system:
/// candle allocates a fresh buffer for each op, and without this about half of a training step
/// goes to page faults. Does nothing on other C libraries.
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator tunables; it is called before any other thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 30);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
        libc::mallopt(libc::M_TOP_PAD, 64 << 20);
    }
}

/// Sets RAYON_NUM_THREADS to the machine's parallelism when the user has not: without it, candle
/// counts the physical cores by reading /proc/cpuinfo on every matrix multiply, which costs more
/// than the multiply itself when generating one token at a time.
fn fix_thread_count() {
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        // Called before any other thread starts, so no one reads the environment concurrently.
        std::env::set_var("RAYON_NUM_THREADS", threads.to_string());
    }
}

/// Runs candle's own CPU ops on the calling thread (CANDLE_NUM_THREADS=1, unless the user set
/// it): training steps share units of the batch (whole sequences) among the threads instead
/// ([`crate::train::shards`]), and candle's thread pool, one lock for all callers and a worker
/// that spins between ops, would make the units wait for each other.
fn serial_candle_ops() {
    if std::env::var_os("CANDLE_NUM_THREADS").is_none() {
        // Called before any other thread starts, so no one reads the environment concurrently.
        std::env::set_var("CANDLE_NUM_THREADS", "1");
    }
}
