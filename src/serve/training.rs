//! Training from the page: `train` itself, run as a child process of the server, one run at a
//! time; its progress is read from the files it writes (the runs list) and from its messages;
//! stopping it sends the signal Ctrl-C sends, so it saves a checkpoint that `--resume` (or the
//! page's resume) continues exactly. A run keeps training when its tab closes, as it would in
//! a terminal; any tab of the page sees it and can stop it.

use super::runs::{run_detail, run_dir, MAX_NAME_CHARS};
use super::{body, ApiError, Served};
use crate::clock::UtcTime;
use crate::config::{Override, RunConfig};
use crate::train::checkpoint::saved_step;
use crate::train::parent::Parent;
use crate::train::resume::check_steps_left;
use crate::train::run_dir::{RunDir, CONFIG_FILE, MODEL_FILE, STATE_FILE};
use axum::extract::rejection::JsonRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};

/// Where the shipped configs are, relative to the server's working directory (the repository).
pub const CONFIGS_DIR: &str = "configs";
/// Where the shipped corpora are, likewise.
pub const CORPORA_DIR: &str = "data";
/// Lines of a run's messages kept for the page.
const LOG_LINES: usize = 100;

/// What the page asks to train: a new run from a shipped config with a few overrides, or the
/// resumption of a run.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainRequest {
    /// A config of configs/, by name (`tiny` for configs/tiny.toml), for a new run.
    pub config: Option<String>,
    /// The run to continue, by its name in the runs list.
    pub resume: Option<String>,
    /// The new run's name (default: the config's name and the time, as `train` names runs).
    pub run: Option<String>,
    /// A listed run with weights to start the new one from (fine-tuning, `train --init-from`).
    pub init_from: Option<String>,
    pub n_layer: Option<usize>,
    pub n_head: Option<usize>,
    pub position: Option<String>,
    /// Total steps (for a resumed run too: more steps than it was planned for).
    pub max_iters: Option<usize>,
    /// Any other settings of a new run, as `train --set` takes them: `section.key=value`.
    pub set: Option<Vec<String>>,
}

impl TrainRequest {
    /// The request's settings as `train` takes them: its named fields (each a shortcut for one
    /// key), then `set`'s; a 400 for one that is not a setting or not a value it takes.
    fn overrides(&self) -> Result<Vec<Override>, ApiError> {
        let named = [
            self.n_layer.map(|v| Override::of("model.n_layer", v)),
            self.n_head.map(|v| Override::of("model.n_head", v)),
            self.position
                .as_ref()
                .map(|v| Override::of("model.position", v)),
            self.max_iters.map(|v| Override::of("train.max_iters", v)),
        ];
        let set = self
            .set
            .iter()
            .flatten()
            .map(|text| Some(Override::parse(text)));
        named
            .into_iter()
            .chain(set)
            .flatten()
            .map(|o| o.map_err(ApiError::bad))
            .collect()
    }
}

/// The training of this server: the current (or last) run and its messages.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TrainStatus {
    /// The run's name; `None` before any run was started here.
    pub run: Option<String>,
    pub running: bool,
    /// The process id of the `train` process while it runs.
    pub pid: Option<u32>,
    /// Whether a stop was asked for and the run is saving its checkpoint.
    pub stopping: bool,
    /// The exit code of a run that ended (130 when stopped).
    pub exit: Option<i32>,
    /// The signal that killed a run that ended without an exit code (9 for SIGKILL).
    pub signal: Option<i32>,
    /// The last lines of its messages (stderr and stdout).
    pub log: Vec<String>,
}

/// A `train` process started by the server.
struct Job {
    run: String,
    child: Child,
    /// The write end of the pipe `train --stop-with-parent` watches: held for the child's life,
    /// so that it closes, and the child saves and stops, when this server ends in any way.
    #[cfg_attr(
        unix,
        expect(dead_code, reason = "held for its drop alone where signals exist")
    )]
    parent: Option<ChildStdin>,
    log: Arc<Mutex<VecDeque<String>>>,
    stopping: bool,
    /// How the process ended: its exit code, or the signal that killed it.
    ended: Option<Ended>,
}

