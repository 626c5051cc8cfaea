//! The runs under one folder (checkpoints/ by default) as the page lists them: what each is, how
//! far it got and how it ended, read from the files `train` writes (config.toml, metrics.csv,
//! samples.jsonl, summary.json). An ablation's variants (checkpoints/ablations/<name>/<variant>)
//! are runs too.

use super::{params, ApiError, Served};
use crate::config::RunConfig;
use crate::train::checkpoint::ParentRecord;
use crate::train::metrics::{read_metrics, read_samples, EvalSample, MetricRow};
use crate::train::run_dir::PARENT_FILE;
use crate::train::run_dir::{
    RunDir, CONFIG_FILE, METRICS_FILE, MODEL_FILE, SAMPLES_FILE, STATE_FILE, SUMMARY_FILE,
};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// How deep under the folder runs are looked for (ablations/<name>/<variant> is three).
const DEPTH: usize = 3;
/// The most characters of a run's name.
pub const MAX_NAME_CHARS: usize = 120;
/// A run is shown as being trained (by this server or by `train` in a terminal) while a process
/// holds its lock; where the system has no advisory locks, while its files changed this recently
/// and it has not written its summary since.
const ACTIVE_WITHIN: Duration = Duration::from_secs(120);

/// One run, as the list shows it.
#[derive(Debug, Clone, Serialize)]
pub struct RunEntry {
    /// Its path under the folder, `/`-separated: what the API's `run` parameters take.
    pub name: String,
    /// Its config in one line: layers × heads × width, positions, optimiser, corpus, and the run
    /// it was fine-tuned from.
    pub line: String,
    /// Its whole config, for the page to highlight what differs between runs (`None` when its
    /// config.toml cannot be read: `problem` says why).
    pub config: Option<RunConfig>,
    /// What is wrong with its files (a config or metrics that cannot be read), if anything.
    pub problem: Option<String>,
    /// Steps done (the last evaluation's) and planned.
    pub step: usize,
    pub max_iters: usize,
    /// The last evaluation's validation loss.
    pub val_loss: Option<f64>,
    /// From the summary of its last `train`: the whole validation split's loss, tokens per
    /// second, the machine and when it ended.
    pub val_loss_whole: Option<f64>,
    pub tokens_per_s: Option<f64>,
    pub machine: Option<String>,
    pub finished: Option<String>,
    /// Whether it has weights to write with.
    pub has_model: bool,
    /// Whether it can be resumed (it holds a training state).
    pub resumable: bool,
    /// Whether it seems to be training now (see [`ACTIVE_WITHIN`]).
    pub active: bool,
}

/// A run's curves and samples, for the page's plot.
#[derive(Debug, Clone, Serialize)]
pub struct RunDetail {
    #[serde(flatten)]
    pub entry: RunEntry,
    pub rows: Vec<MetricRow>,
    pub samples: Vec<EvalSample>,
}

/// Every run under `root` (a folder with a config.toml), sorted by name, those whose files
/// cannot be read too, with what is wrong; folders that are not runs are skipped (a run being
/// started has no config yet).
pub fn list_runs(root: &Path) -> Vec<RunEntry> {
    let mut found = Vec::new();
    find_runs(root, root, DEPTH, &mut found);
    let mut entries: Vec<RunEntry> = found.iter().map(|dir| entry(root, dir)).collect();
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    entries
}

/// Adds the run directories at most `depth` levels under `dir` to `found`.
fn find_runs(root: &Path, dir: &Path, depth: usize, found: &mut Vec<PathBuf>) {
    if dir != root && dir.join(CONFIG_FILE).is_file() {
        found.push(dir.to_path_buf());
        return;
    }
    if depth == 0 {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir()); // symbolic links are not followed
        if is_dir && valid_component(&entry.file_name().to_string_lossy()) {
            find_runs(root, &entry.path(), depth - 1, found);
        }
    }
}

