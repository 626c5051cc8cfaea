//! The page's runs and training over HTTP: the runs list is the folder's runs (an ablation's
//! variants too, nothing else), a run trained from the page appears and updates while it trains,
//! a second training is refused while one runs, stopping saves a checkpoint whose resumption ends
//! with the metrics of an uninterrupted run, bad training requests get a 4xx with a JSON error,
//! and a pasted poem is scored and set line by line.

mod common;

use serde_json::{json, Value};
use shige::serve::{Limits, ServeOptions};
use std::path::Path;

const TRAIN: &str = env!("CARGO_BIN_EXE_train");

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

/// GET `path`: (status, JSON body).
fn get(base: &str, path: &str) -> (u16, Value) {
    let mut response = agent().get(format!("{base}{path}")).call().unwrap();
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|_| panic!("{path}: {text}")),
    )
}

/// POST `body` as JSON to `path`: (status, JSON body).
fn post(base: &str, path: &str, body: &Value) -> (u16, Value) {
    let mut response = agent()
        .post(format!("{base}{path}"))
        .header("Content-Type", "application/json")
        .send(body.to_string())
        .unwrap();
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|_| panic!("{path}: {text}")),
    )
}

/// A server for the runs under `root`, able to train with the `train` binary.
fn serve_runs(root: &Path) -> String {
    common::serve_in_thread(ServeOptions {
        root: root.to_path_buf(),
        default_run: None,
        limits: Limits::default(),
        train_exe: Some(TRAIN.into()),
    })
}

/// `train` on the tiny config into `dir` with `flags`; fails the test if it fails.
fn train_cli(dir: &Path, flags: &[&str]) {
    let out = dir.to_str().unwrap();
    let args = ["--config", "configs/tiny.toml", "--out", out];
    common::train_ok(&[&args[..], flags].concat());
}

/// The runs list's names.
fn names(base: &str) -> Vec<String> {
    let (status, list) = get(base, "/api/runs");
    assert_eq!(status, 200, "{list}");
    list["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect()
}

/// Step, train loss and val loss of each row of a run's metrics.csv.
fn metric_rows(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("metrics.csv")).unwrap();
    text.lines()
        .map(|l| l.split(',').take(3).collect::<Vec<_>>().join(","))
        .collect()
}