/// How a `train` process ended.
#[derive(Debug, Clone, Copy)]
enum Ended {
    Exit(i32),
    /// Killed by a signal (unix alone has them).
    #[cfg(unix)]
    Signal(i32),
}

/// Starts, watches and stops the server's one training process.
pub struct Trainer {
    /// The `train` executable; `None` where it was not found beside the server.
    exe: Option<PathBuf>,
    /// The folder of runs, where new runs go.
    root: PathBuf,
    job: Mutex<Option<Job>>,
}

impl Trainer {
    pub fn new(exe: Option<PathBuf>, root: PathBuf) -> Self {
        Trainer {
            exe,
            root,
            job: Mutex::new(None),
        }
    }

    /// Starts `request`, unless a run is training already (409) or the request is not valid
    /// (400: a config that is not shipped, a name taken, a run that cannot be resumed).
    pub fn start(&self, request: TrainRequest) -> Result<TrainStatus, ApiError> {
        let mut job = self.job.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(running) = running(&mut job) {
            return Err(ApiError(
                StatusCode::CONFLICT,
                format!(
                    "run {} is training already, and the server trains one run at a time: stop it first, or wait for it to end",
                    running.run
                ),
            ));
        }
        let exe = self.exe.as_ref().ok_or_else(|| {
            ApiError(
                StatusCode::SERVICE_UNAVAILABLE,
                "the train program was not found beside the server: build it with `cargo build --release --bin train`, then start the server again".into(),
            )
        })?;
        let (run, args) = self.arguments(&request)?;
        let mut command = Command::new(exe);
        command
            .args(&args)
            .arg("--stop-with-parent")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // Its own process group: a Ctrl-C in the server's terminal reaches the server alone,
        // which then stops the run once (a second SIGINT would make it quit after its save).
        #[cfg(unix)]
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let mut child = command
            .spawn()
            .map_err(|e| ApiError::internal(format!("cannot start {}: {e}", exe.display())))?;
        let log = Arc::new(Mutex::new(VecDeque::new()));
        for out in [
            child
                .stdout
                .take()
                .map(|o| Box::new(o) as Box<dyn Read + Send>),
            child
                .stderr
                .take()
                .map(|e| Box::new(e) as Box<dyn Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let log = log.clone();
            std::thread::spawn(move || keep_lines(out, &log));
        }
        *job = Some(Job {
            run,
            parent: child.stdin.take(),
            child,
            log,
            stopping: false,
            ended: None,
        });
        Ok(status_of(job.as_mut()))
    }

    /// The run's name and `train`'s arguments for `request`, checked.
    fn arguments(&self, request: &TrainRequest) -> Result<(String, Vec<String>), ApiError> {
        let (run, mut args) =
            match (&request.config, &request.resume) {
                (Some(config), None) => self.new_run(config, request)?,
                (None, Some(run)) => self.resumed_run(run, request)?,
                _ => return Err(ApiError::bad(
                    "give either config (a new run from configs/) or resume (a run of the list)",
                )),
            };
        for o in request.overrides()? {
            args.extend(["--set".to_string(), format!("{}={}", o.key, o.value)]);
        }
        Ok((run, args))
    }

    /// A new run from the shipped config `config`: its name, one folder directly under the
    /// folder of runs that is new or empty, and `train`'s first arguments.
    fn new_run(
        &self,
        config: &str,
        request: &TrainRequest,
    ) -> Result<(String, Vec<String>), ApiError> {
        let path = shipped_config(config)?;
        let run = match &request.run {
            Some(run) => run.clone(),
            None => format!("{config}-{}", UtcTime::now().compact()),
        };
        let dir = run_dir(&self.root, &run).map_err(ApiError::bad)?;
        if run.contains('/') {
            return Err(ApiError::bad(format!(
                "`{run}`: a new run's name is one folder name, without /"
            )));
        }
        let new = RunDir::new(&dir);
        new.check_not_in_use("another name")
            .and_then(|()| new.check_fresh_or("another name", "Resume in the runs list"))
            .map_err(|e| ApiError::conflict(format!("{e:#}")))?;
        let parent = match &request.init_from {
            Some(name) => Some(self.parent_run(name)?),
            None => None,
        };
        check_overrides(&path, request, parent.as_ref(), &self.root)?;
        let (path, dir) = (path.display().to_string(), dir.display().to_string());
        let mut args = vec!["--config".into(), path, "--out".into(), dir];
        if let Some(parent) = parent {
            args.extend(["--init-from".into(), parent.record.run]);
        }
        Ok((run, args))
    }

    /// The listed run `name` to fine-tune from, checked as `train --init-from` checks it.
    fn parent_run(&self, name: &str) -> Result<Parent, ApiError> {
        let dir = run_dir(&self.root, name).map_err(ApiError::bad)?;
        if !dir.join(MODEL_FILE).is_file() {
            return Err(ApiError::bad(format!(
                "init_from: `{name}` is no run with weights to start from: choose a run of the list that has evaluated at least once"
            )));
        }
        Parent::open(&dir).map_err(|e| ApiError::bad(format!("init_from: {e:#}")))
    }

    /// The resumption of the listed run `run`: `train`'s first arguments.
    fn resumed_run(
        &self,
        run: &str,
        request: &TrainRequest,
    ) -> Result<(String, Vec<String>), ApiError> {
        let dir = run_dir(&self.root, run).map_err(ApiError::bad)?;
        if !dir.join(STATE_FILE).is_file() {
            return Err(ApiError::bad(format!(
                "run {run} holds no checkpoint to resume: choose a run the list marks resumable"
            )));
        }
        let r = request;
        let changes = r.run.is_some() || r.init_from.is_some() || r.position.is_some();
        let changes = changes || r.n_layer.is_some();
        if changes || r.n_head.is_some() || r.set.is_some() {
            return Err(ApiError::bad(
                "a resumed run keeps its model, recipe and name: give resume alone, or with max_iters",
            ));
        }
        let saved = RunConfig::load(&dir.join(CONFIG_FILE)).map_err(ApiError::bad)?;
        let files = std::iter::once(&saved.data.corpus)
            .chain(&saved.data.validation)
            .chain(&saved.data.decay_corpus);
        if let Some(file) = files
            .into_iter()
            .find(|f| check_corpus("data.corpus", f, &self.root).is_err())
        {
            return Err(ApiError::bad(format!(
                "run {run} reads {}, which is neither in {CORPORA_DIR}/ nor under the folder of runs: the page trains on no other file; resume it from a terminal",
                crate::data::error::printable(file)
            )));
        }
        if RunDir::new(&dir).is_locked() == Some(true) {
            return Err(ApiError(
                StatusCode::CONFLICT,
                format!("run {run} is being trained by another process (a `train` in a terminal?): wait for it to end, or stop it there"),
            ));
        }
        check_texts(&saved)?;
        if let Some(max_iters) = r.max_iters {
            let step = saved_step(&dir).map_err(|e| ApiError::bad(format!("{e:#}")))?;
            let asked = RunConfig::load_with(&dir.join(CONFIG_FILE), &r.overrides()?)
                .map_err(ApiError::bad)?;
            check_steps_left(&dir, step, max_iters)
                .map_err(|e| ApiError::conflict(format!("{e:#}")))?;
            asked.train.validate().map_err(ApiError::bad)?;
        }
        Ok((
            run.to_string(),
            vec!["--resume".into(), dir.display().to_string()],
        ))
    }

    /// Asks the running run to stop: it saves a checkpoint and ends (409 when none runs). Asked
    /// again while it stops, it changes nothing.
    pub fn stop(&self) -> Result<TrainStatus, ApiError> {
        let mut job = self.job.lock().unwrap_or_else(|e| e.into_inner());
        match running(&mut job) {
            Some(running) => {
                running.interrupt_once();
                Ok(status_of(Some(running)))
            }
            None => Err(ApiError(
                StatusCode::CONFLICT,
                "no run is training: there is nothing to stop".into(),
            )),
        }
    }

    pub fn status(&self) -> TrainStatus {
        let mut job = self.job.lock().unwrap_or_else(|e| e.into_inner());
        status_of(job.as_mut())
    }

    /// Stops the running run, if one runs, the way Ctrl-C would, and waits until it has saved
    /// its checkpoint and ended: what a server that is asked to end does first.
    pub fn finish(&self) {
        let mut job = self.job.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(job) = running(&mut job) {
            job.interrupt_once();
            let _ = job.child.wait();
        }
    }
}

impl Drop for Trainer {
    /// A server that ends stops its run the way Ctrl-C would, so that it is saved.
    fn drop(&mut self) {
        self.finish();
    }
}

impl Job {
    /// Whether the process still runs (how it ended noted once it has).
    fn poll(&mut self) -> bool {
        if self.ended.is_none() {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.ended = Some(ended(status));
            }
        }
        self.ended.is_none()
    }

