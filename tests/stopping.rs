//! A run is stopped once and saved, however it is asked to stop: Ctrl-C pressed twice, `--stop-at`,
//! the page's server ending (SIGTERM, Ctrl-C) or dying (SIGKILL) while it trains. Each case
//! resumes, and where it can, ends with exactly the metrics of a run that was never stopped.
//! Signals as unix has them: these tests are built for unix alone.

#![cfg(unix)]

mod common;

use shige::train::run_dir::{RunDir, STATE_FILE};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const TRAIN: &str = env!("CARGO_BIN_EXE_train");

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Sends `signal` to the process `pid`.
fn send(pid: u32, signal: libc::c_int) {
    // SAFETY: kill() only sends a signal, to a process this test started.
    unsafe {
        libc::kill(pid as libc::pid_t, signal);
    }
}

/// `train` on the tiny config for `steps` steps into `dir`, with `extra` flags.
fn train(dir: &Path, steps: usize, extra: &[&str]) -> Command {
    let mut command = common::binary(TRAIN);
    let steps = steps.to_string();
    command
        .args(["--config", "configs/tiny.toml", "--max-iters", &steps])
        .args(["--out", dir.to_str().unwrap()])
        .args(extra)
        .current_dir(root());
    command
}

/// Step, train loss and val loss of each row of a run's metrics.csv.
fn metric_rows(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("metrics.csv")).unwrap();
    text.lines()
        .map(|l| l.split(',').take(3).collect::<Vec<_>>().join(","))
        .collect()
}

/// Resumes the run in `dir` with `train --resume` to its end; panics if it fails.
fn resume_to_the_end(dir: &Path) {
    let out = common::binary(TRAIN)
        .args(["--resume", dir.to_str().unwrap()])
        .current_dir(root())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the resume failed: {stderr}");
}

#[test]
fn ctrl_c_twice_before_the_first_checkpoint_still_saves_one() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("twice");
    let child = train(&dir, 400, &[])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The lock is taken after the handlers are set, before the first step.
    common::wait_for("the run's lock", || dir.join(".lock").exists());
    send(child.id(), libc::SIGINT);
    // Ctrl-C pressed again and again until the run ends: two signals sent before the process
    // takes the first are one to it (a pending signal does not queue), so one alone could be
    // lost on a busy machine.
    let mut child = child;
    while child.try_wait().unwrap().is_none() {
        std::thread::sleep(Duration::from_millis(1));
        send(child.id(), libc::SIGINT);
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("the checkpoint is being saved") || stderr.contains("quitting now"),
        "the second Ctrl-C says what it does: {stderr}"
    );
    assert!(stderr.contains("--resume"), "{stderr}");
    assert!(dir.join(STATE_FILE).is_file(), "no checkpoint: {stderr}");
    resume_to_the_end(&dir);
    let rows = metric_rows(&dir);
    assert!(rows.last().unwrap().starts_with("400,"), "{rows:?}");
}

#[test]
fn stop_at_says_it_stopped_and_how_to_go_on() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("stopped");
    let out = train(&dir, 100, &["--stop-at", "47"]).output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("stopped at step 47 of 100 (--stop-at)") && stderr.contains("--resume"),
        "{stderr}"
    );
    assert!(stdout.starts_with("stopped at step 47,"), "{stdout}");
    assert!(!stdout.contains("done"), "{stdout}");
    let done = train(&tmp.path().join("done"), 20, &[]).output().unwrap();
    assert!(String::from_utf8_lossy(&done.stdout).starts_with("done: 20 steps"));
}

#[test]
fn a_run_whose_parent_closes_its_pipe_saves_and_stops() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("orphan");
    let mut child = train(&dir, 100_000, &["--stop-with-parent"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_for("a first checkpoint", || dir.join(STATE_FILE).exists());
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(128 + libc::SIGTERM), "{stderr}");
    assert!(stderr.contains("interrupted at step"), "{stderr}");
}

