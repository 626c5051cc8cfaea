//! Ctrl-C during training: the first one asks the loop to save a checkpoint and stop after the
//! current step; a second one ends the process at once (the atomic writes keep the last
//! checkpoint intact either way).

use std::sync::atomic::{AtomicBool, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_signal: libc::c_int) {
    REQUESTED.store(true, Ordering::SeqCst);
    // SAFETY: signal() is async-signal-safe; the default action makes a second Ctrl-C fatal.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_DFL);
    }
}

/// Routes Ctrl-C (SIGINT) to [`requested`] instead of ending the process.
pub fn catch_ctrl_c() {
    #[cfg(unix)]
    // SAFETY: the handler only stores to an atomic and resets the disposition, both
    // async-signal-safe.
    unsafe {
        libc::signal(
            libc::SIGINT,
            on_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
    }
}

/// Whether Ctrl-C was pressed since [`catch_ctrl_c`].
pub fn requested() -> bool {
    REQUESTED.load(Ordering::SeqCst)
}