    /// Sends SIGINT, which `train` takes as Ctrl-C, unless it was sent already: a second one
    /// during its save would be said twice, and one after it would end the process at once.
    fn interrupt_once(&mut self) {
        if self.stopping {
            return;
        }
        #[cfg(unix)]
        // SAFETY: kill() only sends a signal, to our own child, which has not been waited for
        // (poll() saw it running), so its pid is not reused.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGINT);
        }
        // Elsewhere (Windows) no signal reaches a child alone: the pipe it watches closes, and
        // it saves and stops as on a first SIGTERM.
        #[cfg(not(unix))]
        drop(self.parent.take());
        self.stopping = true;
    }
}

/// How a process that ended did: its exit code, or the signal that killed it.
fn ended(status: std::process::ExitStatus) -> Ended {
    #[cfg(unix)]
    if let Some(signal) = std::os::unix::process::ExitStatusExt::signal(&status) {
        return Ended::Signal(signal);
    }
    Ended::Exit(status.code().unwrap_or(-1))
}

/// The job in `slot` if its process still runs.
fn running(slot: &mut Option<Job>) -> Option<&mut Job> {
    let job = slot.as_mut()?;
    job.poll().then_some(job)
}

fn status_of(job: Option<&mut Job>) -> TrainStatus {
    match job {
        None => TrainStatus::default(),
        Some(job) => {
            let running = job.poll();
            let log = job.log.lock().unwrap_or_else(|e| e.into_inner());
            TrainStatus {
                run: Some(job.run.clone()),
                running,
                pid: running.then(|| job.child.id()),
                stopping: running && job.stopping,
                exit: match job.ended {
                    Some(Ended::Exit(code)) => Some(code),
                    _ => None,
                },
                signal: match job.ended {
                    #[cfg(unix)]
                    Some(Ended::Signal(signal)) => Some(signal),
                    _ => None,
                },
                log: log.iter().cloned().collect(),
            }
        }
    }
}