/// The `serve` binary on the runs under `runs`, from the repository (to train from the page),
/// and its address.
fn start_server(runs: &Path) -> (Child, String) {
    common::serve_binary(root(), &["--runs", runs.to_str().unwrap()])
}

/// Starts a tiny run of `steps` steps named `name` from the page at `base`, and waits for its
/// first checkpoint and a little more.
fn train_from_the_page(base: &str, runs: &Path, name: &str, steps: usize) {
    let body = serde_json::json!({ "config": "tiny", "run": name, "max_iters": steps });
    let mut answer = ureq::post(format!("{base}/api/train"))
        .header("Content-Type", "application/json")
        .send(body.to_string())
        .unwrap();
    assert_eq!(answer.status(), 200);
    let _ = answer.body_mut().read_to_string();
    common::wait_for("a first checkpoint", || {
        runs.join(name).join(STATE_FILE).exists()
    });
    std::thread::sleep(Duration::from_millis(100));
}

/// The page's server ended by SIGTERM or Ctrl-C stops its run first (saved), and one killed by
/// SIGKILL leaves a run that notices and saves: neither leaves a run locked or unsaved, and each
/// resumes to exactly the metrics of a run never stopped.
#[test]
fn a_server_that_ends_or_dies_leaves_its_run_saved_and_resumable() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let steps = 2000;
    let whole = tmp.path().join("whole");
    assert!(train(&whole, steps, &[]).output().unwrap().status.success());
    for (name, signal) in [
        ("term", libc::SIGTERM),
        ("int", libc::SIGINT),
        ("kill", libc::SIGKILL),
    ] {
        let (mut server, base) = start_server(&runs);
        train_from_the_page(&base, &runs, name, steps);
        send(server.id(), signal);
        let ended = server.wait().unwrap();
        let dir = runs.join(name);
        if signal != libc::SIGKILL {
            assert!(ended.success(), "{name}: the server ended with {ended}");
            assert_eq!(RunDir::new(&dir).is_locked(), Some(false), "{name}: locked");
        }
        // Killed, the server could not wait: its run saves on its own.
        common::wait_for("the run to end", || {
            RunDir::new(&dir).is_locked() == Some(false)
        });
        let rows = metric_rows(&dir);
        let step = rows.last().unwrap().split(',').next().unwrap().to_string();
        assert!(
            step.parse::<usize>().unwrap() < steps,
            "{name}: ran to the end"
        );
        resume_to_the_end(&dir);
        assert_eq!(metric_rows(&dir), metric_rows(&whole), "{name}");
    }
}

/// Ctrl-C pressed twice 50 ms apart while a resumed run stops: whenever the second one lands
/// (during the save, or after it, during the final evaluation, which it ends at once),
/// summary.json describes the step the checkpoint holds, not the run's previous finish.
#[test]
fn ctrl_c_twice_leaves_a_summary_of_the_step_saved() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("twice");
    // The whole corpus: its final evaluation (the whole validation split) takes a while.
    let out = train(&dir, 40, &["--corpus", "data/poems.txt"])
        .output()
        .unwrap();
    assert!(out.status.success());
    for wait_ms in [0, 50, 150] {
        let mut child = common::binary(TRAIN)
            .args([
                "--resume",
                dir.to_str().unwrap(),
                "--max-iters",
                "100000000",
            ])
            .current_dir(root())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let before = shige::train::checkpoint::saved_step(&dir).unwrap();
        std::thread::sleep(Duration::from_millis(400));
        send(child.id(), libc::SIGINT);
        std::thread::sleep(Duration::from_millis(wait_ms));
        send(child.id(), libc::SIGINT);
        child.wait().unwrap();
        let step = shige::train::checkpoint::saved_step(&dir).unwrap();
        let summary: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap())
                .unwrap();
        assert!(step > before, "it trained on: {before} → {step}");
        assert_eq!(summary["steps"], step, "{wait_ms} ms: {summary}");
        assert_eq!(summary["interrupted"], true, "{wait_ms} ms: {summary}");
    }
}