#[test]
fn the_runs_list_is_the_folders_runs_with_their_curves() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    train_cli(&root.join("alpha"), &["--max-iters", "40"]);
    train_cli(
        &root.join("ablations/heads/h1"),
        &["--max-iters", "20", "--n-head", "1"],
    );
    // Not runs: an empty folder, a folder of other files, a hidden run, a run four levels deep.
    std::fs::create_dir_all(root.join("empty")).unwrap();
    std::fs::create_dir_all(root.join("notes")).unwrap();
    std::fs::write(root.join("notes/todo.txt"), "x").unwrap();
    train_cli(&root.join(".hidden"), &["--max-iters", "20"]);
    train_cli(&root.join("a/b/c/d"), &["--max-iters", "20"]);
    let base = serve_runs(root);
    assert_eq!(names(&base), ["ablations/heads/h1", "alpha"]);

    let (_, list) = get(&base, "/api/runs");
    let alpha = &list["runs"][1];
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("alpha/summary.json")).unwrap())
            .unwrap();
    assert_eq!(alpha["step"], 40);
    assert_eq!(alpha["max_iters"], 40);
    assert_eq!(alpha["val_loss_whole"], summary["val_loss_whole"]);
    assert_eq!(alpha["machine"], summary["machine"]);
    assert_eq!(alpha["has_model"], true);
    assert_eq!(alpha["active"], false);
    assert_eq!(alpha["config"]["model"]["n_head"], 2);
    assert_eq!(list["runs"][0]["config"]["model"]["n_head"], 1);
    assert!(
        alpha["line"]
            .as_str()
            .unwrap()
            .starts_with("2 layers × 2 heads × 32, learned"),
        "{alpha}"
    );

    let (status, detail) = get(&base, "/api/run?name=alpha");
    assert_eq!(status, 200, "{detail}");
    let steps = |key: &str| -> Vec<u64> {
        detail[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["step"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(steps("rows"), [20, 40]);
    assert_eq!(steps("samples"), [20, 40]);
    let last_val = detail["rows"][1]["val_loss"].as_f64().unwrap();
    assert_eq!(Some(last_val), alpha["val_loss"].as_f64());

    for (name, status) in [
        ("../alpha", 404),
        ("notes", 404),
        ("nothing", 404),
        ("a/b/c/d", 404),
    ] {
        let (got, error) = get(&base, &format!("/api/run?name={name}"));
        assert_eq!(got, status, "{name}: {error}");
        assert!(error["error"].is_string(), "{error}");
    }
}

#[test]
fn a_run_trained_from_the_page_updates_stops_and_resumes_as_if_never_stopped() {
    let tmp = tempfile::tempdir().unwrap();
    let base = serve_runs(tmp.path());
    assert_eq!(get(&base, "/api/train").1["running"], false);
    let request = json!({ "config": "tiny", "run": "page", "max_iters": 2000, "position": "rope" });
    let (status, started) = post(&base, "/api/train", &request);
    assert_eq!(status, 200, "{started}");
    assert_eq!(
        (started["run"].as_str(), &started["running"]),
        (Some("page"), &json!(true))
    );

    // It appears in the list, marked active, and its step grows.
    let step = |base: &str| -> Option<u64> {
        let (_, list) = get(base, "/api/runs");
        let run = list["runs"]
            .as_array()?
            .iter()
            .find(|r| r["name"] == "page")?
            .clone();
        // Marked active once it has a step: the lock is taken a moment after the folder is
        // made, which a slow start (wine's) shows.
        let step = run["step"].as_u64();
        assert!(step.is_none() || run["active"] == true, "{run}");
        step
    };
    common::wait_for("a first evaluation", || {
        step(&base).is_some_and(|s| s >= 20)
    });
    let first = step(&base).unwrap();
    common::wait_for("a later evaluation", || {
        step(&base).is_some_and(|s| s > first)
    });

    // One training at a time.
    let (status, refused) = post(
        &base,
        "/api/train",
        &json!({ "config": "tiny", "run": "second" }),
    );
    assert_eq!(status, 409, "{refused}");
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .contains("page is training already"),
        "{refused}"
    );
    assert!(!tmp.path().join("second").exists());

    // Stopping saves a checkpoint: the run ends as Ctrl-C ends it (on Windows, where no signal
    // reaches one process alone, as the closed pipe of --stop-with-parent ends it: SIGTERM's
    // code). Stop pressed twice is one stop (a second SIGINT after the save would end `train` at
    // once).
    let (status, stopping) = post(&base, "/api/train/stop", &json!({}));
    assert_eq!(status, 200, "{stopping}");
    let (status, again) = post(&base, "/api/train/stop", &json!({}));
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["stopping"], true, "{again}");
    common::wait_for("the run to stop", || {
        get(&base, "/api/train").1["running"] == false
    });
    let (_, stopped) = get(&base, "/api/train");
    let code = if cfg!(unix) { 130 } else { 143 };
    assert_eq!(stopped["exit"], code, "{stopped}");
    let log = stopped["log"].to_string();
    assert!(
        log.contains("interrupted at step") && log.contains("--resume"),
        "{log}"
    );
    assert!(!log.contains("being saved"), "one SIGINT: {log}");
    assert!(log.contains("quit without the final evaluation"), "{log}");
    let (_, detail) = get(&base, "/api/run?name=page");
    assert!(detail["step"].as_u64().unwrap() < 2000, "{detail:.300}");
    assert_eq!(detail["resumable"], true);
    assert_eq!(detail["config"]["model"]["position"], "rope");
    let samples = detail["samples"].as_array().unwrap();
    assert!(
        samples.len() >= 2
            && samples
                .iter()
                .any(|s| s["text"].as_str().is_some_and(|t| !t.is_empty()))
    );
    assert_eq!(post(&base, "/api/train/stop", &json!({})).0, 409);

    // Resumed from the page, it ends with the metrics of a run that was never stopped.
    let (status, resumed) = post(&base, "/api/train", &json!({ "resume": "page" }));
    assert_eq!(status, 200, "{resumed}");
    common::wait_for("the resumed run to end", || {
        get(&base, "/api/train").1["running"] == false
    });
    assert_eq!(get(&base, "/api/train").1["exit"], 0);
    let whole = tmp.path().join("whole");
    train_cli(&whole, &["--max-iters", "2000", "--position", "rope"]);
    assert_eq!(metric_rows(&tmp.path().join("page")), metric_rows(&whole));
}

