//! Sample poems from a trained run: `cargo run --release --bin sample -- --checkpoint DIR --prompt 白日`.

use anyhow::{bail, Context, Result};
use clap::Parser;
use rand::SeedableRng;
use shige::config::CorpusKind;
use shige::data::header::Poets;
use shige::data::poem::Form;
use shige::data::tokenizer::NEWLINE;
use shige::ops::WeightFormat;
use shige::sample::{
    check_trained_on_verse, ci_start, default_max_new_tokens, header_request, is_well_formed,
    poem_start, Generation, Generator, PoemStart, Sampling, MAX_POEM_CHARS,
};
use shige::train::load::load_run_on;
use shige::verse::ci_score::{score_ci, CiSummary};
use shige::verse::{score_poem, Summary, Tables, Tunes};
use shige::{note, out, outln};
use std::path::PathBuf;

/// The most tokens one sample may ask for.
const MAX_NEW_TOKENS_LIMIT: usize = 100_000;

/// Write poems with a trained model, streaming characters as they are drawn.
#[derive(Parser)]
#[command(
    allow_negative_numbers = true,
    after_help = "Examples:
  cargo run --release --bin sample -- --checkpoint checkpoints/<run> --prompt 白日
  cargo run --release --bin sample -- --checkpoint checkpoints/<run> --form qijue --acrostic 春夏秋冬
  cargo run --release --bin sample -- --checkpoint checkpoints/<ci run> --tune 水调歌头
  cargo run --release --bin sample -- --checkpoint checkpoints/<ci run> --tune 水调歌头 --tune-form 3 --meter
  cargo run --release --bin sample -- --checkpoint checkpoints/<titled run> --poet 李白 --title 秋夜"
)]
struct Args {
    /// Run directory written by `train`.
    #[arg(long)]
    checkpoint: PathBuf,
    /// Beginning of the poem (empty: a new poem).
    #[arg(long, default_value = "")]
    prompt: String,
    /// Number of poems.
    #[arg(long, default_value_t = 3)]
    num_samples: usize,
    /// Most characters generated per poem [default: 120; with --tune, enough for the tune's form].
    #[arg(long)]
    max_new_tokens: Option<usize>,
    /// Sampling temperature (0 = always the most likely character).
    #[arg(long, default_value_t = 0.8)]
    temperature: f64,
    /// Draw only from the k most likely characters.
    #[arg(long)]
    top_k: Option<usize>,
    /// Draw only from the most likely characters whose probabilities sum to p, in (0, 1].
    #[arg(long)]
    top_p: Option<f64>,
    /// Seed: the same seed gives the same text.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Keep going past the end of a poem or line (by default a newline ends it, except for runs
    /// trained on running text).
    #[arg(long)]
    no_stop_at_newline: bool,
    /// Stop at the first newline for a run trained on running text too.
    #[arg(long, conflicts_with = "no_stop_at_newline")]
    stop_at_newline: bool,
    /// Write every poem in this exact form: wujue, qijue (4 lines of 5 or 7 characters),
    /// wulv, qilv (8 lines of 5 or 7).
    #[arg(long)]
    form: Option<Form>,
    /// Begin the lines with these characters, one per line (藏头诗), e.g. 春夏秋冬. Without
    /// --form, up to 4 characters make a qijue and up to 8 a qilv.
    #[arg(long)]
    acrostic: Option<String>,
    /// Keep the tones (平仄) and rhyme (平水韵) of the form's templates of regulated verse (needs
    /// --form or --acrostic); with --tune, the tune's tones and rhymes (词林正韵) as the 词谱 with
    /// tones has them (data/cipu_tones.tsv).
    #[arg(long)]
    meter: bool,
    /// Write a Song ci to this tune (词牌, e.g. 水调歌头), its sentences' lengths and marks
    /// kept as the tune's pattern in data/cipu.tsv has them (needs a run trained on data/ci.txt).
    #[arg(long, conflicts_with_all = ["form", "acrostic", "poet", "title"])]
    tune: Option<String>,
    /// With --tune, the tune's form (又一体): 1, the commonest (the default), 2, 3 … its others
    /// in data/cipu.tsv (5th column), or the form's pattern, each sentence's length and mark (e.g.
    /// 7。7。7。7，7。7。). With --meter, a form whose tones were learned (20 ci of it:
    /// data/cipu_tones.tsv).
    #[arg(long, requires = "tune")]
    tune_form: Option<String>,
    /// Write the poem as by this poet: the header 【poet·…】 before it (needs a run trained on
    /// data/titled.txt, e.g. with configs/titled.toml); without --title the model writes the title.
    #[arg(long)]
    poet: Option<String>,
    /// Write a poem with this title: the header 【…·title】 before it; without --poet the model
    /// writes the poet.
    #[arg(long)]
    title: Option<String>,
    /// Recompute the whole context for every character instead of using the key/value cache.
    #[arg(long)]
    no_cache: bool,
    /// With the cache, read the weight matrices in f32: exactly the model's products. By default
    /// they are rounded once to f16 where the CPU converts it in hardware (F16C): about 1.5× the
    /// speed, each logit within about 10⁻³ of its scale.
    #[arg(long, conflicts_with = "no_cache")]
    f32_weights: bool,
    /// One JSON object per line per sample, instead of plain text.
    #[arg(long)]
    json: bool,
    /// Device: cpu, cuda, cuda:N or metal (GPUs need a build with `--features cuda` or `metal`).
    #[arg(long, default_value = "cpu")]
    device: String,
}

