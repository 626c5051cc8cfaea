//! A run opened for training in its folder: the folder checked and locked, the corpus read, the
//! vocabulary (the run's saved one on a resume, the parent's extended when fine-tuning), the
//! config completed and, on a resume, checked against the saved one; everything set up
//! ([`super::setup`]), fresh or restored from its checkpoint ([`super::resume`]). The training
//! loop ([`super::trainer`]) gets a ready [`OpenRun`] and only trains, evaluates and saves.

use crate::config::RunConfig;
use crate::data::error::describe_char;
use crate::data::{CharTokenizer, DataError, RunText};
use crate::train::parent::Parent;
use crate::train::resume::check_steps_left;
use crate::train::resume::{check_resume, restore};
use crate::train::run_dir::{RunDir, RunLock, LOCK_FILE, TOKENIZER_FILE};
use crate::train::setup::{complete_config, new_vocabulary, Setup};
use crate::train::state::Progress;
use anyhow::{bail, Result};
use candle_core::Device;
use std::path::PathBuf;

/// How a run is started.
pub struct TrainOptions {
    /// The whole config (after command-line overrides).
    pub config: RunConfig,
    /// Where the run lives.
    pub run: RunDir,
    /// Continue the run in `run` instead of starting a new one.
    pub resume: bool,
    /// Stop (with a checkpoint) once this step is reached, as if interrupted.
    pub stop_at: Option<usize>,
    /// Draw a progress bar on stderr, and say what the run reads.
    pub progress: bool,
    /// Where the model runs (see [`crate::device::open`]).
    pub device: Device,
    /// The fused kernels, or the composite ops other devices take.
    pub kernels: crate::ops::Kernels,
    /// The trained run a new run starts from (fine-tuning: `config` is [`Parent::config_for`]'s).
    pub parent: Option<Parent>,
    /// When the time of `--minutes` began: the process's start, so that what it did before the
    /// run (the ladder timing its rungs) is spent of the budget; None: the call to [`train`].
    ///
    /// [`train`]: crate::train::train
    pub clock: Option<std::time::Instant>,
}

/// A run ready to train: set up, at its step, its directory locked while this lives.
pub(super) struct OpenRun {
    pub(super) run: RunDir,
    pub(super) s: Setup,
    pub(super) p: Progress,
    lock: RunLock,
    /// The directories that opening it created, and whether it had a lock file before.
    made: Vec<PathBuf>,
    had_lock: bool,
}

impl OpenRun {
    /// Opens the run `opts` asks for: a new one in a directory without a run in it, or the
    /// checkpoint a resume continues, checked against the config asked for (and the steps it
    /// has left); refused before anything is written, and nothing left behind, when it cannot
    /// be trained. What it reads is said once it is open, so that a refusal is one line.
    pub(super) fn open(opts: &TrainOptions) -> Result<Self> {
        if opts.resume && opts.parent.is_some() {
            bail!("--init-from starts a new run: leave it out to resume one (the run keeps the weights it trained)")
        }
        // Checked before the lock too, so that no lock file or directory is left where refused.
        match opts.resume {
            true => opts.run.check_present()?,
            false => {
                opts.run.check_not_in_use("another --out")?;
                opts.run.check_fresh()?
            }
        }
        let (made, had_lock) = (
            crate::files::missing_dirs(&opts.run.path),
            opts.run.file(LOCK_FILE).exists(),
        );
        let locked_before = opts.run.own_lock();
        let lock = opts.run.lock()?;
        match set_up(opts, locked_before) {
            Ok((s, p, notes)) => {
                if opts.progress {
                    notes.iter().for_each(|note| crate::note!("{note}"));
                }
                Ok(OpenRun {
                    run: opts.run.clone(),
                    s,
                    p,
                    lock,
                    made,
                    had_lock,
                })
            }
            Err(e) => {
                drop(lock);
                opts.run.tidy_after_failure(&made, had_lock);
                Err(e)
            }
        }
    }

    /// Releases a run whose training failed, removing what opening it added: the lock file if
    /// there was none, and the directories it made while they are empty.
    pub(super) fn abandon(self) {
        let OpenRun {
            run,
            lock,
            made,
            had_lock,
            ..
        } = self;
        drop(lock);
        run.tidy_after_failure(&made, had_lock);
    }
}

/// The run `opts` asks for, set up in its locked directory (a new run needs one without a run in
/// it, a resume one with a checkpoint; the temporary files of killed processes are cleared where
/// the lock was this program's before: `locked_before`), at its step, with the notes on what it
/// reads and changes.
fn set_up(opts: &TrainOptions, locked_before: bool) -> Result<(Setup, Progress, Vec<String>)> {
    let run = &opts.run;
    match opts.resume {
        true => run.check_resumable()?,
        false => run.check_fresh()?,
    }
    run.remove_temporary_files(locked_before);
    let data = &opts.config.data;
    let run_text = RunText::load(&data.corpus, data.kind, data.others())?;
    let mut notes = corpus_notes(&run_text, &opts.config.data.corpus);
    let tokenizer = tokenizer_for(opts, &run_text)?;
    let cfg = complete_config(opts.config.clone(), &run_text, &tokenizer)?;
    if opts.resume {
        notes.extend(check_resume(run, &cfg)?);
    }
    let devices = (&opts.device, opts.kernels);
    let s = match Setup::new(cfg, &run_text, tokenizer, opts.parent.as_ref(), devices) {
        Err(e) if opts.resume => return Err(vocabulary_kept(e, &run_text)),
        s => s?,
    };
    if let Some(parent) = &opts.parent {
        let (record, vocab_size) = (&parent.record, s.tokenizer.vocab_size());
        notes.push(format!(
            "fine-tuning from {} (weights {}), its {} characters and {} new ones{}",
            record.run,
            record.weights,
            record.vocab_size,
            vocab_size - record.vocab_size,
            holding_new(&run_text, &s.tokenizer, record.vocab_size)
        ));
    }
    let mut s = s;
    let p = match opts.resume {
        true => restore(run, &mut s, &run_text)?,
        false => Progress::new(s.cfg.train.seed),
    };
    check_steps_left(&run.path, p.step, s.cfg.train.max_iters)?;
    Ok((s, p, notes))
}

