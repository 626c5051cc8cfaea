//! Score poems as regulated verse: `cargo run --release --bin score -- FILE` (one poem per line), or
//! `--val` for the held-out real poems of the corpus; a Song ci (a line `【tune】text`) is scored
//! by the form of its tune it has, and that form's tones and rhymes.

use anyhow::{bail, Context, Result};
use clap::Parser;
use serde::Serialize;
use shige::config::CorpusKind;
use shige::data::corpus::text_lines;
use shige::data::error::{describe_char, printable};
use shige::data::Corpus;
use shige::experiments::header_worth::{header_information, poem_nll, HeaderInformation};
use shige::files::{read_stdin_text_limited, read_text_limited, POEMS_LIMIT};
use shige::outln;
use shige::sample::MAX_POEM_CHARS;
use shige::train::load::{load_run, LoadedRun};
use shige::verse::ci_score::{score_ci, CiScore, CiSummary};
use shige::verse::tunes::split_tune;
use shige::verse::{Novelty, Summary, Tables, Tunes, VerseScore};
use std::path::{Path, PathBuf};

/// Score poems as regulated verse: form, best tonal template (平仄), the share of tones that fit,
/// rhyme (平水韵), and how much is copied from the training poems. A line `【tune】text` is a
/// Song ci: which of its tune's forms it has (the commonest pattern, or a 又一体: data/cipu.tsv),
/// and where that form's tones and rhymes were learned (data/cipu_tones.tsv), the share of its sure
/// tones it keeps and whether each rhyme segment rhymes in one 部 (词林正韵).
#[derive(Parser)]
#[command(
    allow_negative_numbers = true,
    after_help = "Examples:
  cargo run --release --bin score -- --val
  cargo run --release --bin score -- --val --corpus data/ci.txt
  cargo run --release --bin sample -- --checkpoint checkpoints/<run> --num-samples 100 > poems.txt
  cargo run --release --bin score -- poems.txt
  cargo run --release --bin sample -- --checkpoint checkpoints/<run> --num-samples 20 | cargo run --release --bin score -- -"
)]
struct Args {
    /// Poems to score, one per line (blank lines and lines starting with # are skipped), or the
    /// lines of `sample --json`; - reads them from standard input.
    file: Option<PathBuf>,
    /// Score the corpus's held-out poems (every 20th) instead: the human baseline.
    #[arg(long)]
    val: bool,
    /// The corpus whose training split novelty is measured against.
    #[arg(long, default_value = "data/poems.txt")]
    corpus: PathBuf,
    /// A run directory written by `train`: also give each poem's likelihood under that model
    /// (mean negative log-likelihood per character, the poem's ending newline included; a
    /// header 【poet·title】 is read, not counted).
    #[arg(long)]
    checkpoint: Option<PathBuf>,
    /// With --checkpoint, on poems with headers 【poet·title】: what the model learned from them,
    /// each poem's likelihood under its own header against another poem's (the one half the list
    /// away) and its own poet with that poem's title; over all and for the 10 most frequent poets.
    #[arg(long, requires = "checkpoint")]
    headers: bool,
    /// Print one JSON object (the summary and every poem's score).
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Report<'a> {
    summary: &'a Summary,
    /// The mean over poems of their mean negative log-likelihood per character, with --checkpoint.
    mean_nll: Option<f64>,
    /// What the model learned from the poems' headers, with --headers.
    #[serde(skip_serializing_if = "Option::is_none")]
    headers: Option<HeaderInformation>,
    poems: Vec<PoemReport<'a>>,
    /// The ci's summary and each ci's score, if there were ci.
    #[serde(skip_serializing_if = "Option::is_none")]
    ci_summary: Option<CiSummary>,
    /// The mean over ci of their mean negative log-likelihood per character, with --checkpoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    ci_mean_nll: Option<f64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    ci: Vec<CiReport<'a>>,
}

#[derive(Serialize)]
struct CiReport<'a> {
    ci: &'a str,
    #[serde(flatten)]
    score: &'a CiScore,
    nll: Option<f64>,
}

#[derive(Serialize)]
struct PoemReport<'a> {
    poem: &'a str,
    #[serde(flatten)]
    score: &'a VerseScore,
    nll: Option<f64>,
}

/// Each poem's mean negative log-likelihood per character under `run` (its header not counted).
fn likelihoods(run: &LoadedRun, poems: &[String]) -> Result<Vec<f64>> {
    poems
        .iter()
        .enumerate()
        .map(|(i, poem)| {
            let length = poem.chars().count();
            if length > MAX_POEM_CHARS {
                bail!("poem {} has {length} characters: a likelihood is computed for poems of at most {MAX_POEM_CHARS} (one poem per line)", i + 1);
            }
            poem_nll(&run.model, &run.tokenizer, poem)
                .with_context(|| format!("poem {} cannot be scored by this model", i + 1))
        })
        .collect()
}

