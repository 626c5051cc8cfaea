//! Rebuilds `data/` from the chinese-poetry package: `poems.txt`, `tiny.txt` and `README.md`.

use anyhow::{Context, Result};
use clap::Parser;
use ferrous_opencc::{config::BuiltinConfig, OpenCC};
use shige::data::poem::Form;
use shige::data::prepare::{build_corpus, data_readme, tiny_subset, unigram_entropy};
use std::path::PathBuf;

/// Build the poetry corpus from the `chinese-poetry` npm package (version 2.0.1).
#[derive(Parser)]
#[command(
    after_help = "Example:\n  npm pack chinese-poetry@2.0.1 && tar xzf chinese-poetry-2.0.1.tgz\n  \
cargo run --release --features prepare --bin prepare_data -- --source package/dist/quantangshi"
)]
struct Args {
    /// The package's `dist/quantangshi` folder.
    #[arg(long)]
    source: PathBuf,
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
    let (poems, stats) = build_corpus(&args.source, &args.forms, |t| opencc.convert(t))?;
    anyhow::ensure!(
        !poems.is_empty(),
        "no poem of the chosen forms in {}",
        args.source.display()
    );
    let tiny = tiny_subset(&poems);
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    let write = |name: &str, text: String| {
        let path = args.out.join(name);
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))
    };
    write(
        "poems.txt",
        poems.iter().map(|p| format!("{p}\n")).collect(),
    )?;
    write("tiny.txt", tiny.iter().map(|p| format!("{p}\n")).collect())?;
    let forms: Vec<&str> = args.forms.iter().map(|f| f.name()).collect();
    let command = format!(
        "cargo run --release --features prepare --bin prepare_data -- --source package/dist/quantangshi --forms {}",
        forms.join(",")
    );
    write(
        "README.md",
        data_readme(&stats, unigram_entropy(&poems), tiny.len(), &command),
    )?;
    println!(
        "{} poems ({} characters, {} distinct) written to {}; {} read, {} not regular verse, {} duplicates",
        poems.len(),
        stats.characters,
        stats.distinct,
        args.out.display(),
        stats.read,
        stats.irregular,
        stats.duplicates
    );
    Ok(())
}