/// The share of a validation or decay file's characters absent from the corpus above which
/// `train` says so.
const UNSEEN_NOTED: f64 = 0.25;

/// The files whose text holds the characters of `tokenizer` past the parent's `parent_vocab`:
/// `" of data/tiny.txt"`, `" of val.txt (data.validation)"`, or several, each with its count.
fn holding_new(run_text: &RunText, tokenizer: &CharTokenizer, parent_vocab: usize) -> String {
    let new: std::collections::HashSet<char> = tokenizer
        .chars()
        .filter(|&(_, id)| id as usize >= parent_vocab)
        .map(|(c, _)| c)
        .collect();
    let mut texts = vec![(run_text.corpus.path.clone(), run_text.corpus.text())];
    if let Some(held_out) = &run_text.held_out {
        texts.push((
            format!("{} (data.validation)", held_out.path),
            held_out.whole.clone(),
        ));
    }
    if let Some(decay) = &run_text.decay {
        texts.push((
            format!("{} (data.decay_corpus)", decay.path),
            decay.text.clone(),
        ));
    }
    let counts: Vec<(String, usize)> = texts
        .into_iter()
        .map(|(name, text)| {
            let held: std::collections::HashSet<char> =
                text.chars().filter(|c| new.contains(c)).collect();
            (name, held.len())
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    match counts.as_slice() {
        [] => String::new(),
        [(name, _)] => format!(" of {name}"),
        _ => {
            let each: Vec<String> = counts
                .iter()
                .map(|(name, n)| format!("{n} in {name}"))
                .collect();
            format!(" ({})", each.join(", "))
        }
    }
}

/// What is said of a corpus read: which kind it is read as, and why, how many of its lines were
/// left out, and where a validation or decay file is mostly in characters the corpus lacks.
fn corpus_notes(run_text: &RunText, path: &str) -> Vec<String> {
    let mut notes = vec![run_text.describe(path)];
    let trained = run_text.corpus.text();
    let others = [
        (
            "data.validation",
            run_text.held_out.as_ref().map(|h| (&h.path, &h.text)),
        ),
        (
            "data.decay_corpus",
            run_text.decay.as_ref().map(|d| (&d.path, &d.text)),
        ),
    ];
    for (key, other) in others {
        let Some((file, text)) = other else { continue };
        let unseen = crate::data::unseen_share(text, &trained);
        if unseen > UNSEEN_NOTED {
            notes.push(format!(
                "note: {:.0} % of the characters of {file} ({key}) never occur in {path}: the model cannot learn \
                 them from it, so its loss on them says little",
                100.0 * unseen
            ));
        }
    }
    if run_text.corpus.skipped > 0 {
        notes.push(format!(
            "note: {} of {} lines of {path} are not regular verse (4 or 8 lines of 5 or 7 characters, each ended by ，。？！；) and were left out; to keep every line, train with --corpus-kind lines",
            run_text.corpus.skipped,
            run_text.corpus.skipped + run_text.corpus.items.len(),
        ));
    }
    notes
}

/// The vocabulary: the run's saved tokenizer when resuming, else one built from the corpus (the
/// parent's extended by it, when fine-tuning).
fn tokenizer_for(opts: &TrainOptions, run_text: &RunText) -> Result<CharTokenizer> {
    match (opts.resume, &opts.parent) {
        (true, _) => Ok(CharTokenizer::load(&opts.run.file(TOKENIZER_FILE))?),
        (false, Some(parent)) => parent.tokenizer_for(&run_text.vocabulary_text()),
        (false, None) => new_vocabulary(&run_text.vocabulary_text(), &opts.config.model),
    }
}

/// A resume's set-up error `e` said as what it is where the corpus holds characters the run's
/// vocabulary lacks: a run keeps the vocabulary it started with.
fn vocabulary_kept(e: anyhow::Error, run_text: &RunText) -> anyhow::Error {
    let Some(DataError::UnknownChars(chars)) = e.downcast_ref::<DataError>() else {
        return e;
    };
    // The file that holds them: the corpus, or a validation or decay file read with it.
    let texts = [
        (run_text.corpus.path.clone(), run_text.corpus.text()),
        run_text
            .held_out
            .as_ref()
            .map_or_else(Default::default, |h| {
                (format!("{} (data.validation)", h.path), h.whole.clone())
            }),
        run_text.decay.as_ref().map_or_else(Default::default, |d| {
            (format!("{} (data.decay_corpus)", d.path), d.text.clone())
        }),
    ];
    let file = texts
        .iter()
        .find(|(_, text)| text.chars().any(|c| chars.contains(&c)))
        .map_or(run_text.corpus.path.clone(), |(name, _)| name.clone());
    anyhow::anyhow!(
        "{file} has {} characters that the run's vocabulary lacks (such as {}): a run keeps the vocabulary of the text it started on, so resume with that file as it was, or start a new run with --out",
        chars.len(),
        chars.iter().take(3).map(|&c| describe_char(c)).collect::<Vec<_>>().join(" ")
    )
}