#[test]
fn a_run_fine_tuned_from_the_page_starts_from_a_listed_run() {
    let tmp = tempfile::tempdir().unwrap();
    train_cli(&tmp.path().join("parent"), &[]);
    let base = serve_runs(tmp.path());
    let request =
        json!({ "config": "tiny", "run": "child", "init_from": "parent", "max_iters": 20 });
    let (status, started) = post(&base, "/api/train", &request);
    assert_eq!(status, 200, "{started}");
    common::wait_for("the fine-tune to end", || {
        get(&base, "/api/train").1["running"] == false
    });
    assert_eq!(get(&base, "/api/train").1["exit"], 0);
    let parent: Value = serde_json::from_str(
        &std::fs::read_to_string(tmp.path().join("child/parent.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        parent["run"],
        tmp.path().join("parent").display().to_string()
    );
    let (parent_curve, child_curve) = (
        common::curve(&tmp.path().join("parent")),
        common::curve(&tmp.path().join("child")),
    );
    let (_, list) = get(&base, "/api/runs");
    let child = list["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "child");
    let line = child.unwrap()["line"].as_str().unwrap();
    assert!(line.ends_with(", fine-tuned from parent"), "{line}");
    // On the parent's own corpus, its weights begin where it ended: far below its first step.
    assert!(
        child_curve[0].2 < parent_curve[0].2 - 0.2,
        "{child_curve:?} {parent_curve:?}"
    );
}

#[test]
fn bad_training_requests_get_a_json_error_and_start_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    train_cli(&tmp.path().join("done"), &["--max-iters", "20"]);
    std::fs::create_dir_all(tmp.path().join("other")).unwrap();
    std::fs::write(tmp.path().join("other/notes.txt"), "mine").unwrap();
    std::fs::write(tmp.path().join("afile"), "mine").unwrap();
    let base = serve_runs(tmp.path());
    let cases = [
        (
            json!({ "config": "nope" }),
            400,
            "config must be one of configs/: ci, default",
        ),
        (
            json!({ "config": "tiny", "run": "../outside" }),
            400,
            "is not a run's name",
        ),
        (
            json!({ "config": "tiny", "run": "a/b/c/d" }),
            400,
            "is not a run's name",
        ),
        (
            json!({ "config": "tiny", "run": "done/inside" }),
            400,
            "one folder name",
        ),
        (
            json!({ "config": "tiny", "run": "done" }),
            409,
            "already holds a run",
        ),
        (
            json!({ "config": "tiny", "run": "other" }),
            409,
            "holds files that are not a run's (notes.txt): choose another name (a new or empty directory)",
        ),
        (
            json!({ "config": "tiny", "run": "afile" }),
            409,
            "is a file, not a directory for a new run: choose another name",
        ),
        (
            json!({ "config": "tiny", "run": "done" }),
            409,
            "or choose another name",
        ),
        (json!({ "config": "tiny", "n_head": 3 }), 400, "n_head"),
        (
            json!({ "config": "tiny", "set": ["train.nope=1"] }),
            400,
            "unknown field `nope`",
        ),
        (
            json!({ "config": "tiny", "set": ["model.n_head=3"] }),
            400,
            "n_head",
        ),
        (
            json!({ "resume": "done", "set": ["train.seed=2"] }),
            400,
            "keeps its model, recipe and name",
        ),
        (
            json!({ "config": "tiny", "position": "sideways" }),
            400,
            "sideways",
        ),
        (
            json!({ "config": "tiny", "resume": "done" }),
            400,
            "either config",
        ),
        (json!({ "resume": "other" }), 400, "no checkpoint to resume"),
        (
            json!({ "resume": "done", "n_layer": 3 }),
            400,
            "keeps its model",
        ),
        (
            json!({ "config": "tiny", "epochs": 3 }),
            422,
            "unknown field `epochs`",
        ),
        (json!({}), 400, "either config"),
        (
            json!({ "config": "tiny", "init_from": "other" }),
            400,
            "init_from: `other` is no run with weights to start from: choose a run of the list",
        ),
        (
            json!({ "config": "tiny", "run": "done" }),
            409,
            "already holds a run: continue it with Resume in the runs list",
        ),
        (
            json!({ "config": "tiny", "set": ["data.corpus=/etc/passwd"] }),
            400,
            "the page trains on the corpora of data/ and on files under the folder of runs",
        ),
        (
            json!({ "config": "tiny", "set": ["data.corpus=data/../Cargo.toml"] }),
            400,
            "is neither",
        ),
        (
            json!({ "config": "tiny", "set": ["data.corpus=outside.txt"] }),
            400,
            "data.corpus: there is no file outside.txt",
        ),
        (
            json!({ "config": "tiny", "set": ["data.corpus=data/tiny.txt\n"] }),
            400,
            "its value holds U+000A",
        ),
        (
            // Its held-out poems hold the corpus's own (the tiny corpus is every 100th of them).
            json!({ "config": "tiny", "set": ["data.validation=data/poems.txt"] }),
            400,
            "corpus data/tiny.txt holds",
        ),
        (
            json!({ "config": "tiny", "max_iters": 7, "set": ["train.minutes=0.05"] }),
            400,
            "both given",
        ),
        (
            json!({ "config": "tiny", "init_from": "../outside" }),
            400,
            "is not a run's name",
        ),
        (
            json!({ "config": "tiny", "init_from": "done", "n_layer": 3 }),
            400,
            "takes the model's shape from",
        ),
        (
            json!({ "resume": "done", "init_from": "done" }),
            400,
            "keeps its model",
        ),
    ];
    for (request, status, piece) in cases {
        let (got, error) = post(&base, "/api/train", &request);
        assert_eq!(got, status, "{request}: {error}");
        let message = error["error"].as_str().unwrap();
        assert!(message.contains(piece), "{request}: {error}");
        assert!(!message.contains("another another"), "{error}");
        // The page's words, not the command line's.
        for word in ["--resume", "--init-from", "--out", "cargo run"] {
            assert!(!message.contains(word), "{request}: {error}");
        }
    }
    // Another site's page cannot start a run.
    let mut answer = agent()
        .post(format!("{base}/api/train"))
        .header("Content-Type", "application/json")
        .header("Origin", "http://evil.example")
        .send(json!({ "config": "tiny", "run": "theirs" }).to_string())
        .unwrap();
    assert_eq!(answer.status().as_u16(), 403);
    assert!(answer
        .body_mut()
        .read_to_string()
        .unwrap()
        .contains("no other site's page can use it"));
    // Not JSON.
    let mut answer = agent()
        .post(format!("{base}/api/train"))
        .send("config=tiny")
        .unwrap();
    assert_eq!(answer.status().as_u16(), 415);
    let text = answer.body_mut().read_to_string().unwrap();
    assert!(
        serde_json::from_str::<Value>(&text).unwrap()["error"].is_string(),
        "{text}"
    );
    // Nothing was started, nothing written.
    assert_eq!(get(&base, "/api/train").1["run"], Value::Null);
    assert_eq!(names(&base), ["done"]);
    assert_eq!(
        std::fs::read_dir(tmp.path().join("other")).unwrap().count(),
        1
    );

    // A server without the train program says how to get it.
    let without = common::serve_in_thread(ServeOptions {
        root: tmp.path().to_path_buf(),
        default_run: None,
        limits: Limits::default(),
        train_exe: None,
    });
    let (status, error) = post(&without, "/api/train", &json!({ "config": "tiny" }));
    assert_eq!(status, 503, "{error}");
    assert!(error["error"]
        .as_str()
        .unwrap()
        .contains("cargo build --release --bin train"));
}

#[test]
fn any_run_of_the_list_writes_and_a_pasted_poem_is_set_line_by_line() {
    let tmp = tempfile::tempdir().unwrap();
    train_cli(&tmp.path().join("one"), &["--max-iters", "20"]);
    std::fs::create_dir_all(tmp.path().join("bare")).unwrap();
    std::fs::copy(
        tmp.path().join("one/config.toml"),
        tmp.path().join("bare/config.toml"),
    )
    .unwrap();
    let base = serve_runs(tmp.path());
    // No default run: the page opens, to train.
    let (status, info) = get(&base, "/api/info");
    assert_eq!((status, &info["run"]), (200, &Value::Null), "{info}");
    assert!(info["configs"].as_array().unwrap().contains(&json!("tiny")));
    let why = info["no_run"].as_str().unwrap();
    assert!(why.contains("no run to write with yet"), "{info}");
    let (status, info) = get(&base, "/api/info?run=one");
    assert_eq!(
        (status, info["run"]["name"].as_str()),
        (200, Some("one")),
        "{info}"
    );
    let (status, inside) = get(&base, "/api/inspect?run=one&text=%E7%99%BD%E6%97%A5");
    assert_eq!(status, 200, "{inside}");
    for (query, piece) in [
        ("/api/info?run=../one", "is not a run's name"),
        ("/api/inspect?run=bare&text=%E7%99%BD", "has no weights"),
        ("/api/inspect?text=%E7%99%BD", "no run to write with yet"),
    ] {
        let (status, error) = get(&base, query);
        assert_eq!(status, 400, "{query}: {error}");
        assert!(
            error["error"].as_str().unwrap().contains(piece),
            "{query}: {error}"
        );
    }

    let poem = "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。";
    let mut response = agent()
        .get(format!("{base}/api/score"))
        .query("text", poem)
        .call()
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let scored: Value =
        serde_json::from_str(&response.body_mut().read_to_string().unwrap()).unwrap();
    assert_eq!(scored["verse"]["form"], "wujue");
    let lines = scored["marks"]["lines"].as_array().unwrap();
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[1]["chars"][4]["c"], "流");
    assert!(lines[1]["chars"][4]["rhyme"]
        .as_array()
        .is_some_and(|g| !g.is_empty()));
    let (status, error) = get(&base, "/api/score?text=");
    assert_eq!(status, 400, "{error}");
}

/// A symbolic link in the runs folder leads outside it: the page neither trains into one nor
/// serves a run through one, and says why.
#[test]
#[cfg(unix)] // symbolic links and signals as unix has them
fn a_symbolic_link_is_no_way_out_of_the_runs_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, outside) = (tmp.path().join("runs"), tmp.path().join("outside"));
    train_cli(&outside.join("theirs"), &["--max-iters", "20"]);
    std::fs::create_dir_all(&root).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
    std::os::unix::fs::symlink(outside.join("theirs"), root.join("direct")).unwrap();
    let base = serve_runs(&root);
    for request in [
        json!({ "config": "tiny", "run": "link" }),
        json!({ "resume": "direct" }),
        json!({ "resume": "link/theirs" }),
    ] {
        let (status, error) = post(&base, "/api/train", &request);
        assert_eq!(status, 400, "{request}: {error}");
        assert!(
            error["error"]
                .as_str()
                .unwrap()
                .contains("is a symbolic link"),
            "{error}"
        );
    }
    for name in ["direct", "link/theirs"] {
        let (status, error) = get(&base, &format!("/api/run?name={name}"));
        assert_eq!(status, 404, "{error}");
        assert!(error["error"].as_str().unwrap().contains("symbolic link"));
        let (status, error) = get(&base, &format!("/api/info?run={name}"));
        assert_eq!(status, 400, "{error}");
    }
    assert_eq!(get(&base, "/api/train").1["run"], Value::Null);
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        1,
        "nothing new outside"
    );
}

