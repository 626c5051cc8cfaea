//! Crash safety: training killed with SIGKILL at random moments always leaves a loadable
//! checkpoint and resumes to the same final loss; Ctrl-C (SIGINT) saves a checkpoint first.
//! Signals as unix has them: these tests are built for unix alone.

#![cfg(unix)]

mod common;

use rand::{Rng, SeedableRng};
use shige::train::load::load_run;
use shige::train::run_dir::STATE_FILE;
use shige::train::safetensors::read_safetensors;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

const TRAIN: &str = env!("CARGO_BIN_EXE_train");
const ABLATE: &str = env!("CARGO_BIN_EXE_ablate");

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Steps of the tiny run: enough that the random kills land before it ends (300 were no longer
/// enough once the training step got faster: a kill's sleep covers more steps).
const STEPS: usize = 1000;

/// A tiny run of [`STEPS`] steps with a checkpoint every 10, started fresh or resumed. A run
/// killed before its first training state was written left files that `train` refuses to write
/// over or resume ("no training state to resume: move its files elsewhere"): as its message
/// asks, they are moved out of the way (removed) and the run starts afresh.
fn start(dir: &Path) -> Child {
    if dir.exists() && !dir.join(STATE_FILE).exists() {
        std::fs::remove_dir_all(dir).unwrap();
    }
    let dir_arg = dir.to_str().unwrap();
    let steps = STEPS.to_string();
    let args: Vec<&str> = if dir.join(STATE_FILE).exists() {
        vec!["--resume", dir_arg]
    } else {
        vec![
            "--config",
            "configs/tiny.toml",
            "--max-iters",
            &steps,
            "--eval-interval",
            "10",
            "--out",
            dir_arg,
        ]
    };
    common::binary(TRAIN)
        .args(&args)
        .current_dir(root())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The last row of a run's metrics: (step, train loss, val loss).
fn last_metrics(dir: &Path) -> (usize, f64, f64) {
    let text = std::fs::read_to_string(dir.join("metrics.csv")).unwrap();
    let last = text.lines().last().unwrap();
    let fields: Vec<&str> = last.split(',').collect();
    (
        fields[0].parse().unwrap(),
        fields[1].parse().unwrap(),
        fields[2].parse().unwrap(),
    )
}

fn finish(mut child: Child) -> std::process::ExitStatus {
    child.wait().unwrap()
}

#[test]
fn sigkill_at_random_moments_loses_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let (reference, crashed) = (tmp.path().join("reference"), tmp.path().join("crashed"));
    assert!(finish(start(&reference)).success());

    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(8);
    let mut kills = 0;
    while kills < 20 {
        let mut child = start(&crashed);
        std::thread::sleep(Duration::from_millis(rng.random_range(20..400)));
        if child.try_wait().unwrap().is_some() {
            // It finished before the kill: successfully, or the failure is the test's.
            let out = child.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "after {kills} kills: {stderr}");
            break;
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        kills += 1;
        if crashed.join(STATE_FILE).exists() {
            let run = load_run(&crashed);
            assert!(run.is_ok(), "kill {kills}: {}", run.err().unwrap());
            assert!(
                read_safetensors(&crashed.join(STATE_FILE)).is_ok(),
                "kill {kills}"
            );
        }
    }
    assert!(
        kills >= 5,
        "only {kills} kills landed before the run finished"
    );
    let status = finish(start(&crashed));
    assert!(status.success(), "the resumed run failed");
    let (a, b) = (last_metrics(&reference), last_metrics(&crashed));
    assert_eq!(a.0, STEPS);
    assert_eq!(a.0, b.0);
    assert!(
        (a.1 - b.1).abs() < 1e-5,
        "train loss {} vs {} after {kills} kills",
        a.1,
        b.1
    );
    assert!(
        (a.2 - b.2).abs() < 1e-5,
        "val loss {} vs {} after {kills} kills",
        a.2,
        b.2
    );
}

/// Step, train loss and val loss of every row of a run's metrics (speed and time differ between
/// runs).
fn metric_rows(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("metrics.csv")).unwrap();
    text.lines()
        .map(|l| l.split(',').take(3).collect::<Vec<_>>().join(","))
        .collect()
}

