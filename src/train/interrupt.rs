//! Ctrl-C (SIGINT) and SIGTERM (what `kill`, systemd and container runtimes send; on Windows,
//! Ctrl-C, Ctrl-Break and closing the console) during training:
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

/// What a stop request does: the first one asks the loop to stop; a later one says the save goes
/// on, or, once the checkpoint is on disk, ends the process at once.
#[cfg(any(unix, windows))]
fn on_stop_request(signal: i32) {
    if SIGNAL
        .compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst)
        .is_ok()
    {
        return;
    }
    if SAVED.load(Ordering::SeqCst) {
        write_stderr("\nquitting now: the checkpoint is on disk (continue with --resume)\n");
        quit(128 + signal);
    }
    write_stderr("\nstopping: the checkpoint is being saved; the run quits once it is on disk\n");
}

/// Writes `message` to stderr with write(2), the one way of printing that is async-signal-safe.
#[cfg(unix)]
fn write_stderr(message: &str) {
    // SAFETY: write() is async-signal-safe and reads `message.len()` bytes of a live &str.
    unsafe {
        libc::write(2, message.as_ptr().cast(), message.len());
    }
}

/// Ends the process with `code` at once, from a signal handler.
#[cfg(unix)]
fn quit(code: i32) -> ! {
    // SAFETY: _exit() is async-signal-safe; the checkpoint's files are complete (atomic
    // writes) and the run's lock goes with the process.
    unsafe { libc::_exit(code) }
}

#[cfg(unix)]
extern "C" fn on_signal(signal: libc::c_int) {
    on_stop_request(signal);
}

/// Windows calls console handlers on a thread of their own: printing and exiting are safe there.
#[cfg(windows)]
fn write_stderr(message: &str) {
    eprint!("{message}");
}

#[cfg(windows)]
fn quit(code: i32) -> ! {
    std::process::exit(code)
}

/// Ctrl-C and Ctrl-Break stop the run as SIGINT does; closing the console, logging off and
/// shutting down as SIGTERM does. For those three Windows ends the process once the handler
/// returns (or 5 s after the event), so the handler waits for the checkpoint, up to 4.5 s.
#[cfg(windows)]
unsafe extern "system" fn on_console_event(event: u32) -> windows_sys::core::BOOL {
    use windows_sys::Win32::System::Console::{CTRL_BREAK_EVENT, CTRL_C_EVENT};
    let interrupt = event == CTRL_C_EVENT || event == CTRL_BREAK_EVENT;
    on_stop_request(if interrupt { SIGINT } else { SIGTERM });
    if !interrupt {
        let start = std::time::Instant::now();
        while !SAVED.load(Ordering::SeqCst) && start.elapsed().as_secs_f64() < 4.5 {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    1 // handled: the process goes on
}

/// Routes Ctrl-C and SIGTERM (on Windows: Ctrl-C, Ctrl-Break and closing the console) to
/// [`requested`] instead of ending the process.
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
    #[cfg(windows)]
    // SAFETY: registers a handler with the signature Windows calls; it touches atomics, prints,
    // sleeps and exits, all allowed on the thread Windows starts for it.
    unsafe {
        windows_sys::Win32::System::Console::SetConsoleCtrlHandler(Some(on_console_event), 1);
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