fn main() -> std::process::ExitCode {
    shige::cli::report(run())
}

fn run() -> Result<()> {
    shige::perf::init();
    let args: Args = shige::cli::parse();
    shige::cli::stdout_is_the_product("the poems")?;
    let sampling = checked_request(&args)?;
    let tune = args.tune.as_deref();
    let tune = tune.map(|name| (name, args.tune_form.as_deref().unwrap_or("")));
    let max_new_tokens = args
        .max_new_tokens
        .unwrap_or_else(|| default_max_new_tokens(tune));
    let device = shige::device::open(&args.device)?;
    let run = load_run_on(&args.checkpoint, &device)?;
    let kind = run.config.data.trained_kind();
    if args.form.is_some() || args.acrostic.is_some() || (args.meter && args.tune.is_none()) {
        check_trained_on_verse(
            &run.config.data,
            "--form, --acrostic and --meter write regulated verse",
        )
        .map_err(anyhow::Error::msg)?;
    }
    let stops = match kind {
        CorpusKind::Text => args.stop_at_newline,
        _ => !args.no_stop_at_newline,
    };
    let start = match &args.tune {
        Some(name) => ci_start(
            (&run.tokenizer, &run.config.data),
            (name, args.tune_form.as_deref().unwrap_or(""), args.meter),
            &args.prompt,
            max_new_tokens,
        )
        .context("cannot start the ci")?,
        None => {
            let rules = (
                args.form,
                args.acrostic.as_deref().unwrap_or(""),
                args.meter,
            );
            let asked = (args.poet.clone(), args.title.clone());
            let poets = args
                .poet
                .as_ref()
                .and_then(|_| Poets::of_corpus_file(run.config.data.corpus.as_ref()));
            let header = header_request(&run.tokenizer, &run.config.data, asked, poets.as_ref())?;
            poem_start(&run.tokenizer, &header, &args.prompt, rules, max_new_tokens)
                .context("cannot start the poem")?
        }
    };
    let gen = Generation {
        use_cache: !args.no_cache,
        ..Generation::new(max_new_tokens, sampling, stops.then_some(start.opening[0]))
    };
    let poems = write_poems(&args, &run, &start, &gen)?;
    if !args.json && args.num_samples > 1 && args.tune.is_some() {
        let scores: Vec<_> = poems
            .iter()
            .filter_map(|p| score_ci(p, Tunes::shipped()))
            .collect();
        note!("{}", CiSummary::of(&scores).describe());
    }
    if !args.json && args.num_samples > 1 && kind == CorpusKind::Verse {
        let well_formed = poems.iter().filter(|p| is_well_formed(p)).count();
        note!("well-formed verse: {well_formed} of {}", args.num_samples);
        let (summary, _) = Summary::of(&poems, Tables::shipped(), None);
        note!("regulated verse: {}", summary.describe());
    }
    Ok(())
}