/// The step of a run's training state.
fn state_step(dir: &Path) -> usize {
    read_safetensors(&dir.join(STATE_FILE)).unwrap().1["step"]
        .parse()
        .unwrap()
}

/// Waits until the run in `dir` has written its first training state, then 50 ms more, so that a
/// signal sent next usually lands between two checkpoints.
fn wait_past_first_checkpoint(dir: &Path) {
    let started = Instant::now();
    while !dir.join(STATE_FILE).exists() {
        assert!(started.elapsed() < Duration::from_secs(60), "no checkpoint");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(50));
}

/// Sends `signal` to `child`.
fn send(child: &Child, signal: libc::c_int) {
    // SAFETY: kill() sends a signal to our own child process.
    unsafe {
        libc::kill(child.id() as libc::pid_t, signal);
    }
}

/// Sends `signal` to a tiny run between two checkpoints: it saves its training state at the step
/// it is on, exits with 128 + signal, and resumes to the end with the uninterrupted run's metrics.
fn a_signal_saves_a_checkpoint_before_exiting(signal: libc::c_int) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let child = start(&dir);
    // The signal usually lands mid-interval. On a loaded machine it may land before the next
    // step ends: then the state is
    // saved again at the checkpoint's step, which is as correct (the exact resume from a
    // mid-interval stop is tested with --stop-at below).
    wait_past_first_checkpoint(&dir);
    let saved_before = last_metrics(&dir).0;
    send(&child, signal);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(128 + signal), "{stderr}");
    assert!(
        stderr.contains("interrupted at step") && stderr.contains("--resume"),
        "{stderr}"
    );
    let step = state_step(&dir);
    assert!(
        step >= saved_before && step < STEPS,
        "saved at {step}, before {saved_before}"
    );
    assert!(
        stderr.contains(&format!("interrupted at step {step}:")),
        "the state is the interrupted step\n{stderr}"
    );
    assert!(
        finish(start(&dir)).success(),
        "resuming after the signal failed"
    );
    assert_eq!(last_metrics(&dir).0, STEPS);
}

#[test]
fn ctrl_c_saves_a_checkpoint_before_exiting() {
    a_signal_saves_a_checkpoint_before_exiting(libc::SIGINT);
}

#[test]
fn sigterm_saves_a_checkpoint_before_exiting() {
    a_signal_saves_a_checkpoint_before_exiting(libc::SIGTERM);
}

/// Ctrl-C during an ablation saves the variant in training and ends the ablation with 130; the
/// same command then finishes it, and the interrupted variant ends with exactly the metrics of
/// an uninterrupted twin.
#[test]
fn ctrl_c_during_an_ablation_saves_its_variant_and_the_same_command_continues() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = tmp.path().join("spec.toml");
    let variant = |name: &str| {
        format!("[[variant]]\nname = \"{name}\"\ntrain = {{ max_iters = {STEPS}, eval_interval = 10 }}\n")
    };
    let text = format!(
        "name = \"sig\"\nbase = \"configs/tiny.toml\"\n{}{}",
        variant("interrupted"),
        variant("whole")
    );
    std::fs::write(&spec, text).unwrap();
    let out = tmp.path().join("out");
    let ablate = || {
        common::binary(ABLATE)
            .args([spec.to_str().unwrap(), "--out", out.to_str().unwrap()])
            .current_dir(root())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (child, first) = (ablate(), out.join("interrupted"));
    wait_past_first_checkpoint(&first);
    send(&child, libc::SIGINT);
    let done = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert_eq!(done.status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("variant `interrupted`: interrupted at step")
            && stderr.contains("the same command continues"),
        "{stderr}"
    );
    assert!(state_step(&first) < STEPS, "the variant ran to its end");
    assert!(!out.join("whole").exists(), "the next variant started");
    let resumed = ablate().wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert!(resumed.status.success(), "{stderr}");
    assert!(out.join("results.md").exists(), "{stderr}");
    assert_eq!(metric_rows(&first), metric_rows(&out.join("whole")));
}

