//! A small team of threads for the decoder's parallel phases, with a fast hand-over.
//!
//! A generation step has about nine parallel phases of ~10 µs each. Handing a phase to rayon's
//! pool cost 1–2 µs in a microbenchmark (the idle worker has to be woken or to find the job by
//! stealing). The team's helpers instead wait for the next phase spinning on a counter; after
//! [`SPIN`] without work they park, so an idle decoder does not hold a core.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// How long a helper spins for the next phase before it parks.
const SPIN: Duration = Duration::from_micros(200);

/// A phase: called once with each member's index, `0..size`.
type Job = dyn Fn(usize) + Sync;

/// The current phase's job, its lifetime erased: [`Team::run`] keeps it alive until every
/// helper has finished with it.
#[derive(Clone, Copy)]
struct JobRef(*const Job);

// SAFETY: the job is `Sync`, and `Team::run` does not return while a helper may still call it.
unsafe impl Send for JobRef {}

/// What the members share.
struct Shared {
    /// Bumped for each phase; a helper runs the job when it sees the count change.
    phase: AtomicUsize,
    /// Helpers done with the current phase.
    done: AtomicUsize,
    /// The current phase's job (`None` between phases).
    job: Mutex<Option<JobRef>>,
    /// Set when the team is dropped.
    stop: AtomicBool,
    /// Set when a helper's job panicked.
    panicked: AtomicBool,
}

/// The calling thread plus `size − 1` helper threads, which live as long as the team.
pub(crate) struct Team {
    shared: Arc<Shared>,
    helpers: Vec<JoinHandle<()>>,
    /// Held by the caller of [`Team::run`]: callers on several threads take turns.
    leader: Mutex<()>,
}

impl Team {
    /// A team of `size` members (at least one: the caller of [`Team::run`]); smaller if the
    /// system refuses more threads.
    pub(crate) fn new(size: usize) -> Team {
        let shared = Arc::new(Shared {
            phase: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            job: Mutex::new(None),
            stop: AtomicBool::new(false),
            panicked: AtomicBool::new(false),
        });
        let helpers = (1..size.max(1))
            .map_while(|index| {
                let shared = Arc::clone(&shared);
                thread::Builder::new()
                    .name(format!("decoder-{index}"))
                    .spawn(move || help(&shared, index))
                    .ok()
            })
            .collect();
        Team {
            shared,
            helpers,
            leader: Mutex::new(()),
        }
    }

    /// Members, the caller included.
    pub(crate) fn size(&self) -> usize {
        self.helpers.len() + 1
    }

    /// Runs `job(i)` for every member i, `job(0)` on the calling thread, and returns when all
    /// are done. A panic in any of them is raised here. Calls from several threads take turns;
    /// a job must not call `run` on its own team.
    pub(crate) fn run(&self, job: &(dyn Fn(usize) + Sync)) {
        if self.helpers.is_empty() {
            return job(0);
        }
        let _turn = lock(&self.leader);
        let shared = &*self.shared;
        // SAFETY: only the lifetime is erased; this function waits below until every helper has
        // finished calling the job, and clears it before returning.
        let erased = unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync), *const Job>(job) };
        *lock(&shared.job) = Some(JobRef(erased));
        shared.done.store(0, Ordering::Relaxed);
        shared.phase.fetch_add(1, Ordering::Release);
        for helper in &self.helpers {
            helper.thread().unpark();
        }
        let own = catch_unwind(AssertUnwindSafe(|| job(0)));
        let waiting = Instant::now();
        while shared.done.load(Ordering::Acquire) < self.helpers.len() {
            // A helper that lost its core gets it back sooner if this thread yields.
            if waiting.elapsed() < SPIN {
                std::hint::spin_loop();
            } else {
                thread::yield_now();
            }
        }
        *lock(&shared.job) = None;
        if let Err(payload) = own {
            resume_unwind(payload);
        }
        if shared.panicked.swap(false, Ordering::Relaxed) {
            panic!("a decoder thread panicked");
        }
    }
}

impl Drop for Team {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        for helper in self.helpers.drain(..) {
            helper.thread().unpark();
            // A helper only panics outside a job if the team's state is broken; nothing to add.
            let _ = helper.join();
        }
    }
}

/// Locks `value` whether or not a panic poisoned it: the job slot (a plain pointer) or a
/// member's part of a phase's items, which a panic leaves as valid as before.
pub(crate) fn lock<T>(value: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    value.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A helper's life: wait for a phase (spinning, then parked), run its part, report, repeat.
fn help(shared: &Shared, index: usize) {
    // From the first phase on, even if it began before this thread did.
    let mut seen = 0;
    loop {
        let idle = Instant::now();
        loop {
            if shared.stop.load(Ordering::Acquire) {
                return;
            }
            let phase = shared.phase.load(Ordering::Acquire);
            if phase != seen {
                seen = phase;
                break;
            }
            if idle.elapsed() < SPIN {
                std::hint::spin_loop();
            } else {
                // `run` unparks after moving the phase on, so no phase is missed.
                thread::park_timeout(Duration::from_millis(50));
            }
        }
        let job = *lock(&shared.job);
        if let Some(JobRef(job)) = job {
            // SAFETY: `run` keeps the job alive until this helper has counted itself done.
            let ran = catch_unwind(AssertUnwindSafe(|| unsafe { (*job)(index) }));
            if ran.is_err() {
                shared.panicked.store(true, Ordering::Relaxed);
            }
        }
        shared.done.fetch_add(1, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::Team;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_member_runs_each_phase_once() {
        for size in [1, 2, 3] {
            let team = Team::new(size);
            assert_eq!(team.size(), size);
            let calls: Vec<AtomicUsize> = (0..size).map(|_| AtomicUsize::new(0)).collect();
            for _ in 0..1000 {
                team.run(&|i| {
                    calls[i].fetch_add(1, Ordering::Relaxed);
                });
            }
            for c in &calls {
                assert_eq!(c.load(Ordering::Relaxed), 1000);
            }
        }
    }

    #[test]
    fn callers_on_several_threads_take_turns() {
        let team = Team::new(2);
        let calls = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for _ in 0..3 {
                scope.spawn(|| {
                    for _ in 0..300 {
                        team.run(&|_| {
                            calls.fetch_add(1, Ordering::Relaxed);
                        });
                    }
                });
            }
        });
        assert_eq!(calls.load(Ordering::Relaxed), 3 * 300 * 2);
    }

    #[test]
    fn a_panicking_member_panics_the_caller_and_the_team_goes_on() {
        let team = Team::new(2);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            team.run(&|i| assert!(i != 1, "member 1 fails"));
        }));
        assert!(result.is_err());
        let ran = AtomicUsize::new(0);
        team.run(&|_| {
            ran.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(ran.load(Ordering::Relaxed), 2);
    }
}
