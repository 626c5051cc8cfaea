//! A run's folder: the files it holds, the lock a training process holds on it for its whole
//! life, and what may be written there (a new run needs a folder without a run's files; a resume
//! a checkpoint).

use crate::cli::shell_word;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// The best weights, for sampling.
pub const MODEL_FILE: &str = "model.safetensors";
/// Weights, optimiser moments, step and RNG state of the latest checkpoint.
pub const STATE_FILE: &str = "train_state.safetensors";
/// The whole run config.
pub const CONFIG_FILE: &str = "config.toml";
/// The tokenizer.
pub const TOKENIZER_FILE: &str = "tokenizer.json";
/// One row per evaluation.
pub const METRICS_FILE: &str = "metrics.csv";
/// The loss curves.
pub const PLOT_FILE: &str = "loss.svg";
/// A poem drawn at each evaluation, one JSON object a line.
pub const SAMPLES_FILE: &str = "samples.jsonl";
/// What the run's last invocation ended with ([`crate::train::TrainSummary`] as JSON).
pub const SUMMARY_FILE: &str = "summary.json";
/// The run a fine-tuned run started from.
pub const PARENT_FILE: &str = "parent.json";

/// The advisory lock a training process holds on its run directory for its whole life.
pub const LOCK_FILE: &str = ".lock";

/// What the lock file says, so that a `.lock` of the user's is not taken for it (earlier
/// versions left theirs empty).
pub const LOCK_MARK: &[u8] = b"held by shige's train while it writes a run in this folder\n";

/// Every file a run writes.
pub const RUN_FILES: [&str; 9] = [
    MODEL_FILE,
    STATE_FILE,
    CONFIG_FILE,
    TOKENIZER_FILE,
    METRICS_FILE,
    PLOT_FILE,
    SAMPLES_FILE,
    SUMMARY_FILE,
    PARENT_FILE,
];

/// A run directory.
#[derive(Debug, Clone)]
pub struct RunDir {
    /// Its path.
    pub path: PathBuf,
}

/// Held while a process writes a run directory; dropping it (or the process ending in any way)
/// releases the directory.
#[derive(Debug)]
pub struct RunLock {
    _file: std::fs::File,
}