/// Whether `part` may be one component of a run's name: letters, digits, `-`, `_` and `.`, not
/// starting with a dot (no `..`, no hidden folders).
fn valid_component(part: &str) -> bool {
    !part.is_empty()
        && !part.starts_with('.')
        && part
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// The directory of the run named `name` under `root`, or why the name is not one (a symbolic
/// link at any of its components leads outside the folder of runs).
pub fn run_dir(root: &Path, name: &str) -> Result<PathBuf, String> {
    let parts: Vec<&str> = name.split('/').collect();
    let valid = name.chars().count() <= MAX_NAME_CHARS
        && parts.len() <= DEPTH
        && parts.iter().all(|p| valid_component(p));
    if !valid {
        return Err(format!(
            "`{}` is not a run's name: use letters, digits, - _ and . (at most {MAX_NAME_CHARS} characters, {DEPTH} folders deep, as the runs list gives them)",
            crate::data::error::printable(&name.chars().take(MAX_NAME_CHARS).collect::<String>())
        ));
    }
    let mut dir = root.to_path_buf();
    for part in parts {
        dir.push(part);
        if dir.is_symlink() {
            return Err(format!(
                "`{name}`: {} is a symbolic link, and the page opens and creates runs only as real folders inside {}: use the run by its real place, or move it there",
                dir.display(),
                root.display()
            ));
        }
    }
    Ok(dir)
}

/// The list's entry of the run in `dir`.
fn entry(root: &Path, dir: &Path) -> RunEntry {
    entry_and_rows(root, dir).0
}

/// The list's entry of the run in `dir`, and its metrics rows; a file that cannot be read is
/// the entry's problem.
fn entry_and_rows(root: &Path, dir: &Path) -> (RunEntry, Vec<MetricRow>) {
    let mut problems = Vec::new();
    let config = RunConfig::load(&dir.join(CONFIG_FILE))
        .map_err(|e| problems.push(format!("{e:#}")))
        .ok();
    let rows = match dir.join(METRICS_FILE).exists() {
        true => read_metrics(&dir.join(METRICS_FILE))
            .map_err(|e| problems.push(format!("{e:#}")))
            .unwrap_or_default(),
        false => Vec::new(),
    };
    let ended = read_summary(dir).unwrap_or_default();
    let changed = |file: &str| dir.join(file).metadata().and_then(|m| m.modified()).ok();
    let last_write = [METRICS_FILE, STATE_FILE]
        .iter()
        .filter_map(|f| changed(f))
        .max();
    let summarised = changed(SUMMARY_FILE);
    let recently_written = || {
        last_write.is_some_and(|written| {
            let recent = SystemTime::now()
                .duration_since(written)
                .map_or(true, |age| age < ACTIVE_WITHIN);
            recent && summarised.is_none_or(|s| s < written)
        })
    };
    let active = RunDir::new(dir)
        .is_locked()
        .unwrap_or_else(recently_written);
    let mut line = config.as_ref().map_or_else(|| "?".into(), one_line);
    if let Some(parent) = read_parent(dir) {
        line += &format!(
            ", fine-tuned from {}",
            run_name(root, Path::new(&parent.run))
        );
    }
    let entry = RunEntry {
        name: run_name(root, dir),
        line,
        step: rows.last().map_or(0, |r| r.step),
        max_iters: config.as_ref().map_or(0, |c| c.train.max_iters),
        val_loss: rows.last().map(|r| r.val_loss),
        val_loss_whole: ended.val_loss_whole,
        tokens_per_s: ended.tokens_per_s,
        machine: ended.machine,
        finished: ended.finished,
        has_model: dir.join(MODEL_FILE).is_file(),
        resumable: dir.join(STATE_FILE).is_file(),
        active,
        config,
        problem: (!problems.is_empty()).then(|| problems.join("; ")),
    };
    (entry, rows)
}

/// The name of the run in `dir`: its path under `root`, `/`-separated (its whole path when it
/// is not under `root`).
pub fn run_name(root: &Path, dir: &Path) -> String {
    match dir.strip_prefix(root) {
        Ok(inside) => inside
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/"),
        Err(_) => dir.display().to_string(),
    }
}

/// What the list shows of a run's summary.json (the rest of [`crate::train::TrainSummary`] is
/// not read).
#[derive(Default, Deserialize)]
struct Ended {
    val_loss_whole: Option<f64>,
    tokens_per_s: Option<f64>,
    machine: Option<String>,
    finished: Option<String>,
}

/// The summary a run's last `train` wrote, if it is there and reads as JSON.
fn read_summary(dir: &Path) -> Option<Ended> {
    let text =
        crate::files::read_text_limited(&dir.join(SUMMARY_FILE), crate::files::SMALL_FILE_LIMIT)
            .ok()?;
    serde_json::from_str(&text).ok()
}

/// The record of the run `dir` was fine-tuned from, if it was.
fn read_parent(dir: &Path) -> Option<ParentRecord> {
    let file = dir.join(PARENT_FILE);
    let text = crate::files::read_text_limited(&file, crate::files::SMALL_FILE_LIMIT).ok()?;
    serde_json::from_str(&text).ok()
}

/// `2 layers × 4 heads × 128, rope, adamw cosine, data/poems.txt`.
pub fn one_line(config: &RunConfig) -> String {
    let m = &config.model;
    format!(
        "{} × {} × {}, {}, {} {}, {}",
        crate::config::count(m.n_layer, "layer"),
        crate::config::count(m.n_head, "head"),
        m.n_embd,
        m.position,
        config.optimizer.kind.name(),
        config.schedule.kind.name(),
        config.data.corpus
    )
}

/// The run named `name` under `root` with its curves and samples.
pub fn run_detail(root: &Path, name: &str) -> Result<RunDetail, String> {
    let dir = run_dir(root, name)?;
    if !dir.join(CONFIG_FILE).is_file() {
        return Err(format!(
            "there is no run `{name}` under {}/: choose one of the runs list (GET /api/runs)",
            root.display()
        ));
    }
    let (entry, rows) = entry_and_rows(root, &dir);
    let samples = match dir.join(SAMPLES_FILE).exists() {
        true => read_samples(&dir.join(SAMPLES_FILE)).map_err(|e| format!("{e:#}"))?,
        false => Vec::new(),
    };
    Ok(RunDetail {
        entry,
        rows,
        samples,
    })
}

/// `GET /api/runs`: every run under the folder of runs, and the server's training.
pub async fn list(State(served): State<Arc<Served>>) -> Json<Value> {
    let root = served.root.clone();
    let runs = tokio::task::spawn_blocking(move || list_runs(&root))
        .await
        .unwrap_or_default();
    Json(
        json!({ "root": served.root.display().to_string(), "runs": runs, "training": served.trainer.status() }),
    )
}

/// Which run.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NameParams {
    name: String,
}