/// The run in `dir`, to weigh poems or ci with: one trained on poems or ci, one per line.
fn weighing_run(dir: &Path) -> Result<LoadedRun> {
    let run = load_run(dir)?;
    if run.config.data.trained_kind() == CorpusKind::Text {
        bail!(
            "score weighs poems by the likelihood of a run trained on poems or ci, one per line: {} was trained on running text ({}), not regular verse or ci",
            dir.display(),
            run.config.data.corpus
        );
    }
    Ok(run)
}

/// Refuses `--val` on a corpus whose every poem `run` trained on: one measured on another
/// file's held-out poems (`[data] validation`) holds none of its own corpus out.
fn check_held_out(run: &LoadedRun, corpus: &Path) -> Result<()> {
    let data = &run.config.data;
    let same = |a: &Path, b: &Path| {
        a == b || matches!((a.canonicalize(), b.canonicalize()), (Ok(a), Ok(b)) if a == b)
    };
    match &data.validation {
        Some(validation) if same(Path::new(&data.corpus), corpus) => bail!(
            "the run trained on every poem of {} and is measured on the held-out poems of {validation}: give --corpus {validation}",
            data.corpus
        ),
        _ => Ok(()),
    }
}

/// The text of `file`, or of standard input for `-`.
fn read_poems(file: &Path) -> Result<String> {
    let text = match file == Path::new("-") {
        true => read_stdin_text_limited(POEMS_LIMIT),
        false => read_text_limited(file, POEMS_LIMIT),
    };
    text.map_err(|e| {
        anyhow::anyhow!(
            "cannot read the poems in {}: {e}; give a UTF-8 file of poems, one a line (or - for standard input)",
            source_name(file)
        )
    })
}

/// How messages name `file`.
fn source_name(file: &Path) -> String {
    match file == Path::new("-") {
        true => "standard input".into(),
        false => file.display().to_string(),
    }
}

/// The poem of one line: the line itself, or the `text` of a line that `sample --json` printed;
/// text only (no control character, such as NUL).
fn poem_of_line(line: &str) -> Result<String> {
    let poem = match line.starts_with('{') {
        false => line.to_string(),
        true => serde_json::from_str::<serde_json::Value>(line)
            .ok()
            .and_then(|v| v.get("text")?.as_str().map(String::from))
            .context("it looks like JSON but is not a line of `sample --json` (no \"text\"): give one poem per line")?,
    };
    if let Some(c) = poem.chars().find(|c| c.is_control()) {
        bail!(
            "it holds the control character {}: give poems as text, one per line",
            describe_char(c)
        );
    }
    Ok(poem)
}

fn main() -> std::process::ExitCode {
    shige::cli::report(run())
}

fn run() -> Result<()> {
    let args: Args = shige::cli::parse();
    shige::cli::stdout_is_the_product("the scores")?;
    let corpus = Corpus::load(&args.corpus, CorpusKind::Auto).with_context(|| {
        format!(
            "novelty is measured against the training split of {} (--corpus chooses another)",
            args.corpus.display()
        )
    })?;
    if corpus.kind == CorpusKind::Text {
        bail!(
            "{} is running text, not poems one per line: give --corpus a corpus of poems or ci (data/poems.txt, data/ci.txt)",
            args.corpus.display()
        );
    }
    let (train, val) = corpus.split();
    let lines = poems_to_score(&args, train.len(), val)?;
    let (ci_lines, poems): (Vec<String>, Vec<String>) =
        lines.into_iter().partition(|l| split_tune(l).is_some());
    let ci: Vec<CiScore> = ci_lines
        .iter()
        .filter_map(|l| score_ci(l, Tunes::shipped()))
        .collect();
    let ci_summary = (!ci.is_empty()).then(|| CiSummary::of(&ci));
    let novelty = Novelty::new(train);
    let (summary, scores) = Summary::of(&poems, Tables::shipped(), Some(&novelty));
    let run = args.checkpoint.as_deref().map(weighing_run).transpose()?;
    if let (Some(run), true) = (&run, args.val) {
        check_held_out(run, &args.corpus)?;
    }
    let nll = run
        .as_ref()
        .map(|run| likelihoods(run, &poems))
        .transpose()?;
    let headers = match (&run, args.headers) {
        (Some(run), true) => Some(header_information(&run.model, &run.tokenizer, &poems)?),
        _ => None,
    };
    let ci_nll = run
        .as_ref()
        .map(|run| likelihoods(run, &ci_lines))
        .transpose()?;
    let mean = |n: &Option<Vec<f64>>| {
        n.as_ref()
            .filter(|n| !n.is_empty())
            .map(|n| n.iter().sum::<f64>() / n.len() as f64)
    };
    let (mean_nll, ci_mean_nll) = (mean(&nll), mean(&ci_nll));
    let report = Report {
        summary: &summary,
        mean_nll,
        headers,
        poems: poems
            .iter()
            .zip(&scores)
            .enumerate()
            .map(|(i, (poem, score))| PoemReport {
                poem,
                score,
                nll: nll.as_ref().map(|n| n[i]),
            })
            .collect(),
        ci_summary,
        ci_mean_nll,
        ci: ci_lines
            .iter()
            .zip(&ci)
            .enumerate()
            .map(|(i, (ci, score))| CiReport {
                ci,
                score,
                nll: ci_nll.as_ref().map(|n| n[i]),
            })
            .collect(),
    };
    match args.json {
        true => outln!("{}", serde_json::to_string(&report)?).map_err(Into::into),
        false => print_text(&report),
    }
}