impl RunDir {
    /// A run directory at `path` (not created yet).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        RunDir { path: path.into() }
    }

    /// The path of one of its files.
    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Whether it holds one of a run's files (a run stopped before its first checkpoint leaves
    /// some without a training state).
    fn holds_run_files(&self) -> bool {
        RUN_FILES.iter().any(|name| self.file(name).exists())
    }

    /// Whether it holds a resumable checkpoint.
    pub fn holds_run(&self) -> bool {
        self.file(STATE_FILE).exists()
    }

    /// Creates the directory if needed and takes its lock, so that no second process writes the
    /// same run: two runs writing one directory would mix their files.
    pub fn lock(&self) -> Result<RunLock> {
        crate::files::create_dir(&self.path, "--out")?;
        let made = !self.file(LOCK_FILE).exists();
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.file(LOCK_FILE))
            .with_context(|| format!("cannot create the lock file in {}", self.path.display()))?;
        crate::files::check_writable(&self.path, "--out")?;
        // An advisory lock on unix (flock), a lock of the whole file on Windows; none where the
        // system has no locks (the browser's page trains in one process).
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => bail!(
                "{} is being written by another training process: wait for it to end, or choose another --out",
                self.path.display()
            ),
            Err(std::fs::TryLockError::Error(e)) if e.kind() == std::io::ErrorKind::Unsupported => {}
            Err(std::fs::TryLockError::Error(e)) => bail!(
                "cannot lock {}: {e}; check the folder's file system, or choose another --out",
                self.file(LOCK_FILE).display()
            ),
        }
        if made {
            // Only a lock file it made says it is this program's: an empty `.lock` found here
            // is left as it is.
            use std::io::Write;
            let mut file = &file;
            file.write_all(LOCK_MARK).with_context(|| {
                format!("cannot write the lock file in {}", self.path.display())
            })?;
        }
        Ok(RunLock { _file: file })
    }

    /// Whether a training process holds the directory's lock now (`None` where the system has
    /// no advisory locks to ask).
    pub fn is_locked(&self) -> Option<bool> {
        let Ok(file) = std::fs::File::open(self.file(LOCK_FILE)) else {
            return Some(false); // no lock file: nothing ever trained here
        };
        // A shared lock taken here is released when `file` closes, at once.
        match file.try_lock_shared() {
            Ok(()) => Some(false),
            Err(std::fs::TryLockError::WouldBlock) => Some(true),
            Err(std::fs::TryLockError::Error(_)) => None,
        }
    }

    /// Checks that the directory to resume exists and is one (what it holds is checked under its
    /// lock, by [`RunDir::check_resumable`]: another process may be writing its first checkpoint).
    pub fn check_present(&self) -> Result<()> {
        refuse_file(&self.path)?;
        if !self.path.exists() {
            bail!(
                "no run to resume at {}{}: give --resume a run directory that `train` wrote, or start one with --out {}",
                self.path.display(),
                crate::files::where_missing(&self.path),
                shell_word(&self.path)
            );
        }
        Ok(())
    }

    /// Checks that a run can be resumed from here: a directory holding a training state.
    pub fn check_resumable(&self) -> Result<()> {
        self.check_present()?;
        if self.holds_run() {
            return self.check_run_files();
        }
        if self.holds_run_files() {
            bail!(
                "{} holds the start of a run that stopped before its first checkpoint ({STATE_FILE} is missing), so there is nothing to resume: \
                 remove its files and start again with --out {}, or choose another --out",
                self.path.display(),
                shell_word(&self.path)
            );
        }
        bail!(
            "{} holds no checkpoint to resume ({STATE_FILE} is missing): start a new run with --out {}",
            self.path.display(),
            shell_word(&self.path)
        )
    }

    /// Checks that every file a run writes here is a file or absent: a folder or a link in the
    /// place of one is refused before the run trains (it would be found at the next save).
    fn check_run_files(&self) -> Result<()> {
        for name in RUN_FILES {
            crate::files::check_replaceable(&self.file(name))?;
        }
        Ok(())
    }

    /// Checks that a new run may start here: the directory is absent or holds nothing but what an
    /// earlier run of this program left before its first file (its lock and temporary files).
    pub fn check_fresh(&self) -> Result<()> {
        let resume = format!("--resume {}", shell_word(&self.path));
        self.check_fresh_or("another --out", &resume)
    }

    /// Refuses a directory that another training process writes now (asked before this process
    /// takes the lock itself).
    pub fn check_not_in_use(&self, other: &str) -> Result<()> {
        if self.is_locked() == Some(true) {
            bail!(
                "{} is being written by another training process: wait for it to end, or choose {other}",
                self.path.display()
            );
        }
        Ok(())
    }

    /// [`RunDir::check_fresh`], whose refusals end by asking to choose `other`, or to continue a
    /// run with `resume` (the page asks for another name, or its runs list's Resume; `train` for
    /// another --out, or --resume).
    pub fn check_fresh_or(&self, other: &str, resume: &str) -> Result<()> {
        if self.path.exists() && !self.path.is_dir() {
            bail!(
                "{} is a file, not a directory for a new run: choose {other}",
                self.path.display()
            );
        }
        let Ok(entries) = std::fs::read_dir(&self.path) else {
            return Ok(());
        };
        let mut foreign = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if RUN_FILES.contains(&name.as_str()) && self.holds_run() {
                bail!(
                    "{} already holds a run: continue it with {resume}, or choose {other}",
                    self.path.display(),
                );
            }
            if RUN_FILES.contains(&name.as_str()) {
                bail!(
                    "{} holds the start of a run that stopped before its first checkpoint ({name}, no training state to resume): \
                     remove its files and start again (they would be written over), or choose {other}",
                    self.path.display()
                );
            }
            let ours = (name == LOCK_FILE && self.own_lock()) || self.is_leftover(&name);
            if !ours {
                foreign.push(name);
            }
        }
        if !foreign.is_empty() {
            foreign.sort();
            bail!(
                "{} holds files that are not a run's ({}): choose {other} (a new or empty directory)",
                self.path.display(),
                foreign.join(", ")
            );
        }
        Ok(())
    }

    /// Undoes what taking the lock added when training failed: the lock file if there was none,
    /// and the directories `made` ([`crate::files::missing_dirs`] before the lock) while they are
    /// empty.
    pub fn tidy_after_failure(&self, made: &[PathBuf], had_lock: bool) {
        if !had_lock {
            let _ = std::fs::remove_file(self.file(LOCK_FILE));
        }
        crate::files::remove_empty_dirs(made);
    }

    /// Removes temporary files that a killed process of this program left behind (the lock must
    /// be held, and must have been this program's before this process took it: `locked_before`,
    /// [`RunDir::own_lock`] asked then).
    pub fn remove_temporary_files(&self, locked_before: bool) {
        if !locked_before {
            return;
        }
        for entry in std::fs::read_dir(&self.path)
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = entry.file_name().to_string_lossy().into_owned();
            if self.is_leftover(&name) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

impl RunDir {
    /// Whether its lock file is this program's (it says so): a `.lock` of the user's is theirs,
    /// an empty one too (earlier versions left theirs empty: their leftovers stay).
    pub fn own_lock(&self) -> bool {
        std::fs::read(self.file(LOCK_FILE)).is_ok_and(|b| b == LOCK_MARK)
    }

    /// Whether `name` is a temporary file that a process of this program writing this run left
    /// behind: one of a run's files, or the probe of its write check, half written, by a process
    /// that no longer runs, in a folder its lock says is this program's (nothing else is).
    fn is_leftover(&self, name: &str) -> bool {
        use crate::files::{process_runs, temporary_of, WRITE_CHECK};
        let writer = temporary_of(name, &RUN_FILES).or_else(|| temporary_of(name, &[WRITE_CHECK]));
        writer.is_some_and(|pid| !process_runs(pid)) && self.own_lock()
    }
}

/// Refuses a file given where a run directory is expected, naming the run that holds it.
pub(super) fn refuse_file(path: &Path) -> Result<()> {
    if !path.exists() || path.is_dir() {
        return Ok(());
    }
    match path.parent().filter(|p| p.join(CONFIG_FILE).exists()) {
        Some(run) => bail!(
            "{} is a file, not a run directory: give the directory that holds it, {}",
            path.display(),
            run.display()
        ),
        None => bail!(
            "{} is a file, not a run directory: give the directory that `train` wrote",
            path.display()
        ),
    }
}