/// Ctrl-C during an evaluation ends it at once: the state of its step is saved without its
/// metrics row, and the resumed run evaluates there first, ending with an uninterrupted twin's
/// metrics.
#[test]
fn ctrl_c_during_an_evaluation_ends_it_and_the_resumed_run_evaluates_there() {
    let tmp = tempfile::tempdir().unwrap();
    let (whole, cut) = (tmp.path().join("whole"), tmp.path().join("cut"));
    // On the tiny model an evaluation of 600 batches takes a second or more, ten steps a few
    // milliseconds.
    let args = |dir: &Path| {
        let flags = "--config configs/tiny.toml --max-iters 20 --eval-interval 10 --eval-iters 600";
        let mut args: Vec<String> = flags.split(' ').map(String::from).collect();
        args.extend(["--out".into(), dir.display().to_string()]);
        args
    };
    let child = common::binary(TRAIN)
        .args(args(&cut))
        .current_dir(root())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The first evaluation's checkpoint, then ten steps: the signal lands in the second one.
    wait_past_first_checkpoint(&cut);
    std::thread::sleep(Duration::from_millis(250));
    send(&child, libc::SIGINT);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert_eq!(
        state_step(&cut),
        20,
        "not stopped in the evaluation\n{stderr}"
    );
    assert_eq!(
        metric_rows(&cut).len(),
        2,
        "a header and step 10: the cut evaluation wrote no row"
    );
    common::train_ok(&["--resume", cut.to_str().unwrap()]);
    let twin: Vec<String> = args(&whole);
    common::train_ok(&twin.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(metric_rows(&cut), metric_rows(&whole));
}

#[test]
fn a_run_stopped_between_evaluations_resumes_to_the_same_metrics() {
    let tmp = tempfile::tempdir().unwrap();
    let (whole, stopped) = (tmp.path().join("whole"), tmp.path().join("stopped"));
    let (whole_arg, stopped_arg) = (whole.to_str().unwrap(), stopped.to_str().unwrap());
    let tiny = [
        "--config",
        "configs/tiny.toml",
        "--max-iters",
        "100",
        "--eval-interval",
        "10",
    ];
    let mut whole_args = tiny.to_vec();
    whole_args.extend(["--out", whole_arg]);
    common::train_ok(&whole_args);
    let mut stopped_args = tiny.to_vec();
    stopped_args.extend(["--out", stopped_arg, "--stop-at", "95"]);
    common::train_ok(&stopped_args);
    assert_eq!(state_step(&stopped), 95);
    common::train_ok(&["--resume", stopped.to_str().unwrap()]);
    assert_eq!(metric_rows(&stopped), metric_rows(&whole));
}

#[test]
fn a_save_that_fails_midway_leaves_the_previous_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let dir_arg = dir.to_str().unwrap();
    common::train_ok(&[
        "--config",
        "configs/tiny.toml",
        "--stop-at",
        "20",
        "--out",
        dir_arg,
    ]);
    let state = std::fs::read(dir.join(STATE_FILE)).unwrap();
    // Resumed with a file-size limit below the state's size, the next save stops mid-write
    // (EFBIG, as on a full disk).
    let limit = state.len() as u64 / 2;
    let mut resumed = common::binary(TRAIN);
    resumed.args(["--resume", dir_arg]).current_dir(root());
    // SAFETY: between fork and exec the closure only calls setrlimit and signal, both
    // async-signal-safe.
    unsafe {
        use std::os::unix::process::CommandExt;
        resumed.pre_exec(move || {
            let rlimit = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            libc::setrlimit(libc::RLIMIT_FSIZE, &rlimit);
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            Ok(())
        });
    }
    let out = resumed.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the save did not fail: {stderr}");
    assert!(stderr.contains("cannot write"), "{stderr}");
    assert_eq!(
        std::fs::read(dir.join(STATE_FILE)).unwrap(),
        state,
        "the state changed"
    );
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
    assert!(load_run(&dir).is_ok());
    common::train_ok(&["--resume", dir_arg]);
    assert_eq!(last_metrics(&dir).0, 60);
}
