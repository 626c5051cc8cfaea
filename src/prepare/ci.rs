//! The Song ci of the `chinese-poetry` package (`dist/songci/ci.song.*.json`), built into
//! data/ci.txt, and the 词谱 learned from them (data/cipu.tsv), with their part of data/README.md.

use super::package::read_numbered_files;
use crate::data::poem::is_cjk_ideograph;
use crate::verse::tunes::{TunePattern, Tunes, CI_MARKS, TUNE_LOST};
use anyhow::{bail, Result};
use serde::Deserialize;
use std::collections::HashSet;
use std::path::Path;

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
    let in_forms: usize = tunes
        .all()
        .iter()
        .flat_map(|t| t.forms())
        .map(|f| f.2)
        .sum();
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
         that ends it: ，、。), then its other forms (又一体) that at least a tenth of its ci (and 5) take,\n\
         each `pattern×ci`. `sample --tune` writes a ci in the commonest pattern, `--tune-form N` in\n\
         another; {fitting} of the {kept} ci ({share:.0} %) have their tune's commonest pattern, {in_forms}\n\
         ({form_share:.0} %) one of its forms (the package's punctuation varies too). The 20 most common\n\
         tunes:\n\n\
         | tune | ci | of the pattern | pattern |\n|---|---|---|---|\n{top}",
        unclean = stats.unclean,
        lost = stats.tune_lost,
        dup = stats.duplicates,
        read = stats.read,
        chars = stats.characters,
        n = tunes.all().len(),
        share = 100.0 * fitting as f64 / kept.max(1) as f64,
        form_share = 100.0 * in_forms as f64 / kept.max(1) as f64,
    )
}