/// A run whose `train` was killed with SIGKILL is said to be, and is resumable at once (its lock
/// went with the process); a resume that cannot work is refused before anything starts.
#[test]
#[cfg(unix)] // symbolic links and signals as unix has them
fn a_killed_run_is_said_so_and_resumable_at_once_and_bad_resumes_start_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let base = serve_runs(tmp.path());
    let request = json!({ "config": "tiny", "run": "killed", "max_iters": 100000 });
    let (status, started) = post(&base, "/api/train", &request);
    assert_eq!(status, 200, "{started}");
    let dir = tmp.path().join("killed");
    common::wait_for("a first checkpoint", || {
        dir.join("train_state.safetensors").exists()
    });
    let pid = started["pid"].as_u64().unwrap() as libc::pid_t;
    // SAFETY: kill() sends a signal to the child the server started for this test.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    common::wait_for("the run to end", || {
        get(&base, "/api/train").1["running"] == false
    });
    let (_, ended) = get(&base, "/api/train");
    assert_eq!(
        (&ended["signal"], &ended["exit"]),
        (&json!(9), &Value::Null),
        "{ended}"
    );
    let (_, list) = get(&base, "/api/runs");
    let run = &list["runs"][0];
    assert_eq!(
        (&run["active"], &run["resumable"]),
        (&json!(false), &json!(true)),
        "{run}"
    );

    let step = shige::train::checkpoint::saved_step(&dir).unwrap();
    let summary_before = std::fs::read(dir.join("summary.json")).ok();
    for (request, status, piece) in [
        (
            json!({ "resume": "killed", "max_iters": 0 }),
            409,
            "below the step",
        ),
        (
            json!({ "resume": "killed", "max_iters": step - 1 }),
            409,
            "below the step",
        ),
    ] {
        let (got, error) = post(&base, "/api/train", &request);
        assert_eq!(got, status, "{request}: {error}");
        assert!(error["error"].as_str().unwrap().contains(piece), "{error}");
    }
    assert_eq!(std::fs::read(dir.join("summary.json")).ok(), summary_before);
    assert_eq!(
        get(&base, "/api/train").1["signal"],
        9,
        "nothing new started"
    );
    let (status, resumed) = post(
        &base,
        "/api/train",
        &json!({ "resume": "killed", "max_iters": step + 40 }),
    );
    assert_eq!(status, 200, "{resumed}");
    common::wait_for("the resumed run to end", || {
        get(&base, "/api/train").1["running"] == false
    });
    assert_eq!(get(&base, "/api/train").1["exit"], 0);
}