/// `GET /api/train`: the server's training, running or last run.
pub async fn status(State(served): State<Arc<Served>>) -> Json<TrainStatus> {
    Json(served.trainer.status())
}

/// `POST /api/train` with a JSON [`TrainRequest`]: starts `train`; 409 while a run trains.
pub async fn start(
    State(served): State<Arc<Served>>,
    request: Result<Json<TrainRequest>, JsonRejection>,
) -> Result<Json<TrainStatus>, ApiError> {
    let request = body(request)?;
    served.trainer.start(request).map(Json)
}

/// `POST /api/train/stop`: stops the running run as Ctrl-C would (it saves a checkpoint first).
pub async fn stop(State(served): State<Arc<Served>>) -> Result<Json<TrainStatus>, ApiError> {
    served.trainer.stop().map(Json)
}

/// How often a training's stream looks at its files.
const WATCH_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

/// `GET /api/train/events`: the server's training as server-sent events: `progress` (`{status,
/// run}`: the [`TrainStatus`] and the run's curves and samples) whenever its files or messages
/// change, then `end` once the process has ended. A client that goes away ends its stream; at
/// most [`super::Limits::watchers`] streams at once (then 503).
pub async fn events(
    State(served): State<Arc<Served>>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let permit = served.watcher_permit()?;
    let (sender, received) = mpsc::channel(8);
    tokio::spawn(async move {
        let _permit = permit; // held while the stream runs
        let mut last = None;
        loop {
            let status = served.trainer.status();
            let (root, name) = (served.root.clone(), status.run.clone());
            let run = tokio::task::spawn_blocking(move || {
                name.and_then(|name| run_detail(&root, &name).ok())
            })
            .await
            .ok()
            .flatten();
            let seen = (
                status.running,
                status.stopping,
                status.log.len(),
                status.log.last().cloned(),
                run.as_ref().map(|r| (r.rows.len(), r.samples.len())),
            );
            if last.as_ref() != Some(&seen) {
                let event = Event::default()
                    .event("progress")
                    .json_data(json!({ "status": status, "run": run }));
                if sender.send(event.unwrap_or_default()).await.is_err() {
                    return; // nobody listens
                }
                last = Some(seen);
            }
            if !status.running {
                // (An event without data is not dispatched by browsers.)
                let _ = sender
                    .send(Event::default().event("end").data("ended"))
                    .await;
                return;
            }
            tokio::time::sleep(WATCH_EVERY).await;
        }
    });
    Ok(Sse::new(ReceiverStream::new(received).map(Ok)).keep_alive(KeepAlive::default()))
}

