//! The runs the server has open to write with: each loaded once with a generator whose packed
//! weights its poems share, reloaded when its training writes better weights, and dropped (its
//! memory freed) when more than [`OPEN_RUNS`] runs were asked for since.

use crate::data::header::Poets;
use crate::experiments::lesson::Report;
use crate::sample::Generator;
use crate::train::load::{load_run, LoadedRun};
use crate::train::run_dir::MODEL_FILE;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

/// Runs kept loaded at once (each a model's weights twice: as tensors and packed).
pub const OPEN_RUNS: usize = 3;

self_cell::self_cell!(
    /// A run and the generator that borrows its model.
    struct Loaded {
        owner: LoadedRun,
        #[not_covariant]
        dependent: Generator,
    }
);

/// One run loaded to write with.
pub struct OpenRun {
    /// Its name in the runs list (or its path, for a run outside the folder of runs).
    pub name: String,
    dir: PathBuf,
    /// When its weights were written, to see that they changed.
    written: Option<SystemTime>,
    loaded: Loaded,
    /// The order experiment on untrained models of its vocabulary, computed on first request.
    pub untrained: OnceLock<Report>,
    /// The poets of its corpus (titled poems), read on first request.
    poets: OnceLock<Option<Poets>>,
}

impl OpenRun {
    /// Loads the run in `dir` and packs its weights for generation.
    pub fn load(name: String, dir: &Path) -> anyhow::Result<OpenRun> {
        let written = weights_written(dir);
        let loaded = Loaded::try_new(load_run(dir)?, |run| {
            let mut generator = Generator::new(&run.model);
            generator.prepare()?;
            anyhow::Ok(generator)
        })?;
        Ok(OpenRun {
            name,
            dir: dir.to_path_buf(),
            written,
            loaded,
            untrained: OnceLock::new(),
            poets: OnceLock::new(),
        })
    }

    /// The run: model, tokenizer and config.
    pub fn run(&self) -> &LoadedRun {
        self.loaded.borrow_owner()
    }

    /// The poets of its corpus, where it is a readable file of titled poems.
    pub fn poets(&self) -> Option<&Poets> {
        let corpus = &self.run().config.data.corpus;
        self.poets
            .get_or_init(|| Poets::of_corpus_file(corpus.as_ref()))
            .as_ref()
    }

    /// Calls `f` with the run and its generator.
    pub fn with_generator<R>(&self, f: impl FnOnce(&LoadedRun, &Generator) -> R) -> R {
        self.loaded
            .with_dependent(|run, generator| f(run, generator))
    }

    /// Whether its weights on disk are still the ones loaded.
    fn is_current(&self) -> bool {
        weights_written(&self.dir) == self.written
    }
}

fn weights_written(dir: &Path) -> Option<SystemTime> {
    dir.join(MODEL_FILE)
        .metadata()
        .and_then(|m| m.modified())
        .ok()
}

/// The open runs, the most recently asked for last.
#[derive(Default)]
pub struct Shelf {
    runs: Mutex<Vec<Arc<OpenRun>>>,
}

impl Shelf {
    /// The run in `dir` named `name`: the open one if its weights are current, else loaded now
    /// (a blocking call: run it off the server's threads).
    pub fn get(&self, name: &str, dir: &Path) -> anyhow::Result<Arc<OpenRun>> {
        let found = {
            let mut runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
            let at = runs.iter().position(|r| r.dir == dir && r.is_current());
            at.map(|i| {
                let run = runs.remove(i);
                runs.push(run.clone());
                run
            })
        };
        if let Some(run) = found {
            return Ok(run);
        }
        let run = Arc::new(OpenRun::load(name.to_string(), dir)?);
        let mut runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        runs.retain(|r| r.dir != dir);
        runs.push(run.clone());
        if runs.len() > OPEN_RUNS {
            runs.remove(0); // poems still being written keep their run until they end
        }
        Ok(run)
    }
}
