//! Crash safety: training killed with SIGKILL at random moments always leaves a loadable
//! checkpoint and resumes to the same final loss; Ctrl-C (SIGINT) saves a checkpoint first.

use rand::{Rng, SeedableRng};
use shige::train::checkpoint::{load_run, read_safetensors, STATE_FILE};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TRAIN: &str = env!("CARGO_BIN_EXE_train");

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A tiny run of 300 steps with a checkpoint every 10, started fresh or resumed.
fn start(dir: &Path) -> Child {
    let dir_arg = dir.to_str().unwrap();
    let args: Vec<&str> = if dir.join(STATE_FILE).exists() {
        vec!["--resume", dir_arg]
    } else {
        vec![
            "--config",
            "configs/tiny.toml",
            "--max-iters",
            "300",
            "--eval-interval",
            "10",
            "--out",
            dir_arg,
        ]
    };
    Command::new(TRAIN)
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
            break; // it finished before the kill
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
    assert_eq!(a.0, 300);
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

#[test]
fn ctrl_c_saves_a_checkpoint_before_exiting() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let child = start(&dir);
    // Wait for the first checkpoint, then a little more, so that Ctrl-C lands mid-interval.
    let started = Instant::now();
    while !dir.join(STATE_FILE).exists() {
        assert!(started.elapsed() < Duration::from_secs(60), "no checkpoint");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(50));
    let saved_before = last_metrics(&dir).0;
    // SAFETY: kill() sends a signal to our own child process.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGINT);
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("interrupted at step") && stderr.contains("--resume"),
        "{stderr}"
    );
    let (step, _, _) = last_metrics(&dir);
    assert!(
        step > saved_before && step < 300,
        "saved at {step}, before {saved_before}"
    );
    let state = read_safetensors(&dir.join(STATE_FILE)).unwrap().1;
    assert_eq!(
        state["step"],
        step.to_string(),
        "the state is the interrupted step"
    );
    assert!(
        finish(start(&dir)).success(),
        "resuming after Ctrl-C failed"
    );
    assert_eq!(last_metrics(&dir).0, 300);
}