/// `GET /api/run?name=…`: one run with its metrics rows and the poem of each evaluation.
pub async fn detail(
    State(served): State<Arc<Served>>,
    query: Result<Query<NameParams>, QueryRejection>,
) -> Result<Json<RunDetail>, ApiError> {
    let name = params(query)?.name;
    let root = served.root.clone();
    tokio::task::spawn_blocking(move || run_detail(&root, &name))
        .await
        .map_err(ApiError::internal)?
        .map(Json)
        .map_err(|message| ApiError(StatusCode::NOT_FOUND, message))
}

#[cfg(test)]
mod tests {
    use super::{run_dir, valid_component};
    use std::path::Path;

    #[test]
    fn a_runs_name_stays_under_the_folder() {
        let root = Path::new("checkpoints");
        assert_eq!(run_dir(root, "tiny").unwrap(), root.join("tiny"));
        assert_eq!(
            run_dir(root, "ablations/heads/h4").unwrap(),
            root.join("ablations").join("heads").join("h4")
        );
        for bad in [
            "",
            "..",
            "../etc",
            "a/../../b",
            "/etc",
            ".hidden",
            "a//b",
            "a\\b",
            "a/b/c/d",
            "名字",
            "a b",
        ] {
            assert!(run_dir(root, bad).is_err(), "{bad}");
        }
        assert!(valid_component("default-20261203-174132") && valid_component("v1.2_x"));
    }
}