/// Ctrl-C during the final pass over the whole validation split of a run that trained all its
/// steps (#78: it was ignored, and a second one promised a stop that never came): the run quits
/// at the next batch, saying that its steps are saved; the resume it names completes the final
/// evaluation with exactly the figure of a run never stopped, and says so; a resume after that
/// says nothing was left.
#[test]
fn ctrl_c_during_the_final_evaluation_quits_and_a_resume_completes_it() {
    use std::io::BufRead;
    let tmp = tempfile::tempdir().unwrap();
    let (stopped, whole) = (tmp.path().join("stopped"), tmp.path().join("whole"));
    // The default model measured on data/poems.txt's held-out poems: a final pass of seconds.
    let args = |dir: &Path| -> Vec<String> {
        let dir = dir.to_str().unwrap().to_string();
        [
            "--config",
            "configs/default.toml",
            "--max-iters",
            "20",
            "--warmup-iters",
            "2",
        ]
        .into_iter()
        .chain(["--eval-iters", "2", "--out", &dir, "--json"])
        .map(String::from)
        .collect()
    };
    let mut child = common::binary(TRAIN)
        .args(args(&stopped))
        .current_dir(root())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    while !seen.contains("step     20:") {
        assert!(stderr.read_line(&mut seen).unwrap() > 0, "{seen}");
    }
    std::thread::sleep(Duration::from_millis(200));
    send(child.id(), libc::SIGINT);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{rest}");
    assert!(
        rest.contains("interrupted after the run's last step: its 20 steps are saved")
            && rest.contains("completes its final evaluation"),
        "{rest}"
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(stopped.join("summary.json")).unwrap())
            .unwrap();
    assert!(summary["val_loss_whole"].is_null(), "{summary}");
    // Resumed as told: the final evaluation of a run never stopped, and no offer of more steps.
    let resumed = common::binary(TRAIN)
        .args(["--resume", stopped.to_str().unwrap(), "--json"])
        .current_dir(root())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&resumed.stderr);
    assert!(resumed.status.success(), "{said}");
    assert!(
        said.contains(
            "the run's 20 steps were trained before: this completed its final evaluation"
        ),
        "{said}"
    );
    let completed: serde_json::Value = serde_json::from_slice(&resumed.stdout).unwrap();
    let never = common::binary(TRAIN)
        .args(args(&whole))
        .current_dir(root())
        .output()
        .unwrap();
    assert!(never.status.success());
    let never: serde_json::Value = serde_json::from_slice(&never.stdout).unwrap();
    assert_eq!(completed["val_loss_whole"], never["val_loss_whole"]);
    assert_eq!(completed["samples"], never["samples"]);
    // The training's figures are the invocation's that trained: the same train loss to every
    // digit, and its pace (#78: 0 tokens/s and a train loss rounded as metrics.csv keeps it).
    for figure in ["train_loss", "val_loss", "best_val_loss"] {
        assert_eq!(completed[figure], never[figure], "{figure}");
    }
    assert!(
        completed["tokens_per_s"].as_f64().unwrap() > 0.0,
        "{completed}"
    );
    assert_eq!(metric_rows(&stopped), metric_rows(&whole));
    let again = common::binary(TRAIN)
        .args(["--resume", stopped.to_str().unwrap()])
        .current_dir(root())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&again.stderr);
    assert!(said.contains("no step was left to run"), "{said}");
    // Given more steps, it trains them, and says nothing of steps not left.
    let more = common::binary(TRAIN)
        .args(["--resume", stopped.to_str().unwrap(), "--max-iters", "45"])
        .current_dir(root())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&more.stderr);
    assert!(more.status.success(), "{said}");
    assert!(!said.contains("no step was left"), "{said}");
}