/// The report as text: each poem and ci with its score, then the summaries.
fn print_text(report: &Report) -> Result<()> {
    for poem in &report.poems {
        outln!("{}\n  {}", printable(poem.poem), describe(poem.score))?;
    }
    for ci in &report.ci {
        outln!("{}\n  {}", printable(ci.ci), CiScore::describe(ci.score))?;
    }
    if !report.poems.is_empty() {
        outln!("{}", report.summary.describe())?;
    }
    if let Some(ci) = &report.ci_summary {
        outln!("{}", ci.describe())?;
    }
    if let Some(mean) = report.mean_nll {
        outln!("mean negative log-likelihood under the model: {mean:.3} nats per character")?;
    }
    if let Some(mean) = report.ci_mean_nll {
        outln!("mean negative log-likelihood of the ci under the model: {mean:.3} nats per character (their tune's header given)")?;
    }
    if let Some(info) = &report.headers {
        outln!("what the headers tell the model (mean negative log-likelihood per character of the poems):")?;
        outln!("  all: {}", info.all.describe())?;
        for (poet, means) in &info.poets {
            outln!("  {poet}: {}", means.describe())?;
        }
    }
    Ok(())
}

/// The poems that `args` asks to score: the lines of its FILE, or the corpus's held-out poems
/// (`val`; the corpus has `trained` others). At least one, or an error that says why not.
fn poems_to_score(args: &Args, trained: usize, val: Vec<&String>) -> Result<Vec<String>> {
    let poems: Vec<String> = match (&args.file, args.val) {
        (Some(_), true) => bail!("give a FILE or --val, not both"),
        (None, false) => bail!("nothing to score: give a FILE of poems (one per line) or --val"),
        (None, true) => val.into_iter().cloned().collect(),
        (Some(file), false) => text_lines(&read_poems(file)?)
            .map(str::trim)
            .enumerate()
            .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
            .map(|(i, l)| {
                poem_of_line(l).with_context(|| format!("line {} of {}", i + 1, source_name(file)))
            })
            .collect::<Result<_>>()?,
    };
    if !poems.is_empty() {
        return Ok(poems);
    }
    match &args.file {
        Some(file) => bail!(
            "no poem to score: {} has no line that is neither blank nor a # comment",
            source_name(file)
        ),
        None => bail!(
            "no poem to score: {} has {trained} poem{}, too few to hold any out (every 20th is): score a FILE of poems instead",
            args.corpus.display(),
            if trained == 1 { "" } else { "s" }
        ),
    }
}

/// One poem's score in a line: its form and template with the tones that fit, and its rhyme.
fn describe(s: &VerseScore) -> String {
    let (Some(form), Some(template)) = (s.form, &s.template) else {
        return "not of a regular form".into();
    };
    let unknown = match s.tones_unknown {
        0 => String::new(),
        n => format!(" ({n} unknown)"),
    };
    let rhyme = match &s.rhyme_group {
        Some(group) => format!("rhymes in {group}"),
        None if s.rhyme_unknown => {
            "rhyme unknown (a rhyme character is not in the rhyme table)".into()
        }
        None => "does not rhyme".into(),
    };
    format!(
        "{form}, {template}: {}/{} tones fit{unknown}, {rhyme}",
        s.tones_fitting, s.tones_checked
    )
}