/// A run whose metrics have a bad row, or whose config is broken, stays in the list with what
/// is wrong, instead of vanishing.
#[test]
fn a_run_whose_files_cannot_be_read_is_listed_with_what_is_wrong() {
    let tmp = tempfile::tempdir().unwrap();
    for name in ["good", "bad-row", "bad-config"] {
        train_cli(&tmp.path().join(name), &["--max-iters", "40"]);
    }
    let metrics = tmp.path().join("bad-row/metrics.csv");
    let text = std::fs::read_to_string(&metrics).unwrap();
    std::fs::write(&metrics, text + "60,oops,1,2,3,4\n").unwrap();
    std::fs::write(tmp.path().join("bad-config/config.toml"), "[model\n").unwrap();
    let base = serve_runs(tmp.path());
    assert_eq!(names(&base), ["bad-config", "bad-row", "good"]);
    let (_, list) = get(&base, "/api/runs");
    let problem = |i: usize| {
        list["runs"][i]["problem"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    assert!(problem(0).contains("config.toml"), "{}", problem(0));
    assert!(problem(1).contains("metrics.csv"), "{}", problem(1));
    assert_eq!(list["runs"][2]["problem"], Value::Null);
    let (status, detail) = get(&base, "/api/run?name=bad-row");
    assert_eq!(status, 200, "{detail}");
    assert!(detail["problem"].is_string());
}

/// A ci pasted with its tune's header is judged by its tune, as `score` judges it.
#[test]
fn a_pasted_ci_is_judged_by_its_tune() {
    let tmp = tempfile::tempdir().unwrap();
    let base = serve_runs(tmp.path());
    let ci = "【浣溪沙】一曲新词酒一杯。去年天气旧亭台。夕阳西下几时回。无可奈何花落去，似曾相识燕归来。小园香径独徘徊。";
    let query = format!("/api/score?text={}", ureq_escape(ci));
    let (status, scored) = get(&base, &query);
    assert_eq!(status, 200, "{scored}");
    assert_eq!(scored["ci"]["tune"], "浣溪沙", "{scored}");
    // 晏殊's ci keeps every sure tone of the learned 词谱 and rhymes in one 部 (杯台回来徊: 灰).
    assert_eq!(
        scored["said"],
        "浣溪沙: has the tune's pattern; 31/31 sure tones fit, 5/5 rhyme positions rhyme in their segment's 部",
        "{scored}"
    );
    let first = &scored["marks"]["lines"][0]["chars"][0]["c"];
    assert_eq!(first, "一", "the header is not set as the poem: {scored}");
    let rhymes: Vec<&str> = (0..6)
        .filter_map(|l| {
            scored["marks"]["lines"][l]["chars"][6]["rhyme"]
                .as_array()
                .map(|_| "rhyme")
        })
        .collect();
    assert_eq!(
        rhymes.len(),
        5,
        "the tune's five rhyme positions are marked: {scored}"
    );
    // 韦庄's 菩萨蛮 changes rhyme (换韵) in pairs: its four rhymes are marked, each pair's 部 of its
    // own segment (好老 第八部 上去, 天眠 第七部 平, 月雪 第十八部 入, 乡肠 第二部 平).
    let pusaman = "【菩萨蛮】人人尽说江南好。游人只合江南老。春水碧于天。画船听雨眠。\
                   垆边人似月。皓腕凝霜雪。未老莫还乡。还乡须断肠。";
    let scored = get(&base, &format!("/api/score?text={}", ureq_escape(pusaman))).1;
    assert_eq!(
        scored["said"],
        "菩萨蛮: has the tune's pattern; 32/32 sure tones fit, 8/8 rhyme positions rhyme in their segment's 部",
        "{scored}"
    );
    let marked: Vec<String> = (0..8)
        .filter_map(|l| {
            let chars = scored["marks"]["lines"][l]["chars"].as_array()?;
            let rhyme = chars.last()?["rhyme"].as_array()?;
            Some(
                rhyme
                    .iter()
                    .map(|b| b.as_str().unwrap().to_string())
                    .collect(),
            )
        })
        .collect();
    assert_eq!(
        marked,
        [
            "第8部上去",
            "第8部上去",
            "第7部平",
            "第7部平",
            "第18部入",
            "第18部入",
            "第2部平",
            "第2部平"
        ],
        "{scored}"
    );
    let broken = format!(
        "/api/score?text={}",
        ureq_escape("【浣溪沙】一曲新词酒一杯。")
    );
    let said = get(&base, &broken).1["said"].as_str().unwrap().to_string();
    assert!(said.starts_with("浣溪沙: not the tune's pattern"), "{said}");
}

/// `text` percent-encoded for a query.
fn ureq_escape(text: &str) -> String {
    text.bytes().map(|b| format!("%{b:02X}")).collect()
}

/// A run measured on a validation file that since took a line of its corpus is refused when
/// its resume is asked for, not after the run started (#78: 200, then the child failed).
#[test]
fn a_resume_whose_validation_now_leaks_is_refused_when_asked() {
    let tmp = tempfile::tempdir().unwrap();
    let (poems, tiny) = (
        common::root_file("data/poems.txt"),
        common::root_file("data/tiny.txt"),
    );
    // Poems that share no line of four characters or more with the tiny corpus.
    let shares = |poem: &str| {
        let lines = poem.split(['，', '。']).filter(|l| l.chars().count() >= 4);
        lines.into_iter().any(|line| tiny.contains(line))
    };
    let apart: Vec<&str> = poems.lines().filter(|p| !shares(p)).take(60).collect();
    let validation = tmp.path().join("val.txt");
    std::fs::write(&validation, apart.join("\n") + "\n").unwrap();
    let set = format!("data.validation={}", validation.display());
    train_cli(
        &tmp.path().join("leakrun"),
        &["--set", &set, "--max-iters", "20"],
    );
    // A held-out poem (the 20th) becomes a poem of the corpus.
    let mut leaking = apart.clone();
    leaking[19] = common::root_file("data/tiny.txt")
        .lines()
        .next()
        .unwrap()
        .to_string()
        .leak();
    std::fs::write(&validation, leaking.join("\n") + "\n").unwrap();
    let base = serve_runs(tmp.path());
    let (status, error) = post(
        &base,
        "/api/train",
        &json!({ "resume": "leakrun", "max_iters": 40 }),
    );
    assert_eq!(status, 400, "{error}");
    assert!(
        error["error"].as_str().unwrap().contains("share"),
        "{error}"
    );
    assert_eq!(get(&base, "/api/train").1["running"], false);
}