/// The sampling rule of `args`, once the flags that need no model are checked.
fn checked_request(args: &Args) -> Result<Sampling> {
    let sampling = Sampling {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
    };
    sampling.validate()?;
    if args.num_samples == 0 {
        bail!("--num-samples 0 would write no poem: give 1 or more");
    }
    if let Some(n) = args
        .max_new_tokens
        .filter(|n| !(1..=MAX_NEW_TOKENS_LIMIT).contains(n))
    {
        bail!(
            "--max-new-tokens {n} must be 1 to {MAX_NEW_TOKENS_LIMIT}: a regular poem is under 100 characters, \
             a ci under 250; use --num-samples for more poems"
        );
    }
    match (&args.tune_form, &args.tune) {
        (Some(_), None) => bail!(
            "--tune-form chooses a form of the tune --tune names: give --tune too, or leave --tune-form out"
        ),
        (Some(form), Some(_)) if form.trim().is_empty() => bail!(
            "--tune-form is empty: give a form's number (1 is the commonest) or its pattern, or leave it out"
        ),
        _ => {}
    }
    if args.acrostic.as_deref() == Some("") {
        bail!("--acrostic is empty: give the characters that begin the lines, e.g. 春夏秋冬, or leave it out");
    }
    let prompt_chars = args.prompt.chars().count();
    if prompt_chars > MAX_POEM_CHARS {
        bail!(
            "the prompt has {prompt_chars} characters, more than {MAX_POEM_CHARS}: give the beginning of one poem \
             (a few characters, e.g. 白日)"
        );
    }
    Ok(sampling)
}

/// Draws `--num-samples` poems from `start`, printing each character as it is drawn, or one JSON
/// object per poem; returns the poems' texts (their headers included).
fn write_poems(
    args: &Args,
    run: &shige::train::load::LoadedRun,
    start: &PoemStart,
    gen: &Generation,
) -> Result<Vec<String>> {
    let tokenizer = &run.tokenizer;
    let format = match args.f32_weights {
        true => WeightFormat::F32,
        false => WeightFormat::fastest(),
    };
    let mut generator = Generator::with_weights(&run.model, format); // packs once for all samples
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(args.seed);
    let mut poems = Vec::new();
    let opening = start.opening_text(tokenizer)?;
    for _ in 0..args.num_samples {
        if !args.json {
            out!("{opening}")?;
        }
        // A character that cannot be written (a full disk) stops the poems with its error.
        let mut failed = None;
        let mut stream = |id: u32| {
            if !args.json && Some(id) != gen.stop && failed.is_none() {
                if let Ok(text) = tokenizer.decode(&[id]) {
                    failed = out!("{text}").err();
                }
            }
        };
        let ids = generator.write(start, gen, &mut rng, &mut stream)?;
        if let Some(err) = failed {
            return Err(err);
        }
        let new = tokenizer.decode(&ids)?;
        let text = format!("{opening}{}", new.trim_end_matches(NEWLINE));
        if let (true, Some(score)) = (args.json, score_ci(&text, Tunes::shipped())) {
            outln!("{}", serde_json::json!({ "text": text, "ci": score }))?;
        } else if args.json && run.config.data.trained_kind() != CorpusKind::Verse {
            outln!("{}", serde_json::json!({ "text": text }))?;
        } else if args.json {
            let (ok, verse) = (is_well_formed(&text), score_poem(&text, Tables::shipped()));
            let line = serde_json::json!({ "text": text, "well_formed": ok, "verse": verse });
            outln!("{line}")?;
        } else {
            outln!()?;
        }
        poems.push(text);
    }
    Ok(poems)
}
