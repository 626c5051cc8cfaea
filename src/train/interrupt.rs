//! Ctrl-C (SIGINT) and SIGTERM (what `kill`, systemd and container runtimes send) during training:
//! the first one asks the loop to save a checkpoint after the current step and quit (without the
//! final evaluation and samples, which a resumed run gives). Later ones never cut that save
//! short: one that arrives while it is being written says so; one that arrives after it ends
//! the process at once.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// Ctrl-C's signal, and the one `kill` sends, by their numbers (the same wherever they exist).
pub const SIGINT: i32 = 2;
pub const SIGTERM: i32 = 15;
#[cfg(unix)]
const _: () = assert!(SIGINT == libc::SIGINT && SIGTERM == libc::SIGTERM);

/// The signal that asked to stop, 0 if none.
static SIGNAL: AtomicI32 = AtomicI32::new(0);
/// Whether the checkpoint that the first signal asked for is on disk.
static SAVED: AtomicBool = AtomicBool::new(false);

/// Writes `message` to stderr with write(2), the one way of printing that is async-signal-safe.
#[cfg(unix)]
fn write_stderr(message: &str) {
    // SAFETY: write() is async-signal-safe and reads `message.len()` bytes of a live &str.
    unsafe {
        libc::write(2, message.as_ptr().cast(), message.len());
    }
}

#[cfg(unix)]
extern "C" fn on_signal(signal: libc::c_int) {
    if SIGNAL
        .compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst)
        .is_ok()
    {
        return;
    }
    if SAVED.load(Ordering::SeqCst) {
        write_stderr("\nquitting now: the checkpoint is on disk (continue with --resume)\n");
        // SAFETY: _exit() is async-signal-safe; the checkpoint's files are complete (atomic
        // writes) and the run's lock goes with the process.
        unsafe { libc::_exit(128 + signal) };
    }
    write_stderr("\nstopping: the checkpoint is being saved; the run quits once it is on disk\n");
}

/// Routes Ctrl-C and SIGTERM to [`requested`] instead of ending the process.
pub fn catch_ctrl_c() {
    #[cfg(unix)]
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only touches atomics and calls write() and _exit(), all
        // async-signal-safe.
        unsafe {
            libc::signal(
                signal,
                on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
            );
        }
    }
}

/// Asks the training to stop as the first Ctrl-C does (the page's server closing the pipe that
/// `train --stop-with-parent` watches); a signal that comes later counts as a second one.
pub fn request(signal: i32) {
    let _ = SIGNAL.compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst);
}

/// Whether Ctrl-C or SIGTERM arrived since [`catch_ctrl_c`].
pub fn requested() -> bool {
    signal().is_some()
}

/// The signal that asked to stop, if one did.
pub fn signal() -> Option<i32> {
    match SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// Notes that the run's checkpoint is on disk, so that a signal from now on (after the first)
/// ends the process at once.
pub fn checkpoint_saved() {
    SAVED.store(true, Ordering::SeqCst);
}
