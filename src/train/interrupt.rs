//! Ctrl-C (SIGINT) and SIGTERM (what `kill`, systemd and container runtimes send) during training:
//! the first one asks the loop to save a checkpoint and stop after the current step; a second one
//! ends the process at once (the atomic writes keep the last checkpoint intact either way).

use std::sync::atomic::{AtomicI32, Ordering};

/// The signal that asked to stop, 0 if none.
static SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(signal: libc::c_int) {
    SIGNAL.store(signal, Ordering::SeqCst);
    // SAFETY: signal() is async-signal-safe; the default action makes a second signal fatal.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_DFL);
        libc::signal(libc::SIGTERM, libc::SIG_DFL);
    }
}

/// Routes Ctrl-C and SIGTERM to [`requested`] instead of ending the process.
pub fn catch_ctrl_c() {
    #[cfg(unix)]
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic and resets the dispositions, all
        // async-signal-safe.
        unsafe {
            libc::signal(
                signal,
                on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
            );
        }
    }
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