/// Keeps the last [`LOG_LINES`] lines of `out` in `log` (a progress bar's `\r` ends a line too).
fn keep_lines(out: Box<dyn Read + Send>, log: &Mutex<VecDeque<String>>) {
    for line in BufReader::new(out).split(b'\n').map_while(Result::ok) {
        let text = String::from_utf8_lossy(&line);
        let last = text.rsplit('\r').find(|part| !part.trim().is_empty());
        let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
        log.push_back(last.unwrap_or("").trim_end().to_string());
        while log.len() > LOG_LINES {
            log.pop_front();
        }
    }
}

/// The configs of configs/, by name, sorted.
pub fn shipped_configs() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(CONFIGS_DIR)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_suffix(".toml").map(str::to_string)
        })
        .collect();
    names.sort();
    names
}

/// The path of the shipped config `name`, or a 400 that lists them.
fn shipped_config(name: &str) -> Result<PathBuf, ApiError> {
    let names = shipped_configs();
    if names.is_empty() {
        let here = std::env::current_dir().map_or_else(|_| "?".into(), |d| d.display().to_string());
        return Err(ApiError::bad(format!(
            "this server finds no {CONFIGS_DIR}/ folder in the folder it was started in ({here}): start `serve` in the repository, where {CONFIGS_DIR}/ is, to train from the page"
        )));
    }
    if name.chars().count() > MAX_NAME_CHARS || !names.iter().any(|n| n == name) {
        return Err(ApiError::bad(format!(
            "config must be one of configs/: {}",
            names.join(", ")
        )));
    }
    Ok(Path::new(CONFIGS_DIR).join(format!("{name}.toml")))
}

/// Checks the config at `path` with `request`'s overrides (and the model of the run it starts
/// from) as `train` will, so that a bad combination (heads that do not divide the width, a shape
/// that is not the parent's) is a 400 now, not a failed run; and that its corpus is one the page
/// offers ([`check_corpus`]).
fn check_overrides(
    path: &Path,
    request: &TrainRequest,
    parent: Option<&Parent>,
    root: &Path,
) -> Result<(), ApiError> {
    let overrides = request.overrides()?;
    let mut config = match parent {
        Some(parent) => parent
            .config_for(path, &overrides)
            .map_err(|e| ApiError::bad(format!("{e:#}")))?,
        None => RunConfig::load_with(path, &overrides).map_err(ApiError::bad)?,
    };
    check_corpus("data.corpus", &config.data.corpus, root)?;
    if let Some(validation) = &config.data.validation {
        check_corpus("data.validation", validation, root)?;
    }
    if let Some(decay) = &config.data.decay_corpus {
        check_corpus("data.decay_corpus", decay, root)?;
    }
    check_texts(&config)?;
    // The corpus decides the vocabulary when the run starts; any size checks the rest.
    config.model.vocab_size = config.model.vocab_size.max(1);
    config.validate().map_err(ApiError::bad)?;
    let input_parameters = crate::verse::inputs::parameters(&config.model)
        .map_err(|e| ApiError::bad(format!("{e:#}")))? as f64;
    let batch = config.train.batch_size;
    config
        .model
        .check_training_memory(batch, input_parameters)
        .map_err(ApiError::bad)
}

/// Reads the texts of `config` as `train` will, where it names a validation or decay file: a
/// corpus that holds a held-out line, or a decay of held-out poems alone, is refused when the
/// run is asked for (a new run, or a resumed one whose files changed since), not when it starts.
fn check_texts(config: &RunConfig) -> Result<(), ApiError> {
    let data = &config.data;
    if data.validation.is_some() || data.decay_corpus.is_some() {
        crate::data::RunText::load(&data.corpus, data.kind, data.others())
            .map_err(|e| ApiError::bad(e.to_string()))?;
    }
    Ok(())
}

/// Refuses a corpus (or validation file, `key`) the page does not offer: the page trains on the
/// corpora of data/ and on files under the folder of runs `root`, each a real file there (a
/// symbolic link that leads elsewhere does not count), so that no page can make the server read
/// any other file.
fn check_corpus(key: &str, corpus: &str, root: &Path) -> Result<(), ApiError> {
    let inside = |dir: &Path| {
        let (file, dir) = (Path::new(corpus).canonicalize(), dir.canonicalize());
        matches!((file, dir), (Ok(f), Ok(d)) if f.starts_with(&d) && f.is_file())
    };
    if inside(Path::new(CORPORA_DIR)) || inside(root) {
        return Ok(());
    }
    if !Path::new(corpus).exists() {
        return Err(ApiError::bad(format!(
            "{key}: there is no file {}{}: give one of {CORPORA_DIR}/, e.g. data/tiny.txt",
            crate::data::error::printable(corpus),
            crate::files::where_missing(Path::new(corpus))
        )));
    }
    Err(ApiError::bad(format!(
        "{key}: the page trains on the corpora of {CORPORA_DIR}/ and on files under the folder of runs ({}); {} is neither: copy it there",
        root.display(),
        crate::data::error::printable(corpus)
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A symbolic link at `link` to the system's passwd file, where links exist (else that file).
    fn link_to_passwd(link: &Path) -> String {
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink("/etc/passwd", link).unwrap();
            link.display().to_string()
        }
        #[cfg(not(unix))]
        {
            let _ = link;
            "/etc/passwd".to_string()
        }
    }

    #[test]
    fn the_page_trains_only_on_corpora_of_data_and_of_its_runs_folder() {
        let root = tempfile::tempdir().unwrap();
        let own = root.path().join("mine/poems.txt");
        std::fs::create_dir_all(own.parent().unwrap()).unwrap();
        std::fs::write(&own, "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。\n").unwrap();
        let shown = |p: &Path| p.display().to_string();
        for offered in ["data/tiny.txt", "data/./poems.txt", &shown(&own)] {
            assert!(
                check_corpus("data.corpus", offered, root.path()).is_ok(),
                "{offered}"
            );
        }
        let refused = [
            "/etc/passwd".to_string(),
            "data/../Cargo.toml".to_string(),
            "data".to_string(),
            link_to_passwd(&root.path().join("mine/link.txt")),
        ];
        for other in refused {
            let err = check_corpus("data.corpus", &other, root.path()).unwrap_err();
            assert!(err.1.contains("is neither"), "{other}: {}", err.1);
        }
    }
}
